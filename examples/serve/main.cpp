// serve: answers TF Serving's REST API for a psflow serving bundle, over HTTP/1.1 (Boost.Beast).
//
//   ctr --export_dir=/tmp/ctr_model/1 ...              # a trained model's bundle
//   serve --model_dir=/tmp/ctr_model/1 --model_name=ctr --port=8501
//   curl -d '{"instances": [[3, 17, ...]]}' http://localhost:8501/v1/models/ctr:predict
//
// The endpoints and formats are rest_api.hpp's. This file moves bytes: it accepts connections
// on --threads I/O threads, reads each request with a deadline (--read_timeout_s: a client too
// slow to send one is disconnected) and a body limit (--max_request_bytes: larger is answered
// 413 and the connection closed), answers it, and keeps the connection for the next request
// when the client asks to. predict runs on the I/O thread that read the request; requests on
// other connections go on in the other threads. Ctrl-C or SIGTERM stops it (exit 0).
//
// The program includes psflow/serving.hpp, the inference header without psflow's network
// layer: its own network is Beast's.
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <psflow/distributed/flags.hpp>
#include <psflow/serving.hpp>
#include <string>
#include <thread>
#include <vector>

#include "serve/rest_api.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct ServeFlags {
  std::string model_dir, model_name = "default", bind_address = "0.0.0.0";
  std::int64_t port = 8501, threads = 4, max_request_bytes = 16 << 20;
  double read_timeout_s = 30;
};

// One client connection: read a request, answer it, repeat while the client keeps it alive.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const serve::RestApi& api, const ServeFlags& flags)
      : stream_(std::move(socket)), api_(api), flags_(flags) {}

  void start() { read(); }

 private:
  void read() {
    parser_.emplace();
    parser_->body_limit(static_cast<std::uint64_t>(flags_.max_request_bytes));
    stream_.expires_after(read_timeout());
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      answer({413, nlohmann::json{{"error", "the request body is larger than " +
                                                std::to_string(flags_.max_request_bytes) +
                                                " bytes (--max_request_bytes)"}}
                       .dump()},
             false);
      return;
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::connection_reset) {
      close();  // the client left, or was too slow to send its request
      return;
    }
    if (ec) {
      if (ec.category() == http::make_error_code(http::error::bad_target).category())  // bad HTTP
        answer({400, nlohmann::json{{"error", "bad HTTP request: " + ec.message()}}.dump()}, false);
      else
        close();
      return;
    }
    const auto& request = parser_->get();
    answer(api_.handle(
               std::string_view(request.method_string().data(), request.method_string().size()),
               std::string_view(request.target().data(), request.target().size()), request.body()),
           request.keep_alive());
  }

  void answer(serve::Response response, bool keep_alive) {
    response_ = {};
    response_.version(11);
    response_.result(response.status);
    response_.set(http::field::server, "psflow-serve");
    response_.set(http::field::content_type, "application/json");
    response_.keep_alive(keep_alive);
    response_.body() = std::move(response.body);
    response_.prepare_payload();
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, response_,
                      [self = shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
                        if (ec)
                          self->close();
                        else if (!keep_alive)
                          self->linger();
                        else
                          self->read();
                      });
  }

  // Closes after an answer the client may still be sending a body to (413): stop sending, then
  // read and drop what comes until the client closes or the read timeout passes, so that the
  // client sees the answer rather than a reset connection.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(read_timeout());
    drain();
  }
  void drain() {
    stream_.async_read_some(asio::buffer(discard_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec)
                                self->close();
                              else
                                self->drain();
                            });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  std::chrono::steady_clock::duration read_timeout() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(flags_.read_timeout_s));
  }

  beast::tcp_stream stream_;
  const serve::RestApi& api_;
  const ServeFlags& flags_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  std::array<char, 64 * 1024> discard_;
};

void accept(tcp::acceptor& acceptor, const serve::RestApi& api, const ServeFlags& flags) {
  acceptor.async_accept(asio::make_strand(acceptor.get_executor()),
                        [&](beast::error_code ec, tcp::socket socket) {
                          if (ec == asio::error::operation_aborted) return;
                          if (!ec)
                            std::make_shared<Connection>(std::move(socket), api, flags)->start();
                          accept(acceptor, api, flags);
                        });
}

// TF Serving's version of a bundle: its directory's name when that is a number, else 1.
std::string version_of(const std::string& dir) {
  std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (name.empty())
    name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  const bool number = !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
  return number ? name : "1";
}

}  // namespace

int main(int argc, char** argv) {
  ServeFlags flags;
  psflow::Flags reader("serve",
                       "Answers TF Serving's REST API (status, metadata, :predict) for a psflow "
                       "serving bundle.");
  reader.add("model_dir", "the bundle directory serving::export_model wrote", &flags.model_dir)
      .add("model_name", "the NAME of /v1/models/NAME", &flags.model_name)
      .add("port", "the TCP port to listen on (0: any free one, printed)", &flags.port)
      .add("bind_address", "the address to listen on", &flags.bind_address)
      .add("threads", "I/O threads, each answering requests", &flags.threads)
      .add("max_request_bytes", "larger request bodies are answered 413", &flags.max_request_bytes)
      .add("read_timeout_s", "a client must send a whole request within this",
           &flags.read_timeout_s);
  try {
    reader.parse(argc, argv);
    if (flags.model_dir.empty()) throw psflow::InvalidArgument("--model_dir is required");
    if (flags.port < 0 || flags.port > 65535 || flags.threads < 1 || flags.max_request_bytes < 1 ||
        flags.read_timeout_s <= 0)
      throw psflow::InvalidArgument(
          "--port must be 0..65535, --threads and --max_request_bytes at least 1, "
          "--read_timeout_s positive");
  } catch (const psflow::InvalidArgument& e) {
    std::fprintf(stderr, "serve: %s (serve --help lists the flags)\n", e.message().c_str());
    return 2;
  }

  std::optional<psflow::serving::Model> model;
  try {
    model.emplace(psflow::serving::Model::load(flags.model_dir));
  } catch (const psflow::Error& e) {
    std::fprintf(stderr, "serve: cannot load the model: %s\n", e.what());
    return 1;
  }
  const serve::RestApi api(*model, flags.model_name, version_of(flags.model_dir));

  asio::io_context io(static_cast<int>(flags.threads));
  tcp::acceptor acceptor(io);
  try {
    const tcp::endpoint endpoint(asio::ip::make_address(flags.bind_address),
                                 static_cast<unsigned short>(flags.port));
    acceptor.open(endpoint.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen();
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "serve: cannot listen on %s:%lld: %s\n", flags.bind_address.c_str(),
                 static_cast<long long>(flags.port), e.code().message().c_str());
    return 1;
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](beast::error_code, int) {
    beast::error_code ignored;
    acceptor.close(ignored);
    io.stop();
  });
  accept(acceptor, api, flags);

  std::string names;
  for (const auto& n : model->input_names()) names += (names.empty() ? "" : ", ") + n;
  std::string outputs;
  for (const auto& n : model->output_names()) outputs += (outputs.empty() ? "" : ", ") + n;
  std::printf(
      "serve: model '%s' version %s (inputs: %s; outputs: %s) on http://%s:%u/v1/models/%s\n",
      flags.model_name.c_str(), version_of(flags.model_dir).c_str(), names.c_str(), outputs.c_str(),
      flags.bind_address.c_str(), static_cast<unsigned>(acceptor.local_endpoint().port()),
      flags.model_name.c_str());
  std::fflush(stdout);

  std::vector<std::thread> threads;
  for (std::int64_t i = 1; i < flags.threads; ++i) threads.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : threads) t.join();
  std::printf("serve: stopped\n");
  return 0;
}
