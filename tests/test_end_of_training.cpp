// The end of training (distributed/end_of_training.hpp, MonitoredTrainingSession): each
// worker's session reports done when it closes, the last one stops the ps tasks (real
// processes) so their join() returns; the finished workers survive a restarted ps; a session
// that failed does not report, and its ps stops after orphan_timeout; stop_ps_when_done = false
// keeps TF1's ps; start-up gives up within startup_timeout_secs. Also README.md's
// between-graph program, exactly as it is written there, run as 1 ps + 2 workers.
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "psflow/distributed/end_of_training.hpp"
#include "psflow/distributed/server_core.hpp"
#include "psflow/psflow.hpp"
#include "support/local_cluster.hpp"
#include "support/log_capture.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using psflow::testing::ChildProcess;
using psflow::testing::LocalCluster;
using psflow::testing::loopback;
using psflow::testing::reserve_port;
using psflow::testing::TempDir;

namespace {

// A worker's model: each training step adds 1 to the global step, which lives on the ps.
struct StepCounter {
  Graph g;
  Variable global_step;
  Operation train_op;
  StepCounter(const ClusterSpec& cluster, int task) {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:" + std::to_string(task), .cluster = cluster}));
    global_step = train::get_or_create_global_step(g);
    train_op = global_step.assign_add(ops::constant(g, Tensor(std::int64_t{1}))).op();
  }
};

train::MonitoredTrainingSessionOptions ending_options(const Server& server, bool chief,
                                                      std::int64_t last_step) {
  train::MonitoredTrainingSessionOptions o;
  o.master = server.target();
  o.is_chief = chief;
  o.hooks = {train::StopAtStepHook(last_step)};
  o.log_step_count_steps = 0;
  o.recovery_wait_secs = 0.1;
  o.recovery_deadline_secs = 30;
  o.startup_timeout_secs = 30;
  return o;
}

void train_to_the_end(train::MonitoredTrainingSession& sess, const StepCounter& model) {
  for (int bound = 0; !sess.should_stop() && bound < 100000; ++bound) sess.run(model.train_op);
  REQUIRE(sess.should_stop());
}

// One ps process and two workers in this process, the chief's session open.
struct ChiefAndOther {
  LocalCluster cluster{1, 2};
  Server w0{cluster.spec(), "worker", 0, cluster.quiet()};
  Server w1{cluster.spec(), "worker", 1, cluster.quiet()};
  StepCounter m0{cluster.spec(), 0}, m1{cluster.spec(), 1};
  const std::int64_t last_step;
  train::MonitoredTrainingSession chief;
  explicit ChiefAndOther(std::int64_t last)
      : last_step(last), chief(m0.g, ending_options(w0, true, last)) {}
  // The other worker trains to the last step, then its session is destroyed: it reports.
  void other_trains_to_the_end() {
    train::MonitoredTrainingSession other(m1.g, ending_options(w1, false, last_step));
    train_to_the_end(other, m1);
  }
};

}  // namespace

TEST_CASE("the finished workers merge, and cover the cluster's workers, the chief first") {
  const ClusterSpec cluster({{"ps", {"h:1"}}, {"worker", {"h:2", "h:3"}}, {"chief", {"h:4"}}});
  const auto all = detail::training_tasks(cluster);
  CHECK(all == std::vector<std::string>{"/job:chief/replica:0/task:0",
                                        "/job:worker/replica:0/task:0",
                                        "/job:worker/replica:0/task:1"});
  detail::EndOfTraining state;
  CHECK_FALSE(state.ends_itself());
  CHECK(state.merge({all[2]}) == std::vector<std::string>{all[2]});
  CHECK(state.merge({all[2], all[0]}) == std::vector<std::string>{all[0], all[2]});
  CHECK_FALSE(detail::covers(state.finished(), all));
  state.merge({all[1]});
  CHECK(detail::covers(state.finished(), all));
  CHECK(detail::parse_finished_text(detail::finished_text(state.finished())) == all);
  CHECK(detail::parse_finished_text("").empty());
  state.set_ends_itself();
  CHECK(state.ends_itself());
}

TEST_CASE("the last worker's session to close stops the ps process, whose join() returns") {
  ChiefAndOther run(30);
  auto& [cluster, w0, w1, m0, m1, last_step, chief] = run;
  run.other_trains_to_the_end();  // reports: 1 of 2 done
  CHECK(w1.core().finished_workers() == std::vector<std::string>{"/job:worker/replica:0/task:1"});
  // A stop request is logged by the ps before it is acknowledged, so one sent would show here.
  CHECK_THAT(cluster.ps[0]->err(), !Catch::Contains("asked to stop"));
  train_to_the_end(chief, m0);
  // should_stop() alone reports nothing: the chief may still use its session.
  CHECK(chief.raw_session().run({m0.global_step.value()})[0].scalar<std::int64_t>() >= 30);
  CHECK_THAT(cluster.ps[0]->err(), !Catch::Contains("asked to stop"));
  chief.close();
  REQUIRE(cluster.ps[0]->wait_for(30s));
  INFO("ps stderr:\n" << cluster.ps[0]->err());
  CHECK(cluster.ps[0]->exit_code() == 0);
  CHECK_THAT(cluster.ps[0]->err(),
             Catch::Contains("finished training (1 of 2 workers done)") &&
                 Catch::Contains("finished training (2 of 2 workers done)") &&
                 Catch::Contains("asked to stop by /job:worker/replica:0/task:0"));
}

TEST_CASE("a ps restarted after a worker finished is still stopped: the chief kept the report") {
  ChiefAndOther run(20);
  auto& [cluster, w0, w1, m0, m1, last_step, chief] = run;
  run.other_trains_to_the_end();
  CHECK(w0.core().finished_workers() == std::vector<std::string>{"/job:worker/replica:0/task:1"});
  cluster.ps[0]->kill(SIGKILL);
  REQUIRE(cluster.ps[0]->wait_for(10s));
  cluster.start_ps(0);          // a new process: it knows of no finished worker
  train_to_the_end(chief, m0);  // recovers (initializing again), trains to the step
  chief.close();
  REQUIRE(cluster.ps[0]->wait_for(30s));
  INFO("ps stderr:\n" << cluster.ps[0]->err());
  CHECK(cluster.ps[0]->exit_code() == 0);
  CHECK_THAT(cluster.ps[0]->err(), Catch::Contains("finished training (2 of 2 workers done)"));
}

TEST_CASE("a session that failed does not report: its ps stops after orphan_timeout, saying why") {
  LocalCluster cluster(1, 1, /*start=*/false);
  cluster.ps_flags[0] = {"--orphan_timeout_s=1"};
  cluster.start_ps(0);
  auto worker = std::make_unique<Server>(cluster.spec(), "worker", 0, cluster.quiet());
  StepCounter model(cluster.spec(), 0);
  try {
    train::MonitoredTrainingSession sess(model.g, ending_options(*worker, true, 1000));
    sess.run(model.train_op);
    throw std::runtime_error("the training loop failed");  // destroys the session unwinding
  } catch (const std::runtime_error&) {
  }
  CHECK(worker->core().finished_workers().empty());
  CHECK_THAT(cluster.ps[0]->err(), !Catch::Contains("asked to stop"));
  worker.reset();  // the worker process is gone: its connections close
  REQUIRE(cluster.ps[0]->wait_for(60s));
  INFO("ps stderr:\n" << cluster.ps[0]->err());
  CHECK(cluster.ps[0]->exit_code() == 0);
  CHECK_THAT(cluster.ps[0]->err(), Catch::Contains("ServerOptions::orphan_timeout") &&
                                       Catch::Contains("the chief failed for good"));
}

TEST_CASE("stop_ps_when_done = false keeps TF1's ps: it serves after every worker closed") {
  LocalCluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  StepCounter model(cluster.spec(), 0);
  auto options = ending_options(worker, true, 10);
  options.stop_ps_when_done = false;
  {
    train::MonitoredTrainingSession sess(model.g, options);
    train_to_the_end(sess, model);
  }
  Session plain(model.g, worker.target());  // the ps still answers
  CHECK(plain.run({model.global_step.value()})[0].scalar<std::int64_t>() >= 10);
  CHECK(cluster.ps[0]->running());
  CHECK(worker.stop_job("ps") == 1);
  REQUIRE(cluster.ps[0]->wait_for(30s));
}

TEST_CASE("a worker whose ps never answers fails within startup_timeout_secs, naming it") {
  LocalCluster cluster(1, 1, /*start=*/false);  // nobody listens at the ps address
  ServerOptions logging = cluster.quiet();
  logging.log = true;
  logging.wait_log_interval = 100ms;
  Server worker(cluster.spec(), "worker", 0, logging);
  StepCounter model(cluster.spec(), 0);
  auto options = ending_options(worker, true, 10);
  options.startup_timeout_secs = 2;
  psflow::testing::LogCapture log;
  const auto started = std::chrono::steady_clock::now();
  try {
    train::MonitoredTrainingSession sess(model.g, options);
    FAIL("the session started without its ps");
  } catch (const Unavailable& e) {
    CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:0") &&
                             Catch::Contains(cluster.ps_hosts[0]) &&
                             Catch::Contains("startup_timeout_secs (2 s)"));
  }
  const auto waited = std::chrono::steady_clock::now() - started;
  CHECK(waited >= 1900ms);
  CHECK(waited < 20s);  // the promise is 2 s; the margin is for a loaded machine
  // Logged less and less often: at 0, 0.1, 0.2, 0.4, 0.8 and 1.6 s, not every 0.1 s.
  const std::string lines = log.text();
  std::size_t waits = 0;
  for (std::size_t at = 0; (at = lines.find("waiting for /job:ps", at)) != std::string::npos; ++at)
    ++waits;
  CHECK(waits >= 2);
  CHECK(waits <= 8);
}

#ifdef PSFLOW_README_PROGRAM
TEST_CASE("README's between-graph program runs as 1 ps + 2 workers, every process exiting 0") {
  const std::string ps_host = loopback(reserve_port());
  const std::string workers = loopback(reserve_port()) + "," + loopback(reserve_port());
  TempDir logs("readme-program");
  auto task = [&](const std::string& job, int index) {
    return std::vector<std::string>{PSFLOW_README_PROGRAM, "--ps_hosts=" + ps_host,
                                    "--worker_hosts=" + workers, "--job_name=" + job,
                                    "--task_index=" + std::to_string(index)};
  };
  ChildProcess ps(task("ps", 0), logs / "ps");
  ChildProcess chief(task("worker", 0), logs / "worker0");
  ChildProcess other(task("worker", 1), logs / "worker1");
  // Three minutes for all of them together.
  const auto deadline = std::chrono::steady_clock::now() + 180s;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  };
  const bool ended = chief.wait_for(left()) && other.wait_for(left()) && ps.wait_for(left());
  INFO("ps stderr:\n"
       << ps.err() << "\nworker 0 stderr:\n"
       << chief.err() << "\nworker 1 stderr:\n"
       << other.err());
  REQUIRE(ended);
  CHECK(chief.exit_code() == 0);
  CHECK(other.exit_code() == 0);
  CHECK(ps.exit_code() == 0);
}
#endif
