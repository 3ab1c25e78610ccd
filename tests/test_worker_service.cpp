// WorkerService in-process, without a network: a registered partition runs for a step, taking
// tensors delivered for the step (also before it starts) and handing its sends to other tasks
// to RemoteSend; abort_step fails a running step; deregistered and unknown handles fail typed;
// steps that never start are swept; the destructor ends running steps; a lost connection to a
// task fails the running steps that receive from it.
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "psflow/distributed/worker_service.hpp"
#include "support/pool_drain.hpp"

using namespace psflow;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = "/job:worker/replica:0/task:0/device:CPU:0";
const std::string kPs = "/job:ps/replica:0/task:0/device:CPU:0";
constexpr std::int64_t kPsIncarnation = 7, kWorkerIncarnation = 9;
const std::string kInKey = rendezvous_key(kPs, kPsIncarnation, kWorker, "x:0");
const std::string kOutKey = rendezvous_key(kWorker, kWorkerIncarnation, kPs, "y:0");

// T_Scale: a float32 tensor times attr "factor" (defined here: no graph op headers needed).
class ScaleKernel : public OpKernel {
 public:
  explicit ScaleKernel(const OpKernelConstruction& c)
      : factor_(static_cast<float>(c.attr<double>("factor"))) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, DType::float32, in.shape());
    for (std::size_t i = 0; i < in.size(); ++i)
      out.data<float>()[i] = in.data<float>()[i] * factor_;
  }

 private:
  float factor_;
};

[[maybe_unused]] const bool registered = [] {
  OpRegistry::global().add(
      OpDef{"T_Scale", 1, {}, false, [](const InferenceContext& ctx) {
              return std::vector<OutputSpec>{OutputSpec{ctx.input_dtypes[0], ctx.input_shapes[0]}};
            }});
  KernelRegistry::global().add<ScaleKernel>("T_Scale");
  return true;
}();

// The worker's partition of "y = 2 * x" with x on the ps and y needed there: _Recv x from the
// ps, scale, _Send y back. `ps`: the ps device x comes from.
GraphDef scale_partition(const std::string& ps = kPs) {
  GraphDef def;
  def.nodes.push_back(NodeDef{"recv_x",
                              "_Recv",
                              {},
                              kWorker,
                              {{"tensor_name", std::string("x:0")},
                               {"send_device", ps},
                               {"send_device_incarnation", kPsIncarnation},
                               {"recv_device", kWorker},
                               {"dtype", DType::float32},
                               {"shape", std::vector<std::int64_t>{3}},
                               {"shape_known", true}}});
  def.nodes.push_back(NodeDef{"scale", "T_Scale", {"recv_x:0"}, kWorker, {{"factor", 2.0}}});
  def.nodes.push_back(NodeDef{"send_y",
                              "_Send",
                              {"scale:0"},
                              kWorker,
                              {{"tensor_name", std::string("y:0")},
                               {"send_device", kWorker},
                               {"send_device_incarnation", kWorkerIncarnation},
                               {"recv_device", kPs}}});
  return def;
}

Tensor f32(std::vector<float> values) {
  const std::size_t n = values.size();
  return Tensor::from_vector(values, {n});
}

// What the service handed out (remote sends) and how its steps ended, from any thread.
struct Outbox {
  struct Sent {
    std::string device;
    std::uint64_t step = 0;
    std::string key;
    Tensor value;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Sent> sent;
  std::map<std::uint64_t, std::vector<Status>> done;  // step -> statuses its done got

  WorkerService::RemoteSend remote_send() {
    return [this](const std::string& device, std::uint64_t step, const std::string& key,
                  Tensor value) {
      std::lock_guard lock(mutex);
      sent.push_back({device, step, key, std::move(value)});
      changed.notify_all();
    };
  }
  std::function<void(Status)> on_done(std::uint64_t step) {
    return [this, step](Status s) {
      std::lock_guard lock(mutex);
      done[step].push_back(std::move(s));
      changed.notify_all();
    };
  }
  // Waits (at most 10 s) until step `step` is done; its status.
  std::optional<Status> wait_done(std::uint64_t step) {
    std::unique_lock lock(mutex);
    if (!changed.wait_for(lock, 10s, [&] { return !done[step].empty(); })) return std::nullopt;
    return done[step].front();
  }
  bool is_done(std::uint64_t step) {
    std::lock_guard lock(mutex);
    return !done[step].empty();
  }
};

struct Fixture {
  Outbox outbox;  // before the service: its destructor may still call into it
  Device device{kWorker};
  ThreadPool pool{2};
  WorkerService service{device, &pool, outbox.remote_send()};
};

}  // namespace

TEST_CASE("a registered partition runs for a step: tensors for the step in, its sends out") {
  Fixture f;
  const std::string handle = f.service.register_graph(scale_partition());
  CHECK_FALSE(handle.empty());
  f.service.run_graph(handle, 1, f.outbox.on_done(1));
  CHECK(f.service.active_steps() == 1);
  CHECK_FALSE(f.outbox.is_done(1));  // it waits for x
  f.service.deliver(1, kInKey, f32({1, 2, 3}));

  const auto status = f.outbox.wait_done(1);
  REQUIRE(status);
  CHECK(status->ok());
  std::lock_guard lock(f.outbox.mutex);
  REQUIRE(f.outbox.sent.size() == 1);
  CHECK(f.outbox.sent[0].device == kPs);
  CHECK(f.outbox.sent[0].step == 1);
  CHECK(f.outbox.sent[0].key == kOutKey);
  CHECK(f.outbox.sent[0].value.equals(f32({2, 4, 6})));
  CHECK(f.outbox.done[1].size() == 1);
  CHECK(f.service.active_steps() == 0);
}

TEST_CASE("a tensor delivered before its step starts is kept for it") {
  Fixture f;
  const std::string handle = f.service.register_graph(scale_partition());
  f.service.deliver(5, kInKey, f32({-1, 0, 1}));
  CHECK(f.service.active_steps() == 1);
  f.service.run_graph(handle, 5, f.outbox.on_done(5));
  const auto status = f.outbox.wait_done(5);
  REQUIRE(status);
  CHECK(status->ok());
  std::lock_guard lock(f.outbox.mutex);
  REQUIRE(f.outbox.sent.size() == 1);
  CHECK(f.outbox.sent[0].step == 5);
  CHECK(f.outbox.sent[0].value.equals(f32({-2, 0, 2})));
}

TEST_CASE("abort_step fails a running step with its status, the step cannot run again") {
  Fixture f;
  const std::string handle = f.service.register_graph(scale_partition());
  f.service.run_graph(handle, 7, f.outbox.on_done(7));
  REQUIRE(psflow::testing::drain(f.pool));  // nothing of step 7 is left to run until x comes
  CHECK_FALSE(f.outbox.is_done(7));
  f.service.abort_step(7, Status(ErrorCode::unavailable, "step 7 failed on ps0"));
  const auto status = f.outbox.wait_done(7);
  REQUIRE(status);
  CHECK(status->code() == ErrorCode::unavailable);
  CHECK_THAT(status->message(), Catch::Contains("step 7 failed on ps0"));
  CHECK(f.service.active_steps() == 0);

  f.service.deliver(7, kInKey, f32({1, 2, 3}));  // late: dropped
  CHECK(f.service.active_steps() == 0);
  f.service.run_graph(handle, 7, f.outbox.on_done(7));
  std::lock_guard lock(f.outbox.mutex);
  REQUIRE(f.outbox.done[7].size() == 2);  // the refusal came at once
  CHECK(f.outbox.done[7][1].code() == ErrorCode::aborted);
  CHECK_THAT(f.outbox.done[7][1].message(), Catch::Contains("already ran"));
  CHECK(f.outbox.sent.empty());
}

TEST_CASE("an abort that arrives before its step makes the step fail at once") {
  Fixture f;
  const std::string handle = f.service.register_graph(scale_partition());
  f.service.abort_step(8, Status(ErrorCode::aborted, "the master gave up"));
  f.service.run_graph(handle, 8, f.outbox.on_done(8));
  const auto status = f.outbox.wait_done(8);
  REQUIRE(status);
  CHECK(status->code() == ErrorCode::aborted);
  CHECK_THAT(status->message(), Catch::Contains("the master gave up"));
}

TEST_CASE("several steps of one partition run at once, each with its own tensors") {
  Fixture f;
  const std::string handle = f.service.register_graph(scale_partition());
  constexpr std::uint64_t kFirst = 20, kSteps = 16;
  for (std::uint64_t s = kFirst; s < kFirst + kSteps; ++s)
    f.service.run_graph(handle, s, f.outbox.on_done(s));
  std::vector<std::thread> deliverers;
  for (int t = 0; t < 2; ++t)
    deliverers.emplace_back([&, t] {
      for (std::uint64_t s = kFirst + kSteps - 1 - static_cast<std::uint64_t>(t);
           s >= kFirst && s < kFirst + kSteps; s -= 2)
        f.service.deliver(s, kInKey, f32({static_cast<float>(s), 0, 1}));
    });
  for (auto& d : deliverers) d.join();
  for (std::uint64_t s = kFirst; s < kFirst + kSteps; ++s) {
    const auto status = f.outbox.wait_done(s);
    REQUIRE(status);
    CHECK(status->ok());
  }
  std::lock_guard lock(f.outbox.mutex);
  REQUIRE(f.outbox.sent.size() == kSteps);
  int wrong = 0;
  for (const auto& sent : f.outbox.sent)
    wrong += !sent.value.equals(f32({2.0f * static_cast<float>(sent.step), 0, 2}));
  CHECK(wrong == 0);
  CHECK(f.service.active_steps() == 0);
}

TEST_CASE("a deregistered or unknown handle fails the run with Aborted, naming the handle") {
  Fixture f;
  const std::string handle = f.service.register_graph(scale_partition());
  const std::string other = f.service.register_graph(scale_partition());
  CHECK(other != handle);
  f.service.deregister_graph(handle);
  f.service.run_graph(handle, 10, f.outbox.on_done(10));
  f.service.run_graph("graph-999", 11, f.outbox.on_done(11));
  {
    std::lock_guard lock(f.outbox.mutex);
    REQUIRE(f.outbox.done[10].size() == 1);  // at once, on this thread
    CHECK(f.outbox.done[10][0].code() == ErrorCode::aborted);
    CHECK_THAT(f.outbox.done[10][0].message(),
               Catch::Contains(handle) && Catch::Contains("not registered"));
    REQUIRE(f.outbox.done[11].size() == 1);
    CHECK(f.outbox.done[11][0].code() == ErrorCode::aborted);
    CHECK_THAT(f.outbox.done[11][0].message(), Catch::Contains("graph-999"));
  }
  CHECK(f.service.active_steps() == 0);  // a refused run leaves no step state behind

  // The other registration is untouched.
  f.service.deliver(12, kInKey, f32({1, 1, 1}));
  f.service.run_graph(other, 12, f.outbox.on_done(12));
  const auto status = f.outbox.wait_done(12);
  REQUIRE(status);
  CHECK(status->ok());
}

TEST_CASE("a partition with a node on another device or a missing input is refused") {
  Fixture f;
  GraphDef elsewhere = scale_partition();
  elsewhere.nodes[1].device = kPs;
  try {
    f.service.register_graph(elsewhere);
    FAIL("a partition with a node on the ps was registered on the worker");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.message(), Catch::Contains("'scale'") && Catch::Contains(kPs));
  }
  GraphDef dangling = scale_partition();
  dangling.nodes[1].inputs = {"nowhere:0"};
  CHECK_THROWS_AS(f.service.register_graph(dangling), InvalidArgument);
}

TEST_CASE("state of steps that never start is swept after the orphan time-to-live") {
  Outbox outbox;
  Device device{kWorker};
  SECTION("a zero time-to-live sweeps at the next new step") {
    WorkerService service(device, nullptr, outbox.remote_send(), std::chrono::seconds(0));
    service.deliver(100, kInKey, f32({1, 2, 3}));
    CHECK(service.active_steps() == 1);
    std::this_thread::sleep_for(5ms);  // step 100's age, under test: older than the zero TTL
    service.deliver(101, kInKey, f32({1, 2, 3}));
    CHECK(service.active_steps() == 1);  // 100 is gone
  }
  SECTION("the default keeps them") {
    WorkerService service(device, nullptr, outbox.remote_send());
    service.deliver(100, kInKey, f32({1, 2, 3}));
    std::this_thread::sleep_for(5ms);  // step 100's age, under test: far below the default TTL
    service.deliver(101, kInKey, f32({1, 2, 3}));
    CHECK(service.active_steps() == 2);
  }
}

TEST_CASE("destroying the service fails its running steps and waits for them") {
  Outbox outbox;
  Device device{kWorker};
  ThreadPool pool(2);
  {
    WorkerService service(device, &pool, outbox.remote_send());
    service.run_graph(service.register_graph(scale_partition()), 30, outbox.on_done(30));
    CHECK_FALSE(outbox.is_done(30));
  }
  std::lock_guard lock(outbox.mutex);
  REQUIRE(outbox.done[30].size() == 1);
  CHECK(outbox.done[30][0].code() == ErrorCode::aborted);
  CHECK_THAT(outbox.done[30][0].message(), Catch::Contains("shutting down"));
}

TEST_CASE("a lost connection fails the steps receiving from that task, and only those") {
  Fixture f;
  const std::string ps1 = "/job:ps/replica:0/task:1/device:CPU:0";
  const std::string from_ps0 = f.service.register_graph(scale_partition());
  const std::string from_ps1 = f.service.register_graph(scale_partition(ps1));
  f.service.run_graph(from_ps0, 11, f.outbox.on_done(11));
  f.service.run_graph(from_ps1, 12, f.outbox.on_done(12));
  // A step that has tensors waiting but never started is not a running partition.
  f.service.deliver(13, kInKey, f32({1}));
  CHECK(f.service.abort_steps_receiving_from("/job:worker/replica:0/task:0",
                                             Status(ErrorCode::unavailable, "not a source")) == 0);

  const Status lost(ErrorCode::unavailable,
                    "connection to /job:ps/replica:0/task:0 at 127.0.0.1:2222 lost: the peer "
                    "sent nothing for 10.0 s");
  CHECK(f.service.abort_steps_receiving_from("/job:ps/replica:0/task:0", lost) == 1);
  const auto status = f.outbox.wait_done(11);
  REQUIRE(status);
  CHECK(status->code() == ErrorCode::unavailable);
  CHECK_THAT(status->message(), Catch::Contains("sent nothing for 10.0 s"));
  REQUIRE(psflow::testing::drain(f.pool));  // the abort has done all it would do
  CHECK_FALSE(f.outbox.is_done(12));        // it receives from ps1 only: still waiting

  f.service.deliver(12, rendezvous_key(ps1, kPsIncarnation, kWorker, "x:0"), f32({1, 2, 3}));
  const auto other = f.outbox.wait_done(12);
  REQUIRE(other);
  CHECK(other->ok());
  CHECK(f.service.abort_steps_receiving_from("/job:ps/replica:0/task:1", lost) == 0);
}
