// Fuzz target: cluster definitions from the command line (distributed/cluster_spec.hpp,
// task_flags.hpp). The input is lines: each "job=host:port,host:port" line is a job for the
// ClusterSpec constructor, and all lines together are the arguments of TaskFlags::parse (so
// "--ps_hosts=...", "--job_name=...", "--task_index=..." lines reach the flag parser).
// Properties checked beyond "no crash": every cluster that parses writes out as JSON and as a
// TF_CONFIG per task that read back the same (fuzz/cluster_checks.hpp).
#include <vector>

#include "cluster_checks.hpp"
#include "psflow/distributed/task_flags.hpp"

namespace {

using namespace psflow;

std::vector<std::string_view> lines_of(std::string_view input) {
  std::vector<std::string_view> lines;
  while (!input.empty() && lines.size() < 64) {
    const std::size_t end = input.find('\n');
    lines.push_back(input.substr(0, end));
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + 1);
  }
  return lines;
}

void from_job_lines(const std::vector<std::string_view>& lines) {
  ClusterSpec::JobMap jobs;
  for (std::string_view line : lines) {
    const std::size_t equals = line.find('=');
    if (equals == std::string_view::npos || line.starts_with("-")) continue;
    auto& tasks = jobs[std::string(line.substr(0, equals))];
    std::string_view list = line.substr(equals + 1);
    while (!list.empty()) {
      const std::size_t comma = list.find(',');
      tasks.emplace_back(list.substr(0, comma));
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  fuzz::check_cluster(ClusterSpec(std::move(jobs)));
}

void from_flags(const std::vector<std::string_view>& lines) {
  std::vector<std::string> args{"fuzz"};
  for (std::string_view line : lines) args.emplace_back(line);
  const TaskFlags flags = TaskFlags::parse(args, std::nullopt, /*require_ps_job=*/false);
  fuzz::check_cluster(flags.cluster);
  fuzz::check(flags.address() == flags.cluster.task_address(flags.job_name, flags.task_index),
              "TaskFlags::address disagrees with its cluster");
  (void)DeviceSpec::parse(flags.device());
  (void)flags.is_chief();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto lines = lines_of(psflow::fuzz::as_text(data, size));
  psflow::fuzz::only_psflow_errors([&] { from_job_lines(lines); });
  psflow::fuzz::only_psflow_errors([&] { from_flags(lines); });
  return 0;
}
