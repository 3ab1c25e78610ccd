// Heartbeats of one connection, decided at each tick of its timer: a side that has sent nothing
// for a quarter of the timeout sends an empty heartbeat frame; a peer from which nothing arrived
// for the whole timeout (no frame, and no byte of a large frame still coming in) is declared
// dead. This catches a peer that stopped (SIGSTOP, a hung host, a cut network) without closing
// its socket. A tick that comes more than a quarter of the timeout late means this process
// itself stalled (stopped, swapped, starved): what the peer sent meanwhile may still wait in the
// socket, so its silence counts again from that tick and the stall is not held against it.
//
// Contract: note_received/note_sent from any thread; start and check from one thread (the
// connection's strand).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

namespace psflow::detail {

class HeartbeatMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Verdict { quiet_is_fine, send_heartbeat, peer_dead };

  // `timeout`: how long the peer may stay silent (zero: never declared dead, no heartbeats).
  explicit HeartbeatMonitor(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // The silence counts from `now`.
  void start(Clock::time_point now) noexcept {
    last_tick_ = now;
    note_received(now);
  }
  // Something arrived from the peer, or some of our bytes left.
  void note_received(Clock::time_point now = Clock::now()) noexcept {
    last_received_.store(now.time_since_epoch().count());
  }
  void note_sent(Clock::time_point now = Clock::now()) noexcept {
    last_sent_.store(now.time_since_epoch().count());
  }

  // What to do at the timer tick at `now`.
  Verdict check(Clock::time_point now) noexcept {
    if (timeout_.count() <= 0) return Verdict::quiet_is_fine;
    const auto since_last_tick = now - last_tick_;
    last_tick_ = now;
    if (since_last_tick > timeout_ / 4) {  // this process stalled: count from now
      note_received(now);
      return Verdict::quiet_is_fine;
    }
    if (now - last(last_received_) >= timeout_) return Verdict::peer_dead;
    if (now - last(last_sent_) >= timeout_ / 4) return Verdict::send_heartbeat;
    return Verdict::quiet_is_fine;
  }

  // For peer_dead: " sent nothing for 10.2 s (heartbeat timeout 10.0 s)".
  std::string silence_text(Clock::time_point now) const {
    char text[160];
    std::snprintf(text, sizeof text, " sent nothing for %.1f s (heartbeat timeout %.1f s)",
                  std::chrono::duration<double>(now - last(last_received_)).count(),
                  std::chrono::duration<double>(timeout_).count());
    return text;
  }

 private:
  static Clock::time_point last(const std::atomic<Clock::rep>& reading) noexcept {
    return Clock::time_point{Clock::duration(reading.load())};
  }

  const std::chrono::milliseconds timeout_;
  // Clock readings (time_since_epoch counts) of the last activity each way; any thread.
  std::atomic<Clock::rep> last_received_{Clock::now().time_since_epoch().count()};
  std::atomic<Clock::rep> last_sent_{Clock::now().time_since_epoch().count()};
  Clock::time_point last_tick_ = Clock::now();  // the connection's strand only
};

}  // namespace psflow::detail
