// IoLanes: a task's I/O threads, each running an io_context of its own (a lane), and the lane a
// new connection goes to. Plumbing of Server, not meant for users.
//
// Why lanes rather than several threads on one io_context: on a ps, one worker's 64 MiB
// update keeps the thread that reads it busy for milliseconds at a time. Sharing one
// io_context, another worker's small request is read by whichever thread polls next, often that
// busy one, and the kernel's scheduler, which favours threads that used little CPU of late,
// makes the small request wait with it for a core. A connection on a lane of its own is read
// by a thread that sleeps until the request arrives and is woken promptly (benchmarks/README.md,
// "A ps serving many workers": A's loaded 4 KiB step p99 went from 13-17 × alone to 1.1-1.7 ×).
// So connections are spread over the lanes, each new one on the lane with the fewest open
// connections. Lane 0 also runs the task's own timers and its listener.
//
// Each lane's io_context runs with concurrency hint 1 (one thread), so a lane runs the
// handlers it finds ready itself and never wakes another thread for them.
//
// Contract: construct, then start() once; context(), lane_of() and size() from any thread.
// stop_and_join() stops every lane's thread and joins it (never from a lane's thread); then
// drain() runs what the lanes still hold on the calling thread.
#pragma once

#include <algorithm>
#include <boost/asio.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace psflow {

namespace asio = boost::asio;

namespace detail {

class IoLanes {
 public:
  // `count` lanes (at least one).
  explicit IoLanes(std::size_t count);
  IoLanes(const IoLanes&) = delete;
  IoLanes& operator=(const IoLanes&) = delete;
  ~IoLanes();

  std::size_t size() const noexcept { return lanes_.size(); }
  asio::io_context& context(std::size_t lane) noexcept { return lanes_[lane]->io; }
  // Lane 0: the task's timers, its listener and whatever is posted without a connection.
  asio::io_context& main() noexcept { return context(0); }

  // Which lane runs `executor`'s work (size() when none of these does).
  std::size_t lane_of(const asio::any_io_executor& executor) const;

  // The lane for a new connection, given how many open connections each lane has (exactly one
  // count per lane; std::invalid_argument otherwise): the one with the fewest, ties going round in
  // turn so that connections still being set up (not counted yet) spread too. Not thread-safe: the
  // caller serializes its calls.
  std::size_t pick(const std::vector<std::size_t>& open_connections);

  // Starts one thread per lane; each calls `on_start(lane)` first, then runs its io_context.
  void start(const std::function<void(std::size_t)>& on_start);
  // Stops every lane and joins their threads. Idempotent.
  void stop_and_join();
  // After stop_and_join: runs what the lanes still hold (closes that stop() posted, and what
  // they post in turn, maybe to another lane) on the calling thread, at most `rounds` passes.
  void drain(std::size_t rounds = 16);

 private:
  // An io_context whose pending work can be destroyed before any lane is: a handler left on one
  // lane may own a socket of another, which must still exist when that handler goes.
  struct Context : asio::io_context {
    Context() : asio::io_context(1) {}
    void destroy_pending_work() { shutdown(); }
  };
  struct Lane {
    Context io;
    asio::executor_work_guard<asio::io_context::executor_type> work{asio::make_work_guard(io)};
    std::thread thread;
  };
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::size_t next_ = 0;  // where the next tie goes (pick)
};

// ---------------------------------------------------------------------------------------------

inline IoLanes::IoLanes(std::size_t count) {
  for (std::size_t i = 0; i < std::max<std::size_t>(count, 1); ++i)
    lanes_.push_back(std::make_unique<Lane>());
}

inline IoLanes::~IoLanes() {
  stop_and_join();
  for (auto& lane : lanes_) lane->io.destroy_pending_work();
}

inline std::size_t IoLanes::lane_of(const asio::any_io_executor& executor) const {
  const asio::execution_context* owner = &asio::query(executor, asio::execution::context);
  for (std::size_t i = 0; i < lanes_.size(); ++i)
    if (owner == &lanes_[i]->io) return i;
  return lanes_.size();
}

inline std::size_t IoLanes::pick(const std::vector<std::size_t>& open_connections) {
  if (open_connections.size() != lanes_.size())
    throw std::invalid_argument("IoLanes::pick: " + std::to_string(open_connections.size()) +
                                " connection counts for " + std::to_string(lanes_.size()) +
                                " lanes; pass one count per lane");
  std::size_t best = next_ % lanes_.size();
  for (std::size_t k = 1; k < lanes_.size(); ++k) {
    const std::size_t lane = (next_ + k) % lanes_.size();
    if (open_connections[lane] < open_connections[best]) best = lane;
  }
  next_ = best + 1;
  return best;
}

inline void IoLanes::start(const std::function<void(std::size_t)>& on_start) {
  for (std::size_t i = 0; i < lanes_.size(); ++i)
    lanes_[i]->thread = std::thread([this, i, on_start] {
      on_start(i);
      lanes_[i]->io.run();
    });
}

inline void IoLanes::stop_and_join() {
  for (auto& lane : lanes_) {
    lane->work.reset();
    lane->io.stop();
  }
  for (auto& lane : lanes_)
    if (lane->thread.joinable()) lane->thread.join();
}

inline void IoLanes::drain(std::size_t rounds) {
  for (std::size_t round = 0; round < rounds; ++round) {
    std::size_t ran = 0;
    for (auto& lane : lanes_) {
      lane->io.restart();  // a lane that ran out of work stops, and a later post must still run
      ran += lane->io.poll();
    }
    if (ran == 0) return;
  }
}

}  // namespace detail
}  // namespace psflow
