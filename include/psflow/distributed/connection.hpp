// Connection: one TCP connection between two tasks, used in both directions.
//
// Either side may send requests, replies and one-way frames. A frame is written with one
// scatter-gather write (outgoing_frame.hpp: no payload copy), from the sending thread when the
// connection is idle, else on the connection's strand together with everything queued behind
// it. Reads go through a FrameParser (frame_parser.hpp): several small frames cost one read,
// large payloads go straight into newly allocated tensors. A frame that fails validation
// closes only this connection, with the reason logged; every pending request then fails with
// Unavailable. Requests may carry a deadline, checked by a timer every 50 ms; the same timer
// drives the heartbeats (heartbeat_monitor.hpp): a peer silent for the heartbeat timeout is
// declared dead and the connection closes with Unavailable naming it and how long it was silent.
//
// Reading. Started with ConnectionThreads (as a Server starts its plain TCP connections), a
// connection reads on a thread of its own, blocked in its socket's recv: a message then costs one
// system call, where the reactor (epoll) costs three: the read that finds nothing, epoll_wait and
// the read after it (on this project's 2-core VM about 6 µs of a 4 KiB ps step's 45;
// benchmarks/README.md). The socket leaves Asio's reactor for it, so what the sending thread
// cannot write at once goes out through a writer thread of the connection's own, started when
// first needed. Closing shuts the socket down, which ends both threads' waits; the reader then
// fails the pending requests and calls the close handler. The reader runs with a short time
// slice (runtime/short_time_slice.hpp), the normal one while it receives a payload of
// kLargePayload or more: it wakes for a frame and sleeps again, and a small step's request
// should not wait for a core behind another worker's 64 MiB update. The writer, which only
// ever moves what did not fit in the socket at once, keeps the normal slice. Without
// ConnectionThreads, and always over TLS, the connection reads through Asio on its strand.
//
// Over TLS (tls.hpp) the same frames go through an asio::ssl::stream instead of the plain
// socket: OpenSSL's state is not thread-safe, so every write then goes through the strand
// (async_write), small pieces gathered into one record. The plain socket keeps its direct
// sendmsg path.
//
// Thread-safe: send(), call() and close() may be called from any thread. Handlers run one at a
// time: on the connection's reader thread, or on its strand (one of the task's I/O threads).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/log.hpp"
#include "psflow/distributed/connect_errors.hpp"
#include "psflow/distributed/connection_threads.hpp"
#include "psflow/distributed/frame_parser.hpp"
#include "psflow/distributed/heartbeat_monitor.hpp"
#include "psflow/distributed/outgoing_frame.hpp"
#include "psflow/distributed/wire.hpp"
#include "psflow/runtime/held_output.hpp"
#include "psflow/runtime/short_time_slice.hpp"

namespace psflow {

namespace asio = boost::asio;

// A connection's byte stream when TLS is on: TLS over a TCP socket.
using TlsStream = asio::ssl::stream<asio::ip::tcp::socket>;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Clock = std::chrono::steady_clock;
  using FrameHandler = std::function<void(const std::shared_ptr<Connection>&, wire::Frame)>;
  using CloseHandler = std::function<void(const std::shared_ptr<Connection>&, const Status&)>;
  using ReplyCallback = std::function<void(Status, wire::Frame)>;

  // `description` names the peer in messages ("/job:ps/replica:0/task:0 at 127.0.0.1:2222").
  // `heartbeat_timeout`: how long the peer may stay silent before it is declared dead (zero:
  // never; no heartbeats are sent either).
  Connection(asio::ip::tcp::socket socket, wire::WireLimits limits, std::string description,
             std::chrono::milliseconds heartbeat_timeout = {});
  // The same over TLS: `tls` has passed its handshake (tls.hpp).
  Connection(std::shared_ptr<TlsStream> tls, wire::WireLimits limits, std::string description,
             std::chrono::milliseconds heartbeat_timeout = {});

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Starts reading; `on_frame` gets every frame that is not a reply to one of our requests,
  // `on_close` the reason once the connection closes. With `threads`, a plain TCP connection
  // reads (and runs both handlers) on a thread of its own from `threads`, which must outlive
  // that thread (ConnectionThreads::join_all); else both run on the strand.
  void start(FrameHandler on_frame, CloseHandler on_close,
             detail::ConnectionThreads* threads = nullptr);

  // Sends a frame without blocking: when nothing else is being written it goes out from this
  // thread at once (saving a wake-up of the I/O thread per message, the larger part of a small
  // step's latency); the rest, and frames sent meanwhile, are queued for the strand. Frames
  // sent while a frame handler runs on this thread are held until it returns and then written
  // together (see HeldWrites). Dropped silently once the connection is closed.
  void send(wire::Frame frame);

  // While one exists on a thread, frames sent from that thread are held and written when it
  // ends, all those for one connection in one write. Each frame handler runs inside one, so a
  // ps's _Send tensor and its run_graph reply leave together and wake the worker once; so does
  // a worker's step start (master_session.hpp), so its run_graph request and the tensors its
  // own partition sends leave in one write. The executor writes what is held before it runs an
  // expensive kernel (runtime/held_output.hpp): held frames never wait on a computation.
  class HeldWrites {
   public:
    HeldWrites();
    HeldWrites(const HeldWrites&) = delete;
    HeldWrites& operator=(const HeldWrites&) = delete;
    ~HeldWrites();
    static HeldWrites* active() noexcept { return current_; }
    void hold(std::shared_ptr<Connection> connection);
    // Writes what is held now; frames sent later are held again.
    void release();

   private:
    static inline thread_local HeldWrites* current_ = nullptr;
    HeldWrites* previous_;
    detail::OutputHolder previous_holder_;
    std::vector<std::shared_ptr<Connection>> connections_;
  };

  // Sends a request; `done` gets the reply, or Unavailable if the connection closes first, or
  // DeadlineExceeded after `timeout` (zero: no deadline). `done` runs on the strand, or at once
  // on this thread when the connection is closed already.
  void call(wire::Frame request, ReplyCallback done, std::chrono::milliseconds timeout = {});

  // Closes the socket; pending requests fail with `reason`. Idempotent.
  void close(const Status& reason);

  bool is_open() const;
  bool uses_tls() const noexcept { return tls_ != nullptr; }
  // The strand this connection's work runs on (and so which I/O lane: io_lanes.hpp).
  const asio::strand<asio::any_io_executor>& strand() const noexcept { return strand_; }
  const std::string& description() const noexcept { return description_; }

  // The task at the other end once it said hello ("" before).
  std::string peer_task() const;
  void set_peer_task(std::string task);

 private:
  struct Pending {
    ReplyCallback done;
    Clock::time_point deadline;
  };

  // Writes everything queued (strand), then whatever was queued meanwhile.
  void write_queued();
  // One non-blocking sendmsg of the queued frames (mutex_ held); true when nothing is left. A
  // full socket buffer or a failed socket sends nothing: the strand then writes the rest, or
  // reports the failure.
  bool write_queue_without_blocking();
  // The end of a HeldWrites scope: write what it held, from this thread if the socket takes it.
  void write_held();

  // The TCP socket under the frames (the plain one, or the one under TLS).
  asio::ip::tcp::socket& tcp_socket() noexcept { return tls_ ? tls_->next_layer() : socket_; }
  // Calls f(stream) with the stream that carries the frames: the TLS stream, or the socket.
  template <class F>
  void on_stream(F&& f) {
    if (tls_)
      f(*tls_);
    else
      f(socket_);
  }
  // Reading on a thread of its own (start() with ConnectionThreads): the reader's loop, what
  // it calls, and the writer for what the sending threads could not write at once.
  static constexpr std::size_t kLargePayload = 1u << 20;  // its receipt is bulk work
  void read_on_thread();
  Status receive_some(asio::mutable_buffer room, std::size_t& received);
  Status receive_exactly(asio::mutable_buffer piece);
  void write_on_thread();
  // Hands what is queued to whoever writes when the socket had no room: the writer thread
  // when reading on one, else the strand. writing_ stays set.
  void write_later();
  // Reading on a thread: marks the connection closed and shuts its socket down, which ends the
  // reader's and the writer's waits (any thread). The first reason counts.
  void request_close(const Status& reason, bool log);
  // The reader's last act: fails the pending requests and calls the close handler.
  void finish_reading(const Status& failure, bool log);
  // Whether the connection reads on a thread of its own (its socket left Asio for fd_).
  bool reads_on_thread() const noexcept { return fd_ >= 0; }
  Status closed_status(const Status& reason) const;

  // Reads whatever the socket has (up to the inbox's room), then parses it.
  void read_more();
  // Reads the part of the frame's payload the inbox did not hold, then delivers it.
  void read_payload();
  // Delivers every complete frame read, then reads more (strand).
  void parse_frames();
  // Hands the frame just parsed to its pending request or to on_frame_.
  void deliver();
  void close_on_read_error(const boost::system::error_code& ec);

  // Every 50 ms: fail the requests past their deadline, and check the heartbeats.
  void arm_timer();
  void expire_requests();
  // Sends a heartbeat when we have been quiet, closes when the peer has been silent too long.
  void check_heartbeats(Clock::time_point now);
  // The peer's task when it said hello and the description does not name it, else "the peer"
  // (the close reason names the description too).
  std::string peer_name() const;
  // Closes at once (strand; reading on a thread: any thread, the reader then ends it); `log`
  // says why on standard error.
  void close_now(const Status& reason, bool log = false);

  asio::ip::tcp::socket socket_;    // plain TCP; unused (never opened) with TLS
  std::shared_ptr<TlsStream> tls_;  // null for plain TCP
  std::vector<char> tls_staging_;
  int fd_ = -1;  // reading on a thread: the socket, taken out of Asio's reactor (closed last)
  detail::ConnectionThreads* threads_ = nullptr;  // reading on a thread: where its threads run
  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer timer_;
  const std::string description_;
  detail::HeartbeatMonitor heartbeats_;
  FrameHandler on_frame_;
  CloseHandler on_close_;
  detail::FrameParser parser_;  // strand only

  // Shared state.
  mutable std::mutex mutex_;
  bool closed_ = false;
  bool writing_ = false;
  bool writer_started_ = false;  // reading on a thread: its writer thread runs
  std::condition_variable writer_wake_;
  Status close_reason_;
  std::string peer_task_;
  detail::OutgoingQueue queue_;
  std::map<std::uint64_t, Pending> pending_;
  std::atomic<std::uint64_t> next_request_id_{1};
};

// ---------------------------------------------------------------------------------------------

inline Connection::Connection(asio::ip::tcp::socket socket, wire::WireLimits limits,
                              std::string description, std::chrono::milliseconds heartbeat_timeout)
    : socket_(std::move(socket)),
      strand_(asio::make_strand(socket_.get_executor())),
      timer_(strand_),
      description_(std::move(description)),
      heartbeats_(heartbeat_timeout),
      parser_(limits) {
  boost::system::error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
}

inline Connection::Connection(std::shared_ptr<TlsStream> tls, wire::WireLimits limits,
                              std::string description, std::chrono::milliseconds heartbeat_timeout)
    : Connection(asio::ip::tcp::socket(tls->get_executor()), limits, std::move(description),
                 heartbeat_timeout) {
  tls_ = std::move(tls);
  boost::system::error_code ignored;
  tls_->next_layer().set_option(asio::ip::tcp::no_delay(true), ignored);
}

inline Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);  // both threads, which held this connection, have ended
}

inline void Connection::start(FrameHandler on_frame, CloseHandler on_close,
                              detail::ConnectionThreads* threads) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  if (threads && !tls_) {
    {
      std::lock_guard lock(mutex_);
      if (!closed_ && socket_.is_open()) {
        boost::system::error_code ec;
        const int fd = socket_.release(ec);  // out of the reactor: it would wake a lane per read
        if (!ec && fd >= 0) {
          fd_ = fd;
          threads_ = threads;
          ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);  // recv blocks
        }
      }
    }
    if (fd_ >= 0) {
      asio::dispatch(strand_, [self = shared_from_this()] {
        self->heartbeats_.start(Clock::now());  // the silence counts from the start
        self->arm_timer();
      });
      if (!threads->spawn([self = shared_from_this()] { self->read_on_thread(); }))
        finish_reading(Status(ErrorCode::unavailable, "its task is shutting down"), false);
      return;
    }
  }
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->heartbeats_.start(Clock::now());  // the silence counts from the start
    self->parse_frames();
    self->arm_timer();
  });
}

inline void Connection::send(wire::Frame frame) {
  auto out = std::make_shared<detail::OutgoingFrame>(std::move(frame));
  HeldWrites* held = HeldWrites::active();
  {
    // Held while writing, so close_now cannot close the socket under us.
    std::lock_guard lock(mutex_);
    if (closed_) return;
    queue_.push_back(std::move(out));
    if (writing_) return;  // whoever is writing takes this frame too
    writing_ = true;
    if (held) return held->hold(shared_from_this());
    if (write_queue_without_blocking()) {
      writing_ = false;
      return;
    }
  }
  write_later();
}

inline Connection::HeldWrites::HeldWrites()
    : previous_(current_),
      previous_holder_(detail::hold_output(
          {[](void* held) { static_cast<HeldWrites*>(held)->release(); }, this})) {
  current_ = this;
}

inline Connection::HeldWrites::~HeldWrites() {
  current_ = previous_;
  detail::hold_output(previous_holder_);
  release();
}

inline void Connection::HeldWrites::release() {
  // Taken out first: a failed write can run callbacks that send (and so hold) again.
  const std::vector<std::shared_ptr<Connection>> held = std::move(connections_);
  connections_.clear();
  for (const auto& connection : held) connection->write_held();
}

inline void Connection::HeldWrites::hold(std::shared_ptr<Connection> connection) {
  connections_.push_back(std::move(connection));
}

inline void Connection::call(wire::Frame request, ReplyCallback done,
                             std::chrono::milliseconds timeout) {
  const std::uint64_t id = next_request_id_.fetch_add(1);
  request.request_id = id;
  Status failed;
  {
    std::lock_guard lock(mutex_);
    if (closed_) {
      failed = close_reason_;
    } else {
      const auto deadline = timeout.count() > 0 ? Clock::now() + timeout : Clock::time_point::max();
      pending_.emplace(id, Pending{std::move(done), deadline});
    }
  }
  if (!failed.ok()) return done(failed, {});  // outside the lock: done may call back in
  send(std::move(request));
}

inline void Connection::close(const Status& reason) {
  {
    std::unique_lock lock(mutex_);
    if (reads_on_thread()) {
      lock.unlock();
      return request_close(reason, false);
    }
  }
  asio::dispatch(strand_, [self = shared_from_this(), reason] { self->close_now(reason); });
}

inline bool Connection::is_open() const {
  std::lock_guard lock(mutex_);
  return !closed_;
}

inline std::string Connection::peer_task() const {
  std::lock_guard lock(mutex_);
  return peer_task_;
}

inline void Connection::set_peer_task(std::string task) {
  std::lock_guard lock(mutex_);
  peer_task_ = std::move(task);
}

inline void Connection::write_queued() {
  std::vector<std::shared_ptr<detail::OutgoingFrame>> batch;
  {
    std::lock_guard lock(mutex_);
    if (closed_ || queue_.empty()) {
      writing_ = false;
      return;
    }
    batch.assign(queue_.begin(), queue_.end());
    queue_.clear();
  }
  std::vector<asio::const_buffer> buffers = detail::unsent_buffers(batch);
  if (tls_) buffers = detail::gather_small_buffers(buffers, tls_staging_);
  on_stream([&](auto& stream) {
    asio::async_write(
        stream, buffers,
        // Each piece that leaves counts as activity: a slow big frame is not silence.
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (n > 0) self->heartbeats_.note_sent();
          return asio::transfer_all()(ec, n);
        },
        asio::bind_executor(strand_, [self = shared_from_this(), batch = std::move(batch)](
                                         const boost::system::error_code& ec, std::size_t) {
          if (ec) {
            self->close_now(Status(ErrorCode::unavailable, "write failed: " + ec.message()));
            return;
          }
          self->write_queued();
        }));
  });
}

inline bool Connection::write_queue_without_blocking() {
  if (tls_) return false;  // OpenSSL's state is the strand's alone: it writes
  const int fd = reads_on_thread() ? fd_ : socket_.native_handle();
  if (detail::send_without_blocking(fd, queue_) > 0) heartbeats_.note_sent();
  return queue_.empty();
}

inline void Connection::write_later() {
  {
    std::unique_lock lock(mutex_);
    if (reads_on_thread()) {
      if (closed_) return;
      if (writer_started_) return writer_wake_.notify_one();
      writer_started_ = true;
      lock.unlock();
      if (!threads_->spawn([self = shared_from_this()] { self->write_on_thread(); }))
        request_close(Status(ErrorCode::unavailable, "its task is shutting down"), false);
      return;
    }
  }
  asio::dispatch(strand_, [self = shared_from_this()] { self->write_queued(); });
}

inline void Connection::write_on_thread() {
  std::unique_lock lock(mutex_);
  for (;;) {
    writer_wake_.wait(lock, [&] { return closed_ || (writing_ && !queue_.empty()); });
    if (closed_) return;
    for (;;) {
      errno = 0;
      const std::size_t sent = detail::send_without_blocking(fd_, queue_);
      if (sent > 0) heartbeats_.note_sent();
      if (queue_.empty()) break;
      const int failed = errno;
      if (sent == 0 && failed != 0 && failed != EAGAIN && failed != EWOULDBLOCK &&
          failed != EINTR) {
        lock.unlock();
        return request_close(
            Status(ErrorCode::unavailable, std::string("write failed: ") + std::strerror(failed)),
            false);
      }
      // Room comes as the peer reads; closing shuts the socket down, which ends the wait too.
      lock.unlock();
      pollfd room{fd_, POLLOUT, 0};
      ::poll(&room, 1, 50);
      lock.lock();
      if (closed_) return;
    }
    writing_ = false;
  }
}

inline void Connection::write_held() {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    if (write_queue_without_blocking()) {
      writing_ = false;
      return;
    }
  }
  write_later();
}

inline void Connection::read_more() {
  on_stream([&](auto& stream) {
    stream.async_read_some(
        parser_.read_buffer(),
        asio::bind_executor(strand_, [self = shared_from_this()](
                                         const boost::system::error_code& ec, std::size_t n) {
          if (ec) return self->close_on_read_error(ec);
          self->heartbeats_.note_received();
          self->parser_.bytes_read(n);
          self->parse_frames();
        }));
  });
}

inline void Connection::read_payload() {
  on_stream([&](auto& stream) {
    asio::async_read(
        stream, parser_.unread_payload(),
        // Each piece of a large payload counts as activity: a slow big frame is not silence.
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (n > 0) self->heartbeats_.note_received();
          return asio::transfer_all()(ec, n);
        },
        asio::bind_executor(
            strand_, [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
              if (ec) return self->close_on_read_error(ec);
              self->deliver();
              self->parse_frames();
            }));
  });
}

inline void Connection::parse_frames() {
  while (is_open()) {
    switch (parser_.parse()) {
      case detail::FrameParser::Next::read_more:
        return read_more();
      case detail::FrameParser::Next::read_payload:
        return read_payload();
      case detail::FrameParser::Next::malformed:
        return close_now(parser_.error(), true);
      case detail::FrameParser::Next::frame:
        deliver();
        break;
    }
  }
}

inline void Connection::deliver() {
  std::optional<wire::Frame> parsed = parser_.take_frame();
  if (!parsed) return close_now(parser_.error(), true);
  HeldWrites replies;  // what the handlers send leaves when they are done, together
  wire::Frame frame = std::move(*parsed);
  if (frame.type == wire::MessageType::heartbeat) return;  // its arrival was all it had to say
  if (frame.type == wire::MessageType::reply) {
    ReplyCallback done;
    {
      std::lock_guard lock(mutex_);
      auto it = pending_.find(frame.request_id);
      if (it != pending_.end()) {
        done = std::move(it->second.done);
        pending_.erase(it);
      }
    }
    if (!done) return;  // a late reply to an expired request is dropped
    try {
      done(Status{}, std::move(frame));
    } catch (...) {  // never into the I/O loop: the connection goes, the process lives
      close_now(Status::from_current_exception().with_context("handling a reply"), true);
    }
  } else if (on_frame_) {
    try {
      on_frame_(shared_from_this(), std::move(frame));
    } catch (...) {
      close_now(Status::from_current_exception().with_context("handling a frame"), true);
    }
  }
}

inline void Connection::close_on_read_error(const boost::system::error_code& ec) {
  if (detail::closed_by_peer(ec))
    close_now(Status(ErrorCode::unavailable, "connection closed by the peer"));
  else
    close_now(Status(ErrorCode::unavailable, "read failed: " + ec.message()));
}

inline void Connection::arm_timer() {
  timer_.expires_after(std::chrono::milliseconds(50));
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || !self->is_open()) return;
    self->expire_requests();
    self->check_heartbeats(Clock::now());
    if (self->is_open()) self->arm_timer();
  });
}

inline void Connection::expire_requests() {
  std::vector<ReplyCallback> expired;
  {
    std::lock_guard lock(mutex_);
    const auto now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        expired.push_back(std::move(it->second.done));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& done : expired)
    done(Status(ErrorCode::deadline_exceeded, "no reply from " + description_ + " in time"), {});
}

inline std::string Connection::peer_name() const {
  const std::string task = peer_task();
  return task.empty() || description_.rfind(task, 0) == 0 ? "the peer" : task;
}

inline void Connection::check_heartbeats(Clock::time_point now) {
  switch (heartbeats_.check(now)) {
    case detail::HeartbeatMonitor::Verdict::quiet_is_fine:
      return;
    case detail::HeartbeatMonitor::Verdict::peer_dead:
      close_now(Status(ErrorCode::unavailable,
                       peer_name() + heartbeats_.silence_text(now) +
                           ": declared dead; is it stopped, hung or cut off by the network?"),
                true);
      return;
    case detail::HeartbeatMonitor::Verdict::send_heartbeat: {
      std::lock_guard lock(mutex_);
      if (closed_ || writing_ || !queue_.empty()) return;  // something is on its way already
    }
      send(wire::Frame{wire::MessageType::heartbeat, 0, {}, {}});
      return;
  }
}

inline Status Connection::closed_status(const Status& reason) const {
  return Status(reason.code() == ErrorCode::data_loss ? ErrorCode::unavailable : reason.code(),
                "connection to " + description_ + " lost: " + reason.message());
}

inline void Connection::close_now(const Status& reason, bool log) {
  std::map<std::uint64_t, Pending> pending;
  {
    std::unique_lock lock(mutex_);
    if (reads_on_thread()) {
      lock.unlock();
      return request_close(reason, log);
    }
    if (closed_) return;
    closed_ = true;
    close_reason_ = closed_status(reason);
    pending.swap(pending_);
    queue_.clear();
  }
  if (log) log_line("closing connection with " + description_ + ": " + reason.message());
  boost::system::error_code ignored;
  tcp_socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  tcp_socket().close(ignored);
  timer_.cancel();
  for (auto& [id, p] : pending) p.done(close_reason_, {});
  if (on_close_) on_close_(shared_from_this(), close_reason_);
  on_frame_ = nullptr;
  on_close_ = nullptr;
}

inline void Connection::read_on_thread() {
  Status failure;  // why reading ended, unless closing was asked (close_reason_ then)
  bool log_failure = false;
  // It wakes for a frame, handles it and sleeps again: a short slice lets it preempt on waking
  // instead of waiting behind a thread that copies another worker's 64 MiB update. Where the
  // kernel ignores slices, switching around large payloads would only cost system calls.
  const bool slices_apply = detail::ask_for_short_time_slice();
  while (failure.ok() && is_open()) {
    switch (parser_.parse()) {
      case detail::FrameParser::Next::frame:
        deliver();
        break;
      case detail::FrameParser::Next::malformed:
        failure = parser_.error();
        log_failure = true;
        break;
      case detail::FrameParser::Next::read_payload: {
        // Receiving a large payload is bulk work: the normal slice while it lasts.
        const bool large =
            slices_apply && asio::buffer_size(parser_.unread_payload()) >= kLargePayload;
        if (large) detail::ask_for_normal_time_slice();
        for (const auto& piece : parser_.unread_payload())
          if (failure.ok()) failure = receive_exactly(piece);
        if (large) detail::ask_for_short_time_slice();
        if (failure.ok()) deliver();
        break;
      }
      case detail::FrameParser::Next::read_more: {
        std::size_t received = 0;
        failure = receive_some(parser_.read_buffer(), received);
        if (failure.ok()) parser_.bytes_read(received);
        break;
      }
    }
  }
  finish_reading(failure, log_failure);
}

inline Status Connection::receive_some(asio::mutable_buffer room, std::size_t& received) {
  for (;;) {
    const ssize_t got = ::recv(fd_, room.data(), room.size(), 0);
    if (got > 0) {
      heartbeats_.note_received();  // each piece of a large payload counts: it is not silence
      received = static_cast<std::size_t>(got);
      return {};
    }
    if (got == 0) return Status(ErrorCode::unavailable, "connection closed by the peer");
    const int failed = errno;
    if (failed == EINTR) continue;
    if (failed == EAGAIN || failed == EWOULDBLOCK) {  // the socket was made non-blocking
      pollfd readable{fd_, POLLIN, 0};
      ::poll(&readable, 1, 50);
      continue;
    }
    if (failed == ECONNRESET || failed == EPIPE)
      return Status(ErrorCode::unavailable, "connection closed by the peer");
    return Status(ErrorCode::unavailable, std::string("read failed: ") + std::strerror(failed));
  }
}

inline Status Connection::receive_exactly(asio::mutable_buffer piece) {
  while (piece.size() > 0) {
    std::size_t received = 0;
    if (Status s = receive_some(piece, received); !s.ok()) return s;
    piece += received;
  }
  return {};
}

inline void Connection::request_close(const Status& reason, bool log) {
  int fd;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = true;
    close_reason_ = closed_status(reason);
    queue_.clear();
    fd = fd_;
  }
  writer_wake_.notify_all();
  if (log) log_line("closing connection with " + description_ + ": " + reason.message());
  ::shutdown(fd, SHUT_RDWR);  // ends the reader's recv and the writer's wait
}

inline void Connection::finish_reading(const Status& failure, bool log) {
  request_close(failure.ok() ? Status(ErrorCode::unavailable, "connection closed") : failure, log);
  std::map<std::uint64_t, Pending> pending;
  Status reason;
  {
    std::lock_guard lock(mutex_);
    pending.swap(pending_);
    reason = close_reason_;
  }
  for (auto& [id, p] : pending) p.done(reason, {});
  if (on_close_) on_close_(shared_from_this(), reason);
  on_frame_ = nullptr;
  on_close_ = nullptr;
}

}  // namespace psflow
