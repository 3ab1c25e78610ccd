// Server: one task of a cluster (TF's tf.train.Server). It listens on exactly the address its
// task has in the ClusterSpec, hosts the task's device (and so its variables) and a worker
// service, and lets a Session in the same process act as master for the cluster.
//
// Beyond TF: stop_task()/stop_job() tell other tasks to stop, so a ps's join() returns and
// its process can exit 0 at the end of training; every wait on a peer has a deadline, a peer
// that stops answering is noticed (ServerOptions::heartbeat_timeout), and while waiting for a
// peer that is not up yet the server says whom it waits for.
//
// Thread-safe. The constructor starts serving; the destructor stops serving, fails the steps
// running here and joins the network threads (steps still ending keep what they use alive and
// free it when they end). join, stop_task
// and stop_job block, so they are for the program's threads (never call them from a callback
// psflow runs). This header declares Server only: the network machinery behind it
// (distributed/server_core.hpp, Boost.Asio) is compiled where psflow's implementation is (every
// file when header-only, once with PSFLOW_SEPARATE_COMPILATION: core/compilation.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/server_options.hpp"

namespace psflow {

class ServerCore;  // distributed/server_core.hpp

class Server {
 public:
  PSFLOW_DECL Server(const ClusterSpec& cluster, std::string_view job_name, std::size_t task_index,
                     ServerOptions options = {});
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  PSFLOW_DECL ~Server();

  // What Session(graph, target) connects to: "psflow://host:port" (the real port when the
  // cluster gave port 0).
  PSFLOW_DECL std::string target() const;
  // Blocks until stop() is called here or another task asks this one to stop.
  PSFLOW_DECL void join();
  PSFLOW_DECL void stop();
  PSFLOW_DECL bool stopped() const;

  // Asks task `job`/`task_index` to stop (its join() returns). Returns false when it could not
  // be reached within `timeout` (it may already be gone).
  PSFLOW_DECL bool stop_task(std::string_view job, std::size_t task_index,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  // stop_task for every task of `job` (except this one); returns how many acknowledged.
  PSFLOW_DECL std::size_t stop_job(
      std::string_view job, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

  PSFLOW_DECL const ClusterSpec& cluster() const noexcept;
  PSFLOW_DECL const std::string& job_name() const noexcept;
  PSFLOW_DECL std::size_t task_index() const noexcept;
  PSFLOW_DECL std::uint64_t incarnation() const noexcept;
  // "/job:ps/replica:0/task:0"
  PSFLOW_DECL const std::string& task_name() const noexcept;
  // "/job:ps/replica:0/task:0/device:CPU:0"
  PSFLOW_DECL const std::string& device_name() const noexcept;
  // Every task's CPU device, jobs sorted.
  PSFLOW_DECL std::vector<std::string> cluster_devices() const;
  PSFLOW_DECL const ServerOptions& options() const noexcept;

  // The machinery behind this task: connections, its device and worker service
  // (distributed/server_core.hpp; for psflow's distributed session and tests).
  ServerCore& core() noexcept { return *core_; }

 private:
  std::shared_ptr<ServerCore> core_;  // shared with the steps running here
};

}  // namespace psflow

#if PSFLOW_COMPILES_IMPLEMENTATION
#include "psflow/distributed/server_core.hpp"  // Server's definitions
#endif
