// What the numbered examples (01_first_program ... 05_explain) share, kept out of their
// main.cpp so that those show only psflow:
//   - ExampleFlags: "--name=value" flags with --help (prints them, exits 0) and a clear
//     message with exit status 2 for an unknown flag or a bad value;
//   - free_loopback_addresses: addresses for a cluster whose tasks all run in this process;
//   - serve_until_signal: a ps task's main loop, which ends cleanly on Ctrl-C or SIGTERM.
// Not thread-safe; call from main().
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <psflow/psflow.hpp>
#include <string>
#include <thread>
#include <vector>

namespace example {

class ExampleFlags {
 public:
  ExampleFlags(std::string program, std::string what_it_does)
      : program_(std::move(program)), what_(std::move(what_it_does)) {}

  // Registers --name; `value` holds the default and receives what the command line says.
  ExampleFlags& add(const std::string& name, std::string& value, const std::string& help) {
    return add_flag(name, help, value, "a value", [&value](const std::string& text) {
      value = text;
      return true;
    });
  }
  // An integer flag whose value must be at least `min`.
  ExampleFlags& add(const std::string& name, int& value, const std::string& help, int min = 0) {
    return add_flag(name, help, std::to_string(value), "an integer >= " + std::to_string(min),
                    [&value, min](const std::string& text) {
                      char* end = nullptr;
                      const long parsed = std::strtol(text.c_str(), &end, 10);
                      if (text.empty() || *end != '\0' || parsed < min || parsed > 1000000000)
                        return false;
                      value = static_cast<int>(parsed);
                      return true;
                    });
  }
  // A switch: "--name" alone (or --name=true / --name=false).
  ExampleFlags& add(const std::string& name, bool& value, const std::string& help) {
    return add_flag(name, help, value ? "true" : "false", "", [&value](const std::string& text) {
      if (text != "true" && text != "false") return false;
      value = text == "true";
      return true;
    });
  }
  // A line of --help text for flags handled elsewhere (e.g. TaskFlags' cluster flags).
  ExampleFlags& note(const std::string& line) {
    notes_.push_back(line);
    return *this;
  }

  // Parses args (args[0] is the program). --help anywhere prints the flags and exits 0; an
  // unknown flag or a bad value prints what was wrong to standard error and exits 2.
  void parse(const std::vector<std::string>& args) const {
    exit_on_help(args);
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string& arg = args[i];
      const auto eq = arg.find('=');
      const std::string name = arg.rfind("--", 0) == 0 ? arg.substr(2, eq - 2) : "";
      const Flag* flag = find(name);
      if (!flag) fail("unknown flag '" + arg + "'");
      const bool is_switch = flag->expected.empty();
      const std::string value = eq != std::string::npos ? arg.substr(eq + 1) : "true";
      if (eq == std::string::npos && !is_switch) fail("flag " + arg + " needs a value");
      if (!flag->set(value))
        fail("bad value in '" + arg + "': expected " +
             (is_switch ? std::string("true or false") : flag->expected));
    }
  }
  void parse(int argc, char** argv) const { parse(std::vector<std::string>(argv, argv + argc)); }

  // For a program that runs as one task of a cluster: with --job_name (or TF_CONFIG), the
  // cluster flags are read by psflow::TaskFlags and the rest by parse(); without, everything by
  // parse() and nullopt is returned (the program then runs in this one process).
  std::optional<psflow::TaskFlags> parse_task(int argc, char** argv) const {
    const std::vector<std::string> args(argv, argv + argc);
    exit_on_help(args);
    const char* tf_config = std::getenv("TF_CONFIG");
    bool has_job = tf_config && *tf_config;
    for (const auto& a : args)
      has_job = has_job || a.rfind("--job_name", 0) == 0 || a.rfind("--slurm_jobs", 0) == 0;
    if (!has_job) {
      parse(args);
      return std::nullopt;
    }
    try {
      psflow::TaskFlags task = psflow::TaskFlags::parse(argc, argv);
      parse(task.remaining_args);
      return task;
    } catch (const psflow::InvalidArgument& e) {
      fail(e.what());
    }
  }

  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s; run '%s --help' for the flags\n", program_.c_str(), why.c_str(),
                 program_.c_str());
    std::exit(2);
  }

 private:
  struct Flag {
    std::string name, help, default_value;
    std::string expected;  // what a value must be, "" for a switch
    std::function<bool(const std::string&)> set;
  };

  ExampleFlags& add_flag(const std::string& name, const std::string& help, std::string current,
                         std::string expected, std::function<bool(const std::string&)> set) {
    flags_.push_back(Flag{name, help, std::move(current), std::move(expected), std::move(set)});
    return *this;
  }
  const Flag* find(const std::string& name) const {
    for (const Flag& f : flags_)
      if (f.name == name) return &f;
    return nullptr;
  }
  void exit_on_help(const std::vector<std::string>& args) const {
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (args[i] != "--help" && args[i] != "-h") continue;
      std::printf("%s: %s\n\nFlags:\n", program_.c_str(), what_.c_str());
      for (const Flag& f : flags_)
        std::printf("  --%-22s %s (default: %s)\n", f.name.c_str(), f.help.c_str(),
                    f.default_value.empty() ? "\"\"" : f.default_value.c_str());
      for (const auto& line : notes_) std::printf("  %s\n", line.c_str());
      std::printf("  --%-22s print this and exit\n", "help");
      std::exit(0);
    }
  }

  std::string program_, what_;
  std::vector<Flag> flags_;
  std::vector<std::string> notes_;
};

// `n` loopback addresses ("127.0.0.1:<port>") whose ports were free a moment ago, all different
// (each is held open until all are picked).
inline std::vector<std::string> free_loopback_addresses(std::size_t n) {
  boost::asio::io_context io;
  std::vector<boost::asio::ip::tcp::acceptor> held;
  std::vector<std::string> addresses;
  for (std::size_t i = 0; i < n; ++i) {
    held.emplace_back(
        io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    addresses.push_back("127.0.0.1:" + std::to_string(held.back().local_endpoint().port()));
  }
  return addresses;
}

namespace detail {
inline volatile std::sig_atomic_t stop_requested = 0;
inline void request_stop(int) { stop_requested = 1; }
}  // namespace detail

// A ps task's main loop: serves until Ctrl-C / SIGTERM, or until another task asks it to stop
// (Server::stop_task / stop_job); then stops the server. Like TF's server.join(), plus a clean
// exit on a signal.
inline void serve_until_signal(psflow::Server& server) {
  std::signal(SIGINT, detail::request_stop);
  std::signal(SIGTERM, detail::request_stop);
  while (!detail::stop_requested && !server.stopped())
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.stop();
}

}  // namespace example
