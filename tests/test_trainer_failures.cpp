// The trainer example as real ps and worker processes on loopback, through the failures the
// recovery table in README describes: a ps killed and restarted, a ps frozen with SIGSTOP and
// resumed, a worker killed and restarted, the chief killed (async and sync), a sync backup
// replica dying, and 2 ps + 2 workers with variables on both ps. Every wait is bounded; each test
// kills only the processes it started. Short runs on the real Fashion-MNIST files; the release
// build runs them (they are timed by wall clock, which sanitizers stretch; the in-process
// equivalents run under the sanitizers in test_monitored_session and test_sync_replicas).
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/trainer_runs.hpp"

using namespace std::chrono_literals;
using psflow::testing::ChildProcess;
using psflow::testing::contains;
using psflow::testing::join;
using psflow::testing::largest_match;
using psflow::testing::last_logged_step;
using psflow::testing::loopback;
using psflow::testing::reserve_port;
using psflow::testing::short_run;
using psflow::testing::TempDir;
using psflow::testing::test_accuracy;

namespace {

// Every task of one trainer cluster. Restarting a task starts a new process with a new log.
class TrainerCluster {
 public:
  TrainerCluster(int num_ps, int num_workers, std::vector<std::string> flags)
      : flags_(std::move(flags)),
        ps_(static_cast<std::size_t>(num_ps)),
        workers_(static_cast<std::size_t>(num_workers)) {
    for (int i = 0; i < num_ps; ++i) ps_hosts_.push_back(loopback(reserve_port()));
    for (int i = 0; i < num_workers; ++i) worker_hosts_.push_back(loopback(reserve_port()));
    flags_.push_back("--checkpoint_dir=" + checkpoints());
  }

  std::string checkpoints() const { return dir_ / "checkpoints"; }

  void start_all() {
    for (std::size_t i = 0; i < ps_.size(); ++i) start("ps", static_cast<int>(i));
    for (std::size_t i = 0; i < workers_.size(); ++i) start("worker", static_cast<int>(i));
  }

  // (Re)starts one task.
  void start(const std::string& job, int index) {
    std::vector<std::string> argv{PSFLOW_TRAINER_BINARY, "--ps_hosts=" + join(ps_hosts_),
                                  "--worker_hosts=" + join(worker_hosts_), "--job_name=" + job,
                                  "--task_index=" + std::to_string(index)};
    argv.insert(argv.end(), flags_.begin(), flags_.end());
    const std::string log = dir_ / (job + std::to_string(index) + "-" + std::to_string(++starts_));
    tasks(job)[static_cast<std::size_t>(index)] = std::make_unique<ChildProcess>(argv, log);
  }

  ChildProcess& ps(int i) { return *ps_.at(static_cast<std::size_t>(i)); }
  ChildProcess& worker(int i) { return *workers_.at(static_cast<std::size_t>(i)); }
  int num_workers() const { return static_cast<int>(workers_.size()); }

  void kill(ChildProcess& task) {
    task.kill(SIGKILL);
    REQUIRE(task.wait_for(10s));
  }

  // Waits for every task to exit; false when one is still running after `limit`.
  bool wait_all(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (auto* group : {&workers_, &ps_})
      for (auto& task : *group) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (!task->wait_for(std::max(left, std::chrono::milliseconds(0)))) return false;
      }
    return true;
  }

  // Every task's standard error, for the failure message.
  std::string logs() {
    std::string out;
    for (auto* group : {&ps_, &workers_})
      for (std::size_t i = 0; i < group->size(); ++i)
        if ((*group)[i])
          out += "---- " + std::string(group == &ps_ ? "ps" : "worker") + std::to_string(i) +
                 " (latest start)\n" + (*group)[i]->err() + (*group)[i]->out();
    return out;
  }

 private:
  std::vector<std::unique_ptr<ChildProcess>>& tasks(const std::string& job) {
    return job == "ps" ? ps_ : workers_;
  }

  TempDir dir_{"trainer-failures"};
  std::vector<std::string> flags_;
  std::vector<std::string> ps_hosts_, worker_hosts_;
  std::vector<std::unique_ptr<ChildProcess>> ps_, workers_;
  int starts_ = 0;
};

// Polls `text()` every 50 ms until `done(text())` or `limit`; true when it came.
template <class Text, class Done>
bool eventually(Text text, Done done, std::chrono::seconds limit) {
  return psflow::testing::eventually([&] { return done(text()); }, limit, 50ms);
}

// The step of the last checkpoint the chief logged as saved ("saved checkpoint .../model.ckpt-N").
std::int64_t last_saved_step(const std::string& log) {
  static const std::regex line(R"(saved checkpoint \S*model\.ckpt-(\d+))");
  return largest_match(log, line);
}

// Waits until every worker is training (it logged its start; training can outrun a non-chief's
// first readiness poll) and the chief has trained past `step` and saved a checkpoint after
// step 0; returns that checkpoint's step.
std::int64_t wait_for_progress(TrainerCluster& cluster, std::int64_t step) {
  auto going = [&] {
    for (int i = 0; i < cluster.num_workers(); ++i)
      if (!contains(cluster.worker(i).err(),
                    "worker " + std::to_string(i) + ": starting at global step"))
        return false;
    const std::string chief = cluster.worker(0).err();
    return last_logged_step(chief) >= step && last_saved_step(chief) > 0;
  };
  if (!eventually([] { return 0; }, [&](int) { return going(); }, 90s))
    FAIL("the workers did not all get training within 90 s:\n" << cluster.logs());
  return last_saved_step(cluster.worker(0).err());
}

// The step of the checkpoint the chief's session restored ("restoring <dir>/model.ckpt-N").
std::optional<std::int64_t> restored_step(const std::string& log) {
  static const std::regex line(R"(restoring \S*model\.ckpt-(\d+))");
  std::smatch m;
  if (!std::regex_search(log, m, line)) return std::nullopt;
  return std::stoll(m[1]);
}

// The chief's session restored a checkpoint at least as new as `saved`; returns its step.
std::int64_t require_restored_at_least(TrainerCluster& cluster, std::int64_t saved) {
  const std::string chief = cluster.worker(0).err();
  INFO(chief);
  const auto restored = restored_step(chief);
  REQUIRE(restored);
  CHECK(*restored >= saved);
  return *restored;
}

// Every worker exited 0, and the chief reported an accuracy that shows training happened.
void require_clean_end(TrainerCluster& cluster, int num_workers,
                       std::chrono::seconds limit = 120s) {
  INFO(cluster.logs());
  REQUIRE(cluster.wait_all(limit));
  for (int i = 0; i < num_workers; ++i) {
    INFO("worker " << i);
    CHECK(cluster.worker(i).exit_code() == 0);
  }
  const auto accuracy = test_accuracy(cluster.worker(0).out());
  REQUIRE(accuracy);
  CHECK(*accuracy > 0.6);
}

}  // namespace

TEST_CASE("2 ps + 2 workers: the variables are spread over both ps and the model trains") {
  TrainerCluster cluster(2, 2, short_run(400));
  cluster.start_all();
  require_clean_end(cluster, 2);
  const std::string chief = cluster.worker(0).err();
  static const std::regex held(R"(ps(\d) \(/job:ps/task:\d\): (\d+) variables)");
  int ps_with_variables = 0;
  for (auto it = std::sregex_iterator(chief.begin(), chief.end(), held);
       it != std::sregex_iterator(); ++it)
    if (std::stoi((*it)[2]) > 0) ++ps_with_variables;
  CHECK(ps_with_variables == 2);
  for (int i = 0; i < 2; ++i) CHECK(cluster.ps(i).exit_code() == 0);  // told to stop at the end
}

TEST_CASE(
    "async: a ps killed mid-training and restarted: workers recover, the chief restores, the run "
    "finishes") {
  TrainerCluster cluster(1, 2, short_run(1200));
  cluster.start_all();
  const std::int64_t saved = wait_for_progress(cluster, 300);
  cluster.kill(cluster.ps(0));
  {
    // Both workers notice within the connect deadline (5 s here) and keep retrying.
    INFO(cluster.logs());
    for (int i = 0; i < 2; ++i)
      CHECK(eventually(
          [&] { return cluster.worker(i).err(); },
          [](const std::string& log) { return contains(log, "re-creating the session"); }, 15s));
  }
  cluster.start("ps", 0);
  require_clean_end(cluster, 2);
  require_restored_at_least(cluster, saved);  // the latest checkpoint from before the kill
  // The new ps process (new incarnation) was never read as if nothing had happened: every worker
  // failed over to a new session and then finished its loop.
  CHECK(contains(cluster.worker(1).err(), "re-creating the session"));
  CHECK(contains(cluster.worker(1).err(), "worker 1 done"));
}

TEST_CASE(
    "async: a ps stopped with SIGSTOP is declared dead by the workers within the heartbeat "
    "timeout, resumed it serves again and the run finishes") {
  TrainerCluster cluster(1, 2, short_run(1200, {"--heartbeat_timeout_s=2"}));
  cluster.start_all();
  wait_for_progress(cluster, 300);
  {
    // Frozen: no FIN, no RST, its sockets stay open; only the heartbeats can tell.
    psflow::testing::StoppedProcess frozen(cluster.ps(0));
    const auto stopped = std::chrono::steady_clock::now();
    INFO(cluster.logs());
    for (int i = 0; i < 2; ++i)
      REQUIRE(eventually([&] { return cluster.worker(i).err(); },
                         [](const std::string& log) { return contains(log, "declared dead"); },
                         30s));
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
    INFO("both workers declared the ps dead after " << took << " s");
    CHECK(took < 2 + 8);  // --heartbeat_timeout_s=2, generous slack for a loaded machine
    std::this_thread::sleep_for(1s);  // the frozen ps under test stays frozen a while longer
  }                                   // SIGCONT
  require_clean_end(cluster, 2);
  for (int i = 0; i < 2; ++i) {
    const std::string log = cluster.worker(i).err();
    INFO(log);
    CHECK(contains(log, "/job:ps/replica:0/task:0"));
    CHECK(contains(log, "re-creating the session"));
  }
  REQUIRE(cluster.ps(0).wait_for(30s));
  CHECK(cluster.ps(0).exit_code() == 0);
}

TEST_CASE("async: a non-chief worker killed mid-training: the others go on, restarted it rejoins") {
  TrainerCluster cluster(1, 2, short_run(1500));
  cluster.start_all();
  wait_for_progress(cluster, 200);
  cluster.kill(cluster.worker(1));
  const std::int64_t at_kill = last_logged_step(cluster.worker(0).err());
  {
    INFO(cluster.logs());
    REQUIRE(eventually(
        [&] { return cluster.worker(0).err(); },
        [&](const std::string& log) { return last_logged_step(log) >= at_kill + 200; }, 60s));
  }
  cluster.start("worker", 1);
  require_clean_end(cluster, 2);
  const std::string rejoined = cluster.worker(1).err();
  INFO(rejoined);
  static const std::regex start(R"(worker 1: starting at global step (\d+))");
  std::smatch m;
  REQUIRE(std::regex_search(rejoined, m, start));
  CHECK(std::stoll(m[1]) >= at_kill + 200);  // joined the running model, did not reset it
  CHECK(contains(rejoined, "worker 1 done"));
  CHECK(contains(rejoined, "reported done"));
}

TEST_CASE(
    "async: the chief killed after a checkpoint and restarted resumes from it with its values") {
  TrainerCluster cluster(1, 2, short_run(2000));
  cluster.start_all();
  const std::int64_t saved = wait_for_progress(cluster, 300);
  cluster.kill(cluster.worker(0));
  cluster.start("worker", 0);
  require_clean_end(cluster, 2);
  const std::int64_t restored = require_restored_at_least(cluster, saved);
  const std::string chief = cluster.worker(0).err();
  INFO(chief);
  static const std::regex start(R"(worker 0: starting at global step (\d+))");
  std::smatch m;
  REQUIRE(std::regex_search(chief, m, start));
  CHECK(std::stoll(m[1]) >= restored);
  // The saved values came back: the first loss logged after the restart is that of a trained
  // model (a fresh one starts near ln(10) = 2.3).
  static const std::regex loss(R"(global step \d+: loss (\d+\.\d+))");
  REQUIRE(std::regex_search(chief, m, loss));
  CHECK(std::stod(m[1]) < 1.5);
}

TEST_CASE(
    "sync: with the chief gone the other workers wait, then fail with a clear error at the "
    "deadline") {
  TrainerCluster cluster(1, 2, short_run(2000, {"--sync_replicas", "--token_timeout_s=3"}));
  cluster.start_all();
  wait_for_progress(cluster, 100);
  cluster.kill(cluster.worker(0));
  ChildProcess& waiting = cluster.worker(1);
  INFO(cluster.logs());
  REQUIRE(waiting.wait_for(30s));
  CHECK(waiting.exit_code() == 1);
  CHECK(contains(waiting.err(), "DeadlineExceeded"));
  CHECK(contains(waiting.err(), "chief"));
  cluster.ps(0).kill(SIGKILL);  // nobody is left to tell it to stop
}

TEST_CASE(
    "sync: the chief killed and restarted: the other workers wait for it and the run finishes") {
  TrainerCluster cluster(1, 2, short_run(600, {"--sync_replicas", "--token_timeout_s=60"}));
  cluster.start_all();
  const std::int64_t saved = wait_for_progress(cluster, 200);
  cluster.kill(cluster.worker(0));
  std::this_thread::sleep_for(500ms);  // the time without a chief is under test: ride it out
  CHECK(cluster.worker(1).running());  // waiting for the chief's go-ahead, within its deadline
  cluster.start("worker", 0);
  require_clean_end(cluster, 2);
  require_restored_at_least(cluster, saved);
  // The waiting worker got a token from the new chief instead of timing out.
  CHECK(contains(cluster.worker(0).err(),
                 "released 1 replica(s) waiting for a previous chief's token"));
}

TEST_CASE(
    "sync with a backup replica (3 workers, 2 aggregated): one worker dies, training goes on") {
  TrainerCluster cluster(
      1, 3,
      short_run(600, {"--sync_replicas", "--replicas_to_aggregate=2", "--orphan_timeout_s=3"}));
  cluster.start_all();
  wait_for_progress(cluster, 100);
  cluster.kill(cluster.worker(2));
  INFO(cluster.logs());
  REQUIRE(cluster.worker(0).wait_for(120s));
  REQUIRE(cluster.worker(1).wait_for(30s));
  CHECK(cluster.worker(0).exit_code() == 0);
  CHECK(cluster.worker(1).exit_code() == 0);
  CHECK(last_logged_step(cluster.worker(0).err()) >= 550);
  const auto accuracy = test_accuracy(cluster.worker(0).out());
  REQUIRE(accuracy);
  CHECK(*accuracy > 0.6);
  REQUIRE(cluster.ps(0).wait_for(30s));
  CHECK(cluster.ps(0).exit_code() == 0);
}
