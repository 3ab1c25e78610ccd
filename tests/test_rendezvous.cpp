// LocalRendezvous: a Send's tensor reaches the Recv of the same key whichever comes first;
// abort fails waiting and later receives (and later sends) with its status; a key sent or
// received twice in one step is an Internal error; many threads at once lose nothing.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "psflow/runtime/rendezvous.hpp"

using namespace psflow;
using namespace std::chrono_literals;

namespace {

// The outcome of one recv_async, filled in by its callback (on any thread).
struct Received {
  std::mutex mutex;
  std::condition_variable changed;
  int calls = 0;
  Status status;
  Tensor value;

  Rendezvous::RecvCallback callback() {
    return [this](const Status& s, Tensor t) {
      std::lock_guard lock(mutex);
      ++calls;
      status = s;
      value = std::move(t);
      changed.notify_all();
    };
  }
  bool wait(std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, [&] { return calls > 0; });
  }
};

const std::string kKey = rendezvous_key("/job:ps/replica:0/task:0/device:CPU:0", 0x2a,
                                        "/job:worker/replica:0/task:0/device:CPU:0", "w:0");

}  // namespace

TEST_CASE("the key is TF's: devices, incarnation in hex, tensor name, frame and iteration") {
  CHECK(kKey ==
        "/job:ps/replica:0/task:0/device:CPU:0;000000000000002a;/job:worker/replica:0/task:0/"
        "device:CPU:0;w:0;0:0");
  CHECK(rendezvous_key("a", 0xffffffffffffffffull, "b", "t:1", 2, 3) ==
        "a;ffffffffffffffff;b;t:1;2:3");
  // Log lines and error messages write incarnations the same way.
  CHECK(incarnation_string(0x8535faefb32eab72ull) == "8535faefb32eab72");
  CHECK(incarnation_string(42) == "000000000000002a");
}

TEST_CASE("send before recv: the receiver gets the value at once, the same buffer") {
  LocalRendezvous r;
  const Tensor sent = Tensor::filled(3.0f, {64});
  REQUIRE(r.send(kKey, sent).ok());
  Received got;
  r.recv_async(kKey, got.callback());
  std::lock_guard lock(got.mutex);  // delivered inline: no wait needed
  CHECK(got.calls == 1);
  CHECK(got.status.ok());
  CHECK(got.value.shares_buffer_with(sent));
}

TEST_CASE("recv before send: the waiting receiver gets the value when it is sent") {
  LocalRendezvous r;
  Received got;
  r.recv_async(kKey, got.callback());
  {
    std::lock_guard lock(got.mutex);
    CHECK(got.calls == 0);
  }
  Status sent;
  std::thread sender([&] { sent = r.send(kKey, Tensor::filled(2.0f, {3})); });
  REQUIRE(got.wait());
  sender.join();
  CHECK(sent.ok());
  std::lock_guard lock(got.mutex);
  CHECK(got.calls == 1);
  CHECK(got.status.ok());
  CHECK(got.value.equals(Tensor::filled(2.0f, {3})));
}

TEST_CASE("keys are independent: a value for one key does not satisfy another") {
  LocalRendezvous r;
  const std::string other =
      rendezvous_key("/job:ps/replica:0/task:0/device:CPU:0", 0x2a,
                     "/job:worker/replica:0/task:0/device:CPU:0", "w:0", 0, 1);
  Received got;
  r.recv_async(kKey, got.callback());
  REQUIRE(r.send(other, Tensor(1.0f)).ok());
  {
    std::lock_guard lock(got.mutex);
    CHECK(got.calls == 0);
  }
  REQUIRE(r.send(kKey, Tensor(2.0f)).ok());
  std::lock_guard lock(got.mutex);
  CHECK(got.calls == 1);
  CHECK(got.value.scalar<float>() == 2.0f);
}

TEST_CASE("the same key sent twice in one step is an Internal error, the first value stays") {
  LocalRendezvous r;
  REQUIRE(r.send(kKey, Tensor(1.0f)).ok());
  const Status second = r.send(kKey, Tensor(2.0f));
  CHECK(second.code() == ErrorCode::internal);
  CHECK_THAT(second.message(), Catch::Contains("sent twice") && Catch::Contains("w:0"));
  Received got;
  r.recv_async(kKey, got.callback());
  std::lock_guard lock(got.mutex);
  CHECK(got.calls == 1);
  CHECK(got.value.scalar<float>() == 1.0f);
}

TEST_CASE("a second receiver of a waiting key fails at once, the first still gets the value") {
  LocalRendezvous r;
  Received first, second;
  r.recv_async(kKey, first.callback());
  r.recv_async(kKey, second.callback());
  {
    std::lock_guard lock(second.mutex);
    CHECK(second.calls == 1);
    CHECK(second.status.code() == ErrorCode::internal);
    CHECK_THAT(second.status.message(), Catch::Contains("received twice"));
  }
  REQUIRE(r.send(kKey, Tensor(5.0f)).ok());
  std::lock_guard lock(first.mutex);
  CHECK(first.calls == 1);
  CHECK(first.status.ok());
  CHECK(first.value.scalar<float>() == 5.0f);
}

TEST_CASE("abort wakes waiting receivers with its status, later receives and sends fail with it") {
  LocalRendezvous r;
  Received a, b;
  r.recv_async(kKey, a.callback());
  r.recv_async(rendezvous_key("x", 1, "y", "other:0"), b.callback());
  REQUIRE(r.send(rendezvous_key("x", 1, "y", "unclaimed:0"), Tensor(1.0f)).ok());
  CHECK_FALSE(r.aborted());

  std::thread aborter([&] { r.abort(Status(ErrorCode::unavailable, "ps0 went away")); });
  REQUIRE(a.wait());
  REQUIRE(b.wait());
  aborter.join();
  CHECK(r.aborted());
  for (Received* got : {&a, &b}) {
    std::lock_guard lock(got->mutex);
    CHECK(got->calls == 1);
    CHECK(got->status.code() == ErrorCode::unavailable);
    CHECK(got->status.message() == "ps0 went away");
    CHECK(got->value.empty());
  }

  // A value sent before the abort is gone too: the step is over.
  Received late;
  r.recv_async(rendezvous_key("x", 1, "y", "unclaimed:0"), late.callback());
  {
    std::lock_guard lock(late.mutex);
    CHECK(late.calls == 1);
    CHECK(late.status.code() == ErrorCode::unavailable);
  }
  CHECK(r.send(kKey, Tensor(1.0f)).code() == ErrorCode::unavailable);
  r.abort(Status(ErrorCode::internal, "second abort"));  // the first abort wins
  CHECK(r.send(kKey, Tensor(1.0f)).message() == "ps0 went away");
}

TEST_CASE("abort with an OK status still fails waiting receivers, as Aborted") {
  LocalRendezvous r;
  Received waiting;
  r.recv_async(kKey, waiting.callback());
  r.abort(Status{});
  {
    std::lock_guard lock(waiting.mutex);
    CHECK(waiting.calls == 1);
    CHECK(waiting.status.code() == ErrorCode::aborted);  // never OK with an empty tensor
  }
  Received later;
  r.recv_async(kKey, later.callback());
  std::lock_guard lock(later.mutex);
  CHECK(later.status.code() == ErrorCode::aborted);
}

TEST_CASE("many senders and receivers on threads: every key delivered once, to its receiver") {
  constexpr int kThreads = 4, kKeysPerThread = 250;
  constexpr int kKeys = kThreads * kKeysPerThread;
  LocalRendezvous r;
  auto key = [](int i) {  // built by append: GCC 12 at -O3 flags "t" + std::string (-Wrestrict)
    return rendezvous_key("src", 7, "dst", std::string("t").append(std::to_string(i)).append(":0"));
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int> calls(kKeys, 0);
  std::vector<float> values(kKeys, -1);
  int failures = 0, total = 0;
  std::atomic<int> send_failures{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // Receivers take keys in one order, senders in another, so both orders happen.
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int i = t * kKeysPerThread; i < (t + 1) * kKeysPerThread; ++i)
        r.recv_async(key(i), [&, i](const Status& s, Tensor v) {
          std::lock_guard lock(mutex);
          ++calls[static_cast<std::size_t>(i)];
          ++total;
          if (!s.ok())
            ++failures;
          else
            values[static_cast<std::size_t>(i)] = v.scalar<float>();
          changed.notify_all();
        });
    });
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int n = kKeysPerThread - 1; n >= 0; --n) {
        const int i = n * kThreads + t;  // every key once over all senders
        if (!r.send(key(i), Tensor(static_cast<float>(i))).ok()) send_failures.fetch_add(1);
      }
    });
  }
  go.store(true);
  for (auto& t : threads) t.join();
  std::unique_lock lock(mutex);
  REQUIRE(changed.wait_for(lock, 10s, [&] { return total >= kKeys; }));
  CHECK(send_failures.load() == 0);
  CHECK(failures == 0);
  int wrong = 0;
  for (int i = 0; i < kKeys; ++i)
    wrong += calls[static_cast<std::size_t>(i)] != 1 ||
             values[static_cast<std::size_t>(i)] != static_cast<float>(i);
  CHECK(wrong == 0);
}
