// The example programs' command-line flags, read one way by all of them (the numbered examples,
// add_mul_div, trainer, ctr):
//   - each program registers its flags with a default and a line of help: ExampleFlags::add;
//   - "--name=value", "--name value" and "-name=value" all work, as with TF's flags; a switch
//     stands alone ("--sync_replicas", or --sync_replicas=false);
//   - --help (or -h) prints what the program does and every flag with its default, exits 0;
//   - an unknown flag, a missing or bad value prints what was wrong and how to see the flags,
//     and exits 2;
//   - parse_task() reads the cluster flags (--ps_hosts, --job_name, ..., or TF_CONFIG) with
//     psflow::TaskFlags and the program's own flags here.
// Not thread-safe; call from main().
#pragma once

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <psflow/psflow.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace example {

// What --help says of the flags psflow::TaskFlags reads, for programs that call parse_task().
struct FlagHelp {
  const char* head;
  const char* help;
};
inline constexpr FlagHelp kClusterFlagsHelp[] = {
    {"--ps_hosts --worker_hosts --job_name --task_index",
     "the cluster and this task, as in TF (TF_CONFIG when no *_hosts\n"
     "flag is given)"},
    {"--slurm_jobs=ps:1,worker:2 --slurm_port_base (8888)",
     "instead: the cluster and this task from the Slurm step\n(deploy/slurm/psflow.sbatch)"},
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
};

// `text` as a Number, or nullopt when it is not one (or out of its range).
template <class Number>
std::optional<Number> parse_number(const std::string& text) {
  if (text.empty() || text.front() == ' ') return std::nullopt;
  std::size_t used = 0;
  try {
    if constexpr (std::is_floating_point_v<Number>) {
      const double parsed = std::stod(text, &used);
      if (used == text.size()) return static_cast<Number>(parsed);
    } else if constexpr (std::is_unsigned_v<Number>) {
      const unsigned long long parsed = text.front() == '-' ? 0 : std::stoull(text, &used);
      if (used == text.size() && parsed <= std::numeric_limits<Number>::max())
        return static_cast<Number>(parsed);
    } else {
      const long long parsed = std::stoll(text, &used);
      if (used == text.size() && parsed >= std::numeric_limits<Number>::min() &&
          parsed <= std::numeric_limits<Number>::max())
        return static_cast<Number>(parsed);
    }
  } catch (const std::exception&) {  // not a number, or out of range
  }
  return std::nullopt;
}
// How --help shows a number's default: 30, 0.001.
template <class Number>
std::string number_text(Number n) {
  if constexpr (std::is_floating_point_v<Number>) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", static_cast<double>(n));
    return text;
  } else {
    return std::to_string(n);
  }
}

// Whether `arg` is flag `name`: "--name", "--name=...", "-name" or "-name=...".
inline bool is_flag(const std::string& arg, const std::string& name) {
  for (const std::string prefix : {"--", "-"})
    if (arg == prefix + name || arg.rfind(prefix + name + "=", 0) == 0) return true;
  return false;
}

// The flags psflow::TaskFlags reads besides --job_name and --slurm_jobs: they make sense only
// for a task of a cluster.
inline constexpr const char* kTaskOnlyFlags[] = {
    "ps_hosts",    "worker_hosts", "chief_hosts",         "task_index",          "slurm_port_base",
    "secret_file", "bind_all",     "heartbeat_timeout_s", "slow_step_warning_s", "tls_cert",
    "tls_key",     "tls_ca"};

class ExampleFlags {
 public:
  // `about`: what --help prints first (what the program does, how to run it).
  ExampleFlags(std::string program, std::string about)
      : program_(std::move(program)), about_(std::move(about)) {}

  // A text flag; `value` holds the default and receives what the command line says.
  ExampleFlags& add(const std::string& name, std::string& value, const std::string& help) {
    return add_flag(name, help, value.empty() ? "\"\"" : value, "a value", false,
                    [&value](const std::string& text) {
                      value = text;
                      return true;
                    });
  }
  // A switch: "--name" alone, or --name=true / --name=false.
  ExampleFlags& add(const std::string& name, bool& value, const std::string& help) {
    return add_flag(name, help, value ? "true" : "", "true or false", true,
                    [&value](const std::string& text) {
                      if (text != "true" && text != "false") return false;
                      value = text == "true";
                      return true;
                    });
  }
  // A number flag whose value must be at least `min`.
  template <class Number>
  ExampleFlags& add(const std::string& name, Number& value, const std::string& help, Number min) {
    static_assert(std::is_arithmetic_v<Number>, "a number flag: pass an int, a double, ...");
    const std::string kind = std::is_integral_v<Number> ? "an integer" : "a number";
    return add_flag(name, help, number_text(value), kind + " >= " + number_text(min), false,
                    [&value, min](const std::string& text) {
                      const std::optional<Number> parsed = parse_number<Number>(text);
                      if (!parsed || *parsed < min) return false;
                      value = *parsed;
                      return true;
                    });
  }
  // A flag read by `set`, which returns false (or throws psflow::InvalidArgument, saying why)
  // for a value it does not take. `default_text` is what --help shows as the default ("" for
  // none); a `stands_alone` flag may be given without a value, which then reads "true".
  ExampleFlags& add(const std::string& name, const std::string& help, std::string default_text,
                    std::string expected, bool stands_alone,
                    std::function<bool(const std::string&)> set) {
    return add_flag(name, help, std::move(default_text), std::move(expected), stands_alone,
                    std::move(set));
  }
  // Reads args (args[0] is the program's path) into the registered flags. --help anywhere
  // prints them and exits 0; anything wrong exits 2 after saying what.
  void parse(const std::vector<std::string>& args) const {
    exit_on_help(args, false);
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string& arg = args[i];
      const std::size_t dashes = arg.rfind("--", 0) == 0 ? 2 : arg.rfind('-', 0) == 0 ? 1 : 0;
      if (dashes == 0 || arg.size() == dashes)
        fail("unexpected argument '" + arg + "': every argument is a flag, --name=value");
      const std::size_t eq = arg.find('=');
      const std::string name = arg.substr(dashes, eq == std::string::npos ? eq : eq - dashes);
      const Flag* flag = find(name);
      if (!flag) fail("unknown flag '" + arg + "'");
      std::string value = "true";
      if (eq != std::string::npos)
        value = arg.substr(eq + 1);
      else if (!flag->stands_alone && i + 1 < args.size() && !looks_like_flag(args[i + 1]))
        value = args[++i];
      else if (!flag->stands_alone)
        fail("flag --" + name + " needs a value (--" + name + "=<value>)");
      bool taken = false;
      try {
        taken = flag->set(value);
      } catch (const psflow::InvalidArgument& e) {
        fail(e.what());
      }
      if (!taken) fail("--" + name + "='" + value + "' is not " + flag->expected);
    }
  }
  void parse(int argc, char** argv) const { parse(std::vector<std::string>(argv, argv + argc)); }

  // For a program that runs as one task of a cluster. With --job_name, --slurm_jobs or
  // TF_CONFIG: psflow::TaskFlags reads the cluster and this task, parse() the rest, and the task
  // is returned. Without: parse() reads everything and nullopt is returned (the program runs in
  // this one process); cluster flags without --job_name are an error, not ignored.
  std::optional<psflow::TaskFlags> parse_task(const std::vector<std::string>& args) const {
    exit_on_help(args, true);
    const char* tf_config = std::getenv("TF_CONFIG");
    const bool have_tf_config = tf_config && *tf_config;
    bool has_job = have_tf_config;
    for (const auto& a : args)
      has_job = has_job || is_flag(a, "job_name") || is_flag(a, "slurm_jobs");
    if (!has_job) {
      for (const auto& a : args)
        for (const char* name : kTaskOnlyFlags)
          if (is_flag(a, name))
            fail("'" + a + "' is a flag of one task of a cluster: pass --job_name=ps or " +
                 "--job_name=worker too (and the cluster: --ps_hosts, --worker_hosts, " +
                 "--task_index)");
      parse(args);
      return std::nullopt;
    }
    try {
      psflow::TaskFlags task = psflow::TaskFlags::parse(
          args, have_tf_config ? std::optional<std::string_view>(tf_config) : std::nullopt);
      parse(task.remaining_args);
      return task;
    } catch (const psflow::InvalidArgument& e) {
      fail(e.what());
    }
  }
  std::optional<psflow::TaskFlags> parse_task(int argc, char** argv) const {
    return parse_task(std::vector<std::string>(argv, argv + argc));
  }

  // Says what was wrong with the command line and exits 2.
  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s; run '%s --help' for the flags\n", program_.c_str(), why.c_str(),
                 program_.c_str());
    std::exit(2);
  }

 private:
  struct Flag {
    std::string name, help, default_text;
    std::string expected;  // what a value must be, for the error message
    bool stands_alone;
    std::function<bool(const std::string&)> set;
  };

  ExampleFlags& add_flag(const std::string& name, const std::string& help, std::string default_text,
                         std::string expected, bool stands_alone,
                         std::function<bool(const std::string&)> set) {
    flags_.push_back(Flag{name, help, std::move(default_text), std::move(expected), stands_alone,
                          std::move(set)});
    return *this;
  }
  const Flag* find(const std::string& name) const {
    for (const Flag& f : flags_)
      if (f.name == name) return &f;
    return nullptr;
  }
  // "--x", "-x": not a value of the flag before it ("-1" is a value).
  static bool looks_like_flag(const std::string& arg) {
    return arg.size() > 1 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1])) &&
           arg[1] != '.';
  }

  // "  --name (default)  help", the help's further lines indented under its first.
  static void print_entry(const std::string& head, const std::string& help) {
    constexpr std::size_t kColumn = 33;
    std::string out = "  " + head;
    out += out.size() < kColumn ? std::string(kColumn - out.size(), ' ')
                                : "\n" + std::string(kColumn, ' ');
    for (const char c : help) {
      out += c;
      if (c == '\n') out += std::string(kColumn, ' ');
    }
    std::printf("%s\n", out.c_str());
  }

  // With `cluster_flags`, --help also lists the flags psflow::TaskFlags reads.
  void exit_on_help(const std::vector<std::string>& args, bool cluster_flags) const {
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--") break;
      if (args[i] != "--help" && args[i] != "-help" && args[i] != "-h") continue;
      std::printf("%s: %s\n\nFlags (defaults in parentheses):\n", program_.c_str(), about_.c_str());
      for (const Flag& f : flags_)
        print_entry("--" + f.name + (f.default_text.empty() ? "" : " (" + f.default_text + ")"),
                    f.help);
      if (cluster_flags)
        for (const FlagHelp& f : kClusterFlagsHelp) print_entry(f.head, f.help);
      print_entry("--help", "this text");
      std::exit(0);
    }
  }

  std::string program_, about_;
  std::vector<Flag> flags_;
};

}  // namespace example
