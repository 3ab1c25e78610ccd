// Test support: a cluster on loopback whose ps tasks are real processes (the psflow_task
// binary, PSFLOW_TASK_BINARY) and whose worker addresses are reserved for Servers the test
// creates in its own process. Ps processes are killed at the latest by the destructor.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/server.hpp"
#include "support/child_process.hpp"

namespace psflow::testing {

struct LocalCluster {
  std::vector<std::string> ps_hosts, worker_hosts;
  std::vector<std::unique_ptr<ChildProcess>> ps;
  // More flags for ps task i (e.g. its --checkpoint_dir), used from its next start_ps(i).
  std::vector<std::vector<std::string>> ps_flags;
  TempDir logs{"cluster"};

  LocalCluster(int num_ps, int num_workers, bool start = true) {
    for (int i = 0; i < num_ps; ++i) ps_hosts.push_back(loopback(reserve_port()));
    for (int i = 0; i < num_workers; ++i) worker_hosts.push_back(loopback(reserve_port()));
    ps.resize(static_cast<std::size_t>(num_ps));
    ps_flags.resize(static_cast<std::size_t>(num_ps));
    if (start)
      for (int i = 0; i < num_ps; ++i) start_ps(i);
  }

  ClusterSpec spec() const { return ClusterSpec({{"ps", ps_hosts}, {"worker", worker_hosts}}); }

  // (Re)starts ps task i on its address.
  void start_ps(int i) {
    std::vector<std::string> args{PSFLOW_TASK_BINARY, "--ps_hosts=" + join(ps_hosts),
                                  "--worker_hosts=" + join(worker_hosts), "--job_name=ps",
                                  "--task_index=" + std::to_string(i)};
    const auto& more = ps_flags[static_cast<std::size_t>(i)];
    args.insert(args.end(), more.begin(), more.end());
    ps[static_cast<std::size_t>(i)] =
        std::make_unique<ChildProcess>(std::move(args), logs / ("ps" + std::to_string(i)));
  }

  // Server options for the test's workers: quiet, with a test-sized connect deadline.
  ServerOptions quiet(std::chrono::milliseconds connect_timeout = std::chrono::seconds(10)) const {
    ServerOptions options;
    options.connect_timeout = connect_timeout;
    options.log = false;
    return options;
  }

  static std::string join(const std::vector<std::string>& hosts) {
    std::string out;
    for (const auto& h : hosts) out += (out.empty() ? "" : ",") + h;
    return out;
  }
};

}  // namespace psflow::testing
