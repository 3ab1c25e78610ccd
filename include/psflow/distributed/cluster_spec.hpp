// ClusterSpec: the processes of a distributed job, as TensorFlow's tf.train.ClusterSpec.
//
// A cluster is a set of jobs ("ps", "worker", "chief", ...), each an ordered list of tasks given
// by their "host:port" address; task i of job J is the process whose devices are named
// "/job:J/replica:0/task:i/...". Build one from a map, or from the "cluster" part of TensorFlow's
// TF_CONFIG JSON. This header is light on purpose (no Asio): flag parsing and device placement
// code include it without pulling in the network layer.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/device_spec.hpp"
#include "psflow/core/error.hpp"
#include "psflow/distributed/host_port.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <nlohmann/json.hpp>
#endif

namespace psflow {

struct SlurmOptions;  // distributed/slurm_cluster.hpp

// An immutable, validated description of every task in the cluster. A value type: cheap to
// copy for small clusters, safe to read from any thread (no member mutates it).
class ClusterSpec {
 public:
  using JobMap = std::map<std::string, std::vector<std::string>>;

  // The empty cluster (no jobs).
  ClusterSpec() = default;

  // job name -> "host:port" of each task, task i at position i. Throws InvalidArgument for: an
  // empty job name or one that cannot appear in "/job:<name>" (a letter, then letters, digits
  // or '_'), an empty address, an address without ":port", an empty host, a port that is not an
  // integer in 0..65535, a scheme ("grpc://"), an IPv6 host without brackets ("[::1]:2222"),
  // whitespace, or one address used by two tasks (port 0 is exempt: the OS picks a free port
  // for each). A job may have no tasks.
  ClusterSpec(JobMap jobs);  // NOLINT(google-explicit-constructor): mirrors tf.train.ClusterSpec
  // The same from a braced list, ClusterSpec({{"ps", {"h0:2222"}}, {"worker", {...}}}); this
  // overload keeps a one-job, one-task list unambiguous. A job listed twice is InvalidArgument.
  ClusterSpec(std::initializer_list<JobMap::value_type> jobs);  // NOLINT

  // Reads the "cluster" part of a TF_CONFIG string, e.g.
  //   {"cluster": {"ps": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]},
  //    "task": {"type": "worker", "index": 1}}
  // ("task" and any other key are ignored here; see TaskFlags). Throws InvalidArgument for
  // malformed JSON, a missing "cluster" object, a job that is not a list of strings, and
  // everything the constructor rejects.
  static ClusterSpec from_tf_config(std::string_view json);
  // The same from an already-parsed "cluster" object.
  static ClusterSpec from_json(const nlohmann::json& cluster);
  // The cluster of the Slurm step this process runs in (SLURM_STEP_NODELIST, ...), with the
  // jobs and ports `options` asks for; SlurmConfig::resolve (distributed/slurm_cluster.hpp) also
  // gives this process's task and says what each variable must hold.
  static ClusterSpec from_slurm(const SlurmOptions& options);
  static ClusterSpec from_slurm();  // every task a "worker", ports from 8888

  // Job names, sorted.
  std::vector<std::string> jobs() const;
  bool has_job(std::string_view job) const;
  bool empty() const { return jobs_.empty(); }

  // Number of tasks in `job`; throws NotFound (listing the jobs) for an unknown job.
  std::size_t num_tasks(std::string_view job) const;
  // Addresses of `job`'s tasks, by index; throws NotFound for an unknown job.
  const std::vector<std::string>& job_tasks(std::string_view job) const;
  // Address of one task; throws NotFound naming the job and task and saying what exists.
  std::string task_address(std::string_view job, std::size_t task) const;

  // "/job:J/replica:0/task:T" for every task, jobs sorted, tasks in order.
  std::vector<std::string> task_devices() const;

  const JobMap& as_map() const { return jobs_; }
  // The cluster as JSON: {"ps": ["h0:2222"], "worker": [...]}.
  std::string to_json() const;
  // A complete TF_CONFIG for one task of this cluster; throws NotFound if it does not exist.
  std::string to_tf_config_json(std::string_view job, std::size_t task) const;

  friend bool operator==(const ClusterSpec&, const ClusterSpec&) = default;

 private:
  JobMap jobs_;
};

namespace detail {

inline std::string task_name(std::string_view job, std::size_t task) {
  return "/job:" + std::string(job) + "/task:" + std::to_string(task);
}

// The full name of a task, as servers name themselves: "/job:ps/replica:0/task:1".
inline std::string full_task_name(std::string_view job, std::size_t task) {
  return "/job:" + std::string(job) + "/replica:0/task:" + std::to_string(task);
}

// The task a device belongs to: "/job:ps/replica:0/task:1/device:CPU:0" gives
// "/job:ps/replica:0/task:1".
inline std::string task_of_device(const std::string& device) {
  DeviceSpec spec = DeviceSpec::parse(device);
  spec.device_type.reset();
  spec.device_index.reset();
  return spec.to_string();
}

inline std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? std::string("(none)") : out;
}

inline bool is_all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

inline bool has_whitespace(std::string_view s) {
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return true;
  }
  return false;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace detail {

// Checks one "host:port" and returns its duplicate-detection key ("" for port 0: never a
// duplicate). `where` names the task, e.g. "/job:ps/task:0".
PSFLOW_DECL std::string check_address(const std::string& where, std::string_view address) {
  const std::string quoted = "address '" + std::string(address) + "' of " + where;
  const char* example = " e.g. 'localhost:2222'";
  if (address.empty()) {
    throw InvalidArgument("empty address for " + where + "; give its host:port," + example);
  }
  if (has_whitespace(address)) {
    throw InvalidArgument(quoted + " contains whitespace; remove it (write 'host:port')");
  }
  for (char c : address) {
    // Host names and IP addresses are ASCII; other bytes could not even be written as TF_CONFIG.
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      throw InvalidArgument(quoted + " contains a byte that is not printable ASCII (code " +
                            std::to_string(static_cast<unsigned char>(c)) +
                            "); write the host as an ASCII name or an IP address");
    }
  }
  if (address.find("://") != std::string_view::npos) {
    throw InvalidArgument(quoted + " has a scheme; cluster addresses are plain host:port," +
                          example);
  }
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) {
    throw InvalidArgument(quoted + " has no port; write it as host:port," + example +
                          " (port 0 lets the OS pick one)");
  }
  const std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.empty()) {
    throw InvalidArgument(quoted + " has an empty host; write it as host:port," + example);
  }
  if (host.find(':') != std::string_view::npos &&
      !(host.size() > 2 && host.front() == '[' && host.back() == ']')) {
    throw InvalidArgument(quoted + " looks like an IPv6 address without brackets; write it as " +
                          "[host]:port, e.g. '[::1]:2222'");
  }
  const bool numeric = is_all_digits(port) && port.size() <= 5;
  const unsigned long value = numeric ? std::stoul(std::string(port)) : 0;
  if (!numeric || value > 65535) {
    throw InvalidArgument(quoted + ": port '" + std::string(port) +
                          "' is not an integer in 0..65535 (use 0 to let the OS pick one)");
  }
  try {
    split_host_port(address);  // misplaced brackets: "[10.0.0.1:2222", "[::1]x:2222"
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(e.message() + " (" + where + ")");
  }
  if (value == 0) return {};
  std::string key(host);
  for (char& c : key) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return key + ":" + std::to_string(value);
}

PSFLOW_DECL const nlohmann::json& require_object(const nlohmann::json& value,
                                                 const std::string& what,
                                                 const std::string& expected) {
  if (!value.is_object()) {
    throw InvalidArgument(what + " must be a JSON object (got " + value.type_name() +
                          "); expected " + expected);
  }
  return value;
}

PSFLOW_DECL nlohmann::json parse_json(std::string_view text, const std::string& what,
                                      const std::string& expected) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw InvalidArgument(what + " is not valid JSON (" + e.what() + "); expected " + expected);
  }
}

inline constexpr const char* kTfConfigExample =
    R"({"cluster": {"ps": ["host0:2222"], "worker": ["host1:2222"]}, )"
    R"("task": {"type": "worker", "index": 0}})";

// Parses a TF_CONFIG string and returns its top-level object.
PSFLOW_DECL nlohmann::json parse_tf_config(std::string_view text) {
  nlohmann::json config = parse_json(text, "TF_CONFIG", kTfConfigExample);
  require_object(config, "TF_CONFIG", kTfConfigExample);
  return config;
}

}  // namespace detail

PSFLOW_DECL ClusterSpec::ClusterSpec(JobMap jobs) : jobs_(std::move(jobs)) {
  std::map<std::string, std::string> used;  // address key -> task that uses it
  for (const auto& [job, tasks] : jobs_) {
    if (job.empty()) {
      throw InvalidArgument(
          "a job in the cluster has an empty name; name every job, e.g. 'ps' or 'worker'");
    }
    if (!is_valid_job_name(job)) {
      throw InvalidArgument("job name '" + job + "' cannot appear in a device string " +
                            "(/job:<name>); use a letter followed by letters, digits or '_'");
    }
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const std::string where = detail::task_name(job, i);
      const std::string key = detail::check_address(where, tasks[i]);
      if (key.empty()) continue;
      const auto [it, inserted] = used.emplace(key, where);
      if (!inserted) {
        throw InvalidArgument("address '" + tasks[i] + "' is used by both " + it->second + " and " +
                              where + "; give every task its own host:port " +
                              "(or port 0 to let the OS pick one)");
      }
    }
  }
}

PSFLOW_DECL ClusterSpec::ClusterSpec(std::initializer_list<JobMap::value_type> jobs)
    : ClusterSpec(JobMap(jobs)) {
  if (jobs_.size() != jobs.size()) {
    std::map<std::string, int> count;
    for (const auto& entry : jobs) {
      if (++count[entry.first] == 2) {
        throw InvalidArgument("job '" + entry.first + "' is listed twice in the cluster; list " +
                              "each job once with all its tasks");
      }
    }
  }
}

PSFLOW_DECL ClusterSpec ClusterSpec::from_json(const nlohmann::json& cluster) {
  const std::string expected = R"({"ps": ["host0:2222"], "worker": ["host1:2222", ...]})";
  detail::require_object(cluster, "TF_CONFIG's \"cluster\"", expected);
  JobMap jobs;
  for (const auto& [job, tasks] : cluster.items()) {
    const std::string what = "job '" + job + "' in TF_CONFIG's \"cluster\"";
    if (!tasks.is_array()) {
      throw InvalidArgument(what + " must be a list of \"host:port\" strings (got " +
                            tasks.type_name() + ")");
    }
    std::vector<std::string> addresses;
    for (const auto& address : tasks) {
      if (!address.is_string()) {
        throw InvalidArgument(what + " must be a list of \"host:port\" strings (task " +
                              std::to_string(addresses.size()) + " is a " + address.type_name() +
                              ")");
      }
      addresses.push_back(address.get<std::string>());
    }
    jobs.emplace(job, std::move(addresses));
  }
  return ClusterSpec(std::move(jobs));
}

PSFLOW_DECL ClusterSpec ClusterSpec::from_tf_config(std::string_view json) {
  const nlohmann::json config = detail::parse_tf_config(json);
  const auto it = config.find("cluster");
  if (it == config.end()) {
    throw InvalidArgument(std::string("TF_CONFIG has no \"cluster\" entry; expected ") +
                          detail::kTfConfigExample);
  }
  return from_json(*it);
}

PSFLOW_DECL std::vector<std::string> ClusterSpec::jobs() const {
  std::vector<std::string> names;
  names.reserve(jobs_.size());
  for (const auto& entry : jobs_) names.push_back(entry.first);
  return names;
}

PSFLOW_DECL bool ClusterSpec::has_job(std::string_view job) const {
  return jobs_.find(std::string(job)) != jobs_.end();
}

PSFLOW_DECL const std::vector<std::string>& ClusterSpec::job_tasks(std::string_view job) const {
  const auto it = jobs_.find(std::string(job));
  if (it == jobs_.end()) {
    throw NotFound("no job '" + std::string(job) + "' in the cluster; its jobs are: " +
                   detail::join_names(jobs()) + ". Check the job name or add the job");
  }
  return it->second;
}

PSFLOW_DECL std::size_t ClusterSpec::num_tasks(std::string_view job) const {
  return job_tasks(job).size();
}

PSFLOW_DECL std::string ClusterSpec::task_address(std::string_view job, std::size_t task) const {
  const auto& tasks = job_tasks(job);
  if (task >= tasks.size()) {
    const std::string has = tasks.empty() ? std::string("has no tasks")
                                          : "has " + std::to_string(tasks.size()) +
                                                " task(s), 0.." + std::to_string(tasks.size() - 1);
    throw NotFound("no task " + std::to_string(task) + " in job '" + std::string(job) +
                   "', which " + has + "; check the task index or list more addresses");
  }
  return tasks[task];
}

PSFLOW_DECL std::vector<std::string> ClusterSpec::task_devices() const {
  std::vector<std::string> devices;
  for (const auto& [job, tasks] : jobs_) {
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      devices.push_back("/job:" + job + "/replica:0/task:" + std::to_string(i));
    }
  }
  return devices;
}

PSFLOW_DECL std::string ClusterSpec::to_json() const {
  nlohmann::json cluster = nlohmann::json::object();
  for (const auto& [job, tasks] : jobs_) cluster[job] = tasks;
  return cluster.dump();
}

PSFLOW_DECL std::string ClusterSpec::to_tf_config_json(std::string_view job,
                                                       std::size_t task) const {
  task_address(job, task);  // throws NotFound for a task that does not exist
  nlohmann::json config;
  config["cluster"] = nlohmann::json::object();
  for (const auto& [name, tasks] : jobs_) config["cluster"][name] = tasks;
  config["task"] = {{"type", std::string(job)}, {"index", task}};
  return config.dump();
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow

#if PSFLOW_COMPILES_IMPLEMENTATION
#include "psflow/distributed/slurm_cluster.hpp"  // from_slurm's definition
#endif
