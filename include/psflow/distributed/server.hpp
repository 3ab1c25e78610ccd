// Server: one task of a cluster (TF's tf.train.Server). It listens on exactly the address its
// task has in the ClusterSpec, hosts the task's device (and so its variables) and a worker
// service, and lets a Session in the same process act as master for the cluster.
//
// Beyond TF: stop_task()/stop_job() tell other tasks to stop, so a ps's join() returns and
// its process can exit 0 at the end of training; every wait on a peer has a deadline, and
// while waiting for a peer that is not up yet the server says whom it waits for.
//
// Thread-safe. The constructor starts serving; the destructor stops and joins.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/messages.hpp"
#include "psflow/distributed/worker_service.hpp"
#include "psflow/runtime/device.hpp"
#include "psflow/runtime/thread_pool.hpp"

namespace psflow {

struct ServerOptions {
  // How long to keep trying to reach a task that is not up yet before Unavailable.
  std::chrono::milliseconds connect_timeout{30000};
  // How often to say whom we are waiting for, while waiting.
  std::chrono::milliseconds wait_log_interval{5000};
  // Deadline of control requests (registering a partition, stopping a task).
  std::chrono::milliseconds rpc_timeout{60000};
  // Deadline of one distributed step; zero means none (a dead peer is still detected at once
  // when its connection drops).
  std::chrono::milliseconds step_timeout{0};
  wire::WireLimits limits;
  // Threads running expensive ops: 0 = one per core (shared).
  std::size_t inter_op_threads = 0;
  // Log connection events and waits to standard error.
  bool log = true;
  // Also log what this task does for others: partitions registered, steps run, tensors sent.
  bool explain = false;
};

class Server {
 public:
  Server(const ClusterSpec& cluster, std::string_view job_name, std::size_t task_index, ServerOptions options = {});
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();

  // What Session(graph, target) connects to: "psflow://host:port" (the real port when the
  // cluster gave port 0).
  std::string target() const { return "psflow://" + host_ + ":" + std::to_string(port_); }
  // Blocks until stop() is called here or another task asks this one to stop.
  void join();
  void stop();
  bool stopped() const;

  // Asks task `job`/`task_index` to stop (its join() returns). Returns false when it could not
  // be reached within `timeout` (it may already be gone).
  bool stop_task(std::string_view job, std::size_t task_index,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  // stop_task for every task of `job` (except this one); returns how many acknowledged.
  std::size_t stop_job(std::string_view job, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

  const ClusterSpec& cluster() const noexcept { return cluster_; }
  const std::string& job_name() const noexcept { return job_; }
  std::size_t task_index() const noexcept { return task_index_; }
  std::uint64_t incarnation() const noexcept { return incarnation_; }
  // "/job:ps/replica:0/task:0"
  const std::string& task_name() const noexcept { return task_name_; }
  // "/job:ps/replica:0/task:0/device:CPU:0"
  const std::string& device_name() const noexcept { return device_.name(); }
  std::vector<std::string> cluster_devices() const;
  Device& device() noexcept { return device_; }
  WorkerService& worker() noexcept { return *worker_; }
  const ServerOptions& options() const noexcept { return options_; }
  ThreadPool* pool() noexcept { return pool_; }

  // The live connection to `task` (connecting, with retries, up to connect_timeout). Blocking:
  // for user threads only. Throws Unavailable naming the task and its address.
  std::shared_ptr<Connection> connect(const std::string& task);
  // Non-blocking form: `done` runs on an I/O thread.
  // `patience`: how long to keep trying (zero: connect_timeout).
  void connect_async(const std::string& task, std::function<void(Status, std::shared_ptr<Connection>)> done,
                     std::chrono::milliseconds patience = {});
  // The open connection to `task` if there is one now, else null; never connects.
  std::shared_ptr<Connection> open_connection(const std::string& task);
  // The incarnation `task` reported when we connected (connecting if needed).
  std::uint64_t peer_incarnation(const std::string& task);
  // A request to `task` and its reply, blocking up to rpc_timeout. Throws the typed error.
  wire::Frame call(const std::string& task, wire::Frame request, std::chrono::milliseconds timeout);
  // Forgets a peer's connection (e.g. after it restarted) so the next use reconnects.
  void drop_connection(const std::string& task);

  // The server in this process serving `target`, or null.
  static Server* find_local(std::string_view target);
  std::string address_of(const std::string& task) const;

  void log(const std::string& line) const {
    if (options_.log) std::fprintf(stderr, "[psflow %s] %s\n", task_name_.c_str(), line.c_str());
  }

 private:
  struct Peer {
    std::shared_ptr<Connection> connection;
    std::uint64_t incarnation = 0;
    bool connecting = false;
    std::vector<std::function<void(Status, std::shared_ptr<Connection>)>> waiters;
  };

  static std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<std::string, Server*>& registry() {
    static std::map<std::string, Server*> servers;
    return servers;
  }

  void accept_next();
  void adopt(std::shared_ptr<Connection> connection);
  void handle_frame(const std::shared_ptr<Connection>& connection, wire::Frame frame);
  void handle_close(const std::shared_ptr<Connection>& connection, const Status& reason);
  void reply(const std::shared_ptr<Connection>& connection, std::uint64_t request_id, const wire::Reply& r) {
    wire::Frame f = wire::make_frame(wire::MessageType::reply, r);
    f.request_id = request_id;
    connection->send(std::move(f));
  }
  void send_tensor(const std::string& dst_device, std::uint64_t step_id, const std::string& key, Tensor value);
  void try_connect(const std::string& task, std::chrono::steady_clock::time_point started,
                   std::chrono::steady_clock::time_point deadline, std::chrono::steady_clock::time_point last_log,
                   int attempt);
  void finish_connect(const std::string& task, Status status, std::shared_ptr<Connection> connection,
                      std::uint64_t incarnation);
  static std::string task_of_device(const std::string& device);

  const ClusterSpec cluster_;
  const std::string job_;
  const std::size_t task_index_;
  const ServerOptions options_;
  const std::uint64_t incarnation_;
  const std::string task_name_;
  std::string host_;
  unsigned short port_ = 0;

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::ip::tcp::acceptor acceptor_;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  Device device_;
  std::unique_ptr<WorkerService> worker_;

  mutable std::mutex mutex_;
  std::condition_variable stopped_cv_;
  bool stopped_ = false;
  std::map<std::string, Peer> peers_;                 // by task name
  std::set<std::shared_ptr<Connection>> connections_;  // every open connection
  std::map<Connection*, std::set<std::uint64_t>> steps_by_connection_;  // running remote steps
  std::thread io_thread_;
};

// ---------------------------------------------------------------------------------------------

inline std::string seconds_string(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

inline std::uint64_t random_incarnation() {
  std::random_device rd;
  std::uint64_t v = 0;
  while (v == 0) v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return v;
}

inline std::string Server::task_of_device(const std::string& device) {
  DeviceSpec spec = DeviceSpec::parse(device);
  spec.device_type.reset();
  spec.device_index.reset();
  return spec.to_string();
}

inline Server::Server(const ClusterSpec& cluster, std::string_view job_name, std::size_t task_index,
                      ServerOptions options)
    : cluster_(cluster),
      job_(job_name),
      task_index_(task_index),
      options_(options),
      incarnation_(random_incarnation()),
      task_name_("/job:" + job_ + "/replica:0/task:" + std::to_string(task_index)),
      work_(asio::make_work_guard(io_)),
      acceptor_(io_),
      device_(task_name_ + "/device:CPU:0") {
  const std::string address = cluster_.task_address(job_, task_index_);  // throws NotFound
  const auto colon = address.rfind(':');
  host_ = address.substr(0, colon);
  const auto port = static_cast<unsigned short>(std::stoi(address.substr(colon + 1)));
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io_);
  auto endpoints = resolver.resolve(host_, std::to_string(port), ec);
  if (ec || endpoints.empty())
    throw InvalidArgument("cannot resolve " + address + " (task " + task_name_ + "): " + ec.message());
  const asio::ip::tcp::endpoint endpoint = *endpoints.begin();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw AlreadyExists("cannot listen on " + address + " for task " + task_name_ + ": " + ec.message() +
                        " (is another process using that port? pick a free one in the cluster spec)");
  port_ = acceptor_.local_endpoint().port();

  if (options_.inter_op_threads == 0) {
    pool_ = &ThreadPool::shared();
  } else if (options_.inter_op_threads > 1) {
    own_pool_ = std::make_unique<ThreadPool>(options_.inter_op_threads);
    pool_ = own_pool_.get();
  }
  worker_ = std::make_unique<WorkerService>(
      device_, pool_, [this](const std::string& dst, std::uint64_t step, const std::string& key, Tensor value) {
        send_tensor(dst, step, key, std::move(value));
      });
  {
    std::lock_guard lock(registry_mutex());
    registry()[target()] = this;
  }
  accept_next();
  io_thread_ = std::thread([this] { io_.run(); });
  log("serving on " + host_ + ":" + std::to_string(port_) + " (incarnation " + std::to_string(incarnation_) + ")");
}

inline Server::~Server() {
  {
    std::lock_guard lock(registry_mutex());
    registry().erase(target());
  }
  stop();
  worker_->abort_all_and_wait(Status(ErrorCode::aborted, "task " + task_name_ + " is shutting down"),
                              std::chrono::seconds(10));
  work_.reset();
  io_.stop();
  if (io_thread_.joinable()) io_thread_.join();
}

inline Server* Server::find_local(std::string_view target) {
  std::lock_guard lock(registry_mutex());
  auto it = registry().find(std::string(target));
  return it == registry().end() ? nullptr : it->second;
}

inline std::vector<std::string> Server::cluster_devices() const {
  std::vector<std::string> out;
  for (const auto& job : cluster_.jobs())
    for (std::size_t t = 0; t < cluster_.num_tasks(job); ++t)
      out.push_back("/job:" + job + "/replica:0/task:" + std::to_string(t) + "/device:CPU:0");
  return out;
}

inline std::string Server::address_of(const std::string& task) const {
  const DeviceSpec spec = DeviceSpec::parse(task);
  if (!spec.job || !spec.task) throw InvalidArgument("'" + task + "' does not name a task");
  return cluster_.task_address(*spec.job, static_cast<std::size_t>(*spec.task));
}

inline void Server::join() {
  std::unique_lock lock(mutex_);
  stopped_cv_.wait(lock, [this] { return stopped_; });
}

inline bool Server::stopped() const {
  std::lock_guard lock(mutex_);
  return stopped_;
}

inline void Server::stop() {
  std::set<std::shared_ptr<Connection>> connections;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    connections = connections_;
  }
  asio::post(io_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
  for (auto& c : connections) c->close(Status(ErrorCode::aborted, "task " + task_name_ + " stopped"));
  stopped_cv_.notify_all();
  log("stopped");
}

inline void Server::accept_next() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket socket) {
    if (ec) return;  // acceptor closed
    boost::system::error_code ignored;
    auto remote = socket.remote_endpoint(ignored);
    auto connection = std::make_shared<Connection>(std::move(socket), options_.limits,
                                                   "client " + remote.address().to_string() + ":" + std::to_string(remote.port()));
    adopt(connection);
    accept_next();
  });
}

inline void Server::adopt(std::shared_ptr<Connection> connection) {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      connection->close(Status(ErrorCode::unavailable, "task " + task_name_ + " has stopped"));
      return;
    }
    connections_.insert(connection);
  }
  connection->start([this](const auto& c, wire::Frame f) { handle_frame(c, std::move(f)); },
                    [this](const auto& c, const Status& reason) { handle_close(c, reason); });
}

inline void Server::handle_close(const std::shared_ptr<Connection>& connection, const Status& reason) {
  std::set<std::uint64_t> orphaned;
  {
    std::lock_guard lock(mutex_);
    connections_.erase(connection);
    if (auto it = steps_by_connection_.find(connection.get()); it != steps_by_connection_.end()) {
      orphaned = std::move(it->second);
      steps_by_connection_.erase(it);
    }
    for (auto& [task, peer] : peers_)
      if (peer.connection == connection) peer.connection.reset();
  }
  // Steps a vanished master started here can never finish normally: fail them.
  for (auto step : orphaned) worker_->abort_step(step, reason);
}

inline void Server::handle_frame(const std::shared_ptr<Connection>& connection, wire::Frame frame) {
  using wire::MessageType;
  try {
    switch (frame.type) {
      case MessageType::hello: {
        auto hello = wire::decode<wire::Hello>(frame.metadata, "hello");
        connection->set_peer_task(hello.task);
        {
          std::lock_guard lock(mutex_);
          auto& peer = peers_[hello.task];
          if (!peer.connection || !peer.connection->is_open()) {
            peer.connection = connection;
            peer.incarnation = hello.incarnation;
          }
        }
        wire::Reply r{0, task_name_, incarnation_};
        reply(connection, frame.request_id, r);
        return;
      }
      case MessageType::ping:
        reply(connection, frame.request_id, wire::Reply{0, task_name_, incarnation_});
        return;
      case MessageType::register_graph: {
        auto request = wire::decode<wire::RegisterGraph>(frame.metadata, "register_graph");
        wire::Reply r;
        if (options_.explain) {
          std::string ops;
          for (const auto& n : request.graph.nodes) ops += (ops.empty() ? "" : ", ") + n.name + " (" + n.op + ")";
          log("explain: " + connection->peer_task() + " registered a partition to run here: " + ops);
        }
        try {
          r.text = worker_->register_graph(request.graph);
        } catch (...) {
          r = wire::Reply::from(Status::from_current_exception().with_context("registering a partition on " + task_name_));
        }
        r.incarnation = incarnation_;
        reply(connection, frame.request_id, r);
        return;
      }
      case MessageType::run_graph: {
        auto request = wire::decode<wire::RunGraph>(frame.metadata, "run_graph");
        if (request.incarnation != incarnation_) {
          reply(connection, frame.request_id,
                wire::Reply::from(Status(ErrorCode::aborted, "task " + task_name_ +
                                                                 " restarted since the session registered its graph: "
                                                                 "re-create the session")));
          return;
        }
        {
          std::lock_guard lock(mutex_);
          steps_by_connection_[connection.get()].insert(request.step_id);
        }
        const std::uint64_t request_id = frame.request_id;
        const std::uint64_t step_id = request.step_id;
        if (options_.explain)
          log("explain: step " + std::to_string(step_id) + ": running " + request.handle + " for " + connection->peer_task());
        worker_->run_graph(request.handle, step_id, [this, connection, request_id, step_id](Status status) {
          {
            std::lock_guard lock(mutex_);
            if (auto it = steps_by_connection_.find(connection.get()); it != steps_by_connection_.end())
              it->second.erase(step_id);
          }
          reply(connection, request_id, wire::Reply::from(status));
        });
        return;
      }
      case MessageType::tensor: {
        auto message = wire::decode<wire::TensorMessage>(frame.metadata, "tensor");
        if (frame.tensors.size() != 1) throw DataLoss("a tensor message must carry exactly one tensor");
        worker_->deliver(message.step_id, message.key, std::move(frame.tensors[0]));
        return;
      }
      case MessageType::abort_step: {
        auto message = wire::decode<wire::AbortStep>(frame.metadata, "abort_step");
        worker_->abort_step(message.step_id, Status(static_cast<ErrorCode>(message.code), message.message));
        return;
      }
      case MessageType::deregister_graph: {
        auto message = wire::decode<wire::Handle>(frame.metadata, "deregister_graph");
        worker_->deregister_graph(message.handle);
        if (frame.request_id) reply(connection, frame.request_id, wire::Reply{});
        return;
      }
      case MessageType::stop_server: {
        auto message = wire::decode<wire::StopServer>(frame.metadata, "stop_server");
        log("asked to stop by " + (connection->peer_task().empty() ? connection->description() : connection->peer_task()) +
            (message.reason.empty() ? "" : ": " + message.reason));
        reply(connection, frame.request_id, wire::Reply{0, task_name_, incarnation_});
        // Stop once the reply had a moment to leave.
        auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(50));
        timer->async_wait([this, timer](const boost::system::error_code&) { stop(); });
        return;
      }
      case MessageType::reply:
        return;  // a reply nobody waits for any more
    }
  } catch (const Error& e) {
    log("bad frame from " + connection->description() + ": " + e.message() + " (closing that connection)");
    connection->close(Status(ErrorCode::data_loss, e.message()));
  }
}

inline void Server::send_tensor(const std::string& dst_device, std::uint64_t step_id, const std::string& key,
                                Tensor value) {
  if (options_.explain)
    log("explain: step " + std::to_string(step_id) + ": sending " + value.summary() + " (" +
        std::to_string(value.nbytes()) + " bytes) to " + dst_device + " under key " + key);
  wire::Frame frame = wire::make_frame(wire::MessageType::tensor, wire::TensorMessage{step_id, key}, {std::move(value)});
  const std::string task = task_of_device(dst_device);
  {
    std::lock_guard lock(mutex_);
    auto it = peers_.find(task);
    if (it != peers_.end() && it->second.connection && it->second.connection->is_open()) {
      it->second.connection->send(std::move(frame));
      return;
    }
  }
  auto shared = std::make_shared<wire::Frame>(std::move(frame));
  connect_async(task, [this, shared, step_id, task](Status status, std::shared_ptr<Connection> c) {
    if (status.ok()) {
      c->send(std::move(*shared));
    } else {
      // The receiver is unreachable; its step cannot complete, fail ours here too.
      worker_->abort_step(step_id, status);
    }
  });
}

inline void Server::connect_async(const std::string& task,
                                  std::function<void(Status, std::shared_ptr<Connection>)> done,
                                  std::chrono::milliseconds patience) {
  std::shared_ptr<Connection> ready;
  {
    std::unique_lock lock(mutex_);
    if (stopped_) {
      lock.unlock();
      done(Status(ErrorCode::unavailable, "task " + task_name_ + " has stopped"), nullptr);
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
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = now + (patience.count() > 0 ? patience : options_.connect_timeout);
  asio::post(io_, [this, task, now, deadline] { try_connect(task, now, deadline, now, 0); });
}

inline void Server::try_connect(const std::string& task, std::chrono::steady_clock::time_point started,
                                std::chrono::steady_clock::time_point deadline,
                                std::chrono::steady_clock::time_point last_log, int attempt) {
  std::string address;
  try {
    address = address_of(task);
  } catch (const Error& e) {
    return finish_connect(task, Status(e.code(), e.message()), nullptr, 0);
  }
  auto socket = std::make_shared<asio::ip::tcp::socket>(io_);
  auto resolver = std::make_shared<asio::ip::tcp::resolver>(io_);
  const auto colon = address.rfind(':');
  resolver->async_resolve(
      address.substr(0, colon), address.substr(colon + 1),
      [this, task, started, deadline, last_log, attempt, socket, resolver, address](const boost::system::error_code& rec,
                                                                           asio::ip::tcp::resolver::results_type endpoints) {
        auto retry = [this, task, started, deadline, last_log, attempt, address](const std::string& why) {
          const auto now = std::chrono::steady_clock::now();
          if (now >= deadline) {
            finish_connect(task,
                           Status(ErrorCode::unavailable,
                                  "could not reach " + task + " at " + address + " for " +
                                      seconds_string(now - started) + " (" + why +
                                      "): is that task running, and is its address right?"),
                           nullptr, 0);
            return;
          }
          auto next_log = last_log;
          if (attempt == 0 || now - last_log >= options_.wait_log_interval) {
            log("waiting for " + task + " at " + address + " (" + why + ")");
            next_log = now;
          }
          const auto backoff = std::chrono::milliseconds(std::min(1000, 20 << std::min(attempt, 6)));
          auto timer = std::make_shared<asio::steady_timer>(io_, backoff);
          timer->async_wait([this, timer, task, started, deadline, next_log, attempt](const boost::system::error_code&) {
            try_connect(task, started, deadline, next_log, attempt + 1);
          });
        };
        if (rec) return retry(rec.message());
        asio::async_connect(*socket, endpoints,
                            [this, task, socket, retry, address](const boost::system::error_code& ec, const asio::ip::tcp::endpoint&) {
                              if (ec) return retry(ec.message());
                              auto connection = std::make_shared<Connection>(std::move(*socket), options_.limits,
                                                                             task + " at " + address);
                              adopt(connection);
                              connection->call(
                                  wire::make_frame(wire::MessageType::hello, wire::Hello{task_name_, incarnation_}),
                                  [this, task, connection, retry](Status status, wire::Frame reply) {
                                    if (!status.ok()) return retry(status.message());
                                    try {
                                      auto r = wire::decode<wire::Reply>(reply.metadata, "hello reply");
                                      if (r.text != task) {
                                        connection->close(Status(ErrorCode::invalid_argument, "wrong task"));
                                        return finish_connect(task,
                                                              Status(ErrorCode::invalid_argument,
                                                                     "the address of " + task + " is served by " + r.text +
                                                                         ": check the cluster spec"),
                                                              nullptr, 0);
                                      }
                                      connection->set_peer_task(task);
                                      finish_connect(task, Status{}, connection, r.incarnation);
                                    } catch (const Error& e) {
                                      connection->close(Status(e.code(), e.message()));
                                      retry(e.message());
                                    }
                                  },
                                  options_.rpc_timeout);
                            });
      });
}

inline void Server::finish_connect(const std::string& task, Status status, std::shared_ptr<Connection> connection,
                                   std::uint64_t incarnation) {
  std::vector<std::function<void(Status, std::shared_ptr<Connection>)>> waiters;
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
  if (status.ok()) log("connected to " + task + " (incarnation " + std::to_string(incarnation) + ")");
  for (auto& w : waiters) w(status, connection);
}

inline std::shared_ptr<Connection> Server::connect(const std::string& task) {
  std::promise<std::pair<Status, std::shared_ptr<Connection>>> promise;
  auto future = promise.get_future();
  connect_async(task, [&promise](Status s, std::shared_ptr<Connection> c) { promise.set_value({std::move(s), std::move(c)}); });
  auto [status, connection] = future.get();  // bounded: connect_async gives up after connect_timeout
  status.raise_if_error();
  return connection;
}

inline std::shared_ptr<Connection> Server::open_connection(const std::string& task) {
  std::lock_guard lock(mutex_);
  auto it = peers_.find(task);
  if (it == peers_.end() || !it->second.connection || !it->second.connection->is_open()) return nullptr;
  return it->second.connection;
}

inline std::uint64_t Server::peer_incarnation(const std::string& task) {
  if (task == task_name_) return incarnation_;
  connect(task);
  std::lock_guard lock(mutex_);
  return peers_[task].incarnation;
}

inline void Server::drop_connection(const std::string& task) {
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard lock(mutex_);
    auto it = peers_.find(task);
    if (it == peers_.end()) return;
    connection = std::move(it->second.connection);
  }
  if (connection) connection->close(Status(ErrorCode::aborted, "dropped by " + task_name_));
}

inline wire::Frame Server::call(const std::string& task, wire::Frame request, std::chrono::milliseconds timeout) {
  auto connection = connect(task);
  std::promise<std::pair<Status, wire::Frame>> promise;
  auto future = promise.get_future();
  connection->call(std::move(request), [&promise](Status s, wire::Frame f) { promise.set_value({std::move(s), std::move(f)}); },
                   timeout);
  auto [status, reply] = future.get();  // bounded by `timeout` and by the connection closing
  status.raise_if_error();
  return std::move(reply);
}

inline bool Server::stop_task(std::string_view job, std::size_t task_index, std::chrono::milliseconds timeout) {
  const std::string task = "/job:" + std::string(job) + "/replica:0/task:" + std::to_string(task_index);
  if (task == task_name_) {
    stop();
    return true;
  }
  address_of(task);  // NotFound for a task not in the cluster
  std::promise<std::pair<Status, std::shared_ptr<Connection>>> promise;
  auto future = promise.get_future();
  connect_async(task, [&promise](Status s, std::shared_ptr<Connection> c) { promise.set_value({std::move(s), std::move(c)}); },
                timeout);
  auto [status, connection] = future.get();  // bounded by `timeout`
  if (!status.ok()) return false;
  std::promise<Status> acked;
  auto ack = acked.get_future();
  connection->call(wire::make_frame(wire::MessageType::stop_server, wire::StopServer{"requested by " + task_name_}),
                   [&acked](Status s, wire::Frame) { acked.set_value(std::move(s)); }, timeout);
  return ack.get().ok();
}

inline std::size_t Server::stop_job(std::string_view job, std::chrono::milliseconds timeout) {
  std::size_t acknowledged = 0;
  for (std::size_t t = 0; t < cluster_.num_tasks(job); ++t) {
    if (job == job_ && t == task_index_) continue;
    if (stop_task(job, t, timeout)) ++acknowledged;
  }
  return acknowledged;
}

}  // namespace psflow
