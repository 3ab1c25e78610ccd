// SlurmConfig: the cluster and this process's task from the variables Slurm's srun sets, as
// TensorFlow's SlurmClusterResolver does.
//
// Inside `srun` every task sees the step's nodes (SLURM_STEP_NODELIST, e.g. "node[001-003,7]"),
// how many tasks run on each (SLURM_STEP_TASKS_PER_NODE, e.g. "2(x3),1") and its own rank
// (SLURM_PROCID). From these and the jobs asked for ("ps:1,worker:3") every task computes the
// same ClusterSpec: the k-th task on a node listens on port_base + k, ranks fill the jobs in
// job-name order. The parsing works on plain strings (SlurmEnvironment), so it is testable
// without a Slurm installation; SlurmEnvironment::current() reads the real variables.
// deploy/README.md shows the sbatch script that uses it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/distributed/cluster_spec.hpp"

namespace psflow {

// Node lists and tasks-per-node lists expanding to more than this are rejected: a short value
// must not be able to ask for gigabytes ("n[0-999999999]").
inline constexpr std::size_t kMaxSlurmHosts = 65536;
// The most tasks a Slurm step may have for psflow (sum over the nodes, and over the jobs).
inline constexpr std::size_t kMaxSlurmTasks = 65536;

// What the program asks of the Slurm step.
struct SlurmOptions {
  // Job name -> number of tasks. Rank r goes to the jobs in job-name order, as TF's resolver
  // sorts them: {"ps": 1, "worker": 3} makes rank 0 /job:ps/task:0 and ranks 1..3
  // /job:worker/task:0..2, whatever order the flag listed them in. Empty: every task is a
  // "worker" (TF's default). The counts must add up to the step's number of tasks.
  std::map<std::string, std::size_t> jobs;
  // The first task on each node listens on port_base, the next on port_base + 1, ... (TF: 8888).
  std::uint16_t port_base = 8888;

  // Parses "ps:1,worker:3" (the --slurm_jobs flag). Throws InvalidArgument for an empty value,
  // an item that is not name:count, a name that cannot be a job name, a job listed twice and a
  // count that is not a non-negative integer or adds up to more than kMaxSlurmTasks.
  static std::map<std::string, std::size_t> parse_jobs(std::string_view value);
};

// The values of Slurm's variables, by name ("SLURM_PROCID" -> "3"); a name that is absent is
// unset. Tests and fuzzers fill it by hand; current() reads this process's environment.
struct SlurmEnvironment {
  std::map<std::string, std::string> variables;

  // Every variable SlurmConfig::resolve may read, from the process environment.
  static SlurmEnvironment current();
  // The value of `name`, or nullptr when it is unset.
  const std::string* find(const std::string& name) const;
};

// The cluster and this task, resolved from a Slurm step.
struct SlurmConfig {
  ClusterSpec cluster;
  std::string job_name;
  std::size_t task_index = 0;
  std::size_t rank = 0;            // SLURM_PROCID
  std::vector<std::string> hosts;  // the step's nodes, in Slurm's order

  // Reads, in this order of preference:
  //   SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_TASKS (srun sets these), or,
  //   outside a step, SLURM_JOB_NODELIST (or SLURM_NODELIST), SLURM_TASKS_PER_NODE, SLURM_NTASKS;
  //   SLURM_PROCID (required), and SLURM_LOCALID and SLURMD_NODENAME when set, to check that
  //   this task really runs where the cluster says.
  // The step's variables are used together or not at all, so a step on part of the allocation
  // never mixes with the job's list. Tasks are laid out in blocks, in node-list order (Slurm's
  // default --distribution=block): ranks 0..n0-1 on the first node, and so on. Unlike TF, which
  // sorts host names as strings (putting "n10" before "n9") and drops zero padding (naming
  // "node1" for "node[001]"), the node list's order and padding are kept. Throws
  // InvalidArgument, naming the variable and what to do, for a missing or malformed variable,
  // lists that disagree, a node listed twice, jobs that do not add up to the step's tasks, a
  // port above 65535, a rank out of range, and a task that runs elsewhere than its rank's block
  // (srun --distribution=cyclic).
  static SlurmConfig resolve(const SlurmOptions& options, const SlurmEnvironment& env);
  // The same from this process's environment.
  static SlurmConfig resolve(const SlurmOptions& options = {});
};

// "node[001-003,7],gpu-a1" -> node001, node002, node003, node7, gpu-a1: each comma-separated item
// is a host name or a prefix followed by one bracketed list of numbers and ranges; a number is
// written with at least as many digits as the range's first bound ("[08-10]" gives 08, 09, 10).
// `variable` names the value in error messages. Throws InvalidArgument for a malformed list and
// for one expanding to more than kMaxSlurmHosts names.
PSFLOW_DECL std::vector<std::string> expand_slurm_nodelist(
    std::string_view value, std::string_view variable = "SLURM_STEP_NODELIST");

// "2(x3),1" -> 2, 2, 2, 1: a count per node, "(xN)" repeating it for N nodes. Throws
// InvalidArgument for a malformed list, more than kMaxSlurmHosts entries or more than
// kMaxSlurmTasks tasks in all.
PSFLOW_DECL std::vector<std::size_t> expand_slurm_tasks_per_node(
    std::string_view value, std::string_view variable = "SLURM_STEP_TASKS_PER_NODE");

// ---------------------------------------------------------------------------------------------
// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace detail {

// A value as error messages quote it: at most 120 characters.
PSFLOW_DECL std::string slurm_quote(std::string_view variable, std::string_view value) {
  std::string shown(value.substr(0, 120));
  if (value.size() > 120) shown += "...";
  return std::string(variable) + "='" + shown + "'";
}

PSFLOW_DECL bool is_slurm_host_char(char c) {
  return is_ascii_alpha(c) || is_ascii_digit(c) || c == '-' || c == '.' || c == '_';
}

// A decimal number of at most 18 digits (so it fits in 64 bits), or nullopt.
PSFLOW_DECL std::optional<std::uint64_t> parse_slurm_number(std::string_view text) {
  if (!is_all_digits(text) || text.size() > 18) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) value = value * 10 + static_cast<std::uint64_t>(c - '0');
  return value;
}

PSFLOW_DECL std::string pad_number(std::uint64_t value, std::size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

[[noreturn]] inline void throw_bad_nodelist(const std::string& quoted, const std::string& what) {
  throw InvalidArgument(quoted + " is not a node list: " + what +
                        "; a Slurm node list looks like 'node[001-003,7],gpu-a1'. Start the "
                        "program with srun inside a Slurm allocation, or fix the variable");
}

[[noreturn]] inline void throw_bad_tasks_per_node(const std::string& quoted,
                                                  const std::string& what) {
  throw InvalidArgument(quoted + " is not a tasks-per-node list: " + what +
                        "; it looks like '2(x3),1' (2 tasks on each of 3 nodes, then 1). Start "
                        "the program with srun inside a Slurm allocation, or fix the variable");
}

}  // namespace detail

PSFLOW_DECL std::vector<std::string> expand_slurm_nodelist(std::string_view value,
                                                           std::string_view variable) {
  const std::string quoted = detail::slurm_quote(variable, value);
  auto fail = [&quoted](const std::string& what) { detail::throw_bad_nodelist(quoted, what); };
  if (value.empty()) fail("it is empty");

  // Split at the commas outside brackets.
  std::vector<std::string_view> items;
  std::size_t start = 0;
  bool in_brackets = false;
  for (std::size_t i = 0; i <= value.size(); ++i) {
    const char c = i < value.size() ? value[i] : ',';
    if (c == '[') {
      if (in_brackets) fail("'[' inside brackets");
      in_brackets = true;
    } else if (c == ']') {
      if (!in_brackets) fail("']' without '['");
      in_brackets = false;
    } else if (c == ',' && !in_brackets) {
      if (i == start) fail("an empty host name (two commas in a row, or one at an end)");
      items.push_back(value.substr(start, i - start));
      start = i + 1;
    }
  }
  if (in_brackets) fail("a '[' that is never closed");

  std::vector<std::string> hosts;
  for (std::string_view item : items) {
    const std::size_t open = item.find('[');
    const std::string_view prefix = item.substr(0, open);
    for (char c : prefix) {
      if (!detail::is_slurm_host_char(c)) {
        fail("host name '" + std::string(item) + "' has the character '" + std::string(1, c) +
             "' (only letters, digits, '-', '.' and '_' may appear)");
      }
    }
    if (open == std::string_view::npos) {
      if (hosts.size() >= kMaxSlurmHosts) {
        fail("it names more than " + std::to_string(kMaxSlurmHosts) + " hosts, psflow's limit");
      }
      hosts.emplace_back(prefix);
      continue;
    }
    const std::size_t close = item.find(']', open);
    if (close + 1 != item.size()) {
      fail("'" + std::string(item) + "' has text after ']' (a range may only end a host name)");
    }
    const std::string_view ranges = item.substr(open + 1, close - open - 1);
    if (ranges.empty()) fail("'" + std::string(item) + "' has empty brackets");
    for (std::string_view range : detail::split(ranges, ',')) {
      const std::size_t dash = range.find('-');
      const std::string_view low_text = range.substr(0, dash);
      const std::string_view high_text =
          dash == std::string_view::npos ? low_text : range.substr(dash + 1);
      const auto low = detail::parse_slurm_number(low_text);
      const auto high = detail::parse_slurm_number(high_text);
      if (!low || !high) {
        fail("'" + std::string(range) + "' in '" + std::string(item) +
             "' is not a number or a range of numbers like 1-3");
      }
      if (*low > *high) {
        fail("the range '" + std::string(range) + "' in '" + std::string(item) +
             "' runs backwards");
      }
      // Checked before expanding: the list's size, not its text, bounds the memory used.
      if (*high - *low >= kMaxSlurmHosts - hosts.size()) {
        fail("it names more than " + std::to_string(kMaxSlurmHosts) + " hosts, psflow's limit");
      }
      for (std::uint64_t n = *low; n <= *high; ++n) {
        hosts.push_back(std::string(prefix) + detail::pad_number(n, low_text.size()));
      }
    }
  }
  return hosts;
}

PSFLOW_DECL std::vector<std::size_t> expand_slurm_tasks_per_node(std::string_view value,
                                                                 std::string_view variable) {
  const std::string quoted = detail::slurm_quote(variable, value);
  auto fail = [&quoted](const std::string& what) {
    detail::throw_bad_tasks_per_node(quoted, what);
  };
  if (value.empty()) fail("it is empty");
  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (std::string_view item : detail::split(value, ',')) {
    std::string_view count_text = item;
    std::string_view repeat_text = "1";
    const std::size_t paren = item.find('(');
    if (paren != std::string_view::npos) {
      if (!item.ends_with(")") || item.substr(paren).size() < 4 || item[paren + 1] != 'x') {
        fail("'" + std::string(item) + "' is neither a count nor a count(xN)");
      }
      count_text = item.substr(0, paren);
      repeat_text = item.substr(paren + 2, item.size() - paren - 3);
    }
    const auto count = detail::parse_slurm_number(count_text);
    const auto repeat = detail::parse_slurm_number(repeat_text);
    if (!count || !repeat || *repeat == 0) {
      fail("'" + std::string(item) + "' is neither a count nor a count(xN) with N >= 1");
    }
    if (*repeat > kMaxSlurmHosts - counts.size()) {
      fail("it has more than " + std::to_string(kMaxSlurmHosts) + " entries, psflow's limit");
    }
    if (*count > kMaxSlurmTasks || *count * *repeat > kMaxSlurmTasks - total) {
      fail("it adds up to more than " + std::to_string(kMaxSlurmTasks) + " tasks, psflow's limit");
    }
    total += static_cast<std::size_t>(*count * *repeat);
    counts.insert(counts.end(), static_cast<std::size_t>(*repeat),
                  static_cast<std::size_t>(*count));
  }
  return counts;
}

PSFLOW_DECL std::map<std::string, std::size_t> SlurmOptions::parse_jobs(std::string_view value) {
  const std::string quoted = "--slurm_jobs='" + std::string(value.substr(0, 120)) + "'";
  const std::string shape = "; give each job and its number of tasks, e.g. ps:1,worker:3";
  if (value.empty()) throw InvalidArgument(quoted + " is empty" + shape);
  std::map<std::string, std::size_t> jobs;
  std::size_t total = 0;
  for (std::string_view item : detail::split(value, ',')) {
    const std::size_t colon = item.find(':');
    const std::string name(item.substr(0, colon));
    const auto count = colon == std::string_view::npos
                           ? std::nullopt
                           : detail::parse_slurm_number(item.substr(colon + 1));
    if (!count) {
      throw InvalidArgument(quoted + ": '" + std::string(item) + "' is not name:count" + shape);
    }
    if (!is_valid_job_name(name)) {
      throw InvalidArgument(quoted + ": '" + name + "' cannot be a job name (a letter, then " +
                            "letters, digits or '_')" + shape);
    }
    if (*count > kMaxSlurmTasks - total) {
      throw InvalidArgument(quoted + " asks for more than " + std::to_string(kMaxSlurmTasks) +
                            " tasks, psflow's limit for a Slurm step");
    }
    total += static_cast<std::size_t>(*count);
    if (!jobs.emplace(name, static_cast<std::size_t>(*count)).second) {
      throw InvalidArgument(quoted + " lists job '" + name + "' twice; list each job once");
    }
  }
  return jobs;
}

PSFLOW_DECL SlurmEnvironment SlurmEnvironment::current() {
  SlurmEnvironment env;
  for (const char* name :
       {"SLURM_PROCID", "SLURM_LOCALID", "SLURMD_NODENAME", "SLURM_STEP_NODELIST",
        "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
        "SLURM_TASKS_PER_NODE", "SLURM_NTASKS"}) {
    if (const char* value = std::getenv(name)) env.variables.emplace(name, value);
  }
  return env;
}

PSFLOW_DECL const std::string* SlurmEnvironment::find(const std::string& name) const {
  const auto it = variables.find(name);
  return it == variables.end() ? nullptr : &it->second;
}

PSFLOW_DECL SlurmConfig SlurmConfig::resolve(const SlurmOptions& options,
                                             const SlurmEnvironment& env) {
  const std::string not_in_slurm =
      "; start the program with srun inside a Slurm allocation (deploy/slurm/psflow.sbatch), or "
      "give the cluster with --ps_hosts/--worker_hosts or TF_CONFIG";

  // The step's variables, or else the job's: never a mix of the two.
  const bool in_step = env.find("SLURM_STEP_NODELIST") != nullptr;
  std::string nodelist_var = in_step ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  if (!in_step && !env.find(nodelist_var) && env.find("SLURM_NODELIST")) {
    nodelist_var = "SLURM_NODELIST";
  }
  const std::string tasks_var = in_step ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  const std::string ntasks_var = in_step ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  const std::string* nodelist = env.find(nodelist_var);
  if (!nodelist) {
    throw InvalidArgument(
        "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set: this is "
        "not a Slurm job" +
        not_in_slurm);
  }
  const std::string* tasks_per_node = env.find(tasks_var);
  if (!tasks_per_node) {
    throw InvalidArgument(nodelist_var + " is set but " + tasks_var +
                          " is not, so the tasks on each node are unknown" + not_in_slurm);
  }
  const std::string* procid = env.find("SLURM_PROCID");
  if (!procid) {
    throw InvalidArgument("SLURM_PROCID is not set, so this task's rank is unknown" + not_in_slurm);
  }

  SlurmConfig out;
  out.hosts = expand_slurm_nodelist(*nodelist, nodelist_var);
  const std::vector<std::size_t> counts = expand_slurm_tasks_per_node(*tasks_per_node, tasks_var);
  if (counts.size() != out.hosts.size()) {
    throw InvalidArgument(detail::slurm_quote(nodelist_var, *nodelist) + " names " +
                          std::to_string(out.hosts.size()) + " node(s) but " +
                          detail::slurm_quote(tasks_var, *tasks_per_node) + " gives counts for " +
                          std::to_string(counts.size()) +
                          "; both must describe the same nodes (set them from one Slurm step)");
  }
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < out.hosts.size(); ++i) {
    if (!seen.emplace(out.hosts[i], i).second) {
      throw InvalidArgument(detail::slurm_quote(nodelist_var, *nodelist) + " lists node '" +
                            out.hosts[i] + "' twice; Slurm lists every node once");
    }
  }
  std::size_t total = 0;
  std::size_t most_on_a_node = 0;
  for (std::size_t count : counts) {
    total += count;
    most_on_a_node = std::max(most_on_a_node, count);
  }
  if (total == 0) {
    throw InvalidArgument(detail::slurm_quote(tasks_var, *tasks_per_node) +
                          " has no tasks; run the program with srun --ntasks=N");
  }
  if (const std::string* ntasks = env.find(ntasks_var)) {
    const auto n = detail::parse_slurm_number(*ntasks);
    if (!n || *n != total) {
      throw InvalidArgument(detail::slurm_quote(ntasks_var, *ntasks) + " disagrees with " +
                            detail::slurm_quote(tasks_var, *tasks_per_node) +
                            ", which adds up to " + std::to_string(total) +
                            " tasks; set them from one Slurm step");
    }
  }
  if (static_cast<std::size_t>(options.port_base) + most_on_a_node - 1 > 65535) {
    throw InvalidArgument("port base " + std::to_string(options.port_base) + " with " +
                          std::to_string(most_on_a_node) +
                          " tasks on a node needs ports above 65535; give a smaller "
                          "--slurm_port_base");
  }

  std::map<std::string, std::size_t> jobs = options.jobs;
  if (jobs.empty()) jobs.emplace("worker", total);
  std::size_t asked = 0;
  for (const auto& [job, n] : jobs) {
    if (n > kMaxSlurmTasks) {
      throw InvalidArgument("job '" + job + "' asks for " + std::to_string(n) +
                            " tasks, more than psflow's limit of " +
                            std::to_string(kMaxSlurmTasks) + " for a Slurm step");
    }
    asked += n;
  }
  if (asked != total) {
    std::string listed;
    for (const auto& [job, n] : jobs)
      listed += (listed.empty() ? "" : ",") + job + ":" + std::to_string(n);
    throw InvalidArgument("the jobs " + listed + " ask for " + std::to_string(asked) +
                          " task(s) but the Slurm step has " + std::to_string(total) + " (" +
                          detail::slurm_quote(tasks_var, *tasks_per_node) +
                          "); make --slurm_jobs add up to " + std::to_string(total) +
                          " or start the step with srun --ntasks=" + std::to_string(asked));
  }

  const auto rank = detail::parse_slurm_number(*procid);
  if (!rank || *rank >= total) {
    throw InvalidArgument(detail::slurm_quote("SLURM_PROCID", *procid) + " is not a rank in 0.." +
                          std::to_string(total - 1) +
                          " (the step's tasks); start the program with srun");
  }
  out.rank = static_cast<std::size_t>(*rank);

  // Block layout: rank r is the (r - first rank on its node)-th task of its node.
  std::vector<std::string> addresses;
  addresses.reserve(total);
  std::size_t my_node = 0, my_local = 0;
  for (std::size_t node = 0; node < out.hosts.size(); ++node) {
    for (std::size_t k = 0; k < counts[node]; ++k) {
      if (addresses.size() == out.rank) {
        my_node = node;
        my_local = k;
      }
      addresses.push_back(out.hosts[node] + ":" + std::to_string(options.port_base + k));
    }
  }
  const std::string cyclic =
      "; psflow expects Slurm's default block layout (ranks fill one node, then the next): start "
      "the program with srun --distribution=block";
  if (const std::string* localid = env.find("SLURM_LOCALID")) {
    const auto local = detail::parse_slurm_number(*localid);
    if (!local || *local != my_local) {
      throw InvalidArgument(detail::slurm_quote("SLURM_LOCALID", *localid) + " but rank " +
                            std::to_string(out.rank) + " should be task " +
                            std::to_string(my_local) + " on its node" + cyclic);
    }
  }
  if (const std::string* nodename = env.find("SLURMD_NODENAME")) {
    if (*nodename != out.hosts[my_node]) {
      throw InvalidArgument(detail::slurm_quote("SLURMD_NODENAME", *nodename) + " but rank " +
                            std::to_string(out.rank) + " should run on node '" +
                            out.hosts[my_node] + "'" + cyclic);
    }
  }

  ClusterSpec::JobMap cluster;
  std::size_t first = 0;
  for (const auto& [job, n] : jobs) {  // job-name order, as TF
    cluster[job].assign(addresses.begin() + static_cast<std::ptrdiff_t>(first),
                        addresses.begin() + static_cast<std::ptrdiff_t>(first + n));
    if (out.rank >= first && out.rank < first + n) {
      out.job_name = job;
      out.task_index = out.rank - first;
    }
    first += n;
  }
  out.cluster = ClusterSpec(std::move(cluster));
  return out;
}

PSFLOW_DECL SlurmConfig SlurmConfig::resolve(const SlurmOptions& options) {
  return resolve(options, SlurmEnvironment::current());
}

PSFLOW_DECL ClusterSpec ClusterSpec::from_slurm(const SlurmOptions& options) {
  return SlurmConfig::resolve(options).cluster;
}

PSFLOW_DECL ClusterSpec ClusterSpec::from_slurm() { return from_slurm(SlurmOptions{}); }

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow
