// Connection: one TCP connection between two tasks, used in both directions.
//
// Either side may send requests, replies and one-way frames. A frame is written with one
// scatter-gather write (header, metadata, table and the tensor buffers themselves: no payload
// copy), from the sending thread when the connection is idle, else on the connection's strand
// together with everything queued behind it. Reads take whatever the socket has into a 64 KiB
// inbox, so several small frames cost one read; large payloads go straight into newly allocated
// tensors. A frame that fails validation closes only this connection, with the reason logged; every
// pending request then fails with Unavailable.
// Requests may carry a deadline, checked by a timer every 50 ms.
//
// Heartbeats (when a heartbeat timeout is given): the side that has sent nothing for a quarter
// of the timeout sends an empty heartbeat frame; a peer from which nothing arrived for the whole
// timeout (no frame, and no byte of a large frame still coming in) is declared dead and the
// connection closes with Unavailable naming it and how long it was silent. This catches a peer
// that stopped (SIGSTOP, a hung host, a cut network) without closing its socket. A timer tick
// that comes late because this process itself stalled restarts the count from that tick, so
// the stall is not held against the peer.
//
// Over TLS (tls.hpp) the same frames go through an asio::ssl::stream instead of the plain
// socket: OpenSSL's state is not thread-safe, so every write then goes through the strand
// (async_write), small pieces gathered into one record. The plain socket keeps
// its direct sendmsg path.
//
// Thread-safe: send(), call() and close() may be called from any thread. Handlers run on the
// connection's strand (on one of the task's I/O threads, one handler at a time).
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/log.hpp"
#include "psflow/distributed/connect_errors.hpp"
#include "psflow/distributed/wire.hpp"

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

  // Starts reading; `on_frame` gets every frame that is not a reply to one of our requests,
  // `on_close` the reason once the connection closes. Both run on the strand.
  void start(FrameHandler on_frame, CloseHandler on_close);

  // Sends a frame without blocking: when nothing else is being written it goes out from this
  // thread at once (saving a wake-up of the I/O thread per message, the larger part of a small
  // step's latency); the rest, and frames sent meanwhile, are queued for the strand. Frames
  // sent while a frame handler runs on this thread are held until it returns and then written
  // together (see HeldWrites). Dropped silently once the connection is closed.
  void send(wire::Frame frame);

  // While one exists on a thread, frames sent from that thread are held and written when it
  // ends, all those for one connection in one write. Each frame handler runs inside one, so a
  // ps's _Send tensor and its run_graph reply leave together and wake the worker once.
  class HeldWrites {
   public:
    HeldWrites();
    HeldWrites(const HeldWrites&) = delete;
    HeldWrites& operator=(const HeldWrites&) = delete;
    ~HeldWrites();
    static HeldWrites* active() noexcept { return current_; }
    void hold(std::shared_ptr<Connection> connection);

   private:
    static inline thread_local HeldWrites* current_ = nullptr;
    HeldWrites* previous_;
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
  const std::string& description() const noexcept { return description_; }

  // The task at the other end once it said hello ("" before).
  std::string peer_task() const;
  void set_peer_task(std::string task);

 private:
  // A frame being written: its encoded header and tensor table, and how much of it went out.
  struct Outgoing {
    explicit Outgoing(wire::Frame f);
    // Calls visit(data, size) for each piece not sent yet: header, metadata, table and the
    // tensor buffers themselves; false from visit stops the walk.
    template <class Visit>
    bool for_each_unsent(Visit&& visit) const;

    wire::Frame frame;  // keeps the tensor buffers alive until written
    std::array<unsigned char, wire::kHeaderBytes> header{};
    std::string table;
    std::size_t total_bytes = 0;
    std::size_t bytes_sent = 0;
  };
  struct Pending {
    ReplyCallback done;
    Clock::time_point deadline;
  };

  // Writes everything queued (strand), then whatever was queued meanwhile.
  void write_queued();
  // One non-blocking sendmsg of the queued frames (mutex_ held); drops the frames it sent
  // completely and returns true when nothing is left. A full socket buffer or a failed socket
  // sends nothing: the I/O thread then writes the rest, or reports the failure.
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
  // TLS writes one record per buffer: gathers the small pieces of `buffers` into tls_staging_
  // (strand only; one write at a time) so that a small frame leaves as one record.
  std::vector<asio::const_buffer> gather_for_tls(const std::vector<asio::const_buffer>& buffers);

  std::size_t buffered() const noexcept { return inbox_end_ - inbox_start_; }
  // Reads whatever the socket has (up to the inbox's room), then parses it.
  void read_more(std::size_t frame_start_bytes);
  // Delivers every complete frame in the inbox, then reads more. A frame's payload bytes that
  // came in the same read as its header are copied out of the inbox (at most kInboxBytes); the
  // rest is read straight into the tensors.
  void parse_frames();
  // Hands the frame just read to its pending request or to on_frame_.
  void deliver();
  void close_on_read_error(const boost::system::error_code& ec);

  // Every 50 ms: fail the requests past their deadline, and check the heartbeats.
  void arm_timer();
  void expire_requests();
  // Sends a heartbeat when we have been quiet, closes when the peer has been silent too long.
  void check_heartbeats(Clock::time_point now);
  // Something arrived from the peer, or some of our bytes left.
  void note_received() noexcept { last_received_.store(Clock::now().time_since_epoch().count()); }
  void note_sent() noexcept { last_sent_.store(Clock::now().time_since_epoch().count()); }
  // The peer's task when it said hello and the description does not name it, else "the peer"
  // (the close reason names the description too).
  std::string peer_name() const;
  // Closes at once (strand); `log` says why on standard error.
  void close_now(const Status& reason, bool log = false);

  asio::ip::tcp::socket socket_;    // plain TCP; unused (never opened) with TLS
  std::shared_ptr<TlsStream> tls_;  // null for plain TCP
  std::vector<char> tls_staging_;
  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer timer_;
  const wire::WireLimits limits_;
  const std::string description_;
  const std::chrono::milliseconds heartbeat_timeout_;
  // Clock readings (time_since_epoch counts) of the last activity each way; any thread.
  std::atomic<Clock::rep> last_received_;
  std::atomic<Clock::rep> last_sent_;
  Clock::time_point last_tick_;  // strand only
  FrameHandler on_frame_;
  CloseHandler on_close_;

  // Read state (strand only): bytes read and not yet parsed are inbox_[inbox_start_, inbox_end_).
  static constexpr std::size_t kInboxBytes = 64 * 1024;
  std::vector<char> inbox_ = std::vector<char>(kInboxBytes);
  std::size_t inbox_start_ = 0;
  std::size_t inbox_end_ = 0;
  wire::FrameHeader header_;
  wire::Frame incoming_;

  // Shared state.
  mutable std::mutex mutex_;
  bool closed_ = false;
  bool writing_ = false;
  Status close_reason_;
  std::string peer_task_;
  std::deque<std::shared_ptr<Outgoing>> queue_;
  std::map<std::uint64_t, Pending> pending_;
  std::atomic<std::uint64_t> next_request_id_{1};
};

// ---------------------------------------------------------------------------------------------

inline Connection::Connection(asio::ip::tcp::socket socket, wire::WireLimits limits,
                              std::string description, std::chrono::milliseconds heartbeat_timeout)
    : socket_(std::move(socket)),
      strand_(asio::make_strand(socket_.get_executor())),
      timer_(strand_),
      limits_(limits),
      description_(std::move(description)),
      heartbeat_timeout_(heartbeat_timeout),
      last_received_(Clock::now().time_since_epoch().count()),
      last_sent_(Clock::now().time_since_epoch().count()) {
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

inline void Connection::start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->last_tick_ = Clock::now();
    self->note_received();  // the silence counts from the start
    self->parse_frames();
    self->arm_timer();
  });
}

inline void Connection::send(wire::Frame frame) {
  auto out = std::make_shared<Outgoing>(std::move(frame));
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
  asio::dispatch(strand_, [self = shared_from_this()] { self->write_queued(); });
}

inline Connection::HeldWrites::HeldWrites() : previous_(current_) { current_ = this; }

inline Connection::HeldWrites::~HeldWrites() {
  current_ = previous_;
  for (const auto& connection : connections_) connection->write_held();
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

inline Connection::Outgoing::Outgoing(wire::Frame f) : frame(std::move(f)) {
  table = wire::encode_tensor_table(frame.tensors);
  const wire::FrameHeader h = wire::frame_header(frame, table.size());
  wire::encode_header(h, header.data());
  total_bytes = header.size() + frame.metadata.size() + table.size() + h.payload_bytes;
}

template <class Visit>
bool Connection::Outgoing::for_each_unsent(Visit&& visit) const {
  std::size_t skip = bytes_sent;
  auto piece = [&](const void* data, std::size_t size) {
    if (skip >= size) {
      skip -= size;
      return true;
    }
    const bool more = visit(static_cast<const char*>(data) + skip, size - skip);
    skip = 0;
    return more;
  };
  if (!piece(header.data(), header.size()) ||
      !piece(frame.metadata.data(), frame.metadata.size()) || !piece(table.data(), table.size()))
    return false;
  for (const Tensor& t : frame.tensors)
    if (!piece(t.raw_data(), t.nbytes())) return false;
  return true;
}

inline void Connection::write_queued() {
  std::vector<std::shared_ptr<Outgoing>> batch;
  {
    std::lock_guard lock(mutex_);
    if (closed_ || queue_.empty()) {
      writing_ = false;
      return;
    }
    batch.assign(queue_.begin(), queue_.end());
    queue_.clear();
  }
  std::vector<asio::const_buffer> buffers;
  for (const auto& out : batch)
    out->for_each_unsent([&](const char* data, std::size_t size) {
      buffers.emplace_back(data, size);
      return true;
    });
  if (tls_) buffers = gather_for_tls(buffers);
  on_stream([&](auto& stream) {
    asio::async_write(
        stream, buffers,
        // Each piece that leaves counts as activity: a slow big frame is not silence.
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (n > 0) self->note_sent();
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

inline std::vector<asio::const_buffer> Connection::gather_for_tls(
    const std::vector<asio::const_buffer>& buffers) {
  constexpr std::size_t kSmall = 16 * 1024;  // one TLS record's worth
  std::size_t small_bytes = 0;
  for (const auto& b : buffers)
    if (b.size() < kSmall) small_bytes += b.size();
  tls_staging_.resize(small_bytes);  // sized once: the buffers below point into it
  std::vector<asio::const_buffer> gathered;
  std::size_t staged = 0, run_start = 0;
  auto end_run = [&] {
    if (staged > run_start)
      gathered.emplace_back(tls_staging_.data() + run_start, staged - run_start);
    run_start = staged;
  };
  for (const auto& b : buffers) {
    if (b.size() >= kSmall) {
      end_run();
      gathered.push_back(b);
    } else {
      std::memcpy(tls_staging_.data() + staged, b.data(), b.size());
      staged += b.size();
    }
  }
  end_run();
  return gathered;
}

inline bool Connection::write_queue_without_blocking() {
  if (tls_) return false;       // OpenSSL's state is the strand's alone: it writes
  std::array<iovec, 64> iov{};  // the rest, if more, goes out on the next write
  std::size_t count = 0;
  for (const auto& out : queue_) {
    const bool room = out->for_each_unsent([&](const char* data, std::size_t size) {
      iov[count++] = iovec{const_cast<char*>(data), size};
      return count < iov.size();
    });
    if (!room) break;
  }
  msghdr message{};
  message.msg_iov = iov.data();
  message.msg_iovlen = count;
  const ssize_t written = ::sendmsg(socket_.native_handle(), &message, MSG_DONTWAIT | MSG_NOSIGNAL);
  std::size_t left = written > 0 ? static_cast<std::size_t>(written) : 0;
  if (left > 0) note_sent();
  while (!queue_.empty()) {
    Outgoing& front = *queue_.front();
    const std::size_t take = std::min(left, front.total_bytes - front.bytes_sent);
    front.bytes_sent += take;
    left -= take;
    if (front.bytes_sent < front.total_bytes) break;
    queue_.pop_front();
  }
  return queue_.empty();
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
  asio::dispatch(strand_, [self = shared_from_this()] { self->write_queued(); });
}

inline void Connection::read_more(std::size_t frame_start_bytes) {
  std::memmove(inbox_.data(), inbox_.data() + inbox_start_, buffered());
  inbox_end_ -= inbox_start_;
  inbox_start_ = 0;
  if (buffered() == 0 && inbox_.size() > kInboxBytes) inbox_.assign(kInboxBytes, '\0');
  // A frame's header, metadata and table must fit at once (their sizes are within the limits).
  if (frame_start_bytes > inbox_.size()) inbox_.resize(frame_start_bytes);
  on_stream([&](auto& stream) {
    stream.async_read_some(
        asio::buffer(inbox_.data() + inbox_end_, inbox_.size() - inbox_end_),
        asio::bind_executor(strand_, [self = shared_from_this()](
                                         const boost::system::error_code& ec, std::size_t n) {
          if (ec) return self->close_on_read_error(ec);
          self->note_received();
          self->inbox_end_ += n;
          self->parse_frames();
        }));
  });
}

inline void Connection::parse_frames() {
  while (is_open()) {
    if (buffered() < wire::kHeaderBytes) return read_more(wire::kHeaderBytes);
    const char* at = inbox_.data() + inbox_start_;
    try {
      header_ = wire::decode_header(reinterpret_cast<const unsigned char*>(at), limits_);
    } catch (const Error& e) {
      return close_now(Status(ErrorCode::data_loss, e.message()), true);
    }
    const std::size_t frame_start =
        wire::kHeaderBytes + header_.metadata_bytes + header_.table_bytes;
    if (buffered() < frame_start) return read_more(frame_start);

    incoming_ = wire::Frame{};
    incoming_.type = header_.type;
    incoming_.request_id = header_.request_id;
    incoming_.metadata.assign(at + wire::kHeaderBytes, header_.metadata_bytes);
    try {
      incoming_.tensors = wire::allocate_from_table(
          std::string_view(at + wire::kHeaderBytes + header_.metadata_bytes, header_.table_bytes),
          header_, limits_);
    } catch (const Error& e) {
      // Malformed: DataLoss; a legal claim this machine cannot hold: ResourceExhausted.
      return close_now(Status(e.code(), e.message()), true);
    } catch (...) {  // std::bad_alloc: the process lives, this connection goes
      return close_now(Status::from_current_exception(), true);
    }
    inbox_start_ += frame_start;

    std::vector<asio::mutable_buffer> unread;
    for (Tensor& t : incoming_.tensors) {
      auto* data = static_cast<char*>(t.raw_data());
      const std::size_t from_inbox = std::min(t.nbytes(), buffered());
      std::memcpy(data, inbox_.data() + inbox_start_, from_inbox);
      inbox_start_ += from_inbox;
      if (from_inbox < t.nbytes()) unread.emplace_back(data + from_inbox, t.nbytes() - from_inbox);
    }
    if (!unread.empty()) {  // the inbox is empty now
      on_stream([&](auto& stream) {
        asio::async_read(
            stream, unread,
            // Each piece of a large payload counts as activity: a slow big frame is not silence.
            [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
              if (n > 0) self->note_received();
              return asio::transfer_all()(ec, n);
            },
            asio::bind_executor(strand_, [self = shared_from_this()](
                                             const boost::system::error_code& ec, std::size_t) {
              if (ec) return self->close_on_read_error(ec);
              self->deliver();
              self->parse_frames();
            }));
      });
      return;
    }
    deliver();
  }
}

inline void Connection::deliver() {
  try {
    wire::check_payload(incoming_.tensors);
  } catch (const Error& e) {
    return close_now(Status(ErrorCode::data_loss, e.message()), true);
  }
  HeldWrites replies;  // what the handlers send leaves when they are done, together
  wire::Frame frame = std::move(incoming_);
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
  if (heartbeat_timeout_.count() <= 0) return;
  const auto since_last_tick = now - last_tick_;
  last_tick_ = now;
  if (since_last_tick > heartbeat_timeout_ / 4) {
    // This process stalled (stopped, swapped, starved): whatever the peer sent meanwhile may
    // still wait in the socket. Measure its silence from now, when the timer actually fired.
    note_received();
    return;
  }
  const Clock::time_point received{Clock::duration(last_received_.load())};
  const Clock::time_point sent{Clock::duration(last_sent_.load())};
  if (now - received >= heartbeat_timeout_) {
    char text[160];
    std::snprintf(text, sizeof text, " sent nothing for %.1f s (heartbeat timeout %.1f s)",
                  std::chrono::duration<double>(now - received).count(),
                  std::chrono::duration<double>(heartbeat_timeout_).count());
    close_now(Status(ErrorCode::unavailable,
                     peer_name() + text +
                         ": declared dead; is it stopped, hung or cut off by the network?"),
              true);
    return;
  }
  if (now - sent >= heartbeat_timeout_ / 4) {
    {
      std::lock_guard lock(mutex_);
      if (closed_ || writing_ || !queue_.empty()) return;  // something is on its way already
    }
    send(wire::Frame{wire::MessageType::heartbeat, 0, {}, {}});
  }
}

inline void Connection::close_now(const Status& reason, bool log) {
  std::map<std::uint64_t, Pending> pending;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = true;
    close_reason_ =
        Status(reason.code() == ErrorCode::data_loss ? ErrorCode::unavailable : reason.code(),
               "connection to " + description_ + " lost: " + reason.message());
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

}  // namespace psflow
