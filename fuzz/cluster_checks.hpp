// Properties of a ClusterSpec that parsed, shared by the cluster_spec and tf_config targets:
// it writes out as JSON and TF_CONFIG that read back as the same cluster and task, and its task
// names are device strings naming those tasks.
#pragma once

#include <string>

#include "fuzz_common.hpp"
#include "psflow/distributed/task_flags.hpp"

namespace psflow::fuzz {

inline void check_cluster(const ClusterSpec& spec) {
  const std::string json = spec.to_json();
  fuzz::check(ClusterSpec::from_tf_config("{\"cluster\": " + json + "}") == spec,
              "cluster " + json + " does not read back from its JSON");
  // Each task's TF_CONFIG holds the whole cluster, so reading one back costs the cluster's size:
  // a bounded number of tasks keeps a 65536-task Slurm step within the fuzzer's timeout.
  std::size_t total_tasks = 0;
  for (const auto& [job, tasks] : spec.as_map()) total_tasks += tasks.size();
  const std::size_t most_checked = total_tasks <= 1024 ? 64 : 1;
  std::size_t checked = 0;
  for (const auto& [job, tasks] : spec.as_map()) {
    fuzz::check(spec.has_job(job) && spec.num_tasks(job) == tasks.size(), "job lookup fails");
    for (std::size_t i = 0; i < tasks.size() && checked < most_checked; ++i, ++checked) {
      fuzz::check(spec.task_address(job, i) == tasks[i], "task_address disagrees");
      const std::string config = spec.to_tf_config_json(job, i);
      const TfConfig back = TfConfig::parse(config);
      fuzz::check(back.cluster == spec && back.task_type == job && back.task_index == i,
                  "TF_CONFIG " + config + " does not read back as the task it was written for");
      const std::string device = detail::full_task_name(job, i);
      const DeviceSpec parsed = DeviceSpec::parse(device);
      fuzz::check(parsed.job == job && parsed.task == static_cast<int>(i) &&
                      detail::task_of_device(device) == device,
                  "task name " + device + " is not the device string of its task");
    }
  }
  for (const std::string& device : spec.task_devices()) (void)DeviceSpec::parse(device);
}

}  // namespace psflow::fuzz
