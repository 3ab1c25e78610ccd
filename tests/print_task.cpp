// Prints the task psflow resolves from its command line, TF_CONFIG or the Slurm step, as one line:
//   job=worker task=1 address=node002:8888 cluster={"ps":["node001:8888"],"worker":[...]}
// The deploy tests (tools/check_deploy.py) run it in place of a training program, through the
// Kubernetes entrypoint and the sbatch script, and check that each pod and rank gets its task.
#include <iostream>
#include <psflow/distributed/task_flags.hpp>

int main(int argc, char** argv) {
  try {
    const psflow::TaskFlags task = psflow::TaskFlags::parse(argc, argv);
    std::cout << "job=" << task.job_name << " task=" << task.task_index
              << " address=" << task.address() << " cluster=" << task.cluster.to_json() << "\n";
    return 0;
  } catch (const psflow::Error& e) {
    std::cerr << "print_task: " << e.what() << "\n";
    return 1;
  }
}
