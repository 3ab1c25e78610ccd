// ClusterSpec (validation, lookups, TF_CONFIG) and TaskFlags (TF's flags and TF_CONFIG).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/task_flags.hpp"

using Catch::Contains;
using psflow::ClusterSpec;
using psflow::TaskFlags;
using psflow::TfConfig;

namespace {

ClusterSpec two_jobs() {
  return ClusterSpec({{"worker", {"w0.example.com:2222", "w1.example.com:2222"}},
                      {"ps", {"ps0.example.com:2222"}}});
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const psflow::Error& e) {
    return std::string(e.what());
  }
  return "";
}

std::string invalid(const ClusterSpec::JobMap& jobs) {
  try {
    ClusterSpec spec(jobs);
  } catch (const psflow::InvalidArgument& e) {
    return e.message();
  }
  return "";
}

std::string flags_error(const std::vector<std::string>& args,
                        std::optional<std::string_view> tf_config = std::nullopt) {
  try {
    TaskFlags::parse(args, tf_config);
  } catch (const psflow::InvalidArgument& e) {
    return e.message();
  }
  return "";
}

const char* const kTfConfig =
    R"({"cluster": {"ps": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]},
        "task": {"type": "worker", "index": 1}, "environment": "cloud"})";

}  // namespace

// ---- ClusterSpec ------------------------------------------------------------------------------

TEST_CASE("jobs are sorted and tasks keep their order") {
  const ClusterSpec c = two_jobs();
  CHECK(c.jobs() == std::vector<std::string>{"ps", "worker"});
  CHECK(c.num_tasks("worker") == 2);
  CHECK(c.num_tasks("ps") == 1);
  CHECK(c.task_address("worker", 1) == "w1.example.com:2222");
  CHECK(c.task_address("ps", 0) == "ps0.example.com:2222");
  CHECK(c.has_job("ps"));
  CHECK_FALSE(c.has_job("chief"));
  CHECK_FALSE(c.empty());
  CHECK(ClusterSpec().empty());
  CHECK(c.job_tasks("worker") ==
        std::vector<std::string>{"w0.example.com:2222", "w1.example.com:2222"});
  CHECK(c.as_map().at("ps") == std::vector<std::string>{"ps0.example.com:2222"});
  CHECK(c == two_jobs());
  CHECK_FALSE(c == ClusterSpec({{"ps", {"ps0.example.com:2222"}}}));
}

TEST_CASE("task_devices lists /job:J/replica:0/task:T for every task") {
  CHECK(two_jobs().task_devices() == std::vector<std::string>{"/job:ps/replica:0/task:0",
                                                              "/job:worker/replica:0/task:0",
                                                              "/job:worker/replica:0/task:1"});
  for (const auto& d : two_jobs().task_devices()) {
    CHECK(psflow::DeviceSpec::parse(d).to_string() == d);
  }
}

TEST_CASE("task_address and num_tasks throw NotFound naming the job/task and what exists") {
  const ClusterSpec c = two_jobs();
  CHECK_THROWS_AS(c.task_address("chief", 0), psflow::NotFound);
  CHECK_THROWS_AS(c.task_address("worker", 2), psflow::NotFound);
  CHECK_THROWS_AS(c.num_tasks("chief"), psflow::NotFound);
  const std::string no_job = error_of([&] { c.task_address("chief", 0); });
  CHECK_THAT(no_job, Contains("NotFound: "));
  CHECK_THAT(no_job, Contains("no job 'chief'"));
  CHECK_THAT(no_job, Contains("ps, worker"));
  const std::string no_task = error_of([&] { c.task_address("worker", 2); });
  CHECK_THAT(no_task, Contains("no task 2 in job 'worker'"));
  CHECK_THAT(no_task, Contains("has 2 task(s), 0..1"));
  const ClusterSpec empty_job(ClusterSpec::JobMap{{"ps", {}}});
  CHECK(empty_job.num_tasks("ps") == 0);
  CHECK_THAT(error_of([&] { empty_job.task_address("ps", 0); }), Contains("has no tasks"));
}

TEST_CASE("braced lists and maps build the same cluster, a job listed twice is rejected") {
  const ClusterSpec one({{"ps", {"h:1"}}});
  CHECK(one.task_address("ps", 0) == "h:1");
  ClusterSpec::JobMap map{{"ps", {"h:1"}}};
  CHECK(ClusterSpec(map) == one);
  const std::string twice = error_of([] { ClusterSpec({{"ps", {"h:1"}}, {"ps", {"h:2"}}}); });
  CHECK_THAT(twice, Contains("job 'ps' is listed twice"));
}

TEST_CASE("addresses: port 0, IPv6 with brackets and port bounds are accepted") {
  CHECK_NOTHROW(ClusterSpec({{"worker", {"localhost:0", "localhost:0"}}}));  // OS picks: no clash
  CHECK_NOTHROW(ClusterSpec({{"worker", {"[::1]:2222", "127.0.0.1:65535"}}}));
  CHECK_NOTHROW(ClusterSpec({{"a", {"h:1"}}, {"b", {"h:2"}}}));
  CHECK_NOTHROW(ClusterSpec({{"job_1", {"h:1"}}}));
}

TEST_CASE("constructor validation: InvalidArgument saying what is wrong and what to do") {
  struct Case {
    ClusterSpec::JobMap jobs;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {{{"", {"h:1"}}}, {"empty name", "name every job"}},
      {{{"my-job", {"h:1"}}}, {"job name 'my-job'", "letters, digits or '_'"}},
      {{{"ps", {""}}}, {"empty address for /job:ps/task:0", "host:port"}},
      {{{"ps", {"localhost"}}}, {"'localhost' of /job:ps/task:0 has no port", "host:port"}},
      {{{"ps", {":2222"}}}, {"empty host", "host:port"}},
      {{{"ps", {"h:abc"}}}, {"port 'abc'", "0..65535"}},
      {{{"ps", {"h:65536"}}}, {"port '65536'", "0..65535"}},
      {{{"ps", {"h:-1"}}}, {"port '-1'", "0..65535"}},
      {{{"ps", {"h:"}}}, {"port ''", "0..65535"}},
      {{{"ps", {"h:1234567"}}}, {"port '1234567'"}},
      {{{"ps", {"grpc://h:2222"}}}, {"has a scheme", "plain host:port"}},
      {{{"ps", {"::1:2222"}}}, {"IPv6", "[::1]:2222"}},
      {{{"ps", {"h :2222"}}}, {"whitespace"}},
      {{{"ps", {"h:1"}}, {"worker", {"h:2", "h:1"}}},
       {"'h:1' is used by both /job:ps/task:0 and /job:worker/task:1", "its own host:port"}},
      {{{"worker", {"Host:1", "host:1"}}}, {"used by both"}},
  };
  for (const Case& c : cases) {
    const std::string message = invalid(c.jobs);
    INFO(message);
    CHECK_FALSE(message.empty());
    for (const auto& part : c.expected) CHECK_THAT(message, Contains(part));
  }
}

TEST_CASE("from_tf_config reads the cluster part of TF_CONFIG") {
  const ClusterSpec c = ClusterSpec::from_tf_config(kTfConfig);
  CHECK(c.jobs() == std::vector<std::string>{"ps", "worker"});
  CHECK(c.task_address("worker", 1) == "h2:2222");
  CHECK(ClusterSpec::from_tf_config(R"({"cluster": {}})").empty());
}

TEST_CASE("from_tf_config errors") {
  using psflow::InvalidArgument;
  CHECK_THROWS_AS(ClusterSpec::from_tf_config("{not json"), InvalidArgument);
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config("{not json"); }),
             Contains("TF_CONFIG is not valid JSON"));
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config(""); }), Contains("not valid JSON"));
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config("[1, 2]"); }),
             Contains("TF_CONFIG must be a JSON object"));
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config(R"({"task": {}})"); }),
             Contains("no \"cluster\" entry"));
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config(R"({"cluster": ["h:1"]})"); }),
             Contains("\"cluster\" must be a JSON object"));
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config(R"({"cluster": {"ps": "h:1"}})"); }),
             Contains("job 'ps' in TF_CONFIG's \"cluster\" must be a list"));
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config(R"({"cluster": {"ps": ["h:1", 2]}})"); }),
             Contains("task 1 is a number"));
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config(R"({"cluster": {"ps": ["h"]}})"); }),
             Contains("has no port"));
}

TEST_CASE("to_json and to_tf_config_json round-trip") {
  const ClusterSpec c = two_jobs();
  CHECK(ClusterSpec::from_json(nlohmann::json::parse(c.to_json())) == c);
  const std::string config = c.to_tf_config_json("worker", 1);
  CHECK(ClusterSpec::from_tf_config(config) == c);
  const TfConfig parsed = TfConfig::parse(config);
  CHECK(parsed.task_type == "worker");
  CHECK(parsed.task_index == 1u);
  CHECK_THROWS_AS(c.to_tf_config_json("worker", 2), psflow::NotFound);
}

// ---- TfConfig ---------------------------------------------------------------------------------

TEST_CASE("TfConfig reads the task, a missing index is 0, as in TF") {
  TfConfig t = TfConfig::parse(kTfConfig);
  CHECK(t.task_type == "worker");
  CHECK(t.task_index == 1u);
  t = TfConfig::parse(R"({"cluster": {"ps": ["h:1"]}})");
  CHECK_FALSE(t.task_type.has_value());
  CHECK_FALSE(t.task_index.has_value());
  t = TfConfig::parse(R"({"cluster": {"ps": ["h:1"]}, "task": {"type": "ps"}})");
  CHECK(t.task_index == 0u);
  t = TfConfig::parse(R"({"cluster": {"ps": ["h:1"]}, "task": {"type": "ps", "index": "0"}})");
  CHECK(t.task_index == 0u);
}

TEST_CASE("TfConfig errors") {
  CHECK_THAT(error_of([] { TfConfig::parse(R"({"cluster": {}, "task": 3})"); }),
             Contains("\"task\" must be a JSON object"));
  CHECK_THAT(error_of([] { TfConfig::parse(R"({"cluster": {}, "task": {"index": 0}})"); }),
             Contains("needs a \"type\""));
  CHECK_THAT(
      error_of([] { TfConfig::parse(R"({"cluster": {}, "task": {"type": "ps", "index": -1}})"); }),
      Contains("must be a non-negative integer"));
  CHECK_THAT(
      error_of([] { TfConfig::parse(R"({"cluster": {}, "task": {"type": "ps", "index": "x"}})"); }),
      Contains("is not a task index"));
  CHECK_THAT(error_of([] { TfConfig::parse(R"({"task": {"type": "ps"}})"); }),
             Contains("no \"cluster\""));
}

// ---- TaskFlags --------------------------------------------------------------------------------

TEST_CASE("TaskFlags reads TF's flags in --flag=value form") {
  const TaskFlags f = TaskFlags::parse(
      {"trainer", "--ps_hosts=h0:2222,h1:2222", "--worker_hosts=h2:2222,h3:2222,h4:2222",
       "--job_name=worker", "--task_index=2"},
      std::nullopt);
  CHECK(f.cluster.jobs() == std::vector<std::string>{"ps", "worker"});
  CHECK(f.cluster.num_tasks("ps") == 2);
  CHECK(f.cluster.task_address("worker", 2) == "h4:2222");
  CHECK(f.job_name == "worker");
  CHECK(f.task_index == 2);
  CHECK(f.remaining_args == std::vector<std::string>{"trainer"});
  CHECK(f.address() == "h4:2222");
  CHECK(f.device() == "/job:worker/task:2");
  CHECK_FALSE(f.is_chief());
}

TEST_CASE("TaskFlags reads --flag value and -flag forms and leaves unknown flags") {
  const TaskFlags f = TaskFlags::parse(
      {"prog", "--learning_rate=0.1", "--ps_hosts", "h0:1", "-worker_hosts=h1:1, h2:1,",
       "input.txt", "--job_name", "ps", "-task_index", "0", "--verbose", "--", "--job_name=x"},
      std::nullopt);
  CHECK(f.job_name == "ps");
  CHECK(f.task_index == 0);
  CHECK(f.cluster.job_tasks("worker") == std::vector<std::string>{"h1:1", "h2:1"});
  CHECK(f.remaining_args == std::vector<std::string>{"prog", "--learning_rate=0.1", "input.txt",
                                                     "--verbose", "--", "--job_name=x"});
}

TEST_CASE("TaskFlags reads --checkpoint_dir and leaves it for the program too") {
  TaskFlags f = TaskFlags::parse(
      {"p", "--ps_hosts=h0:1", "--job_name=ps", "--checkpoint_dir=/local/ps0", "--x=1"},
      std::nullopt);
  CHECK(f.checkpoint_dir == "/local/ps0");
  CHECK(f.remaining_args == std::vector<std::string>{"p", "--checkpoint_dir=/local/ps0", "--x=1"});
  f = TaskFlags::parse({"p", "--ps_hosts=h0:1", "--job_name=ps", "--checkpoint_dir", "/d"},
                       std::nullopt);
  CHECK(f.checkpoint_dir == "/d");
  CHECK(f.remaining_args == std::vector<std::string>{"p", "--checkpoint_dir", "/d"});
  f = TaskFlags::parse({"p", "--ps_hosts=h0:1", "--job_name=ps"}, std::nullopt);
  CHECK(f.checkpoint_dir.empty());
}

TEST_CASE("TaskFlags: task_index defaults to 0, chief job, empty host list drops the job") {
  TaskFlags f = TaskFlags::parse({"p", "--worker_hosts=h:1", "--ps_hosts=", "--job_name=worker"},
                                 std::nullopt, /*require_ps_job=*/false);
  CHECK(f.task_index == 0);
  CHECK_FALSE(f.cluster.has_job("ps"));
  CHECK(f.is_chief());
  f = TaskFlags::parse({"p", "--chief_hosts=c:1", "--worker_hosts=h:1", "--job_name=worker"},
                       std::nullopt, false);
  CHECK_FALSE(f.is_chief());
  f = TaskFlags::parse({"p", "--chief_hosts=c:1", "--worker_hosts=h:1", "--job_name=chief"},
                       std::nullopt, false);
  CHECK(f.is_chief());
}

TEST_CASE("TaskFlags: a cluster without ps tasks is an error that says how to train locally") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(
      TaskFlags::parse({"p", "--worker_hosts=h:1", "--ps_hosts=", "--job_name=worker"},
                       std::nullopt),
      Contains("--ps_hosts is empty or missing") && Contains("without --job_name"));
  CHECK_THROWS_WITH(
      TaskFlags::parse({"p", "--worker_hosts=h:1", "--job_name=worker"}, std::nullopt),
      Contains("--ps_hosts is empty or missing"));
  CHECK_THROWS_WITH(TaskFlags::parse({"p"}, std::string_view(R"({"cluster": {"worker": ["h:1"]},
                                                   "task": {"type": "worker", "index": 0}})")),
                    Contains("TF_CONFIG's cluster has no \"ps\" job"));
}

TEST_CASE("TaskFlags: host flags win over TF_CONFIG") {
  const TaskFlags f = TaskFlags::parse(
      {"p", "--ps_hosts=a:1", "--worker_hosts=b:1", "--job_name=ps"}, std::string_view(kTfConfig));
  CHECK(f.cluster.task_address("ps", 0) == "a:1");
  CHECK(f.job_name == "ps");
  CHECK(f.task_index == 0);
}

TEST_CASE("TaskFlags falls back to TF_CONFIG when no host flags are given") {
  TaskFlags f = TaskFlags::parse({"p", "--epochs=3"}, std::string_view(kTfConfig));
  CHECK(f.cluster == ClusterSpec::from_tf_config(kTfConfig));
  CHECK(f.job_name == "worker");
  CHECK(f.task_index == 1);
  CHECK(f.remaining_args == std::vector<std::string>{"p", "--epochs=3"});
  // --job_name / --task_index override TF_CONFIG's task.
  f = TaskFlags::parse({"p", "--job_name=ps", "--task_index=0"}, std::string_view(kTfConfig));
  CHECK(f.job_name == "ps");
  CHECK(f.task_index == 0);
  f = TaskFlags::parse({"p", "--task_index=0"}, std::string_view(kTfConfig));
  CHECK(f.job_name == "worker");
  CHECK(f.task_index == 0);
}

TEST_CASE("TaskFlags(argc, argv) reads TF_CONFIG from the environment") {
  const char* argv[] = {"prog", "--slow_step_warning_s=5"};
  ::setenv("TF_CONFIG", kTfConfig, 1);
  const TaskFlags f = TaskFlags::parse(2, argv);
  const char* other[] = {"prog", "--other"};
  CHECK_THROWS_WITH(TaskFlags::parse(2, other), Contains("unknown flag '--other'"));
  ::unsetenv("TF_CONFIG");
  CHECK(f.job_name == "worker");
  CHECK(f.task_index == 1);
  CHECK(f.slow_step_warning_s == 5);
  CHECK(f.remaining_args == std::vector<std::string>{"prog"});
  CHECK_THROWS_AS(TaskFlags::parse(2, argv), psflow::InvalidArgument);  // no cluster at all
}

TEST_CASE("TaskFlags errors are InvalidArgument with a clear message") {
  using Args = std::vector<std::string>;
  CHECK_THAT(flags_error(Args{"p"}), Contains("no cluster given"));
  CHECK_THAT(flags_error(Args{"p"}, ""), Contains("no cluster given"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a:1"}), Contains("--job_name is missing"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a:1", "--job_name=chief"}),
             Contains("unknown job name 'chief'"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a:1", "--job_name=chief"}),
             Contains("the cluster's jobs are ps"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a:1", "--job_name=ps", "--task_index=1"}),
             Contains("task index 1 is out of range: job 'ps' has 1 task(s), 0..0"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a:1", "--job_name=ps", "--task_index=-1"}),
             Contains("'-1' is not a task index"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a:1", "--job_name=ps", "--task_index=one"}),
             Contains("'one' is not a task index"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a:1", "--job_name"}),
             Contains("flag --job_name needs a value"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts", "--job_name=ps"}),
             Contains("flag --ps_hosts needs a value"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=", "--worker_hosts=", "--job_name=ps"}),
             Contains("every *_hosts flag is empty"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a:1,a:1", "--job_name=ps"}),
             Contains("used by both"));
  CHECK_THAT(flags_error(Args{"p", "--ps_hosts=a", "--job_name=ps"}), Contains("has no port"));
  CHECK_THAT(flags_error(Args{"p"}, "{oops"), Contains("TF_CONFIG is not valid JSON"));
  CHECK_THAT(flags_error(Args{"p"}, R"({"cluster": {"ps": ["a:1"]}})"),
             Contains("TF_CONFIG has no \"task\""));
  CHECK_THAT(flags_error(Args{"p"}, R"({"cluster": {"ps": ["a:1"]}, "task": {"index": 0}})"),
             Contains("needs a \"type\""));
  CHECK_THAT(flags_error(Args{"p"}, R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "worker"}})"),
             Contains("unknown job name 'worker'"));
  CHECK_THAT(
      flags_error(Args{"p"}, R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 4}})"),
      Contains("task index 4 is out of range"));
}

TEST_CASE(
    "TaskFlags: --heartbeat_timeout_s and --slow_step_warning_s set the server options' "
    "timeouts") {
  using psflow::InvalidArgument;
  using psflow::ServerOptions;
  const std::vector<std::string> base{"prog", "--ps_hosts=a:1", "--worker_hosts=b:2",
                                      "--job_name=worker"};
  CHECK(TaskFlags::parse(base, std::nullopt).server_options().heartbeat_timeout ==
        ServerOptions{}.heartbeat_timeout);
  auto with = [&](const std::string& flag) {
    auto args = base;
    args.push_back(flag);
    return TaskFlags::parse(args, std::nullopt);
  };
  const TaskFlags two = with("--heartbeat_timeout_s=2.5");
  CHECK(two.server_options().heartbeat_timeout == std::chrono::milliseconds(2500));
  CHECK(two.remaining_args == std::vector<std::string>{"prog"});
  CHECK(with("--heartbeat_timeout_s=0").server_options().heartbeat_timeout.count() == 0);
  for (const char* bad :
       {"--heartbeat_timeout_s=-1", "--heartbeat_timeout_s=ten", "--heartbeat_timeout_s="})
    CHECK_THROWS_AS(with(bad), InvalidArgument);
  CHECK_THROWS_WITH(with("--heartbeat_timeout_s=x"), Catch::Contains("0 to turn heartbeats off"));
  // --slow_step_warning_s the same way.
  CHECK(TaskFlags::parse(base, std::nullopt).server_options().slow_step_warning ==
        ServerOptions{}.slow_step_warning);
  CHECK(with("--slow_step_warning_s=0.5").server_options().slow_step_warning ==
        std::chrono::milliseconds(500));
  CHECK(with("--slow_step_warning_s=0").server_options().slow_step_warning.count() == 0);
  CHECK_THROWS_WITH(with("--slow_step_warning_s=-2"),
                    Catch::Contains("--slow_step_warning_s='-2'") &&
                        Catch::Contains("0 to turn the warning off"));
}

// ---------------------------------------------------------------------------------------------
// Slurm (distributed/slurm_cluster.hpp): every test reads a hand-made SlurmEnvironment, never the
// process's own, except the one about ClusterSpec::from_slurm.

namespace {

using psflow::SlurmConfig;
using psflow::SlurmEnvironment;
using psflow::SlurmOptions;

std::vector<std::string> nodes(std::string_view list) {
  return psflow::expand_slurm_nodelist(list);
}

std::string slurm_error(const SlurmOptions& options, const SlurmEnvironment& env) {
  try {
    SlurmConfig::resolve(options, env);
  } catch (const psflow::InvalidArgument& e) {
    return e.message();
  }
  return "";
}

// A step of 5 tasks: 2 on node001, 2 on node002, 1 on gpu-a1.
SlurmEnvironment five_task_step(std::size_t rank) {
  return {{{"SLURM_STEP_NODELIST", "node[001-002],gpu-a1"},
           {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
           {"SLURM_STEP_NUM_TASKS", "5"},
           {"SLURM_PROCID", std::to_string(rank)}}};
}

}  // namespace

TEST_CASE("Slurm node lists expand ranges in order and keep zero padding") {
  using V = std::vector<std::string>;
  CHECK(nodes("n1") == V{"n1"});
  CHECK(nodes("node[001-003,7],gpu-a1") == V{"node001", "node002", "node003", "node7", "gpu-a1"});
  CHECK(nodes("n[1-2],m5,o[3-4,6,7-9]") == V{"n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"});
  CHECK(nodes("n[08-10]") == V{"n08", "n09", "n10"});  // width of the first bound
  CHECK(nodes("n[8-10]") == V{"n8", "n9", "n10"});
  CHECK(nodes("n[9-10],a") == V{"n9", "n10", "a"});  // Slurm's order, not sorted as strings
  CHECK(nodes("[1-2]") == V{"1", "2"});
  CHECK(nodes("127.0.0.[1-2]") == V{"127.0.0.1", "127.0.0.2"});
  CHECK(nodes("rack_a.b-c") == V{"rack_a.b-c"});
}

TEST_CASE("Slurm node lists: every malformed value is InvalidArgument naming the variable") {
  for (const char* bad :
       {"",        ",",   "a,,b",  "a,",      ",a",       "n[1-2",   "n1-2]",
        "n[[1]]",  "n[]", "n[1-]", "n[-1]",   "n[a-b]",   "n[3-1]",  "n[1]x",
        "n[1][2]", "a b", "a/b",   "n[1--2]", "n[1-2-3]", "n[1,,2]", "n[1234567890123456789]"}) {
    INFO("node list '" << bad << "'");
    const std::string message =
        error_of([&] { psflow::expand_slurm_nodelist(bad, "SLURM_JOB_NODELIST"); });
    CHECK_THAT(message, Contains("InvalidArgument: SLURM_JOB_NODELIST='"));
    CHECK_THAT(message, Contains("is not a node list"));
    CHECK_THAT(message, Contains("node[001-003,7]"));
  }
  CHECK_THAT(error_of([] { nodes("n[3-1]"); }), Contains("runs backwards"));
  CHECK_THAT(error_of([] { nodes("a,,b"); }), Contains("empty host name"));
  CHECK_THAT(error_of([] { nodes("a b"); }), Contains("has the character ' '"));
}

TEST_CASE("Slurm node lists: a short list naming too many hosts is rejected before expanding") {
  CHECK(nodes("n[1-65536]").size() == psflow::kMaxSlurmHosts);
  CHECK_THAT(error_of([] { nodes("n[1-65537]"); }), Contains("more than 65536 hosts"));
  CHECK_THAT(error_of([] { nodes("n[0-999999999999999999]"); }), Contains("more than 65536"));
  CHECK_THAT(error_of([] { nodes("a[1-40000],b[1-40000]"); }), Contains("more than 65536"));
  // Many short ranges: the count, not the text, is bounded.
  std::string list = "n[";
  // Appended piece by piece: GCC 12 at -O3 flags "," + std::string with a false -Wrestrict.
  for (int i = 0; i < 200; ++i) list.append(i ? "," : "").append("0-999");
  list += "]";
  CHECK_THAT(error_of([&] { nodes(list); }), Contains("more than 65536"));
  std::string singles;
  for (int i = 0; i < 65537; ++i) singles.append(i ? ",h" : "h").append(std::to_string(i));
  CHECK_THAT(error_of([&] { nodes(singles); }), Contains("more than 65536"));
}

TEST_CASE("Slurm tasks per node expand (xN) repetition and reject malformed values") {
  using V = std::vector<std::size_t>;
  CHECK(psflow::expand_slurm_tasks_per_node("2(x3),1") == V{2, 2, 2, 1});
  CHECK(psflow::expand_slurm_tasks_per_node("3(x2),2,1") == V{3, 3, 2, 1});
  CHECK(psflow::expand_slurm_tasks_per_node("4") == V{4});
  for (const char* bad : {"", ",", "2,", "x", "2(x)", "2(x0)", "2(3)", "2(x3", "(x3)", "-1", "2 ",
                          "2(x3)1", "2(x3),,1", "99999999999999999999"}) {
    INFO("tasks per node '" << bad << "'");
    const std::string message = error_of([&] { psflow::expand_slurm_tasks_per_node(bad); });
    CHECK_THAT(message, Contains("InvalidArgument: SLURM_STEP_TASKS_PER_NODE='"));
    CHECK_THAT(message, Contains("'2(x3),1'"));
  }
  CHECK_THAT(error_of([] { psflow::expand_slurm_tasks_per_node("1(x999999999999)"); }),
             Contains("more than 65536 entries"));
  CHECK_THAT(error_of([] { psflow::expand_slurm_tasks_per_node("1000(x1000)"); }),
             Contains("more than 65536 tasks"));
}

TEST_CASE("Slurm jobs flag: name:count lists, errors say what to give") {
  using M = std::map<std::string, std::size_t>;
  CHECK(SlurmOptions::parse_jobs("ps:1,worker:3") == M{{"ps", 1}, {"worker", 3}});
  CHECK(SlurmOptions::parse_jobs("worker:3,ps:1") == M{{"ps", 1}, {"worker", 3}});
  CHECK(SlurmOptions::parse_jobs("chief:1,ps:0") == M{{"chief", 1}, {"ps", 0}});
  for (const char* bad : {"", "ps", "ps:", ":1", "ps:x", "ps:-1", "1ps:1", "ps:1,,worker:1",
                          "ps:1,ps:2", "ps:1 ", "ps:99999"}) {
    INFO("--slurm_jobs='" << bad << "'");
    CHECK_THAT(error_of([&] { SlurmOptions::parse_jobs(bad); }),
               Contains("InvalidArgument: --slurm_jobs='"));
  }
  CHECK_THAT(error_of([] { SlurmOptions::parse_jobs("ps:1,ps:2"); }), Contains("twice"));
  CHECK_THAT(error_of([] { SlurmOptions::parse_jobs("ps"); }), Contains("e.g. ps:1,worker:3"));
}

TEST_CASE(
    "Slurm step: ranks fill the jobs in name order, the k-th task on a node gets port_base+k") {
  const SlurmOptions options{SlurmOptions::parse_jobs("worker:4,ps:1"), 2222};
  const ClusterSpec expected(
      {{"ps", {"node001:2222"}},
       {"worker", {"node001:2223", "node002:2222", "node002:2223", "gpu-a1:2222"}}});
  const std::pair<std::string, std::size_t> tasks[] = {
      {"ps", 0}, {"worker", 0}, {"worker", 1}, {"worker", 2}, {"worker", 3}};
  for (std::size_t rank = 0; rank < 5; ++rank) {
    INFO("rank " << rank);
    const SlurmConfig config = SlurmConfig::resolve(options, five_task_step(rank));
    CHECK(config.cluster == expected);
    CHECK(config.rank == rank);
    CHECK(config.job_name == tasks[rank].first);
    CHECK(config.task_index == tasks[rank].second);
    CHECK(config.hosts == std::vector<std::string>{"node001", "node002", "gpu-a1"});
  }
}

TEST_CASE("Slurm step: without jobs every task is a worker from port 8888, as TF") {
  const SlurmConfig config = SlurmConfig::resolve({}, five_task_step(4));
  CHECK(config.cluster == ClusterSpec({{"worker",
                                        {"node001:8888", "node001:8889", "node002:8888",
                                         "node002:8889", "gpu-a1:8888"}}}));
  CHECK(config.job_name == "worker");
  CHECK(config.task_index == 4);
}

TEST_CASE("Slurm step: SLURM_LOCALID and SLURMD_NODENAME must match the block layout") {
  SlurmEnvironment env = five_task_step(3);  // the 2nd task on node002
  env.variables["SLURM_LOCALID"] = "1";
  env.variables["SLURMD_NODENAME"] = "node002";
  CHECK(SlurmConfig::resolve({}, env).task_index == 3);
  env.variables["SLURM_LOCALID"] = "0";  // srun --distribution=cyclic
  CHECK_THAT(slurm_error({}, env), Contains("--distribution=block"));
  env.variables["SLURM_LOCALID"] = "1";
  env.variables["SLURMD_NODENAME"] = "node001";
  CHECK_THAT(slurm_error({}, env), Contains("should run on node 'node002'"));
}

TEST_CASE("Slurm job variables are the fallback outside a step, never mixed with the step's") {
  SlurmEnvironment env{{{"SLURM_JOB_NODELIST", "c[1-2]"},
                        {"SLURM_TASKS_PER_NODE", "1(x2)"},
                        {"SLURM_NTASKS", "2"},
                        {"SLURM_PROCID", "1"}}};
  SlurmConfig config = SlurmConfig::resolve({{{"ps", 1}, {"worker", 1}}, 2222}, env);
  CHECK(config.cluster == ClusterSpec({{"ps", {"c1:2222"}}, {"worker", {"c2:2222"}}}));
  CHECK(config.job_name == "worker");
  env.variables.erase("SLURM_JOB_NODELIST");
  env.variables["SLURM_NODELIST"] = "d[1-2]";  // the older name
  CHECK(SlurmConfig::resolve({}, env).cluster.task_address("worker", 0) == "d1:8888");
  // A step on one node of the allocation: its own variables only.
  env.variables["SLURM_STEP_NODELIST"] = "d2";
  CHECK_THAT(slurm_error({}, env), Contains("SLURM_STEP_TASKS_PER_NODE is not"));
  env.variables["SLURM_STEP_TASKS_PER_NODE"] = "2";
  CHECK(SlurmConfig::resolve({}, env).cluster.job_tasks("worker") ==
        std::vector<std::string>{"d2:8888", "d2:8889"});
}

TEST_CASE("Slurm step errors are InvalidArgument naming the variable and what to do") {
  CHECK_THAT(slurm_error({}, {}), Contains("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST"));
  CHECK_THAT(slurm_error({}, {}), Contains("srun"));
  SlurmEnvironment env = five_task_step(0);
  env.variables.erase("SLURM_PROCID");
  CHECK_THAT(slurm_error({}, env), Contains("SLURM_PROCID is not set"));
  for (const char* rank : {"5", "-1", "x", ""}) {
    env.variables["SLURM_PROCID"] = rank;
    CHECK_THAT(slurm_error({}, env), Contains("is not a rank in 0..4"));
  }
  env = five_task_step(0);
  env.variables["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  CHECK_THAT(slurm_error({}, env), Contains("names 3 node(s) but"));
  env = five_task_step(0);
  env.variables["SLURM_STEP_NUM_TASKS"] = "6";
  CHECK_THAT(slurm_error({}, env), Contains("SLURM_STEP_NUM_TASKS='6' disagrees"));
  env = five_task_step(0);
  env.variables["SLURM_STEP_NODELIST"] = "a,b,a";
  env.variables["SLURM_STEP_TASKS_PER_NODE"] = "1(x3)";
  env.variables["SLURM_STEP_NUM_TASKS"] = "3";
  CHECK_THAT(slurm_error({}, env), Contains("lists node 'a' twice"));
  env = five_task_step(0);
  CHECK_THAT(slurm_error({SlurmOptions::parse_jobs("ps:1,worker:3"), 8888}, env),
             Contains("ask for 4 task(s) but the Slurm step has 5"));
  CHECK_THAT(slurm_error({{{"worker", 5}}, 65535}, env), Contains("ports above 65535"));
  CHECK(SlurmConfig::resolve({{{"worker", 5}}, 65534}, env).cluster.task_address("worker", 1) ==
        "node001:65535");
  CHECK_THAT(slurm_error({{{"ps", 1}, {"worker", std::size_t{1} << 62}}, 8888}, env),
             Contains("more than psflow's limit"));
  env.variables["SLURM_STEP_TASKS_PER_NODE"] = "0(x3)";
  env.variables.erase("SLURM_STEP_NUM_TASKS");
  CHECK_THAT(slurm_error({}, env), Contains("has no tasks"));
  env.variables["SLURM_STEP_NODELIST"] = "n[1-";
  CHECK_THAT(slurm_error({}, env), Contains("SLURM_STEP_NODELIST='n[1-' is not a node list"));
}

TEST_CASE("ClusterSpec::from_slurm and SlurmConfig::resolve read the process environment") {
  const SlurmEnvironment env = five_task_step(2);
  for (const auto& [name, value] : env.variables) ::setenv(name.c_str(), value.c_str(), 1);
  const ClusterSpec cluster = ClusterSpec::from_slurm(SlurmOptions{{{"ps", 2}, {"worker", 3}}});
  const SlurmConfig config = SlurmConfig::resolve();
  for (const auto& entry : env.variables) ::unsetenv(entry.first.c_str());
  CHECK(cluster.job_tasks("ps") == std::vector<std::string>{"node001:8888", "node001:8889"});
  CHECK(config.job_name == "worker");
  CHECK(config.task_index == 2);
  CHECK_THROWS_AS(ClusterSpec::from_slurm(), psflow::InvalidArgument);  // unset again
}

TEST_CASE("TaskFlags --slurm_jobs takes the cluster and this task from the Slurm step") {
  const SlurmEnvironment env = five_task_step(1);
  const TaskFlags f =
      TaskFlags::parse({"p", "--slurm_jobs=worker:3,ps:2", "--slurm_port_base", "4000", "--lr=1"},
                       std::string_view(kTfConfig), true, &env);  // TF_CONFIG is not read
  CHECK(f.cluster == ClusterSpec({{"ps", {"node001:4000", "node001:4001"}},
                                  {"worker", {"node002:4000", "node002:4001", "gpu-a1:4000"}}}));
  CHECK(f.job_name == "ps");
  CHECK(f.task_index == 1);
  CHECK(f.address() == "node001:4001");
  CHECK(f.remaining_args == std::vector<std::string>{"p", "--lr=1"});
}

TEST_CASE("TaskFlags Slurm flags: errors say what to pass") {
  using Args = std::vector<std::string>;
  const SlurmEnvironment env = five_task_step(0);
  auto error = [&](const Args& args) {
    return error_of([&] { TaskFlags::parse(args, std::nullopt, true, &env); });
  };
  CHECK_THAT(error(Args{"p", "--slurm_jobs=worker:5"}), Contains("--slurm_jobs has no ps job"));
  CHECK(error(Args{"p", "--slurm_jobs=ps:1,worker:4"}).empty());
  CHECK_THAT(error(Args{"p", "--slurm_jobs=ps:1,worker:3"}),
             Contains("ask for 4 task(s) but the Slurm step has 5"));
  CHECK_THAT(error(Args{"p", "--slurm_jobs=ps:1,worker:4", "--job_name=ps"}),
             Contains("leave out --*_hosts, --job_name and --task_index"));
  CHECK_THAT(error(Args{"p", "--slurm_jobs=ps:1,worker:4", "--ps_hosts=a:1"}),
             Contains("leave out --*_hosts"));
  for (const char* port : {"0", "65536", "x", "-1", "123456"}) {
    CHECK_THAT(
        error(Args{"p", "--slurm_jobs=ps:1,worker:4", std::string("--slurm_port_base=") + port}),
        Contains("is not a port in 1..65535"));
  }
  CHECK_THAT(error(Args{"p", "--slurm_port_base=9000", "--ps_hosts=a:1", "--job_name=ps"}),
             Contains("--slurm_port_base needs --slurm_jobs"));
  CHECK_THAT(error(Args{"p", "--slurm_jobs"}), Contains("flag --slurm_jobs needs a value"));
  CHECK_THAT(error_of([] {
               TaskFlags::parse({"p", "--slurm_jobs=ps:1"}, std::nullopt, true,
                                std::make_unique<SlurmEnvironment>().get());
             }),
             Contains("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST"));
}

// ---- Found by fuzzing (fuzz/targets/cluster_spec.cpp, tf_config.cpp; fuzz/regressions/) -------

TEST_CASE("fuzz regression: a non-ASCII address is InvalidArgument, so TF_CONFIG can be written") {
  // Such an address used to be accepted, and to_tf_config_json then threw nlohmann's type_error
  // (invalid UTF-8) instead of writing the TF_CONFIG.
  for (const std::string address : {"h\xff:2222", "h\xc3\xa9:2222", "h\x01:2222"}) {
    CHECK_THROWS_AS(ClusterSpec({{"ps", {address}}}), psflow::InvalidArgument);
    CHECK_THAT(error_of([&] {
                 ClusterSpec({{"ps", {address}}});
               }),
               Contains("not printable ASCII"));
    CHECK_THAT(error_of([&] {
                 TaskFlags::parse({"prog", "--ps_hosts=" + address}, std::nullopt);
               }),
               Contains("not printable ASCII"));
  }
  CHECK_THAT(error_of([] { ClusterSpec::from_tf_config(R"({"cluster": {"ps": ["h\u00e9:1"]}})"); }),
             Contains("not printable ASCII"));
}

TEST_CASE("fuzz regression: a number JSON cannot hold in TF_CONFIG is InvalidArgument") {
  // nlohmann reports 1e999 as out_of_range, not parse_error: it used to escape untyped.
  const std::string config =
      R"({"cluster": {"ps": ["h:1"]}, "task": {"type": "ps", "index": 1e999}})";
  CHECK_THROWS_AS(TfConfig::parse(config), psflow::InvalidArgument);
  CHECK_THROWS_AS(ClusterSpec::from_tf_config(config), psflow::InvalidArgument);
  CHECK_THAT(error_of([&] { TaskFlags::parse({"prog"}, config); }),
             Contains("TF_CONFIG is not valid JSON") && Contains("number overflow"));
}
