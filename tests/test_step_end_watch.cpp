// StepEndWatch: a watch returns once the step's flag is set or its limit passed; it stops
// watching after steps that outlast the limit and starts again once steps end within it, and
// while the machine's cores are contended; it is safe to share between concurrent callers.
// The watches here are given no probe of the machine's cores (other tests keep them busy)
// unless the case is about contention.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "psflow/runtime/core_contention.hpp"
#include "psflow/runtime/one_shot_event.hpp"
#include "psflow/runtime/step_end_watch.hpp"

using psflow::detail::CoreContention;
using psflow::detail::OneShotEvent;
using psflow::detail::StepEndWatch;
using namespace std::chrono_literals;

namespace {

// Teaches `watch` that `count` steps each made their caller wait `waited`.
void teach(StepEndWatch& watch, StepEndWatch::Clock::duration waited, int count) {
  for (int i = 0; i < count; ++i) watch.learn(waited);
}

}  // namespace

TEST_CASE("a watch returns when another thread ends the step") {
  StepEndWatch watch(30s, nullptr);
  if (!watch.worth_watching()) {
    WARN("one hardware thread: StepEndWatch never watches here");
    return;
  }
  OneShotEvent ended;
  std::atomic<bool> watching{false};
  std::thread ender([&] {
    while (!watching.load()) std::this_thread::yield();
    ended.set();
  });
  const auto start = StepEndWatch::Clock::now();
  watching = true;
  watch.watch(ended);
  const auto took = StepEndWatch::Clock::now() - start;
  const bool seen = ended.is_set();
  ender.join();
  CHECK(seen);
  CHECK(took < 10s);  // it saw the flag, not the 30 s limit
}

TEST_CASE("a watch gives up at its limit when the step does not end") {
  StepEndWatch watch(1ms, nullptr);
  if (!watch.worth_watching()) {
    WARN("one hardware thread: StepEndWatch never watches here");
    return;
  }
  OneShotEvent ended;  // never set: only the limit can end this watch
  const auto start = StepEndWatch::Clock::now();
  watch.watch(ended);
  CHECK(StepEndWatch::Clock::now() - start < 10s);
}

TEST_CASE("steps that outlast the limit stop the watching, and short steps bring it back") {
  StepEndWatch watch(30s, nullptr);
  if (!watch.worth_watching()) {
    WARN("one hardware thread: StepEndWatch never watches here");
    return;
  }
  teach(watch, 60s, 32);  // longer than the limit: watching did not pay
  CHECK_FALSE(watch.worth_watching());
  OneShotEvent never;
  const auto start = StepEndWatch::Clock::now();
  watch.watch(never);  // returns at once instead of watching for 30 s
  CHECK(StepEndWatch::Clock::now() - start < 10s);

  teach(watch, 1ms, 32);  // within the limit again
  CHECK(watch.worth_watching());
}

TEST_CASE("one watch shared by concurrent callers") {
  StepEndWatch watch(200us, nullptr);
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&watch, t] {
      for (int step = 0; step < 500; ++step) {
        OneShotEvent ended;
        if (step % 2 == 0) ended.set();
        const auto start = StepEndWatch::Clock::now();
        watch.watch(ended);
        watch.learn(t % 2 ? StepEndWatch::Clock::now() - start : 1s);
      }
    });
  for (auto& caller : callers) caller.join();
  // For TSan above. Whatever share the callers left, the learning still works both ways.
  teach(watch, 1s, 64);
  CHECK_FALSE(watch.worth_watching());
  teach(watch, 1us, 64);
  CHECK(watch.worth_watching() == (std::thread::hardware_concurrency() > 1));
}

TEST_CASE("no watching while the machine's cores are contended") {
  long runnable = 1;  // the caller alone
  CoreContention cores(2, [&runnable]() -> std::optional<long> { return runnable; });
  StepEndWatch watch(30s, &cores);
  if (std::thread::hardware_concurrency() < 2) {
    CHECK_FALSE(watch.worth_watching());
    return;
  }
  CHECK(watch.worth_watching());
  runnable = 3;  // two more threads runnable on 2 cores: every core wanted
  // The probe samples at most every kSampleEvery; within a few samples it sees the load.
  const auto deadline = StepEndWatch::Clock::now() + 10s;
  while (watch.worth_watching() && StepEndWatch::Clock::now() < deadline) std::this_thread::yield();
  CHECK_FALSE(watch.worth_watching());
  OneShotEvent never;
  const auto start = StepEndWatch::Clock::now();
  watch.watch(never);  // returns at once instead of watching for 30 s
  CHECK(StepEndWatch::Clock::now() - start < 10s);

  runnable = 1;  // free again: watching comes back once the free samples outnumber the others
  while (!watch.worth_watching() && StepEndWatch::Clock::now() < deadline)
    std::this_thread::yield();
  CHECK(watch.worth_watching());
}
