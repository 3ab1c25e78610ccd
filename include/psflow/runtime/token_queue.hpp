// TokenQueue: the barrier of synchronous training (TF's sync_token_q). After each aggregated
// update the chief enqueues one token (the new global step) per replica; a worker dequeues one
// before its next step. Dequeue waits through a callback (no thread blocks); close() fails
// every waiter with OutOfRange so that workers waiting when training ends are released.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "psflow/core/error.hpp"

namespace psflow {

class TokenQueue {
 public:
  using DequeueCallback = std::function<void(const Status&, std::int64_t)>;

  explicit TokenQueue(std::string name) : name_(std::move(name)) {}

  void enqueue_many(const std::vector<std::int64_t>& tokens) {
    std::vector<std::pair<DequeueCallback, std::int64_t>> ready;
    {
      std::lock_guard lock(mutex_);
      if (closed_) throw OutOfRange("token queue '" + name_ + "' is closed: training has ended");
      tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
      while (!waiters_.empty() && !tokens_.empty()) {
        ready.emplace_back(std::move(waiters_.begin()->second), tokens_.front());
        waiters_.erase(waiters_.begin());
        tokens_.pop_front();
      }
    }
    for (auto& [callback, token] : ready) callback(Status{}, token);
  }

  // Calls `done` with the next token; returns an id for cancel().
  std::uint64_t dequeue(DequeueCallback done) {
    std::int64_t token = 0;
    Status status;
    std::uint64_t id = 0;
    {
      std::lock_guard lock(mutex_);
      if (!tokens_.empty()) {
        token = tokens_.front();
        tokens_.pop_front();
      } else if (closed_) {
        status = Status(ErrorCode::out_of_range,
                        "token queue '" + name_ + "' is closed: training has ended");
      } else {
        id = next_++;
        waiters_.emplace(id, std::move(done));
        return id;
      }
    }
    done(status, token);
    return id;
  }

  // Hands `token` to every dequeue waiting now; returns how many there were. For a chief that
  // restarts: replicas still waiting for its predecessor's tokens would otherwise wait forever.
  std::size_t release_waiters(std::int64_t token) {
    std::map<std::uint64_t, DequeueCallback> waiters;
    {
      std::lock_guard lock(mutex_);
      if (closed_) return 0;
      waiters.swap(waiters_);
    }
    for (auto& [id, w] : waiters) w(Status{}, token);
    return waiters.size();
  }

  // Returns a token a cancelled waiter received too late to use, to the front of the queue.
  void put_back(std::int64_t token) {
    std::lock_guard lock(mutex_);
    if (!closed_) tokens_.push_front(token);
  }

  // Removes a waiting dequeue; true when it had not completed yet.
  bool cancel(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    return waiters_.erase(id) == 1;
  }

  // Refuses new tokens and fails every waiter (and later dequeues once empty) with OutOfRange.
  void close() {
    std::map<std::uint64_t, DequeueCallback> waiters;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      tokens_.clear();
      waiters.swap(waiters_);
    }
    for (auto& [id, w] : waiters)
      w(Status(ErrorCode::out_of_range, "token queue '" + name_ + "' closed: training has ended"),
        0);
  }
  // Opens the queue again, empty (a new session of the chief).
  void reopen() {
    std::lock_guard lock(mutex_);
    closed_ = false;
    tokens_.clear();
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return tokens_.size();
  }

  // Dequeues waiting for a token now.
  std::size_t waiting() const {
    std::lock_guard lock(mutex_);
    return waiters_.size();
  }

 private:
  const std::string name_;
  mutable std::mutex mutex_;
  std::deque<std::int64_t> tokens_;
  bool closed_ = false;
  std::uint64_t next_ = 1;
  std::map<std::uint64_t, DequeueCallback> waiters_;
};

}  // namespace psflow
