// Listener: a task's listening socket, on exactly the address its task has in the cluster (or,
// when asked, on every interface: ServerOptions::bind_address), and the loop that accepts
// connections on it. Plumbing of Server, not meant for users.
//
// Contract: the constructor binds and listens at once (so a taken port is reported to whoever
// creates the Server) and throws InvalidArgument when the address does not resolve,
// AlreadyExists when it cannot listen there. Accepted sockets go to the `accept` callback on
// the acceptor's strand (one accept at a time; each socket on the io_context the `socket_context`
// callback picks, the I/O lane it will be served on, so connections do not share that strand).
// close() may be called from any thread; the acceptor is closed on its strand. The owner runs the
// io_context (on any number of threads) and stops it before destroying the listener.
#pragma once

#include <boost/asio.hpp>
#include <functional>
#include <string>
#include <utility>

#include "psflow/core/error.hpp"
#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/host_port.hpp"

namespace psflow::detail {

class Listener {
 public:
  // A new connection's socket and a description of the peer ("client 127.0.0.1:51234").
  using Accept = std::function<void(asio::ip::tcp::socket, std::string description)>;
  // The io_context the next accepted socket will run on.
  using SocketContext = std::function<asio::io_context&()>;

  // Listens on `address` ("host:port" or "[ipv6]:port"; port 0 picks a free one) for task
  // `task`; on `bind_address` instead of the address's host when not empty ("0.0.0.0", "::",
  // "[::]": every interface; the port stays the address's).
  Listener(asio::io_context& io, const std::string& address, const std::string& task,
           const std::string& bind_address = "");
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // The host of the task's address, without brackets ("::1").
  const std::string& host() const noexcept { return host_; }
  // The port listened on (the real one when the address gave port 0).
  unsigned short port() const noexcept { return port_; }

  // Accepts connections until close(), handing each to `accept`; each socket on the context
  // `socket_context` returned as its accept began (the listener's own when that is empty).
  void start(Accept accept, SocketContext socket_context = {});
  // Stops accepting.
  void close();

 private:
  void accept_next();

  asio::io_context& io_;
  asio::ip::tcp::acceptor acceptor_;
  std::string host_;
  unsigned short port_ = 0;
  Accept accept_;
  SocketContext socket_context_;
};

// ---------------------------------------------------------------------------------------------

inline Listener::Listener(asio::io_context& io, const std::string& address, const std::string& task,
                          const std::string& bind_address)
    : io_(io), acceptor_(asio::make_strand(io)) {
  const HostPort split = split_host_port(address);
  host_ = split.host;
  const auto port = static_cast<unsigned short>(std::stoi(split.port));
  std::string bind_host = host_;
  if (!bind_address.empty()) {
    bind_host = bind_address;
    if (bind_host.size() > 2 && bind_host.front() == '[' && bind_host.back() == ']')
      bind_host = bind_host.substr(1, bind_host.size() - 2);
  }
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io_);
  auto endpoints = resolver.resolve(bind_host, std::to_string(port), ec);
  if (ec || endpoints.empty())
    throw InvalidArgument("cannot resolve " + join_host_port(bind_host, std::to_string(port)) +
                          " (task " + task + "): " + ec.message() +
                          (bind_address.empty() ? "" : " (check ServerOptions::bind_address)"));
  const asio::ip::tcp::endpoint endpoint = *endpoints.begin();
  acceptor_.open(endpoint.protocol(), ec);
  // "::" listens on IPv4 too (dual stack), whatever the system's default.
  if (!ec && endpoint.address().is_v6() && is_any_address(bind_host))
    acceptor_.set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw AlreadyExists("cannot listen on " + join_host_port(bind_host, std::to_string(port)) +
                        " for task " + task + ": " + ec.message() +
                        " (is another process using that port? pick a free one in the cluster "
                        "spec)");
  port_ = acceptor_.local_endpoint().port();
}

inline void Listener::start(Accept accept, SocketContext socket_context) {
  accept_ = std::move(accept);
  socket_context_ = std::move(socket_context);
  asio::post(acceptor_.get_executor(), [this] { accept_next(); });
}

inline void Listener::close() {
  asio::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
}

inline void Listener::accept_next() {
  asio::io_context& socket_context = socket_context_ ? socket_context_() : io_;
  acceptor_.async_accept(
      socket_context, [this](const boost::system::error_code& ec, asio::ip::tcp::socket socket) {
        if (ec) return;  // acceptor closed
        boost::system::error_code ignored;
        auto remote = socket.remote_endpoint(ignored);
        accept_(std::move(socket), "client " + join_host_port(remote.address().to_string(),
                                                              std::to_string(remote.port())));
        accept_next();
      });
}

}  // namespace psflow::detail
