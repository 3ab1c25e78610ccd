// PeerCache: a task's connections to the other tasks of its cluster, one per peer task, made
// on first use and then shared by everything that talks to that peer (sessions, tensor sends,
// stop requests). Plumbing of Server, not meant for users.
//
// Connecting resolves the peer's address, connects (over TLS when the owner gives a TLS
// context: tls.hpp), runs the cluster handshake and says hello; while the peer is not up
// it retries with backoff (20 ms doubling up to 1 s) until the caller's patience runs out, and
// says whom it waits for: at once, after wait_log_interval, then at doubling intervals.
// Concurrent requests for one peer share one attempt. The hello reply names the task that
// serves the address and its incarnation.
//
// Contract: thread-safe and never blocks. Completion callbacks run on an I/O thread, or at
// once on the calling thread when the connection is already open or the cache is stopped, so
// a callback must not wait for the I/O threads either. The owner (Server) runs the io_context,
// stops it before destroying the cache, and starts reading each new connection (`adopt`)
// before its hello goes out.
#pragma once

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/distributed/cluster_auth.hpp"
#include "psflow/distributed/connect_errors.hpp"
#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/host_port.hpp"
#include "psflow/distributed/messages.hpp"
#include "psflow/distributed/server_options.hpp"
#include "psflow/distributed/tls.hpp"
#include "psflow/runtime/rendezvous.hpp"

namespace psflow::detail {

class PeerCache {
 public:
  using Clock = std::chrono::steady_clock;
  using ConnectDone = std::function<void(Status, std::shared_ptr<Connection>)>;
  // Starts reading a new outgoing connection (the owner handles the frames that are not
  // replies, and the close).
  using Adopt = std::function<void(const std::shared_ptr<Connection>&)>;
  // "host:port" of a task name; throws (NotFound, InvalidArgument) for a task not in the cluster.
  using AddressOf = std::function<std::string(const std::string& task)>;
  using Log = std::function<void(const std::string&)>;
  // The io_context a new connection will run on (its I/O lane: io_lanes.hpp).
  using SocketContext = std::function<asio::io_context&()>;

  // `tls`: this task's TLS context (tls.hpp), null for plain TCP. `socket_context`: where each
  // connect attempt runs (`io` when empty).
  PeerCache(asio::io_context& io, const ServerOptions& options, std::string self_task,
            std::uint64_t self_incarnation, AddressOf address_of, Adopt adopt, Log log,
            std::shared_ptr<asio::ssl::context> tls = nullptr, SocketContext socket_context = {});
  PeerCache(const PeerCache&) = delete;
  PeerCache& operator=(const PeerCache&) = delete;

  // Calls `done` with the open connection to `task`, connecting (with retries) if there is
  // none. `patience`: how long to keep trying (zero: connect_timeout); then Unavailable naming
  // the task and its address.
  void connect_async(const std::string& task, ConnectDone done,
                     std::chrono::milliseconds patience = {});
  // The open connection to `task` if there is one now, else null; never connects.
  std::shared_ptr<Connection> open_connection(const std::string& task) const;
  // Sends `frame` to `task` over its open connection, connecting first when there is none;
  // `unreachable` gets the reason when it cannot be sent (on an I/O thread).
  void send(const std::string& task, wire::Frame frame,
            std::function<void(const Status&)> unreachable);
  // The incarnation `task` reported when we last connected (0 when never).
  std::uint64_t incarnation(const std::string& task) const;
  // Closes and forgets `task`'s connection, so the next use reconnects.
  void drop(const std::string& task);
  // A peer said hello on a connection it opened: use that one for `task` from now on. A peer
  // opens a connection only when it has no open one to us, so one we still count open is stale:
  // its close is not read yet (after this task was frozen, its backlog still being read on
  // another I/O thread), and what we send there would be lost. When both ends connect at once,
  // each end uses the newer of the two open connections, and either carries frames both ways.
  void accept_hello(const std::string& task, const std::shared_ptr<Connection>& connection,
                    std::uint64_t incarnation);
  // `connection` closed: no peer uses it any more.
  void forget(const std::shared_ptr<Connection>& connection);
  // The task stopped: from now on every connect fails with Unavailable at once.
  void stop();

 private:
  struct Peer {
    std::shared_ptr<Connection> connection;
    std::uint64_t incarnation = 0;
    bool connecting = false;
    std::vector<ConnectDone> waiters;
  };

  // One attempt (on a strand of its own): resolve, connect, hello; on failure retry after a backoff
  // until `deadline`. A give-up timer cuts an attempt still in flight (a connect nobody answers, a
  // peer that accepts but never says hello) at `deadline`. `last_why`: why the previous
  // attempt failed; `last_unresolved`: because its host name did not resolve.
  void try_connect(const std::string& task, Clock::time_point started, Clock::time_point deadline,
                   Clock::time_point last_log, int attempt, const std::string& last_why = {},
                   bool last_unresolved = false);
  void finish_connect(const std::string& task, Status status,
                      std::shared_ptr<Connection> connection, std::uint64_t incarnation);
  // Connects `socket` to the first of `endpoints` that answers, then runs the cluster handshake
  // (cluster_auth.hpp), inside TLS when `tls` (whose TCP socket `socket` is) is not null; `done`
  // gets its outcome (a failed connect: Unavailable).
  void connect_and_authenticate(std::shared_ptr<asio::ip::tcp::socket> socket,
                                std::shared_ptr<TlsStream> tls,
                                const asio::ip::tcp::resolver::results_type& endpoints,
                                std::string peer, std::function<void(const Status&)> done);

  asio::io_context& io_;
  const ServerOptions options_;
  const std::string self_task_;
  const std::uint64_t self_incarnation_;
  const AddressOf address_of_;
  const Adopt adopt_;
  const Log log_;
  const std::shared_ptr<asio::ssl::context> tls_;
  const SocketContext socket_context_;

  mutable std::mutex mutex_;
  bool stopped_ = false;
  std::map<std::string, Peer> peers_;  // by task name
};

// The error when a task's host name did not resolve until the deadline.
std::string unresolved_host_message(const std::string& host, const std::string& task,
                                    std::chrono::steady_clock::duration waited,
                                    const std::string& why);

// ---------------------------------------------------------------------------------------------

inline std::string unresolved_host_message(const std::string& host, const std::string& task,
                                           std::chrono::steady_clock::duration waited,
                                           const std::string& why) {
  return "could not resolve host " + host + " for task " + task + " after " +
         duration_string(waited) + ": " + why +
         ": check the host name in the cluster spec (and that its DNS record exists)";
}

inline PeerCache::PeerCache(asio::io_context& io, const ServerOptions& options,
                            std::string self_task, std::uint64_t self_incarnation,
                            AddressOf address_of, Adopt adopt, Log log,
                            std::shared_ptr<asio::ssl::context> tls, SocketContext socket_context)
    : io_(io),
      options_(options),
      self_task_(std::move(self_task)),
      self_incarnation_(self_incarnation),
      address_of_(std::move(address_of)),
      adopt_(std::move(adopt)),
      log_(std::move(log)),
      tls_(std::move(tls)),
      socket_context_(std::move(socket_context)) {}

inline void PeerCache::connect_async(const std::string& task, ConnectDone done,
                                     std::chrono::milliseconds patience) {
  std::shared_ptr<Connection> ready;
  {
    std::unique_lock lock(mutex_);
    if (stopped_) {
      lock.unlock();
      done(Status(ErrorCode::unavailable, "task " + self_task_ + " has stopped"), nullptr);
      return;
    }
    Peer& peer = peers_[task];
    if (peer.connection && peer.connection->is_open()) {
      ready = peer.connection;
    } else {
      peer.waiters.push_back(std::move(done));
      if (peer.connecting) return;
      peer.connecting = true;
    }
  }
  if (ready) {
    done(Status{}, ready);
    return;
  }
  const auto now = Clock::now();
  const auto deadline = now + (patience.count() > 0 ? patience : options_.connect_timeout);
  asio::post(io_, [this, task, now, deadline] { try_connect(task, now, deadline, now, 0); });
}

inline std::shared_ptr<Connection> PeerCache::open_connection(const std::string& task) const {
  std::lock_guard lock(mutex_);
  auto it = peers_.find(task);
  if (it == peers_.end() || !it->second.connection || !it->second.connection->is_open())
    return nullptr;
  return it->second.connection;
}

inline void PeerCache::send(const std::string& task, wire::Frame frame,
                            std::function<void(const Status&)> unreachable) {
  if (auto connection = open_connection(task)) return connection->send(std::move(frame));
  auto shared = std::make_shared<wire::Frame>(std::move(frame));
  connect_async(task, [shared, unreachable = std::move(unreachable)](
                          Status status, std::shared_ptr<Connection> connection) {
    if (status.ok())
      connection->send(std::move(*shared));
    else
      unreachable(status);
  });
}

inline std::uint64_t PeerCache::incarnation(const std::string& task) const {
  std::lock_guard lock(mutex_);
  auto it = peers_.find(task);
  return it == peers_.end() ? 0 : it->second.incarnation;
}

inline void PeerCache::drop(const std::string& task) {
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard lock(mutex_);
    auto it = peers_.find(task);
    if (it == peers_.end()) return;
    connection = std::move(it->second.connection);
  }
  if (connection) connection->close(Status(ErrorCode::aborted, "dropped by " + self_task_));
}

inline void PeerCache::accept_hello(const std::string& task,
                                    const std::shared_ptr<Connection>& connection,
                                    std::uint64_t incarnation) {
  std::lock_guard lock(mutex_);
  Peer& peer = peers_[task];
  peer.connection = connection;
  peer.incarnation = incarnation;
}

inline void PeerCache::forget(const std::shared_ptr<Connection>& connection) {
  std::lock_guard lock(mutex_);
  for (auto& [task, peer] : peers_)
    if (peer.connection == connection) peer.connection.reset();
}

inline void PeerCache::stop() {
  std::lock_guard lock(mutex_);
  stopped_ = true;
}

inline void PeerCache::try_connect(const std::string& task, Clock::time_point started,
                                   Clock::time_point deadline, Clock::time_point last_log,
                                   int attempt, const std::string& last_why, bool last_unresolved) {
  std::string address;
  try {
    address = address_of_(task);
  } catch (const Error& e) {
    return finish_connect(task, Status(e.code(), e.message()), nullptr, 0);
  }
  HostPort host_port;
  try {
    host_port = split_host_port(address);  // "[::1]:2222" resolves "::1"
  } catch (const Error& e) {
    return finish_connect(task, Status(e.code(), e.message()), nullptr, 0);
  }
  auto give_up_now = [this, task, started, address, host = host_port.host](const std::string& why,
                                                                           bool unresolved) {
    const auto waited = Clock::now() - started;
    finish_connect(task,
                   Status(ErrorCode::unavailable,
                          unresolved ? unresolved_host_message(host, task, waited, why)
                                     : "could not reach " + task + " at " + address + " for " +
                                           duration_string(waited) + " (" + why +
                                           "): is that task running, and is its address right?"),
                   nullptr, 0);
  };
  if (attempt > 0 && Clock::now() >= deadline) return give_up_now(last_why, last_unresolved);
  // What the give-up timer must cut. Everything of one attempt (its socket, resolver and
  // timers, and so the handshakes over the socket and the connection it becomes, whose strands
  // run inside this one) is on the attempt's strand: the task has several I/O threads.
  struct Attempt {
    std::shared_ptr<Connection> connection;
    bool over = false;       // finished or retried: the timer has nothing to cut
    bool timed_out = false;  // the timer cut it
  };
  auto state = std::make_shared<Attempt>();
  const auto strand = asio::make_strand(socket_context_ ? socket_context_() : io_);
  // With TLS, `socket` is the stream's own TCP socket (sharing its lifetime), so that the
  // give-up timer below cuts a TLS attempt too.
  auto tls = tls_ ? std::make_shared<TlsStream>(strand, *tls_) : nullptr;
  auto socket = tls ? std::shared_ptr<asio::ip::tcp::socket>(tls, &tls->next_layer())
                    : std::make_shared<asio::ip::tcp::socket>(strand);
  auto resolver = std::make_shared<asio::ip::tcp::resolver>(strand);
  auto give_up = std::make_shared<asio::steady_timer>(strand, deadline);
  give_up->async_wait([state, socket, resolver](const boost::system::error_code& ec) {
    if (ec || state->over) return;
    state->timed_out = true;
    resolver->cancel();
    if (state->connection) {
      state->connection->close(Status(ErrorCode::deadline_exceeded, "no hello reply in time"));
      return;
    }
    boost::system::error_code ignored;
    socket->close(ignored);
  });
  resolver->async_resolve(
      host_port.host, host_port.port,
      [this, task, started, deadline, last_log, attempt, socket, tls, resolver, address, state,
       give_up, give_up_now](const boost::system::error_code& rec,
                             asio::ip::tcp::resolver::results_type endpoints) {
        auto retry = [this, task, started, deadline, last_log, attempt, address, state, give_up,
                      give_up_now](std::string why, bool unresolved = false) {
          if (state->over) return;
          state->over = true;
          give_up->cancel();
          if (state->timed_out) why = "no answer within the connect timeout";
          const auto now = Clock::now();
          if (now >= deadline) return give_up_now(why, unresolved);
          auto next_log = last_log;
          // First after wait_log_interval, then at doubling intervals: a long wait (a
          // worker started long before its ps) says so a few times, not every few seconds.
          if (attempt == 0 ||
              now - last_log >=
                  std::max<Clock::duration>(options_.wait_log_interval, last_log - started)) {
            log_("waiting for " + task + " at " + address + " (" + why + ")");
            next_log = now;
          }
          // Never past the deadline: the next attempt then reports the failure at once.
          const auto backoff = std::min<Clock::duration>(
              std::chrono::milliseconds(std::min(1000, 20 << std::min(attempt, 6))),
              deadline - now);
          auto timer = std::make_shared<asio::steady_timer>(io_, backoff);  // a new attempt
          timer->async_wait([this, timer, task, started, deadline, next_log, attempt, why,
                             unresolved](const boost::system::error_code&) {
            try_connect(task, started, deadline, next_log, attempt + 1, why, unresolved);
          });
        };
        if (rec) return retry(rec.message(), true);  // e.g. a DNS record that is not there yet
        connect_and_authenticate(
            socket, tls, endpoints, task + " at " + address,
            [this, task, socket, tls, retry, address, state, give_up,
             deadline](const Status& authenticated) {
              // A refusal is final: retrying cannot change the secrets or certificates.
              if (authenticated.code() == ErrorCode::unauthenticated && !state->over) {
                state->over = true;
                give_up->cancel();
                return finish_connect(task, authenticated, nullptr, 0);
              }
              if (!authenticated.ok() || state->over || state->timed_out)
                return retry(authenticated.ok() ? "cancelled" : authenticated.message());
              auto connection =
                  tls ? std::make_shared<Connection>(tls, options_.limits, task + " at " + address,
                                                     options_.heartbeat_timeout)
                      : std::make_shared<Connection>(std::move(*socket), options_.limits,
                                                     task + " at " + address,
                                                     options_.heartbeat_timeout);
              state->connection = connection;
              adopt_(connection);
              // The hello is bounded by what is left of the connect deadline too.
              const auto left =
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
              connection->call(
                  wire::make_frame(wire::MessageType::hello,
                                   wire::Hello{self_task_, self_incarnation_}),
                  [this, task, connection, retry, state, give_up](Status status,
                                                                  wire::Frame reply) {
                    if (!status.ok()) return retry(status.message());
                    if (state->over) return;
                    try {
                      auto r = wire::decode<wire::Reply>(reply.metadata, "hello reply");
                      state->over = true;
                      give_up->cancel();
                      if (r.text != task) {
                        connection->close(Status(ErrorCode::invalid_argument, "wrong task"));
                        return finish_connect(task,
                                              Status(ErrorCode::invalid_argument,
                                                     "the address of " + task + " is served by " +
                                                         r.text + ": check the cluster spec"),
                                              nullptr, 0);
                      }
                      connection->set_peer_task(task);
                      finish_connect(task, Status{}, connection, r.incarnation);
                    } catch (const Error& e) {
                      connection->close(Status(e.code(), e.message()));
                      retry(e.message());
                    }
                  },
                  std::max(std::min(options_.rpc_timeout, left), std::chrono::milliseconds(1)));
            });
      });
}

inline void PeerCache::connect_and_authenticate(
    std::shared_ptr<asio::ip::tcp::socket> socket, std::shared_ptr<TlsStream> tls,
    const asio::ip::tcp::resolver::results_type& endpoints, std::string peer,
    std::function<void(const Status&)> done) {
  asio::async_connect(*socket, endpoints,
                      [this, socket, tls, peer = std::move(peer), done = std::move(done)](
                          const boost::system::error_code& ec, const asio::ip::tcp::endpoint&) {
                        if (ec) return done(Status(ErrorCode::unavailable, ec.message()));
                        if (tls)
                          return secure_and_authenticate(tls, AuthRole::client,
                                                         options_.cluster_secret,
                                                         options_.handshake_timeout, peer, done);
                        authenticate(socket, AuthRole::client, options_.cluster_secret,
                                     options_.handshake_timeout, peer, done);
                      });
}

inline void PeerCache::finish_connect(const std::string& task, Status status,
                                      std::shared_ptr<Connection> connection,
                                      std::uint64_t incarnation) {
  std::vector<ConnectDone> waiters;
  {
    std::lock_guard lock(mutex_);
    Peer& peer = peers_[task];
    peer.connecting = false;
    if (status.ok()) {
      peer.connection = connection;
      peer.incarnation = incarnation;
    }
    waiters.swap(peer.waiters);
  }
  if (status.ok())
    log_("connected to " + task + " (incarnation " + incarnation_string(incarnation) + ")");
  for (auto& w : waiters) w(status, connection);
}

}  // namespace psflow::detail
