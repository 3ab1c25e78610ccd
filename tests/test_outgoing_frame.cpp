// The write side of a Connection (distributed/outgoing_frame.hpp) on a socket pair: a frame's
// pieces are its header, metadata, table and the tensor buffers themselves; a non-blocking send
// takes what the socket buffer has room for, counts it against the frames and drops those that
// left whole, so repeated sends deliver every byte in order; TLS's gathering copies runs of
// small pieces together and leaves large ones where they are.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "psflow/distributed/outgoing_frame.hpp"

using namespace psflow;
using detail::OutgoingFrame;

namespace {

std::shared_ptr<OutgoingFrame> outgoing(std::string metadata, std::size_t floats) {
  std::vector<float> values(floats);
  for (std::size_t i = 0; i < floats; ++i) values[i] = static_cast<float>(i % 1000);
  std::vector<Tensor> tensors;
  if (floats > 0) tensors.push_back(Tensor::from_vector(values, {floats}));
  return std::make_shared<OutgoingFrame>(
      wire::Frame{wire::MessageType::tensor, 1, std::move(metadata), std::move(tensors)});
}

std::string all_bytes(const OutgoingFrame& frame) {
  std::string bytes;
  frame.for_each_unsent([&](const char* data, std::size_t size) {
    bytes.append(data, size);
    return true;
  });
  return bytes;
}

struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
  ~SocketPair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  // Reads whatever fd[1] has, waiting at most 1 s for the first byte.
  std::string drain() {
    std::string out;
    char buffer[1 << 16];
    pollfd ready{fd[1], POLLIN, 0};
    while (::poll(&ready, 1, out.empty() ? 1000 : 0) > 0) {
      const ssize_t n = ::read(fd[1], buffer, sizeof buffer);
      if (n <= 0) break;
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("a frame's pieces are header, metadata, table and payload, and skip what was sent") {
  const auto frame = outgoing("meta", 4);
  const std::string bytes = all_bytes(*frame);
  CHECK(bytes.size() == frame->total_bytes);
  CHECK(bytes.size() == wire::kHeaderBytes + 4 + frame->table.size() + 16);
  CHECK(bytes.substr(wire::kHeaderBytes, 4) == "meta");
  frame->bytes_sent = wire::kHeaderBytes + 2;  // part of the metadata left already
  CHECK(all_bytes(*frame) == bytes.substr(wire::kHeaderBytes + 2));
  std::vector<std::size_t> sizes;
  frame->for_each_unsent([&](const char*, std::size_t size) {
    sizes.push_back(size);
    return sizes.size() < 2;  // stop after two pieces
  });
  CHECK(sizes == std::vector<std::size_t>{2, frame->table.size()});
}

TEST_CASE("small frames leave in one non-blocking send, in order") {
  SocketPair pair;
  detail::OutgoingQueue queue{outgoing("a", 3), outgoing("bb", 0), outgoing("ccc", 5)};
  std::string expected;
  for (const auto& f : queue) expected += all_bytes(*f);
  CHECK(detail::send_without_blocking(pair.fd[0], queue) == expected.size());
  CHECK(queue.empty());
  CHECK(pair.drain() == expected);
}

TEST_CASE("a frame larger than the socket buffer leaves over several sends, every byte in order") {
  SocketPair pair;
  int small = 64 * 1024;
  ::setsockopt(pair.fd[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  detail::OutgoingQueue queue{outgoing("big", 1 << 20), outgoing("next", 2)};
  std::string expected;
  for (const auto& f : queue) expected += all_bytes(*f);
  std::string received;
  int sends = 0;
  while (!queue.empty() && sends < 10000) {
    const std::size_t before = queue.front()->bytes_sent;
    const std::size_t sent = detail::send_without_blocking(pair.fd[0], queue);
    if (!queue.empty() && sent > 0 && queue.size() == 2)
      CHECK(queue.front()->bytes_sent == before + sent);
    ++sends;
    received += pair.drain();
  }
  CHECK(queue.empty());
  CHECK(sends > 1);
  CHECK(received == expected);
}

TEST_CASE("a failed socket sends nothing and keeps the frames") {
  SocketPair pair;
  ::close(pair.fd[1]);
  pair.fd[1] = -1;
  detail::OutgoingQueue queue{outgoing("x", 1)};
  CHECK(detail::send_without_blocking(pair.fd[0], queue) == 0);
  CHECK(queue.size() == 1);
  CHECK(queue.front()->bytes_sent == 0);
}

TEST_CASE("TLS gathering copies runs of small pieces together, large ones stay in place") {
  const std::string a(10, 'a'), big(20 * 1024, 'B'), c(5, 'c'), d(7, 'd');
  const std::vector<boost::asio::const_buffer> pieces{
      boost::asio::buffer(a), boost::asio::buffer(big), boost::asio::buffer(c),
      boost::asio::buffer(d)};
  std::vector<char> staging;
  const auto gathered = detail::gather_small_buffers(pieces, staging);
  REQUIRE(gathered.size() == 3);
  CHECK(std::string(static_cast<const char*>(gathered[0].data()), gathered[0].size()) == a);
  CHECK(gathered[1].data() == big.data());
  CHECK(gathered[1].size() == big.size());
  CHECK(std::string(static_cast<const char*>(gathered[2].data()), gathered[2].size()) == c + d);
  CHECK(staging.size() == a.size() + c.size() + d.size());
}
