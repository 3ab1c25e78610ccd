// Mutual TLS between the tasks of a cluster (docs/security.md, "Mutual TLS"): when
// ServerOptions names this task's certificate, its key and the cluster's CA, every connection
// starts with a TLS 1.3 handshake in which both ends show a certificate signed by that CA. Only
// then does the cluster-secret handshake (cluster_auth.hpp) run, inside TLS, and after it the
// frames. Peers are checked against the CA, not by host name: the CA is the cluster's own, so
// whatever it signed is a member (a task's address may be an IP, a DNS alias or a Slurm node).
//
// Errors: a refused certificate, either way, is Unauthenticated (final, like a wrong secret); a
// handshake that does not finish within the handshake timeout (a plain task on the other end
// waits silently for a greeting) is Unavailable. Plumbing of Server and PeerCache, not meant for
// users.
#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "psflow/core/error.hpp"
#include "psflow/distributed/cluster_auth.hpp"
#include "psflow/distributed/connect_errors.hpp"
#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/server_options.hpp"

namespace psflow::detail {

// True when `options` name all three TLS files; throws InvalidArgument naming the missing ones
// when they name only some.
bool tls_enabled(const ServerOptions& options);

// This task's TLS context: TLS 1.3 only, its certificate and key, peers verified against the CA
// both ways (a server requires the client's certificate). Null when TLS is off. Throws
// InvalidArgument naming the file and its flag when a file cannot be read, is not PEM, or the
// key does not belong to the certificate.
std::shared_ptr<asio::ssl::context> make_tls_context(const ServerOptions& options);

// Runs the TLS handshake on the connected `stream` as `role` within `timeout`, then the cluster
// handshake inside it (authenticate, with `secret`). `done` runs once, on the stream's executor,
// with what authenticate gives, or:
//   Unauthenticated  a certificate was refused (either way), or the peer does not speak TLS;
//   Unavailable      the connection closed or the handshake took longer than `timeout`;
//   Aborted          (server) the peer closed the connection during the handshake.
// The stream is closed on failure.
void secure_and_authenticate(std::shared_ptr<TlsStream> stream, AuthRole role, std::string secret,
                             std::chrono::milliseconds timeout, std::string peer,
                             std::function<void(Status)> done);

// admit_member over TLS: `admit` gets the stream once the peer passed both handshakes; a
// refused peer is logged with its address and why ("rejected client 127.0.0.1:47734: TLS
// handshake failed: ...").
void admit_tls_member(asio::ip::tcp::socket socket, asio::ssl::context& context, std::string secret,
                      std::chrono::milliseconds timeout, std::string description,
                      std::function<void(const std::string&)> log,
                      std::function<void(std::shared_ptr<TlsStream>, std::string)> admit);

// ---------------------------------------------------------------------------------------------

inline bool tls_enabled(const ServerOptions& options) {
  std::string missing;
  auto check = [&](const std::string& file, const char* name) {
    if (!file.empty()) return;
    if (!missing.empty()) missing += ", ";
    missing += name;
  };
  check(options.tls_cert_file, "tls_cert_file (--tls_cert)");
  check(options.tls_key_file, "tls_key_file (--tls_key)");
  check(options.tls_ca_file, "tls_ca_file (--tls_ca)");
  if (missing.empty()) return true;
  if (options.tls_cert_file.empty() && options.tls_key_file.empty() && options.tls_ca_file.empty())
    return false;
  std::string message = "TLS needs a certificate, its key and the cluster's CA, but ";
  message += missing;
  message += " is not set: give all three (docs/security.md), or none for plain TCP";
  throw InvalidArgument(message);
}

namespace tls_files {

// Throws InvalidArgument unless `path` can be opened for reading.
inline void check_readable(const std::string& path, const char* what, const char* flag) {
  if (std::ifstream(path).good()) return;
  std::string message = "cannot read the TLS ";
  message += what;
  message += " file '" + path + "' (" + flag + "): give a readable PEM file";
  throw InvalidArgument(message);
}

}  // namespace tls_files

inline std::shared_ptr<asio::ssl::context> make_tls_context(const ServerOptions& options) {
  if (!tls_enabled(options)) return nullptr;
  using tls_files::check_readable;
  check_readable(options.tls_cert_file, "certificate", "--tls_cert");
  check_readable(options.tls_key_file, "key", "--tls_key");
  check_readable(options.tls_ca_file, "CA", "--tls_ca");
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tlsv13);
  boost::system::error_code ec;
  auto fail = [&](const std::string& what, const std::string& file, const char* advice) {
    std::string message = "the TLS ";
    message += what;
    message += " file '" + file + "' is unusable (" + ec.message() + "): ";
    message += advice;
    throw InvalidArgument(message);
  };
  context->use_certificate_chain_file(options.tls_cert_file, ec);
  if (ec)
    fail("certificate", options.tls_cert_file, "give the task's PEM certificate (--tls_cert)");
  auto mismatch = [&] {
    std::string message = "the TLS key file '" + options.tls_key_file;
    message += "' does not belong to the certificate '" + options.tls_cert_file;
    message += "': give the key the certificate was made for (--tls_key, --tls_cert)";
    throw InvalidArgument(message);
  };
  context->use_private_key_file(options.tls_key_file, asio::ssl::context::pem, ec);
  if (ec && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH)
    mismatch();
  if (ec) fail("key", options.tls_key_file, "give the task's unencrypted PEM key (--tls_key)");
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) mismatch();
  context->load_verify_file(options.tls_ca_file, ec);
  if (ec) fail("CA", options.tls_ca_file, "give the cluster CA's PEM certificate (--tls_ca)");
  context->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  // AES-128-GCM first, as gRPC (BoringSSL) orders them: about a fifth faster than AES-256 here,
  // and the bulk of TLS's cost on large tensors is the cipher.
  SSL_CTX_set_ciphersuites(context->native_handle(),
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  return context;
}

namespace tls_handshake {

inline std::string advice() {
  return "every task needs TLS on, with a certificate signed by the cluster's CA (--tls_cert, "
         "--tls_key, --tls_ca; see docs/security.md)";
}

// Why the TLS handshake on `stream` failed, as the status `done` gets.
inline Status failure(TlsStream& stream, AuthRole role, const std::string& peer,
                      const boost::system::error_code& ec, bool timed_out,
                      std::chrono::milliseconds timeout) {
  const bool server = role == AuthRole::server;
  if (timed_out) {
    const std::string seconds = duration_string(timeout);
    std::string message = server ? "no TLS handshake within " : "no TLS handshake from " + peer;
    message += server ? seconds : std::string(" within ") + seconds;
    if (server) message += " (is it a task without TLS? " + advice() + ")";
    return Status(ErrorCode::unavailable, message);
  }
  if (ec.category() == asio::error::get_ssl_category()) {
    std::string reason = ec.message();
    const long verify = SSL_get_verify_result(stream.native_handle());
    if (verify != X509_V_OK) {
      reason += " (";
      reason += X509_verify_cert_error_string(verify);
      reason += ")";
    }
    std::string message = server ? "TLS handshake" : "TLS handshake with " + peer;
    message += " failed";
    message += ": " + reason + ": " + advice();
    return Status(ErrorCode::unauthenticated, message);
  }
  const bool closed = closed_by_peer(ec);
  if (server && closed)
    return Status(ErrorCode::aborted, "closed the connection during the TLS handshake");
  std::string message = server ? "the TLS handshake" : "the TLS handshake with " + peer;
  message += closed ? " was cut: the peer closed the connection" : " failed (" + ec.message() + ")";
  return Status(ErrorCode::unavailable, message);
}

}  // namespace tls_handshake

inline void secure_and_authenticate(std::shared_ptr<TlsStream> stream, AuthRole role,
                                    std::string secret, std::chrono::milliseconds timeout,
                                    std::string peer, std::function<void(Status)> done) {
  struct State {
    explicit State(const asio::any_io_executor& executor)
        : strand(asio::make_strand(executor)), timer(strand) {}
    asio::strand<asio::any_io_executor> strand;
    asio::steady_timer timer;
    bool timed_out = false;
  };
  auto state = std::make_shared<State>(stream->get_executor());
  asio::dispatch(state->strand, [=, secret = std::move(secret), peer = std::move(peer),
                                 done = std::move(done)]() mutable {
    state->timer.expires_after(timeout);
    state->timer.async_wait([state, stream](const boost::system::error_code& ec) {
      if (ec) return;  // the handshake finished first
      state->timed_out = true;
      boost::system::error_code ignored;
      stream->lowest_layer().close(ignored);  // the handshake then fails at once
    });
    stream->async_handshake(
        role == AuthRole::client ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
        asio::bind_executor(
            state->strand, [=, secret = std::move(secret), peer = std::move(peer),
                            done = std::move(done)](const boost::system::error_code& ec) mutable {
              state->timer.cancel();
              if (!ec && !state->timed_out)
                return authenticate(stream, role, std::move(secret), timeout, std::move(peer),
                                    std::move(done));
              const Status status =
                  tls_handshake::failure(*stream, role, peer, ec, state->timed_out, timeout);
              boost::system::error_code ignored;
              stream->lowest_layer().shutdown(asio::socket_base::shutdown_both, ignored);
              stream->lowest_layer().close(ignored);
              done(status);
            }));
  });
}

inline void admit_tls_member(asio::ip::tcp::socket socket, asio::ssl::context& context,
                             std::string secret, std::chrono::milliseconds timeout,
                             std::string description, std::function<void(const std::string&)> log,
                             std::function<void(std::shared_ptr<TlsStream>, std::string)> admit) {
  auto stream = std::make_shared<TlsStream>(std::move(socket), context);
  secure_and_authenticate(
      stream, AuthRole::server, std::move(secret), timeout, description,
      [stream, description, log = std::move(log), admit = std::move(admit)](Status status) {
        if (status.ok()) return admit(stream, description);
        if (status.code() != ErrorCode::aborted)
          log("rejected " + description + ": " + status.message());
      });
}

}  // namespace psflow::detail
