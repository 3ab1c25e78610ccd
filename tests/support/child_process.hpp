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
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/eventually.hpp"
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
    return eventually([&] { return !running(); }, limit);
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
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the poll interval
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
    eventually([&] { return stopped(); }, std::chrono::seconds(10), std::chrono::milliseconds(1));
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

// The first port of the kernel's ephemeral range: ports it hands out for "any free port" and to
// outgoing connections.
inline unsigned short ephemeral_port_start() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  unsigned first = 32768;
  range >> first;
  return static_cast<unsigned short>(first);
}

// A loopback port that was free a moment ago (bound and released), and never one this process
// was given before. It is drawn at random below the ephemeral range: a port the kernel picked
// for us is also the next one it gives an outgoing connection, and on a busy machine such a
// port was taken by some client socket before our task could listen on it.
inline unsigned short reserve_port() {
  static std::mutex mutex;
  static std::set<unsigned short> given;
  static std::mt19937 random_port{std::random_device{}()};
  constexpr unsigned lowest = 10000;  // below: well-known and registered services
  const unsigned top = ephemeral_port_start();
  boost::asio::io_context io;
  std::lock_guard lock(mutex);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    unsigned short port = 0;  // 0: let the kernel choose, when there is no room below its range
    if (top > lowest + 1000)
      port = static_cast<unsigned short>(
          std::uniform_int_distribution<unsigned>(lowest, top - 1)(random_port));
    boost::system::error_code error;
    boost::asio::ip::tcp::acceptor acceptor(io);
    acceptor.open(boost::asio::ip::tcp::v4(), error);
    if (!error) acceptor.bind({boost::asio::ip::make_address("127.0.0.1"), port}, error);
    if (error) continue;
    port = acceptor.local_endpoint().port();
    if (given.insert(port).second) return port;
  }
  throw std::runtime_error("reserve_port: no free loopback port found in 1000 attempts");
}

inline std::string loopback(unsigned short port) { return "127.0.0.1:" + std::to_string(port); }

}  // namespace psflow::testing
