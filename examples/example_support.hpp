// What the numbered examples (01_first_program ... 05_explain) share, kept out of their
// main.cpp so that those show only psflow:
//   - their flags: psflow::Flags, a bad command line exiting 2 (common/flags.hpp);
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

#include "common/flags.hpp"

namespace example {

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
