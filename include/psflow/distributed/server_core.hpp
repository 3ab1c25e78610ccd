// ServerCore: the machinery behind a Server (distributed/server.hpp), for psflow's own
// distributed session and for tests; programs use Server. It listens on exactly the address its
// task has in the ClusterSpec, hosts the task's device (and so its variables) and a worker
// service, connects to the other tasks, and carries the stop protocol.
//
// Thread-safe. create() starts serving (ServerOptions::io_threads I/O threads run the
// connections, each thread an I/O lane of its own and each connection on its own strand in the
// lane with the fewest connections when it opened: io_lanes.hpp); shut_down() stops, fails the
// steps running here and joins the I/O threads. The core is shared: its Server holds it, and so
// does every step running here, so a step that ends after its Server is gone still finds the
// device, the pool and the connections it uses. The last step to end deletes the core on a thread
// of its own, never inside the step's callbacks. The blocking calls (connect, call,
// peer_incarnation, stop_task, stop_job, join) are for user threads: on the server's own I/O
// threads they could wait for the very thread they block, so there they throw Internal instead.
// Callbacks use connect_async and open_connection. The pieces behind it, in psflow::detail:
// Listener (the listening socket), PeerCache (connections to other tasks), FrameDispatcher (what
// arriving frames do) and the stop protocol.
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/device_spec.hpp"
#include "psflow/core/log.hpp"
#include "psflow/distributed/cluster_auth.hpp"
#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/connect_deadline.hpp"
#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/connection_threads.hpp"
#include "psflow/distributed/end_of_training.hpp"
#include "psflow/distributed/frame_dispatcher.hpp"
#include "psflow/distributed/host_port.hpp"
#include "psflow/distributed/io_lanes.hpp"
#include "psflow/distributed/listener.hpp"
#include "psflow/distributed/messages.hpp"
#include "psflow/distributed/peer_cache.hpp"
#include "psflow/distributed/server.hpp"
#include "psflow/distributed/server_options.hpp"
#include "psflow/distributed/stop_protocol.hpp"
#include "psflow/distributed/tls.hpp"
#include "psflow/distributed/worker_service.hpp"
#include "psflow/runtime/device.hpp"
#include "psflow/runtime/network_thread.hpp"
#include "psflow/runtime/rendezvous.hpp"
#include "psflow/runtime/thread_pool.hpp"

namespace psflow {

class ServerCore : public std::enable_shared_from_this<ServerCore> {
 public:
  static std::shared_ptr<ServerCore> create(const ClusterSpec& cluster, std::string_view job_name,
                                            std::size_t task_index, ServerOptions options = {});
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;
  ~ServerCore();

  // Stops serving for good: stop(), fails every step running here (Aborted) and joins the I/O
  // threads. Steps still finishing keep the core alive. Idempotent; for the owner's thread.
  void shut_down();
  // How many cores exist in this process (tests see the last step's end delete its core).
  static std::size_t instances() noexcept { return live_instances().load(); }

  // What Session(graph, target) connects to: "psflow://host:port" (the real port when the
  // cluster gave port 0).
  std::string target() const;
  // Blocks until stop() is called here or another task asks this one to stop.
  void join();
  void stop();
  bool stopped() const;

  // Asks task `job`/`task_index` to stop (its join() returns). Returns false when it could not
  // be reached within `timeout` (it may already be gone).
  bool stop_task(std::string_view job, std::size_t task_index,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  // stop_task for every task of `job` (except this one); returns how many acknowledged.
  std::size_t stop_job(std::string_view job,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

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

  // The live connection to `task` (connecting, with retries, up to connect_timeout or the
  // thread's ConnectDeadline). Blocking:
  // for user threads only (Internal on an I/O thread). Throws Unavailable naming the task and
  // its address.
  std::shared_ptr<Connection> connect(const std::string& task);
  // Non-blocking form: `done` runs on an I/O thread, or at once on this thread when the
  // connection is open already. `patience`: how long to keep trying (zero: connect_timeout).
  void connect_async(const std::string& task,
                     std::function<void(Status, std::shared_ptr<Connection>)> done,
                     std::chrono::milliseconds patience = {});
  // The open connection to `task` if there is one now, else null; never connects, never blocks.
  std::shared_ptr<Connection> open_connection(const std::string& task);
  // The incarnation `task` reported when we connected (connecting if needed: blocking).
  std::uint64_t peer_incarnation(const std::string& task);
  // A request to `task` and its reply, blocking up to `timeout`. Throws the typed error.
  wire::Frame call(const std::string& task, wire::Frame request, std::chrono::milliseconds timeout);
  // Forgets a peer's connection (e.g. after it restarted) so the next use reconnects.
  void drop_connection(const std::string& task);

  // Calls `lost(task, reason)` (on an I/O thread; it must not block) whenever a connection to
  // one of `tasks` closes, until stop_watching(the returned id). A master watches every task of
  // a step: a lost connection may have taken tensors with it, so the step cannot finish.
  using PeerLost = std::function<void(const std::string& task, const Status& reason)>;
  std::uint64_t watch_peers(std::vector<std::string> tasks, PeerLost lost);
  // Ends a watch; once it returns, its callback is not running and never runs again.
  void stop_watching(std::uint64_t id);

  // The end of training (end_of_training.hpp), for a worker's MonitoredTrainingSession; both
  // block, for user threads only. announce_end_of_training tells every ps task that this
  // cluster ends itself (from then on each stops by itself after ServerOptions::orphan_timeout
  // without workers). report_done reports this worker done to every ps task (waiting up to
  // `patience` for each to be reachable) and to the chief; when every worker of the cluster is
  // done, it stops the ps tasks and returns true.
  void announce_end_of_training(std::chrono::milliseconds patience);
  bool report_done(std::chrono::milliseconds patience);
  // The workers this task heard are done, sorted.
  std::vector<std::string> finished_workers() const { return end_of_training_.finished(); }

  // The server in this process serving `target`, or null.
  static ServerCore* find_local(std::string_view target);
  std::string address_of(const std::string& task) const;

  void log(const std::string& line) const;

 private:
  ServerCore(const ClusterSpec& cluster, std::string_view job_name, std::size_t task_index,
             ServerOptions options);
  // The deleter of the shared core: on the thread that shut it down (its Server's) it deletes
  // at once; anywhere else (the last step ending, deep in its callbacks, maybe on a pool thread
  // the core owns) it hands the core to a new thread that deletes it.
  struct Release {
    void operator()(ServerCore* core) const noexcept;
  };
  // Starts the I/O lanes' threads. Called by create() once the shared owner exists: before
  // that, a step arriving on an I/O thread could not take ownership of the core.
  void start_io_threads();
  // The I/O lane for a connection about to be opened or accepted: the one with the fewest open
  // connections now.
  asio::io_context& lane_for_new_connection();
  static std::atomic<std::size_t>& live_instances() noexcept {
    static std::atomic<std::size_t> count{0};
    return count;
  }

  // Every Server of this process, by target (for Session's "psflow://" targets).
  struct Registry {
    std::mutex mutex;
    std::map<std::string, ServerCore*> servers;
  };
  static Registry& registry();

  // Starts reading `connection` (incoming or outgoing); closes it when the server stopped.
  void adopt(const std::shared_ptr<Connection>& connection);
  void handle_close(const std::shared_ptr<Connection>& connection, const Status& reason);
  // Every quarter of slow_step_warning, logs the steps running here longer than it (once per
  // period each), with the ops they are in; reschedules itself on an I/O thread.
  void check_slow_steps();
  // A workers_done message from a worker (end_of_training.hpp); returns the reply's text.
  std::string on_workers_done(const wire::WorkersDone& message);
  // Every tenth of orphan_timeout: stops this task once the cluster ends itself and no worker
  // task has been connected for orphan_timeout; reschedules itself on an I/O thread.
  void check_orphaned();
  bool has_worker_connection() const;
  // The task of a device a partition sends to, parsed once per device name: every tensor
  // sent looks it up.
  const std::string& task_of_destination(const std::string& device);
  void send_tensor(const std::string& dst_device, std::uint64_t step_id, const std::string& key,
                   Tensor value);
  // Throws Internal when called on one of this server's I/O threads: `what` would wait for it.
  void refuse_on_io_thread(std::string_view what) const;

  const ClusterSpec cluster_;
  const std::string job_;
  const std::size_t task_index_;
  const ServerOptions options_;
  const std::uint64_t incarnation_;
  const std::string task_name_;
  // Null for plain TCP; checked (InvalidArgument) before anything listens.
  const std::shared_ptr<asio::ssl::context> tls_;

  // One lane per I/O thread; io_ (lane 0) also runs the listener, the timers and the work
  // posted without a connection.
  detail::IoLanes lanes_;
  // Each plain TCP connection reads on a thread of its own (connection.hpp); all joined by
  // shut_down(), after the connections closed.
  detail::ConnectionThreads connection_threads_;
  asio::io_context& io_;
  detail::Listener listener_;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  Device device_;
  detail::PeerCache peers_;
  std::unique_ptr<WorkerService> worker_;
  std::unique_ptr<detail::FrameDispatcher> dispatcher_;
  asio::steady_timer slow_steps_timer_{io_};       // ServerOptions::slow_step_warning
  const std::vector<std::string> training_tasks_;  // end_of_training.hpp, the chief first
  detail::EndOfTraining end_of_training_;
  asio::steady_timer orphan_timer_{io_};  // ServerOptions::orphan_timeout
  std::chrono::steady_clock::time_point last_worker_seen_ = std::chrono::steady_clock::now();

  mutable std::mutex mutex_;
  std::condition_variable stopped_cv_;
  bool stopped_ = false;
  std::set<std::shared_ptr<Connection>> connections_;  // every open connection
  struct Watch {
    std::mutex mutex;  // held while the callback runs, so stop_watching waits for it
    bool active = true;
    std::vector<std::string> tasks;
    PeerLost lost;
  };
  std::map<std::uint64_t, std::shared_ptr<Watch>> watches_;
  std::mutex destinations_mutex_;
  std::unordered_map<std::string, std::string> task_of_destination_;  // never erased: stable
  std::uint64_t next_watch_ = 1;
  // Each lane's thread stores its id at start (refuse_on_io_thread).
  std::unique_ptr<std::atomic<std::thread::id>[]> io_thread_ids_;
  std::once_flag shut_down_once_;
  std::atomic<std::thread::id> shut_down_by_{};  // the thread that ran shut_down()
};

namespace detail {

// A random nonzero number naming one run of a task's process.
std::uint64_t random_incarnation();

// `options`, unless it asks for no I/O thread (InvalidArgument).
ServerOptions checked_io_threads(ServerOptions options);

}  // namespace detail

// ---------------------------------------------------------------------------------------------

inline std::uint64_t detail::random_incarnation() {
  std::random_device rd;
  std::uint64_t v = 0;
  while (v == 0) v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return v;
}

inline ServerOptions detail::checked_io_threads(ServerOptions options) {
  if (options.io_threads == 0)
    throw InvalidArgument(
        "ServerOptions::io_threads is 0: a task needs at least one I/O thread (default 2)");
  return options;
}

inline std::shared_ptr<ServerCore> ServerCore::create(const ClusterSpec& cluster,
                                                      std::string_view job_name,
                                                      std::size_t task_index,
                                                      ServerOptions options) {
  std::shared_ptr<ServerCore> core(
      new ServerCore(cluster, job_name, task_index, std::move(options)), Release{});
  core->start_io_threads();  // only now: a step's callbacks may take ownership at once
  return core;
}

inline void ServerCore::Release::operator()(ServerCore* core) const noexcept {
  const std::thread::id by = core->shut_down_by_.load();
  if (by == std::thread::id{} || by == std::this_thread::get_id()) {
    delete core;
    return;
  }
  try {
    std::thread([core] { delete core; }).detach();
  } catch (...) {
    // No thread to be had: keeping the core is safe, deleting it here may not be.
    log_line("could not start a thread to delete a stopped server: its memory stays allocated");
  }
}

inline ServerCore::Registry& ServerCore::registry() {
  static Registry servers;
  return servers;
}

inline ServerCore::ServerCore(const ClusterSpec& cluster, std::string_view job_name,
                              std::size_t task_index, ServerOptions options)
    : cluster_(cluster),
      job_(job_name),
      task_index_(task_index),
      options_(detail::checked_io_threads(options)),
      incarnation_(detail::random_incarnation()),
      task_name_(detail::full_task_name(job_, task_index)),
      tls_(detail::make_tls_context(options_)),
      lanes_(options_.io_threads),
      io_(lanes_.main()),
      listener_(io_, cluster_.task_address(job_, task_index_), task_name_,
                options_.bind_address),  // throws NotFound
      device_(task_name_ + "/device:CPU:0"),
      peers_(
          io_, options_, task_name_, incarnation_,
          [this](const std::string& task) { return address_of(task); },
          [this](const std::shared_ptr<Connection>& c) { adopt(c); },
          [this](const std::string& line) { log(line); }, tls_,
          [this]() -> asio::io_context& { return lane_for_new_connection(); }),
      training_tasks_(detail::training_tasks(cluster_)) {
  detail::set_log_task(task_name_);  // the library's other log lines name this task
  device_.set_checkpoint_dir(options_.checkpoint_dir);
  if (options_.inter_op_threads == 0) {
    pool_ = &ThreadPool::shared();
  } else if (options_.inter_op_threads > 1) {
    own_pool_ = std::make_unique<ThreadPool>(options_.inter_op_threads);
    pool_ = own_pool_.get();
  }
  worker_ = std::make_unique<WorkerService>(
      device_, pool_,
      [this](const std::string& dst, std::uint64_t step, const std::string& key, Tensor value) {
        send_tensor(dst, step, key, std::move(value));
      });
  worker_->keep_alive_during_steps(
      [this]() -> std::shared_ptr<const void> { return weak_from_this().lock(); });
  if (options_.slow_step_warning.count() > 0) {
    worker_->track_activity();
    check_slow_steps();
  }
  dispatcher_ = std::make_unique<detail::FrameDispatcher>(
      io_, *worker_, peers_, task_name_, incarnation_, options_.explain,
      [this](const std::string& line) { log(line); }, [this] { stop(); },
      [this](const wire::WorkersDone& message) { return on_workers_done(message); });
  if (options_.orphan_timeout.count() > 0) check_orphaned();
  {
    std::lock_guard lock(registry().mutex);
    registry().servers[target()] = this;
  }
  listener_.start(
      [this](asio::ip::tcp::socket socket, std::string description) {
        // Only members get a Connection (cluster_auth.hpp); the handshake runs before any frame,
        // inside TLS when it is on (tls.hpp).
        if (tls_)
          return detail::admit_tls_member(
              std::move(socket), *tls_, options_.cluster_secret, options_.handshake_timeout,
              std::move(description), [this](const std::string& line) { log(line); },
              [this](std::shared_ptr<TlsStream> member, std::string peer) {
                adopt(std::make_shared<Connection>(std::move(member), options_.limits,
                                                   std::move(peer), options_.heartbeat_timeout));
              });
        detail::admit_member(
            std::move(socket), options_.cluster_secret, options_.handshake_timeout,
            std::move(description), [this](const std::string& line) { log(line); },
            [this](asio::ip::tcp::socket member, std::string peer) {
              adopt(std::make_shared<Connection>(std::move(member), options_.limits,
                                                 std::move(peer), options_.heartbeat_timeout));
            });
      },
      [this]() -> asio::io_context& { return lane_for_new_connection(); });
  io_thread_ids_ = std::make_unique<std::atomic<std::thread::id>[]>(options_.io_threads);
  live_instances().fetch_add(1);
}

inline void ServerCore::start_io_threads() {
  lanes_.start([this](std::size_t lane) {
    detail::mark_network_thread();  // expensive ops that become ready here go to the pool
    io_thread_ids_[lane].store(std::this_thread::get_id());
  });
  log("serving on " + detail::join_host_port(listener_.host(), std::to_string(listener_.port())) +
      (options_.bind_address.empty() ? "" : ", listening on " + options_.bind_address) +
      " (incarnation " + incarnation_string(incarnation_) +
      (options_.cluster_secret.empty() ? "" : "; members only: cluster secret set") +
      (tls_ ? "; mutual TLS" : "") + ")");
}

inline asio::io_context& ServerCore::lane_for_new_connection() {
  std::lock_guard lock(mutex_);
  std::vector<std::size_t> open(lanes_.size(), 0);
  for (const auto& connection : connections_) {
    const std::size_t lane = lanes_.lane_of(connection->strand().get_inner_executor());
    if (lane < open.size()) ++open[lane];
  }
  return lanes_.context(lanes_.pick(open));
}

inline ServerCore::~ServerCore() {
  shut_down();  // done already unless the core never had an owner
  live_instances().fetch_sub(1);
}

inline void ServerCore::shut_down() {
  std::call_once(shut_down_once_, [this] {
    {
      std::lock_guard lock(registry().mutex);
      registry().servers.erase(target());
    }
    stop();
    worker_->abort_all(Status(ErrorCode::aborted, "task " + task_name_ + " is shutting down"));
    lanes_.stop_and_join();
    // The closes stop() posted (and what they set off) may not have run yet: run them here,
    // the only thread running the lanes now, so the peers see the connections close at once.
    try {
      lanes_.drain();
    } catch (const std::exception& e) {
      log(std::string("while closing the connections: ") + e.what());
    }
    // The connections' own threads end as their sockets were shut down by the closes above.
    connection_threads_.join_all();
    shut_down_by_.store(std::this_thread::get_id());
  });
}

inline std::string ServerCore::target() const {
  return "psflow://" + detail::join_host_port(listener_.host(), std::to_string(listener_.port()));
}

inline void ServerCore::log(const std::string& line) const {
  if (options_.log) detail::log_line_as(task_name_, line);
}

inline ServerCore* ServerCore::find_local(std::string_view target) {
  std::lock_guard lock(registry().mutex);
  auto it = registry().servers.find(std::string(target));
  return it == registry().servers.end() ? nullptr : it->second;
}

inline std::vector<std::string> ServerCore::cluster_devices() const {
  std::vector<std::string> out;
  for (const auto& job : cluster_.jobs())
    for (std::size_t t = 0; t < cluster_.num_tasks(job); ++t)
      out.push_back(detail::full_task_name(job, t) + "/device:CPU:0");
  return out;
}

inline std::string ServerCore::address_of(const std::string& task) const {
  const DeviceSpec spec = DeviceSpec::parse(task);
  if (!spec.job || !spec.task) throw InvalidArgument("'" + task + "' does not name a task");
  return cluster_.task_address(*spec.job, static_cast<std::size_t>(*spec.task));
}

inline void ServerCore::refuse_on_io_thread(std::string_view what) const {
  const auto self = std::this_thread::get_id();
  bool mine = false;
  for (std::size_t i = 0; i < options_.io_threads && !mine; ++i)
    mine = io_thread_ids_[i].load() == self;
  mine = mine || connection_threads_.on_this_thread();
  if (!mine) return;
  throw Internal("Server::" + std::string(what) + " called on an I/O thread of " + task_name_ +
                 ": it would block a thread that serves connections, maybe the very one it "
                 "waits for; a callback must use connect_async or open_connection instead");
}

inline void ServerCore::join() {
  refuse_on_io_thread("join");
  std::unique_lock lock(mutex_);
  stopped_cv_.wait(lock, [this] { return stopped_; });
}

inline bool ServerCore::stopped() const {
  std::lock_guard lock(mutex_);
  return stopped_;
}

inline void ServerCore::check_slow_steps() {
  const std::chrono::milliseconds period = options_.slow_step_warning;
  slow_steps_timer_.expires_after(std::max(period / 4, std::chrono::milliseconds(10)));
  slow_steps_timer_.async_wait([this, period](const boost::system::error_code& error) {
    if (error) return;
    for (const std::string& line : worker_->report_slow_steps(period)) log(line);
    check_slow_steps();
  });
}

inline void ServerCore::stop() {
  std::set<std::shared_ptr<Connection>> connections;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    connections = connections_;
  }
  peers_.stop();
  listener_.close();
  for (auto& c : connections)
    c->close(Status(ErrorCode::aborted, "task " + task_name_ + " stopped"));
  stopped_cv_.notify_all();
  log("stopped");
}

inline void ServerCore::adopt(const std::shared_ptr<Connection>& connection) {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      connection->close(Status(ErrorCode::unavailable, "task " + task_name_ + " has stopped"));
      return;
    }
    connections_.insert(connection);
  }
  connection->start([this](const auto& c, wire::Frame f) { dispatcher_->handle(c, std::move(f)); },
                    [this](const auto& c, const Status& reason) { handle_close(c, reason); },
                    &connection_threads_);
}

inline void ServerCore::handle_close(const std::shared_ptr<Connection>& connection,
                                     const Status& reason) {
  {
    std::lock_guard lock(mutex_);
    connections_.erase(connection);
  }
  peers_.forget(connection);
  dispatcher_->connection_closed(connection, reason);
  const std::string task = connection->peer_task();
  if (task.empty()) return;  // it never said hello: no step used it
  // Steps here waiting for tensors from that task would wait forever.
  if (const std::size_t n = worker_->abort_steps_receiving_from(task, reason); n > 0)
    log("aborted " + std::to_string(n) + " step(s) receiving from " + task + ": " +
        reason.message());
  std::vector<std::shared_ptr<Watch>> watching;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, watch] : watches_)
      if (std::find(watch->tasks.begin(), watch->tasks.end(), task) != watch->tasks.end())
        watching.push_back(watch);
  }
  for (auto& watch : watching) {
    std::lock_guard lock(watch->mutex);
    if (watch->active) watch->lost(task, reason);
  }
}

inline std::uint64_t ServerCore::watch_peers(std::vector<std::string> tasks, PeerLost lost) {
  auto watch = std::make_shared<Watch>();
  watch->tasks = std::move(tasks);
  watch->lost = std::move(lost);
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_watch_++;
  watches_.emplace(id, std::move(watch));
  return id;
}

inline void ServerCore::stop_watching(std::uint64_t id) {
  std::shared_ptr<Watch> watch;
  {
    std::lock_guard lock(mutex_);
    auto it = watches_.find(id);
    if (it == watches_.end()) return;
    watch = std::move(it->second);
    watches_.erase(it);
  }
  std::lock_guard lock(watch->mutex);
  watch->active = false;
}

inline const std::string& ServerCore::task_of_destination(const std::string& device) {
  std::lock_guard lock(destinations_mutex_);
  auto it = task_of_destination_.find(device);
  if (it == task_of_destination_.end())
    it = task_of_destination_.emplace(device, detail::task_of_device(device)).first;
  return it->second;
}

inline void ServerCore::send_tensor(const std::string& dst_device, std::uint64_t step_id,
                                    const std::string& key, Tensor value) {
  const bool dead = value.empty();  // the untaken side of a cond (runtime/rendezvous.hpp)
  if (options_.explain)
    log("explain: step " + std::to_string(step_id) + ": sending " +
        (dead ? std::string("a dead value") : value.summary()) + " (" +
        std::to_string(value.nbytes()) + " bytes) to " + dst_device + " under key " + key);
  std::vector<Tensor> payload;
  if (!dead) payload.push_back(std::move(value));
  peers_.send(task_of_destination(dst_device),
              wire::make_frame(wire::MessageType::tensor, wire::TensorMessage{step_id, key},
                               std::move(payload)),
              // The receiver is unreachable; its step cannot complete, fail ours here too.
              [this, step_id](const Status& status) { worker_->abort_step(step_id, status); });
}

inline void ServerCore::connect_async(const std::string& task,
                                      std::function<void(Status, std::shared_ptr<Connection>)> done,
                                      std::chrono::milliseconds patience) {
  peers_.connect_async(task, std::move(done), patience);
}

inline std::shared_ptr<Connection> ServerCore::connect(const std::string& task) {
  refuse_on_io_thread("connect");
  std::promise<std::pair<Status, std::shared_ptr<Connection>>> promise;
  auto future = promise.get_future();
  peers_.connect_async(
      task,
      [&promise](Status s, std::shared_ptr<Connection> c) {
        promise.set_value({std::move(s), std::move(c)});
      },
      detail::ConnectDeadline::patience(options_.connect_timeout));
  // Bounded: connect_async gives up after connect_timeout, or at the ConnectDeadline in scope.
  auto [status, connection] = future.get();
  status.raise_if_error();
  return connection;
}

inline std::shared_ptr<Connection> ServerCore::open_connection(const std::string& task) {
  return peers_.open_connection(task);
}

inline std::uint64_t ServerCore::peer_incarnation(const std::string& task) {
  refuse_on_io_thread("peer_incarnation");
  if (task == task_name_) return incarnation_;
  connect(task);
  return peers_.incarnation(task);
}

inline void ServerCore::drop_connection(const std::string& task) { peers_.drop(task); }

inline wire::Frame ServerCore::call(const std::string& task, wire::Frame request,
                                    std::chrono::milliseconds timeout) {
  refuse_on_io_thread("call");
  auto connection = connect(task);
  std::promise<std::pair<Status, wire::Frame>> promise;
  auto future = promise.get_future();
  connection->call(
      std::move(request),
      [&promise](Status s, wire::Frame f) {
        promise.set_value({std::move(s), std::move(f)});
      },
      timeout);
  auto [status, reply] = future.get();  // bounded by `timeout` and by the connection closing
  status.raise_if_error();
  return std::move(reply);
}

inline std::string ServerCore::on_workers_done(const wire::WorkersDone& message) {
  end_of_training_.set_ends_itself();
  if (!message.done) return detail::finished_text(end_of_training_.finished());
  const std::vector<std::string> finished = end_of_training_.merge(message.finished);
  log(message.reporter + " finished training (" + std::to_string(finished.size()) + " of " +
      std::to_string(training_tasks_.size()) + " workers done)");
  return detail::finished_text(finished);
}

inline bool ServerCore::has_worker_connection() const {
  std::lock_guard lock(mutex_);
  for (const auto& connection : connections_)
    if (std::find(training_tasks_.begin(), training_tasks_.end(), connection->peer_task()) !=
        training_tasks_.end())
      return true;
  return false;
}

inline void ServerCore::check_orphaned() {
  const std::chrono::milliseconds limit = options_.orphan_timeout;
  orphan_timer_.expires_after(
      std::clamp(limit / 10, std::chrono::milliseconds(10), std::chrono::milliseconds(1000)));
  orphan_timer_.async_wait([this, limit](const boost::system::error_code& error) {
    if (error || stopped()) return;
    const auto now = std::chrono::steady_clock::now();
    if (!end_of_training_.ends_itself() || has_worker_connection()) {
      last_worker_seen_ = now;  // only this timer's chain touches it
    } else if (now - last_worker_seen_ >= limit) {
      log("no worker task has been connected for " + detail::duration_string(limit) +
          " (ServerOptions::orphan_timeout), and the workers said this cluster ends itself: the "
          "chief failed for good, or every worker is gone without finishing; stopping");
      return stop();
    }
    check_orphaned();
  });
}

inline void ServerCore::announce_end_of_training(std::chrono::milliseconds patience) {
  refuse_on_io_thread("announce_end_of_training");
  const std::vector<std::string> ps_tasks = detail::tasks_of_job(cluster_, "ps");
  const auto replies = detail::call_each(
      peers_, ps_tasks,
      wire::make_frame(wire::MessageType::workers_done, wire::WorkersDone{false, task_name_, {}}),
      patience, patience);
  for (std::size_t i = 0; i < ps_tasks.size(); ++i)
    if (!replies[i])
      log("could not tell " + ps_tasks[i] + " that this cluster ends itself within " +
          detail::duration_string(patience) + " (it may be restarting)");
}

inline bool ServerCore::report_done(std::chrono::milliseconds patience) {
  refuse_on_io_thread("report_done");
  std::vector<std::string> finished = end_of_training_.merge({task_name_});
  auto ask = [&](const std::vector<std::string>& tasks, std::chrono::milliseconds wait) {
    const auto replies =
        detail::call_each(peers_, tasks,
                          wire::make_frame(wire::MessageType::workers_done,
                                           wire::WorkersDone{true, task_name_, finished}),
                          wait, wait);
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (replies[i])
        finished = end_of_training_.merge(detail::parse_finished_text(replies[i]->text));
      else
        log("could not report this worker done to " + tasks[i] + " within " +
            detail::duration_string(wait));
    }
  };
  ask(detail::tasks_of_job(cluster_, "ps"), patience);
  // The chief holds the reports of the workers it heard from, should a ps have lost them; it
  // may well have exited already, so it gets little patience.
  if (!training_tasks_.empty() && training_tasks_.front() != task_name_)
    ask({training_tasks_.front()}, std::min(patience, std::chrono::milliseconds(2000)));
  if (!detail::covers(finished, training_tasks_)) {
    log("reported done: " + std::to_string(finished.size()) + " of " +
        std::to_string(training_tasks_.size()) +
        " workers are; the last to finish stops the ps tasks");
    return false;
  }
  const std::size_t ps_tasks = detail::tasks_of_job(cluster_, "ps").size();
  log("every worker is done (" + std::to_string(training_tasks_.size()) +
      "): stopping the ps tasks");
  const std::size_t stopped = ps_tasks == 0 ? 0 : stop_job("ps", std::chrono::seconds(5));
  if (stopped < ps_tasks)
    log("only " + std::to_string(stopped) + " of " + std::to_string(ps_tasks) +
        " ps tasks acknowledged the stop (the others may be gone already)");
  return true;
}

inline bool ServerCore::stop_task(std::string_view job, std::size_t task_index,
                                  std::chrono::milliseconds timeout) {
  refuse_on_io_thread("stop_task");
  const std::string task = detail::full_task_name(job, task_index);
  if (task == task_name_) {
    stop();
    return true;
  }
  address_of(task);  // NotFound for a task not in the cluster
  return detail::request_stop(peers_, task, task_name_, timeout);
}

inline std::size_t ServerCore::stop_job(std::string_view job, std::chrono::milliseconds timeout) {
  refuse_on_io_thread("stop_job");
  return detail::request_stop_job(peers_, cluster_, job, task_name_, timeout);
}

// ---------------------------------------------------------------------------------------------
// Server: every call goes to its core. Compiled where psflow's implementation is (a separately
// compiled program's other files may include this header too: for them these stay declarations).
#if PSFLOW_COMPILES_IMPLEMENTATION

PSFLOW_DECL Server::Server(const ClusterSpec& cluster, std::string_view job_name,
                           std::size_t task_index, ServerOptions options)
    : core_(ServerCore::create(cluster, job_name, task_index, std::move(options))) {}
// Steps still running here keep the core (and what they use) alive; the last one deletes it.
PSFLOW_DECL Server::~Server() { core_->shut_down(); }
PSFLOW_DECL std::string Server::target() const { return core_->target(); }
PSFLOW_DECL void Server::join() { core_->join(); }
PSFLOW_DECL void Server::stop() { core_->stop(); }
PSFLOW_DECL bool Server::stopped() const { return core_->stopped(); }
PSFLOW_DECL bool Server::stop_task(std::string_view job, std::size_t task_index,
                                   std::chrono::milliseconds timeout) {
  return core_->stop_task(job, task_index, timeout);
}
PSFLOW_DECL std::size_t Server::stop_job(std::string_view job, std::chrono::milliseconds timeout) {
  return core_->stop_job(job, timeout);
}
PSFLOW_DECL const ClusterSpec& Server::cluster() const noexcept { return core_->cluster(); }
PSFLOW_DECL const std::string& Server::job_name() const noexcept { return core_->job_name(); }
PSFLOW_DECL std::size_t Server::task_index() const noexcept { return core_->task_index(); }
PSFLOW_DECL std::uint64_t Server::incarnation() const noexcept { return core_->incarnation(); }
PSFLOW_DECL const std::string& Server::task_name() const noexcept { return core_->task_name(); }
PSFLOW_DECL const std::string& Server::device_name() const noexcept { return core_->device_name(); }
PSFLOW_DECL std::vector<std::string> Server::cluster_devices() const {
  return core_->cluster_devices();
}
PSFLOW_DECL const ServerOptions& Server::options() const noexcept { return core_->options(); }
#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow
