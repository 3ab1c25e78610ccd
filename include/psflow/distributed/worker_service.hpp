// WorkerService: what a task does for the masters that use it (TF's worker service).
//
// It keeps the graph partitions masters registered with it, runs one for a step on request,
// and keeps one rendezvous per step: tensors arriving from other tasks wait there for the
// partition's _Recv nodes, and the partition's _Send nodes to other tasks are routed out
// through `RemoteSend`. Tensors may arrive before the step starts here; a step is forgotten
// when its partition finishes, and state for steps that never start is swept after a while.
// When the connection to a task is lost, abort_steps_receiving_from fails the running steps
// whose partition waits for tensors from that task (they could never finish).
//
// Thread-safe; nothing blocks but the destructor. Partitions run on the calling thread and the
// thread pool; `done` callbacks run on whichever thread ends the step. The device and the pool
// belong to the caller: an owner that may go away while steps run (a Server) gives
// keep_alive_during_steps a hold on itself, so every running step keeps the owner (and so the
// device, the pool and this service) alive until its last callback returned.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "psflow/core/device_spec.hpp"
#include "psflow/graph/graph_def.hpp"
#include "psflow/runtime/executor.hpp"
#include "psflow/runtime/kernels.hpp"
#include "psflow/runtime/recent_ids.hpp"
#include "psflow/runtime/rendezvous.hpp"

namespace psflow {

namespace detail {

// The destination device of a rendezvous key "src;incarnation;dst;name;frame:iter" ("" when
// the key has fewer parts).
std::string rendezvous_key_destination(const std::string& key);
// The tasks ("/job:ps/replica:0/task:0") the _Recv nodes of partition `def` receive from.
std::set<std::string> partition_sources(const GraphDef& def);

}  // namespace detail

// One step's rendezvous on one task: local receives wait here; sends to other devices go out
// through `RemoteSend`. Thread-safe.
class StepRendezvous : public Rendezvous {
 public:
  using RemoteSend =
      std::function<void(const std::string& dst_device, const std::string& key, Tensor)>;
  StepRendezvous(std::string local_device, RemoteSend remote);

  Status send(const std::string& key, Tensor value) override;
  void recv_async(const std::string& key, RecvCallback done) override;
  // Fails the pending receives and cancels the step's waiting kernels (queues, accumulators).
  void abort(const Status& status) override;
  CancellationManager& cancellation() noexcept { return cancellation_; }
  // A tensor that arrived from another task.
  void deliver(const std::string& key, Tensor value);
  std::chrono::steady_clock::time_point created() const { return created_; }

 private:
  std::string local_device_;
  RemoteSend remote_;
  LocalRendezvous local_;
  CancellationManager cancellation_;
  std::chrono::steady_clock::time_point created_;
};

class WorkerService {
 public:
  using RemoteSend = std::function<void(const std::string& dst_device, std::uint64_t step_id,
                                        const std::string& key, Tensor)>;
  using RunDone = std::function<void(Status, std::vector<Tensor>)>;

  // Runs partitions on `device`, expensive ops on `pool`; tensors for other tasks go out
  // through `remote_send`. State of steps that never start is dropped after `orphan_ttl`.
  WorkerService(Device& device, ThreadPool* pool, RemoteSend remote_send,
                std::chrono::seconds orphan_ttl = std::chrono::seconds(600));
  // Aborts every step and waits until none is running (an aborted step ends: every wait of a
  // kernel is cancelled). An owner that keeps itself alive during steps never waits here.
  ~WorkerService();

  // Each step started from now on holds what `owner()` returns from its start until its last
  // callback returned, and lets it go last of all it holds.
  using Owner = std::function<std::shared_ptr<const void>()>;
  void keep_alive_during_steps(Owner owner) { owner_ = std::move(owner); }

  Device& device() noexcept { return device_; }

  // Imports and prepares a partition; returns its handle. Throws on a malformed graph.
  std::string register_graph(const GraphDef& def);
  // An executor over every node of `graph` on this task's device, with feeds and fetches given
  // by tensor names (for the master's own partition, which passes its session's stateful
  // kernels: Executor::Params::stateful_kernel).
  std::shared_ptr<Executor> make_executor(
      const Graph& graph, const std::vector<std::string>& feed_nodes,
      const std::vector<std::string>& fetch_tensors,
      decltype(Executor::Params::stateful_kernel) stateful_kernel = {});
  void deregister_graph(const std::string& handle);

  // Runs partition `handle` for step `step_id`; `done` gets the partition's status. With
  // `stats`, the step is traced into it (it must stay alive until `done`).
  void run_graph(const std::string& handle, std::uint64_t step_id, std::function<void(Status)> done,
                 StepStatsCollector* stats = nullptr);
  // Runs `executor` (made by make_executor) for step `step_id`, traced into `stats` if given.
  void run(std::shared_ptr<const Executor> executor, std::uint64_t step_id,
           std::vector<Tensor> feeds, RunDone done, StepStatsCollector* stats = nullptr);

  // A tensor from another task for step `step_id`.
  void deliver(std::uint64_t step_id, const std::string& key, Tensor value);
  // Fails the step's pending receives here (the step failed elsewhere).
  void abort_step(std::uint64_t step_id, const Status& status);
  // Fails every running step whose partition (registered with register_graph) receives tensors
  // from `task`, e.g. because the connection to it was lost; returns how many.
  std::size_t abort_steps_receiving_from(const std::string& task, const Status& status);
  // Aborts every step (they end on their own threads; this does not wait).
  void abort_all(const Status& status);

  std::size_t active_steps() const;

  // From now on, steps record which ops they run (StepActivity), for report_slow_steps.
  void track_activity() { tracking_.store(true, std::memory_order_relaxed); }
  // One line per step that has run here for `after` or longer and was not reported in the last
  // `after`: how long it has run and the ops it is computing or waiting in (a receive names the
  // task it waits for). Steps started before track_activity() say only how long they ran.
  std::vector<std::string> report_slow_steps(std::chrono::milliseconds after);

 private:
  using Sources = std::shared_ptr<const std::set<std::string>>;
  struct Registered {
    std::shared_ptr<Graph> graph;
    std::shared_ptr<Executor> executor;
    Sources sources;  // the tasks its _Recv nodes receive from
  };
  struct StepState {
    std::shared_ptr<StepRendezvous> rendezvous;
    bool started = false;
    Sources sources;  // of the partition running the step (null: not known)
    // Once started: since when, what it runs (with track_activity) and when it was last
    // reported as slow.
    std::chrono::steady_clock::time_point started_at{};
    std::chrono::steady_clock::time_point reported_at{};
    std::shared_ptr<const Executor> executor;
    std::shared_ptr<StepActivity> activity;
  };

  void run_partition(std::shared_ptr<const Executor> executor, std::uint64_t step_id,
                     std::vector<Tensor> feeds, RunDone done, StepStatsCollector* stats,
                     Sources sources);

  // The step's rendezvous, created on first use; null when the step already finished here
  // (a late tensor is dropped) or when `starting` a step that already started.
  std::shared_ptr<StepRendezvous> step_rendezvous(std::uint64_t step_id, bool starting);
  void finish_step(std::uint64_t step_id);
  // Drops state of steps that received tensors but never started (their master went away).
  void sweep_orphans();

  Device& device_;
  ThreadPool* pool_;
  RemoteSend remote_send_;
  std::chrono::seconds orphan_ttl_;
  Owner owner_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::atomic<int> running_{0};
  std::atomic<bool> tracking_{false};
  std::map<std::string, std::shared_ptr<Registered>> graphs_;
  std::uint64_t next_handle_ = 1;
  std::unordered_map<std::uint64_t, StepState> steps_;
  detail::RecentIds finished_{100000};  // steps finished here: late tensors for them are dropped
};

// ---------------------------------------------------------------------------------------------

inline std::string detail::rendezvous_key_destination(const std::string& key) {
  const auto a = key.find(';');
  const auto b = a == std::string::npos ? a : key.find(';', a + 1);
  const auto c = b == std::string::npos ? b : key.find(';', b + 1);
  if (c == std::string::npos) return {};
  return key.substr(b + 1, c - b - 1);
}

inline std::set<std::string> detail::partition_sources(const GraphDef& def) {
  std::set<std::string> tasks;
  for (const auto& node : def.nodes) {
    if (node.op != "_Recv") continue;
    auto it = node.attrs.find("send_device");
    const std::string* device =
        it == node.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
    if (!device) continue;
    DeviceSpec spec = DeviceSpec::parse(*device);
    spec.device_type.reset();
    spec.device_index.reset();
    tasks.insert(spec.to_string());
  }
  return tasks;
}

inline StepRendezvous::StepRendezvous(std::string local_device, RemoteSend remote)
    : local_device_(std::move(local_device)),
      remote_(std::move(remote)),
      created_(std::chrono::steady_clock::now()) {}

inline Status StepRendezvous::send(const std::string& key, Tensor value) {
  const std::string dst = detail::rendezvous_key_destination(key);
  if (dst == local_device_) return local_.send(key, std::move(value));
  if (local_.aborted()) return {ErrorCode::aborted, "step aborted"};
  remote_(dst, key, std::move(value));
  return {};
}

inline void StepRendezvous::recv_async(const std::string& key, RecvCallback done) {
  local_.recv_async(key, std::move(done));
}

inline void StepRendezvous::abort(const Status& status) {
  local_.abort(status);
  cancellation_.cancel(status);  // also wakes the step's waiting kernels (queues, accumulators)
}

inline void StepRendezvous::deliver(const std::string& key, Tensor value) {
  (void)local_.send(key, std::move(value));
}

inline WorkerService::WorkerService(Device& device, ThreadPool* pool, RemoteSend remote_send,
                                    std::chrono::seconds orphan_ttl)
    : device_(device), pool_(pool), remote_send_(std::move(remote_send)), orphan_ttl_(orphan_ttl) {}

inline WorkerService::~WorkerService() {
  abort_all(Status(ErrorCode::aborted, "the task is shutting down"));
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return running_.load() == 0; });
}

inline std::string WorkerService::register_graph(const GraphDef& def) {
  auto entry = std::make_shared<Registered>();
  entry->graph = std::make_shared<Graph>();
  import_graph_def(*entry->graph, def);
  for (const auto& node : def.nodes)
    if (!node.device.empty() && node.device != device_.name())
      throw InvalidArgument("partition node '" + node.name + "' is placed on " + node.device +
                            ", this task is " + device_.name());
  entry->executor = make_executor(*entry->graph, {}, {});
  entry->sources = std::make_shared<const std::set<std::string>>(detail::partition_sources(def));
  std::lock_guard lock(mutex_);
  const std::string handle = "graph-" + std::to_string(next_handle_++);
  graphs_[handle] = std::move(entry);
  return handle;
}

inline std::shared_ptr<Executor> WorkerService::make_executor(
    const Graph& graph, const std::vector<std::string>& feed_nodes,
    const std::vector<std::string>& fetch_tensors,
    decltype(Executor::Params::stateful_kernel) stateful_kernel) {
  Executor::Params params;
  params.graph = &graph;
  params.stateful_kernel = std::move(stateful_kernel);
  std::vector<char> fed(graph.num_nodes(), 0);
  for (const auto& f : feed_nodes) {
    const Output out = graph.operation(f).output(0);
    params.feeds.push_back(out.id());
    fed[static_cast<std::size_t>(out.op().id())] = 1;
  }
  for (std::size_t i = 0; i < graph.num_nodes(); ++i)
    if (!fed[i]) params.nodes.push_back(static_cast<int>(i));
  for (const auto& f : fetch_tensors) params.fetches.push_back(graph.tensor(f).id());
  params.device_for = [this](const detail::Node&) -> Device& { return device_; };
  return std::make_shared<Executor>(std::move(params));
}

inline void WorkerService::deregister_graph(const std::string& handle) {
  std::lock_guard lock(mutex_);
  graphs_.erase(handle);
}

inline void WorkerService::run_graph(const std::string& handle, std::uint64_t step_id,
                                     std::function<void(Status)> done, StepStatsCollector* stats) {
  std::shared_ptr<Registered> entry;
  {
    std::lock_guard lock(mutex_);
    if (auto it = graphs_.find(handle); it != graphs_.end()) entry = it->second;
  }
  if (!entry) {
    done(Status(ErrorCode::aborted, "partition " + handle + " is not registered on " +
                                        device_.name() +
                                        " (the task restarted?): re-create the session"));
    return;
  }
  run_partition(
      entry->executor, step_id, {},
      [entry, done = std::move(done)](Status s, std::vector<Tensor>) { done(std::move(s)); }, stats,
      entry->sources);
}

inline void WorkerService::run(std::shared_ptr<const Executor> executor, std::uint64_t step_id,
                               std::vector<Tensor> feeds, RunDone done, StepStatsCollector* stats) {
  run_partition(std::move(executor), step_id, std::move(feeds), std::move(done), stats, nullptr);
}

inline void WorkerService::run_partition(std::shared_ptr<const Executor> executor,
                                         std::uint64_t step_id, std::vector<Tensor> feeds,
                                         RunDone done, StepStatsCollector* stats, Sources sources) {
  auto rendezvous = step_rendezvous(step_id, /*starting=*/true);
  if (!rendezvous) {
    done(Status(ErrorCode::aborted,
                "step " + std::to_string(step_id) + " already ran on " + device_.name()),
         {});
    return;
  }
  std::shared_ptr<StepActivity> activity;
  if (tracking_.load(std::memory_order_relaxed))
    activity = std::make_shared<StepActivity>(executor->num_nodes());
  {
    std::lock_guard lock(mutex_);
    if (auto it = steps_.find(step_id); it != steps_.end()) {
      if (sources) it->second.sources = std::move(sources);
      it->second.started_at = std::chrono::steady_clock::now();
      it->second.reported_at = it->second.started_at;
      it->second.executor = executor;
      it->second.activity = activity;
    }
  }
  auto step = std::make_shared<StepContext>();
  step->step_id = step_id;
  step->rendezvous = rendezvous.get();
  step->cancellation = &rendezvous->cancellation();
  step->stats = stats;
  step->activity = activity.get();
  running_.fetch_add(1);
  executor->run_async(
      *step, std::move(feeds), pool_,
      [this, owner = owner_ ? owner_() : nullptr, executor, step, activity, rendezvous, step_id,
       done = std::move(done)](Status s, std::vector<Tensor> out) mutable {
        finish_step(step_id);
        done(std::move(s), std::move(out));
        // What the step held goes first (its reply's connection, its executor), while the owner
        // is sure to be alive; this thread touches nothing of the service after `owner`.
        done = nullptr;
        executor.reset();
        step.reset();
        activity.reset();
        rendezvous.reset();
        {
          std::lock_guard lock(mutex_);  // the destructor cannot return before this unlocks
          if (running_.fetch_sub(1) == 1) idle_.notify_all();
        }
        owner.reset();  // may be the last hold on the owner, and so on this service
      });
}

inline void WorkerService::deliver(std::uint64_t step_id, const std::string& key, Tensor value) {
  if (auto r = step_rendezvous(step_id, false)) r->deliver(key, std::move(value));
}

inline void WorkerService::abort_step(std::uint64_t step_id, const Status& status) {
  if (auto r = step_rendezvous(step_id, false)) r->abort(status);
}

inline std::size_t WorkerService::abort_steps_receiving_from(const std::string& task,
                                                             const Status& status) {
  std::vector<std::shared_ptr<StepRendezvous>> lost;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, s] : steps_)
      if (s.started && s.sources && s.sources->count(task)) lost.push_back(s.rendezvous);
  }
  for (auto& r : lost) r->abort(status);
  return lost.size();
}

inline void WorkerService::abort_all(const Status& status) {
  std::vector<std::shared_ptr<StepRendezvous>> all;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, s] : steps_) all.push_back(s.rendezvous);
  }
  for (auto& r : all) r->abort(status);
}

inline std::size_t WorkerService::active_steps() const {
  std::lock_guard lock(mutex_);
  return steps_.size();
}

inline std::vector<std::string> WorkerService::report_slow_steps(std::chrono::milliseconds after) {
  struct Slow {
    std::uint64_t step_id;
    std::chrono::steady_clock::duration age;
    std::shared_ptr<const Executor> executor;
    std::shared_ptr<StepActivity> activity;
  };
  std::vector<Slow> slow;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, s] : steps_) {
      if (!s.started || now - s.started_at < after || now - s.reported_at < after) continue;
      s.reported_at = now;
      slow.push_back({id, now - s.started_at, s.executor, s.activity});
    }
  }
  std::vector<std::string> lines;
  for (const Slow& s : slow) {
    char age[32];
    std::snprintf(age, sizeof age, "%.1f", std::chrono::duration<double>(s.age).count());
    std::string line = "step " + std::to_string(s.step_id) + " has run for " + age + " s here";
    if (s.activity && s.executor) {
      std::string ops;
      for (std::size_t op : s.activity->running())
        ops += (ops.empty() ? "" : "; ") + s.executor->describe_op(op);
      line += ops.empty() ? ", between ops (queued for a thread?)" : ", still in: " + ops;
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

inline std::shared_ptr<StepRendezvous> WorkerService::step_rendezvous(std::uint64_t step_id,
                                                                      bool starting) {
  std::lock_guard lock(mutex_);
  auto it = steps_.find(step_id);
  if (it == steps_.end()) {
    if (finished_.contains(step_id)) return nullptr;
    sweep_orphans();
    StepState state;
    state.rendezvous = std::make_shared<StepRendezvous>(
        device_.name(),
        [this, step_id](const std::string& dst, const std::string& key, Tensor value) {
          remote_send_(dst, step_id, key, std::move(value));
        });
    it = steps_.emplace(step_id, std::move(state)).first;
  }
  if (starting) {
    if (it->second.started) return nullptr;
    it->second.started = true;
  }
  return it->second.rendezvous;
}

inline void WorkerService::finish_step(std::uint64_t step_id) {
  std::lock_guard lock(mutex_);
  steps_.erase(step_id);
  finished_.add(step_id);
}

inline void WorkerService::sweep_orphans() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = steps_.begin(); it != steps_.end();) {
    if (!it->second.started && now - it->second.rendezvous->created() > orphan_ttl_)
      it = steps_.erase(it);
    else
      ++it;
  }
}

}  // namespace psflow
