// CoreContention: /proc/loadavg's running count parsed (and malformed text refused); a sample
// is contended when the runnable threads besides the caller fill every core, and the cores are
// contended while two of the last four samples were; the count is read at most once per
// kSampleEvery, also by concurrent callers; a machine whose count cannot be read is never
// contended.
#include <atomic>
#include <catch2/catch.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "psflow/runtime/core_contention.hpp"

using psflow::detail::CoreContention;
using namespace std::chrono_literals;

namespace {

// A probe of a 2-core machine whose runnable count the test sets; counts its reads.
struct FakeMachine {
  std::atomic<long> runnable{1};
  std::atomic<int> reads{0};
  CoreContention probe{2, [this]() -> std::optional<long> {
                         ++reads;
                         return runnable.load();
                       }};
};

}  // namespace

TEST_CASE("the running count of /proc/loadavg's text") {
  CHECK(CoreContention::parse_loadavg("0.52 0.58 0.59 3/467 12345\n") == 3);
  CHECK(CoreContention::parse_loadavg("12.00 8.10 4.00 120/3001 99") == 120);
  CHECK_FALSE(CoreContention::parse_loadavg(""));
  CHECK_FALSE(CoreContention::parse_loadavg("0.52 0.58 0.59"));
  CHECK_FALSE(CoreContention::parse_loadavg("0.52 0.58 0.59 /467 1"));
  CHECK_FALSE(CoreContention::parse_loadavg("0.52 0.58 0.59 3 467"));
  CHECK_FALSE(CoreContention::parse_loadavg("0.52 0.58 0.59 12345678901/467 1"));
}

#if defined(__linux__)
TEST_CASE("this machine's runnable count includes the caller") {
  const std::optional<long> runnable = CoreContention::runnable_on_this_machine();
  REQUIRE(runnable);
  CHECK(*runnable >= 1);
}
#endif

TEST_CASE("contended when two of the last four samples found every core wanted") {
  FakeMachine machine;
  auto t = CoreContention::Clock::now();
  const auto next_sample = [&] { return t += CoreContention::kSampleEvery; };
  machine.runnable = 2;  // the caller and one more on 2 cores: a core is free
  CHECK_FALSE(machine.probe.contended(t));
  machine.runnable = 3;  // the caller and two more on 2 cores: every core wanted
  CHECK_FALSE(machine.probe.contended(t + 100us));      // not sampled again yet
  CHECK_FALSE(machine.probe.contended(next_sample()));  // one contended sample is not enough
  CHECK(machine.probe.contended(next_sample()));
  CHECK(machine.reads == 3);

  machine.runnable = 1;  // the load went away: contended until two free samples more
  CHECK(machine.probe.contended(next_sample()));
  CHECK(machine.probe.contended(next_sample()));
  CHECK_FALSE(machine.probe.contended(next_sample()));

  // A lone contended instant among free ones changes nothing.
  for (int sample = 0; sample < 12; ++sample) {
    machine.runnable = sample % 4 == 0 ? 5 : 1;
    CHECK_FALSE(machine.probe.contended(next_sample()));
  }
}

TEST_CASE("a count that cannot be read never reports contention") {
  CoreContention probe(2, [] { return std::optional<long>(); });
  const auto t0 = CoreContention::Clock::now();
  for (int i = 0; i < 10; ++i) CHECK_FALSE(probe.contended(t0 + i * CoreContention::kSampleEvery));
}

TEST_CASE("concurrent callers read the count at most once per kSampleEvery") {
  FakeMachine machine;
  machine.runnable = 4;
  auto t0 = CoreContention::Clock::now();
  // Two contended samples before the callers start: every call of theirs finds the cores so.
  CHECK_FALSE(machine.probe.contended(t0));
  t0 += CoreContention::kSampleEvery;
  REQUIRE(machine.probe.contended(t0));
  machine.reads = 0;
  constexpr int kPeriods = 50;
  std::atomic<int> contended{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int period = 0; period < kPeriods; ++period)
        for (int call = 0; call < 20; ++call)
          if (machine.probe.contended(t0 + (period + 1) * CoreContention::kSampleEvery))
            ++contended;
    });
  for (auto& caller : callers) caller.join();
  CHECK(machine.reads == kPeriods);  // one read per period, whichever caller came first
  CHECK(contended == 4 * kPeriods * 20);
}
