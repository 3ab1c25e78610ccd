// Device: one place ops run on ("/job:ps/replica:0/task:0/device:CPU:0") with its resource
// manager; DeviceMgr: the devices a process hosts. On this CPU-only runtime a task has one
// device, CPU:0.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "psflow/core/device_spec.hpp"
#include "psflow/runtime/resource_manager.hpp"

namespace psflow {

class Device {
 public:
  explicit Device(std::string name) : name_(std::move(name)), resources_(name_) {}
  const std::string& name() const noexcept { return name_; }
  ResourceManager& resources() noexcept { return resources_; }
  // This task's own directory for the shard files of sharded checkpoints
  // (train/sharded_checkpoint.hpp); "" reads and writes them next to the checkpoint path the
  // chief names. Set before the device runs anything (ServerOptions::checkpoint_dir).
  const std::string& checkpoint_dir() const noexcept { return checkpoint_dir_; }
  void set_checkpoint_dir(std::string dir) { checkpoint_dir_ = std::move(dir); }

 private:
  std::string name_;
  ResourceManager resources_;
  std::string checkpoint_dir_;
};

// Completes a partial device spec with `defaults` and the CPU:0 device: the canonical name of
// the device an op actually runs on.
inline std::string complete_device_name(const std::string& requested, const DeviceSpec& defaults) {
  DeviceSpec full = defaults;
  full.merge_from(DeviceSpec::parse(requested));
  if (!full.job) full.job = "localhost";
  if (!full.replica) full.replica = 0;
  if (!full.task) full.task = 0;
  if (!full.device_type) full.device_type = "CPU";
  if (!full.device_index) full.device_index = 0;
  return full.to_string();
}

// The devices of one process. Thread-safe; device references stay valid for its lifetime.
class DeviceMgr {
 public:
  Device& get_or_create(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto& slot = devices_[name];
    if (!slot) slot = std::make_unique<Device>(name);
    return *slot;
  }
  Device* find(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = devices_.find(name);
    return it == devices_.end() ? nullptr : it->second.get();
  }
  std::vector<Device*> devices() const {
    std::lock_guard lock(mutex_);
    std::vector<Device*> out;
    for (const auto& [name, device] : devices_) out.push_back(device.get());
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Device>> devices_;
};

}  // namespace psflow
