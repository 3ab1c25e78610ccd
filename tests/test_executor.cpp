// Executor: a node runs only after its data and control inputs; the first kernel error fails
// the step with that typed error and no other branch hangs; a step waiting in an asynchronous
// kernel ends with the status of a cancel or a rendezvous abort; an output is released once
// its last consumer has run (fetched ones are kept); several steps run at once on one executor.
// The op types and kernels are defined here, so no built-in kernel is compiled in.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "psflow/runtime/executor.hpp"
#include "support/pool_drain.hpp"

using namespace psflow;
using namespace std::chrono_literals;

// The next allocation on this thread fails with std::bad_alloc when set (T_ArmAllocFailure).
// Every plain form of new and delete is replaced (malloc and free underneath), so whatever is
// allocated by one is freed by its partner (AddressSanitizer checks that); the aligned forms are
// left to the library, in pairs too. GCC cannot see that malloc/free pair through the inlined
// operators, hence the pragma.
namespace {

thread_local bool fail_next_allocation = false;

void* allocate_or_null(std::size_t size) noexcept {
  if (fail_next_allocation) {
    fail_next_allocation = false;
    return nullptr;
  }
  return std::malloc(size == 0 ? 1 : size);
}
void* allocate(std::size_t size) {
  if (void* p = allocate_or_null(size)) return p;
  throw std::bad_alloc();
}

}  // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return allocate_or_null(size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return allocate_or_null(size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

// What the test kernels did, shared by all of them (Catch runs one test case at a time).
struct Recorder {
  std::atomic<int> clock{0};
  std::atomic<bool> trace{true};
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::pair<int, int>> ticks;  // node -> (start, end) of its last run
  std::map<std::string, int> runs;                   // node -> runs
  int waiting = 0;                                   // asynchronous kernels now waiting
  Tensor kept;                                       // T_Keep's output, a second reference

  void reset() {
    std::lock_guard lock(mutex);
    ticks.clear();
    runs.clear();
    waiting = 0;
    kept = Tensor();
    trace = true;
  }
  void ran(const std::string& node, int start, int end) {
    if (!trace.load()) return;
    std::lock_guard lock(mutex);
    ticks[node] = {start, end};
    ++runs[node];
  }
  int runs_of(const std::string& node) {
    std::lock_guard lock(mutex);
    auto it = runs.find(node);
    return it == runs.end() ? 0 : it->second;
  }
  void now_waiting() {
    std::lock_guard lock(mutex);
    ++waiting;
    changed.notify_all();
  }
  bool wait_for_waiting(int count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return waiting >= count; });
  }
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

std::vector<OutputSpec> one_float(const InferenceContext&) {
  return {OutputSpec{DType::float32, PartialShape::unknown()}};
}

// T_Value: attr "value" plus element 0 of every input, as a float32 scalar; traced; optional
// attr "sleep_ms" keeps it busy for a while.
class ValueKernel : public OpKernel {
 public:
  explicit ValueKernel(const OpKernelConstruction& c)
      : value_(c.has_attr("value") ? static_cast<float>(c.attr<double>("value")) : 0.0f),
        sleep_ms_(c.has_attr("sleep_ms") ? c.attr<std::int64_t>("sleep_ms") : 0) {}
  void compute(OpKernelContext& ctx) override {
    const int start = recorder().clock.fetch_add(1);
    // A kernel that computes for a while: its duration is what such a test is about.
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    float sum = value_;
    for (int i = 0; i < ctx.num_inputs(); ++i) sum += ctx.input(i).data<float>()[0];
    ctx.set_output(0, Tensor(sum));
    recorder().ran(ctx.name(), start, recorder().clock.fetch_add(1));
  }

 private:
  float value_;
  std::int64_t sleep_ms_;
};

// T_Fail: throws a psflow error of code attr "code" with attr "message", or with attr "std" a
// std::runtime_error.
class FailKernel : public OpKernel {
 public:
  explicit FailKernel(const OpKernelConstruction& c)
      : code_(static_cast<ErrorCode>(c.attr<std::int64_t>("code"))),
        message_(c.attr<std::string>("message")),
        std_(c.has_attr("std")) {}
  void compute(OpKernelContext&) override {
    if (std_) throw std::runtime_error(message_);
    throw_error(code_, message_);
  }
  bool is_expensive() const override { return false; }

 private:
  ErrorCode code_;
  std::string message_;
  bool std_;
};

// T_Keep: a 4 KiB float32 tensor, of which the recorder keeps a second reference.
class KeepKernel : public OpKernel {
 public:
  explicit KeepKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    Tensor t = Tensor::filled(1.0f, {1024});
    {
      std::lock_guard lock(recorder().mutex);
      recorder().kept = t;
    }
    ctx.set_output(0, std::move(t));
  }
};

// T_Probe: 1 when the recorder's reference is the only one left (the executor released
// T_Keep's output), else 0.
class ProbeKernel : public OpKernel {
 public:
  explicit ProbeKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    std::lock_guard lock(recorder().mutex);
    ctx.set_output(0, Tensor(recorder().kept.is_sole_owner() ? 1.0f : 0.0f));
  }
};

// T_Wait: waits until the step is cancelled, then fails with the cancellation's status.
class WaitKernel : public AsyncOpKernel {
 public:
  explicit WaitKernel(const OpKernelConstruction&) {}
  void compute_async(OpKernelContext& ctx, DoneCallback done) override {
    CancellationManager* cancellation = ctx.step().cancellation;
    if (!cancellation)
      return done(Status(ErrorCode::internal, "T_Wait needs a cancellation manager"));
    if (cancellation->add([done](const Status& s) { done(s); }) == 0)
      return done(cancellation->status());
    recorder().now_waiting();
  }
};

// T_Recv: the value of rendezvous key attr "key".
class RecvKernel : public AsyncOpKernel {
 public:
  explicit RecvKernel(const OpKernelConstruction& c) : key_(c.attr<std::string>("key")) {}
  void compute_async(OpKernelContext& ctx, DoneCallback done) override {
    ctx.step().rendezvous->recv_async(key_, [&ctx, done](const Status& s, Tensor value) {
      if (s.ok()) ctx.set_output(0, std::move(value));
      done(s);
    });
    recorder().now_waiting();
  }

 private:
  std::string key_;
};

// T_ArmAllocFailure: a scalar, then makes the next allocation of this thread fail, so that
// the executor's own work after it (not a kernel) throws std::bad_alloc.
class ArmAllocFailureKernel : public OpKernel {
 public:
  explicit ArmAllocFailureKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    ctx.set_output(0, Tensor(1.0f));
    fail_next_allocation = true;
  }
};

// T_Input: stands for a fed tensor; must never run.
class InputKernel : public OpKernel {
 public:
  explicit InputKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext&) override { throw Internal("T_Input ran although it is fed"); }
};

[[maybe_unused]] const bool registered = [] {
  auto& ops = OpRegistry::global();
  for (const char* type : {"T_Value", "T_Fail", "T_Probe", "T_Wait", "T_ArmAllocFailure"})
    ops.add(OpDef{type, -1, {}, false, one_float});
  for (const char* type : {"T_Keep", "T_Recv", "T_Input", "T_NoKernel"})
    ops.add(OpDef{type, 0, {}, false, one_float});
  auto& kernels = KernelRegistry::global();
  kernels.add<ValueKernel>("T_Value");
  kernels.add<FailKernel>("T_Fail");
  kernels.add<KeepKernel>("T_Keep");
  kernels.add<ProbeKernel>("T_Probe");
  kernels.add<WaitKernel>("T_Wait");
  kernels.add<RecvKernel>("T_Recv");
  kernels.add<InputKernel>("T_Input");
  kernels.add<ArmAllocFailureKernel>("T_ArmAllocFailure");
  return true;
}();

Output node(Graph& g, const std::string& type, const std::string& name,
            std::vector<Output> inputs = {}, AttrMap attrs = {},
            std::vector<Operation> control = {}) {
  NodeSpec spec;
  spec.type = type;
  spec.name = name;
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.control_inputs = std::move(control);
  return g.create_op(std::move(spec)).output(0);
}

Device& test_device() {
  static Device device("/job:localhost/replica:0/task:0/device:CPU:0");
  return device;
}

// An executor over every node of `g` except the fed ones.
std::unique_ptr<Executor> make_executor(const Graph& g, const std::vector<Output>& fetches,
                                        const std::vector<Output>& feeds = {}) {
  Executor::Params params;
  params.graph = &g;
  std::set<int> fed;
  for (const Output& f : feeds) {
    params.feeds.push_back(f.id());
    fed.insert(f.op().id());
  }
  for (int i = 0; i < static_cast<int>(g.num_nodes()); ++i)
    if (!fed.count(i)) params.nodes.push_back(i);
  for (const Output& f : fetches) params.fetches.push_back(f.id());
  params.device_for = [](const detail::Node&) -> Device& { return test_device(); };
  return std::make_unique<Executor>(std::move(params));
}

// One step started with run_async: it owns the step's context, rendezvous and cancellation
// manager (alive until `done`), and records what `done` got.
struct StepRun {
  LocalRendezvous rendezvous;
  CancellationManager cancellation;
  StepContext step;
  std::mutex mutex;
  std::condition_variable changed;
  int done_calls = 0;
  Status status;
  std::vector<Tensor> fetches;

  bool finished() {
    std::lock_guard lock(mutex);
    return done_calls > 0;
  }
  // Waits (at most 10 s) for the step to finish.
  bool wait() {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return done_calls > 0; });
  }
};

// `prepare` may change the step before it starts (cancel it, give it a StepActivity).
std::shared_ptr<StepRun> start(const Executor& executor, ThreadPool* pool,
                               std::vector<Tensor> feeds = {},
                               const std::function<void(StepRun&)>& prepare = {}) {
  auto run = std::make_shared<StepRun>();
  run->step.rendezvous = &run->rendezvous;
  run->step.cancellation = &run->cancellation;
  if (prepare) prepare(*run);
  executor.run_async(run->step, std::move(feeds), pool, [run](Status s, std::vector<Tensor> out) {
    std::lock_guard lock(run->mutex);
    ++run->done_calls;
    run->status = std::move(s);
    run->fetches = std::move(out);
    run->changed.notify_all();
  });
  return run;
}

float scalar_of(const Tensor& t) { return t.data<float>()[0]; }

}  // namespace

TEST_CASE("a node runs only after all its data and control inputs, with or without a pool") {
  // A random DAG: node i takes up to two data inputs and up to two control inputs from earlier
  // nodes and computes i + 1 plus its inputs.
  Graph g;
  std::vector<Output> outs;
  std::vector<std::vector<int>> data_in, control_in;
  std::vector<float> expected;
  std::mt19937 rng(12345);
  constexpr int kNodes = 60;
  for (int i = 0; i < kNodes; ++i) {
    std::vector<int> data, control;
    if (i > 0) {
      for (int k = static_cast<int>(rng() % 3); k > 0; --k)
        data.push_back(static_cast<int>(rng() % static_cast<unsigned>(i)));
      for (int k = static_cast<int>(rng() % 3); k > 0; --k)
        control.push_back(static_cast<int>(rng() % static_cast<unsigned>(i)));
    }
    std::vector<Output> inputs;
    std::vector<Operation> controls;
    float value = static_cast<float>(i + 1);
    for (int d : data) {
      inputs.push_back(outs[static_cast<std::size_t>(d)]);
      value += expected[static_cast<std::size_t>(d)];
    }
    for (int c : control) controls.push_back(outs[static_cast<std::size_t>(c)].op());
    outs.push_back(node(g, "T_Value", "n" + std::to_string(i), inputs,
                        {{"value", static_cast<double>(i + 1)}}, controls));
    data_in.push_back(data);
    control_in.push_back(control);
    expected.push_back(value);
  }
  const auto executor = make_executor(g, outs);
  REQUIRE(executor->num_nodes() == kNodes);

  ThreadPool pool(4);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (int step = 0; step < 5; ++step) {
      recorder().reset();
      auto run = start(*executor, p);
      REQUIRE(run->wait());
      REQUIRE(run->status.ok());
      REQUIRE(run->fetches.size() == kNodes);
      std::lock_guard lock(recorder().mutex);
      int wrong_values = 0, wrong_runs = 0, out_of_order = 0;
      for (int i = 0; i < kNodes; ++i) {
        const std::string name = std::string("n").append(std::to_string(i));  // see below
        wrong_values += scalar_of(run->fetches[static_cast<std::size_t>(i)]) !=
                        expected[static_cast<std::size_t>(i)];
        wrong_runs += recorder().runs[name] != 1;
        const int started = recorder().ticks[name].first;
        for (const auto* inputs :
             {&data_in[static_cast<std::size_t>(i)], &control_in[static_cast<std::size_t>(i)]})
          for (int src : *inputs)
            // not "n" + std::to_string(src): GCC 12 at -O3 flags it with a false -Wrestrict
            out_of_order +=
                recorder().ticks[std::string("n").append(std::to_string(src))].second > started;
      }
      CHECK(wrong_values == 0);
      CHECK(wrong_runs == 0);
      CHECK(out_of_order == 0);
    }
  }
}

TEST_CASE("a control input alone orders two nodes that share no data") {
  recorder().reset();
  Graph g;
  Output first = node(g, "T_Value", "first", {}, {{"sleep_ms", std::int64_t{30}}});
  Output second = node(g, "T_Value", "second", {}, {}, {first.op()});
  Output unrelated = node(g, "T_Value", "unrelated");
  const auto executor = make_executor(g, {second, unrelated});
  ThreadPool pool(2);
  auto run = start(*executor, &pool);
  REQUIRE(run->wait());
  REQUIRE(run->status.ok());
  std::lock_guard lock(recorder().mutex);
  CHECK(recorder().ticks["first"].second < recorder().ticks["second"].first);
  CHECK(recorder().runs["first"] == 1);
}

TEST_CASE("frames the thread holds are released before an expensive kernel, not a cheap one") {
  // The holder stands for Connection::HeldWrites: it notes the recorder's clock when released.
  struct Holder {
    std::vector<int> released_at;
    static void release(void* self) {
      static_cast<Holder*>(self)->released_at.push_back(recorder().clock.load());
    }
  } holder;
  const detail::OutputHolder previous = detail::hold_output({&Holder::release, &holder});
  recorder().reset();
  {
    Graph g;
    Output value = node(g, "T_Value", "value");  // expensive, as kernels are by default
    const auto executor = make_executor(g, {value});
    auto run = start(*executor, nullptr);  // no pool: it runs here, on the holding thread
    REQUIRE(run->wait());
    REQUIRE(run->status.ok());
  }
  REQUIRE(holder.released_at.size() == 1);
  CHECK(holder.released_at[0] <= recorder().ticks["value"].first);
  {
    Graph g;
    Output cheap = node(g, "T_Fail", "cheap", {},
                        {{"code", static_cast<std::int64_t>(ErrorCode::invalid_argument)},
                         {"message", std::string("cheap ran")}});
    const auto executor = make_executor(g, {cheap});
    auto run = start(*executor, nullptr);
    REQUIRE(run->wait());
    CHECK(run->status.code() == ErrorCode::invalid_argument);  // it ran, and released nothing
  }
  CHECK(holder.released_at.size() == 1);
  detail::hold_output(previous);
}

TEST_CASE("a throwing kernel fails the step with its typed error, and no branch hangs") {
  recorder().reset();
  Graph g;
  Output fail = node(g, "T_Fail", "fail", {},
                     {{"code", static_cast<std::int64_t>(ErrorCode::invalid_argument)},
                      {"message", std::string("bad value 42")}});
  Output after = node(g, "T_Value", "after", {fail});
  // Other branches: one waits for a tensor nobody sends, one waits for a cancel, one computes.
  Output recv = node(g, "T_Recv", "recv", {}, {{"key", std::string("never sent")}});
  Output after_recv = node(g, "T_Value", "after_recv", {recv});
  Output wait = node(g, "T_Wait", "wait");
  Output side = node(g, "T_Value", "side2", {node(g, "T_Value", "side1")});
  const auto executor = make_executor(g, {after, after_recv, wait, side});

  for (const bool with_pool : {false, true}) {
    std::optional<ThreadPool> pool;
    if (with_pool) pool.emplace(2);
    auto run = start(*executor, pool ? &*pool : nullptr);
    REQUIRE(run->wait());
    // Every task of the step has run once the pool is joined (without a pool, before start()
    // returned): a second call of done would have come by now.
    pool.reset();
    std::lock_guard lock(run->mutex);
    CHECK(run->done_calls == 1);
    CHECK(run->status.code() == ErrorCode::invalid_argument);
    CHECK_THAT(run->status.message(),
               Catch::Contains("bad value 42") && Catch::Contains("T_Fail 'fail'"));
    CHECK(run->fetches.empty());
    CHECK(recorder().runs_of("after") == 0);
    CHECK(recorder().runs_of("after_recv") == 0);
    // The step's rendezvous and cancellation manager were told, with the same error.
    CHECK(run->rendezvous.aborted());
    CHECK(run->cancellation.status().code() == ErrorCode::invalid_argument);
  }

  // The blocking form throws the typed exception.
  StepContext step;
  LocalRendezvous rendezvous;
  CancellationManager cancellation;
  step.rendezvous = &rendezvous;
  step.cancellation = &cancellation;
  ThreadPool pool(2);
  CHECK_THROWS_AS(executor->run(step, {}, &pool), InvalidArgument);
}

TEST_CASE("a kernel throwing a non-psflow exception fails the step as Internal") {
  Graph g;
  Output fail =
      node(g, "T_Fail", "fail", {},
           {{"code", std::int64_t{0}}, {"message", std::string("plain exception")}, {"std", true}});
  const auto executor = make_executor(g, {fail});
  auto run = start(*executor, nullptr);
  REQUIRE(run->wait());
  CHECK(run->status.code() == ErrorCode::internal);
  CHECK_THAT(run->status.message(), Catch::Contains("plain exception"));
}

TEST_CASE("an allocation failing in the executor itself fails the step typed, and it ends") {
  // T_ArmAllocFailure makes the executor's next allocation on that thread fail, outside any
  // kernel: the list of a node's inputs (more than 8), or room for the ops after a node.
  recorder().reset();
  Graph g;
  std::string where;
  Output last;
  SECTION("gathering the inputs of the next op") {
    // x feeds wide 8 times, so room for all of them is made when x finishes, before arm runs.
    Output x = node(g, "T_Value", "x");
    Output arm = node(g, "T_ArmAllocFailure", "arm", {x});
    std::vector<Output> inputs(8, x);
    inputs.push_back(arm);
    last = node(g, "T_Value", "after", {node(g, "T_Value", "wide", inputs)});
    where = "running T_Value 'wide'";
  }
  SECTION("making room for the ops after one") {
    Output arm = node(g, "T_ArmAllocFailure", "arm");
    last = node(g, "T_Value", "after", {node(g, "T_Value", "wide", std::vector<Output>(9, arm))});
    where = "scheduling the ops after T_ArmAllocFailure 'arm'";
  }
  const auto executor = make_executor(g, {last});
  auto run = start(*executor, nullptr);
  REQUIRE(run->wait());
  fail_next_allocation = false;
  std::lock_guard lock(run->mutex);
  CHECK(run->done_calls == 1);
  CHECK(run->status.code() == ErrorCode::resource_exhausted);
  CHECK_THAT(run->status.message(), Catch::Contains(where));
  CHECK(recorder().runs_of("wide") == 0);
  CHECK(recorder().runs_of("after") == 0);
}

TEST_CASE("a step waiting in an asynchronous kernel ends with the status of a cancel") {
  recorder().reset();
  Graph g;
  Output wait = node(g, "T_Wait", "wait");
  Output after = node(g, "T_Value", "after", {wait});
  Output other = node(g, "T_Value", "other", {}, {{"value", 2.0}});
  const auto executor = make_executor(g, {after, other});
  ThreadPool pool(2);
  auto run = start(*executor, &pool);
  REQUIRE(recorder().wait_for_waiting(1));
  // It really waits: the pool has run everything else, only the waiting kernel can end it.
  REQUIRE(psflow::testing::drain(pool));
  CHECK_FALSE(run->finished());

  run->cancellation.cancel(Status(ErrorCode::deadline_exceeded, "stop now"));
  REQUIRE(run->wait());
  std::lock_guard lock(run->mutex);
  CHECK(run->done_calls == 1);
  CHECK(run->status.code() == ErrorCode::deadline_exceeded);
  CHECK_THAT(run->status.message(),
             Catch::Contains("stop now") && Catch::Contains("T_Wait 'wait'"));
  CHECK(recorder().runs_of("after") == 0);
  CHECK(run->rendezvous.aborted());  // the error aborted the step's rendezvous too
}

TEST_CASE("a step's activity shows the op it waits in while it waits, and none once done") {
  recorder().reset();
  Graph g;
  Output wait = node(g, "T_Wait", "wait");
  Output after = node(g, "T_Value", "after", {wait});
  const auto executor = make_executor(g, {after});
  StepActivity activity(executor->num_nodes());
  ThreadPool pool(2);
  auto run = start(*executor, &pool, {}, [&](StepRun& r) { r.step.activity = &activity; });
  REQUIRE(recorder().wait_for_waiting(1));
  const auto running = activity.running();
  REQUIRE(running.size() == 1);
  CHECK(executor->describe_op(running[0]) == "T_Wait 'wait'");
  run->cancellation.cancel(Status(ErrorCode::aborted, "stop"));
  REQUIRE(run->wait());
  CHECK(activity.running().empty());
}

TEST_CASE("a step cancelled from outside starts no further op and ends with the cancel's status") {
  recorder().reset();
  Graph g;
  Output first = node(g, "T_Value", "first");
  Output second = node(g, "T_Value", "second", {first});
  const auto executor = make_executor(g, {second});
  auto run = start(*executor, nullptr, {}, [](StepRun& r) {
    r.cancellation.cancel(Status(ErrorCode::deadline_exceeded, "out of time"));
  });
  REQUIRE(run->wait());
  const Status status = run->status;
  CHECK(status.code() == ErrorCode::deadline_exceeded);
  CHECK_THAT(status.message(), Catch::Contains("out of time"));
  CHECK(recorder().runs_of("first") == 0);
  CHECK(recorder().runs_of("second") == 0);
}

TEST_CASE(
    "a receive waiting in the rendezvous: an abort ends the step with its status, a send completes "
    "it") {
  recorder().reset();
  Graph g;
  Output recv = node(g, "T_Recv", "recv", {}, {{"key", std::string("k")}});
  Output after = node(g, "T_Value", "after", {recv}, {{"value", 1.0}});
  const auto executor = make_executor(g, {after, recv});
  ThreadPool pool(2);

  SECTION("abort") {
    auto run = start(*executor, &pool);
    REQUIRE(recorder().wait_for_waiting(1));
    CHECK_FALSE(run->finished());
    run->rendezvous.abort(Status(ErrorCode::unavailable, "ps0 is gone"));
    REQUIRE(run->wait());
    CHECK(run->status.code() == ErrorCode::unavailable);
    CHECK_THAT(run->status.message(),
               Catch::Contains("ps0 is gone") && Catch::Contains("T_Recv 'recv'"));
    CHECK(recorder().runs_of("after") == 0);
  }
  SECTION("send") {
    auto run = start(*executor, &pool);
    REQUIRE(recorder().wait_for_waiting(1));
    const Tensor value = Tensor::filled(4.0f, {8});
    REQUIRE(run->rendezvous.send("k", value).ok());
    REQUIRE(run->wait());
    REQUIRE(run->status.ok());
    REQUIRE(run->fetches.size() == 2);
    CHECK(scalar_of(run->fetches[0]) == 5.0f);
    CHECK(run->fetches[1].shares_buffer_with(value));
  }
}

TEST_CASE("an output is released once its last consumer has run, a fetched one is kept") {
  // keep -> c1 -> (control) p1 -> c2 (also reads keep) -> (control) p2: p1 runs between the two
  // consumers of keep's output, p2 after both.
  Graph g;
  Output keep = node(g, "T_Keep", "keep");
  Output c1 = node(g, "T_Value", "c1", {keep});
  Output p1 = node(g, "T_Probe", "p1", {}, {}, {c1.op()});
  Output c2 = node(g, "T_Value", "c2", {keep, p1});
  Output p2 = node(g, "T_Probe", "p2", {}, {}, {c2.op()});
  ThreadPool pool(2);

  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    SECTION(p ? "on a pool" : "on the calling thread") {
      SECTION("not fetched") {
        recorder().reset();
        const auto executor = make_executor(g, {p1, p2, c2});
        auto run = start(*executor, p);
        REQUIRE(run->wait());
        REQUIRE(run->status.ok());
        CHECK(scalar_of(run->fetches[0]) == 0.0f);  // c2 still needs it
        CHECK(scalar_of(run->fetches[1]) == 1.0f);  // released after c2, before the step ended
        CHECK(scalar_of(run->fetches[2]) == 1.0f);  // keep[0] + p1
        std::lock_guard lock(recorder().mutex);
        CHECK(recorder().kept.is_sole_owner());
      }
      SECTION("fetched") {
        recorder().reset();
        const auto executor = make_executor(g, {p1, p2, keep});
        auto run = start(*executor, p);
        REQUIRE(run->wait());
        REQUIRE(run->status.ok());
        CHECK(scalar_of(run->fetches[0]) == 0.0f);
        CHECK(scalar_of(run->fetches[1]) == 0.0f);  // kept for the fetch
        std::lock_guard lock(recorder().mutex);
        CHECK(run->fetches[2].shares_buffer_with(recorder().kept));
      }
    }
  }
}

TEST_CASE("several steps run at once on one executor, each with its own feeds and result") {
  recorder().reset();
  recorder().trace = false;
  Graph g;
  Output x = node(g, "T_Input", "x");
  Output a = node(g, "T_Value", "a", {x}, {{"value", 1.0}});
  Output b = node(g, "T_Value", "b", {a}, {{"value", 2.0}});
  Output c = node(g, "T_Value", "c", {a}, {{"value", 3.0}});
  Output d = node(g, "T_Value", "d", {b, c});  // 2x + 7
  const auto executor = make_executor(g, {d, x}, {x});
  ThreadPool pool(2);

  constexpr int kThreads = 6, kSteps = 40;
  std::vector<int> wrong(kThreads, 0), unfinished(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::shared_ptr<StepRun>> runs;
      for (int s = 0; s < kSteps; ++s)  // all started before any is waited for
        runs.push_back(
            start(*executor, t % 2 ? &pool : nullptr, {Tensor(static_cast<float>(t * 1000 + s))}));
      for (int s = 0; s < kSteps; ++s) {
        StepRun& run = *runs[static_cast<std::size_t>(s)];
        if (!run.wait()) {
          ++unfinished[static_cast<std::size_t>(t)];
          continue;
        }
        std::lock_guard lock(run.mutex);
        const float fed = static_cast<float>(t * 1000 + s);
        if (!run.status.ok() || run.fetches.size() != 2 ||
            scalar_of(run.fetches[0]) != 2 * fed + 7 || scalar_of(run.fetches[1]) != fed)
          ++wrong[static_cast<std::size_t>(t)];
      }
    });
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    CHECK(unfinished[static_cast<std::size_t>(t)] == 0);
    CHECK(wrong[static_cast<std::size_t>(t)] == 0);
  }
}

TEST_CASE(
    "without nodes, done comes at once with the fetched feeds, a wrong feed count is refused") {
  Graph g;
  Output x = node(g, "T_Input", "x");
  const auto executor = make_executor(g, {x}, {x});
  CHECK(executor->num_nodes() == 0);
  const Tensor fed = Tensor::filled(3.0f, {2});
  auto run = start(*executor, nullptr, {fed});
  CHECK(run->finished());  // synchronously
  REQUIRE(run->status.ok());
  REQUIRE(run->fetches.size() == 1);
  CHECK(run->fetches[0].shares_buffer_with(fed));
  CHECK_THROWS_AS(start(*executor, nullptr, {}), Internal);
}

TEST_CASE("an op type without a kernel fails when the executor is built, naming the node") {
  Graph g;
  Output orphan = node(g, "T_NoKernel", "orphan");
  try {
    make_executor(g, {orphan});
    FAIL("an executor was built for a node without a kernel");
  } catch (const NotFound& e) {
    CHECK_THAT(e.message(), Catch::Contains("T_NoKernel 'orphan'"));
  }
}
