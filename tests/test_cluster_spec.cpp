// ClusterSpec (validation, lookups, TF_CONFIG) and TaskFlags (TF's flags and TF_CONFIG).
#include <catch2/catch.hpp>
#include <cstdlib>
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
  const char* argv[] = {"prog", "--other"};
  ::setenv("TF_CONFIG", kTfConfig, 1);
  const TaskFlags f = TaskFlags::parse(2, argv);
  ::unsetenv("TF_CONFIG");
  CHECK(f.job_name == "worker");
  CHECK(f.task_index == 1);
  CHECK(f.remaining_args == std::vector<std::string>{"prog", "--other"});
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

TEST_CASE("TaskFlags: --heartbeat_timeout_s sets the server options' heartbeat timeout") {
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
}
