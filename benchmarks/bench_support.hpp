// Benchmark support: child processes on loopback that tell us their port, the raw-socket
// protocol of raw_peer (the baseline every network figure is compared with), and peak RSS.
//
// Every wait is bounded; a Child kills (SIGKILL) only the process it started, at the latest in
// its destructor. Ports: each child binds 127.0.0.1:0 itself and prints "PORT <n>", so no port
// is ever guessed.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"  // tests/support: child processes and scratch directories

namespace psflow::bench {

// The q-quantile (0..1) of `v`, the nearest sample; 0 for none.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The tests' helpers: a child process with its output in files (killed at the latest by its
// destructor), and a scratch directory for those files.
using Child = psflow::testing::ChildProcess;
using psflow::testing::TempDir;

// ---------------------------------------------------------------------------------------------
// For the child binaries: exit when the benchmark process that started us dies (even by
// SIGKILL or a timeout), so that no child outlives its run.

// Runs the registered benchmarks; an exception (a peer process that failed, say) ends the run
// with its message on stderr and status 1 instead of terminate().
inline int run_registered_benchmarks(const char* program) {
  try {
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

inline void die_with_parent() {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) std::_Exit(1);  // the parent is already gone
}

// ---------------------------------------------------------------------------------------------
// A "<field>: <n> kB" line of /proc/<pid>/status, in bytes; -1 when it cannot be read.
inline long long status_bytes(const std::string& pid, const std::string& field) {
  std::ifstream in("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream fields(line.substr(field.size() + 1));
      long long kib = -1;
      fields >> kib;
      return kib < 0 ? -1 : kib * 1024;
    }
  }
  return -1;
}

// Peak resident set size (VmHWM) of a process, in bytes; -1 when it cannot be read.
inline long long peak_rss_bytes(const std::string& pid = "self") {
  return status_bytes(pid, "VmHWM");
}

// The resident set size now (VmRSS), in bytes; -1 when it cannot be read.
inline long long rss_bytes(const std::string& pid = "self") { return status_bytes(pid, "VmRSS"); }

// The fields of /proc/<pid>/stat after the command name, from field 3 (state) on; empty when
// unreadable.
inline std::vector<std::string> stat_fields(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream text(stat.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string field; text >> field;) fields.push_back(field);
  return fields;
}

// Minor page faults of a process so far (field 10 of /proc/<pid>/stat); -1 when unreadable.
// Fresh memory is very expensive to fault in on this machine (tens of µs per 4 KiB page), so
// the benchmarks report faults per iteration next to the times.
inline long long minor_faults(const std::string& pid = "self") {
  const auto fields = stat_fields(pid);
  return fields.size() < 8 ? -1 : std::stoll(fields[7]);
}

// CPU time (user + system, all threads) a process has used so far, in seconds (fields 14 and
// 15 of /proc/<pid>/stat); -1 when unreadable.
inline double cpu_seconds(const std::string& pid = "self") {
  const auto fields = stat_fields(pid);
  if (fields.size() < 13) return -1;
  const long long ticks = std::stoll(fields[11]) + std::stoll(fields[12]);
  return static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Context switches (voluntary + involuntary) of all threads of a process so far: each is a
// thread going to sleep or being woken, i.e. a hand-off between threads or a wait on a peer.
inline long long context_switches(const std::string& pid = "self") {
  long long total = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + pid + "/task", ec)) {
    std::ifstream in(task.path() / "status");
    std::string line;
    while (std::getline(in, line))
      if (line.find("_ctxt_switches:") != std::string::npos)
        total += std::stoll(line.substr(line.find(':') + 1));
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// raw_peer's protocol: blocking Boost.Asio sockets, one 16-byte request header
// (u32 op, u32 reserved, u64 bytes), little-endian, then:
//   fetch: the server writes `bytes` bytes of its variable buffer
//   step:  the client writes `bytes` bytes of gradient; the server reads them into its reused
//          gradient buffer, applies var -= grad * lr (float32) and writes the variable back
//   echo:  the connection becomes a 4-byte echo (read 4, write 4) until the client closes it
//   quit:  the server process exits
// The sparse ops treat the variable as a table of rows of `reserved` floats; `bytes` is the
// byte count of the keys that follow (u64 row numbers, sorted, each once):
//   pull:  the client writes the keys; the server writes those rows back, in key order
//   push:  the client writes the keys, then one gradient row per key; the server applies
//          row -= grad * lr (float32) and writes an 8-byte acknowledgement (the key count)

enum class RawOp : std::uint32_t { fetch = 1, step = 2, echo = 3, quit = 4, pull = 5, push = 6 };
inline constexpr float kRawLearningRate = 0.001f;

struct RawHeader {
  std::uint32_t op = 0;
  std::uint32_t reserved = 0;
  std::uint64_t bytes = 0;
};
static_assert(sizeof(RawHeader) == 16);

// A blocking client of raw_peer; receive buffers are allocated once and reused.
class RawClient {
 public:
  explicit RawClient(unsigned short port) : socket_(io_) {
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    socket_.set_option(boost::asio::ip::tcp::no_delay(true));
  }

  // Reads `bytes` bytes of the server's variable into `into` (at least `bytes` long).
  void fetch(void* into, std::uint64_t bytes) {
    RawHeader h{static_cast<std::uint32_t>(RawOp::fetch), 0, bytes};
    boost::asio::write(socket_, boost::asio::buffer(&h, sizeof h));
    boost::asio::read(socket_, boost::asio::buffer(into, bytes));
  }

  // Sends a gradient, gets the updated variable back.
  void step(const void* grad, void* var_out, std::uint64_t bytes) {
    RawHeader h{static_cast<std::uint32_t>(RawOp::step), 0, bytes};
    const std::vector<boost::asio::const_buffer> out{boost::asio::buffer(&h, sizeof h),
                                                     boost::asio::buffer(grad, bytes)};
    boost::asio::write(socket_, out);
    boost::asio::read(socket_, boost::asio::buffer(var_out, bytes));
  }

  // Turns this connection into a 4-byte echo; then use ping().
  void start_echo() {
    RawHeader h{static_cast<std::uint32_t>(RawOp::echo), 0, 4};
    boost::asio::write(socket_, boost::asio::buffer(&h, sizeof h));
  }
  void ping(std::uint32_t& value) {
    boost::asio::write(socket_, boost::asio::buffer(&value, 4));
    boost::asio::read(socket_, boost::asio::buffer(&value, 4));
  }

  // Sparse pull and push, split into send and receive so that a client can talk to several
  // servers at once: send to each, then receive from each. `dim` floats per row.
  void send_pull(const std::uint64_t* keys, std::size_t n, std::uint32_t dim) {
    RawHeader h{static_cast<std::uint32_t>(RawOp::pull), dim, n * sizeof(std::uint64_t)};
    const std::vector<boost::asio::const_buffer> out{boost::asio::buffer(&h, sizeof h),
                                                     boost::asio::buffer(keys, h.bytes)};
    boost::asio::write(socket_, out);
  }
  void receive_rows(float* rows, std::size_t n, std::uint32_t dim) {
    boost::asio::read(socket_, boost::asio::buffer(rows, n * dim * sizeof(float)));
  }
  void send_push(const std::uint64_t* keys, const float* grads, std::size_t n, std::uint32_t dim) {
    RawHeader h{static_cast<std::uint32_t>(RawOp::push), dim, n * sizeof(std::uint64_t)};
    const std::vector<boost::asio::const_buffer> out{
        boost::asio::buffer(&h, sizeof h), boost::asio::buffer(keys, h.bytes),
        boost::asio::buffer(grads, n * dim * sizeof(float))};
    boost::asio::write(socket_, out);
  }
  void receive_ack() {
    std::uint64_t count = 0;
    boost::asio::read(socket_, boost::asio::buffer(&count, sizeof count));
  }

  void quit() {
    RawHeader h{static_cast<std::uint32_t>(RawOp::quit), 0, 0};
    boost::system::error_code ignored;
    boost::asio::write(socket_, boost::asio::buffer(&h, sizeof h), ignored);
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
};

// Sizes used throughout, and their labels.
inline std::string size_label(std::uint64_t bytes) {
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
    return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0)
    return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

}  // namespace psflow::bench
