// Raw frame headers for tests that speak the wire by hand (partial, oversized or lying frames),
// and a way to deliver them to a task.
#pragma once

#include <poll.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "psflow/distributed/wire.hpp"

namespace psflow::testing {

// The 40 header bytes of a frame claiming these sizes.
inline std::string header_bytes(wire::MessageType type, std::uint32_t metadata, std::uint32_t table,
                                std::uint64_t payload, std::uint32_t tensors,
                                std::uint64_t request_id = 0) {
  wire::FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  h.metadata_bytes = metadata;
  h.table_bytes = table;
  h.payload_bytes = payload;
  h.tensor_count = tensors;
  std::string bytes(wire::kHeaderBytes, '\0');
  wire::encode_header(h, reinterpret_cast<unsigned char*>(bytes.data()));
  return bytes;
}

// Connects to a task at 127.0.0.1:`port`, passes the cluster handshake (no secret on either
// side: cluster_auth.hpp) so that `bytes` reach the frame parser, sends them and hangs up: ends
// its side, then reads until the task closes the connection (on a bad frame, or on the end of
// its input), the sign that the task has parsed everything it was sent. At most 10 s.
inline void send_after_handshake(unsigned short port, const std::string& bytes) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), port});
  boost::system::error_code ec;
  std::string greeting(40, '\0');
  asio::read(socket, asio::buffer(greeting), ec);
  std::string answer(72, '\0');
  answer.replace(0, 5, "PSFA\x01");
  asio::write(socket, asio::buffer(answer), ec);
  asio::write(socket, asio::buffer(bytes), ec);
  socket.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string sink(4096, '\0');
  while (!ec) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd ready{socket.native_handle(), POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) break;
    socket.read_some(asio::buffer(sink), ec);  // heartbeats, then the end
  }
}

}  // namespace psflow::testing
