// Executor: runs a fixed set of graph nodes as a dataflow, one step at a time.
//
// Built once per (graph, node set, feeds, fetches): kernels are created and the edges turned
// into flat arrays, so a step allocates only its own slots and counters. A node's output is
// released as soon as its last consumer has run (fetched outputs are kept), so memory is reused
// within a step and a variable update can often work in place. A node runs when its
// last input arrives; cheap successors run inline on the same thread, and when several
// expensive nodes become ready at once all but one go to the thread pool. The first kernel
// error aborts the step (no further nodes start, the rendezvous is aborted so no Recv waits)
// and is reported once every running node has finished, so no error can deadlock a step. A
// step cancelled from outside (StepContext::cancellation: a deadline, an abort from another
// task) stops the same way with the cancellation's reason.
// Control flow (ops::cond): a Switch passes its input to one output and makes the other dead.
// An op with a dead data input, or a control input from a dead op, is skipped and its outputs
// are dead in turn, unless its kernel handles dead inputs: a Merge forwards its live input,
// a _Send sends the deadness to the other task and the _Recv there yields it. So the untaken
// branch never runs, and every op of the step still finishes. An executor whose nodes cannot
// see a dead value (none is a Switch, a Merge or a _Recv) skips the check.
// When the step has a StepContext::stats collector, each op's start, end and thread go there
// (a traced step); otherwise the only cost is one pointer test per op. A StepContext::activity
// is told which ops run at each moment, in the same way.
//
// Thread-safe: several steps may run at once on one executor.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/runtime/cancellation.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/network_thread.hpp"
#include "psflow/runtime/rendezvous.hpp"
#include "psflow/runtime/step_activity.hpp"
#include "psflow/runtime/step_stats.hpp"
#include "psflow/runtime/thread_pool.hpp"

namespace psflow {

class Executor {
 public:
  struct Params {
    const Graph* graph = nullptr;
    std::vector<int> nodes;         // node ids to run (closed under inputs, except fed tensors)
    std::vector<TensorId> feeds;    // tensors supplied by the caller instead of computed
    std::vector<TensorId> fetches;  // tensors returned to the caller
    std::function<Device&(const detail::Node&)> device_for;
    // Kernels of stateful ops (variables, random generators) must be one per session, not one
    // per executor, so their state carries over between runs with different fetches. When
    // set, stateful kernels come from here: (node, create) -> the session's kernel.
    std::function<std::shared_ptr<OpKernel>(const detail::Node&,
                                            const std::function<std::shared_ptr<OpKernel>()>&)>
        stateful_kernel;
  };
  using DoneCallback = std::function<void(Status, std::vector<Tensor>)>;

  // Creates every kernel; throws (typed) when a node has no kernel or bad attributes.
  explicit Executor(Params params);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs one step and calls `done` exactly once with the status and the fetched tensors (in
  // Params::fetches order). `pool` may be null: everything then runs on the calling thread
  // (and on threads completing asynchronous kernels). `step` must outlive the call to done.
  // Nothing of the executor or the step is touched once `done` is called, so `done` may let go
  // of the last hold on either.
  void run_async(StepContext& step, std::vector<Tensor> feeds, ThreadPool* pool,
                 DoneCallback done) const;

  // Blocking form: returns the fetches or throws the step's typed error.
  std::vector<Tensor> run(StepContext& step, std::vector<Tensor> feeds, ThreadPool* pool) const {
    std::promise<std::pair<Status, std::vector<Tensor>>> result;
    auto future = result.get_future();
    run_async(step, std::move(feeds), pool, [&result](Status s, std::vector<Tensor> out) {
      result.set_value({std::move(s), std::move(out)});
    });
    auto [status, fetches] = future.get();
    status.raise_if_error();
    return std::move(fetches);
  }

  std::size_t num_nodes() const noexcept { return plan_.size(); }

  // The most tensor input bytes an expensive op may have to run on a network thread.
  static constexpr std::size_t kNetworkInlineBytes = 64 << 10;
  // Op `index` of the plan for a log line: "MatMul 'dense/MatMul'", and for a receive from
  // another task "_Recv '_recv_0' of w/read:0 from /job:ps/replica:0/task:0/device:CPU:0".
  std::string describe_op(std::size_t index) const;

 private:
  // Where an input comes from: slot index (>= 0) or feed index f encoded as -(f + 1).
  using Location = int;

  struct PlanNode {
    const detail::Node* node = nullptr;
    Device* device = nullptr;
    std::shared_ptr<OpKernel> kernel;
    AsyncOpKernel* async_kernel = nullptr;  // kernel, when it is asynchronous
    bool expensive = true;
    bool runs_long = false;
    bool handles_dead = false;  // the kernel runs even with a dead input
    std::vector<Location> inputs;
    std::vector<int> successors;  // one entry per edge (data or control) to a plan node
    int initial_pending = 0;
    int output_base = 0;  // slot of output 0
  };

  struct StepState;
  void process(StepState* s, std::vector<int> ready) const;
  // True when `p`, ready on this thread with `inputs`, must go to the pool: this is a network
  // thread and the op is not small (see the header comment).
  bool keep_off_this_thread(const StepState* s, const PlanNode& p,
                            const Entry* const* inputs) const;
  // Marks node `id` done: frees inputs nobody needs any more, and queues its successors that
  // became ready in `ready` or on the pool. Throws nothing once it changed a count, so a step
  // always ends.
  void finish_node(StepState* s, int id, std::vector<int>& ready) const;
  // Room in `ready` for every successor of `p`, so that scheduling them cannot fail half-way;
  // false (the step failed) when there is none.
  static bool make_room(StepState* s, std::vector<int>& ready, const PlanNode& p);
  void complete_step(StepState* s) const;
  static void record(StepStatsCollector& stats, const PlanNode& p, std::uint32_t thread,
                     std::int64_t start_ns);
  // True when a data input of node `id` is dead or one of its control inputs comes from a dead
  // op.
  bool has_dead_input(const StepState* s, int id) const;
  // Records whether node `id` is dead, once it ran with `inputs_dead`: a node with outputs is
  // dead when all of them are, one without (a _Send, a NoOp) when its inputs were.
  static void record_deadness(StepState* s, const PlanNode& p, int id, bool inputs_dead);

  Params params_;
  std::vector<PlanNode> plan_;
  std::vector<int> roots_;
  std::vector<Location> fetch_locations_;
  std::vector<int> slot_uses_;  // per slot: consumers, plus one per fetch (so never released)
  int num_slots_ = 0;
  bool tracks_dead_ = false;  // some node can see or make a dead value
  // Per plan node, when tracks_dead_: the plan nodes of its control inputs (a control input
  // from a dead op makes it dead). Kept out of PlanNode so that plain graphs' nodes stay small.
  std::vector<std::vector<int>> control_predecessors_;
};

// ---------------------------------------------------------------------------------------------

struct Executor::StepState {
  StepContext* step = nullptr;
  ThreadPool* pool = nullptr;
  std::vector<Entry> feeds;
  std::vector<Entry> slots;
  std::unique_ptr<std::atomic<int>[]> pending;
  std::unique_ptr<std::atomic<int>[]> uses;  // per slot: consumers that have not finished
  // When the executor tracks dead values: per slot, whether its value is dead, and per node,
  // whether it was dead. Written before the node's successors are counted down, so they read
  // them after their own count reached zero.
  std::unique_ptr<bool[]> slot_dead;
  std::unique_ptr<bool[]> node_dead;
  std::atomic<int> outstanding{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status status;
  DoneCallback done;

  const Entry& at(Location loc) const {
    return loc >= 0 ? slots[static_cast<std::size_t>(loc)]
                    : feeds[static_cast<std::size_t>(-loc - 1)];
  }
  bool dead_at(Location loc) const { return loc >= 0 && slot_dead[static_cast<std::size_t>(loc)]; }
  void record_error(const Status& error) {
    {
      std::lock_guard lock(error_mutex);
      if (!status.ok()) return;
      status = error;
    }
    failed.store(true, std::memory_order_release);
    if (step->rendezvous) step->rendezvous->abort(error);
    if (step->cancellation) step->cancellation->cancel(error);
  }
  // True once the step failed or was cancelled from outside (a deadline, an abort from another
  // task): no further op starts, and the cancellation's reason becomes the step's error.
  bool stopped() {
    if (failed.load(std::memory_order_acquire)) return true;
    if (!step->cancellation || !step->cancellation->cancelled()) return false;
    record_error(step->cancellation->status());
    return true;
  }
};

inline Executor::Executor(Params params) : params_(std::move(params)) {
  const Graph& graph = *params_.graph;
  std::vector<int> plan_index(graph.num_nodes(), -1);
  std::unordered_map<long long, int> feed_index;
  auto key = [](TensorId t) { return (static_cast<long long>(t.node) << 20) | t.index; };
  for (std::size_t f = 0; f < params_.feeds.size(); ++f)
    feed_index[key(params_.feeds[f])] = static_cast<int>(f);

  plan_.resize(params_.nodes.size());
  for (std::size_t i = 0; i < params_.nodes.size(); ++i) {
    const int id = params_.nodes[i];
    plan_index[static_cast<std::size_t>(id)] = static_cast<int>(i);
    PlanNode& p = plan_[i];
    p.node = &graph.node(id);
    p.output_base = num_slots_;
    num_slots_ += static_cast<int>(p.node->outputs.size());
  }

  auto locate = [&](TensorId t, const std::string& user) -> Location {
    if (auto it = feed_index.find(key(t)); it != feed_index.end()) return -(it->second + 1);
    const int src = plan_index[static_cast<std::size_t>(t.node)];
    if (src < 0)
      throw Internal("executor: '" + graph.node(t.node).name + "' feeds '" + user +
                     "' but is not among the nodes to run");
    return plan_[static_cast<std::size_t>(src)].output_base + t.index;
  };

  for (std::size_t i = 0; i < plan_.size(); ++i) {
    PlanNode& p = plan_[i];
    for (const TensorId& in : p.node->inputs) {
      p.inputs.push_back(locate(in, p.node->name));
      if (p.inputs.back() >= 0) {
        plan_[static_cast<std::size_t>(plan_index[static_cast<std::size_t>(in.node)])]
            .successors.push_back(static_cast<int>(i));
        ++p.initial_pending;
      }
    }
    for (int c : p.node->control_inputs) {
      const int src = plan_index[static_cast<std::size_t>(c)];
      if (src < 0) continue;  // a control input outside the run set (pruned away by a feed)
      plan_[static_cast<std::size_t>(src)].successors.push_back(static_cast<int>(i));
      ++p.initial_pending;
    }
  }
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    PlanNode& p = plan_[i];
    p.device = &params_.device_for(*p.node);
    try {
      auto create = [&]() -> std::shared_ptr<OpKernel> {
        return KernelRegistry::global().create(OpKernelConstruction(*p.node, *p.device, graph));
      };
      p.kernel = (p.node->def->stateful && params_.stateful_kernel)
                     ? params_.stateful_kernel(*p.node, create)
                     : create();
    } catch (const Error& e) {
      throw_error(e.code(), "cannot create kernel for " + p.node->type + " '" + p.node->name +
                                "' on " + p.device->name() + ": " + e.message());
    }
    p.async_kernel = dynamic_cast<AsyncOpKernel*>(p.kernel.get());
    p.expensive = p.kernel->is_expensive();
    p.runs_long = p.kernel->runs_long();
    p.handles_dead = p.kernel->handles_dead_inputs();
    tracks_dead_ = tracks_dead_ || p.handles_dead || p.kernel->makes_dead_outputs();
    if (p.initial_pending == 0) roots_.push_back(static_cast<int>(i));
  }
  if (tracks_dead_) {
    control_predecessors_.resize(plan_.size());
    for (std::size_t i = 0; i < plan_.size(); ++i)
      for (int c : plan_[i].node->control_inputs)
        if (const int src = plan_index[static_cast<std::size_t>(c)]; src >= 0)
          control_predecessors_[i].push_back(src);
  }
  for (const TensorId& f : params_.fetches) fetch_locations_.push_back(locate(f, "the fetch list"));
  slot_uses_.assign(static_cast<std::size_t>(num_slots_), 0);
  for (const PlanNode& p : plan_)
    for (Location in : p.inputs)
      if (in >= 0) ++slot_uses_[static_cast<std::size_t>(in)];
  for (Location f : fetch_locations_)
    if (f >= 0) ++slot_uses_[static_cast<std::size_t>(f)];
}

inline void Executor::run_async(StepContext& step, std::vector<Tensor> feeds, ThreadPool* pool,
                                DoneCallback done) const {
  if (feeds.size() != params_.feeds.size())
    throw Internal("executor: " + std::to_string(feeds.size()) + " feeds given, " +
                   std::to_string(params_.feeds.size()) + " expected");
  auto* s = new StepState;
  s->step = &step;
  s->pool = pool;
  s->done = std::move(done);
  s->feeds.resize(feeds.size());
  for (std::size_t i = 0; i < feeds.size(); ++i) s->feeds[i].tensor = std::move(feeds[i]);
  s->slots.resize(static_cast<std::size_t>(num_slots_));
  s->pending.reset(new std::atomic<int>[plan_.size()]);
  for (std::size_t i = 0; i < plan_.size(); ++i)
    s->pending[i].store(plan_[i].initial_pending, std::memory_order_relaxed);
  s->uses.reset(new std::atomic<int>[slot_uses_.size()]);
  for (std::size_t i = 0; i < slot_uses_.size(); ++i)
    s->uses[i].store(slot_uses_[i], std::memory_order_relaxed);
  if (tracks_dead_) {
    s->slot_dead.reset(new bool[static_cast<std::size_t>(num_slots_)]());
    s->node_dead.reset(new bool[plan_.size()]());
  }
  if (plan_.empty()) {
    complete_step(s);
    return;
  }
  s->outstanding.store(static_cast<int>(roots_.size()), std::memory_order_relaxed);
  process(s, roots_);
}

inline void Executor::process(StepState* s, std::vector<int> ready) const {
  while (!ready.empty()) {
    const int id = ready.back();
    ready.pop_back();
    const PlanNode& p = plan_[static_cast<std::size_t>(id)];
    if (!s->stopped()) {
      try {
        // Gather input pointers: small graphs keep them on the stack.
        const Entry* stack_inputs[8];
        std::vector<const Entry*> heap_inputs;
        const Entry** inputs = stack_inputs;
        if (p.inputs.size() > 8) {
          heap_inputs.resize(p.inputs.size());
          inputs = heap_inputs.data();
        }
        for (std::size_t i = 0; i < p.inputs.size(); ++i) inputs[i] = &s->at(p.inputs[i]);
        DeadValues dead;
        std::unique_ptr<bool[]> input_dead;  // only for a kernel that sees a dead input
        if (tracks_dead_) {
          dead.any_input = has_dead_input(s, id);
          dead.outputs = s->slot_dead.get() + p.output_base;
          if (dead.any_input && !p.handles_dead) {  // on the untaken side of a Switch: skipped
            std::fill_n(dead.outputs, p.node->outputs.size(), true);
            s->node_dead[static_cast<std::size_t>(id)] = true;
            finish_node(s, id, ready);
            continue;
          }
          if (dead.any_input) {
            input_dead.reset(new bool[p.inputs.size()]);
            for (std::size_t i = 0; i < p.inputs.size(); ++i)
              input_dead[i] = s->dead_at(p.inputs[i]);
            dead.inputs = input_dead.get();
          }
        }
        if (keep_off_this_thread(s, p, inputs)) {
          s->pool->submit([this, s, id] { process(s, {id}); });
          continue;
        }
        Entry* outputs = s->slots.data() + p.output_base;

        if (p.async_kernel) {
          // The context must live until the kernel calls back; inputs are copied for the same
          // reason.
          struct AsyncCall {
            std::vector<const Entry*> inputs;
            std::unique_ptr<bool[]> input_dead;
            std::unique_ptr<OpKernelContext> ctx;
          };
          auto call = std::make_shared<AsyncCall>();
          call->inputs.assign(inputs, inputs + p.inputs.size());
          call->input_dead = std::move(input_dead);
          call->ctx = std::make_unique<OpKernelContext>(*p.node, *p.device, *s->step,
                                                        call->inputs.data(), outputs, dead);
          StepStatsCollector* const stats = s->step->stats;
          StepActivity* const activity = s->step->activity;
          const std::uint32_t thread = stats ? trace_thread_id() : 0;
          const std::int64_t start_ns = stats ? trace_clock_ns() : 0;
          if (activity) activity->started(static_cast<std::size_t>(id));
          try {
            p.async_kernel->compute_async(
                *call->ctx, [this, s, id, call, stats, activity, thread, start_ns](Status status) {
                  const PlanNode& node = plan_[static_cast<std::size_t>(id)];
                  if (tracks_dead_) record_deadness(s, node, id, call->ctx->inputs_dead());
                  if (stats) record(*stats, node, thread, start_ns);
                  if (activity) activity->ended(static_cast<std::size_t>(id));
                  if (!status.ok())
                    s->record_error(status.with_context(node.node->type + " '" + node.node->name +
                                                        "' on " + node.device->name()));
                  std::vector<int> next;
                  finish_node(s, id, next);
                  process(s, std::move(next));
                });
          } catch (...) {
            if (activity) activity->ended(static_cast<std::size_t>(id));
            s->record_error(Status::from_current_exception().with_context(
                p.node->type + " '" + p.node->name + "' on " + p.device->name()));
            finish_node(s, id, ready);
          }
          continue;
        }

        StepStatsCollector* const stats = s->step->stats;
        StepActivity* const activity = s->step->activity;
        const std::int64_t start_ns = stats ? trace_clock_ns() : 0;
        if (activity) activity->started(static_cast<std::size_t>(id));
        try {
          OpKernelContext ctx(*p.node, *p.device, *s->step, inputs, outputs, dead);
          p.kernel->compute(ctx);
          if (tracks_dead_) record_deadness(s, p, id, dead.any_input);
        } catch (...) {
          s->record_error(Status::from_current_exception().with_context(
              p.node->type + " '" + p.node->name + "' on " + p.device->name()));
        }
        if (activity) activity->ended(static_cast<std::size_t>(id));
        if (stats) record(*stats, p, trace_thread_id(), start_ns);
      } catch (...) {
        // Something around the kernel failed (an allocation, a hand-off): the step fails
        // typed, and the node still counts as done so the step ends.
        s->record_error(Status::from_current_exception().with_context(
            "running " + p.node->type + " '" + p.node->name + "' on " + p.device->name()));
      }
    }
    finish_node(s, id, ready);
  }
}

inline void Executor::finish_node(StepState* s, int id, std::vector<int>& ready) const {
  const PlanNode& p = plan_[static_cast<std::size_t>(id)];
  for (Location in : p.inputs) {
    if (in < 0) continue;
    if (s->uses[static_cast<std::size_t>(in)].fetch_sub(1, std::memory_order_acq_rel) == 1)
      s->slots[static_cast<std::size_t>(in)] = Entry{};  // its last consumer is done
  }
  if (!s->failed.load(std::memory_order_acquire) && make_room(s, ready, p)) {
    bool kept_expensive = false;
    for (int succ : p.successors) {
      if (s->pending[static_cast<std::size_t>(succ)].fetch_sub(1, std::memory_order_acq_rel) != 1)
        continue;
      s->outstanding.fetch_add(1, std::memory_order_relaxed);
      const PlanNode& next = plan_[static_cast<std::size_t>(succ)];
      if (!next.expensive || !s->pool || (!kept_expensive && ready.empty())) {
        kept_expensive = kept_expensive || next.expensive;
        ready.push_back(succ);
      } else {
        try {
          s->pool->submit([this, s, succ] { process(s, {succ}); });
        } catch (...) {  // the pool could not take it: run it here (make_room made room)
          ready.push_back(succ);
        }
      }
    }
  }
  if (s->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) complete_step(s);
}

inline bool Executor::make_room(StepState* s, std::vector<int>& ready, const PlanNode& p) {
  try {
    ready.reserve(ready.size() + p.successors.size());
    return true;
  } catch (...) {
    s->record_error(Status::from_current_exception().with_context(
        "scheduling the ops after " + p.node->type + " '" + p.node->name + "'"));
    return false;
  }
}

inline bool Executor::has_dead_input(const StepState* s, int id) const {
  for (Location in : plan_[static_cast<std::size_t>(id)].inputs)
    if (s->dead_at(in)) return true;
  for (int c : control_predecessors_[static_cast<std::size_t>(id)])
    if (s->node_dead[static_cast<std::size_t>(c)]) return true;
  return false;
}

inline void Executor::record_deadness(StepState* s, const PlanNode& p, int id, bool inputs_dead) {
  const bool* outputs_dead = s->slot_dead.get() + p.output_base;
  bool dead = p.node->outputs.empty() ? inputs_dead : true;
  for (std::size_t k = 0; k < p.node->outputs.size(); ++k) dead = dead && outputs_dead[k];
  s->node_dead[static_cast<std::size_t>(id)] = dead;
}

inline bool Executor::keep_off_this_thread(const StepState* s, const PlanNode& p,
                                           const Entry* const* inputs) const {
  if (!p.expensive || !s->pool || !detail::on_network_thread()) return false;
  if (p.runs_long) return true;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < p.inputs.size(); ++i)
    if (!inputs[i]->ref) bytes += inputs[i]->tensor.nbytes();
  return bytes > kNetworkInlineBytes;
}

inline std::string Executor::describe_op(std::size_t index) const {
  const detail::Node& node = *plan_.at(index).node;
  std::string text = node.type + " '" + node.name + "'";
  if (node.type != "_Recv") return text;
  auto attr = [&](const char* name) -> std::string {
    auto it = node.attrs.find(name);
    const auto* value = it == node.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
    return value ? *value : std::string();
  };
  if (const std::string tensor = attr("tensor_name"); !tensor.empty()) text += " of " + tensor;
  if (const std::string from = attr("send_device");
      !from.empty() && from != plan_[index].device->name())
    text += " from " + from;
  return text;
}

inline void Executor::record(StepStatsCollector& stats, const PlanNode& p, std::uint32_t thread,
                             std::int64_t start_ns) {
  stats.record_node(NodeExecStats{p.node->name, p.node->type, thread, p.async_kernel != nullptr,
                                  start_ns, trace_clock_ns()});
}

inline void Executor::complete_step(StepState* s) const {
  std::unique_ptr<StepState> owned(s);
  std::vector<Tensor> fetches;
  Status status = s->status;
  if (status.ok()) {
    try {
      fetches.reserve(fetch_locations_.size());
      for (std::size_t f = 0; f < fetch_locations_.size(); ++f) {
        const Entry& e = s->at(fetch_locations_[f]);
        if (tracks_dead_ && s->dead_at(fetch_locations_[f])) {
          const TensorId& t = params_.fetches[f];
          throw InvalidArgument("the fetched tensor '" + params_.graph->node(t.node).name + ":" +
                                std::to_string(t.index) +
                                "' has no value in this step: it is on the side of a cond that "
                                "was not taken (fetch the cond's output instead)");
        }
        fetches.push_back(e.ref ? e.ref->read() : e.tensor);
      }
    } catch (...) {
      status = Status::from_current_exception();
      fetches.clear();
    }
  }
  auto done = std::move(s->done);
  owned.reset();  // release step memory before the caller continues
  done(std::move(status), std::move(fetches));
}

}  // namespace psflow
