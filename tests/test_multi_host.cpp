// psflow across real hosts: every task in its own network namespace with its own address, the
// hosts joined by a Linux bridge (support/netns.hpp), instead of every task on 127.0.0.1. The
// add/mul/div demo and the Fashion-MNIST trainer run there as they would on separate machines,
// and a ps whose link is cut (no FIN, no RST: it just goes silent) must be reported by both
// workers within the heartbeat timeout plus 9 s.
//
// Needs root (network namespaces, a bridge, veth pairs), iproute2 and nsenter: without them every
// test prints "*** MULTI-HOST TEST CANNOT RUN: <reason> ***" and fails. Run with
// `ctest -R multi_host` (release pass of scripts/test.sh only: the runs are timed by wall clock).
// Every wait is bounded; each test kills only the processes it started (RAII).
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/demo_command.hpp"
#include "support/eventually.hpp"
#include "support/files.hpp"
#include "support/netns.hpp"
#include "support/temp_dir.hpp"
#include "support/trainer_runs.hpp"

using namespace std::chrono_literals;
using psflow::testing::ChildProcess;
using psflow::testing::CommandResult;
using psflow::testing::contains;
using psflow::testing::eventually;
using psflow::testing::join;
using psflow::testing::last_logged_step;
using psflow::testing::short_run;
using psflow::testing::TempDir;
using psflow::testing::test_accuracy;
using psflow::testing::TestNetwork;

namespace {

// Every task listens on this port of its own host: each host has its own port space.
constexpr unsigned short kPort = 2222;

// Opens a TCP connection from host `from` to `address` (bash's /dev/tcp), for at most `limit`.
CommandResult try_connect(const TestNetwork& net, int from, const std::string& address,
                          std::chrono::milliseconds limit) {
  const std::string bash = psflow::testing::detail::find_program("bash");
  REQUIRE(!bash.empty());
  return net.run_on_host(
      from, {bash, "-c", "exec 3<>/dev/tcp/" + address + "/" + std::to_string(kPort)}, limit);
}

// The trainer's tasks, ps i on host i and worker i on host num_ps + i.
class TrainerOnHosts {
 public:
  TrainerOnHosts(TestNetwork& net, int num_ps, int num_workers, std::vector<std::string> flags)
      : net_(net), num_ps_(num_ps), flags_(std::move(flags)) {
    REQUIRE(net.size() >= num_ps + num_workers);
    for (int i = 0; i < num_ps; ++i) ps_hosts_.push_back(net.endpoint(i, kPort));
    for (int i = 0; i < num_workers; ++i) worker_hosts_.push_back(net.endpoint(num_ps + i, kPort));
    flags_.push_back("--checkpoint_dir=" + checkpoints());
    ps_.resize(static_cast<std::size_t>(num_ps));
    workers_.resize(static_cast<std::size_t>(num_workers));
  }

  std::string checkpoints() const { return dir_ / "checkpoints"; }

  void start_all() {
    for (std::size_t i = 0; i < ps_.size(); ++i) start("ps", static_cast<int>(i));
    for (std::size_t i = 0; i < workers_.size(); ++i) start("worker", static_cast<int>(i));
  }

  ChildProcess& ps(int i) { return *ps_.at(static_cast<std::size_t>(i)); }
  ChildProcess& worker(int i) { return *workers_.at(static_cast<std::size_t>(i)); }
  int num_workers() const { return static_cast<int>(workers_.size()); }

  // Waits for every task to exit; false when one is still running after `limit`.
  bool wait_all(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (auto* group : {&workers_, &ps_})
      for (auto& task : *group) {
        if (!task) continue;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (!task->wait_for(std::max(left, std::chrono::milliseconds(0)))) return false;
      }
    return true;
  }

  // The first task that has exited, as "ps1 (exit 1)"; "" while all run.
  std::string exited_task() {
    for (auto* group : {&ps_, &workers_})
      for (std::size_t i = 0; i < group->size(); ++i)
        if ((*group)[i] && !(*group)[i]->running())
          return (group == &ps_ ? "ps" : "worker") + std::to_string(i) + " (exit " +
                 std::to_string((*group)[i]->exit_code()) + ")";
    return "";
  }

  // Every task's standard error and output, for failure messages.
  std::string logs() {
    std::string out;
    for (auto* group : {&ps_, &workers_})
      for (std::size_t i = 0; i < group->size(); ++i)
        if ((*group)[i])
          out += "---- " + std::string(group == &ps_ ? "ps" : "worker") + std::to_string(i) +
                 " on host " + std::to_string(group == &ps_ ? i : num_ps_ + i) + "\n" +
                 (*group)[i]->err() + (*group)[i]->out();
    return out;
  }

 private:
  void start(const std::string& job, int index) {
    std::vector<std::string> argv{PSFLOW_TRAINER_BINARY, "--ps_hosts=" + join(ps_hosts_),
                                  "--worker_hosts=" + join(worker_hosts_), "--job_name=" + job,
                                  "--task_index=" + std::to_string(index)};
    argv.insert(argv.end(), flags_.begin(), flags_.end());
    const int host = job == "ps" ? index : num_ps_ + index;
    auto& slot = (job == "ps" ? ps_ : workers_)[static_cast<std::size_t>(index)];
    slot = net_.on_host(host, argv, dir_ / (job + std::to_string(index)));
  }

  TestNetwork& net_;
  int num_ps_;
  TempDir dir_{"multi-host-trainer"};
  std::vector<std::string> flags_;
  std::vector<std::string> ps_hosts_, worker_hosts_;
  std::vector<std::unique_ptr<ChildProcess>> ps_, workers_;
};

}  // namespace

TEST_CASE("the harness: each host has its own address and loopback, a cut link goes silent") {
  TestNetwork net(2);
  TempDir dir("multi-host-harness");
  CHECK(net.address(0) != net.address(1));
  // A plain task serving on host 0's address (not 127.0.0.1).
  auto task =
      net.on_host(0,
                  {PSFLOW_TASK_BINARY, "--ps_hosts=" + net.endpoint(0, kPort),
                   "--worker_hosts=" + net.endpoint(1, kPort), "--job_name=ps", "--task_index=0"},
                  dir / "ps0");
  INFO("the task's standard error:\n" << task->err());
  REQUIRE(eventually([&] { return try_connect(net, 1, net.address(0), 5s).exit_code == 0; }, 30s));
  // Host 1's loopback is its own: nothing listens on its 127.0.0.1, so that connect is refused.
  const CommandResult own_loopback = try_connect(net, 1, "127.0.0.1", 5s);
  CHECK_FALSE(own_loopback.timed_out);
  CHECK(own_loopback.exit_code != 0);

  // Cut: a connect from host 1 neither succeeds nor is refused; it just waits (and is killed).
  net.disconnect(0);
  const CommandResult cut = try_connect(net, 1, net.address(0), 3s);
  CHECK(cut.timed_out);
  CHECK(task->running());  // the host's processes go on; only its link is down
  net.reconnect(0);
  CHECK(eventually([&] { return try_connect(net, 1, net.address(0), 5s).exit_code == 0; }, 30s));
}

TEST_CASE("the harness: namespaces of dead runs are removed, a live run's are kept") {
  { TestNetwork probe(1); }  // this machine can host them (or the loud "CANNOT RUN" failure)
  // A pid that surely is dead: a child that has exited and been reaped.
  TempDir dir("multi-host-leftovers");
  pid_t dead = -1;
  {
    ChildProcess child({"/bin/sh", "-c", "exit 0"}, dir / "child");
    REQUIRE(child.wait_for(10s));
    dead = child.pid();
  }
  const std::string stale = "psflow-" + std::to_string(dead) + "-0-h0";
  const std::string live = "psflow-1-0-h0";  // pid 1 is always alive
  const std::string ip = psflow::testing::detail::find_program("ip");
  REQUIRE(!ip.empty());
  // Whatever happens, both are gone at the end (nothing else would delete the live one).
  struct Remove {
    std::string ip;
    std::vector<std::string> names;
    ~Remove() {
      for (const auto& name : names)
        psflow::testing::detail::run_bounded({ip, "netns", "del", name}, 10s);
    }
  } remove{ip, {stale, live}};
  for (const auto& name : {stale, live}) {
    psflow::testing::detail::run_bounded({ip, "netns", "del", name}, 10s);  // a killed run's
    REQUIRE(psflow::testing::detail::run_bounded({ip, "netns", "add", name}, 10s).exit_code == 0);
  }
  auto exists = [](const std::string& name) {
    return std::filesystem::exists(std::string(TestNetwork::kNetnsDir) + "/" + name);
  };
  TestNetwork net(1);
  CHECK_FALSE(exists(stale));
  CHECK(exists(live));
  CHECK(exists(net.host_namespace(0)));
}

TEST_CASE("the add/mul/div demo: ps and worker on two hosts, the worker prints the seed's output") {
  TestNetwork net(2);
  TempDir dir("multi-host-demo");
  const std::string expected =
      psflow::testing::read_file(PSFLOW_SOURCE_DIR "/examples/add_mul_div/expected_output.txt");
  REQUIRE(!expected.empty());
  auto args = [&](const std::string& job) {
    return psflow::testing::demo_command(PSFLOW_DEMO_BINARY, job, net.endpoint(0, kPort),
                                         net.endpoint(1, kPort), dir / "demo_log",
                                         {"--interval_ms=20"});
  };
  auto worker = net.on_host(1, args("worker"), dir / "worker");  // worker first: it waits
  auto ps = net.on_host(0, args("ps"), dir / "ps");
  const bool worker_done = worker->wait_for(60s);
  const bool ps_done = worker_done && ps->wait_for(20s);
  INFO("worker stderr:\n" << worker->err() << "\nps stderr:\n" << ps->err());
  REQUIRE(worker_done);
  REQUIRE(ps_done);
  CHECK(worker->exit_code() == 0);
  CHECK(ps->exit_code() == 0);
  CHECK(worker->out() == expected);
  CHECK(contains(ps->err(), "serving on " + net.endpoint(0, kPort)));
}

TEST_CASE("the trainer: 2 ps + 2 workers on four hosts train, write a checkpoint and exit 0") {
  TestNetwork net(4);
  TrainerOnHosts cluster(net, 2, 2, short_run(400, {}, 10));
  cluster.start_all();
  INFO(cluster.logs());
  REQUIRE(cluster.wait_all(240s));
  for (int i = 0; i < 2; ++i) {
    INFO("ps " << i << " and worker " << i);
    CHECK(cluster.ps(i).exit_code() == 0);  // told to stop by the chief at the end
    CHECK(cluster.worker(i).exit_code() == 0);
  }
  const std::string chief = cluster.worker(0).err();
  // Both ps hold variables ("  ps1 (/job:ps/task:1): 3 variables, ... bytes").
  static const std::regex held(R"(ps(\d) \(/job:ps/task:\d\): (\d+) variables)");
  int ps_with_variables = 0;
  for (auto it = std::sregex_iterator(chief.begin(), chief.end(), held);
       it != std::sregex_iterator(); ++it)
    if (std::stoi((*it)[2]) > 0) ++ps_with_variables;
  CHECK(ps_with_variables == 2);
  const auto accuracy = test_accuracy(cluster.worker(0).out());
  REQUIRE(accuracy);
  CHECK(*accuracy > 0.6);
  // A checkpoint was written: the chief logged it and the file is there.
  CHECK(contains(chief, "saved checkpoint"));
  bool checkpoint = false;
  if (std::filesystem::exists(cluster.checkpoints()))
    for (const auto& entry : std::filesystem::directory_iterator(cluster.checkpoints()))
      if (entry.path().filename().string().rfind("model.ckpt-", 0) == 0) checkpoint = true;
  CHECK(checkpoint);
}

// Needs the heartbeat (--heartbeat_timeout_s, dead-peer detection): without it a silent ps is
// noticed only when TCP gives up, many minutes later.
TEST_CASE(
    "a ps cut off: both workers report ps 1 Unavailable within the heartbeat timeout plus 9 s") {
  TestNetwork net(4);
  TrainerOnHosts cluster(net, 2, 2, short_run(1000000, {"--heartbeat_timeout_s=1"}, 10));
  cluster.start_all();
  auto training = [&] {
    for (int i = 0; i < cluster.num_workers(); ++i)
      if (!contains(cluster.worker(i).err(),
                    "worker " + std::to_string(i) + ": starting at global step"))
        return false;
    return last_logged_step(cluster.worker(0).err()) >= 100;
  };
  const bool started =
      eventually([&] { return training() || !cluster.exited_task().empty(); }, 120s);
  {
    INFO(cluster.logs());
    REQUIRE(started);
    REQUIRE(cluster.exited_task() == "");  // e.g. a task that rejected its flags
    REQUIRE(training());
  }
  // What each worker logged before the cut is not evidence.
  std::vector<std::size_t> before;
  for (int i = 0; i < cluster.num_workers(); ++i) before.push_back(cluster.worker(i).err().size());

  net.disconnect(1);
  const auto cut_at = std::chrono::steady_clock::now();
  static const std::regex reported(
      R"(Unavailable[^\n]*(/job:ps/(replica:\d+/)?task:1\b|\bps ?1\b))");
  std::vector<std::optional<double>> noticed_after_s(2);
  eventually(
      [&] {
        for (int i = 0; i < 2; ++i) {
          if (noticed_after_s[static_cast<std::size_t>(i)]) continue;
          const std::string log =
              cluster.worker(i).err().substr(before[static_cast<std::size_t>(i)]);
          if (std::regex_search(log, reported))
            noticed_after_s[static_cast<std::size_t>(i)] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_at).count();
        }
        return noticed_after_s[0] && noticed_after_s[1];
      },
      10s);  // --heartbeat_timeout_s=1 plus 9 s
  INFO(cluster.logs());
  for (int i = 0; i < 2; ++i) {
    INFO("worker " << i);
    CHECK(noticed_after_s[static_cast<std::size_t>(i)]);
    if (noticed_after_s[static_cast<std::size_t>(i)])
      CHECK(*noticed_after_s[static_cast<std::size_t>(i)] <= 10.0);
  }
  CHECK(cluster.ps(1).running());  // cut off, not dead: it never said goodbye
}
