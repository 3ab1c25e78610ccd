// DeadlineTimer: callbacks run on the timer's thread, not before their deadline and in deadline
// order; cancel() stops a callback that has not started and says whether it did; the
// destructor joins without running what is still scheduled.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "psflow/runtime/deadline_timer.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using Clock = DeadlineTimer::Clock;

namespace {

// What the timer's callbacks did, in order; the test thread waits (bounded) for a count.
struct Log {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int> fired;
  std::vector<Clock::time_point> when;
  std::vector<std::thread::id> threads;

  std::function<void()> record(int id) {
    return [this, id] {
      std::lock_guard lock(mutex);
      fired.push_back(id);
      when.push_back(Clock::now());
      threads.push_back(std::this_thread::get_id());
      changed.notify_all();
    };
  }
  bool wait_for(std::size_t count, std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, [&] { return fired.size() >= count; });
  }
};

}  // namespace

TEST_CASE("callbacks run at or after their deadline, on the timer thread, in deadline order") {
  Log log;
  DeadlineTimer timer;  // after what its callbacks use: destroyed (joined) first
  const auto start = Clock::now();
  // Scheduled out of order; ties keep the order they were scheduled in.
  timer.schedule(start + 120ms, log.record(3));
  timer.schedule(start + 40ms, log.record(1));
  timer.schedule(start + 80ms, log.record(2));
  timer.schedule(start + 120ms, log.record(4));
  REQUIRE(log.wait_for(4));
  std::lock_guard lock(log.mutex);
  CHECK(log.fired == std::vector<int>{1, 2, 3, 4});
  CHECK(log.when[0] >= start + 40ms);
  CHECK(log.when[1] >= start + 80ms);
  CHECK(log.when[2] >= start + 120ms);
  for (const auto& id : log.threads) {
    CHECK(id == log.threads[0]);
    CHECK(id != std::this_thread::get_id());
  }
}

TEST_CASE("a deadline in the past fires at once, a later, earlier deadline goes first") {
  Log log;
  DeadlineTimer timer;
  timer.schedule(Clock::now() + 10s, log.record(2));  // the timer thread now sleeps until then
  timer.schedule(Clock::now() - 1s, log.record(1));   // must wake it
  REQUIRE(log.wait_for(1));
  std::lock_guard lock(log.mutex);
  CHECK(log.fired == std::vector<int>{1});
}

TEST_CASE("cancel before the deadline stops the callback and returns true, after, false") {
  Log log;
  DeadlineTimer timer;
  const auto cancelled = timer.schedule(Clock::now() + 100ms, log.record(1));
  const auto fires = timer.schedule(Clock::now() + 20ms, log.record(2));
  const auto sentinel = timer.schedule(Clock::now() + 300ms, log.record(3));
  CHECK(timer.cancel(cancelled));
  CHECK_FALSE(timer.cancel(cancelled));
  REQUIRE(log.wait_for(2));  // 2, then the sentinel after the cancelled one's deadline
  CHECK_FALSE(timer.cancel(fires));
  CHECK_FALSE(timer.cancel(sentinel));
  CHECK_FALSE(timer.cancel(987654));
  std::lock_guard lock(log.mutex);
  CHECK(log.fired == std::vector<int>{2, 3});
}

TEST_CASE("a callback may schedule and cancel on its own timer") {
  Log log;
  auto inner = log.record(2);
  std::uint64_t doomed = 0;
  DeadlineTimer timer;
  timer.schedule(Clock::now(), [&] {
    log.record(1)();
    doomed = timer.schedule(Clock::now() + 10s, log.record(99));
    timer.schedule(Clock::now() + 10ms, inner);
  });
  REQUIRE(log.wait_for(2));
  CHECK(timer.cancel(doomed));  // happens after its scheduling: the callback ran before 2 fired
  std::lock_guard lock(log.mutex);
  CHECK(log.fired == std::vector<int>{1, 2});
}

TEST_CASE("the destructor joins without running pending callbacks, and releases them") {
  auto token = std::make_shared<int>(0);
  bool ran = false;
  {
    DeadlineTimer timer;
    timer.schedule(Clock::now() + 1h, [&ran, token] { ran = true; });
    CHECK(token.use_count() == 2);
  }
  CHECK_FALSE(ran);
  CHECK(token.use_count() == 1);
}

TEST_CASE("the shared timer is one timer and runs callbacks") {
  CHECK(&DeadlineTimer::shared() == &DeadlineTimer::shared());
  Log log;
  DeadlineTimer::shared().schedule(Clock::now() + 5ms, log.record(7));
  REQUIRE(log.wait_for(1));
  std::lock_guard lock(log.mutex);
  CHECK(log.fired == std::vector<int>{7});
}

TEST_CASE("schedules and cancels from many threads: exactly the uncancelled callbacks run") {
  constexpr int kThreads = 4, kEach = 100;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int> runs(kThreads * kEach, 0);
  std::vector<char> cancelled(kThreads * kEach, 0);
  int total = 0;
  DeadlineTimer timer;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const int n = t * kEach + i;
        const auto id = timer.schedule(Clock::now() + std::chrono::milliseconds(i % 7), [&, n] {
          std::lock_guard lock(mutex);
          ++runs[static_cast<std::size_t>(n)];
          ++total;
          changed.notify_all();
        });
        if (i % 3 == 0 && timer.cancel(id)) cancelled[static_cast<std::size_t>(n)] = 1;
      }
    });
  for (auto& t : threads) t.join();
  int expected = 0;
  for (char c : cancelled) expected += c ? 0 : 1;
  // A last callback, due after every one above: callbacks run in deadline order, so once it has
  // run, a cancelled callback that ran anyway would have run too.
  bool last_ran = false;
  timer.schedule(Clock::now() + 10ms, [&] {
    std::lock_guard lock(mutex);
    last_ran = true;
    changed.notify_all();
  });
  std::unique_lock lock(mutex);
  REQUIRE(changed.wait_for(lock, 10s, [&] { return total >= expected && last_ran; }));
  int wrong = 0;
  for (std::size_t n = 0; n < runs.size(); ++n) wrong += runs[n] != (cancelled[n] ? 0 : 1);
  CHECK(wrong == 0);
  CHECK(total == expected);
}

TEST_CASE("cancel_and_wait withdraws a pending callback, or returns only after a running one") {
  DeadlineTimer timer;
  SECTION("pending") {
    std::atomic<bool> ran{false};
    const auto id = timer.schedule(Clock::now() + 1h, [&ran] { ran = true; });
    timer.cancel_and_wait(id);
    CHECK_FALSE(ran.load());
  }
  SECTION("running") {
    std::mutex mutex;
    std::condition_variable changed;
    bool started = false, release = false, returned = false;
    const auto id = timer.schedule(Clock::now(), [&] {
      std::unique_lock lock(mutex);
      started = true;
      changed.notify_all();
      changed.wait_for(lock, 10s, [&] { return release; });
      returned = true;
    });
    {
      std::unique_lock lock(mutex);
      REQUIRE(changed.wait_for(lock, 10s, [&] { return started; }));
    }
    std::thread releaser([&] {
      std::lock_guard lock(mutex);
      release = true;
      changed.notify_all();
    });
    timer.cancel_and_wait(id);
    {
      std::lock_guard lock(mutex);
      CHECK(returned);  // the callback had finished when cancel_and_wait returned
    }
    releaser.join();
  }
}
