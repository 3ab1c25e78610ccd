// Two connected TCP sockets on loopback, for tests of what runs over one connection.
#pragma once

#include <boost/asio.hpp>
#include <utility>

namespace psflow::testing {

// The client end first, then the end the listener accepted; both on `io`.
inline std::pair<boost::asio::ip::tcp::socket, boost::asio::ip::tcp::socket> socket_pair(
    boost::asio::io_context& io) {
  namespace asio = boost::asio;
  asio::ip::tcp::acceptor acceptor(io,
                                   asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::ip::tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  asio::ip::tcp::socket server = acceptor.accept();
  return {std::move(client), std::move(server)};
}

}  // namespace psflow::testing
