// The seed program (TF1's add/mul/div ps + worker example) written with psflow.
//
//   add_mul_div --job_name=ps                       # holds the variables w and b
//   add_mul_div --job_name=worker [--explain[=dot]] # computes w+b, w*b, w/b five times
//
// As in the seed, replica_device_setter puts the variables on the ps, the arithmetic on the
// worker, and a Supervisor restores the latest checkpoint in --logdir or initializes and saves.
// The worker prints exactly what TF's worker printed, then tells the ps to stop; both exit 0.
// Without --job_name everything runs in this one process.
//
// Flags: `add_mul_div --help` prints them (parse_flags below).
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <psflow/psflow.hpp>
#include <psflow/train/supervisor.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/explain_flag.hpp"
#include "common/flags.hpp"

namespace {

constexpr const char* kAbout =
    R"(the seed's TF1 example. A ps task holds the variables w and b; a worker
computes w+b, w*b and w/b five times and prints them as TF's worker did.

  add_mul_div --job_name=ps          # holds w and b, serves until the worker is done
  add_mul_div --job_name=worker      # computes, prints, then stops the ps
  add_mul_div                        # everything in this process
  ./scripts/demo.sh [flags]          # builds and runs both, each line labelled

Without --ps_hosts, --worker_hosts and TF_CONFIG the cluster is the seed's: ps 127.0.0.1:2223,
worker 127.0.0.1:1234.)";

// The seed's cluster: one ps and one worker on this machine.
const std::vector<std::string> kSeedCluster{"--ps_hosts=127.0.0.1:2223",
                                            "--worker_hosts=127.0.0.1:1234"};

struct DemoFlags {
  psflow::TaskFlags task;
  bool distributed = false;
  explain_flag::ExplainFlag explain;  // --explain[=words|dot], --explain_dir
  int interval_ms = 1000;
  double connect_timeout_s = 30;
  std::string logdir = "./simple_log";
};

DemoFlags parse_flags(int argc, char** argv) {
  DemoFlags flags;
  psflow::Flags reader("add_mul_div", kAbout);
  reader
      .add("logdir",
           "the Supervisor restores the latest checkpoint there, or\n"
           "initializes the variables and saves",
           &flags.logdir)
      .add("interval_ms", "pause between two results (0: none)", &flags.interval_ms, 0)
      .add("connect_timeout_s", "how long to wait for the ps to come up", &flags.connect_timeout_s,
           0.0);
  flags.explain.add_to(reader, "the worker (a ps logs its steps)", "add_mul_div");
  // A task of the seed's cluster unless the command line or TF_CONFIG names another.
  std::vector<std::string> args(argv, argv + argc);
  const char* tf_config = std::getenv("TF_CONFIG");
  bool has_cluster = tf_config && *tf_config, has_job = false;
  for (const auto& a : args) {
    has_cluster = has_cluster || psflow::detail::is_flag_named(a, "ps_hosts") ||
                  psflow::detail::is_flag_named(a, "worker_hosts") ||
                  psflow::detail::is_flag_named(a, "slurm_jobs");
    has_job = has_job || psflow::detail::is_flag_named(a, "job_name");
  }
  if (has_job && !has_cluster)
    args.insert(args.begin() + 1, kSeedCluster.begin(), kSeedCluster.end());
  reader.add_task_flags(&flags.task);
  example::parse_or_exit(reader, args);
  flags.distributed = !flags.task.job_name.empty();
  if (!flags.distributed) {
    // In one process: the seed's cluster names the devices; this process runs them all.
    std::vector<std::string> in_process{"add_mul_div", "--job_name=worker"};
    in_process.insert(in_process.end(), kSeedCluster.begin(), kSeedCluster.end());
    flags.task = psflow::TaskFlags::parse(in_process, std::nullopt);
  }
  return flags;
}

// Python's print() of a list of numpy arrays: "[array(...), array(...)]".
std::string python_list_repr(const std::vector<psflow::Tensor>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + psflow::repr(values[i]);
  return out + "]";
}

// Tells the ps tasks to stop when the worker is done, also when it fails, so that no ps is left
// waiting forever (TF's ps never exits on its own).
struct StopPsOnExit {
  psflow::Server* server;
  ~StopPsOnExit() {
    if (server) server->stop_job("ps");
  }
};

int run_worker(const DemoFlags& flags, psflow::Server* server) {
  StopPsOnExit stop_ps{server};
  psflow::Graph graph;
  psflow::Output addwb, mutwb, divwb;
  {
    auto placement = graph.device(psflow::train::replica_device_setter(
        {.worker_device = "/job:worker/task:" + std::to_string(flags.task.task_index),
         .cluster = flags.task.cluster}));
    auto w = psflow::get_variable(graph, "w", {2, 2}, psflow::constant_initializer(2));
    auto b = psflow::get_variable(graph, "b", {2, 2}, psflow::constant_initializer(5));
    addwb = w + b;
    mutwb = w * b;
    divwb = w / b;
  }
  // The Supervisor restores the checkpoint in logdir if there is one, else initializes and saves.
  psflow::train::SupervisorOptions supervision;
  supervision.is_chief = flags.task.task_index == 0;
  supervision.logdir = flags.logdir;
  psflow::train::Supervisor sv(graph, supervision);
  psflow::Session& sess = sv.managed_session(server ? server->target() : "");
  flags.explain.run(sess, "add_mul_div", {addwb, mutwb, divwb}, {}, {}, std::cout);
  for (int count = 1;; ++count) {
    std::cout << count << "th compute result is :\n";
    std::cout << python_list_repr(sess.run({addwb, mutwb, divwb})) << "\n";
    std::cout << "***********************************" << std::endl;
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.interval_ms));
    if (count >= 5) break;
  }
  sv.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const DemoFlags flags = parse_flags(argc, argv);
    if (!flags.distributed) return run_worker(flags, nullptr);

    psflow::ServerOptions options = flags.task.server_options();  // --bind_all, --secret_file
    options.connect_timeout =
        std::chrono::milliseconds(static_cast<long>(flags.connect_timeout_s * 1000));
    options.explain = flags.explain.mode == explain_flag::ExplainFlag::Mode::words;
    psflow::Server server(flags.task.cluster, flags.task.job_name, flags.task.task_index, options);
    if (flags.task.job_name == "ps") {
      server.join();  // until a worker says the work is done
      return 0;
    }
    return run_worker(flags, &server);
  } catch (const psflow::Error& e) {
    std::cerr << "add_mul_div: " << e.what() << "\n";
    return 1;
  }
}
