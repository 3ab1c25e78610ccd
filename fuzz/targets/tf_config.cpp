// Fuzz target: the TF_CONFIG environment variable (TfConfig::parse in
// distributed/task_flags.hpp, ClusterSpec::from_tf_config in cluster_spec.hpp, and
// TaskFlags::parse reading it). The input is the variable's value. Properties checked beyond
// "no crash": both parsers agree on the cluster, and the cluster writes out as JSON and as a
// TF_CONFIG per task that read back the same (fuzz/cluster_checks.hpp).
#include <optional>

#include "cluster_checks.hpp"
#include "psflow/distributed/task_flags.hpp"

namespace {

using namespace psflow;

void parse_config(std::string_view text) {
  std::optional<TfConfig> config;
  fuzz::only_psflow_errors([&] { config = TfConfig::parse(text); });
  std::optional<ClusterSpec> cluster;
  fuzz::only_psflow_errors([&] { cluster = ClusterSpec::from_tf_config(text); });
  fuzz::check(config.has_value() <= cluster.has_value(),
              "TfConfig::parse accepts a TF_CONFIG whose cluster from_tf_config rejects");
  if (config) {
    fuzz::check(config->cluster == *cluster, "TfConfig::parse and from_tf_config disagree");
    fuzz::check_cluster(config->cluster);
  }
  fuzz::only_psflow_errors([&] {
    const TaskFlags flags = TaskFlags::parse({"fuzz"}, text, /*require_ps_job=*/false);
    fuzz::check(config.has_value(), "TaskFlags::parse accepts a TF_CONFIG TfConfig rejects");
    (void)flags.address();
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  parse_config(psflow::fuzz::as_text(data, size));
  return 0;
}
