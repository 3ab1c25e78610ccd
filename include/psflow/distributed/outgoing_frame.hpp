// The write side of a Connection: a frame as the pieces that go on the wire (its encoded
// header, the metadata, the tensor table, then the tensor buffers themselves: no payload
// copy) and how much of it has left; the non-blocking sendmsg that lets the sending thread
// write a frame itself when the connection is idle; and, for TLS, the gathering of small pieces
// into one buffer (OpenSSL writes one record per buffer).
//
// Contract: not thread-safe; the Connection calls these under its lock or on its strand.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <boost/asio/buffer.hpp>
#include <cstddef>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "psflow/distributed/wire.hpp"

namespace psflow::detail {

// A frame being written, and how many of its bytes went out.
struct OutgoingFrame {
  explicit OutgoingFrame(wire::Frame f);
  // Calls visit(data, size) for each piece not sent yet: header, metadata, table and the
  // tensor buffers themselves; false from visit stops the walk (then returns false).
  template <class Visit>
  bool for_each_unsent(Visit&& visit) const;

  wire::Frame frame;  // keeps the tensor buffers alive until written
  std::array<unsigned char, wire::kHeaderBytes> header{};
  std::string table;
  std::vector<std::string> encoded_strings;  // the payload of each string tensor, in order
  std::size_t total_bytes = 0;
  std::size_t bytes_sent = 0;
};

using OutgoingQueue = std::deque<std::shared_ptr<OutgoingFrame>>;

// The unsent pieces of `frames`, in order, as buffers for one gathering write.
std::vector<boost::asio::const_buffer> unsent_buffers(
    const std::vector<std::shared_ptr<OutgoingFrame>>& frames);

// One non-blocking sendmsg on socket `fd` of the first pieces of `queue` (at most 64); counts
// what left against the frames and drops those sent completely. Returns the bytes written: 0
// when the socket buffer is full or the socket failed (the connection's asynchronous write
// then sends the rest, or reports the failure).
std::size_t send_without_blocking(int fd, OutgoingQueue& queue);

// `buffers` with each run of pieces under 16 KiB copied together into `staging` (resized
// here; the result points into it, so keep it unchanged until the write is done), so that a
// small frame leaves as one TLS record.
std::vector<boost::asio::const_buffer> gather_small_buffers(
    const std::vector<boost::asio::const_buffer>& buffers, std::vector<char>& staging);

// ---------------------------------------------------------------------------------------------

inline OutgoingFrame::OutgoingFrame(wire::Frame f) : frame(std::move(f)) {
  table = wire::encode_tensor_table(frame.tensors);
  for (const Tensor& t : frame.tensors)
    if (t.dtype() == DType::string) encoded_strings.push_back(encode_strings(t));
  const wire::FrameHeader h = wire::frame_header(frame, table.size());
  wire::encode_header(h, header.data());
  total_bytes = header.size() + frame.metadata.size() + table.size() + h.payload_bytes;
}

template <class Visit>
bool OutgoingFrame::for_each_unsent(Visit&& visit) const {
  std::size_t skip = bytes_sent;
  auto piece = [&](const void* data, std::size_t size) {
    if (skip >= size) {
      skip -= size;
      return true;
    }
    const bool more = visit(static_cast<const char*>(data) + skip, size - skip);
    skip = 0;
    return more;
  };
  if (!piece(header.data(), header.size()) ||
      !piece(frame.metadata.data(), frame.metadata.size()) || !piece(table.data(), table.size()))
    return false;
  auto encoded = encoded_strings.begin();
  for (const Tensor& t : frame.tensors) {
    if (t.dtype() == DType::string) {
      if (!piece(encoded->data(), encoded->size())) return false;
      ++encoded;
    } else if (!piece(t.raw_data(), t.nbytes())) {
      return false;
    }
  }
  return true;
}

inline std::vector<boost::asio::const_buffer> unsent_buffers(
    const std::vector<std::shared_ptr<OutgoingFrame>>& frames) {
  std::vector<boost::asio::const_buffer> buffers;
  for (const auto& out : frames)
    out->for_each_unsent([&](const char* data, std::size_t size) {
      buffers.emplace_back(data, size);
      return true;
    });
  return buffers;
}

inline std::size_t send_without_blocking(int fd, OutgoingQueue& queue) {
  std::array<iovec, 64> iov{};  // the rest, if more, goes out on the next write
  std::size_t count = 0;
  for (const auto& out : queue) {
    const bool room = out->for_each_unsent([&](const char* data, std::size_t size) {
      iov[count++] = iovec{const_cast<char*>(data), size};
      return count < iov.size();
    });
    if (!room) break;
  }
  msghdr message{};
  message.msg_iov = iov.data();
  message.msg_iovlen = count;
  const ssize_t written = ::sendmsg(fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
  const std::size_t sent = written > 0 ? static_cast<std::size_t>(written) : 0;
  std::size_t left = sent;
  while (!queue.empty()) {
    OutgoingFrame& front = *queue.front();
    const std::size_t take = std::min(left, front.total_bytes - front.bytes_sent);
    front.bytes_sent += take;
    left -= take;
    if (front.bytes_sent < front.total_bytes) break;
    queue.pop_front();
  }
  return sent;
}

inline std::vector<boost::asio::const_buffer> gather_small_buffers(
    const std::vector<boost::asio::const_buffer>& buffers, std::vector<char>& staging) {
  constexpr std::size_t kSmall = 16 * 1024;  // one TLS record's worth
  std::size_t small_bytes = 0;
  for (const auto& b : buffers)
    if (b.size() < kSmall) small_bytes += b.size();
  staging.resize(small_bytes);  // sized once: the buffers below point into it
  std::vector<boost::asio::const_buffer> gathered;
  std::size_t staged = 0, run_start = 0;
  auto end_run = [&] {
    if (staged > run_start) gathered.emplace_back(staging.data() + run_start, staged - run_start);
    run_start = staged;
  };
  for (const auto& b : buffers) {
    if (b.size() >= kSmall) {
      end_run();
      gathered.push_back(b);
    } else {
      std::memcpy(staging.data() + staged, b.data(), b.size());
      staged += b.size();
    }
  }
  end_run();
  return gathered;
}

}  // namespace psflow::detail
