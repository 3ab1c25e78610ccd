// Writes a DOT picture (observe/graph_dot.hpp) to <dir>/<name>.dot and, when Graphviz's `dot`
// program is on PATH, renders it to <dir>/<name>.svg beside it. Any browser opens the .svg;
// `dot -Tpng <name>.dot -o <name>.png` makes a PNG.
//
// Blocking: waits for `dot` at most `timeout` (then kills it). `dot` is started directly with
// an argument vector (posix_spawn, no shell), its standard input from /dev/null, its messages
// kept for the result. A missing or failing `dot` is reported in the result, never thrown; the
// .dot file is always written (or an error thrown).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "psflow/core/compilation.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>
#include <vector>

#include "psflow/core/error.hpp"

extern char** environ;
#endif

namespace psflow::observe {

// What write_dot_files wrote, for the caller's log.
struct DotFiles {
  std::string dot_path;     // always written
  std::string svg_path;     // "" when no picture was rendered (see svg_problem)
  std::string svg_problem;  // why not: `dot` missing, failed or too slow; "" when rendered

  // One line for a log, e.g. "wrote ./g.dot and ./g.svg".
  std::string summary() const;
};

// Writes `dot_text` to <dir>/<name>.dot (creating `dir`), then renders <dir>/<name>.svg with
// Graphviz when `dot` is on PATH. Throws InvalidArgument for an empty name or one with a '/',
// FailedPrecondition when the .dot cannot be written.
DotFiles write_dot_files(const std::string& dot_text, const std::string& dir,
                         const std::string& name,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

// The full path of `program` found in $PATH, or nullopt.
std::optional<std::string> find_on_path(const std::string& program);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

PSFLOW_DECL std::string DotFiles::summary() const {
  if (!svg_path.empty()) return "wrote " + dot_path + " and " + svg_path;
  return "wrote " + dot_path + " (no .svg: " + svg_problem + ")";
}

PSFLOW_DECL std::optional<std::string> find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    // (a path, not dir + "/" + program: GCC 12 at -O3 flags that with a false -Wrestrict)
    const std::filesystem::path candidate =
        std::filesystem::path(dir.empty() ? std::string_view(".") : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate))
      return candidate.string();
  }
  return std::nullopt;
}

namespace detail {

// Runs argv (argv[0] a full path) with stdin from /dev/null and stdout+stderr into `messages`
// (the first 4 KiB); "" when it exited 0, else what went wrong. Kills it after `timeout`.
PSFLOW_DECL std::string run_program(const std::vector<std::string>& argv,
                                    std::chrono::milliseconds timeout) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return std::string("cannot make a pipe: ") + std::strerror(errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  std::vector<std::string> args_copy = argv;
  std::vector<char*> args;
  for (std::string& a : args_copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return "cannot start " + argv[0] + ": " + std::strerror(rc);
  }
  ::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  std::string messages;
  auto drain = [&] {
    char buffer[1024];
    for (;;) {
      const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
      if (n <= 0) return;
      if (messages.size() < 4096) messages.append(buffer, static_cast<std::size_t>(n));
    }
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  bool timed_out = false;
  for (;;) {
    drain();
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      status = -1;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  drain();
  ::close(pipe_fds[0]);
  while (!messages.empty() && (messages.back() == '\n' || messages.back() == ' '))
    messages.pop_back();
  const std::string said = messages.empty() ? "" : ": " + messages;
  if (timed_out)
    return argv[0] + " took longer than " + std::to_string(timeout.count()) + " ms; stopped it";
  if (status == -1) return "lost track of " + argv[0];
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status))
    return argv[0] + " exited with status " + std::to_string(WEXITSTATUS(status)) + said;
  return argv[0] + " was killed by signal " + std::to_string(WTERMSIG(status)) + said;
}

}  // namespace detail

PSFLOW_DECL DotFiles write_dot_files(const std::string& dot_text, const std::string& dir,
                                     const std::string& name, std::chrono::milliseconds timeout) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw InvalidArgument("picture name '" + name +
                          "' must be a plain file name without '/', e.g. \"trainer_graph\"");
  const std::filesystem::path folder = dir.empty() ? "." : dir;
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec)
    throw FailedPrecondition("cannot create the directory '" + folder.string() +
                             "' for the graph picture: " + ec.message() +
                             "; pass a writable directory");
  DotFiles files;
  files.dot_path = (folder / (name + ".dot")).string();
  {
    std::ofstream out(files.dot_path, std::ios::binary | std::ios::trunc);
    out << dot_text;
    out.close();
    if (!out)
      throw FailedPrecondition("cannot write '" + files.dot_path + "': " + std::strerror(errno) +
                               "; pass a writable directory");
  }
  const auto dot = find_on_path("dot");
  if (!dot) {
    files.svg_problem =
        "Graphviz's dot is not on PATH (install the graphviz package: scripts/setup.sh)";
    return files;
  }
  const std::string svg = (folder / (name + ".svg")).string();
  const std::string problem =
      detail::run_program({*dot, "-Tsvg", "-o", svg, files.dot_path}, timeout);
  if (problem.empty()) {
    files.svg_path = svg;
  } else {
    files.svg_problem = problem;
    std::filesystem::remove(svg, ec);  // no half-written picture
  }
  return files;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
