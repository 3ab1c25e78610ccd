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
// Flags: `add_mul_div --help` prints them (kUsage below).
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

namespace {

constexpr const char* kUsage =
    R"(add_mul_div: the seed's TF1 example. A ps task holds the variables w and b; a worker
computes w+b, w*b and w/b five times and prints them as TF's worker did.

  add_mul_div --job_name=ps          # holds w and b, serves until the worker is done
  add_mul_div --job_name=worker      # computes, prints, then stops the ps
  add_mul_div                        # everything in this process
  ./scripts/demo.sh [flags]          # builds and runs both, each line labelled

Flags (defaults in parentheses):
  --ps_hosts (127.0.0.1:2223) --worker_hosts (127.0.0.1:1234) --job_name --task_index
                                 the cluster and this task (TF_CONFIG when no *_hosts flag)
  --slurm_jobs=ps:1,worker:1 --slurm_port_base (8888)
                                 instead: the cluster and this task from the Slurm step
                                 (deploy/slurm/psflow.sbatch)
  --logdir (./simple_log)        the Supervisor restores the latest checkpoint there, or
                                 initializes the variables and saves
  --interval_ms (1000)           pause between two results (0: none)
  --connect_timeout_s (30)       how long to wait for the ps to come up
  --bind_all                     listen on every interface, not only on this task's address
  --secret_file                  a file with the cluster secret: only tasks that know it get in
                                 (default: the environment variable PSFLOW_CLUSTER_SECRET; see
                                 docs/security.md)
  --tls_cert --tls_key --tls_ca  this task's certificate, its key and the cluster's CA (PEM
                                 files): mutual TLS between the tasks (all three; see
                                 docs/security.md)
  --heartbeat_timeout_s (10)     a peer silent this long is declared dead (0: never)
  --explain, --explain=words     the worker prints where each op runs and what crosses processes;
                                 the ps logs what it does each step
  --explain=dot --explain_dir (.)   the worker writes add_mul_div_graph.dot (and .svg with
                                 Graphviz) into that directory and logs the paths
  --help                         this text
)";

struct DemoFlags {
  psflow::TaskFlags task;
  bool distributed = false;
  explain_flag::ExplainFlag explain;  // --explain[=words|dot], --explain_dir
  int interval_ms = 1000;
  double connect_timeout_s = 30;
  std::string logdir = "./simple_log";
};

bool take_flag(const std::string& arg, const std::string& name, std::string& value) {
  const std::string prefix = "--" + name + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  value = arg.substr(prefix.size());
  return true;
}

// A number flag's value, or InvalidArgument naming the flag.
double number_flag(const std::string& name, const std::string& value, double min) {
  std::size_t used = 0;
  double number = 0;
  try {
    number = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !(number >= min))
    throw psflow::InvalidArgument("--" + name + "='" + value +
                                  "': give a number >= " + std::to_string(static_cast<int>(min)));
  return number;
}

DemoFlags parse_flags(int argc, char** argv) {
  DemoFlags flags;
  std::vector<std::string> args(argv, argv + argc);
  for (const auto& a : args)
    if (a == "--help" || a == "-h" || a == "-help") {
      std::cout << kUsage;
      std::exit(0);
    }
  const char* tf_config = std::getenv("TF_CONFIG");
  bool has_hosts = false, has_job = false;
  for (const auto& a : args) {
    has_hosts = has_hosts || a.rfind("--ps_hosts", 0) == 0 || a.rfind("--worker_hosts", 0) == 0;
    has_job = has_job || a.rfind("--job_name", 0) == 0;
    if (a.rfind("--slurm_jobs", 0) == 0) has_hosts = has_job = true;  // the Slurm step's cluster
  }
  flags.distributed = has_job || (tf_config && *tf_config);
  if (!has_hosts && !(tf_config && *tf_config)) {  // the seed's cluster
    args.push_back("--ps_hosts=127.0.0.1:2223");
    args.push_back("--worker_hosts=127.0.0.1:1234");
  }
  if (!flags.distributed) args.push_back("--job_name=worker");
  flags.task = psflow::TaskFlags::parse(
      args, tf_config ? std::optional<std::string_view>(tf_config) : std::nullopt);
  for (std::size_t i = 1; i < flags.task.remaining_args.size(); ++i) {
    const std::string& arg = flags.task.remaining_args[i];
    std::string value;
    if (arg == "--explain")
      flags.explain.take("explain", "true");
    else if (take_flag(arg, "explain", value) || take_flag(arg, "explain_dir", value))
      flags.explain.take(arg.substr(2, arg.find('=') - 2), value);
    else if (take_flag(arg, "logdir", value))
      flags.logdir = value;
    else if (take_flag(arg, "interval_ms", value))
      flags.interval_ms = static_cast<int>(number_flag("interval_ms", value, 0));
    else if (take_flag(arg, "connect_timeout_s", value))
      flags.connect_timeout_s = number_flag("connect_timeout_s", value, 0);
    else
      throw psflow::InvalidArgument("unknown flag '" + arg +
                                    "': run add_mul_div --help for the flags");
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
