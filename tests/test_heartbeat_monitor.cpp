// HeartbeatMonitor (distributed/heartbeat_monitor.hpp) with an injected clock: a quiet side sends
// a heartbeat after a quarter of the timeout, a peer silent for the whole timeout is dead,
// anything received restarts its count, a late tick (this process stalled) is not held against
// the peer, and a zero timeout never decides anything.
#include <catch2/catch.hpp>
#include <chrono>

#include "psflow/distributed/heartbeat_monitor.hpp"

using psflow::detail::HeartbeatMonitor;
using Verdict = HeartbeatMonitor::Verdict;
using namespace std::chrono_literals;

namespace {

// Ticks every 50 ms from `from` (exclusive) to `to` (inclusive); returns the first verdict that
// is not quiet_is_fine, and sets `at` to its time.
Verdict tick_until(HeartbeatMonitor& m, HeartbeatMonitor::Clock::time_point from,
                   HeartbeatMonitor::Clock::time_point to,
                   HeartbeatMonitor::Clock::time_point& at) {
  for (at = from + 50ms; at <= to; at += 50ms)
    if (const Verdict v = m.check(at); v != Verdict::quiet_is_fine) return v;
  return Verdict::quiet_is_fine;
}

}  // namespace

TEST_CASE("a quiet side sends a heartbeat after a quarter of the timeout") {
  HeartbeatMonitor m(1000ms);
  const auto t0 = HeartbeatMonitor::Clock::now();
  m.start(t0);
  m.note_sent(t0);
  HeartbeatMonitor::Clock::time_point at;
  CHECK(tick_until(m, t0, t0 + 2s, at) == Verdict::send_heartbeat);
  CHECK(at == t0 + 250ms);
  m.note_sent(at);  // the heartbeat left
  m.note_received(at);
  const auto sent = at;
  CHECK(tick_until(m, sent, sent + 2s, at) == Verdict::send_heartbeat);
  CHECK(at == sent + 250ms);
}

TEST_CASE("a peer silent for the whole timeout is dead and the text says for how long") {
  HeartbeatMonitor m(1000ms);
  const auto t0 = HeartbeatMonitor::Clock::now();
  m.start(t0);
  HeartbeatMonitor::Clock::time_point at = t0;
  Verdict v = Verdict::quiet_is_fine;
  for (int i = 0; i < 100 && v != Verdict::peer_dead; ++i) {
    m.note_sent(at);  // we keep talking; the peer does not
    at += 50ms;
    v = m.check(at);
  }
  CHECK(v == Verdict::peer_dead);
  CHECK(at == t0 + 1000ms);
  CHECK(m.silence_text(at) == " sent nothing for 1.0 s (heartbeat timeout 1.0 s)");
}

TEST_CASE("anything received restarts the peer's count") {
  HeartbeatMonitor m(1000ms);
  const auto t0 = HeartbeatMonitor::Clock::now();
  m.start(t0);
  HeartbeatMonitor::Clock::time_point at = t0;
  for (int i = 0; i < 60; ++i) {  // 3 s, a byte from the peer every 900 ms
    at += 50ms;
    if (i % 18 == 17) m.note_received(at);
    m.note_sent(at);
    CHECK(m.check(at) == Verdict::quiet_is_fine);
  }
}

TEST_CASE("a late tick means this process stalled: the peer's silence counts from it") {
  HeartbeatMonitor m(1000ms);
  const auto t0 = HeartbeatMonitor::Clock::now();
  m.start(t0);
  m.note_sent(t0 + 900ms);
  CHECK(m.check(t0 + 900ms) == Verdict::quiet_is_fine);  // the first tick came 900 ms late
  HeartbeatMonitor::Clock::time_point at = t0 + 900ms;
  Verdict v = Verdict::quiet_is_fine;
  while (v != Verdict::peer_dead && at < t0 + 3s) {
    at += 50ms;
    m.note_sent(at);
    v = m.check(at);
  }
  CHECK(v == Verdict::peer_dead);
  CHECK(at == t0 + 1900ms);  // 1 s after the late tick, not 1 s after the start
}

TEST_CASE("a zero timeout never sends a heartbeat nor declares the peer dead") {
  HeartbeatMonitor m(0ms);
  const auto t0 = HeartbeatMonitor::Clock::now();
  m.start(t0);
  HeartbeatMonitor::Clock::time_point at;
  CHECK(tick_until(m, t0, t0 + 60s, at) == Verdict::quiet_is_fine);
}
