// ConnectionThreads: a spawned body runs on a network thread that knows it is one of these;
// join_all() waits for every thread, also one started by a thread it waits for, and refuses
// new ones from then on; a thread that ended is joined when the next one starts, and what its
// body held is let go before it counts as ended.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>

#include "psflow/distributed/connection_threads.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using detail::ConnectionThreads;

TEST_CASE("a spawned body runs on a network thread of its own that knows its owner") {
  ConnectionThreads threads, other;
  CHECK_FALSE(threads.on_this_thread());
  std::promise<std::pair<bool, bool>> seen;
  REQUIRE(threads.spawn([&] {
    seen.set_value(
        {threads.on_this_thread() && !other.on_this_thread(), detail::on_network_thread()});
  }));
  auto future = seen.get_future();
  REQUIRE(future.wait_for(10s) == std::future_status::ready);
  const auto [knows_owner, network] = future.get();
  CHECK(knows_owner);
  CHECK(network);
  threads.join_all();
  CHECK(threads.size() == 0);
}

TEST_CASE("join_all waits for every thread, also those spawned meanwhile, then refuses more") {
  ConnectionThreads threads;
  std::mutex mutex;
  std::condition_variable changed;
  bool release = false;
  std::atomic<int> finished{0};
  std::atomic<bool> second_spawned{false};
  // The first thread waits for the test's signal, then starts a second one, as a connection's
  // reader may start its writer while the task shuts down.
  REQUIRE(threads.spawn([&] {
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return release; });
    }
    second_spawned = threads.spawn([&] { ++finished; });
    ++finished;
  }));
  std::promise<void> joined;
  std::thread joiner([&] {
    threads.join_all();
    joined.set_value();
  });
  auto joined_future = joined.get_future();
  // join_all cannot return while the first thread waits: it is still running.
  CHECK(joined_future.wait_for(0s) == std::future_status::timeout);
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  changed.notify_all();
  REQUIRE(joined_future.wait_for(10s) == std::future_status::ready);
  joiner.join();
  // A thread started before join_all took the list, or refused after: never one left running.
  CHECK(finished == (second_spawned ? 2 : 1));
  CHECK_FALSE(threads.spawn([] {}));
  CHECK(threads.size() == 0);
}

TEST_CASE("an ended thread is joined when the next starts, its body's captures gone before") {
  ConnectionThreads threads;
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  REQUIRE(threads.spawn([held = std::move(held)] {}));
  CHECK(threads.size() == 1);
  // Bounded: the body returns at once; the captures go before the thread counts as ended.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!watch.expired() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  REQUIRE(watch.expired());
  // The first may not have marked itself ended yet when the second starts; by the third spawn
  // (or a few), every thread before has ended and been joined.
  std::atomic<int> runs{0};
  for (int i = 0; i < 200 && threads.size() != 1; ++i) {
    REQUIRE(threads.spawn([&runs] { ++runs; }));
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (runs.load() <= i && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }
  CHECK(threads.size() == 1);  // without the joins, one more each round
  threads.join_all();
  CHECK(threads.size() == 0);
}
