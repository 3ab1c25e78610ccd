// ConnectionThreads: the threads of a Server's plain TCP connections, each blocked in its own
// socket (connection.hpp says why: one system call a message instead of the reactor's three),
// and the writer a connection starts once its socket's buffer fills. Plumbing of Server, not
// meant for users.
//
// Each thread holds its connection until its loop ends, which closing the connection (a shutdown
// of its socket) brings about at once. join_all() waits for every one and refuses new ones: the
// Server calls it while shutting down, after closing its connections, so no frame handler runs
// into a destroyed Server. A thread that ended is joined when the next one starts, so a task
// whose peers come and go does not collect them.
//
// Contract: thread-safe. spawn() returns false, running nothing, once join_all() began.
// on_this_thread() tells whether the calling thread is one of these (blocking calls are refused
// there, as on the I/O threads: server_core.hpp).
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "psflow/runtime/network_thread.hpp"

namespace psflow::detail {

class ConnectionThreads {
 public:
  ConnectionThreads() = default;
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;
  ~ConnectionThreads() { join_all(); }

  // Runs `body` on a new thread, marked as a network thread (runtime/network_thread.hpp).
  bool spawn(std::function<void()> body);
  // Waits for every thread, also those started meanwhile by the ones it waits for; refuses
  // new ones from its start on. Never from one of these threads.
  void join_all();
  bool on_this_thread() const noexcept { return current() == this; }
  // How many threads started and not yet joined (for tests).
  std::size_t size() const;

 private:
  struct Thread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> ended = std::make_shared<std::atomic<bool>>(false);
  };
  static const ConnectionThreads*& current() noexcept {
    thread_local const ConnectionThreads* owner = nullptr;
    return owner;
  }
  // Joins the threads that ended (mutex_ held: they end without taking it).
  void join_ended();

  mutable std::mutex mutex_;
  std::list<Thread> threads_;
  bool joining_ = false;
};

// ---------------------------------------------------------------------------------------------

inline bool ConnectionThreads::spawn(std::function<void()> body) {
  std::lock_guard lock(mutex_);
  if (joining_) return false;
  join_ended();
  Thread& entry = threads_.emplace_back();
  entry.thread = std::thread([this, body = std::move(body), ended = entry.ended]() mutable {
    mark_network_thread();
    current() = this;
    body();
    body = nullptr;  // what it holds (its connection) goes before the thread counts as ended
    ended->store(true, std::memory_order_release);
  });
  return true;
}

inline void ConnectionThreads::join_all() {
  for (;;) {
    std::list<Thread> joining;
    {
      std::lock_guard lock(mutex_);
      joining_ = true;
      joining.swap(threads_);
    }
    if (joining.empty()) return;
    for (auto& t : joining) t.thread.join();
  }
}

inline std::size_t ConnectionThreads::size() const {
  std::lock_guard lock(mutex_);
  return threads_.size();
}

inline void ConnectionThreads::join_ended() {
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->ended->load(std::memory_order_acquire)) {
      it->thread.join();
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace psflow::detail
