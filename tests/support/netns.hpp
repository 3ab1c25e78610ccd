// Test support: real hosts for multi-host tests. A TestNetwork gives each host its own Linux
// network namespace (its own interfaces, addresses, ports and loopback), joined to one Linux
// bridge by a veth pair, so tasks talk over a real link with real addresses instead of
// 127.0.0.1, and a link can be cut (disconnect) without the processes on it noticing.
//
// Layout, for a network of n hosts made by process P (the k-th network it made):
//   namespace psflow-P-k-sw   the switch: bridge br0, ports h0 .. h(n-1)
//   namespace psflow-P-k-hI   host I: lo up, eth0 = the peer of port hI, address 10.A.B.(I+1)/24
// where A.B is P's pid (A = pid / 256 % 256, B = pid % 256), so parallel runs differ. The bridge
// lives in a namespace of its own rather than the machine's: the machine's firewall (Docker's
// FORWARD DROP, br_netfilter) never sees the test's frames, nothing is added to the machine's
// interfaces, and deleting the namespaces removes everything a run made.
//
// Programs run inside a host with `nsenter --net=/var/run/netns/NS -- prog args` (nsenter execs
// the program: the child's pid is the program's; setpriv --pdeathsig in between, where present,
// kills it if the test process dies first), and interfaces are configured the same way:
// `ip netns exec` and `ip -n` remount /sys, which fails inside a chroot (as in CI). Every `ip`
// call is bounded (10 s). The constructor first deletes the namespaces of DEAD earlier runs
// (psflow-P-... whose process P no longer exists), and only those; the destructor deletes
// everything it made.
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 (ip) and util-linux (nsenter). Without
// them the constructor prints "*** MULTI-HOST TEST CANNOT RUN: <reason> ***" and throws
// NetworkUnavailable, so the test fails loudly; it never skips.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/files.hpp"

extern char** environ;

namespace psflow::testing {

// The multi-host tests cannot run here (not root, no namespaces, no ip or nsenter).
class NetworkUnavailable : public std::runtime_error {
 public:
  explicit NetworkUnavailable(const std::string& reason)
      : std::runtime_error("*** MULTI-HOST TEST CANNOT RUN: " + reason + " ***") {}
};

// What a bounded command did: its exit code (-1 when killed or not started), its standard
// output and error together, and whether it ran out of time (and was killed).
struct CommandResult {
  int exit_code = -1;
  std::string output;
  bool timed_out = false;
};

namespace detail {

// The absolute path of `name` in the sbin and bin directories and $PATH; "" when absent.
inline std::string find_program(const std::string& name) {
  std::vector<std::string> dirs{"/usr/sbin", "/sbin",           "/usr/bin",
                                "/bin",      "/usr/local/sbin", "/usr/local/bin"};
  if (const char* path = std::getenv("PATH")) {
    std::string all = path;
    for (std::size_t begin = 0; begin <= all.size();) {
      const std::size_t end = std::min(all.find(':', begin), all.size());
      if (end > begin) dirs.push_back(all.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  for (const auto& dir : dirs) {
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

inline std::string quoted(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// Runs argv (argv[0] an absolute path) for at most `limit`; kills it (SIGKILL) when it runs
// longer. Its output goes to a temporary file, read back afterwards.
inline CommandResult run_bounded(std::vector<std::string> argv, std::chrono::milliseconds limit) {
  CommandResult result;
  char path[] = "/tmp/psflow-netns-cmd-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) {
    result.output = std::string("mkstemp: ") + std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fd);
  if (rc != 0) {
    ::unlink(path);
    result.output = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return result;
  }
  int status = 0;
  auto reaped = [&] { return ::waitpid(pid, &status, WNOHANG) == pid; };
  const bool exited = eventually(reaped, limit, std::chrono::milliseconds(5));
  if (!exited) {
    result.timed_out = true;
    ::kill(pid, SIGKILL);
    // Reaped at once unless stuck in the kernel; bounded all the same.
    eventually(reaped, std::chrono::seconds(10), std::chrono::milliseconds(5));
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  result.output = read_file(path);
  while (!result.output.empty() && (result.output.back() == '\n' || result.output.back() == ' '))
    result.output.pop_back();
  ::unlink(path);
  return result;
}

}  // namespace detail

class TestNetwork {
 public:
  static constexpr const char* kNetnsDir = "/var/run/netns";
  static constexpr std::chrono::seconds kIpLimit{10};

  // Makes `hosts` hosts (1 to 250) on one bridge, each link up. Throws NetworkUnavailable
  // (after printing its message to standard error) when this machine cannot.
  explicit TestNetwork(int hosts) {
    static std::atomic<int> networks{0};
    const int pid = static_cast<int>(::getpid());
    prefix_ = "psflow-" + std::to_string(pid) + "-" + std::to_string(networks++);
    subnet_ = "10." + std::to_string(pid / 256 % 256) + "." + std::to_string(pid % 256) + ".";
    try {
      if (hosts < 1 || hosts > 250)
        throw std::invalid_argument("TestNetwork: 1 to 250 hosts, not " + std::to_string(hosts));
      check_preconditions();
      remove_dead_leftovers();
      build(hosts);
    } catch (const NetworkUnavailable& e) {
      std::cerr << "\n" << e.what() << "\n\n";
      tear_down();
      throw;
    } catch (...) {
      tear_down();
      throw;
    }
  }
  TestNetwork(const TestNetwork&) = delete;
  TestNetwork& operator=(const TestNetwork&) = delete;
  ~TestNetwork() { tear_down(); }

  int size() const { return static_cast<int>(hosts_.size()); }
  // Host i's address, e.g. "10.12.34.1", and "address:port".
  std::string address(int i) const { return subnet_ + std::to_string(index(i) + 1); }
  std::string endpoint(int i, unsigned short port) const {
    return address(i) + ":" + std::to_string(port);
  }
  // Host i's namespace name and its file (what nsenter --net= takes).
  const std::string& host_namespace(int i) const { return hosts_[index(i)]; }
  std::string namespace_path(const std::string& ns) const {
    return std::string(kNetnsDir) + "/" + ns;
  }

  // `argv` (argv[0] an absolute path) as a command line that runs it on host i. With setpriv
  // (util-linux) the program also dies when this process does, even by SIGKILL (a test killed
  // at its timeout), instead of serving on forever in a deleted namespace.
  std::vector<std::string> host_command(int i, const std::vector<std::string>& argv) const {
    std::vector<std::string> full{nsenter_, "--net=" + namespace_path(host_namespace(i)), "--"};
    if (!setpriv_.empty()) full.insert(full.end(), {setpriv_, "--pdeathsig", "KILL", "--"});
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  }

  // Starts `argv` on host i as a ChildProcess (its output in log_prefix.out/.err; killed at the
  // latest when the returned object is destroyed).
  std::unique_ptr<ChildProcess> on_host(int i, const std::vector<std::string>& argv,
                                        const std::string& log_prefix) const {
    return std::make_unique<ChildProcess>(host_command(i, argv), log_prefix);
  }

  // Runs `argv` on host i and waits for it, at most `limit` (then kills it).
  CommandResult run_on_host(int i, const std::vector<std::string>& argv,
                            std::chrono::milliseconds limit) const {
    return detail::run_bounded(host_command(i, argv), limit);
  }

  // Cuts host i's link: its port on the bridge goes down, so nothing it sends arrives and
  // nothing reaches it, and no FIN or RST is sent to anyone: to its peers, the host went silent.
  // Its processes keep running and its own interface stays configured.
  void disconnect(int i) { set_port(i, "down"); }
  // Plugs host i's link back in.
  void reconnect(int i) { set_port(i, "up"); }

  // Deletes the namespaces of earlier runs whose process no longer exists (names
  // "psflow-<pid>-..." with a dead pid), and only those. Returns the names deleted.
  std::vector<std::string> remove_dead_leftovers() {
    std::vector<std::string> removed;
    DIR* dir = ::opendir(kNetnsDir);
    if (!dir) return removed;
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(dir)) names.emplace_back(entry->d_name);
    ::closedir(dir);
    for (const auto& name : names) {
      const std::string head = "psflow-";
      if (name.rfind(head, 0) != 0) continue;
      const std::size_t end = name.find('-', head.size());
      if (end == std::string::npos || end == head.size()) continue;
      const std::string digits = name.substr(head.size(), end - head.size());
      if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9)
        continue;
      const pid_t owner = static_cast<pid_t>(std::stol(digits));
      if (owner <= 0 || owner == ::getpid()) continue;
      if (::kill(owner, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
      ip({"netns", "del", name});
      removed.push_back(name);
    }
    return removed;
  }

 private:
  std::size_t index(int i) const {
    if (i < 0 || i >= size())
      throw std::out_of_range("TestNetwork: no host " + std::to_string(i) + " (it has " +
                              std::to_string(size()) + ")");
    return static_cast<std::size_t>(i);
  }

  void check_preconditions() {
    ip_ = detail::find_program("ip");
    nsenter_ = detail::find_program("nsenter");
    setpriv_ = detail::find_program("setpriv");
    if (::geteuid() != 0)
      throw NetworkUnavailable(
          "not root: network namespaces, bridges and veth pairs need CAP_NET_ADMIN and "
          "CAP_SYS_ADMIN (run the test as root)");
    if (ip_.empty())
      throw NetworkUnavailable("no 'ip' program (Debian package iproute2: scripts/setup.sh)");
    if (nsenter_.empty())
      throw NetworkUnavailable("no 'nsenter' program (Debian package util-linux)");
  }

  // Runs `ip args` (in the namespace `ns` when given), bounded; returns its result.
  CommandResult ip(const std::vector<std::string>& args, const std::string& ns = "") const {
    std::vector<std::string> argv;
    if (!ns.empty()) argv = {nsenter_, "--net=" + namespace_path(ns), "--"};
    argv.push_back(ip_);
    argv.insert(argv.end(), args.begin(), args.end());
    return detail::run_bounded(argv, kIpLimit);
  }

  // The same, but a failure means this machine cannot host the test.
  void must_ip(const std::vector<std::string>& args, const std::string& ns = "") const {
    const CommandResult r = ip(args, ns);
    if (r.exit_code == 0) return;
    std::string where = ns.empty() ? "" : " (in namespace " + ns + ")";
    throw NetworkUnavailable(
        "'ip " + detail::quoted(args) + "'" + where +
        (r.timed_out ? " took longer than 10 s"
                     : " failed (exit " + std::to_string(r.exit_code) + "): " + r.output));
  }

  void add_namespace(const std::string& name) {
    must_ip({"netns", "add", name});
    made_.push_back(name);
  }

  void build(int hosts) {
    switch_ = prefix_ + "-sw";
    add_namespace(switch_);
    must_ip({"link", "set", "lo", "up"}, switch_);
    // STP off and no forward delay: a port forwards as soon as it is up.
    must_ip({"link", "add", "br0", "type", "bridge", "forward_delay", "0", "stp_state", "0"},
            switch_);
    must_ip({"link", "set", "br0", "up"}, switch_);
    for (int i = 0; i < hosts; ++i) {
      const std::string host = prefix_ + "-h" + std::to_string(i);
      add_namespace(host);
      hosts_.push_back(host);
      const std::string port = port_name(i);
      // The pair is made in the switch, its other end moved straight into the host as eth0.
      must_ip({"link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host},
              switch_);
      must_ip({"link", "set", port, "master", "br0"}, switch_);
      must_ip({"link", "set", port, "up"}, switch_);
      must_ip({"link", "set", "lo", "up"}, host);
      must_ip({"addr", "add", address(i) + "/24", "dev", "eth0"}, host);
      must_ip({"link", "set", "eth0", "up"}, host);
    }
  }

  // Host i's port on the bridge, "h<i>" (appended: GCC 12 at -O3 warns, wrongly, of an
  // overlapping copy in "h" + std::to_string(i)).
  static std::string port_name(int i) {
    std::string name = "h";
    name += std::to_string(i);
    return name;
  }

  void set_port(int i, const std::string& state) {
    const CommandResult r =
        ip({"link", "set", port_name(static_cast<int>(index(i))), state}, switch_);
    if (r.exit_code != 0)
      throw std::runtime_error("TestNetwork: cannot set host " + std::to_string(i) + "'s link " +
                               state + ": " + r.output);
  }

  // Deletes every namespace this network made, the switch first (which destroys the veth
  // pairs). Processes still inside a host keep its namespace alive until they exit.
  void tear_down() noexcept {
    try {
      for (auto it = made_.begin(); it != made_.end(); ++it) {
        const CommandResult r = ip({"netns", "del", *it});
        if (r.exit_code != 0)
          std::cerr << "TestNetwork: could not delete namespace " << *it << ": " << r.output
                    << "\n";
      }
    } catch (...) {
    }
    made_.clear();
  }

  std::string prefix_, subnet_, switch_;
  std::string ip_, nsenter_, setpriv_;
  std::vector<std::string> hosts_;
  std::vector<std::string> made_;  // namespaces to delete, in order of creation
};

}  // namespace psflow::testing
