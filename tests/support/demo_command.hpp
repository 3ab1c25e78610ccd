// The add/mul/div demo's command line, for tests that run it as real ps and worker processes.
#pragma once

#include <string>
#include <vector>

namespace psflow::testing {

// The add/mul/div demo's command line for one task of a ps + worker cluster on the given
// addresses, its checkpoints in `logdir`, followed by `extra` flags.
inline std::vector<std::string> demo_command(const std::string& binary, const std::string& job,
                                             const std::string& ps_host,
                                             const std::string& worker_host,
                                             const std::string& logdir,
                                             const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{binary, "--job_name=" + job, "--ps_hosts=" + ps_host,
                                "--worker_hosts=" + worker_host, "--logdir=" + logdir};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace psflow::testing
