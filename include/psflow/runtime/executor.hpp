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
// Loops (ops::while_loop): a plan with an Enter runs in frames (runtime/loop_plan.hpp). Each
// iteration of a loop keeps its own inputs and counts, an Enter starts the loop's frame (a
// constant Enter's value reaches every iteration), a NextIteration starts the next iteration,
// at most parallel_iterations at once (the rest wait for the oldest to finish), a dead
// NextIteration ends the loop, and an Exit passes its value out. A Merge runs as soon as one
// live input came (or every input came dead). Frames and iterations are counted under one lock
// per step; kernels run outside it. A plan without loops never takes this path.
// A loop whose frame holds no nested loop and no asynchronous or long-running op runs inline
// instead: once all its Enters came, one thread runs its iterations one after the other, its
// ops in a fixed order with their values in one reused array, without a lock or a count per op
// (an iteration of TF1's loop is eight small ops, so this is most of what a loop costs): the
// frame's InlineFrame table (runtime/inline_frame.hpp), made with the plan, says where each
// op's inputs are and where its outputs go, and which control ops stand for their kernels. Its
// Exits' values are then passed on under the lock, as one op's would be.
// When the step has a StepContext::stats collector, each op's start, end and thread go there
// (a traced step); otherwise the only cost is one pointer test per op. A StepContext::activity
// is told which ops run at each moment, in the same way.
//
// Thread-safe: several steps may run at once on one executor.
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/container/small_vector.hpp>
#include <condition_variable>
#include <cstring>
#include <deque>
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
#include "psflow/runtime/held_output.hpp"
#include "psflow/runtime/inline_frame.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/loop_plan.hpp"
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
  struct StepErrors;
  struct LoopStep;
  struct FrameState;
  struct IterationState;
  // An op made ready in one iteration of one frame.
  struct TaggedNode {
    int id;
    FrameState* frame;
    std::int64_t iter;
    IterationState* state;  // frame's iteration iter, kept while the op is outstanding
    bool dead;              // a dead input came
  };
  void process(StepState* s, std::vector<int> ready) const;
  // The plan's loops: build the frames' plan (constructor), run a step, run ready ops, and
  // pass a finished op's outputs on (under the step's lock).
  void plan_loops(const std::vector<int>& plan_index);
  void run_loop_step(StepContext& step, std::vector<Tensor> feeds, ThreadPool* pool,
                     DoneCallback done) const;
  void process_loops(LoopStep* s, std::vector<TaggedNode> ready) const;
  // Points `inputs` at node t's inputs and reads which are dead, for its kernel's context.
  DeadValues loop_node_inputs(LoopStep* s, const TaggedNode& t, const Entry** inputs,
                              bool* outputs_dead, bool* input_dead) const;
  void run_async_loop_node(LoopStep* s, const TaggedNode& t, std::vector<TaggedNode>& ready) const;
  // An inline frame (see the header comment): TaggedNode::id kRunFrame asks for one to run,
  // once every Enter came. run_inline_frame runs its iterations and returns its Exits' values
  // (in LoopPlan::Frame::exits order); finish_inline_frame passes them on, under the lock.
  static constexpr int kRunFrame = -1;
  InlineFrame plan_inline_frame(int frame) const;
  // Lets values skip the forwarding ops that need not hold them (InlineFrame::Action::alias).
  void alias_forwarding_ops(InlineFrame& table) const;
  void run_inline_frame(LoopStep* s, FrameState* frame, std::vector<Entry>& exit_values,
                        std::vector<std::uint8_t>& exit_dead) const;
  // An op of an inline frame without its kernel call, when its InlineFrame::Action allows
  // (false: call the kernel). `own` is its own input slots, `inputs` where it reads them; it
  // points sources[o] at where output o's value is, and clears bit o of `movable` when that
  // value is not its to move.
  static bool run_without_kernel(const InlineFrame::Op& op, const InlineFrame& table, Entry* own,
                                 const Entry* const* inputs, const bool* inputs_dead,
                                 Entry** sources, std::uint64_t& movable, bool* outputs_dead);
  void finish_inline_frame(LoopStep* s, FrameState* frame, std::vector<Entry>& exit_values,
                           const std::vector<std::uint8_t>& exit_dead,
                           std::vector<TaggedNode>& ready) const;
  // The inputs of `p` a kernel may move from: in a loop's frames each input slot is its own,
  // all but feeds (shared by every op that takes them).
  static std::uint64_t movable_inputs(const PlanNode& p) {
    std::uint64_t mask = 0;
    for (std::size_t k = 0; k < p.inputs.size() && k < 64; ++k)
      if (p.inputs[k] >= 0) mask |= std::uint64_t{1} << k;
    return mask;
  }
  // Passes on the outputs of a finished op when `pass_on` (not when the step stopped or the op
  // failed; `outputs` may be null when all are dead), frees its inputs, and ends its
  // iteration, frame and step when they are done.
  void finish_loop_node(LoopStep* s, const TaggedNode& t, Entry* outputs, const bool* outputs_dead,
                        bool pass_on, std::vector<TaggedNode>& ready) const;
  void propagate(LoopStep* s, const TaggedNode& t, Entry* outputs, const bool* outputs_dead,
                 std::vector<TaggedNode>& ready) const;
  // Gives node src's outputs to its successors in one iteration, moving each output into its
  // last consumer when `movable`, and makes ready those that have all they wait for.
  void deliver(LoopStep* s, FrameState* frame, std::int64_t iter, int src, Entry* outputs,
               bool movable, const bool* outputs_dead, bool node_dead,
               std::vector<TaggedNode>& ready) const;
  std::unique_ptr<IterationState> make_iteration(int frame) const;
  void new_iteration(LoopStep* s, FrameState* frame, std::vector<TaggedNode>& ready) const;
  FrameState* child_frame(FrameState* parent, std::int64_t iter, int frame) const;
  void clean_up_iterations(LoopStep* s, FrameState* frame, std::vector<TaggedNode>& ready) const;
  // A loop's run that finished leaves its parent frame (it is freed), whose iteration may then
  // be done in turn.
  void close_frame(LoopStep* s, FrameState* frame, std::vector<TaggedNode>& ready) const;
  void record_fetches(LoopStep* s, int id, const Entry* outputs, const bool* outputs_dead) const;
  void complete_loop_step(LoopStep* s) const;
  // Fetch f of a finished step: `e`'s tensor, or InvalidArgument when it is dead.
  Tensor fetched_value(std::size_t f, const Entry& e, bool dead) const;
  // Runs node `id`'s synchronous kernel on this thread, marking its activity and recording
  // its trace; `movable`: the inputs it may move from (OpKernelContext::allow_moving_inputs).
  // False when the kernel threw: the error is recorded in `s` (the step stops).
  bool call_kernel(StepErrors* s, int id, const Entry* const* inputs, Entry* outputs,
                   DeadValues dead, std::uint64_t movable) const;
  // True when `p`, ready on this thread with `inputs`, must go to the pool: this is a network
  // thread and the op is not small (see the header comment).
  bool keep_off_this_thread(const StepErrors* s, const PlanNode& p,
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
  std::unique_ptr<LoopPlan> loops_;         // when the plan holds a while_loop
  std::vector<InlineFrame> inline_frames_;  // per frame of loops_: its table, when it runs inline
  std::vector<std::vector<std::pair<int, int>>> loop_fetches_;  // plan node: (output, fetch)
};

// ---------------------------------------------------------------------------------------------

// What every step has, with or without loops: its context, its feeds, and its first error.
struct Executor::StepErrors {
  StepContext* step = nullptr;
  ThreadPool* pool = nullptr;
  std::vector<Entry> feeds;
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status status;
  DoneCallback done;

  const Entry& at_feed(Location loc) const { return feeds[static_cast<std::size_t>(-loc - 1)]; }
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

struct Executor::StepState : StepErrors {
  std::vector<Entry> slots;
  std::unique_ptr<std::atomic<int>[]> pending;
  std::unique_ptr<std::atomic<int>[]> uses;  // per slot: consumers that have not finished
  // When the executor tracks dead values: per slot, whether its value is dead, and per node,
  // whether it was dead. Written before the node's successors are counted down, so they read
  // them after their own count reached zero.
  std::unique_ptr<bool[]> slot_dead;
  std::unique_ptr<bool[]> node_dead;
  std::atomic<int> outstanding{0};

  const Entry& at(Location loc) const {
    return loc >= 0 ? slots[static_cast<std::size_t>(loc)] : at_feed(loc);
  }
  bool dead_at(Location loc) const { return loc >= 0 && slot_dead[static_cast<std::size_t>(loc)]; }
};

// One iteration of a frame: the values its ops take (per input) and its ops' counts.
struct Executor::IterationState {
  struct Counts {
    int pending = 0;       // edges still to come (a Merge: control edges)
    int dead_inputs = 0;   // data inputs that came dead (a Merge's count; else only > 0 matters)
    bool live = false;     // a Merge: a live input came
    bool started = false;  // a Merge: it was made ready
  };
  std::unique_ptr<Entry[]> inputs;
  std::unique_ptr<std::uint8_t[]> input_state;  // per input: 0 not come, 1 live, 2 dead
  std::unique_ptr<Counts[]> counts;             // per op of the frame
  int outstanding_ops = 0;                      // ready or running
  int outstanding_frames = 0;                   // loops started in this iteration, not done
};

// One run of a frame: the step's root frame, or one execution of a loop.
struct Executor::FrameState {
  int frame = 0;  // in LoopPlan::frames
  FrameState* parent = nullptr;
  std::int64_t parent_iter = 0;
  std::int64_t first_iter = 0;       // the oldest iteration still kept
  std::int64_t iteration_count = 0;  // the newest iteration
  int pending_enters = 0;            // Enters into this run that have not come yet
  std::deque<std::unique_ptr<IterationState>> iterations;  // first_iter, first_iter + 1, ...
  struct Constant {
    int enter;  // plan node
    Entry value;
    bool dead;
  };
  std::vector<Constant> constants;  // constant Enters' values, for every new iteration
  struct Entered {
    int enter;  // plan node
    Entry value;
    bool dead;
    bool constant;
  };
  std::vector<Entered> entered;  // an inline frame's: every Enter's value
  struct Deferred {
    int node;  // a NextIteration whose next iteration had no room yet
    Entry value;
  };
  std::vector<Deferred> deferred;
  std::vector<int> live_exits;                        // Exits that passed a value out
  std::vector<std::unique_ptr<FrameState>> children;  // loops started in this frame's iterations

  IterationState& at(std::int64_t iter) {
    return *iterations[static_cast<std::size_t>(iter - first_iter)];
  }
};

struct Executor::LoopStep : StepErrors {
  std::mutex mutex;  // every FrameState and IterationState of the step
  std::unique_ptr<FrameState> root;
  int outstanding = 0;  // ops ready or running
  std::vector<Entry> fetched;
  std::unique_ptr<bool[]> fetched_dead;
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
  std::vector<const detail::Node*> nodes;
  for (const PlanNode& p : plan_) nodes.push_back(p.node);
  if (LoopPlan::needed(nodes)) plan_loops(plan_index);
}

inline void Executor::run_async(StepContext& step, std::vector<Tensor> feeds, ThreadPool* pool,
                                DoneCallback done) const {
  if (feeds.size() != params_.feeds.size())
    throw Internal("executor: " + std::to_string(feeds.size()) + " feeds given, " +
                   std::to_string(params_.feeds.size()) + " expected");
  if (loops_) return run_loop_step(step, std::move(feeds), pool, std::move(done));
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
            if (p.expensive) detail::release_held_output();
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

        if (call_kernel(s, id, inputs, outputs, dead, /*movable=*/0) && tracks_dead_)
          record_deadness(s, p, id, dead.any_input);
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

inline bool Executor::call_kernel(StepErrors* s, int id, const Entry* const* inputs, Entry* outputs,
                                  DeadValues dead, std::uint64_t movable) const {
  const PlanNode& p = plan_[static_cast<std::size_t>(id)];
  StepStatsCollector* const stats = s->step->stats;
  StepActivity* const activity = s->step->activity;
  const std::int64_t start_ns = stats ? trace_clock_ns() : 0;
  if (activity) activity->started(static_cast<std::size_t>(id));
  bool ran = true;
  try {
    if (p.expensive) detail::release_held_output();  // frames held here never wait on it
    OpKernelContext ctx(*p.node, *p.device, *s->step, inputs, outputs, dead);
    ctx.allow_moving_inputs(movable);
    p.kernel->compute(ctx);
  } catch (...) {
    ran = false;
    s->record_error(Status::from_current_exception().with_context(
        p.node->type + " '" + p.node->name + "' on " + p.device->name()));
  }
  if (activity) activity->ended(static_cast<std::size_t>(id));
  if (stats) record(*stats, p, trace_thread_id(), start_ns);
  return ran;
}

inline bool Executor::keep_off_this_thread(const StepErrors* s, const PlanNode& p,
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
      for (std::size_t f = 0; f < fetch_locations_.size(); ++f)
        fetches.push_back(fetched_value(f, s->at(fetch_locations_[f]),
                                        tracks_dead_ && s->dead_at(fetch_locations_[f])));
    } catch (...) {
      status = Status::from_current_exception();
      fetches.clear();
    }
  }
  auto done = std::move(s->done);
  owned.reset();  // release step memory before the caller continues
  done(std::move(status), std::move(fetches));
}

inline Tensor Executor::fetched_value(std::size_t f, const Entry& e, bool dead) const {
  if (dead) {
    const TensorId& t = params_.fetches[f];
    throw InvalidArgument("the fetched tensor '" + params_.graph->node(t.node).name + ":" +
                          std::to_string(t.index) +
                          "' has no value in this step: it is on the side of a cond that "
                          "was not taken (fetch the cond's output instead)");
  }
  return e.ref ? e.ref->read() : e.tensor;
}

// ---------------------------------------------------------------------------------------------
// Plans with loops.

inline void Executor::plan_loops(const std::vector<int>& plan_index) {
  std::vector<const detail::Node*> nodes;
  std::vector<std::vector<bool>> fed;
  for (const PlanNode& p : plan_) {
    nodes.push_back(p.node);
    std::vector<bool> f;
    for (Location in : p.inputs) f.push_back(in < 0);
    fed.push_back(std::move(f));
  }
  loops_ = std::make_unique<LoopPlan>(nodes, plan_index, fed);
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    const int frame = loops_->nodes[i].frame;
    const std::string& type = plan_[i].node->type;
    if (frame != 0 && (type == "_Send" || type == "_Recv"))
      throw InvalidArgument(
          "while_loop '" + loops_->frame_label(frame) + "': " + describe_op(i) +
          " carries a value between tasks inside the loop, but a loop's ops must all run on one "
          "task; build the loop's ops on one device (a ps variable read in the body enters the "
          "loop once per step)");
  }
  for (std::size_t f = 1; f < loops_->frames.size(); ++f) {
    LoopPlan::Frame& frame = loops_->frames[f];
    frame.runs_inline = !frame.order.empty() &&
                        std::none_of(frame.members.begin(), frame.members.end(), [&](int id) {
                          const PlanNode& p = plan_[static_cast<std::size_t>(id)];
                          return p.async_kernel != nullptr || p.runs_long;
                        });
  }
  inline_frames_.resize(loops_->frames.size());
  for (std::size_t f = 1; f < loops_->frames.size(); ++f)
    if (loops_->frames[f].runs_inline) inline_frames_[f] = plan_inline_frame(static_cast<int>(f));
  loop_fetches_.resize(plan_.size());
  for (std::size_t f = 0; f < fetch_locations_.size(); ++f) {
    if (fetch_locations_[f] < 0) continue;  // a fed tensor: the feed itself
    const TensorId& t = params_.fetches[f];
    const int src = plan_index[static_cast<std::size_t>(t.node)];
    const LoopPlan::Node& info = loops_->nodes[static_cast<std::size_t>(src)];
    // Where the value lives: an Exit's in the enclosing frame, an Enter's in the loop.
    const int frame = info.kind == LoopPlan::Kind::exit
                          ? loops_->frames[static_cast<std::size_t>(info.frame)].parent
                          : (info.kind == LoopPlan::Kind::enter ? info.into_frame : info.frame);
    if (frame != 0)
      throw InvalidArgument("the fetched tensor '" + params_.graph->node(t.node).name + ":" +
                            std::to_string(t.index) + "' is inside while_loop '" +
                            loops_->frame_label(frame) +
                            "', where it has a value per iteration; fetch the loop's results");
    loop_fetches_[static_cast<std::size_t>(src)].emplace_back(t.index, static_cast<int>(f));
  }
}

inline void Executor::run_loop_step(StepContext& step, std::vector<Tensor> feeds, ThreadPool* pool,
                                    DoneCallback done) const {
  auto* s = new LoopStep;
  s->step = &step;
  s->pool = pool;
  s->done = std::move(done);
  s->feeds.resize(feeds.size());
  for (std::size_t i = 0; i < feeds.size(); ++i) s->feeds[i].tensor = std::move(feeds[i]);
  s->fetched.resize(fetch_locations_.size());
  s->fetched_dead.reset(new bool[fetch_locations_.size()]());
  for (std::size_t f = 0; f < fetch_locations_.size(); ++f)
    if (fetch_locations_[f] < 0) s->fetched[f] = s->at_feed(fetch_locations_[f]);
  s->root = std::make_unique<FrameState>();
  std::vector<TaggedNode> ready;
  {
    std::lock_guard lock(s->mutex);
    s->root->iterations.push_back(make_iteration(0));
    IterationState& root = s->root->at(0);
    for (int id : loops_->frames[0].members) {
      const LoopPlan::Node& info = loops_->nodes[static_cast<std::size_t>(id)];
      if (info.initial_pending > 0) continue;
      const bool merge = info.kind == LoopPlan::Kind::merge;
      if (merge && info.data_edges > 0 && !info.fed_input) continue;
      if (merge) root.counts[static_cast<std::size_t>(info.local)].started = true;
      ++root.outstanding_ops;
      ++s->outstanding;
      ready.push_back(TaggedNode{id, s->root.get(), 0, &root, merge && !info.fed_input});
    }
  }
  if (ready.empty()) {
    complete_loop_step(s);
    return;
  }
  process_loops(s, std::move(ready));
}

inline std::unique_ptr<Executor::IterationState> Executor::make_iteration(int frame) const {
  const LoopPlan::Frame& info = loops_->frames[static_cast<std::size_t>(frame)];
  auto it = std::make_unique<IterationState>();
  it->inputs.reset(new Entry[static_cast<std::size_t>(info.num_inputs)]);
  it->input_state.reset(new std::uint8_t[static_cast<std::size_t>(info.num_inputs)]());
  it->counts.reset(new IterationState::Counts[static_cast<std::size_t>(info.num_nodes)]);
  for (int id : info.members) {
    const LoopPlan::Node& node = loops_->nodes[static_cast<std::size_t>(id)];
    it->counts[static_cast<std::size_t>(node.local)].pending = node.initial_pending;
  }
  return it;
}

inline void Executor::process_loops(LoopStep* s, std::vector<TaggedNode> ready) const {
  while (!ready.empty()) {
    const TaggedNode t = ready.back();
    ready.pop_back();
    if (t.id == kRunFrame) {
      // A whole loop: off a network thread, and beside the other ready ops when there are any.
      if (s->pool && (!ready.empty() || detail::on_network_thread())) {
        try {
          s->pool->submit([this, s, t] { process_loops(s, {t}); });
          continue;
        } catch (...) {  // the pool could not take it: run it here
        }
      }
      std::vector<Entry> exit_values;
      std::vector<std::uint8_t> exit_dead;
      try {
        run_inline_frame(s, t.frame, exit_values, exit_dead);
      } catch (...) {
        s->record_error(Status::from_current_exception().with_context(
            "running while_loop '" + loops_->frame_label(t.frame->frame) + "'"));
        exit_values.assign(loops_->frames[static_cast<std::size_t>(t.frame->frame)].exits.size(),
                           Entry{});
        exit_dead.assign(exit_values.size(), 1);
      }
      finish_inline_frame(s, t.frame, exit_values, exit_dead, ready);
      continue;
    }
    const PlanNode& p = plan_[static_cast<std::size_t>(t.id)];
    if (s->stopped()) {
      finish_loop_node(s, t, nullptr, nullptr, false, ready);
      continue;
    }
    // An expensive op, with others ready here: to the pool, so that they run side by side.
    if (p.expensive && s->pool && !ready.empty()) {
      try {
        s->pool->submit([this, s, t] { process_loops(s, {t}); });
        continue;
      } catch (...) {  // the pool could not take it: run it here
      }
    }
    const std::size_t num_outputs = p.node->outputs.size();
    if (t.dead && !p.handles_dead) {  // on the untaken side of a Switch: skipped
      const boost::container::small_vector<bool, 8> all_dead(num_outputs + 1, true);
      finish_loop_node(s, t, nullptr, all_dead.data(), true, ready);
      continue;
    }
    try {
      if (p.async_kernel) {
        run_async_loop_node(s, t, ready);
        continue;
      }
      // A synchronous kernel's inputs and outputs stay on this stack while it runs.
      boost::container::small_vector<const Entry*, 8> inputs(p.inputs.size());
      boost::container::small_vector<Entry, 4> outputs(num_outputs);
      boost::container::small_vector<bool, 16> flags(num_outputs + p.inputs.size() + 1, false);
      const DeadValues dead =
          loop_node_inputs(s, t, inputs.data(), flags.data(), flags.data() + num_outputs);
      if (keep_off_this_thread(s, p, inputs.data())) {
        s->pool->submit([this, s, t] { process_loops(s, {t}); });
        continue;
      }
      const bool ran = call_kernel(s, t.id, inputs.data(), outputs.data(), dead, movable_inputs(p));
      finish_loop_node(s, t, outputs.data(), flags.data(), ran, ready);
    } catch (...) {
      // Something around the kernel failed (an allocation, a hand-off): the step fails typed,
      // and the op still counts as done so the step ends.
      s->record_error(Status::from_current_exception().with_context(
          "running " + p.node->type + " '" + p.node->name + "' on " + p.device->name()));
      finish_loop_node(s, t, nullptr, nullptr, false, ready);
    }
  }
}

inline DeadValues Executor::loop_node_inputs(LoopStep* s, const TaggedNode& t, const Entry** inputs,
                                             bool* outputs_dead, bool* input_dead) const {
  const PlanNode& p = plan_[static_cast<std::size_t>(t.id)];
  const std::size_t base =
      static_cast<std::size_t>(loops_->nodes[static_cast<std::size_t>(t.id)].input_base);
  for (std::size_t k = 0; k < p.inputs.size(); ++k)
    inputs[k] = p.inputs[k] < 0 ? &s->at_feed(p.inputs[k]) : &t.state->inputs[base + k];
  DeadValues dead;
  dead.any_input = t.dead;
  dead.outputs = outputs_dead;
  if (p.handles_dead) {  // a Merge's later inputs may still be coming: read under the lock
    std::lock_guard lock(s->mutex);
    for (std::size_t k = 0; k < p.inputs.size(); ++k)
      input_dead[k] = p.inputs[k] >= 0 && t.state->input_state[base + k] != 1;
    dead.inputs = input_dead;
  }
  return dead;
}

inline void Executor::run_async_loop_node(LoopStep* s, const TaggedNode& t,
                                          std::vector<TaggedNode>& ready) const {
  const PlanNode& p = plan_[static_cast<std::size_t>(t.id)];
  struct Call {  // what the kernel uses until it calls back
    std::vector<const Entry*> inputs;
    std::vector<Entry> outputs;
    std::unique_ptr<bool[]> flags;  // outputs' dead flags, then inputs'
    std::unique_ptr<OpKernelContext> ctx;
  };
  const std::size_t num_outputs = p.node->outputs.size();
  auto call = std::make_shared<Call>();
  call->inputs.resize(p.inputs.size());
  call->outputs.resize(num_outputs);
  call->flags.reset(new bool[num_outputs + p.inputs.size() + 1]());
  const DeadValues dead = loop_node_inputs(s, t, call->inputs.data(), call->flags.get(),
                                           call->flags.get() + num_outputs);
  call->ctx = std::make_unique<OpKernelContext>(*p.node, *p.device, *s->step, call->inputs.data(),
                                                call->outputs.data(), dead);
  StepStatsCollector* const stats = s->step->stats;
  StepActivity* const activity = s->step->activity;
  const std::uint32_t thread = stats ? trace_thread_id() : 0;
  const std::int64_t start_ns = stats ? trace_clock_ns() : 0;
  if (activity) activity->started(static_cast<std::size_t>(t.id));
  try {
    if (p.expensive) detail::release_held_output();
    p.async_kernel->compute_async(
        *call->ctx, [this, s, t, call, stats, activity, thread, start_ns](Status status) {
          const PlanNode& node = plan_[static_cast<std::size_t>(t.id)];
          if (stats) record(*stats, node, thread, start_ns);
          if (activity) activity->ended(static_cast<std::size_t>(t.id));
          if (!status.ok())
            s->record_error(status.with_context(node.node->type + " '" + node.node->name + "' on " +
                                                node.device->name()));
          std::vector<TaggedNode> next;
          finish_loop_node(s, t, call->outputs.data(), call->flags.get(), status.ok(), next);
          process_loops(s, std::move(next));
        });
  } catch (...) {
    if (activity) activity->ended(static_cast<std::size_t>(t.id));
    s->record_error(Status::from_current_exception().with_context(
        p.node->type + " '" + p.node->name + "' on " + p.device->name()));
    finish_loop_node(s, t, nullptr, nullptr, false, ready);
  }
}

inline InlineFrame Executor::plan_inline_frame(int f) const {
  const LoopPlan::Frame& frame = loops_->frames[static_cast<std::size_t>(f)];
  InlineFrame table;
  table.num_slots = static_cast<std::uint32_t>(frame.num_inputs);
  // The slots an op's (or an Enter's) outputs go to within the frame.
  auto add_edges = [&](int src, std::uint32_t& begin, std::uint32_t& end) {
    begin = static_cast<std::uint32_t>(table.edges.size());
    for (const LoopPlan::Edge& e : loops_->out_edges[static_cast<std::size_t>(src)]) {
      const LoopPlan::Node& dst = loops_->nodes[static_cast<std::size_t>(e.dst)];
      if (e.dst_input < 0 || dst.frame != f) continue;  // control, or out of the frame
      table.edges.push_back(
          InlineFrame::Edge{static_cast<std::uint32_t>(dst.input_base + e.dst_input),
                            static_cast<std::uint32_t>(e.src_output), e.last_use, true});
    }
    end = static_cast<std::uint32_t>(table.edges.size());
  };
  std::vector<bool> shared_slot(static_cast<std::size_t>(frame.num_inputs), false);
  for (std::size_t id = 0; id < plan_.size(); ++id) {
    const LoopPlan::Node& info = loops_->nodes[id];
    if (info.kind != LoopPlan::Kind::enter || info.into_frame != f) continue;
    InlineFrame::Enter enter{static_cast<int>(id), info.constant};
    add_edges(static_cast<int>(id), enter.edges_begin, enter.edges_end);
    if (enter.constant)
      for (std::uint32_t e = enter.edges_begin; e < enter.edges_end; ++e)
        shared_slot[table.edges[e].slot] = true;
    table.enters.push_back(enter);
  }
  for (int id : frame.order) {
    const PlanNode& p = plan_[static_cast<std::size_t>(id)];
    const LoopPlan::Node& info = loops_->nodes[static_cast<std::size_t>(id)];
    const std::string& type = p.node->type;
    InlineFrame::Op op;
    op.id = id;
    op.local = info.local;
    op.handles_dead = p.handles_dead;
    op.next_iteration = info.kind == LoopPlan::Kind::next_iteration;
    if (info.kind == LoopPlan::Kind::exit)
      op.exit = static_cast<int>(std::find(frame.exits.begin(), frame.exits.end(), id) -
                                 frame.exits.begin());
    op.input_base = static_cast<std::uint32_t>(info.input_base);
    op.num_inputs = static_cast<std::uint32_t>(p.inputs.size());
    op.num_outputs = static_cast<std::uint32_t>(p.node->outputs.size());
    table.max_outputs = std::max(table.max_outputs, op.num_outputs);
    bool fed = false;
    for (std::uint32_t k = 0; k < op.num_inputs; ++k)
      if (p.inputs[k] < 0) {
        fed = true;
        table.fed.push_back(InlineFrame::Fed{op.input_base + k, p.inputs[k]});
        shared_slot[op.input_base + k] = true;  // the step's feed, read by every iteration
      }
    // An op whose inputs are all computed in the frame may stand for its kernel; one that
    // reads a feed, or has more inputs than a mask holds, keeps the kernel.
    if (!fed && op.num_inputs <= 64) {
      if (type == "LoopCond" || type == "NextIteration" || type == "Exit" || type == "Identity")
        op.action = InlineFrame::Action::forward;
      else if (type == "Merge")
        op.action = InlineFrame::Action::merge;
      else if (type == "Switch")
        op.action = InlineFrame::Action::switch_;
      else if (type == "Const" && op.num_inputs == 0) {
        op.action = InlineFrame::Action::constant;
        op.constant.tensor = detail::attr_or_throw<Tensor>(p.node->attrs, "value", p.node->name);
      }
    }
    if (op.action == InlineFrame::Action::merge)
      while (table.merge_index.size() < op.num_inputs)
        table.merge_index.push_back(
            Entry{Tensor(static_cast<std::int32_t>(table.merge_index.size())), nullptr});
    add_edges(id, op.edges_begin, op.edges_end);
    op.controls_begin = static_cast<std::uint32_t>(table.controls.size());
    if (tracks_dead_)
      for (int c : control_predecessors_[static_cast<std::size_t>(id)]) {
        const LoopPlan::Node& from = loops_->nodes[static_cast<std::size_t>(c)];
        if (from.frame == f) {
          table.controls.push_back(InlineFrame::Control{from.local, -1});
          continue;
        }
        for (std::size_t e = 0; e < table.enters.size(); ++e)
          if (table.enters[e].id == c)
            table.controls.push_back(InlineFrame::Control{-1, static_cast<int>(e)});
      }
    op.controls_end = static_cast<std::uint32_t>(table.controls.size());
    if (op.action == InlineFrame::Action::constant)
      for (std::uint32_t e = op.edges_begin; e < op.edges_end; ++e)
        shared_slot[table.edges[e].slot] = true;
    table.ops.push_back(std::move(op));
  }
  for (InlineFrame::Op& op : table.ops)
    for (std::uint32_t k = 0; k < op.num_inputs && k < 64; ++k)
      if (!shared_slot[op.input_base + k]) op.own_inputs |= std::uint64_t{1} << k;
  alias_forwarding_ops(table);
  return table;
}

inline void Executor::alias_forwarding_ops(InlineFrame& table) const {
  // Which op's output fills each slot, and whether that output is a variable reference.
  std::vector<int> producer(table.num_slots, -1);
  std::vector<bool> reference(table.num_slots, false);
  for (std::size_t i = 0; i < table.ops.size(); ++i) {
    const InlineFrame::Op& op = table.ops[i];
    for (std::uint32_t e = op.edges_begin; e < op.edges_end; ++e) {
      const InlineFrame::Edge& edge = table.edges[e];
      producer[edge.slot] = static_cast<int>(i);
      reference[edge.slot] =
          plan_[static_cast<std::size_t>(op.id)].node->outputs[edge.src_output].is_ref;
    }
  }
  // The forwarding op (if any) whose input is each slot and whose value may skip it: no
  // control input can make it dead, its input comes along an edge of an op of the frame, and
  // it is no Exit (whose value leaves) nor an Identity of a reference (which reads it).
  std::vector<int> alias_at(table.num_slots, -1);
  for (std::size_t i = 0; i < table.ops.size(); ++i) {
    InlineFrame::Op& op = table.ops[i];
    if (op.action != InlineFrame::Action::forward || op.exit >= 0 || op.num_inputs != 1 ||
        op.controls_begin != op.controls_end)
      continue;
    const int from = producer[op.input_base];
    if (from < 0 ||
        table.ops[static_cast<std::size_t>(from)].action == InlineFrame::Action::constant ||
        reference[op.input_base])
      continue;
    op.action = InlineFrame::Action::alias;
    alias_at[op.input_base] = static_cast<int>(i);
  }
  // Every edge into an alias becomes a deadness-only edge plus the alias's own edges, carrying
  // the producer's output (moved along the last of them when the edge into the alias was the
  // last of that output).
  std::vector<InlineFrame::Edge> edges;
  auto expand = [&](auto& self, const InlineFrame::Edge& edge) -> void {
    const int alias = alias_at[edge.slot];
    if (alias < 0) {
      edges.push_back(edge);
      return;
    }
    edges.push_back(InlineFrame::Edge{edge.slot, edge.src_output, false, false});
    const InlineFrame::Op& op = table.ops[static_cast<std::size_t>(alias)];
    for (std::uint32_t e = op.edges_begin; e < op.edges_end; ++e)
      self(self, InlineFrame::Edge{table.edges[e].slot, edge.src_output,
                                   edge.last_use && table.edges[e].last_use, true});
  };
  auto rebuild = [&](std::uint32_t& begin, std::uint32_t& end, bool keep) {
    const std::uint32_t old_begin = begin, old_end = end;
    begin = static_cast<std::uint32_t>(edges.size());
    if (keep)
      for (std::uint32_t e = old_begin; e < old_end; ++e) expand(expand, table.edges[e]);
    end = static_cast<std::uint32_t>(edges.size());
  };
  for (InlineFrame::Enter& enter : table.enters) rebuild(enter.edges_begin, enter.edges_end, true);
  for (InlineFrame::Op& op : table.ops)
    rebuild(op.edges_begin, op.edges_end, op.action != InlineFrame::Action::alias);
  table.edges = std::move(edges);
}

inline void Executor::run_inline_frame(LoopStep* s, FrameState* frame,
                                       std::vector<Entry>& exit_values,
                                       std::vector<std::uint8_t>& exit_dead) const {
  const InlineFrame& table = inline_frames_[static_cast<std::size_t>(frame->frame)];
  exit_values.assign(loops_->frames[static_cast<std::size_t>(frame->frame)].exits.size(), Entry{});
  exit_dead.assign(exit_values.size(), 1);
  // Every input slot of the frame's ops, whether its value is dead (or has not come), and
  // where the op reads it: its own slot is filled in its iteration before it runs and emptied
  // when it ran (a loop Merge's input from its NextIteration is filled for the next
  // iteration); a feed or a constant Enter's value is read in place by every iteration.
  const std::size_t num_slots = table.num_slots;
  std::vector<Entry> slots(num_slots);
  std::unique_ptr<bool[]> slot_dead(new bool[num_slots]);
  std::fill(slot_dead.get(), slot_dead.get() + num_slots, true);
  std::vector<const Entry*> reads(num_slots);
  for (std::size_t i = 0; i < num_slots; ++i) reads[i] = &slots[i];
  for (const InlineFrame::Fed& fed : table.fed) {
    reads[fed.slot] = &s->at_feed(fed.location);
    slot_dead[fed.slot] = false;
  }
  // Per Enter of `table.enters`, its value as it came.
  std::vector<FrameState::Entered*> entered(table.enters.size(), nullptr);
  for (FrameState::Entered& e : frame->entered)
    for (std::size_t i = 0; i < table.enters.size(); ++i)
      if (table.enters[i].id == e.enter) entered[i] = &e;
  // Passes output values along edges [begin, end): output o's value is at sources[o], and may
  // be moved along its last edge when bit o of `movable` is set (outputs from 64 on always).
  auto pass_on = [&](const std::uint32_t begin, const std::uint32_t end, Entry* const* sources,
                     std::uint64_t movable, const bool* outputs_dead) {
    for (std::uint32_t i = begin; i < end; ++i) {
      const InlineFrame::Edge& e = table.edges[i];
      slot_dead[e.slot] = outputs_dead[e.src_output];
      if (!e.value) continue;
      Entry& slot = slots[e.slot];
      if (outputs_dead[e.src_output]) {
        if (!slot.tensor.empty() || slot.ref) slot = Entry{};
      } else if (e.last_use && (e.src_output >= 64 || ((movable >> e.src_output) & 1))) {
        slot = std::move(*sources[e.src_output]);
      } else {
        slot = *sources[e.src_output];
      }
    }
  };
  for (std::size_t i = 0; i < table.enters.size(); ++i) {
    const InlineFrame::Enter& enter = table.enters[i];
    FrameState::Entered* e = entered[i];
    if (!e) continue;       // pruned from the step: never comes
    if (!enter.constant) {  // a loop variable: into the first iteration
      Entry* const value = &e->value;
      pass_on(enter.edges_begin, enter.edges_end, &value, 1, &e->dead);
      continue;
    }
    for (std::uint32_t k = enter.edges_begin; k < enter.edges_end; ++k) {
      reads[table.edges[k].slot] = &e->value;
      slot_dead[table.edges[k].slot] = e->dead;
    }
  }
  for (const InlineFrame::Op& op : table.ops)
    if (op.action == InlineFrame::Action::constant)
      for (std::uint32_t k = op.edges_begin; k < op.edges_end; ++k)
        reads[table.edges[k].slot] = &op.constant;
  std::vector<std::uint8_t> node_dead(
      static_cast<std::size_t>(loops_->frames[static_cast<std::size_t>(frame->frame)].num_nodes));
  std::vector<Entry> outputs(table.max_outputs);  // a kernel's
  // Where each output's value is: the kernel's, or (for an op that stands for its kernel) an
  // input or a value of the table.
  std::vector<Entry*> sources(table.max_outputs);
  std::unique_ptr<bool[]> outputs_dead(new bool[std::max<std::size_t>(table.max_outputs, 8)]);
  // Sets the first n output flags. Up to eight as one 8-byte store: a small memset may use a
  // masked vector store, which the byte loads that follow cannot forward from (a stall of
  // tens of cycles per op).
  auto set_output_flags = [&outputs_dead](std::uint32_t n, bool value) {
    if (n > 8) return std::fill(outputs_dead.get(), outputs_dead.get() + n, value);
    const std::uint64_t bytes = value ? 0x0101010101010101u : 0;
    std::memcpy(outputs_dead.get(), &bytes, sizeof bytes);
  };
  // Empties the op's own input slots once it ran (a feed's or a constant's value is kept).
  auto use_up_inputs = [&](const InlineFrame::Op& op) {
    for (std::uint32_t k = op.input_base; k < op.input_base + op.num_inputs; ++k) {
      if (reads[k] != &slots[k]) continue;
      if (!slots[k].tensor.empty() || slots[k].ref) slots[k] = Entry{};
      slot_dead[k] = true;
    }
  };
  StepStatsCollector* const stats = s->step->stats;
  StepActivity* const activity = s->step->activity;
  const bool traced = stats || activity;  // then every kernel runs, for its times
  for (bool more = true; more;) {
    more = false;
    if (s->stopped()) return;
    for (const InlineFrame::Op& op : table.ops) {
      const std::uint32_t base = op.input_base;
      const Entry* const* inputs = reads.data() + base;
      bool* const inputs_dead = slot_dead.get() + base;
      Entry* const out = outputs.data();
      bool* const out_dead = outputs_dead.get();
      bool any_dead = false;
      for (std::uint32_t k = 0; k < op.num_inputs; ++k) any_dead = any_dead || inputs_dead[k];
      for (std::uint32_t c = op.controls_begin; c < op.controls_end; ++c) {
        const InlineFrame::Control& control = table.controls[c];
        any_dead = any_dead || (control.local >= 0
                                    ? node_dead[static_cast<std::size_t>(control.local)] != 0
                                    : entered[static_cast<std::size_t>(control.enter)] &&
                                          entered[static_cast<std::size_t>(control.enter)]->dead);
      }
      if (any_dead && !op.handles_dead) {  // passed over: its outputs are dead
        node_dead[static_cast<std::size_t>(op.local)] = 1;
        use_up_inputs(op);
        if (op.exit >= 0) continue;
        for (std::uint32_t k = op.edges_begin; k < op.edges_end; ++k) {
          const InlineFrame::Edge& e = table.edges[k];
          slot_dead[e.slot] = true;
          Entry& slot = slots[e.slot];
          if (e.value && (!slot.tensor.empty() || slot.ref)) slot = Entry{};
        }
        continue;
      }
      set_output_flags(op.num_outputs, false);
      for (std::uint32_t k = 0; k < op.num_outputs; ++k) sources[k] = out + k;
      std::uint64_t movable = ~std::uint64_t{0};      // bit o: output o's value is the op's to move
      if (op.action == InlineFrame::Action::alias) {  // its value went straight on
        if (stats)
          record(*stats, plan_[static_cast<std::size_t>(op.id)], trace_thread_id(),
                 trace_clock_ns());
      } else if (traced || !run_without_kernel(op, table, slots.data() + base, inputs, inputs_dead,
                                               sources.data(), movable, out_dead)) {
        if (!call_kernel(s, op.id, inputs, out, DeadValues{inputs_dead, any_dead, out_dead},
                         op.own_inputs))
          return;
      }
      bool dead = op.num_outputs == 0 ? any_dead : true;
      for (std::uint32_t k = 0; k < op.num_outputs; ++k) dead = dead && out_dead[k];
      node_dead[static_cast<std::size_t>(op.local)] = dead;
      if (op.exit >= 0) {
        if (!out_dead[0]) {
          Entry& value = exit_values[static_cast<std::size_t>(op.exit)];
          value = (movable & 1) ? std::move(*sources[0]) : *sources[0];
          exit_dead[static_cast<std::size_t>(op.exit)] = 0;
        }
      } else if (op.action == InlineFrame::Action::constant) {  // read in place: live or not
        for (std::uint32_t k = op.edges_begin; k < op.edges_end; ++k)
          slot_dead[table.edges[k].slot] = out_dead[0];
      } else {
        if (op.next_iteration && !out_dead[0]) more = true;
        pass_on(op.edges_begin, op.edges_end, sources.data(), movable, out_dead);
      }
      use_up_inputs(op);
      for (std::uint32_t k = 0; k < op.num_outputs; ++k)
        if (!out[k].tensor.empty() || out[k].ref) out[k] = Entry{};
    }
  }
}

inline bool Executor::run_without_kernel(const InlineFrame::Op& op, const InlineFrame& table,
                                         Entry* own, const Entry* const* inputs,
                                         const bool* inputs_dead, Entry** sources,
                                         std::uint64_t& movable, bool* outputs_dead) {
  // Output `out` is input k as it came: the op's own slot (to move from), or a shared value.
  auto forward = [&](std::uint32_t k, std::uint32_t out) {
    sources[out] = const_cast<Entry*>(inputs[k]);
    if (inputs[k] != &own[k]) movable &= ~(std::uint64_t{1} << out);
  };
  switch (op.action) {
    case InlineFrame::Action::kernel:
      return false;
    case InlineFrame::Action::alias:  // its value skipped it
      return true;
    case InlineFrame::Action::forward:
      if (inputs[0]->ref) return false;  // an Identity's kernel reads the variable
      forward(0, 0);
      return true;
    case InlineFrame::Action::merge:
      for (std::uint32_t k = 0; k < op.num_inputs; ++k) {
        if (inputs_dead[k]) continue;
        forward(k, 0);
        sources[1] = const_cast<Entry*>(&table.merge_index[k]);  // shared: never moved
        movable &= ~std::uint64_t{2};
        return true;
      }
      outputs_dead[0] = outputs_dead[1] = true;
      return true;
    case InlineFrame::Action::switch_: {
      const Tensor& pred = inputs[1]->tensor;
      if (inputs[1]->ref || pred.dtype() != DType::boolean || pred.rank() != 0 || pred.size() != 1)
        return false;  // the kernel says what is wrong
      const std::uint32_t taken = pred.scalar<bool>() ? 1 : 0;
      forward(0, taken);
      outputs_dead[1 - taken] = true;
      return true;
    }
    case InlineFrame::Action::constant:  // its consumers read InlineFrame::Op::constant
      return true;
  }
  return false;
}

inline void Executor::finish_inline_frame(LoopStep* s, FrameState* frame,
                                          std::vector<Entry>& exit_values,
                                          const std::vector<std::uint8_t>& exit_dead,
                                          std::vector<TaggedNode>& ready) const {
  bool step_done = false;
  {
    std::lock_guard lock(s->mutex);
    const LoopPlan::Frame& plan = loops_->frames[static_cast<std::size_t>(frame->frame)];
    FrameState* parent = frame->parent;
    const std::int64_t parent_iter = frame->parent_iter;
    if (!s->failed.load(std::memory_order_acquire)) {
      try {
        for (std::size_t i = 0; i < plan.exits.size(); ++i) {
          const bool dead = exit_dead[i] != 0;
          if (parent == s->root.get()) record_fetches(s, plan.exits[i], &exit_values[i], &dead);
          deliver(s, parent, parent_iter, plan.exits[i], &exit_values[i], true, &dead, dead, ready);
        }
      } catch (...) {
        s->record_error(Status::from_current_exception().with_context(
            "passing on the results of while_loop '" + plan.name + "'"));
      }
    }
    close_frame(s, frame, ready);
    step_done = --s->outstanding == 0;
  }
  if (step_done) complete_loop_step(s);
}

inline void Executor::finish_loop_node(LoopStep* s, const TaggedNode& t, Entry* outputs,
                                       const bool* outputs_dead, bool pass_on,
                                       std::vector<TaggedNode>& ready) const {
  bool step_done = false;
  {
    std::lock_guard lock(s->mutex);
    if (pass_on && !s->failed.load(std::memory_order_acquire)) {
      try {
        propagate(s, t, outputs, outputs_dead, ready);
      } catch (...) {
        s->record_error(Status::from_current_exception().with_context(
            "passing on the outputs of " + plan_[static_cast<std::size_t>(t.id)].node->name));
      }
    }
    // Its inputs are its own (each input slot has one consumer): free them now.
    const LoopPlan::Node& info = loops_->nodes[static_cast<std::size_t>(t.id)];
    if (info.kind != LoopPlan::Kind::merge)
      for (std::size_t k = 0; k < plan_[static_cast<std::size_t>(t.id)].inputs.size(); ++k)
        t.state->inputs[static_cast<std::size_t>(info.input_base) + k] = Entry{};
    --t.state->outstanding_ops;
    if (t.frame != s->root.get()) clean_up_iterations(s, t.frame, ready);
    step_done = --s->outstanding == 0;
  }
  if (step_done) complete_loop_step(s);
}

inline void Executor::propagate(LoopStep* s, const TaggedNode& t, Entry* outputs,
                                const bool* outputs_dead, std::vector<TaggedNode>& ready) const {
  const Entry none;
  auto value = [&](int k) -> const Entry& { return outputs_dead[k] ? none : outputs[k]; };
  const LoopPlan::Node& info = loops_->nodes[static_cast<std::size_t>(t.id)];
  const std::size_t num_outputs = plan_[static_cast<std::size_t>(t.id)].node->outputs.size();
  bool node_dead = num_outputs == 0 ? t.dead : true;
  for (std::size_t k = 0; k < num_outputs; ++k) node_dead = node_dead && outputs_dead[k];
  FrameState* frame = t.frame;
  switch (info.kind) {
    case LoopPlan::Kind::enter: {
      FrameState* child = child_frame(frame, t.iter, info.into_frame);
      if (loops_->frames[static_cast<std::size_t>(info.into_frame)].runs_inline) {
        child->entered.push_back(
            FrameState::Entered{t.id, value(0), outputs_dead[0], info.constant});
        if (--child->pending_enters == 0) {  // all came: run the loop
          ++s->outstanding;
          ready.push_back(TaggedNode{kRunFrame, child, 0, nullptr, false});
        }
        return;
      }
      if (info.constant) {
        child->constants.push_back(FrameState::Constant{t.id, value(0), outputs_dead[0]});
        for (std::int64_t i = child->first_iter; i <= child->iteration_count; ++i)
          deliver(s, child, i, t.id, outputs, false, outputs_dead, node_dead, ready);
      } else {
        deliver(s, child, 0, t.id, outputs, true, outputs_dead, node_dead, ready);
      }
      --child->pending_enters;
      clean_up_iterations(s, child, ready);
      return;
    }
    case LoopPlan::Kind::exit:
      if (outputs_dead[0]) return;  // the loop goes on, or never ran: seen when it is done
      frame->live_exits.push_back(t.id);
      if (frame->parent == s->root.get()) record_fetches(s, t.id, outputs, outputs_dead);
      deliver(s, frame->parent, frame->parent_iter, t.id, outputs, true, outputs_dead, false,
              ready);
      return;
    case LoopPlan::Kind::next_iteration: {
      if (outputs_dead[0]) return;  // the loop ended in this iteration
      const std::int64_t next = t.iter + 1;
      if (next > frame->iteration_count) {
        const std::int64_t running = frame->iteration_count - frame->first_iter + 1;
        if (running >= loops_->frames[static_cast<std::size_t>(frame->frame)].parallel_iterations) {
          frame->deferred.push_back(FrameState::Deferred{t.id, std::move(outputs[0])});
          return;
        }
        new_iteration(s, frame, ready);
      }
      deliver(s, frame, next, t.id, outputs, true, outputs_dead, false, ready);
      return;
    }
    default:
      if (frame == s->root.get()) record_fetches(s, t.id, outputs, outputs_dead);
      deliver(s, frame, t.iter, t.id, outputs, true, outputs_dead, node_dead, ready);
  }
}

inline void Executor::deliver(LoopStep* s, FrameState* frame, std::int64_t iter, int src,
                              Entry* outputs, bool movable, const bool* outputs_dead,
                              bool node_dead, std::vector<TaggedNode>& ready) const {
  IterationState& it = frame->at(iter);
  for (const LoopPlan::Edge& e : loops_->out_edges[static_cast<std::size_t>(src)]) {
    const LoopPlan::Node& dst = loops_->nodes[static_cast<std::size_t>(e.dst)];
    IterationState::Counts& c = it.counts[static_cast<std::size_t>(dst.local)];
    bool dead = node_dead;
    if (e.dst_input >= 0) {
      dead = outputs_dead[e.src_output];
      const std::size_t slot = static_cast<std::size_t>(dst.input_base + e.dst_input);
      if (dead)
        it.inputs[slot] = Entry{};
      else if (movable && e.last_use)
        it.inputs[slot] = std::move(outputs[e.src_output]);
      else
        it.inputs[slot] = outputs[e.src_output];
      it.input_state[slot] = dead ? 2 : 1;
    }
    bool ready_dead = false;
    if (dst.kind == LoopPlan::Kind::merge) {
      if (e.dst_input < 0)
        --c.pending;
      else if (dead)
        ++c.dead_inputs;
      else
        c.live = true;
      if (c.started || c.pending > 0) continue;
      const bool live = c.live || dst.fed_input;
      if (!live && c.dead_inputs < dst.data_edges) continue;
      c.started = true;
      ready_dead = !live;
    } else {
      if (dead) ++c.dead_inputs;
      if (--c.pending > 0) continue;
      ready_dead = c.dead_inputs > 0;
    }
    ++it.outstanding_ops;
    ++s->outstanding;
    ready.push_back(TaggedNode{e.dst, frame, iter, &it, ready_dead});
  }
}

inline void Executor::new_iteration(LoopStep* s, FrameState* frame,
                                    std::vector<TaggedNode>& ready) const {
  frame->iterations.push_back(make_iteration(frame->frame));
  const std::int64_t iter = ++frame->iteration_count;
  for (FrameState::Constant& c : frame->constants)
    deliver(s, frame, iter, c.enter, &c.value, false, &c.dead, c.dead, ready);
}

inline Executor::FrameState* Executor::child_frame(FrameState* parent, std::int64_t iter,
                                                   int frame) const {
  for (const auto& child : parent->children)
    if (child->frame == frame && child->parent_iter == iter) return child.get();
  auto child = std::make_unique<FrameState>();
  child->frame = frame;
  child->parent = parent;
  child->parent_iter = iter;
  child->pending_enters = loops_->frames[static_cast<std::size_t>(frame)].num_enters;
  child->iterations.push_back(make_iteration(frame));
  ++parent->at(iter).outstanding_frames;
  parent->children.push_back(std::move(child));
  return parent->children.back().get();
}

inline void Executor::clean_up_iterations(LoopStep* s, FrameState* frame,
                                          std::vector<TaggedNode>& ready) const {
  // The oldest iteration is done once its ops and loops are, and (the first) all Enters came.
  while (!frame->iterations.empty()) {
    const IterationState& oldest = *frame->iterations.front();
    if (oldest.outstanding_ops > 0 || oldest.outstanding_frames > 0) return;
    if (frame->first_iter == 0 && frame->pending_enters > 0) return;
    frame->iterations.pop_front();
    ++frame->first_iter;
    if (!frame->deferred.empty()) {  // NextIterations that waited for room
      new_iteration(s, frame, ready);
      for (FrameState::Deferred& d : frame->deferred) {
        const bool live = false;
        deliver(s, frame, frame->iteration_count, d.node, &d.value, true, &live, false, ready);
      }
      frame->deferred.clear();
    }
  }
  // The loop is done: Exits that never passed a live value pass a dead one (all of them when
  // the loop's inputs were dead: its first Merges then never ran, nor did its Exits).
  FrameState* parent = frame->parent;
  const std::int64_t parent_iter = frame->parent_iter;
  const bool dead = true;
  Entry none;
  for (int exit : loops_->frames[static_cast<std::size_t>(frame->frame)].exits)
    if (std::find(frame->live_exits.begin(), frame->live_exits.end(), exit) ==
        frame->live_exits.end()) {
      deliver(s, parent, parent_iter, exit, &none, false, &dead, true, ready);
      if (parent == s->root.get()) record_fetches(s, exit, &none, &dead);
    }
  close_frame(s, frame, ready);
}

inline void Executor::close_frame(LoopStep* s, FrameState* frame,
                                  std::vector<TaggedNode>& ready) const {
  FrameState* parent = frame->parent;
  --parent->at(frame->parent_iter).outstanding_frames;
  auto& siblings = parent->children;
  siblings.erase(std::find_if(siblings.begin(), siblings.end(),
                              [frame](const auto& child) { return child.get() == frame; }));
  if (parent != s->root.get()) clean_up_iterations(s, parent, ready);
}

inline void Executor::record_fetches(LoopStep* s, int id, const Entry* outputs,
                                     const bool* outputs_dead) const {
  for (const auto& [output, f] : loop_fetches_[static_cast<std::size_t>(id)]) {
    s->fetched[static_cast<std::size_t>(f)] = outputs_dead[output] ? Entry{} : outputs[output];
    s->fetched_dead[static_cast<std::size_t>(f)] = outputs_dead[output];
  }
}

inline void Executor::complete_loop_step(LoopStep* s) const {
  std::unique_ptr<LoopStep> owned(s);
  std::vector<Tensor> fetches;
  Status status = s->status;
  if (status.ok()) {
    try {
      for (std::size_t f = 0; f < s->fetched.size(); ++f)
        fetches.push_back(fetched_value(f, s->fetched[f], s->fetched_dead[f]));
    } catch (...) {
      status = Status::from_current_exception();
      fetches.clear();
    }
  }
  auto done = std::move(s->done);
  owned.reset();
  done(std::move(status), std::move(fetches));
}

}  // namespace psflow
