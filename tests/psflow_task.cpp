// A plain psflow task for multi-process tests: serves its cluster address until told to stop.
//   psflow_task --ps_hosts=... --worker_hosts=... --job_name=ps --task_index=0
//               [--heartbeat_timeout_s=10] [--slow_step_warning_s=30]
//               [--checkpoint_dir=DIR]   (its own directory for sharded checkpoints)
#include <iostream>
#include <psflow/psflow.hpp>

#include "support/test_ops.hpp"  // ops the multi-process tests place on a ps

int main(int argc, char** argv) {
  try {
    (void)psflow::testing::test_ops_registered;
    const auto flags = psflow::TaskFlags::parse(argc, argv);
    // --checkpoint_dir (its own shard directory), --bind_all, --secret_file
    psflow::Server server(flags.cluster, flags.job_name, flags.task_index, flags.server_options());
    server.join();
    return 0;
  } catch (const psflow::Error& e) {
    std::cerr << "psflow_task: " << e.what() << "\n";
    return 1;
  }
}
