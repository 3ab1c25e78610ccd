// ThreadPool: every submitted task runs, on the pool's own threads and in parallel, tasks may
// submit tasks, and the destructor runs what is still queued before it joins.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "psflow/runtime/thread_pool.hpp"
#include "support/eventually.hpp"

using namespace psflow;
using namespace std::chrono_literals;

namespace {

// Counts finished tasks; the test thread waits (bounded) for a number.
struct Countdown {
  std::mutex mutex;
  std::condition_variable changed;
  int done = 0;
  void add() {
    std::lock_guard lock(mutex);
    ++done;
    changed.notify_all();
  }
  bool wait_for(int count, std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, [&] { return done >= count; });
  }
};

}  // namespace

TEST_CASE("a pool has at least one thread") {
  CHECK(ThreadPool(0).size() == 1);
  CHECK(ThreadPool(3).size() == 3);
}

TEST_CASE("every submitted task runs exactly once, on a pool thread") {
  constexpr int kTasks = 2000;
  ThreadPool pool(3);
  Countdown countdown;
  std::vector<std::atomic<int>> runs(kTasks);
  std::mutex ids_mutex;
  std::set<std::thread::id> ids;
  for (int i = 0; i < kTasks; ++i)
    pool.submit([&, i] {
      runs[static_cast<std::size_t>(i)].fetch_add(1);
      {
        std::lock_guard lock(ids_mutex);
        ids.insert(std::this_thread::get_id());
      }
      countdown.add();
    });
  REQUIRE(countdown.wait_for(kTasks));
  int wrong = 0;
  for (auto& r : runs) wrong += r.load() != 1;
  CHECK(wrong == 0);
  std::lock_guard lock(ids_mutex);
  CHECK(ids.count(std::this_thread::get_id()) == 0);
  CHECK(ids.size() <= pool.size());
}

TEST_CASE("tasks run in parallel: each of two tasks waits for the other") {
  ThreadPool pool(2);
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  int met = 0;
  Countdown countdown;
  for (int i = 0; i < 2; ++i)
    pool.submit([&] {
      std::unique_lock lock(mutex);
      ++arrived;
      changed.notify_all();
      // With one thread the first task would wait here alone until the limit.
      if (changed.wait_for(lock, 10s, [&] { return arrived == 2; })) ++met;
      lock.unlock();
      countdown.add();
    });
  REQUIRE(countdown.wait_for(2, 30s));
  std::lock_guard lock(mutex);
  CHECK(met == 2);
}

TEST_CASE("a task may submit more tasks") {
  ThreadPool pool(2);
  Countdown countdown;
  std::function<void(int)> spawn = [&](int depth) {
    countdown.add();
    if (depth > 0) {
      pool.submit([&, depth] { spawn(depth - 1); });
      pool.submit([&, depth] { spawn(depth - 1); });
    }
  };
  pool.submit([&] { spawn(6); });
  CHECK(countdown.wait_for((1 << 7) - 1));
}

TEST_CASE("the destructor runs every queued task, then joins") {
  std::atomic<int> ran{0};
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  std::atomic<bool> saw_stopping{false};
  std::thread opener;
  {
    ThreadPool pool(1);
    // The first task holds the only thread until the destructor has started, so the others
    // are still queued then. (The pool's members live until its threads are joined, which
    // waits for that first task, so the opener may ask it.)
    pool.submit([&] {
      std::unique_lock lock(mutex);
      changed.wait_for(lock, 10s, [&] { return open; });
      ran.fetch_add(1);
    });
    for (int i = 0; i < 100; ++i) pool.submit([&] { ran.fetch_add(1); });
    opener = std::thread([&] {
      saw_stopping = psflow::testing::eventually([&] { return pool.stopping(); }, 10s);
      std::lock_guard lock(mutex);
      open = true;
      changed.notify_all();
    });
    CHECK_FALSE(pool.stopping());
  }
  // The pool is gone: its destructor returned only after all 101 tasks.
  CHECK(ran.load() == 101);
  opener.join();
  CHECK(saw_stopping.load());
}

TEST_CASE("the shared pool is one pool and runs tasks") {
  ThreadPool& shared = ThreadPool::shared();
  CHECK(&shared == &ThreadPool::shared());
  CHECK(shared.size() >= 1);
  Countdown countdown;
  for (int i = 0; i < 50; ++i) shared.submit([&] { countdown.add(); });
  CHECK(countdown.wait_for(50));
}

TEST_CASE("several threads submitting at once lose no task") {
  ThreadPool pool(2);
  Countdown countdown;
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t)
    submitters.emplace_back([&] {
      for (int i = 0; i < 500; ++i) pool.submit([&] { countdown.add(); });
    });
  for (auto& t : submitters) t.join();
  CHECK(countdown.wait_for(2000));
}
