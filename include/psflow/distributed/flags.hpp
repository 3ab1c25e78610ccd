// Flags: a program's command-line flags, read the way TF's flags are, with the cluster flags
// TaskFlags reads as one group among them:
//   - each flag has a default (its variable's value when added) and a line of help;
//   - "--name=value", "--name value" and "-name=value" all work; a switch stands alone
//     ("--sync_replicas") or takes =true / =false;
//   - --help (or -h) prints what the program does and every flag with its default;
//   - an unknown flag is an error naming it and the nearest known one ("unknown flag
//     '--job-name' (did you mean --job_name?)"), and so is a missing or bad value.
// With add_task_flags, a command line that names a task (--job_name, --slurm_jobs, or TF_CONFIG
// set) fills the TaskFlags (TaskFlags::parse, which also requires a ps job) and the program's
// flags from the rest; one that does not leaves task->job_name empty (the program runs in one
// process), and a cluster flag given without --job_name is an error.
//
//   std::string data_dir = "data"; std::int64_t steps = 1000; TaskFlags task;
//   Flags flags("trainer", "trains a classifier on ps and worker tasks");
//   flags.add("data_dir", "where the data is", &data_dir)
//       .add("train_steps", "global steps to train", &steps, std::int64_t{1})
//       .add_task_flags(&task);
//   flags.parse(argc, argv);  // --help: prints it and exits 0; an error: InvalidArgument
//
// Not thread-safe; for main(). The variables given to add() must outlive parse().
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/core/flag_text.hpp"
#include "psflow/distributed/task_flags.hpp"

namespace psflow {

class Flags {
 public:
  // `summary`: what --help says first (what the program does, how to run it).
  Flags(std::string program, std::string summary)
      : program_(std::move(program)), summary_(std::move(summary)) {}

  // A text flag.
  Flags& add(std::string name, std::string help, std::string* value);
  // A switch: "--name" alone, or --name=true / --name=false.
  Flags& add(std::string name, std::string help, bool* value);
  // A number (int, std::int64_t, std::size_t, double, ...), at least `min`.
  template <class Number>
  requires(std::is_arithmetic_v<Number> && !std::is_same_v<Number, bool>) Flags& add(
      std::string name, std::string help, Number* value,
      std::type_identity_t<Number> min = std::numeric_limits<Number>::lowest());
  // A flag read by `set`, which returns false (or throws InvalidArgument, saying why) for a
  // value it does not take. `default_text` is what --help shows as the default ("" for none),
  // `expected` what the error says a value must be; a `stands_alone` flag may be given without
  // a value, which then reads "true".
  Flags& add(std::string name, std::string help, std::string default_text, std::string expected,
             bool stands_alone, std::function<bool(const std::string&)> set);
  // The cluster flags (--ps_hosts, --worker_hosts, --job_name, --task_index, ..., or TF_CONFIG):
  // parse() fills *task when the command line names a task, see the top of this file.
  Flags& add_task_flags(TaskFlags* task);

  // Reads the command line. --help: prints help() and exits 0. Anything wrong: InvalidArgument
  // saying what, and how to see the flags.
  void parse(int argc, char** argv);
  // The same for `args` (args[0] is the program) and TF_CONFIG's value; returns false, having
  // read nothing, when the command line asks for --help.
  bool parse(const std::vector<std::string>& args, std::optional<std::string_view> tf_config);
  // What --help prints.
  std::string help() const;

 private:
  struct Flag {
    std::string name, help, default_text;
    std::string expected;  // what a value must be, for the error message
    bool stands_alone;
    std::function<bool(const std::string&)> set;
  };
  template <class Number>
  static std::optional<Number> parse_number(const std::string& text);
  template <class Number>
  static std::string number_text(Number n);
  // The program's own flags in `args`.
  void parse_own(const std::vector<std::string>& args) const;
  // Every flag name parse() takes: the program's, and the task flags when added.
  std::vector<std::string> known_names() const;
  [[noreturn]] void fail(const std::string& why) const;

  std::string program_, summary_;
  std::vector<Flag> flags_;
  TaskFlags* task_ = nullptr;
};

// ---------------------------------------------------------------------------------------------

inline Flags& Flags::add(std::string name, std::string help, std::string* value) {
  std::string default_text = value->empty() ? "\"\"" : *value;
  return add(std::move(name), std::move(help), std::move(default_text), "a value", false,
             [value](const std::string& text) {
               *value = text;
               return true;
             });
}

inline Flags& Flags::add(std::string name, std::string help, bool* value) {
  return add(std::move(name), std::move(help), *value ? "true" : "", "true or false", true,
             [value](const std::string& text) {
               if (text != "true" && text != "false") return false;
               *value = text == "true";
               return true;
             });
}

template <class Number>
requires(std::is_arithmetic_v<Number> && !std::is_same_v<Number, bool>) Flags& Flags::add(
    std::string name, std::string help, Number* value, std::type_identity_t<Number> min) {
  std::string expected = std::is_integral_v<Number> ? "an integer" : "a number";
  if (min != std::numeric_limits<Number>::lowest()) expected += " >= " + number_text(min);
  return add(std::move(name), std::move(help), number_text(*value), std::move(expected), false,
             [value, min](const std::string& text) {
               const std::optional<Number> parsed = parse_number<Number>(text);
               if (!parsed || *parsed < min) return false;
               *value = *parsed;
               return true;
             });
}

inline Flags& Flags::add(std::string name, std::string help, std::string default_text,
                         std::string expected, bool stands_alone,
                         std::function<bool(const std::string&)> set) {
  for (const Flag& f : flags_)
    if (f.name == name) throw InvalidArgument("flag --" + name + " is added twice");
  flags_.push_back(Flag{std::move(name), std::move(help), std::move(default_text),
                        std::move(expected), stands_alone, std::move(set)});
  return *this;
}

inline Flags& Flags::add_task_flags(TaskFlags* task) {
  task_ = task;
  return *this;
}

inline void Flags::parse(int argc, char** argv) {
  if (!parse(std::vector<std::string>(argv, argv + argc), [] {
        const char* env = std::getenv("TF_CONFIG");
        return env ? std::optional<std::string_view>(env) : std::nullopt;
      }())) {
    std::fputs(help().c_str(), stdout);
    std::exit(0);
  }
}

inline bool Flags::parse(const std::vector<std::string>& args,
                         std::optional<std::string_view> tf_config) {
  for (std::size_t i = 1; i < args.size() && args[i] != "--"; ++i)
    if (detail::is_help_flag(args[i])) return false;
  if (!task_) {
    parse_own(args);
    return true;
  }
  // A mistyped flag is named first: "--job-name" is no --job_name, but not a cluster flag either.
  const std::vector<std::string> known = known_names();
  for (std::size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (detail::looks_like_value(args[i])) continue;  // a value, or "-1"
    const std::string name = detail::split_flag_argument(args[i]).name;
    if (std::find(known.begin(), known.end(), name) == known.end())
      fail(detail::unknown_flag_text(args[i], name, known));
  }
  const bool have_tf_config = tf_config && !tf_config->empty();
  bool names_task = have_tf_config;
  for (const auto& arg : args)
    names_task = names_task || detail::is_flag_named(arg, "job_name") ||
                 detail::is_flag_named(arg, "slurm_jobs");
  if (!names_task) {
    for (const auto& arg : args)
      for (const std::string& name : TaskFlags::flag_names())
        if (detail::is_flag_named(arg, name))
          fail("'" + arg + "' is a flag of one task of a cluster: pass --job_name=ps or " +
               "--job_name=worker too (and the cluster: --ps_hosts, --worker_hosts, " +
               "--task_index)");
    parse_own(args);
    *task_ = TaskFlags{};
    return true;
  }
  try {
    *task_ = TaskFlags::parse(args, have_tf_config ? tf_config : std::nullopt);
  } catch (const InvalidArgument& e) {
    fail(e.message());
  }
  parse_own(task_->remaining_args);
  return true;
}

inline std::vector<std::string> Flags::known_names() const {
  std::vector<std::string> known;
  for (const Flag& f : flags_) known.push_back(f.name);
  if (task_)
    for (const std::string& name : TaskFlags::flag_names()) known.push_back(name);
  return known;
}

inline void Flags::parse_own(const std::vector<std::string>& args) const {
  const std::vector<std::string> known = known_names();
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const detail::FlagArgument given = detail::split_flag_argument(arg);
    if (given.name.empty())
      fail("unexpected argument '" + arg + "': every argument is a flag, --name=value");
    const std::string& name = given.name;
    const Flag* flag = nullptr;
    for (const Flag& f : flags_)
      if (f.name == name) flag = &f;
    if (!flag) fail(detail::unknown_flag_text(arg, name, known));
    std::string value = "true";
    if (given.value)
      value = *given.value;
    else if (!flag->stands_alone && i + 1 < args.size() && detail::looks_like_value(args[i + 1]))
      value = args[++i];
    else if (!flag->stands_alone)
      fail("flag --" + name + " needs a value (--" + name + "=<value>)");
    bool taken = false;
    try {
      taken = flag->set(value);
    } catch (const InvalidArgument& e) {
      fail(e.message());
    }
    if (!taken) fail("--" + name + "='" + value + "' is not " + flag->expected);
  }
}

inline std::string Flags::help() const {
  std::string out = program_ + ": " + summary_ + "\n\nFlags (defaults in parentheses):\n";
  for (const Flag& f : flags_)
    out += detail::help_entry(
        "--" + f.name + (f.default_text.empty() ? "" : " (" + f.default_text + ")"), f.help);
  if (task_) out += TaskFlags::help();
  out += detail::help_entry("--help", "this text");
  return out;
}

inline void Flags::fail(const std::string& why) const {
  throw InvalidArgument(why + "; run '" + program_ + " --help' for the flags");
}

template <class Number>
std::optional<Number> Flags::parse_number(const std::string& text) {
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

template <class Number>
std::string Flags::number_text(Number n) {
  if constexpr (std::is_floating_point_v<Number>) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", static_cast<double>(n));
    return text;
  } else {
    return std::to_string(n);
  }
}

}  // namespace psflow
