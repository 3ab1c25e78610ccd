// Rendezvous: where a Send leaves a tensor and the matching Recv picks it up, keyed like TF:
//   "<src_device>;<src_incarnation hex>;<dst_device>;<tensor_name>;<frame>:<iter>"
// LocalRendezvous is the in-process table; the distributed runtime puts one per step on each
// task and fills it from the network. Send never blocks; Recv completes through a callback.
// A dead value (the untaken side of a cond, runtime/executor.hpp) is sent as an empty Tensor:
// every real value has a buffer, so the two are never confused; on the wire it is a tensor
// frame without a tensor.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"

namespace psflow {

class Rendezvous {
 public:
  using RecvCallback = std::function<void(const Status&, Tensor)>;
  virtual ~Rendezvous() = default;
  // Hands `value` to whoever receives `key`. Never blocks. Fails after abort().
  virtual Status send(const std::string& key, Tensor value) = 0;
  // Calls `done` once the value for `key` is there (maybe at once, maybe on another thread),
  // or with the abort status.
  virtual void recv_async(const std::string& key, RecvCallback done) = 0;
  // Fails every pending and future recv with `status` (the first abort wins).
  virtual void abort(const Status& status) = 0;
};

// A process incarnation as every psflow message and log line writes it: 16 hex digits, as in
// rendezvous keys ("8535faefb32eab72").
inline std::string incarnation_string(std::uint64_t incarnation) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(incarnation));
  return text;
}

// TF's rendezvous key for one tensor crossing from one device to another within a frame.
inline std::string rendezvous_key(const std::string& src_device, std::uint64_t src_incarnation,
                                  const std::string& dst_device, const std::string& tensor_name,
                                  int frame = 0, int iter = 0) {
  return src_device + ";" + incarnation_string(src_incarnation) + ";" + dst_device + ";" +
         tensor_name + ";" + std::to_string(frame) + ":" + std::to_string(iter);
}

class LocalRendezvous : public Rendezvous {
 public:
  Status send(const std::string& key, Tensor value) override {
    RecvCallback waiter;
    {
      std::lock_guard lock(mutex_);
      if (!aborted_.ok()) return aborted_;
      auto& item = table_[key];
      if (item.has_value)
        return {ErrorCode::internal, "rendezvous key '" + key + "' was sent twice in one step"};
      if (!item.waiter) {
        item.has_value = true;
        item.value = std::move(value);
        return {};
      }
      waiter = std::move(item.waiter);
      table_.erase(key);
    }
    waiter(Status{}, std::move(value));  // outside the lock: it may run the next op inline
    return {};
  }

  void recv_async(const std::string& key, RecvCallback done) override {
    Tensor value;
    Status status;
    {
      std::lock_guard lock(mutex_);
      if (!aborted_.ok()) {
        status = aborted_;
      } else {
        auto& item = table_[key];
        if (!item.has_value) {
          if (item.waiter) {
            status = {ErrorCode::internal,
                      "rendezvous key '" + key + "' is received twice in one step"};
          } else {
            item.waiter = std::move(done);
            return;
          }
        } else {
          value = std::move(item.value);
          table_.erase(key);
        }
      }
    }
    done(status, std::move(value));
  }

  void abort(const Status& status) override {
    std::vector<RecvCallback> waiters;
    Status failure;
    {
      std::lock_guard lock(mutex_);
      if (!aborted_.ok()) return;
      aborted_ = status.ok() ? Status{ErrorCode::aborted, "step aborted"} : status;
      failure = aborted_;  // never OK: a waiter must not take an empty tensor as its value
      for (auto& [key, item] : table_)
        if (item.waiter) waiters.push_back(std::move(item.waiter));
      table_.clear();
    }
    for (auto& w : waiters) w(failure, Tensor());
  }

  bool aborted() const {
    std::lock_guard lock(mutex_);
    return !aborted_.ok();
  }

 private:
  struct Item {
    bool has_value = false;
    Tensor value;
    RecvCallback waiter;
  };
  mutable std::mutex mutex_;
  Status aborted_;
  std::unordered_map<std::string, Item> table_;
};

}  // namespace psflow
