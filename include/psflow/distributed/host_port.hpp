// Host and port of a cluster address, the way sockets need them: "h0:2222" is host "h0" and
// port "2222"; an IPv6 literal is written in brackets, "[::1]:2222", and its host is "::1"
// (what the resolver takes). join_host_port puts the brackets back. Light on purpose (no Asio):
// ClusterSpec and the flag parser use it too. Plumbing of Server and ClusterSpec.
#pragma once

#include <string>
#include <string_view>

#include "psflow/core/error.hpp"

namespace psflow::detail {

struct HostPort {
  std::string host;  // without brackets: "::1", "h0", "10.0.0.1"
  std::string port;  // digits
};

// Splits "host:port" or "[ipv6]:port". Throws InvalidArgument, saying how to write it, for: no
// ":port", a port that is not digits, an empty host, a '[' without its ']' (or the reverse),
// anything between ']' and ':', brackets that do not enclose the whole host, and an IPv6 host
// without brackets ("::1:2222" is ambiguous).
HostPort split_host_port(std::string_view address);

// "host:port", with brackets around a host that contains ':' (an IPv6 literal).
std::string join_host_port(std::string_view host, std::string_view port);

// True for the addresses that mean "every interface": "0.0.0.0", "::" and "[::]".
bool is_any_address(std::string_view host);

// ---------------------------------------------------------------------------------------------

inline HostPort split_host_port(std::string_view address) {
  const std::string quoted = "address '" + std::string(address) + "'";
  const std::string how = ": write host:port, e.g. 'h0:2222', or [ipv6]:port, e.g. '[::1]:2222'";
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) throw InvalidArgument(quoted + " has no port" + how);
  std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (port.empty()) throw InvalidArgument(quoted + " has an empty port" + how);
  for (char c : port)
    if (c < '0' || c > '9')
      throw InvalidArgument(quoted + ": port '" + std::string(port) + "' is not a number" + how);
  const bool opens = !host.empty() && host.front() == '[';
  const bool closes = !host.empty() && host.back() == ']';
  if (opens != closes) {
    throw InvalidArgument(quoted + " has " +
                          (opens ? "a '[' without its ']'" : "a ']' without its '['") +
                          " before the port (or something between ']' and ':')" + how);
  }
  if (opens) host = host.substr(1, host.size() - 2);
  if (host.find_first_of("[]") != std::string_view::npos)
    throw InvalidArgument(quoted + " has misplaced brackets: they enclose the whole host" + how);
  if (host.empty()) throw InvalidArgument(quoted + " has an empty host" + how);
  if (!opens && host.find(':') != std::string_view::npos)
    throw InvalidArgument(quoted + " looks like an IPv6 address without brackets" + how);
  return {std::string(host), std::string(port)};
}

inline std::string join_host_port(std::string_view host, std::string_view port) {
  const bool ipv6 = host.find(':') != std::string_view::npos;
  return (ipv6 ? "[" : "") + std::string(host) + (ipv6 ? "]:" : ":") + std::string(port);
}

inline bool is_any_address(std::string_view host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]";
}

}  // namespace psflow::detail
