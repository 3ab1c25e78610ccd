// Prints the task psflow resolves from its command line, TF_CONFIG or the Slurm step, as one line:
//   job=worker task=1 address=node002:8888 cluster={"ps":["node001:8888"],"worker":[...]}
// The deploy tests (tools/check_deploy.py) run it in place of a training program, through the
// Kubernetes entrypoint and the sbatch script, and check that each pod and rank gets its task.
#include <cstdlib>
#include <iostream>
#include <optional>
#include <psflow/distributed/task_flags.hpp>
#include <string>
#include <string_view>
#include <vector>

int main(int argc, char** argv) {
  try {
    // The program's own flags (--train_steps=..., as the deploy scripts pass them on) are left
    // for it: the form that hands them back, not the strict argc/argv one.
    const char* tf_config = std::getenv("TF_CONFIG");
    const psflow::TaskFlags task = psflow::TaskFlags::parse(
        std::vector<std::string>(argv, argv + argc),
        tf_config ? std::optional<std::string_view>(tf_config) : std::nullopt);
    std::cout << "job=" << task.job_name << " task=" << task.task_index
              << " address=" << task.address() << " cluster=" << task.cluster.to_json() << "\n";
    return 0;
  } catch (const psflow::Error& e) {
    std::cerr << "print_task: " << e.what() << "\n";
    return 1;
  }
}
