// Test support: start real psflow task processes on loopback and always clean them up.
// Every wait is bounded; a ChildProcess kills (SIGKILL) only the process it started, at the
// latest in its destructor.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/files.hpp"
#include "support/temp_dir.hpp"

extern char** environ;

namespace psflow::testing {

class ChildProcess {
 public:
  // Starts `argv` with standard output and error sent to files (read them with out()/err()).
  explicit ChildProcess(std::vector<std::string> argv, std::string log_prefix)
      : out_path_(log_prefix + ".out"), err_path_(log_prefix + ".err") {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait_for(std::chrono::seconds(10));
    }
  }

  pid_t pid() const noexcept { return pid_; }

  bool running() {
    if (exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
      return false;
    }
    return true;
  }

  // Waits up to `limit` for the process to exit; true when it did.
  bool wait_for(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (running()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  void kill(int signal = SIGKILL) {
    if (running()) ::kill(pid_, signal);
  }

  // Exit code once exited normally; -1 otherwise.
  int exit_code() const { return exited_ && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  bool killed_by_signal() const { return exited_ && WIFSIGNALED(status_); }
  std::string out() const { return slurp(out_path_); }
  std::string err() const { return slurp(err_path_); }

  // Waits (up to `limit`) for a line "<key> <value>" on standard output and returns the value;
  // throws if the process exits first or the time runs out (with its standard error).
  std::string wait_for_value(const std::string& key, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      std::istringstream lines(out());
      std::string line;
      while (std::getline(lines, line))
        if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
      if (!running())
        throw std::runtime_error("child exited (code " + std::to_string(exit_code()) +
                                 ") before printing '" + key + "'; its stderr: " + err());
      if (std::chrono::steady_clock::now() >= deadline)
        throw std::runtime_error("child did not print '" + key + "' in time; its stderr: " + err());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  static std::string slurp(const std::string& path) { return read_file(path); }
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string out_path_, err_path_;
};

// Stops a child with SIGSTOP (it freezes: no FIN, no RST, its sockets stay open) until the
// guard goes away, which resumes it with SIGCONT, also when the test fails in between.
class StoppedProcess {
 public:
  // Returns once the child is stopped (a signal is delivered asynchronously), at most 10 s.
  explicit StoppedProcess(ChildProcess& child) : child_(child) {
    child_.kill(SIGSTOP);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline && !stopped())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  StoppedProcess(const StoppedProcess&) = delete;
  StoppedProcess& operator=(const StoppedProcess&) = delete;
  ~StoppedProcess() { resume(); }
  void resume() {
    if (!resumed_) child_.kill(SIGCONT);
    resumed_ = true;
  }
  // The state letter in /proc/<pid>/stat is 'T' (stopped by a signal).
  bool stopped() const {
    std::ifstream stat("/proc/" + std::to_string(child_.pid()) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');
    return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'T';
  }

 private:
  ChildProcess& child_;
  bool resumed_ = false;
};

// A loopback port that was free a moment ago (bound, read back, released), and never one this
// process was given before: the OS may hand a released port out again at once, which gave two
// tasks of one cluster the same address.
inline unsigned short reserve_port() {
  static std::mutex mutex;
  static std::set<unsigned short> given;
  for (;;) {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    const unsigned short port = acceptor.local_endpoint().port();
    std::lock_guard lock(mutex);
    if (given.insert(port).second) return port;
  }
}

inline std::string loopback(unsigned short port) { return "127.0.0.1:" + std::to_string(port); }

}  // namespace psflow::testing
