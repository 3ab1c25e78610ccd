// Connection over loopback sockets in this process, against another Connection or a raw socket
// the test drives byte by byte: requests and replies pair up both ways; frames arrive intact
// however the bytes are split, and big payloads leave intact through partial writes; a peer
// that closes mid-frame closes the connection (close handler once, pending calls Unavailable,
// no hang); a call without a reply fails with DeadlineExceeded; frames claiming more than the
// limits close the connection before anything is allocated; frames a thread holds leave when it
// is done or when they are released. With a heartbeat timeout, idle connections stay open, a
// slow big frame counts as activity, and a silent peer is declared dead. A connection reading
// on a thread of its own runs it with a short time slice, the normal one while a large payload
// arrives.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/messages.hpp"
#include "psflow/runtime/short_time_slice.hpp"
#include "support/socket_pair.hpp"
#include "support/wire_bytes.hpp"

using namespace psflow;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using psflow::testing::header_bytes;
using psflow::testing::socket_pair;
using tcp = asio::ip::tcp;

namespace {

Tensor f32(std::vector<float> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

// The bytes a Connection writes for `frame`: header, metadata, tensor table, payloads.
std::string frame_bytes(const wire::Frame& frame) {
  const std::string table = wire::encode_tensor_table(frame.tensors);
  std::string bytes(wire::kHeaderBytes, '\0');
  wire::encode_header(wire::frame_header(frame, table.size()),
                      reinterpret_cast<unsigned char*>(bytes.data()));
  bytes += frame.metadata + table;
  for (const Tensor& t : frame.tensors)
    bytes.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return bytes;
}

// A table entry: dtype, rank, dimensions.
std::string table_entry(DType dtype, std::vector<std::uint64_t> dims) {
  std::string entry{static_cast<char>(dtype), static_cast<char>(dims.size())};
  for (std::uint64_t d : dims) entry.append(reinterpret_cast<const char*>(&d), sizeof d);
  return entry;
}

Tensor pattern(std::size_t floats, float seed) {
  Tensor t = Tensor::uninitialized(DType::float32, {floats});
  float* x = t.data<float>();
  for (std::size_t i = 0; i < floats; ++i) x[i] = seed + static_cast<float>(i % 100003);
  return t;
}

// An io_context run by its own thread until the object goes away, and how the connections
// started through it read: through Asio on their strand, or (`reading_on_threads`) each on a
// thread of its own, as a Server's plain TCP connections do; every test runs both ways. Declare
// it after whatever the connections' handlers and reply callbacks use, and before the
// connections: going away, it closes those it started and waits for their threads.
struct IoThread {
  explicit IoThread(bool reading_on_threads) : on_threads(reading_on_threads) {}
  const bool on_threads;
  detail::ConnectionThreads threads;
  std::mutex started_mutex;
  std::vector<std::weak_ptr<Connection>> started;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};

  // Starts `connection` the way this test runs.
  void start(const std::shared_ptr<Connection>& connection, Connection::FrameHandler on_frame,
             Connection::CloseHandler on_close) {
    {
      std::lock_guard lock(started_mutex);
      started.push_back(connection);
    }
    connection->start(std::move(on_frame), std::move(on_close), on_threads ? &threads : nullptr);
  }
  // Returns once every handler queued on the loop before the call, and every handler those
  // queued in turn (a strand's hand-off), has run: the sign that a reaction had its chance.
  void drain() {
    for (int round = 0; round < 3; ++round) {
      std::promise<void> ran;
      asio::post(io, [&ran] { ran.set_value(); });
      REQUIRE(ran.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    }
  }
  ~IoThread() {
    {
      std::lock_guard lock(started_mutex);
      for (auto& weak : started)
        if (auto c = weak.lock()) c->close(Status(ErrorCode::aborted, "test over"));
    }
    threads.join_all();
    work.reset();
    io.stop();
    thread.join();
  }
};

// What a Connection's handlers saw (they run on the I/O thread).
struct Events {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<wire::Frame> frames;
  std::vector<Status> closes;
  bool echo = false;  // answer each ping with a reply carrying "re:" + its metadata and its tensors

  template <class Loop>
  void start(const std::shared_ptr<Connection>& connection, Loop& loop) {
    loop.start(
        connection,
        [this](const std::shared_ptr<Connection>& c, wire::Frame f) {
          if (echo && f.type == wire::MessageType::ping)
            c->send(
                wire::Frame{wire::MessageType::reply, f.request_id, "re:" + f.metadata, f.tensors});
          std::lock_guard lock(mutex);
          frames.push_back(std::move(f));
          changed.notify_all();
        },
        [this](const std::shared_ptr<Connection>&, const Status& s) {
          std::lock_guard lock(mutex);
          closes.push_back(s);
          changed.notify_all();
        });
  }
  bool wait_frames(std::size_t n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return frames.size() >= n; });
  }
  bool wait_closed() {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return !closes.empty(); });
  }
};

// The outcome of one call.
struct Reply {
  std::mutex mutex;
  std::condition_variable changed;
  int calls = 0;
  Status status;
  wire::Frame frame;

  Connection::ReplyCallback callback() {
    return [this](Status s, wire::Frame f) {
      std::lock_guard lock(mutex);
      ++calls;
      status = std::move(s);
      frame = std::move(f);
      changed.notify_all();
    };
  }
  bool wait() {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return calls > 0; });
  }
};

// Raw socket helpers, bounded by 10 s: a missing byte fails the test instead of hanging it.
bool read_exactly(tcp::socket& socket, char* out, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{socket.native_handle(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    const ssize_t got = ::recv(socket.native_handle(), out, n, 0);
    if (got <= 0) return false;
    out += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

// Reads one frame the Connection wrote; its header and its bytes after the header.
std::optional<std::pair<wire::FrameHeader, std::string>> read_frame(tcp::socket& socket) {
  unsigned char header[wire::kHeaderBytes];
  if (!read_exactly(socket, reinterpret_cast<char*>(header), sizeof header)) return std::nullopt;
  const wire::FrameHeader h = wire::decode_header(header, wire::WireLimits{});
  std::string rest(h.metadata_bytes + h.table_bytes + h.payload_bytes, '\0');
  if (!read_exactly(socket, rest.data(), rest.size())) return std::nullopt;
  return std::make_pair(h, std::move(rest));
}

// True when the peer closed its end (end of file, or a reset) within 10 s; data before is skipped.
bool sees_close(tcp::socket& socket) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{socket.native_handle(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    if (::recv(socket.native_handle(), buffer, sizeof buffer, 0) <= 0) return true;
  }
}

void write_raw(tcp::socket& socket, const std::string& bytes) {
  asio::write(socket, asio::buffer(bytes));
}

}  // namespace

TEST_CASE("requests and replies pair up in both directions, one-way frames keep their order") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events_a, events_b;
  Reply one, two, three;
  IoThread loop{reading_on_threads};
  auto [socket_a, socket_b] = socket_pair(loop.io);
  auto a = std::make_shared<Connection>(std::move(socket_a), wire::WireLimits{}, "peer b");
  auto b = std::make_shared<Connection>(std::move(socket_b), wire::WireLimits{}, "peer a");
  events_a.echo = events_b.echo = true;
  events_a.start(a, loop);
  events_b.start(b, loop);

  a->call(wire::Frame{wire::MessageType::ping, 0, "one", {f32({1, 2}, {2})}}, one.callback());
  a->call(wire::Frame{wire::MessageType::ping, 0, "two", {}}, two.callback(), 10s);
  b->call(wire::Frame{wire::MessageType::ping, 0, "three", {f32({3}, {1})}}, three.callback());
  constexpr int kOneWay = 200;
  for (int i = 0; i < kOneWay; ++i)
    a->send(wire::Frame{
        wire::MessageType::tensor, 0, std::to_string(i), {f32({static_cast<float>(i)}, {1})}});

  REQUIRE(one.wait());
  REQUIRE(two.wait());
  REQUIRE(three.wait());
  REQUIRE(events_b.wait_frames(2 + kOneWay));
  {
    std::lock_guard lock(one.mutex);
    CHECK(one.status.ok());
    CHECK(one.frame.type == wire::MessageType::reply);
    CHECK(one.frame.metadata == "re:one");
    REQUIRE(one.frame.tensors.size() == 1);
    CHECK(one.frame.tensors[0].equals(f32({1, 2}, {2})));
  }
  {
    std::lock_guard lock(two.mutex);
    CHECK(two.status.ok());
    CHECK(two.frame.metadata == "re:two");
  }
  {
    std::lock_guard lock(three.mutex);
    CHECK(three.status.ok());
    CHECK(three.frame.metadata == "re:three");
    REQUIRE(three.frame.tensors.size() == 1);
    CHECK(three.frame.tensors[0].equals(f32({3}, {1})));
  }
  {
    // Replies went to their callbacks, never to the frame handler.
    std::lock_guard lock(events_a.mutex);
    REQUIRE(events_a.frames.size() == 1);
    CHECK(events_a.frames[0].metadata == "three");
  }
  {
    std::lock_guard lock(events_b.mutex);
    REQUIRE(events_b.frames.size() == 2 + kOneWay);
    int out_of_order = 0;
    int next = 0;
    for (const auto& f : events_b.frames) {
      if (f.type != wire::MessageType::tensor) continue;
      out_of_order += f.metadata != std::to_string(next) ||
                      !f.tensors.at(0).equals(f32({static_cast<float>(next)}, {1}));
      ++next;
    }
    CHECK(next == kOneWay);
    CHECK(out_of_order == 0);
  }
  a->close(Status(ErrorCode::unavailable, "test over"));
  REQUIRE(events_b.wait_closed());  // the other side sees the close
  std::lock_guard lock(events_b.mutex);
  CHECK(events_b.closes.at(0).code() == ErrorCode::unavailable);
}

TEST_CASE(
    "frames arrive intact however the bytes are split: many per read, or a few bytes at a time") {
  std::vector<float> big(256 *
                         1024);  // 1 MiB: partly in the read buffer, the rest read into the tensor
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
  const std::vector<wire::Frame> frames = {
      wire::make_frame(wire::MessageType::tensor, wire::TensorMessage{1, "a"},
                       {f32({1, 2, 3, 4}, {2, 2})}),
      wire::make_frame(wire::MessageType::abort_step, wire::AbortStep{2, 10, "x"}),
      wire::make_frame(wire::MessageType::tensor, wire::TensorMessage{3, "big"},
                       {f32(big, {512, 512})}),
      // Metadata larger than the 64 KiB read buffer, then an empty and a small tensor.
      wire::make_frame(wire::MessageType::deregister_graph, wire::Handle{std::string(100000, 'h')},
                       {Tensor(DType::float32, {0}), f32({5, 6, 7}, {3})}),
      wire::make_frame(wire::MessageType::ping, wire::Handle{"last"}),
  };
  std::string stream;
  for (const auto& f : frames) stream += frame_bytes(f);

  for (const bool small_writes : {false, true}) {
    DYNAMIC_SECTION((small_writes ? "written a few bytes at a time" : "written in one piece")) {
      asio::io_context io;
      asio::ip::tcp::acceptor acceptor(
          io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
      asio::ip::tcp::socket sender(io);
      sender.connect(acceptor.local_endpoint());
      std::mutex mutex;
      std::condition_variable arrived;
      std::vector<wire::Frame> received;
      auto connection =
          std::make_shared<Connection>(acceptor.accept(), wire::WireLimits{}, "test peer");
      connection->start(
          [&](const std::shared_ptr<Connection>&, wire::Frame f) {
            std::lock_guard lock(mutex);
            received.push_back(std::move(f));
            arrived.notify_all();
          },
          [](const std::shared_ptr<Connection>&, const Status&) {});
      std::thread io_thread([&] { io.run_for(20s); });

      std::mt19937 rng(3);
      for (std::size_t at = 0; at < stream.size();) {
        // Small writes through the first frames and the header of the big one, then larger ones.
        const std::size_t chunk = !small_writes ? stream.size()
                                  : at < 300    ? 1 + rng() % 7
                                                : 1 + rng() % 70000;
        const std::size_t n = std::min(chunk, stream.size() - at);
        asio::write(sender, asio::buffer(stream.data() + at, n));
        at += n;
        // The pause between tiny writes is under test: each arrives as a read of its own.
        if (small_writes && at < 300) std::this_thread::sleep_for(200us);
      }
      {
        std::unique_lock lock(mutex);
        CHECK(arrived.wait_for(lock, 10s, [&] { return received.size() == frames.size(); }));
      }
      connection->close(Status(ErrorCode::unavailable, "test over"));
      io.stop();
      io_thread.join();
      REQUIRE(received.size() == frames.size());
      for (std::size_t i = 0; i < frames.size(); ++i) {
        CHECK(received[i].type == frames[i].type);
        CHECK(received[i].metadata == frames[i].metadata);
        REQUIRE(received[i].tensors.size() == frames[i].tensors.size());
        for (std::size_t t = 0; t < frames[i].tensors.size(); ++t)
          CHECK(received[i].tensors[t].equals(frames[i].tensors[t]));
      }
    }
  }
}

TEST_CASE(
    "big payloads leave intact through partial writes, in order with the frames around them") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events;
  IoThread loop{reading_on_threads};
  auto [socket_c, raw] = socket_pair(loop.io);
  auto c = std::make_shared<Connection>(std::move(socket_c), wire::WireLimits{}, "raw peer");
  events.start(c, loop);
  // The raw peer reads nothing until everything is sent: the socket buffer fills, the first
  // write from this thread is partial and the I/O thread writes the rest and what queued behind.
  const std::vector<wire::Frame> frames = {
      wire::Frame{wire::MessageType::tensor, 0, "small before", {f32({1, 2, 3}, {3})}},
      wire::Frame{wire::MessageType::tensor,
                  0,
                  "big",
                  {pattern(8u << 20, 0.5f), pattern(1000, 7.0f)}},  // 32 MiB
      wire::Frame{wire::MessageType::abort_step, 0, "small after", {}},
      wire::Frame{wire::MessageType::tensor, 0, "big again", {pattern(3u << 20, 2.5f)}},
  };
  std::string expected;
  for (const auto& f : frames) {
    expected += frame_bytes(f);
    c->send(f);
  }
  std::string got(expected.size(), '\0');
  REQUIRE(read_exactly(raw, got.data(), got.size()));
  CHECK(got.size() == expected.size());
  CHECK(std::memcmp(got.data(), expected.data(), expected.size()) == 0);
  c->close(Status(ErrorCode::unavailable, "test over"));
  CHECK(sees_close(raw));
}

TEST_CASE("big frames sent from two threads at once arrive whole, each thread's in order") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events, unused;
  IoThread loop{reading_on_threads};
  auto [socket_a, socket_b] = socket_pair(loop.io);
  auto a = std::make_shared<Connection>(std::move(socket_a), wire::WireLimits{}, "b");
  auto b = std::make_shared<Connection>(std::move(socket_b), wire::WireLimits{}, "a");
  unused.start(a, loop);
  events.start(b, loop);
  constexpr int kPerThread = 6;
  std::vector<std::thread> senders;
  for (int t = 0; t < 2; ++t)
    senders.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::size_t floats = i % 2 ? 7 : (2u << 20);  // 8 MiB and tiny frames in turn
        a->send(wire::Frame{wire::MessageType::tensor,
                            0,
                            std::to_string(t) + "/" + std::to_string(i),
                            {pattern(floats, static_cast<float>(t * 100 + i))}});
      }
    });
  for (auto& s : senders) s.join();
  REQUIRE(events.wait_frames(2 * kPerThread));
  std::lock_guard lock(events.mutex);
  int next[2] = {0, 0};
  int wrong = 0;
  for (const auto& f : events.frames) {
    const int t = f.metadata.empty() ? -1 : f.metadata[0] - '0';
    if (t != 0 && t != 1) {
      ++wrong;
      continue;
    }
    const int i = next[t]++;
    const std::size_t floats = i % 2 ? 7 : (2u << 20);
    wrong += f.metadata != std::to_string(t) + "/" + std::to_string(i) || f.tensors.size() != 1 ||
             !f.tensors[0].equals(pattern(floats, static_cast<float>(t * 100 + i)));
  }
  CHECK(wrong == 0);
  CHECK(next[0] == kPerThread);
  CHECK(next[1] == kPerThread);
  a->close(Status(ErrorCode::unavailable, "test over"));
}

TEST_CASE(
    "a peer closing mid-frame closes the connection: close handler once, pending calls fail") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events;
  Reply pending, later;
  IoThread loop{reading_on_threads};
  auto [socket_c, raw] = socket_pair(loop.io);
  auto c = std::make_shared<Connection>(std::move(socket_c), wire::WireLimits{}, "raw peer");
  events.start(c, loop);
  c->call(wire::Frame{wire::MessageType::ping, 0, "anyone?", {}}, pending.callback());
  REQUIRE(read_frame(raw));  // the request arrived; no reply will come

  SECTION("inside the metadata") {
    write_raw(raw, header_bytes(wire::MessageType::tensor, 100, 0, 0, 0) + std::string(10, 'm'));
  }
  SECTION("inside a payload read straight into its tensor") {
    const std::string table = table_entry(DType::float32, {256 * 1024});
    write_raw(raw, header_bytes(wire::MessageType::tensor, 0,
                                static_cast<std::uint32_t>(table.size()), 1u << 20, 1) +
                       table + std::string(100000, 'p'));
  }
  raw.shutdown(tcp::socket::shutdown_send);
  raw.close();

  REQUIRE(events.wait_closed());
  REQUIRE(pending.wait());
  {
    std::lock_guard lock(pending.mutex);
    CHECK(pending.calls == 1);
    CHECK(pending.status.code() == ErrorCode::unavailable);
    CHECK_THAT(pending.status.message(), Catch::Contains("raw peer"));
  }
  CHECK_FALSE(c->is_open());
  // Later calls fail at once, and sends are dropped.
  c->call(wire::Frame{wire::MessageType::ping, 0, "still there?", {}}, later.callback());
  {
    std::lock_guard lock(later.mutex);
    CHECK(later.calls == 1);
    CHECK(later.status.code() == ErrorCode::unavailable);
  }
  c->send(wire::Frame{wire::MessageType::ping, 0, "dropped", {}});
  loop.drain();  // whatever the send or the close could still trigger has run
  std::lock_guard lock(events.mutex);
  CHECK(events.closes.size() == 1);
  CHECK(events.closes[0].code() == ErrorCode::unavailable);
  CHECK_THAT(events.closes[0].message(), Catch::Contains("closed by the peer"));
  CHECK(events.frames.empty());
}

TEST_CASE("frames a thread holds leave when it is done, or at once when they are released") {
  const bool reading_on_threads = GENERATE(false, true);
  IoThread loop{reading_on_threads};
  auto [socket_a, peer] = socket_pair(loop.io);
  auto a = std::make_shared<Connection>(std::move(socket_a), wire::WireLimits{}, "raw peer");
  loop.start(
      a, [](const std::shared_ptr<Connection>&, wire::Frame) {},
      [](const std::shared_ptr<Connection>&, const Status&) {});
  // An idle connection writes from the sending thread, so a frame that is not held is in the
  // loopback peer's socket by the time send() returns: nothing readable means it was held.
  const auto readable = [&peer = peer] {
    pollfd p{peer.native_handle(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  };
  const wire::Frame one = wire::make_frame(wire::MessageType::ping, wire::Handle{"one"});
  const wire::Frame two = wire::make_frame(wire::MessageType::ping, wire::Handle{"two"});
  const wire::Frame three = wire::make_frame(wire::MessageType::ping, wire::Handle{"three"});
  {
    Connection::HeldWrites held;
    a->send(one);
    CHECK_FALSE(readable());
    detail::release_held_output();  // what the executor does before an expensive kernel
    const auto first = read_frame(peer);
    REQUIRE(first);
    CHECK(first->second == frame_bytes(one).substr(wire::kHeaderBytes));
    a->send(two);
    a->send(three);
    CHECK_FALSE(readable());  // held again after the release
  }
  for (const wire::Frame* expected : {&two, &three}) {
    const auto next = read_frame(peer);
    REQUIRE(next);
    CHECK(next->second == frame_bytes(*expected).substr(wire::kHeaderBytes));
  }
  detail::release_held_output();  // no holder left on this thread: nothing happens
  a->close(Status(ErrorCode::unavailable, "test over"));
}

TEST_CASE("a call without a reply fails with DeadlineExceeded, a late reply is dropped") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events;
  Reply slow, fast;
  IoThread loop{reading_on_threads};
  auto [socket_c, raw] = socket_pair(loop.io);
  auto c = std::make_shared<Connection>(std::move(socket_c), wire::WireLimits{}, "slow peer");
  events.start(c, loop);
  c->call(wire::Frame{wire::MessageType::ping, 0, "slow", {}}, slow.callback(), 100ms);
  const auto request = read_frame(raw);
  REQUIRE(request);
  REQUIRE(slow.wait());
  {
    std::lock_guard lock(slow.mutex);
    CHECK(slow.status.code() == ErrorCode::deadline_exceeded);
    CHECK_THAT(slow.status.message(), Catch::Contains("slow peer"));
  }
  CHECK(c->is_open());  // a timeout is not a connection failure

  // The late reply, then a call that is answered in time.
  write_raw(raw,
            header_bytes(wire::MessageType::reply, 4, 0, 0, 0, request->first.request_id) + "late");
  c->call(wire::Frame{wire::MessageType::ping, 0, "fast", {}}, fast.callback(), 10s);
  const auto second = read_frame(raw);
  REQUIRE(second);
  CHECK(second->first.request_id != request->first.request_id);
  write_raw(raw,
            header_bytes(wire::MessageType::reply, 2, 0, 0, 0, second->first.request_id) + "ok");
  REQUIRE(fast.wait());
  {
    std::lock_guard lock(fast.mutex);
    CHECK(fast.status.ok());
    CHECK(fast.frame.metadata == "ok");
  }
  {
    std::lock_guard lock(slow.mutex);
    CHECK(slow.calls == 1);
  }
  {
    std::lock_guard lock(events.mutex);
    CHECK(events.frames.empty());  // the late reply reached nobody
  }
  c->close(Status(ErrorCode::unavailable, "test over"));
}

TEST_CASE("frames claiming more than the limits close only their connection, before allocating") {
  const bool reading_on_threads = GENERATE(false, true);
  wire::WireLimits limits;
  limits.max_metadata_bytes = 4096;
  limits.max_tensor_bytes = 1u << 20;
  limits.max_frame_bytes = 4u << 20;
  limits.max_tensors = 8;
  struct Case {
    const char* name;
    std::string bytes;
    const char* reason;
  };
  const std::string huge_tensor = table_entry(DType::float32, {1ull << 40, 1ull << 40});
  const std::string big_tensor = table_entry(DType::float32, {512 * 1024});  // 2 MiB > 1 MiB
  const std::string small_tensor = table_entry(DType::float32, {1024});
  const std::vector<Case> cases = {
      {"not a frame", std::string(wire::kHeaderBytes, 'x'), "bad magic"},
      {"4 GiB of metadata", header_bytes(wire::MessageType::register_graph, 0xFFFFFFFFu, 0, 0, 0),
       "metadata of 4294967295 bytes"},
      {"a million tensors", header_bytes(wire::MessageType::tensor, 0, 0, 0, 1u << 20),
       "the limit is 8"},
      {"a payload of 2^62 bytes", header_bytes(wire::MessageType::tensor, 0, 18, 1ull << 62, 1),
       "payload of"},
      {"a tensor of 2^82 bytes",
       header_bytes(wire::MessageType::tensor, 0, static_cast<std::uint32_t>(huge_tensor.size()),
                    64, 1) +
           huge_tensor,
       "claims more than the 1048576-byte limit"},
      {"a tensor over the per-tensor limit",
       header_bytes(wire::MessageType::tensor, 0, static_cast<std::uint32_t>(big_tensor.size()),
                    2u << 20, 1) +
           big_tensor,
       "claims more than the 1048576-byte limit"},
      {"a table claiming more than the payload",
       header_bytes(wire::MessageType::tensor, 0, static_cast<std::uint32_t>(small_tensor.size()),
                    16, 1) +
           small_tensor,
       "more bytes than the frame carries"},
  };
  for (const Case& bad : cases) {
    DYNAMIC_SECTION(bad.name) {
      Events events;
      IoThread loop{reading_on_threads};
      auto [socket_c, raw] = socket_pair(loop.io);
      auto c = std::make_shared<Connection>(std::move(socket_c), limits, "hostile peer");
      events.start(c, loop);
      write_raw(raw, bad.bytes);
      REQUIRE(events.wait_closed());
      CHECK(sees_close(raw));
      std::lock_guard lock(events.mutex);
      CHECK(events.closes.size() == 1);
      CHECK(events.closes[0].code() == ErrorCode::unavailable);
      CHECK_THAT(events.closes[0].message(),
                 Catch::Contains(bad.reason) && Catch::Contains("hostile peer"));
      CHECK(events.frames.empty());
    }
  }
}

TEST_CASE("closing locally fails pending calls with the reason, a second close does nothing") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events;
  Reply pending;
  IoThread loop{reading_on_threads};
  auto [socket_c, raw] = socket_pair(loop.io);
  auto c = std::make_shared<Connection>(std::move(socket_c), wire::WireLimits{}, "quiet peer");
  events.start(c, loop);
  c->call(wire::Frame{wire::MessageType::ping, 0, "hello", {}}, pending.callback());
  c->close(Status(ErrorCode::aborted, "the test says bye"));
  REQUIRE(pending.wait());
  REQUIRE(events.wait_closed());
  c->close(Status(ErrorCode::internal, "again"));
  CHECK(sees_close(raw));
  loop.drain();  // a second close's handlers, if any, have run
  {
    std::lock_guard lock(pending.mutex);
    CHECK(pending.calls == 1);
    CHECK(pending.status.code() == ErrorCode::aborted);
    CHECK_THAT(pending.status.message(),
               Catch::Contains("the test says bye") && Catch::Contains("quiet peer"));
  }
  std::lock_guard lock(events.mutex);
  CHECK(events.closes.size() == 1);
  CHECK(events.closes[0].message() == pending.status.message());
}

TEST_CASE("heartbeats keep an idle pair of connections open, and reach no frame handler") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events_a, events_b;
  Reply answered;
  IoThread loop{reading_on_threads};
  auto [socket_a, socket_b] = socket_pair(loop.io);
  auto a = std::make_shared<Connection>(std::move(socket_a), wire::WireLimits{}, "peer b", 300ms);
  auto b = std::make_shared<Connection>(std::move(socket_b), wire::WireLimits{}, "peer a", 300ms);
  events_b.echo = true;
  events_a.start(a, loop);
  events_b.start(b, loop);
  std::this_thread::sleep_for(1500ms);  // five heartbeat timeouts without a single frame
  CHECK(a->is_open());
  CHECK(b->is_open());
  a->call(wire::Frame{wire::MessageType::ping, 0, "still there?", {}}, answered.callback(), 10s);
  REQUIRE(answered.wait());
  {
    std::lock_guard lock(answered.mutex);
    CHECK(answered.status.ok());
    CHECK(answered.frame.metadata == "re:still there?");
  }
  {
    std::lock_guard lock(events_a.mutex);
    CHECK(events_a.frames.empty());
    CHECK(events_a.closes.empty());
  }
  {
    std::lock_guard lock(events_b.mutex);
    REQUIRE(events_b.frames.size() == 1);  // the ping: no heartbeat reached the handler
    CHECK(events_b.frames[0].type == wire::MessageType::ping);
    CHECK(events_b.closes.empty());
  }
  a->close(Status(ErrorCode::unavailable, "test over"));
}

TEST_CASE("a slow big frame counts as activity: its peer is not declared dead meanwhile") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events;
  IoThread loop{reading_on_threads};
  auto [socket_c, raw] = socket_pair(loop.io);
  auto c = std::make_shared<Connection>(std::move(socket_c), wire::WireLimits{}, "slow sender", 1s);
  events.start(c, loop);
  // 1 MiB written in 25 pieces 100 ms apart: 2.5 s, two and a half heartbeat timeouts, during
  // which the raw peer sends no heartbeat, only the frame's bytes.
  constexpr std::size_t kFloats = 256 * 1024;
  const Tensor payload = pattern(kFloats, 3);
  const std::string table = table_entry(DType::float32, {kFloats});
  write_raw(raw, header_bytes(wire::MessageType::tensor, 0,
                              static_cast<std::uint32_t>(table.size()), kFloats * 4, 1) +
                     table);
  const char* bytes = static_cast<const char*>(payload.raw_data());
  constexpr std::size_t kPieces = 25;
  const std::size_t piece = (kFloats * 4 + kPieces - 1) / kPieces;
  for (std::size_t at = 0; at < kFloats * 4; at += piece) {
    std::this_thread::sleep_for(100ms);  // a slow sender: the pause between pieces is under test
    write_raw(raw, std::string(bytes + at, std::min(piece, kFloats * 4 - at)));
  }
  REQUIRE(events.wait_frames(1));
  CHECK(c->is_open());
  std::lock_guard lock(events.mutex);
  CHECK(events.closes.empty());
  REQUIRE(events.frames[0].tensors.size() == 1);
  CHECK(events.frames[0].tensors[0].equals(payload));
}

TEST_CASE("a silent peer is declared dead after the heartbeat timeout, naming it and the silence") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events;
  Reply pending;
  IoThread loop{reading_on_threads};
  auto [socket_c, raw] = socket_pair(loop.io);
  auto c = std::make_shared<Connection>(std::move(socket_c), wire::WireLimits{},
                                        "client 127.0.0.1:4242", 400ms);
  c->set_peer_task("/job:ps/replica:0/task:1");
  const auto started = std::chrono::steady_clock::now();
  events.start(c, loop);
  c->call(wire::Frame{wire::MessageType::ping, 0, "anyone?", {}}, pending.callback());
  // The raw peer reads what comes (the request, then heartbeats) and never answers.
  REQUIRE(read_frame(raw));
  const auto heartbeat = read_frame(raw);
  REQUIRE(heartbeat);
  CHECK(heartbeat->first.type == wire::MessageType::heartbeat);
  CHECK(heartbeat->second.empty());
  REQUIRE(events.wait_closed());
  CHECK(std::chrono::steady_clock::now() - started >= 400ms);  // not before its time
  CHECK(sees_close(raw));
  REQUIRE(pending.wait());
  std::lock_guard lock(events.mutex);
  REQUIRE(events.closes.size() == 1);
  const Status& reason = events.closes[0];
  CHECK(reason.code() == ErrorCode::unavailable);
  CHECK_THAT(reason.message(),
             Catch::Contains("/job:ps/replica:0/task:1") && Catch::Contains("127.0.0.1:4242") &&
                 Catch::Contains("sent nothing for") && Catch::Contains("heartbeat timeout 0.4 s"));
  std::lock_guard pending_lock(pending.mutex);
  CHECK(pending.status.code() == ErrorCode::unavailable);
  CHECK(pending.status.message() == reason.message());
}

TEST_CASE("without a heartbeat timeout a silent peer is never declared dead") {
  const bool reading_on_threads = GENERATE(false, true);
  Events events;
  IoThread loop{reading_on_threads};
  auto [socket_c, raw] = socket_pair(loop.io);
  auto c = std::make_shared<Connection>(std::move(socket_c), wire::WireLimits{}, "quiet peer");
  events.start(c, loop);
  std::this_thread::sleep_for(1s);  // the silence under test: no timeout may end it
  CHECK(c->is_open());
  pollfd p{raw.native_handle(), POLLIN, 0};
  CHECK(::poll(&p, 1, 0) == 0);  // and it sent no heartbeat
  c->close(Status(ErrorCode::unavailable, "test over"));
}

TEST_CASE(
    "a connection's reader runs with a short time slice, the normal one for a large payload") {
  const std::optional<std::chrono::nanoseconds> normal = detail::time_slice_of_thread();
  if (!normal) {
    WARN("this kernel reports no time slice (before Linux 6.12): the request is not visible");
    return;
  }
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::optional<std::chrono::nanoseconds>> slices;  // as each frame's handler saw
  std::atomic<int> reader{0};                                   // the reader's thread id
  IoThread loop{true};
  auto [socket_c, raw] = socket_pair(loop.io);
  auto c = std::make_shared<Connection>(std::move(socket_c), wire::WireLimits{}, "test peer");
  loop.start(
      c,
      [&](const std::shared_ptr<Connection>&, wire::Frame) {
        reader = static_cast<int>(::gettid());
        std::lock_guard lock(mutex);
        slices.push_back(detail::time_slice_of_thread());
        changed.notify_all();
      },
      [](const std::shared_ptr<Connection>&, const Status&) {});
  const auto wait_handled = [&](std::size_t frames) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return slices.size() >= frames; });
  };

  write_raw(raw, frame_bytes(wire::make_frame(wire::MessageType::ping, wire::Handle{"small"})));
  REQUIRE(wait_handled(1));
  CHECK(slices[0] == std::chrono::nanoseconds(detail::kShortTimeSlice));

  // 4 MiB whose second half is held back: the reader waits for it in recv, with the normal slice.
  const std::string big = frame_bytes(wire::make_frame(
      wire::MessageType::tensor, wire::TensorMessage{1, "big"}, {pattern(1u << 20, 1)}));
  write_raw(raw, big.substr(0, big.size() / 2));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (detail::time_slice_of_thread(reader) != normal &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  CHECK(detail::time_slice_of_thread(reader) == normal);
  write_raw(raw, big.substr(big.size() / 2));
  REQUIRE(wait_handled(2));
  CHECK(slices[1] == std::chrono::nanoseconds(detail::kShortTimeSlice));  // short again
}
