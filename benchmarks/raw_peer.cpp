// raw_peer: the baseline of every network benchmark. Plain blocking Boost.Asio sockets, no
// framing beyond a 16-byte request header, buffers allocated once (and touched) then reused:
// what a hand-written transfer between two processes on this machine costs. The sparse ops
// (pull and push of rows by key) serve the sparse-step benchmark: there the variable is one
// shard of an embedding table.
//
//   raw_peer --serve --max_bytes=N
//       binds 127.0.0.1:0, prints "PORT <port>", serves each connection on its own thread
//       (protocol in bench_support.hpp) until a client sends quit; then prints
//       "PEAK_RSS <bytes>" (the baseline ps of the memory benchmark) and exits.
//   raw_peer --client --port=P --bytes=N --fetches=K
//       fetches N bytes K times into one reused buffer, then prints "PEAK_RSS <bytes>"
//       (the baseline worker of the memory benchmark).
#include <boost/asio.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"

namespace asio = boost::asio;
using psflow::bench::RawHeader;
using psflow::bench::RawOp;

namespace {

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0)
      return std::string(argv[i]).substr(prefix.size());
  return fallback;
}
bool has_flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--" + name) return true;
  return false;
}

// The "variable" every connection reads and updates (like the ps's variable: allocated once).
struct Shared {
  std::vector<float> var;
};

void serve_connection(asio::ip::tcp::socket socket, Shared& shared) {
  socket.set_option(asio::ip::tcp::no_delay(true));
  std::vector<float> grad;          // reused across steps on this connection
  std::vector<std::uint64_t> keys;  // the same, for the sparse ops' keys
  const std::uint64_t max_bytes = shared.var.size() * sizeof(float);
  try {
    for (;;) {
      RawHeader h;
      asio::read(socket, asio::buffer(&h, sizeof h));
      if (h.bytes > max_bytes) {
        std::fprintf(stderr, "raw_peer: request for %llu bytes exceeds --max_bytes\n",
                     static_cast<unsigned long long>(h.bytes));
        return;
      }
      switch (static_cast<RawOp>(h.op)) {
        case RawOp::fetch:
          asio::write(socket, asio::buffer(shared.var.data(), h.bytes));
          break;
        case RawOp::step: {
          const std::size_t n = h.bytes / sizeof(float);
          if (grad.size() < n) grad.resize(n);
          asio::read(socket, asio::buffer(grad.data(), h.bytes));
          float* var = shared.var.data();
          const float* g = grad.data();
          const float lr = psflow::bench::kRawLearningRate;
          for (std::size_t i = 0; i < n; ++i) var[i] = var[i] - g[i] * lr;
          asio::write(socket, asio::buffer(shared.var.data(), h.bytes));
          break;
        }
        case RawOp::pull:
        case RawOp::push: {
          const std::size_t dim = h.reserved;
          const std::size_t n = h.bytes / sizeof(std::uint64_t);
          const std::size_t rows = dim == 0 ? 0 : shared.var.size() / dim;
          if (keys.size() < n) keys.resize(n);
          if (grad.size() < n * dim) grad.resize(n * dim);
          asio::read(socket, asio::buffer(keys.data(), h.bytes));
          for (std::size_t i = 0; i < n; ++i)
            if (keys[i] >= rows) {
              std::fprintf(stderr, "raw_peer: key %llu is not below the %zu rows of %zu floats\n",
                           static_cast<unsigned long long>(keys[i]), rows, dim);
              return;
            }
          float* table = shared.var.data();
          if (static_cast<RawOp>(h.op) == RawOp::pull) {
            // The rows, gathered into the reused buffer, then one write.
            for (std::size_t i = 0; i < n; ++i)
              std::memcpy(grad.data() + i * dim, table + keys[i] * dim, dim * sizeof(float));
            asio::write(socket, asio::buffer(grad.data(), n * dim * sizeof(float)));
          } else {
            asio::read(socket, asio::buffer(grad.data(), n * dim * sizeof(float)));
            const float lr = psflow::bench::kRawLearningRate;
            for (std::size_t i = 0; i < n; ++i) {
              float* row = table + keys[i] * dim;
              const float* g = grad.data() + i * dim;
              for (std::size_t j = 0; j < dim; ++j) row[j] = row[j] - g[j] * lr;
            }
            const std::uint64_t ack = n;
            asio::write(socket, asio::buffer(&ack, sizeof ack));
          }
          break;
        }
        case RawOp::echo: {
          std::uint32_t value = 0;
          for (;;) {
            asio::read(socket, asio::buffer(&value, 4));
            asio::write(socket, asio::buffer(&value, 4));
          }
        }
        case RawOp::quit:
          std::printf("PEAK_RSS %lld\n", psflow::bench::peak_rss_bytes());
          std::fflush(stdout);
          std::_Exit(0);
        default:
          std::fprintf(stderr, "raw_peer: unknown op %u\n", h.op);
          return;
      }
    }
  } catch (const boost::system::system_error&) {
    // The client closed the connection: done with it.
  }
}

int serve(std::uint64_t max_bytes) {
  Shared shared;
  shared.var.assign(max_bytes / sizeof(float), 1.0f);  // touched: resident like a ps's variable
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  std::printf("PORT %u\n", static_cast<unsigned>(acceptor.local_endpoint().port()));
  std::fflush(stdout);
  for (;;) {
    asio::ip::tcp::socket socket(io);
    acceptor.accept(socket);
    std::thread(serve_connection, std::move(socket), std::ref(shared)).detach();
  }
}

int client(unsigned short port, std::uint64_t bytes, int fetches) {
  std::vector<char> buffer(bytes, 0);  // touched once, reused by every fetch
  psflow::bench::RawClient raw(port);
  for (int i = 0; i < fetches; ++i) raw.fetch(buffer.data(), bytes);
  std::printf("PEAK_RSS %lld\n", psflow::bench::peak_rss_bytes());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  psflow::bench::die_with_parent();
  try {
    if (has_flag(argc, argv, "serve"))
      return serve(std::stoull(flag(argc, argv, "max_bytes", std::to_string(256ull << 20))));
    if (has_flag(argc, argv, "client"))
      return client(static_cast<unsigned short>(std::stoul(flag(argc, argv, "port"))),
                    std::stoull(flag(argc, argv, "bytes")),
                    std::stoi(flag(argc, argv, "fetches", "1")));
    std::cerr
        << "usage: raw_peer --serve [--max_bytes=N] | --client --port=P --bytes=N [--fetches=K]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "raw_peer: " << e.what() << "\n";
    return 1;
  }
}
