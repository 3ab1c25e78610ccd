// Fuzz target: the Slurm resolver (distributed/slurm_cluster.hpp): expand_slurm_nodelist,
// expand_slurm_tasks_per_node, SlurmOptions::parse_jobs and SlurmConfig::resolve on a hand-made
// environment. The input is up to five lines: SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE,
// the --slurm_jobs value, SLURM_PROCID and SLURM_STEP_NUM_TASKS. Properties checked beyond "no
// crash": expansions stay within the parser's limits, and a resolved cluster writes out and reads
// back (fuzz/cluster_checks.hpp) with this rank's task on one of the step's nodes.
#include <algorithm>
#include <optional>
#include <vector>

#include "cluster_checks.hpp"
#include "psflow/distributed/slurm_cluster.hpp"

namespace {

using namespace psflow;

std::vector<std::string> lines_of(std::string_view text, std::size_t most) {
  std::vector<std::string> lines;
  while (lines.size() < most) {
    const std::size_t end = text.find('\n');
    lines.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  lines.resize(most);
  return lines;
}

void resolve_step(std::string_view text) {
  const std::vector<std::string> line = lines_of(text, 5);
  fuzz::only_psflow_errors([&] {
    fuzz::check(expand_slurm_nodelist(line[0]).size() <= kMaxSlurmHosts,
                "a node list expanded past kMaxSlurmHosts");
  });
  fuzz::only_psflow_errors([&] {
    const std::vector<std::size_t> counts = expand_slurm_tasks_per_node(line[1]);
    fuzz::check(counts.size() <= kMaxSlurmHosts, "a tasks-per-node list past kMaxSlurmHosts");
  });
  SlurmOptions options;
  fuzz::only_psflow_errors([&] {
    if (!line[2].empty()) options.jobs = SlurmOptions::parse_jobs(line[2]);
  });
  SlurmEnvironment env;
  env.variables["SLURM_STEP_NODELIST"] = line[0];
  env.variables["SLURM_STEP_TASKS_PER_NODE"] = line[1];
  env.variables["SLURM_PROCID"] = line[3];
  if (!line[4].empty()) env.variables["SLURM_STEP_NUM_TASKS"] = line[4];
  std::optional<SlurmConfig> config;
  fuzz::only_psflow_errors([&] { config = SlurmConfig::resolve(options, env); });
  if (!config) return;
  fuzz::check_cluster(config->cluster);
  const std::string address = config->cluster.task_address(config->job_name, config->task_index);
  const std::string host = address.substr(0, address.rfind(':'));
  fuzz::check(std::find(config->hosts.begin(), config->hosts.end(), host) != config->hosts.end(),
              "rank's task " + address + " is on none of the step's nodes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  resolve_step(psflow::fuzz::as_text(data, size));
  return 0;
}
