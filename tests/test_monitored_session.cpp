// MonitoredTrainingSession with real ps processes: hooks, a shared stop step, a non-chief
// waiting for the chief, recovery when the ps is killed and restarted, and the log of each
// recovery attempt when it never comes back; also how often it logs global_step/sec, and
// restore_fallback past a corrupt newest checkpoint.
#include <catch2/catch.hpp>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "psflow/psflow.hpp"
#include "psflow/train/global_step.hpp"
#include "support/error_message.hpp"
#include "support/local_cluster.hpp"
#include "support/log_capture.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using psflow::testing::ChildProcess;
using psflow::testing::loopback;
using psflow::testing::reserve_port;
using psflow::testing::TempDir;

namespace {

// One ps process and `workers` worker addresses.
struct PsCluster : psflow::testing::LocalCluster {
  explicit PsCluster(int workers) : LocalCluster(1, workers) {}
};

// A "model" whose training step adds 1 to w and to the global step.
struct CounterModel {
  Graph g;
  Variable global_step, w;
  Operation train_op;
  CounterModel(const ClusterSpec& cluster, int task) {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:" + std::to_string(task), .cluster = cluster}));
    global_step = train::get_or_create_global_step(g);
    w = get_variable(g, "w", {2}, zeros_initializer());
    Output add_w = w.assign_add(ops::constant(g, Tensor::filled(1.0f, {2})));
    Output add_step = global_step.assign_add(ops::constant(g, Tensor(std::int64_t{1})));
    train_op = ops::group({add_w.op(), add_step.op()}, "train");
  }
};

// In one process: a graph whose step adds 1 to the global step.
struct StepGraph {
  Graph g;
  Variable global_step = train::get_or_create_global_step(g);
  Operation train_op = global_step.assign_add(ops::constant(g, Tensor(std::int64_t{1}))).op();
};

// In one process, a checkpoint into `dir` every 5 global steps (and none by time).
train::MonitoredTrainingSessionOptions checkpoint_every_5(const std::string& dir) {
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir;
  o.save_checkpoint_steps = 5;
  o.save_checkpoint_secs.reset();
  o.log_step_count_steps = 0;
  return o;
}

train::MonitoredTrainingSessionOptions mts_options(const Server& server, bool chief,
                                                   std::int64_t last_step) {
  train::MonitoredTrainingSessionOptions o;
  o.master = server.target();
  o.is_chief = chief;
  o.hooks = {train::StopAtStepHook(last_step)};
  o.log_step_count_steps = 0;
  o.recovery_wait_secs = 0.1;
  o.ready_deadline_secs = 30;
  o.recovery_deadline_secs = 30;
  o.stop_ps_when_done = false;  // each test stops its ps itself (end_of_training tests the rest)
  return o;
}

}  // namespace

TEST_CASE("save_checkpoint_steps saves on its multiples of the global step, as TF does") {
  TempDir checkpoints("mts-every-5");
  StepGraph step_graph;
  auto& [g, global_step, train_op] = step_graph;
  auto options = checkpoint_every_5(checkpoints.path());
  options.max_checkpoints_to_keep = 10;
  options.hooks = {train::StopAtStepHook(17)};
  {
    train::MonitoredTrainingSession sess(g, options);
    while (!sess.should_stop()) sess.run(train_op);
  }
  const auto state = train::get_checkpoint_state(checkpoints.path());
  REQUIRE(state);
  std::vector<std::string> names;
  for (const auto& path : state->all_model_checkpoint_paths) {
    CHECK(std::filesystem::path(path).parent_path() == checkpoints.path());  // joined, as TF
    names.push_back(std::filesystem::path(path).filename().string());
  }
  // at creation, every 5 steps, and at the end
  CHECK(names == std::vector<std::string>{"model.ckpt-0", "model.ckpt-5", "model.ckpt-10",
                                          "model.ckpt-15", "model.ckpt-17"});
}

TEST_CASE("every session starts its metrics at zero, and checkpoints leave them out") {
  TempDir checkpoints("mts-metrics");
  StepGraph step_graph;
  auto& [g, global_step, train_op] = step_graph;
  auto [mean, mean_update] = metrics::mean(ops::cast(global_step.value(), DType::float32));
  auto options = checkpoint_every_5(checkpoints.path());
  options.hooks = {train::StopAtStepHook(3)};
  {
    train::MonitoredTrainingSession sess(g, options);
    CHECK(sess.raw_session().run({mean})[0].scalar<float>() == 0.0f);  // initialized, empty
    while (!sess.should_stop()) sess.run(train_op);
    sess.raw_session().run(mean_update);  // adds global step 3
    CHECK(sess.raw_session().run({mean})[0].scalar<float>() == 3.0f);
  }
  // In one process the variables outlive a session: only the local initializer zeroes it.
  train::MonitoredTrainingSession again(g, options);
  CHECK(again.raw_session().run({global_step.value()})[0].scalar<std::int64_t>() == 3);
  CHECK(again.raw_session().run({mean})[0].scalar<float>() == 0.0f);
  const auto latest = train::latest_checkpoint(checkpoints.path());
  REQUIRE(latest);
  for (const auto& [name, value] : train::read_checkpoint(train::checkpoint_file_path(*latest)))
    CHECK(name.rfind("mean/", 0) != 0);
}

TEST_CASE("StopAtStepHook stops every worker at the shared global step") {
  PsCluster cluster(2);
  Server w0(cluster.spec(), "worker", 0, cluster.quiet()),
      w1(cluster.spec(), "worker", 1, cluster.quiet());
  CounterModel m0(cluster.spec(), 0), m1(cluster.spec(), 1);
  train::MonitoredTrainingSession chief(m0.g, mts_options(w0, true, 60));
  std::atomic<int> other_steps{0};
  std::thread other([&] {
    train::MonitoredTrainingSession sess(m1.g, mts_options(w1, false, 60));
    while (!sess.should_stop()) {
      sess.run(m1.train_op);
      ++other_steps;
    }
  });
  int chief_steps = 0;
  while (!chief.should_stop()) {
    chief.run(m0.train_op);
    ++chief_steps;
  }
  other.join();
  const auto step = chief.raw_session().run({m0.global_step.value()})[0].scalar<std::int64_t>();
  CHECK(step >= 60);
  CHECK(step <= 62);  // each worker may finish the step it was in
  CHECK(chief_steps + other_steps.load() == step);
  w0.stop_job("ps");
}

TEST_CASE("a non-chief started before the chief waits, then trains") {
  PsCluster cluster(2);
  Server w0(cluster.spec(), "worker", 0, cluster.quiet()),
      w1(cluster.spec(), "worker", 1, cluster.quiet());
  CounterModel m0(cluster.spec(), 0), m1(cluster.spec(), 1);
  std::atomic<bool> non_chief_ready{false};
  std::int64_t seen_by_non_chief = -1;
  psflow::testing::LogCapture log;
  std::thread non_chief([&] {
    train::MonitoredTrainingSession sess(m1.g,
                                         mts_options(w1, false, 1000));  // waits for the chief
    non_chief_ready = true;
    sess.run(m1.train_op);
    seen_by_non_chief = sess.raw_session().run({m1.w.value()})[0].values<float>()[0];
  });
  // The non-chief has looked and found the model uninitialized: it says so, and waits.
  REQUIRE(log.wait_for("waiting for the chief to initialize the model"));
  CHECK_FALSE(non_chief_ready.load());
  train::MonitoredTrainingSession chief(m0.g, mts_options(w0, true, 1000));
  non_chief.join();
  CHECK(non_chief_ready.load());
  CHECK(seen_by_non_chief >= 1);
  w0.stop_job("ps");
}

TEST_CASE("run_timeout_in_ms bounds every run whose RunOptions leave the timeout unset") {
  PsCluster cluster(1);
  Server w0(cluster.spec(), "worker", 0, cluster.quiet());
  CounterModel m0(cluster.spec(), 0);
  Output stuck;
  {
    auto on_ps = m0.g.device("/job:ps/task:0");
    stuck = ops::token_queue_dequeue(m0.g, "never_filled", /*timeout_ms=*/0);
  }
  auto options = mts_options(w0, true, 10);
  options.run_timeout_in_ms = 200;
  train::MonitoredTrainingSession mts(m0.g, options);
  CHECK_THAT(psflow::testing::deadline_exceeded_message([&] { mts.run({stuck}); }),
             Catch::Contains("timeout_in_ms = 200"));
  // A run's own timeout wins over the default.
  CHECK_THAT(psflow::testing::deadline_exceeded_message(
                 [&] { mts.run(RunOptions{.timeout_in_ms = 150}, {stuck}, {}, {}, nullptr); }),
             Catch::Contains("timeout_in_ms = 150"));
  mts.run(m0.train_op);  // the session keeps working
  CHECK(mts.raw_session().run({m0.w.value()})[0].data<float>()[0] == 1.0f);
  mts.close();
  w0.stop_job("ps");
}

TEST_CASE("a non-chief whose chief never comes gives up with DeadlineExceeded naming a variable") {
  PsCluster cluster(2);
  Server w1(cluster.spec(), "worker", 1, cluster.quiet());
  CounterModel m1(cluster.spec(), 1);
  auto options = mts_options(w1, false, 10);
  options.ready_deadline_secs = 1;
  CHECK_THROWS_WITH(train::MonitoredTrainingSession(m1.g, options),
                    Catch::Contains("global_step") || Catch::Contains("w"));
  w1.stop_job("ps");
}

TEST_CASE("startup_timeout_secs also bounds a non-chief's wait for the chief, named as such") {
  PsCluster cluster(2);
  Server w1(cluster.spec(), "worker", 1, cluster.quiet());
  CounterModel m1(cluster.spec(), 1);
  auto options = mts_options(w1, false, 10);
  options.ready_deadline_secs.reset();  // the deprecated alias unset: startup_timeout_secs rules
  options.startup_timeout_secs = 1;
  CHECK_THROWS_WITH(train::MonitoredTrainingSession(m1.g, options),
                    Catch::Contains("waited 1 s (startup_timeout_secs) for the chief"));
  w1.stop_job("ps");
}

TEST_CASE(
    "after the ps is killed and restarted, the chief restores its checkpoint and training "
    "continues") {
  PsCluster cluster(1);
  TempDir checkpoints("mts-ckpt");
  Server w0(cluster.spec(), "worker", 0, cluster.quiet());
  CounterModel m0(cluster.spec(), 0);
  auto options = mts_options(w0, true, 40);
  options.checkpoint_dir = checkpoints.path();
  options.save_checkpoint_steps = 5;
  options.save_checkpoint_secs.reset();
  train::MonitoredTrainingSession chief(m0.g, options);
  for (int i = 0; i < 20; ++i) chief.run(m0.train_op);
  const auto saved = train::latest_checkpoint(checkpoints.path());
  REQUIRE(saved);

  cluster.ps[0]->kill(SIGKILL);
  REQUIRE(cluster.ps[0]->wait_for(10s));
  psflow::testing::LogCapture log;
  std::thread restart([&] {
    // Once the chief's run has failed against the dead ps, the ps comes back.
    log.wait_for("re-creating the session", 30s);
    cluster.start_ps(0);
  });
  chief.run(m0.train_op);  // fails, re-creates the session (restoring), retries
  restart.join();
  auto values = chief.raw_session().run({m0.global_step.value(), m0.w.value()});
  const auto step = values[0].scalar<std::int64_t>();
  CHECK(step >= 16);  // resumed from a checkpoint at step >= 15, plus the retried step
  CHECK(step <= 21);
  // w moved in lockstep with the global step, also through the restore.
  CHECK(values[1].values<float>()[0] == static_cast<float>(step));
  while (!chief.should_stop()) chief.run(m0.train_op);
  CHECK(chief.raw_session().run({m0.global_step.value()})[0].scalar<std::int64_t>() >= 40);
  chief.close();
  w0.stop_job("ps");
}

TEST_CASE(
    "every recovery attempt is logged with its number, the error and the time left, until it "
    "gives up") {
  PsCluster cluster(1);
  Server w0(cluster.spec(), "worker", 0, cluster.quiet(1s));
  CounterModel m0(cluster.spec(), 0);
  auto options = mts_options(w0, true, 1000);
  options.recovery_wait_secs = 0.2;
  options.recovery_deadline_secs = 3;
  train::MonitoredTrainingSession chief(m0.g, options);
  for (int i = 0; i < 3; ++i) chief.run(m0.train_op);

  std::mutex mutex;
  std::vector<std::string> lines;
  const int owner = 0;
  detail::set_log_sink(
      [&](std::string_view line) {
        std::lock_guard lock(mutex);
        lines.emplace_back(line);
      },
      &owner);
  struct Restore {
    const void* owner;
    ~Restore() { detail::clear_log_sink(owner); }
  } restore{&owner};
  cluster.ps[0]->kill(SIGKILL);
  REQUIRE(cluster.ps[0]->wait_for(10s));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(chief.run(m0.train_op), Unavailable);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  detail::clear_log_sink(&owner);

  std::lock_guard lock(mutex);
  std::string all;
  for (const auto& line : lines) all += line + "\n";
  INFO(all);
  CHECK(took < 3 + 1 + 5);  // the recovery deadline, one connect timeout, slack
  CHECK_THAT(all, Catch::Contains("run failed (") &&
                      Catch::Contains("s left before recovery_deadline_secs (3 s)"));
  int attempts = 0;
  for (const auto& line : lines) {
    const std::string numbered = "recovery attempt " + std::to_string(attempts + 1) + " failed (";
    if (line.find(numbered) == std::string::npos) continue;
    ++attempts;
    CHECK_THAT(line, Catch::Contains("/job:ps/replica:0/task:0") &&
                         (Catch::Contains("s left before recovery_deadline_secs (3 s)") ||
                          Catch::Contains("giving up")));
  }
  CHECK(attempts >= 2);
  CHECK_THAT(lines.back(), Catch::Contains("giving up: recovery_deadline_secs (3 s) passed"));
}

TEST_CASE(
    "global_step/sec is logged every log_step_count_steps when set, else at most once per 10 s") {
  StepGraph step_graph;
  auto& [g, global_step, train_op] = step_graph;
  struct Logged {
    std::size_t lines;
    double seconds;
  };
  auto run_logging = [&](std::optional<std::int64_t> every) {
    psflow::testing::LogCapture log;
    train::MonitoredTrainingSessionOptions options;
    options.log_step_count_steps = every;
    options.hooks = {train::StopAfterStepsHook(250)};
    const auto started = std::chrono::steady_clock::now();
    {
      train::MonitoredTrainingSession sess(g, options);
      while (!sess.should_stop()) sess.run(train_op);
    }
    const std::string text = log.text();
    std::size_t lines = 0;
    for (std::size_t at = 0; (at = text.find("global_step/sec", at)) != std::string::npos; ++at)
      ++lines;
    return Logged{
        lines, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()};
  };
  CHECK(run_logging(100).lines == 2);  // steps 100 and 200 after the first
  CHECK(run_logging(0).lines == 0);
  const Logged by_default = run_logging(std::nullopt);
  CHECK(static_cast<double>(by_default.lines) <= by_default.seconds / 10);
}

TEST_CASE("restore_fallback restores the previous checkpoint kept when the newest is corrupt") {
  TempDir checkpoints("mts-fallback");
  StepGraph step_graph;
  auto& [g, global_step, train_op] = step_graph;
  auto options = checkpoint_every_5(checkpoints.path());
  {
    options.hooks = {train::StopAtStepHook(12)};
    train::MonitoredTrainingSession sess(g, options);
    while (!sess.should_stop()) sess.run(train_op);
  }  // checkpoints at 0, 5, 10 and 12
  const auto newest = train::latest_checkpoint(checkpoints.path());
  REQUIRE(newest);
  {
    std::fstream f(train::checkpoint_file_path(*newest),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-12, std::ios::end);
    f.put('\x55');
  }
  options.hooks = {};
  CHECK_THROWS_AS(train::MonitoredTrainingSession(g, options), DataLoss);  // the default
  options.restore_fallback = true;
  psflow::testing::LogCapture log;
  train::MonitoredTrainingSession sess(g, options);
  CHECK(sess.raw_session().run({global_step.value()})[0].scalar<std::int64_t>() == 10);
  CHECK_THAT(log.text(), Catch::Contains("skipping " + *newest + " (DataLoss") &&
                             Catch::Contains("model.ckpt-10"));
}
