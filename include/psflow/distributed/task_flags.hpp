// TaskFlags: which task of which cluster this process is, from the command line or TF_CONFIG.
//
// TensorFlow 1.x distributed programs are started once per task with the same flags:
//   trainer --ps_hosts=h0:2222,h1:2222 --worker_hosts=h2:2222,h3:2222 --job_name=worker
//           --task_index=1
// or with the TF_CONFIG environment variable set (the cluster managers' way):
//   TF_CONFIG='{"cluster": {"ps": [...], "worker": [...]}, "task": {"type": "worker", "index": 1}}'
// or, inside a Slurm step, from srun's variables (--slurm_jobs=ps:1,worker:3, see SlurmConfig).
// TaskFlags::parse reads any of them and hands back the ClusterSpec, the job name and task index.
// Its argc/argv form, for a main() with no flags of its own, answers --help and rejects anything
// else; a program with flags of its own reads them all with psflow::Flags (distributed/flags.hpp),
// which hands TaskFlags the cluster's.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/flag_text.hpp"
#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/server_options.hpp"
#include "psflow/distributed/slurm_cluster.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#endif

namespace psflow {

// TF_CONFIG, parsed: the cluster and, when given, this process's task.
struct TfConfig {
  ClusterSpec cluster;
  std::optional<std::string> task_type;   // "task": {"type": ...}
  std::optional<std::size_t> task_index;  // "task": {"index": ...}; TF reads a missing one as 0

  // Throws InvalidArgument for malformed JSON, a missing or malformed "cluster", a "task" that
  // is not an object or has no "type", and an "index" that is not a non-negative integer (a
  // string of digits is accepted too).
  static TfConfig parse(std::string_view json);
};

// The identity of this task. Plain data; parse() is a pure function of its inputs.
struct TaskFlags {
  ClusterSpec cluster;
  std::string job_name;
  std::size_t task_index = 0;
  // --checkpoint_dir: this task's own directory for checkpoints (a ps: its shard files,
  // ServerOptions::checkpoint_dir); "" when not given.
  std::string checkpoint_dir;
  // argv[0] and every argument that is not one of ours, in their original order.
  std::vector<std::string> remaining_args;
  // --bind_all: listen on every interface (0.0.0.0, or :: for an IPv6 task address), not only on
  // this task's cluster address.
  bool bind_all = false;
  // --secret_file: a file holding the cluster secret (docs/security.md); "" = none given.
  std::string secret_file;
  // --heartbeat_timeout_s: ServerOptions::heartbeat_timeout in seconds (0: off).
  double heartbeat_timeout_s = 10;
  // --slow_step_warning_s: ServerOptions::slow_step_warning in seconds (0: off).
  double slow_step_warning_s = 30;
  // --tls_cert, --tls_key, --tls_ca: PEM files for mutual TLS (ServerOptions::tls_cert_file,
  // tls_key_file, tls_ca_file; docs/security.md); "" = not given.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  // --orphan_timeout_s: ServerOptions::orphan_timeout in seconds (0: never).
  double orphan_timeout_s = 600;
  // --startup_timeout_s: for MonitoredTrainingSessionOptions::startup_timeout_secs (this task's
  // wait for its cluster, and a non-chief's for the chief); the program passes it on.
  double startup_timeout_s = 120;

  // Recognised flags, as "--name=value" or "--name value" (one leading '-' works too):
  //   --ps_hosts, --worker_hosts, --chief_hosts   comma-separated host:port lists (an empty list
  //                                               leaves the job out)
  //   --job_name                                  this task's job
  //   --task_index                                this task's index in its job (default 0)
  //   --heartbeat_timeout_s                       how long a silent peer lives (default 10; 0:
  //                                               off), see server_options()
  //   --slow_step_warning_s                       log a step running longer, and what it is in
  //                                               (default 30; 0: off)
  //   --orphan_timeout_s                          a ps whose workers are gone stops after it
  //                                               (default 600; 0: never), see server_options()
  //   --startup_timeout_s                         how long to wait for the cluster at start
  //                                               (default 120)
  //   --slurm_jobs                                e.g. ps:1,worker:3: the cluster and this task
  //                                               from the Slurm step (SlurmConfig::resolve;
  //                                               ranks fill the jobs in name order)
  //   --slurm_port_base                           with --slurm_jobs: the first port on each node
  //                                               (default 8888)
  //   --checkpoint_dir                            this task's own checkpoint directory; also
  //                                               left in remaining_args (a program's chief
  //                                               reads it as its checkpoint directory)
  //   --bind_all[=true|false]                     listen on every interface (server_options())
  //   --secret_file                               file with the cluster secret (server_options())
  //   --tls_cert, --tls_key, --tls_ca             this task's certificate, its key and the
  //                                               cluster's CA (PEM): mutual TLS (all three)
  // A "--" ends our flags; it and everything after it are left in remaining_args. When no
  // *_hosts flag is given, the cluster comes from TF_CONFIG, and so do the job name and index
  // unless --job_name / --task_index override them. Throws InvalidArgument, saying what to pass,
  // for: no cluster at all, a flag without its value, a missing job name, a job name the cluster
  // does not have, a task index that is not a non-negative integer or is out of range, malformed
  // TF_CONFIG, and every address ClusterSpec rejects. Unlike TF, a cluster without ps tasks
  // (--ps_hosts empty or missing, no "ps" job in TF_CONFIG) is an error too, unless
  // `require_ps_job` is false: a between-graph program would otherwise silently keep every
  // variable on its worker. (Training in one process is asked for by starting the program
  // without --job_name and TF_CONFIG, not by an empty ps job.)
  // This form, for a program's main(), also answers --help (prints help() and exits 0) and
  // rejects every argument that is not one of these flags with InvalidArgument naming it and
  // the nearest flag (a program with flags of its own reads them all with psflow::Flags).
  static TaskFlags parse(int argc, const char* const* argv,
                         bool require_ps_job = true);  // reads TF_CONFIG from the env
  // Testable form: `args` is argv as strings (args[0] is the program); `tf_config` is TF_CONFIG's
  // value (nullopt or "" when unset); `slurm` the Slurm variables --slurm_jobs reads (nullptr:
  // this process's, read only when --slurm_jobs is given).
  static TaskFlags parse(const std::vector<std::string>& args,
                         std::optional<std::string_view> tf_config, bool require_ps_job = true,
                         const SlurmEnvironment* slurm = nullptr);

  // The names of the flags parse() reads ("ps_hosts", "job_name", ...).
  static const std::vector<std::string>& flag_names();
  // What --help says of them, one entry per line.
  static std::string help();

  // TF's convention: task 0 of the "chief" job if the cluster has one, else of "master", else of
  // "worker".
  bool is_chief() const;
  // "/job:<job_name>/task:<task_index>", e.g. as replica_device_setter's worker_device.
  std::string device() const;
  // This task's host:port.
  std::string address() const { return cluster.task_address(job_name, task_index); }
  // ServerOptions with what the flags say: heartbeat_timeout, slow_step_warning, orphan_timeout,
  // checkpoint_dir;
  // bind_address for --bind_all; the TLS files of --tls_cert, --tls_key, --tls_ca (the Server
  // checks them); cluster_secret read from --secret_file (one trailing newline dropped), else
  // PSFLOW_CLUSTER_SECRET's. Throws InvalidArgument for a secret file that cannot be read or is
  // empty.
  ServerOptions server_options() const;
};

// ---------------------------------------------------------------------------------------------
// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace detail {

// A flag's value in seconds: a number from 0 to 1e6, else InvalidArgument saying what 0 does
// (`zero_turns_off`, "" when 0 is no choice).
PSFLOW_DECL double parse_seconds_flag(std::string_view name, const std::string& value,
                                      std::string_view zero_turns_off) {
  char* end = nullptr;
  const double seconds = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(seconds >= 0) || seconds > 1e6)
    throw InvalidArgument(
        "--" + std::string(name) + "='" + value + "' is not a number of seconds; give e.g. 10" +
        (zero_turns_off.empty() ? std::string()
                                : ", or 0 to turn " + std::string(zero_turns_off) + " off"));
  return seconds;
}

PSFLOW_DECL std::size_t parse_task_index(std::string_view text, const std::string& what) {
  if (!is_all_digits(text) || text.size() > 9) {
    throw InvalidArgument(what + " '" + std::string(text) +
                          "' is not a task index; give a non-negative integer, e.g. 0");
  }
  return static_cast<std::size_t>(std::stoul(std::string(text)));
}

PSFLOW_DECL std::vector<std::string> split_host_list(std::string_view list) {
  std::vector<std::string> hosts;
  for (std::string_view item : split(list, ',')) {
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty()) hosts.emplace_back(item);
  }
  return hosts;
}

}  // namespace detail

PSFLOW_DECL TfConfig TfConfig::parse(std::string_view json) {
  const nlohmann::json config = detail::parse_tf_config(json);
  const auto cluster = config.find("cluster");
  if (cluster == config.end()) {
    throw InvalidArgument(std::string("TF_CONFIG has no \"cluster\" entry; expected ") +
                          detail::kTfConfigExample);
  }
  TfConfig out{ClusterSpec::from_json(*cluster), std::nullopt, std::nullopt};
  const auto task = config.find("task");
  if (task == config.end()) return out;
  const std::string expected = R"({"type": "worker", "index": 0})";
  detail::require_object(*task, "TF_CONFIG's \"task\"", expected);
  const auto type = task->find("type");
  if (type == task->end() || !type->is_string() || type->get<std::string>().empty()) {
    throw InvalidArgument(
        "TF_CONFIG's \"task\" needs a \"type\" naming this task's job; expected " + expected);
  }
  out.task_type = type->get<std::string>();
  const auto index = task->find("index");
  if (index == task->end()) {
    out.task_index = 0;
  } else if (index->is_number_unsigned()) {
    out.task_index = index->get<std::size_t>();
  } else if (index->is_string()) {
    out.task_index = detail::parse_task_index(index->get<std::string>(), "TF_CONFIG task index");
  } else {
    throw InvalidArgument("TF_CONFIG's \"task\" \"index\" must be a non-negative integer (got " +
                          index->dump() + "); expected " + expected);
  }
  return out;
}

PSFLOW_DECL TaskFlags TaskFlags::parse(int argc, const char* const* argv, bool require_ps_job) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) args.emplace_back(argv[i] ? argv[i] : "");
  const std::string program = args.empty() ? "program" : args[0];
  for (std::size_t i = 1; i < args.size() && args[i] != "--"; ++i)
    if (detail::is_help_flag(args[i])) {
      std::printf(
          "%s: one task of a cluster, TF's flags:\n\nFlags (defaults in parentheses):\n%s%s",
          program.c_str(), help().c_str(), detail::help_entry("--help", "this text").c_str());
      std::exit(0);
    }
  // What is not ours is named before anything else is checked: "--job-name=ps" is not a
  // missing --job_name.
  const auto& known = flag_names();
  for (std::size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    const detail::FlagArgument flag = detail::split_flag_argument(args[i]);
    if (flag.dashes > 0 && std::find(known.begin(), known.end(), flag.name) != known.end()) {
      // "--name value": skip the value
      if (!flag.value && flag.name != "bind_all" && i + 1 < args.size() &&
          detail::looks_like_value(args[i + 1]))
        ++i;
      continue;
    }
    const std::string why = flag.dashes == 0 ? "unexpected argument '" + args[i] +
                                                   "': every argument is a flag, --name=value"
                                             : detail::unknown_flag_text(args[i], flag.name, known);
    throw InvalidArgument(why + "; run '" + program + " --help' for the flags");
  }
  const char* env = std::getenv("TF_CONFIG");
  return parse(args, env ? std::optional<std::string_view>(env) : std::nullopt, require_ps_job);
}

PSFLOW_DECL const std::vector<std::string>& TaskFlags::flag_names() {
  static const std::vector<std::string> names{"ps_hosts",
                                              "worker_hosts",
                                              "chief_hosts",
                                              "job_name",
                                              "task_index",
                                              "checkpoint_dir",
                                              "bind_all",
                                              "secret_file",
                                              "tls_cert",
                                              "tls_key",
                                              "tls_ca",
                                              "heartbeat_timeout_s",
                                              "slow_step_warning_s",
                                              "orphan_timeout_s",
                                              "startup_timeout_s",
                                              "slurm_jobs",
                                              "slurm_port_base"};
  return names;
}

PSFLOW_DECL std::string TaskFlags::help() {
  static constexpr std::pair<const char*, const char*> kEntries[] = {
      {"--ps_hosts --worker_hosts --job_name --task_index",
       "the cluster and this task, as in TF (TF_CONFIG when no *_hosts\n"
       "flag is given; --chief_hosts for a chief job)"},
      {"--slurm_jobs=ps:1,worker:2 --slurm_port_base (8888)",
       "instead: the cluster and this task from the Slurm step\n(deploy/slurm/psflow.sbatch)"},
      {"--checkpoint_dir", "this task's own checkpoint directory (a ps: its shards)"},
      {"--bind_all", "listen on every interface, not only on this task's address"},
      {"--secret_file",
       "a file with the cluster secret: only tasks that know it get in\n"
       "(default: the environment variable PSFLOW_CLUSTER_SECRET; see\ndocs/security.md)"},
      {"--tls_cert --tls_key --tls_ca",
       "this task's certificate, its key and the cluster's CA (PEM\n"
       "files): mutual TLS between the tasks (all three; see\ndocs/security.md)"},
      {"--heartbeat_timeout_s (10)", "a peer silent this long is declared dead (0: never)"},
      {"--slow_step_warning_s (30)",
       "log a step running here this long, and the ops it is in\n(again every period; 0: never)"},
      {"--orphan_timeout_s (600)", "a ps whose workers are all gone this long stops (0: never)"},
      {"--startup_timeout_s (120)", "how long a worker waits for its cluster at start"},
  };
  std::string out;
  for (const auto& [head, text] : kEntries) out += detail::help_entry(head, text);
  return out;
}

PSFLOW_DECL TaskFlags TaskFlags::parse(const std::vector<std::string>& args,
                                       std::optional<std::string_view> tf_config,
                                       bool require_ps_job, const SlurmEnvironment* slurm) {
  const std::string usage =
      "pass --ps_hosts=host:port,... --worker_hosts=host:port,... --job_name=<ps|worker> "
      "--task_index=<N>, or set TF_CONFIG";

  TaskFlags out;
  ClusterSpec::JobMap jobs;
  bool host_flags = false;
  std::optional<std::string> job_flag;
  std::optional<std::string> index_flag;
  std::optional<std::string> slurm_jobs_flag, slurm_port_flag;

  std::size_t i = 0;
  if (!args.empty()) out.remaining_args.push_back(args[i++]);
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    const detail::FlagArgument flag = detail::split_flag_argument(arg);
    const std::string& name = flag.name;
    if (flag.dashes == 0) {
      out.remaining_args.push_back(arg);
      continue;
    }
    if (name == "checkpoint_dir") {  // read, and left for the program too (see above)
      out.remaining_args.push_back(arg);
      if (flag.value)
        out.checkpoint_dir = *flag.value;
      else if (i + 1 < args.size() && detail::looks_like_value(args[i + 1]))
        out.remaining_args.push_back(out.checkpoint_dir = args[++i]);
      continue;
    }
    if (name == "bind_all") {  // a switch: no value, or =true / =false
      const std::string value = flag.value.value_or("true");
      if (value != "true" && value != "false" && value != "1" && value != "0")
        throw InvalidArgument("--bind_all takes no value, or =true / =false (got '" + value + "')");
      out.bind_all = value == "true" || value == "1";
      continue;
    }
    const auto& ours = flag_names();
    if (std::find(ours.begin(), ours.end(), name) == ours.end()) {
      out.remaining_args.push_back(arg);
      continue;
    }
    std::string value;
    if (flag.value) {
      value = *flag.value;
    } else if (i + 1 < args.size() && detail::looks_like_value(args[i + 1])) {
      value = args[++i];
    } else {
      throw InvalidArgument("flag --" + name + " needs a value (--" + name + "=<value>); " + usage);
    }
    if (name == "secret_file") {
      if (value.empty()) throw InvalidArgument("--secret_file is empty; give the secret's file");
      out.secret_file = value;
    } else if (name == "tls_cert" || name == "tls_key" || name == "tls_ca") {
      if (value.empty()) {
        std::string message = "--";
        message += name;
        message += " is empty; give a PEM file (docs/security.md)";
        throw InvalidArgument(message);
      }
      (name == "tls_cert" ? out.tls_cert : name == "tls_key" ? out.tls_key : out.tls_ca) = value;
    } else if (name == "heartbeat_timeout_s") {
      out.heartbeat_timeout_s = detail::parse_seconds_flag(name, value, "heartbeats");
    } else if (name == "slow_step_warning_s") {
      out.slow_step_warning_s = detail::parse_seconds_flag(name, value, "the warning");
    } else if (name == "orphan_timeout_s") {
      out.orphan_timeout_s = detail::parse_seconds_flag(name, value, "the orphan watch");
    } else if (name == "startup_timeout_s") {
      out.startup_timeout_s = detail::parse_seconds_flag(name, value, "");
      if (out.startup_timeout_s == 0)
        throw InvalidArgument("--startup_timeout_s=0: give the seconds to wait for the cluster");
    } else if (name == "job_name") {
      job_flag = value;
    } else if (name == "task_index") {
      index_flag = value;
    } else if (name == "slurm_jobs") {
      slurm_jobs_flag = value;
    } else if (name == "slurm_port_base") {
      slurm_port_flag = value;
    } else {  // --ps_hosts, --worker_hosts, --chief_hosts
      host_flags = true;
      const std::string job(name.substr(0, name.size() - std::string_view("_hosts").size()));
      jobs.erase(job);  // a repeated flag replaces the earlier one
      std::vector<std::string> hosts = detail::split_host_list(value);
      if (!hosts.empty()) jobs.emplace(job, std::move(hosts));
    }
  }
  for (; i < args.size(); ++i) out.remaining_args.push_back(args[i]);

  std::optional<std::string> job_name = job_flag;
  std::optional<std::size_t> task_index;
  if (index_flag) task_index = detail::parse_task_index(*index_flag, "--task_index");
  const bool have_tf_config = tf_config && !tf_config->empty();
  if (slurm_jobs_flag) {
    if (host_flags || job_flag || index_flag) {
      throw InvalidArgument(
          "--slurm_jobs gives the cluster and this task (from SLURM_PROCID); "
          "leave out --*_hosts, --job_name and --task_index");
    }
    SlurmOptions options{SlurmOptions::parse_jobs(*slurm_jobs_flag)};
    if (slurm_port_flag) {
      const bool ok = detail::is_all_digits(*slurm_port_flag) && slurm_port_flag->size() <= 5 &&
                      std::stoul(*slurm_port_flag) >= 1 && std::stoul(*slurm_port_flag) <= 65535;
      if (!ok) {
        throw InvalidArgument("--slurm_port_base='" + *slurm_port_flag +
                              "' is not a port in 1..65535; give the first port to use on each "
                              "node, e.g. 8888");
      }
      options.port_base = static_cast<std::uint16_t>(std::stoul(*slurm_port_flag));
    }
    SlurmConfig config =
        SlurmConfig::resolve(options, slurm ? *slurm : SlurmEnvironment::current());
    out.cluster = std::move(config.cluster);
    job_name = config.job_name;
    task_index = config.task_index;
  } else if (slurm_port_flag) {
    throw InvalidArgument("--slurm_port_base needs --slurm_jobs (e.g. --slurm_jobs=ps:1,worker:3)");
  } else if (host_flags) {
    if (jobs.empty()) throw InvalidArgument("every *_hosts flag is empty; " + usage);
    out.cluster = ClusterSpec(std::move(jobs));
    if (!job_name) throw InvalidArgument("--job_name is missing; " + usage);
  } else if (have_tf_config) {
    TfConfig config = TfConfig::parse(*tf_config);
    out.cluster = std::move(config.cluster);
    if (!job_name) job_name = config.task_type;
    if (!task_index) task_index = config.task_index;
    if (!job_name) {
      throw InvalidArgument(
          "TF_CONFIG has no \"task\" and --job_name was not given; add \"task\": {\"type\": "
          "\"worker\", \"index\": 0} to TF_CONFIG or pass --job_name and --task_index");
    }
  } else {
    throw InvalidArgument("no cluster given; " + usage + "='" + detail::kTfConfigExample + "'");
  }

  out.job_name = *job_name;
  out.task_index = task_index.value_or(0);
  if (out.job_name.empty()) throw InvalidArgument("the job name is empty; " + usage);
  if (!out.cluster.has_job(out.job_name)) {
    throw InvalidArgument("unknown job name '" + out.job_name + "': the cluster's jobs are " +
                          detail::join_names(out.cluster.jobs()) +
                          "; pass one of them as --job_name (or TF_CONFIG's task type)");
  }
  const std::size_t n = out.cluster.num_tasks(out.job_name);
  if (out.task_index >= n) {
    throw InvalidArgument("task index " + std::to_string(out.task_index) +
                          " is out of range: job '" + out.job_name + "' has " + std::to_string(n) +
                          " task(s)" + (n ? ", 0.." + std::to_string(n - 1) : std::string()) +
                          "; pass a smaller --task_index or list more hosts for the job");
  }
  if (require_ps_job && !out.cluster.has_job("ps")) {
    throw InvalidArgument(
        std::string(slurm_jobs_flag ? "--slurm_jobs has no ps job"
                    : host_flags    ? "--ps_hosts is empty or missing"
                                    : "TF_CONFIG's cluster has no \"ps\" job") +
        ": a between-graph program keeps its variables on ps tasks, and without any every "
        "variable would silently stay on its worker. List the ps tasks (--ps_hosts=host:port,... "
        "or a \"ps\" job in TF_CONFIG), or start the program without --job_name and TF_CONFIG "
        "to train in one process");
  }
  return out;
}

PSFLOW_DECL bool TaskFlags::is_chief() const {
  for (const char* chief_job : {"chief", "master"}) {
    if (cluster.has_job(chief_job)) return job_name == chief_job && task_index == 0;
  }
  return job_name == "worker" && task_index == 0;
}

PSFLOW_DECL std::string TaskFlags::device() const {
  return detail::task_name(job_name, task_index);
}

PSFLOW_DECL ServerOptions TaskFlags::server_options() const {
  ServerOptions options;
  // Every IPv4 interface; every interface when the task's own address is an IPv6 literal ("::"
  // would fail where IPv6 is switched off, as in some containers).
  options.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(heartbeat_timeout_s * 1000));
  options.slow_step_warning =
      std::chrono::milliseconds(static_cast<std::int64_t>(slow_step_warning_s * 1000));
  options.orphan_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(orphan_timeout_s * 1000));
  options.checkpoint_dir = checkpoint_dir;  // a ps's own shard directory
  if (bind_all) options.bind_address = address().find('[') == 0 ? "::" : "0.0.0.0";
  options.tls_cert_file = tls_cert;
  options.tls_key_file = tls_key;
  options.tls_ca_file = tls_ca;
  if (!secret_file.empty()) {
    std::ifstream in(secret_file, std::ios::binary);
    std::ostringstream text;
    if (in) text << in.rdbuf();
    if (!in || in.bad())
      throw InvalidArgument("cannot read --secret_file '" + secret_file +
                            "': give a readable file holding the cluster secret");
    std::string secret = text.str();
    if (secret.ends_with('\n')) secret.pop_back();
    if (secret.ends_with('\r')) secret.pop_back();
    if (secret.empty())
      throw InvalidArgument("--secret_file '" + secret_file +
                            "' is empty: put the cluster secret in it (e.g. openssl rand -hex 32)");
    options.cluster_secret = std::move(secret);
  }
  return options;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow
