// How a connection step went wrong, in words: shared by the cluster handshake, TLS, the
// connections and the peer cache, so that they all say it the same way. Plumbing, not meant
// for users.
#pragma once

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdio>
#include <string>

namespace psflow::detail {

// "2.5 s": a wait or timeout, as messages print it.
inline std::string duration_string(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

// The peer closed the connection (orderly or not; over TLS also without TLS's goodbye), as
// opposed to some other I/O failure.
inline bool closed_by_peer(const boost::system::error_code& ec) {
  return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset ||
         ec == boost::asio::error::broken_pipe || ec == boost::asio::ssl::error::stream_truncated;
}

}  // namespace psflow::detail
