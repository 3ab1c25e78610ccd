// OneShotEvent: wait() returns once set() was called, from any number of waiters, whether they
// came before or after it; what the setter wrote before set() is seen after wait().
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "psflow/runtime/one_shot_event.hpp"

using psflow::detail::OneShotEvent;
using namespace std::chrono_literals;

TEST_CASE("a waiter that came first is woken by set, and sees what was written before it") {
  for (int round = 0; round < 200; ++round) {
    OneShotEvent event;
    int value = 0;
    std::atomic<int> woken_seeing_42{0};  // Catch2's CHECK is for the main thread only
    std::vector<std::thread> waiters;
    for (int i = 0; i < 3; ++i)
      waiters.emplace_back([&] {
        event.wait();
        if (value == 42) woken_seeing_42.fetch_add(1);
      });
    CHECK_FALSE(event.is_set());
    value = 42;
    event.set();
    for (auto& t : waiters) t.join();  // bounded: set() wakes every sleeper
    CHECK(woken_seeing_42.load() == 3);
    CHECK(event.is_set());
  }
}

TEST_CASE("wait returns at once once the event is set") {
  OneShotEvent event;
  event.set();
  const auto start = std::chrono::steady_clock::now();
  event.wait();
  event.wait();
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}
