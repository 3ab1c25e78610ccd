// Raw frame headers for tests that speak the wire by hand (partial, oversized or lying frames),
// and a way to deliver them to a task.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

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
// side: cluster_auth.hpp) so that `bytes` reach the frame parser, sends them and hangs up after
// a moment (the task either closes on us or waits for more).
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
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // lets a parser see the bytes
}

}  // namespace psflow::testing
