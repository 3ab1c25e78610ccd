// SyncReplicasOptimizer: synchronous data-parallel training, TF1's tf.train.SyncReplicasOptimizer.
//
// Each replica pushes its gradients into one accumulator per variable (on that variable's ps),
// tagged with its local step; a gradient computed at an older global step is stale, dropped
// and counted. Then the replica waits for a token. The chief runs a background loop: take the
// average of `replicas_to_aggregate` gradients from every accumulator, apply the wrapped
// optimizer once (incrementing global_step exactly once), then hand out one token per replica
// (`total_num_replicas`, at least replicas_to_aggregate). With more replicas than gradients to
// aggregate, the extra ones are backups: the slowest gradient of each step is dropped and a dead
// replica does not stop training.
//
// An IndexedSlices gradient (an embedding table's) goes to a sparse accumulator: the replicas
// push only their rows, the chief takes the touched rows averaged over the gradients, and the
// wrapped optimizer applies them with its sparse kernel, so nothing table-sized is built. A
// dynamic embedding table's gradient is keyed by id and aggregated the same way.
//
// Beyond TF: when the chief's session ends (StopAtStepHook, an error, close()) the hook closes the
// token queue and the accumulators, so replicas waiting for a token are released with
// OutOfRange, which MonitoredTrainingSession turns into should_stop(): no process is left
// blocked. A replica waits at most `token_timeout_ms` for a token (DeadlineExceeded naming the
// chief). The first step needs max(0, replicas_to_aggregate - total_num_replicas) initial tokens
// (TF's default of replicas_to_aggregate lets a fast replica push twice before the first
// update; with the minimum, every step aggregates exactly one gradient per token).
//
// A chief that restarts (its process died, or it resumes from a checkpoint) finds replicas still
// waiting for tokens its predecessor would have handed out, and their gradients discarded (the
// accumulators move to the restored global step). With TF they wait until they time out; here
// the new chief, when the global step is past 0, gives each waiting replica a token for the
// current step, and they compute a fresh gradient.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "psflow/graph/sync_ops.hpp"
#include "psflow/train/hooks.hpp"
#include "psflow/train/optimizer.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <atomic>
#include <cstdio>
#include <thread>

#include "psflow/core/log.hpp"
#endif

namespace psflow::train {

struct SyncReplicasOptions {
  std::int64_t token_timeout_ms = 300000;  // how long a replica waits for the chief's token
};

class SyncReplicasOptimizer {
 public:
  PSFLOW_DECL SyncReplicasOptimizer(Optimizer& optimizer, int replicas_to_aggregate,
                                    int total_num_replicas = 0, SyncReplicasOptions options = {});
  PSFLOW_DECL GradsAndVars compute_gradients(Output loss,
                                             const std::vector<Variable>& var_list = {});
  PSFLOW_DECL Operation minimize(Output loss, Variable global_step);

  // Builds the replica's train op (push gradients, wait for a token) and the chief's ops.
  // Call once per graph.
  PSFLOW_DECL Operation apply_gradients(const GradsAndVars& grads_and_vars, Variable global_step);

  // The hook that makes it work: every replica initializes its local step; the chief also opens
  // the accumulators and the token queue, puts in the initial tokens and runs the aggregation
  // loop in a background thread, and at the end closes everything, releasing waiting replicas.
  PSFLOW_DECL std::shared_ptr<SessionRunHook> make_session_run_hook(bool is_chief);

  int replicas_to_aggregate() const noexcept { return replicas_to_aggregate_; }
  int total_num_replicas() const noexcept { return total_num_replicas_; }
  PSFLOW_DECL int tokens_per_step() const noexcept;
  // Stale gradients dropped so far, summed over the accumulators.
  Output num_dropped() const { return num_dropped_; }
  Output token_queue_size() const { return queue_size_; }
  Operation sync_op() const { return sync_op_; }
  Operation chief_init_op() const { return chief_init_; }
  Operation init_tokens_op() const { return init_tokens_; }
  Operation local_init_op() const { return local_init_; }
  // Chief, after init: a token for the current global step to every replica waiting now; the
  // outputs are that number and the global step.
  std::vector<Output> release_waiters() const { return {release_waiters_, global_step_value_}; }
  Operation close_op() const { return close_; }

 private:
  static constexpr const char* kQueue = "sync_token_q";
  PSFLOW_DECL static Output tokens_of(Graph& g, Output step, int count);

  Optimizer& optimizer_;
  int replicas_to_aggregate_;
  int total_num_replicas_;
  SyncReplicasOptions options_;
  bool built_ = false;
  Output local_step_, local_step_value_;
  std::vector<ops::AccumulatorSpec> accumulators_;
  Output num_dropped_, queue_size_, release_waiters_, global_step_value_;
  Operation train_op_, sync_op_, chief_init_, init_tokens_, local_init_, close_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

class SyncReplicasHook : public SessionRunHook {
 public:
  SyncReplicasHook(const SyncReplicasOptimizer& optimizer, bool is_chief)
      : optimizer_(optimizer), is_chief_(is_chief) {}
  ~SyncReplicasHook() override { join_runner(); }

  void begin(Graph&) override {
    if (!optimizer_.sync_op().valid())
      throw FailedPrecondition(
          "call SyncReplicasOptimizer::apply_gradients (or minimize) before making its hook");
  }

  void after_create_session(Session& sess) override {
    join_runner();  // a runner of a previous session ends with that session's failure
    sess.run(optimizer_.local_init_op());
    if (!is_chief_) return;
    sess.run(optimizer_.chief_init_op());
    sess.run(optimizer_.init_tokens_op());
    release_previous_chiefs_waiters(sess);
    stop_ = false;
    runner_ = std::thread([this, &sess] { aggregate_loop(sess); });
  }

  void end(Session& sess) override {
    if (!is_chief_) return;
    stop_ = true;
    try {
      sess.run(optimizer_.close_op());  // releases the runner and every waiting replica
    } catch (const Error& e) {
      log_line(std::string("SyncReplicas: could not close the token queue: ") + e.what());
    }
    join_runner();
    failure_.raise_if_error();  // an aggregation that failed for good ends training with its error
  }

 private:
  void aggregate_loop(Session& sess) {
    while (!stop_) {
      try {
        sess.run(optimizer_.sync_op());
      } catch (const OutOfRange&) {
        return;  // closed: training ended
      } catch (const Error& e) {
        if (stop_) return;
        log_line(std::string("SyncReplicas: the chief's aggregation stopped: ") + e.what());
        // A lost ps (Unavailable/Aborted) also fails the chief's own run, and
        // MonitoredTrainingSession recovers and restarts this loop. Anything else will not heal:
        // release every waiting replica now (they stop with OutOfRange) and report the error when
        // the session ends.
        if (e.code() != ErrorCode::unavailable && e.code() != ErrorCode::aborted) {
          failure_ = Status(e.code(), e.message());
          try {
            sess.run(optimizer_.close_op());
          } catch (const Error&) {
          }
        }
        return;
      }
    }
  }
  // At global step 0 nobody can be waiting for an earlier chief; later, replicas may be.
  void release_previous_chiefs_waiters(Session& sess) {
    const auto step = sess.run({optimizer_.release_waiters()[1]})[0].scalar<std::int64_t>();
    if (step == 0) return;
    const auto released = sess.run({optimizer_.release_waiters()[0]})[0].scalar<std::int64_t>();
    if (released > 0)
      log_line("SyncReplicas: released " + std::to_string(released) +
               " replica(s) waiting for a previous chief's token; they continue at global step " +
               std::to_string(step));
  }
  void join_runner() {
    if (runner_.joinable()) runner_.join();
  }

  const SyncReplicasOptimizer& optimizer_;
  bool is_chief_;
  std::atomic<bool> stop_{false};
  Status failure_;  // written by the runner before it exits, read after joining it
  std::thread runner_;
};

}  // namespace detail

std::shared_ptr<SessionRunHook> SyncReplicasOptimizer::make_session_run_hook(bool is_chief) {
  return std::make_shared<detail::SyncReplicasHook>(*this, is_chief);
}

SyncReplicasOptimizer::SyncReplicasOptimizer(Optimizer& optimizer, int replicas_to_aggregate,
                                             int total_num_replicas, SyncReplicasOptions options)
    : optimizer_(optimizer),
      replicas_to_aggregate_(replicas_to_aggregate),
      total_num_replicas_(total_num_replicas > 0 ? total_num_replicas : replicas_to_aggregate),
      options_(options) {
  if (replicas_to_aggregate_ < 1)
    throw InvalidArgument("SyncReplicasOptimizer: replicas_to_aggregate must be >= 1");
}

GradsAndVars SyncReplicasOptimizer::compute_gradients(Output loss,
                                                      const std::vector<Variable>& var_list) {
  return optimizer_.compute_gradients(loss, var_list);
}

Operation SyncReplicasOptimizer::minimize(Output loss, Variable global_step) {
  return apply_gradients(compute_gradients(loss), global_step);
}

Operation SyncReplicasOptimizer::apply_gradients(const GradsAndVars& grads_and_vars,
                                                 Variable global_step) {
  if (!global_step.valid()) throw InvalidArgument("SyncReplicasOptimizer needs the global step");
  if (built_) throw FailedPrecondition("SyncReplicasOptimizer::apply_gradients may be called once");
  built_ = true;
  Graph& g = global_step.graph();
  auto scope = g.name_scope("sync_replicas");

  // The local step lives on this replica's own device: anchor it to a NoOp placed there.
  Operation anchor = ops::no_op(g, "local_anchor");
  {
    auto colocated = g.colocate_with(anchor);
    local_step_ = ops::variable(g, {}, DType::int64, "sync_rep_local_step");
    local_init_ =
        ops::assign(local_step_, ops::identity(global_step.value()), true, "local_step_init").op();
    local_step_value_ =
        ops::identity(local_step_, "local_step_value");  // read here, sent as a value
  }

  std::vector<Operation> pushes;
  GradsAndVars aggregated;
  std::vector<Operation> chief_init;
  for (const auto& [grad, var] : grads_and_vars) {
    if (!grad.valid()) continue;
    auto colocated = g.colocate_with(var.op());
    const auto slices = as_indexed_slices(grad);
    // A dynamic table's rows are keyed by any int64 id: no row count to check them against.
    const PartialShape shape =
        psflow::detail::is_dynamic_table(var)
            ? PartialShape::of({-1, static_cast<std::int64_t>(var.shape()[1])})
            : PartialShape::of_shape(var.shape());
    ops::AccumulatorSpec acc{var.name() + "/grad_accum", var.dtype(), shape, slices.has_value()};
    accumulators_.push_back(acc);
    if (slices) {  // only the rows travel and are summed (TF's SparseConditionalAccumulator)
      pushes.push_back(ops::sparse_accumulator_apply_gradient(acc, slices->indices, slices->values,
                                                              local_step_value_)
                           .op());
      aggregated.emplace_back(ops::sparse_accumulator_take_gradient(g, acc, replicas_to_aggregate_),
                              var);
    } else {
      pushes.push_back(ops::accumulator_apply_gradient(acc, grad, local_step_value_).op());
      aggregated.emplace_back(ops::accumulator_take_gradient(g, acc, replicas_to_aggregate_), var);
    }
    chief_init.push_back(ops::accumulator_set_closed(g, acc, false));
    chief_init.push_back(ops::accumulator_set_global_step(acc, global_step.value()));
    num_dropped_ = num_dropped_.valid() ? num_dropped_ + ops::accumulator_num_dropped(g, acc)
                                        : ops::accumulator_num_dropped(g, acc);
  }
  if (pushes.empty()) throw InvalidArgument("SyncReplicasOptimizer: no variable has a gradient");

  Operation update = optimizer_.apply_gradients(aggregated, global_step);
  {
    auto colocated = g.colocate_with(global_step.op());
    Output token;
    {
      auto after_push = g.control_dependencies(pushes);
      token = ops::token_queue_dequeue(g, kQueue, options_.token_timeout_ms, "sync_token_dequeue");
    }
    {
      auto after_update = g.control_dependencies({update});
      // Read through the reference: "global_step/read" may have run before the update.
      Output step_now = ops::identity(global_step.ref(), "global_step_after_update");
      sync_op_ = ops::token_queue_enqueue_many(tokens_of(g, step_now, tokens_per_step()), kQueue,
                                               "sync_op");
    }
    chief_init.push_back(ops::token_queue_set_closed(g, kQueue, false));
    chief_init_ = ops::group(chief_init, "chief_init");
    const int initial = std::max(0, replicas_to_aggregate_ - total_num_replicas_);
    init_tokens_ = initial > 0 ? ops::token_queue_enqueue_many(
                                     tokens_of(g, ops::identity(global_step.value()), initial),
                                     kQueue, "init_tokens")
                               : ops::no_op(g, "init_tokens");
    std::vector<Operation> closing;
    for (const auto& acc : accumulators_)
      closing.push_back(ops::accumulator_set_closed(g, acc, true));
    closing.push_back(ops::token_queue_set_closed(g, kQueue, true));
    close_ = ops::group(closing, "close");
    queue_size_ = ops::token_queue_size(g, kQueue);
    global_step_value_ = ops::identity(global_step.value(), "global_step_at_init");
    release_waiters_ =
        ops::token_queue_release_waiters(global_step_value_, kQueue, "release_waiters");
    train_op_ = ops::assign(local_step_, token, true, "update_local_step").op();
  }
  return train_op_;
}

int SyncReplicasOptimizer::tokens_per_step() const noexcept {
  return std::max(total_num_replicas_, replicas_to_aggregate_);
}

Output SyncReplicasOptimizer::tokens_of(Graph& g, Output step, int count) {
  return ops::zeros(g, DType::int64, {static_cast<std::size_t>(count)}) + step;
}
#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
