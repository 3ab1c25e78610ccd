// MasterSession: a Session whose graph spans the cluster (TF's master). It lives in the
// process of the Server named by the session's target, so the client -> master hop is a
// function call. For each new (feeds, fetches, targets) signature it prunes the graph, places
// it, partitions it per task and registers each remote partition with its task once; each run
// then uses a fresh random step id, starts every partition at once (the remote ones with one
// run_graph request each) and waits for all. The first error anywhere aborts the step on every
// task, so no task is left waiting, and reaches the caller typed, naming the task.
//
// Only the tasks the graph uses are contacted. RunOptions::timeout_in_ms bounds a step: at the
// deadline it fails DeadlineExceeded and is aborted on every task like any other failure.
//
// A traced run (RunOptions::trace) asks every partition for its statistics: remote tasks
// return theirs in the run_graph reply with their own receive and reply times, from which the
// clock offset of each task is estimated NTP-style and its times moved to this process's clock.
//
// Contract: run() blocks the calling thread (a user thread) until every partition of the step
// ended (watching for the end briefly before it sleeps, while that pays: step_end_watch.hpp);
// it is thread-safe, concurrent runs being separate steps. The failure path runs on
// whichever thread saw the error first, often one of the server's I/O threads, so it never blocks
// and never connects: it aborts the step over the connections open now. The session holds
// references to the graph and the Server, which must outlive it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/distributed/server_core.hpp"
#include "psflow/graph/subgraph.hpp"
#include "psflow/runtime/one_shot_event.hpp"
#include "psflow/runtime/partition.hpp"
#include "psflow/runtime/placer.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/runtime/step_deadline.hpp"
#include "psflow/runtime/step_end_watch.hpp"

namespace psflow {

namespace detail {

class MasterSession : public SessionImpl {
 public:
  MasterSession(Graph& graph, ServerCore& server);
  ~MasterSession() override;

  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets) override;
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets, const RunOptions& options,
                          RunMetadata* metadata) override;
  std::optional<PartitionPlan> describe(const std::vector<Output>& fetches, const FeedMap& feeds,
                                        const std::vector<Operation>& targets) override;
  // Deregisters the partitions registered so far (best effort).
  void close() override;

 private:
  struct RemotePartition {
    std::string task;
    std::string handle;
    std::uint64_t incarnation = 0;
  };
  struct StepPlan {
    PartitionPlan partition;
    std::vector<RemotePartition> remotes;
    std::shared_ptr<Graph> local_graph;
    std::shared_ptr<Executor> local_executor;
  };

  // The plan of a (fetches, feeds, targets) signature: made, and registered with its tasks,
  // on first use (blocking: talks to other tasks).
  std::shared_ptr<StepPlan> plan_for(const std::vector<Output>& fetches, const FeedMap& feeds,
                                     const std::vector<Operation>& targets);
  // One step: every partition at once; the first error aborts it everywhere and is thrown.
  // With `metadata`, the step is traced on every task and the statistics gathered there.
  std::vector<Tensor> run_step(const StepPlan& plan, std::vector<Tensor> feeds,
                               const RunOptions& options, RunMetadata* metadata);
  // Best effort, over connections that are open now: a task we are not connected to has
  // stopped or restarted (its registered graphs went with the old process), and reconnecting
  // would hold a closing session for the whole connect timeout.
  void deregister(const StepPlan& plan);
  void forget_plans();
  // Records the first incarnation this session saw of `task`; throws Aborted when `task` now
  // reports another one (it restarted: its variables are new and uninitialized). Under mutex_.
  void check_incarnation(const std::string& task, std::uint64_t incarnation);

  Graph& graph_;
  ServerCore& server_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<StepPlan>> plans_;
  // Kept when plans are forgotten: a session never silently moves to a restarted task.
  std::map<std::string, std::uint64_t> incarnations_;
  // The Iterator kernels of this task's partitions, one per node for the whole session (an
  // iterator's pass carries over between runs with different fetches); let go at close().
  std::mutex stateful_kernels_mutex_;
  std::map<std::string, std::shared_ptr<OpKernel>> stateful_kernels_;
  std::mutex rng_mutex_;
  std::mt19937_64 rng_;
  StepEndWatch end_watch_;
};

// ---------------------------------------------------------------------------------------------

inline MasterSession::MasterSession(Graph& graph, ServerCore& server)
    : graph_(graph), server_(server), rng_(std::random_device{}()) {}

inline MasterSession::~MasterSession() { close(); }

inline std::vector<Tensor> MasterSession::run(const std::vector<Output>& fetches,
                                              const FeedMap& feeds,
                                              const std::vector<Operation>& targets) {
  return run(fetches, feeds, targets, RunOptions{}, nullptr);
}

inline std::vector<Tensor> MasterSession::run(const std::vector<Output>& fetches,
                                              const FeedMap& feeds,
                                              const std::vector<Operation>& targets,
                                              const RunOptions& options, RunMetadata* metadata) {
  validate_run_arguments(graph_, fetches, feeds, targets);
  std::shared_ptr<StepPlan> plan = plan_for(fetches, feeds, targets);
  std::vector<Tensor> feed_values;
  for (const auto& [out, value] : feeds) feed_values.push_back(value);
  if (metadata) metadata->clear();
  try {
    return caller_owned(
        run_step(*plan, std::move(feed_values), options, options.trace ? metadata : nullptr));
  } catch (const Error& e) {
    // A task that restarted or went away invalidates what we registered: register again next
    // time.
    if (e.code() == ErrorCode::aborted || e.code() == ErrorCode::unavailable) forget_plans();
    throw;
  }
}

inline std::optional<PartitionPlan> MasterSession::describe(const std::vector<Output>& fetches,
                                                            const FeedMap& feeds,
                                                            const std::vector<Operation>& targets) {
  validate_run_arguments(graph_, fetches, feeds, targets);
  return plan_for(fetches, feeds, targets)->partition;
}

inline void MasterSession::close() {
  std::vector<std::shared_ptr<StepPlan>> plans;
  {
    std::lock_guard lock(mutex_);
    for (auto& [key, plan] : plans_) plans.push_back(plan);
    plans_.clear();
  }
  for (auto& plan : plans) deregister(*plan);
  std::map<std::string, std::shared_ptr<OpKernel>> kernels;
  {
    std::lock_guard lock(stateful_kernels_mutex_);
    kernels.swap(stateful_kernels_);
  }  // destroyed here, outside the lock: an iterator's threads end with its kernel
}

inline std::shared_ptr<MasterSession::StepPlan> MasterSession::plan_for(
    const std::vector<Output>& fetches, const FeedMap& feeds,
    const std::vector<Operation>& targets) {
  const std::string key = run_signature(fetches, feeds, targets);
  std::lock_guard lock(mutex_);  // one plan at a time: registering talks to other tasks
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;

  std::vector<TensorId> fetch_ids, feed_ids;
  std::vector<int> target_ids;
  for (const auto& f : fetches) fetch_ids.push_back(f.id());
  for (const auto& [out, value] : feeds) feed_ids.push_back(out.id());
  for (const auto& t : targets) target_ids.push_back(t.id());
  std::vector<int> nodes = needed_nodes(graph_, fetch_ids, target_ids, feed_ids);
  check_placeholders_fed(graph_, nodes);
  std::vector<std::string> assigned =
      place_nodes(graph_, nodes, server_.cluster_devices(), server_.device_name());

  auto plan = std::make_shared<StepPlan>();
  plan->partition = partition_graph(graph_, nodes, assigned, feed_ids, fetch_ids,
                                    server_.device_name(), [this](const std::string& device) {
                                      const std::string task = task_of_device(device);
                                      const std::uint64_t incarnation =
                                          server_.peer_incarnation(task);
                                      check_incarnation(task, incarnation);
                                      return incarnation;
                                    });
  for (const auto& [device, def] : plan->partition.graphs) {
    if (device == server_.device_name()) {
      plan->local_graph = std::make_shared<Graph>();
      import_graph_def(*plan->local_graph, def);
      plan->local_executor = server_.worker().make_executor(
          *plan->local_graph, plan->partition.feed_nodes, plan->partition.fetch_tensors,
          [this](const detail::Node& node, const auto& create) -> std::shared_ptr<OpKernel> {
            // Only an iterator's state must span the plans: other stateful kernels (a
            // partition's _Send and _Recv, named per plan) stay the plan's own.
            if (node.type != "Iterator") return create();
            std::lock_guard kernels_lock(stateful_kernels_mutex_);
            auto& kernel = stateful_kernels_[node.name];
            if (!kernel) kernel = create();
            return kernel;
          });
      continue;
    }
    RemotePartition remote;
    remote.task = task_of_device(device);
    wire::Frame reply = server_.call(
        remote.task, wire::make_frame(wire::MessageType::register_graph, wire::RegisterGraph{def}),
        server_.options().rpc_timeout);
    auto r = wire::decode<wire::Reply>(reply.metadata, "register_graph reply");
    r.status().raise_if_error();
    check_incarnation(remote.task, r.incarnation);
    remote.handle = r.text;
    remote.incarnation = r.incarnation;
    plan->remotes.push_back(std::move(remote));
  }
  plans_.emplace(key, plan);
  return plan;
}

inline std::vector<Tensor> MasterSession::run_step(const StepPlan& plan, std::vector<Tensor> feeds,
                                                   const RunOptions& options,
                                                   RunMetadata* metadata) {
  struct Join {
    std::mutex mutex;
    std::size_t remaining = 0;
    OneShotEvent ended;  // remaining reached 0; set after the mutex is released
    Status first_error;
    std::vector<Tensor> fetches;
    std::vector<bool> finished;         // per remote
    std::vector<TaskStepStats> traces;  // per remote, in a traced step (corrected clocks)
    StepStatsCollector local_stats;
  };
  auto join = std::make_shared<Join>();
  join->remaining = plan.remotes.size() + 1;
  join->finished.assign(plan.remotes.size(), false);
  const bool trace = metadata != nullptr;
  if (trace) join->traces.resize(plan.remotes.size());
  std::uint64_t step_id;
  {
    std::lock_guard lock(rng_mutex_);
    step_id = rng_() | 1;
  }

  // First error: remember it and abort the step on every task still running it. This runs on
  // whichever thread saw the error: an I/O thread for a failed reply or a dropped connection,
  // so it must not block. It uses only connections open now, never connects: a remote without
  // one either lost it (that task aborts the steps of a closed connection itself) or was not
  // sent the step yet (the loop below checks for a first error before sending).
  auto fail = [this, join, step_id, &plan](const Status& error) {
    {
      std::lock_guard lock(join->mutex);
      if (!join->first_error.ok()) return;
      join->first_error = error;
    }
    server_.worker().abort_step(step_id, error);
    for (std::size_t i = 0; i < plan.remotes.size(); ++i) {
      {
        std::lock_guard lock(join->mutex);
        if (join->finished[i]) continue;
      }
      if (auto c = server_.open_connection(plan.remotes[i].task))
        c->send(
            wire::make_frame(wire::MessageType::abort_step,
                             wire::AbortStep{step_id, static_cast<std::int32_t>(ErrorCode::aborted),
                                             error.message()}));
    }
  };
  // RunOptions::timeout_in_ms: the deadline fails the step like any first error, so it is
  // aborted on every task. Destroyed before this function returns (waiting for a cancellation
  // in progress), so `fail` may reference the plan and this session.
  const StepDeadline deadline(options.timeout_in_ms, fail);
  // A remote that does not answer the abort (stuck in a long op) is not waited for long past
  // the deadline: its request's own deadline ends it just after.
  std::chrono::milliseconds call_timeout = server_.options().step_timeout;
  if (deadline.bounded()) {
    const auto bound = deadline.remaining() + std::chrono::milliseconds(200);
    if (call_timeout.count() == 0 || bound < call_timeout) call_timeout = bound;
  }
  // The last one ends the step. `ended` is set after the unlock: a caller that saw it while
  // this thread still held the mutex would sleep on the mutex and need a second wake-up, which
  // on a busy machine can cost a scheduler tick.
  auto finish_one = [join] {
    {
      std::lock_guard lock(join->mutex);
      if (--join->remaining != 0) return;
    }
    join->ended.set();
  };
  // Marks remote i done without a reply (never sent, or the step failed before).
  auto skip = [join, finish_one](std::size_t i) {
    {
      std::lock_guard lock(join->mutex);
      join->finished[i] = true;
    }
    finish_one();
  };

  // A connection to any task of the step that closes fails the step, also when that task
  // already answered: tensors it sent to the others may have been lost with it, and a task it
  // stopped answering (declared dead by the heartbeats) must not hold the step.
  struct Unwatch {
    ServerCore& server;
    std::uint64_t id;
    ~Unwatch() { server.stop_watching(id); }
  };
  std::vector<std::string> tasks;
  for (const auto& remote : plan.remotes) tasks.push_back(remote.task);
  const Unwatch watch{
      server_,
      server_.watch_peers(std::move(tasks), [fail](const std::string& task, const Status& reason) {
        fail(Status(ErrorCode::unavailable, reason.message()).with_context("on " + task));
      })};

  // The requests and what the local partition sends at once leave together, one write per
  // task (its first expensive kernel, if it comes first, sends them: held_output.hpp).
  std::optional<Connection::HeldWrites> step_start(std::in_place);
  for (std::size_t i = 0; i < plan.remotes.size(); ++i) {
    const RemotePartition& remote = plan.remotes[i];
    std::shared_ptr<Connection> connection;
    try {
      connection = server_.open_connection(remote.task);
      if (!connection) {
        // Connecting may take up to connect_timeout: what is held for the tasks before must not
        // wait that long, nor their heartbeats, which queue behind a held write.
        step_start->release();
        connection = server_.connect(remote.task);
      }
    } catch (const Error& e) {
      fail(Status(e.code(), e.message()));
      skip(i);
      continue;
    }
    bool failed_already;
    {
      // After connect: from here on, a failure finds this connection open and aborts the step
      // on this task even if it fails before the request below is sent.
      std::lock_guard lock(join->mutex);
      failed_already = !join->first_error.ok();
    }
    if (failed_already) {
      skip(i);
      continue;
    }
    const std::int64_t sent_ns = trace ? trace_clock_ns() : 0;
    connection->call(
        wire::make_frame(wire::MessageType::run_graph,
                         wire::RunGraph{remote.handle, step_id, remote.incarnation, trace}),
        [join, i, task = remote.task, fail, finish_one, sent_ns](Status status, wire::Frame reply) {
          const std::int64_t received_ns = sent_ns ? trace_clock_ns() : 0;
          if (status.ok()) {
            try {
              auto r = wire::decode<wire::Reply>(reply.metadata, "run_graph reply");
              status = r.status();
              if (sent_ns && !r.trace.empty()) {
                auto t = wire::decode<wire::RunGraphTrace>(r.trace, "run_graph trace");
                correct_clock(t.stats, estimate_clock_offset_ns(sent_ns, t.request_received_ns,
                                                                t.reply_sent_ns, received_ns));
                std::lock_guard lock(join->mutex);
                join->traces[i] = std::move(t.stats);
              }
            } catch (const Error& e) {
              status = Status(e.code(), e.message());
            }
          }
          {
            std::lock_guard lock(join->mutex);
            join->finished[i] = true;
          }
          if (!status.ok()) fail(status.with_context("on " + task));
          finish_one();
        },
        call_timeout);
  }

  server_.worker().run(
      plan.local_executor, step_id, std::move(feeds),
      [this, join, fail, finish_one](Status status, std::vector<Tensor> fetches) {
        if (!status.ok()) {
          fail(status.with_context("on " + server_.task_name()));
        } else {
          std::lock_guard lock(join->mutex);
          join->fetches = std::move(fetches);
        }
        finish_one();
      },
      trace ? &join->local_stats : nullptr);
  step_start.reset();

  const auto wait_start = StepEndWatch::Clock::now();
  end_watch_.watch(join->ended);
  // Bounded: remote calls end by reply, deadline or a dropped connection; the local partition
  // ends once its receives are satisfied or aborted.
  join->ended.wait();
  end_watch_.learn(StepEndWatch::Clock::now() - wait_start);
  std::unique_lock lock(join->mutex);
  if (trace) {
    metadata->tasks.push_back(
        join->local_stats.take(server_.task_name(), server_.worker().device().name()));
    for (auto& t : join->traces)
      if (!t.task.empty()) metadata->tasks.push_back(std::move(t));
    join_transfers(*metadata);
    refine_clock_offsets(*metadata);
  }
  join->first_error.raise_if_error();
  return std::move(join->fetches);
}

inline void MasterSession::deregister(const StepPlan& plan) {
  for (const auto& remote : plan.remotes) {
    try {
      if (auto connection = server_.open_connection(remote.task))
        connection->send(
            wire::make_frame(wire::MessageType::deregister_graph, wire::Handle{remote.handle}));
    } catch (const Error&) {
    }
  }
}

inline void MasterSession::forget_plans() {
  std::lock_guard lock(mutex_);
  plans_.clear();
}

inline void MasterSession::check_incarnation(const std::string& task, std::uint64_t incarnation) {
  auto [it, first_seen] = incarnations_.try_emplace(task, incarnation);
  if (first_seen || it->second == incarnation) return;
  throw Aborted("task " + task + " restarted since this session first used it (incarnation " +
                incarnation_string(it->second) + ", now " + incarnation_string(incarnation) +
                "): its state is new, so this session's runs fail; create a new Session "
                "(MonitoredTrainingSession does so by itself)");
}

PSFLOW_REGISTERED_AT_STARTUP const bool master_session_registered = register_session_factory(
    "psflow://",
    [](Graph& graph, std::string_view target,
       const SessionOptions&) -> std::unique_ptr<SessionImpl> {
      ServerCore* server = ServerCore::find_local(target);
      if (!server)
        throw InvalidArgument("no Server in this process serves '" + std::string(target) +
                              "': the master runs inside a task's own process, so create "
                              "psflow::Server(cluster, job, task) here and pass its target()");
      return std::make_unique<MasterSession>(graph, *server);
    });

}  // namespace detail

}  // namespace psflow
