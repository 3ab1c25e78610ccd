// Cluster authentication: only the tasks that know the cluster's shared secret
// (ServerOptions::cluster_secret) get in. What it protects and what not: docs/security.md.
//
// Every new connection starts with a short handshake on the raw socket, before any frame is
// read, so nothing a stranger sends is ever parsed as a frame. The accepting task speaks first:
//   server -> client  greeting  "PSFA", version, has-secret flag, nonce_s        (40 bytes)
//   client -> server  greeting  "PSFA", version, has-secret flag, nonce_c, proof_c (72 bytes)
//   server -> client  verdict   "PSFA", version, accepted flag, proof_s        (40 bytes; only
//                                                                    when both have a secret)
// with proof_c = HMAC-SHA256(secret, "psflow cluster auth v1 client" | nonce_s | nonce_c) and
// proof_s = the same keyed with the label "... server". Each side proves that it knows the
// secret without sending it; both nonces (32 random bytes each) make every proof fresh, and the
// role label keeps one side's proof from passing as the other's when reflected back. Proofs are
// compared in constant time (CRYPTO_memcmp). A client that is refused gets Unauthenticated,
// which nobody retries: it stays so until the secrets are fixed.
//
// Without a secret on either side the greetings still go (no cryptography; about one round
// trip when connecting, nothing afterwards), so that a task with a secret and one without
// refuse each other with a clear message instead of failing later on garbled frames. Each side
// gives up after the handshake timeout. Plumbing of Server (Listener's accepted sockets) and
// PeerCache (its outgoing ones); not meant for users.
#pragma once

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "psflow/core/error.hpp"
#include "psflow/distributed/connect_errors.hpp"

namespace psflow::detail {

enum class AuthRole { client, server };

// 32 bytes: a nonce, or an HMAC-SHA256 proof.
using AuthBytes = std::array<unsigned char, 32>;

// Fresh random bytes from OpenSSL's generator; Internal if it fails.
AuthBytes random_nonce();
// HMAC-SHA256(secret, "psflow cluster auth v1 <role>" | nonce_s | nonce_c).
AuthBytes auth_proof(std::string_view secret, AuthRole role, const AuthBytes& server_nonce,
                     const AuthBytes& client_nonce);
// Constant-time comparison.
bool same_proof(const AuthBytes& a, const AuthBytes& b);

// Runs the handshake on the connected `socket` (a TCP socket, or a TLS stream over one once its
// own handshake passed: tls.hpp) as `role`; `peer` names the other end in
// messages ("client 127.0.0.1:47734", "/job:ps/replica:0/task:0 at h0:2222"). `done` runs once,
// on the socket's executor, with:
//   OK               the peer is a member (or neither side has a secret): frames may flow;
//   Unauthenticated  refused, either way: a secret on one side only, or different secrets (or,
//                    over TLS, the peer refused this task's certificate);
//   Unavailable      the connection failed, the peer does not speak this handshake, or the
//                    handshake took longer than `timeout` (worth another try);
//   Aborted          the peer closed the connection before sending a byte (a port probe).
// The socket is closed on failure. The caller keeps `socket` alive (done holds it, usually).
template <class Stream>
void authenticate(std::shared_ptr<Stream> socket, AuthRole role, std::string secret,
                  std::chrono::milliseconds timeout, std::string peer,
                  std::function<void(Status)> done);

// The accepting side, as Server uses it: `admit` gets the socket (and `description`) once the
// peer passed; a refused peer is logged with its address ("rejected client 127.0.0.1:47734:
// it has no cluster secret but this task has one: ..."), a port probe is not.
void admit_member(boost::asio::ip::tcp::socket socket, std::string secret,
                  std::chrono::milliseconds timeout, std::string description,
                  std::function<void(const std::string&)> log,
                  std::function<void(boost::asio::ip::tcp::socket, std::string)> admit);

// ---------------------------------------------------------------------------------------------

inline AuthBytes random_nonce() {
  AuthBytes nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1)
    throw Internal("OpenSSL's random generator failed: cannot make a handshake nonce");
  return nonce;
}

inline AuthBytes auth_proof(std::string_view secret, AuthRole role, const AuthBytes& server_nonce,
                            const AuthBytes& client_nonce) {
  std::string message =
      role == AuthRole::client ? "psflow cluster auth v1 client" : "psflow cluster auth v1 server";
  message.append(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size());
  message.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  AuthBytes proof{};
  unsigned int length = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), proof.data(),
            &length) ||
      length != proof.size())
    throw Internal("OpenSSL's HMAC-SHA256 failed: cannot prove the cluster secret");
  return proof;
}

inline bool same_proof(const AuthBytes& a, const AuthBytes& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

template <class Stream>
class AuthHandshake : public std::enable_shared_from_this<AuthHandshake<Stream>> {
 public:
  AuthHandshake(std::shared_ptr<Stream> socket, AuthRole role, std::string secret, std::string peer,
                std::function<void(Status)> done)
      : socket_(std::move(socket)),
        strand_(boost::asio::make_strand(socket_->get_executor())),
        timer_(strand_),
        role_(role),
        secret_(std::move(secret)),
        peer_(std::move(peer)),
        done_(std::move(done)) {}

  void start(std::chrono::milliseconds timeout) {
    boost::asio::dispatch(strand_, [self = this->shared_from_this(), timeout] {
      self->timer_.expires_after(timeout);
      self->timer_.async_wait([self, timeout](const boost::system::error_code& ec) {
        if (ec || self->finished_) return;
        const std::string seconds = duration_string(timeout);
        self->finish(Status(
            ErrorCode::unavailable,
            self->role_ == AuthRole::server
                ? std::string("no handshake within ") + seconds
                : "no handshake from " + self->peer_ + " within " + seconds + self->plain_hint()));
      });
      try {
        if (self->role_ == AuthRole::server)
          self->server_greet();
        else
          self->client_read_greeting();
      } catch (const Error& e) {
        self->finish(Status(e.code(), e.message()));
      }
    });
  }

 private:
  static constexpr std::size_t kHead = 8;  // "PSFA", version, flag, two reserved bytes
  static constexpr std::size_t kGreeting = kHead + 32;
  static constexpr std::size_t kClientGreeting = kHead + 64;
  static constexpr std::size_t kVerdict = kHead + 32;
  static constexpr unsigned char kVersion = 1;

  bool has_secret() const { return !secret_.empty(); }
  std::string advice() const {
    return "give every task of the cluster the same secret (the environment variable "
           "PSFLOW_CLUSTER_SECRET or --secret_file; see docs/security.md)";
  }

  // A task with TLS on waits, silent, for a TLS handshake that a plain client never starts.
  std::string plain_hint() const {
    if (role_ == AuthRole::server || !std::is_same_v<Stream, boost::asio::ip::tcp::socket>)
      return "";
    return " (if that task uses TLS, this one needs --tls_cert, --tls_key and --tls_ca too)";
  }
  static std::string tls_advice() {
    return "give every task a certificate signed by the cluster's CA (--tls_cert, --tls_key, "
           "--tls_ca; see docs/security.md)";
  }

  void put_head(unsigned char flag) {
    std::memcpy(out_.data(), "PSFA", 4);
    out_[4] = kVersion;
    out_[5] = flag;
    out_[6] = out_[7] = 0;
  }
  bool good_head() const { return std::memcmp(in_.data(), "PSFA", 4) == 0 && in_[4] == kVersion; }
  AuthBytes take(std::size_t at) const {
    AuthBytes bytes{};
    std::memcpy(bytes.data(), in_.data() + at, bytes.size());
    return bytes;
  }
  void put(std::size_t at, const AuthBytes& bytes) {
    std::memcpy(out_.data() + at, bytes.data(), bytes.size());
  }

  using Step = void (AuthHandshake::*)();
  // Writes out_[0, n), then `then` (on the strand); failures finish.
  void write(std::size_t n, Step then) {
    boost::asio::async_write(
        *socket_, boost::asio::buffer(out_.data(), n),
        boost::asio::bind_executor(strand_, [self = this->shared_from_this(), then](
                                                const boost::system::error_code& ec, std::size_t) {
          if (self->finished_) return;
          if (ec) return self->io_failed(ec, !self->received_);
          self->run(then);
        }));
  }
  // Reads n bytes into in_, then `then`.
  void read(std::size_t n, Step then) {
    boost::asio::async_read(*socket_, boost::asio::buffer(in_.data(), n),
                            boost::asio::bind_executor(
                                strand_, [self = this->shared_from_this(), then](
                                             const boost::system::error_code& ec, std::size_t got) {
                                  if (self->finished_) return;
                                  if (ec) return self->io_failed(ec, got == 0 && !self->received_);
                                  self->received_ = true;
                                  self->run(then);
                                }));
  }
  void run(Step then) {
    try {
      (this->*then)();
    } catch (const Error& e) {
      finish(Status(e.code(), e.message()));
    }
  }
  // `nothing_read`: the peer never sent a byte.
  void io_failed(const boost::system::error_code& ec, bool nothing_read) {
    // Over TLS 1.3 a client learns that its certificate was refused only here, from the alert
    // that answers its first read: a refusal, final like a wrong secret.
    if (ec.category() == boost::asio::error::get_ssl_category())
      return finish(Status(ErrorCode::unauthenticated,
                           (role_ == AuthRole::server ? std::string("TLS failed: ")
                                                      : peer_ + " refused this task over TLS: ") +
                               ec.message() + ": " + tls_advice()));
    const bool closed = closed_by_peer(ec);
    if (role_ == AuthRole::server && closed && nothing_read)
      return finish(Status(ErrorCode::aborted, "closed the connection before the handshake"));
    std::string what = closed ? "was closed by the peer" : "failed (" + ec.message() + ")";
    if (closed && nothing_read) what += plain_hint();
    finish(Status(
        ErrorCode::unavailable,
        (role_ == AuthRole::server ? "the connection " : "the connection to " + peer_ + " ") +
            what + " during the handshake"));
  }
  void not_psflow() {
    finish(Status(ErrorCode::unavailable,
                  role_ == AuthRole::server
                      ? "it does not speak psflow's handshake (not a psflow task, or another "
                        "version of psflow)"
                      : peer_ + " does not speak psflow's handshake (not a psflow task, or "
                                "another version of psflow): check the cluster spec"));
  }

  // Server: greet, read the client's greeting, judge it.
  void server_greet() {
    if (has_secret()) server_nonce_ = random_nonce();
    put_head(has_secret() ? 1 : 0);
    put(kHead, server_nonce_);
    write(kGreeting, &AuthHandshake::server_read_client);
  }
  void server_read_client() { read(kClientGreeting, &AuthHandshake::server_judge); }
  void server_judge() {
    if (!good_head()) return not_psflow();
    const bool client_secret = in_[5] == 1;
    if (!has_secret() && !client_secret) return finish(Status{});
    if (!client_secret)
      return finish(Status(ErrorCode::unauthenticated,
                           "it has no cluster secret but this task has one: " + advice()));
    if (!has_secret())
      return finish(Status(ErrorCode::unauthenticated,
                           "it has a cluster secret but this task has none: " + advice()));
    client_nonce_ = take(kHead);
    const bool member = same_proof(
        take(kHead + 32), auth_proof(secret_, AuthRole::client, server_nonce_, client_nonce_));
    put_head(member ? 1 : 0);
    put(kHead,
        member ? auth_proof(secret_, AuthRole::server, server_nonce_, client_nonce_) : AuthBytes{});
    write(kVerdict, member ? &AuthHandshake::accepted : &AuthHandshake::rejected_wrong_secret);
  }
  void accepted() { finish(Status{}); }
  void rejected_wrong_secret() {
    finish(Status(ErrorCode::unauthenticated,
                  "its cluster secret differs from this task's (wrong proof): " + advice()));
  }

  // Client: read the greeting, answer it, read the verdict when both have a secret.
  void client_read_greeting() { read(kGreeting, &AuthHandshake::client_answer); }
  void client_answer() {
    if (!good_head()) return not_psflow();
    const bool server_secret = in_[5] == 1;
    server_nonce_ = take(kHead);
    out_.fill(0);
    put_head(has_secret() ? 1 : 0);
    if (has_secret() && server_secret) {
      client_nonce_ = random_nonce();
      put(kHead, client_nonce_);
      put(kHead + 32, auth_proof(secret_, AuthRole::client, server_nonce_, client_nonce_));
    }
    if (!has_secret() && !server_secret) return write(kClientGreeting, &AuthHandshake::accepted);
    if (!has_secret()) return write(kClientGreeting, &AuthHandshake::refused_no_secret_here);
    if (!server_secret) return write(kClientGreeting, &AuthHandshake::refused_no_secret_there);
    write(kClientGreeting, &AuthHandshake::client_read_verdict);
  }
  void refused_no_secret_here() {
    finish(Status(ErrorCode::unauthenticated, peer_ +
                                                  " requires a cluster secret and this task has "
                                                  "none: " +
                                                  advice()));
  }
  void refused_no_secret_there() {
    finish(Status(ErrorCode::unauthenticated,
                  "this task has a cluster secret but " + peer_ + " has none: " + advice()));
  }
  void client_read_verdict() { read(kVerdict, &AuthHandshake::client_check_verdict); }
  void client_check_verdict() {
    if (!good_head()) return not_psflow();
    if (in_[5] != 1)
      return finish(
          Status(ErrorCode::unauthenticated,
                 peer_ + " rejected this task's cluster secret (the secrets differ): " + advice()));
    if (!same_proof(take(kHead),
                    auth_proof(secret_, AuthRole::server, server_nonce_, client_nonce_)))
      return finish(Status(ErrorCode::unauthenticated,
                           peer_ +
                               " could not prove that it knows the cluster secret (the secrets "
                               "differ, or another process serves that address): " +
                               advice()));
    finish(Status{});
  }

  void finish(Status status) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    if (!status.ok()) {
      boost::system::error_code ignored;
      socket_->lowest_layer().shutdown(boost::asio::socket_base::shutdown_both, ignored);
      socket_->lowest_layer().close(ignored);
    }
    auto done = std::move(done_);
    done_ = nullptr;
    done(std::move(status));
  }

  std::shared_ptr<Stream> socket_;
  boost::asio::strand<boost::asio::any_io_executor> strand_;
  boost::asio::steady_timer timer_;
  const AuthRole role_;
  const std::string secret_;
  const std::string peer_;
  std::function<void(Status)> done_;
  std::array<unsigned char, kClientGreeting> out_{};
  std::array<unsigned char, kClientGreeting> in_{};
  AuthBytes server_nonce_{};
  AuthBytes client_nonce_{};
  bool finished_ = false;
  bool received_ = false;  // a read completed: the peer said something
};

template <class Stream>
void authenticate(std::shared_ptr<Stream> socket, AuthRole role, std::string secret,
                  std::chrono::milliseconds timeout, std::string peer,
                  std::function<void(Status)> done) {
  std::make_shared<AuthHandshake<Stream>>(std::move(socket), role, std::move(secret),
                                          std::move(peer), std::move(done))
      ->start(timeout);
}

inline void admit_member(boost::asio::ip::tcp::socket socket, std::string secret,
                         std::chrono::milliseconds timeout, std::string description,
                         std::function<void(const std::string&)> log,
                         std::function<void(boost::asio::ip::tcp::socket, std::string)> admit) {
  auto shared = std::make_shared<boost::asio::ip::tcp::socket>(std::move(socket));
  authenticate(
      shared, AuthRole::server, std::move(secret), timeout, description,
      [shared, description, log = std::move(log), admit = std::move(admit)](Status status) {
        if (status.ok()) return admit(std::move(*shared), description);
        if (status.code() != ErrorCode::aborted)
          log("rejected " + description + ": " + status.message());
      });
}

}  // namespace psflow::detail
