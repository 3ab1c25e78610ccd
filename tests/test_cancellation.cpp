// CancellationManager: each callback runs once with the first cancel's status, registration
// after a cancel is refused (token 0), removal before a cancel keeps a callback from running,
// and concurrent cancels and registrations lose or repeat nothing.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "psflow/runtime/cancellation.hpp"

using namespace psflow;

TEST_CASE("cancel runs every registered callback once, with the first cancel's status") {
  CancellationManager manager;
  std::vector<Status> seen_a, seen_b;
  const auto a = manager.add([&](const Status& s) { seen_a.push_back(s); });
  const auto b = manager.add([&](const Status& s) { seen_b.push_back(s); });
  CHECK(a != 0);
  CHECK(b != 0);
  CHECK(a != b);
  CHECK(manager.status().ok());

  manager.cancel(Status(ErrorCode::unavailable, "peer gone"));
  manager.cancel(Status(ErrorCode::internal, "second cancel"));  // ignored: the first wins

  REQUIRE(seen_a.size() == 1);
  REQUIRE(seen_b.size() == 1);
  CHECK(seen_a[0].code() == ErrorCode::unavailable);
  CHECK(seen_a[0].message() == "peer gone");
  CHECK(seen_b[0].code() == ErrorCode::unavailable);
  CHECK(manager.status().code() == ErrorCode::unavailable);
  CHECK(manager.status().message() == "peer gone");
  CHECK_FALSE(manager.remove(a));  // already ran
}

TEST_CASE("cancel with an OK status still cancels, as Aborted") {
  CancellationManager manager;
  Status seen;
  manager.add([&](const Status& s) { seen = s; });
  manager.cancel(Status{});
  CHECK(seen.code() == ErrorCode::aborted);
  CHECK(manager.status().code() == ErrorCode::aborted);
}

TEST_CASE("registering after a cancel returns token 0 and never runs the callback") {
  CancellationManager manager;
  manager.cancel(Status(ErrorCode::deadline_exceeded, "too late"));
  int calls = 0;
  CHECK(manager.add([&](const Status&) { ++calls; }) == 0);
  manager.cancel(Status(ErrorCode::aborted, "again"));
  CHECK(calls == 0);
  CHECK(manager.status().code() == ErrorCode::deadline_exceeded);  // what the caller fails with
}

TEST_CASE("a callback removed before the cancel does not run, the others do") {
  CancellationManager manager;
  int removed_calls = 0, kept_calls = 0;
  const auto removed = manager.add([&](const Status&) { ++removed_calls; });
  manager.add([&](const Status&) { ++kept_calls; });
  CHECK(manager.remove(removed));
  CHECK_FALSE(manager.remove(removed));  // only once
  CHECK_FALSE(manager.remove(12345));    // never issued
  manager.cancel(Status(ErrorCode::aborted, "stop"));
  CHECK(removed_calls == 0);
  CHECK(kept_calls == 1);
}

TEST_CASE("callbacks run outside the manager's lock: they may call back into it") {
  CancellationManager manager;
  Status inside;
  std::uint64_t token_inside = 99;
  bool removed_inside = true;
  const auto self = manager.add([&](const Status&) {
    inside = manager.status();                         // would deadlock under the lock
    token_inside = manager.add([](const Status&) {});  // refused: already cancelled
    removed_inside = manager.remove(1);                // its own token, already taken out
  });
  CHECK(self == 1);
  manager.cancel(Status(ErrorCode::aborted, "reentrant"));
  CHECK(inside.code() == ErrorCode::aborted);
  CHECK(token_inside == 0);
  CHECK_FALSE(removed_inside);
}

TEST_CASE("concurrent cancels run each callback exactly once") {
  constexpr int kCallbacks = 200;
  constexpr int kCancellers = 4;
  for (int round = 0; round < 20; ++round) {
    CancellationManager manager;
    auto counts = std::make_unique<std::atomic<int>[]>(kCallbacks);
    for (int i = 0; i < kCallbacks; ++i) {
      counts[i].store(0);
      manager.add([&counts, i](const Status&) { counts[i].fetch_add(1); });
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < kCancellers; ++t)
      threads.emplace_back([&manager, t] {
        manager.cancel(Status(ErrorCode::aborted, "canceller " + std::to_string(t)));
      });
    for (auto& t : threads) t.join();
    int wrong = 0;
    for (int i = 0; i < kCallbacks; ++i) wrong += counts[i].load() != 1;
    CHECK(wrong == 0);
    CHECK(manager.status().code() == ErrorCode::aborted);
  }
}

TEST_CASE("registrations racing a cancel either run once or are refused, never lost") {
  constexpr int kPerThread = 300;
  for (int round = 0; round < 10; ++round) {
    CancellationManager manager;
    struct Record {
      std::uint64_t token = 0;
      std::atomic<int> calls{0};
    };
    std::vector<std::unique_ptr<Record>> records;
    for (int i = 0; i < 2 * kPerThread; ++i) records.push_back(std::make_unique<Record>());
    std::atomic<bool> go{false};
    auto registrar = [&](int first) {
      while (!go.load()) std::this_thread::yield();
      for (int i = first; i < first + kPerThread; ++i) {
        Record* r = records[static_cast<std::size_t>(i)].get();
        r->token = manager.add([r](const Status&) { r->calls.fetch_add(1); });
      }
    };
    std::thread one(registrar, 0), two(registrar, kPerThread);
    std::thread canceller([&] {
      while (!go.load()) std::this_thread::yield();
      manager.cancel(Status(ErrorCode::aborted, "race"));
    });
    go.store(true);
    one.join();
    two.join();
    canceller.join();
    int lost = 0, repeated = 0, ran_after_refusal = 0;
    for (const auto& r : records) {
      if (r->token == 0)
        ran_after_refusal += r->calls.load() != 0;
      else if (r->calls.load() == 0)
        ++lost;
      else
        repeated += r->calls.load() > 1;
    }
    CHECK(lost == 0);
    CHECK(repeated == 0);
    CHECK(ran_after_refusal == 0);
  }
}
