// psflow::Flags (a program's command line, with TaskFlags as one group) and the strict
// TaskFlags::parse(argc, argv): --help, unknown flags named with the nearest known one, values.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "psflow/core/flag_text.hpp"
#include "psflow/distributed/flags.hpp"

using Catch::Contains;
using psflow::Flags;
using psflow::InvalidArgument;
using psflow::TaskFlags;

namespace {

std::string error_of(Flags& flags, const std::vector<std::string>& args) {
  try {
    flags.parse(args, std::nullopt);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the nearest known flag: '-' for '_', else the fewest edits, else none") {
  const std::vector<std::string> known{"job_name", "task_index", "ps_hosts", "train_steps"};
  CHECK(psflow::detail::nearest_flag("job-name", known) == "job_name");
  CHECK(psflow::detail::nearest_flag("task_idx", known) == "task_index");
  CHECK(psflow::detail::nearest_flag("ps_host", known) == "ps_hosts");
  CHECK(psflow::detail::nearest_flag("learning_rate", known).empty());
  CHECK(psflow::detail::is_flag_named("--job_name=ps", "job_name"));
  CHECK(psflow::detail::is_flag_named("-job_name", "job_name"));
  CHECK_FALSE(psflow::detail::is_flag_named("--job_names=ps", "job_name"));
}

TEST_CASE("an argument splits into dashes and name and value and -1 and -.5 are values") {
  using psflow::detail::split_flag_argument;
  const auto full = split_flag_argument("--ps_hosts=a:1,b:2=x");
  CHECK(full.dashes == 2);
  CHECK(full.name == "ps_hosts");
  CHECK(full.value == std::optional<std::string>("a:1,b:2=x"));
  const auto bare = split_flag_argument("-bind_all");
  CHECK(bare.dashes == 1);
  CHECK(bare.name == "bind_all");
  CHECK_FALSE(bare.value);
  CHECK(split_flag_argument("--x=").value == std::optional<std::string>(""));
  CHECK(split_flag_argument("value").dashes == 0);
  CHECK(split_flag_argument("value").name.empty());
  CHECK(psflow::detail::looks_like_value("-1"));
  CHECK(psflow::detail::looks_like_value("-.5"));
  CHECK(psflow::detail::looks_like_value("-"));
  CHECK(psflow::detail::looks_like_value("host:1"));
  CHECK_FALSE(psflow::detail::looks_like_value("--x"));
  CHECK_FALSE(psflow::detail::looks_like_value("-x"));
}

TEST_CASE("Flags reads every kind of value, and says what is wrong with a bad one") {
  std::string name = "mlp";
  std::int64_t steps = 10;
  std::size_t batch = 32;
  double rate = 0.5;
  bool sync = false;
  Flags flags("trainer", "trains");
  flags.add("model", "mlp | cnn", &name)
      .add("train_steps", "global steps", &steps, 1)
      .add("batch_size", "examples per step", &batch)
      .add("learning_rate", "the rate", &rate, 0.0)
      .add("sync_replicas", "synchronous", &sync);
  CHECK(flags.parse({"trainer", "--model=cnn", "--train_steps", "20", "-batch_size=64",
                     "--learning_rate=0.25", "--sync_replicas"},
                    std::nullopt));
  CHECK(name == "cnn");
  CHECK(steps == 20);
  CHECK(batch == 64);
  CHECK(rate == 0.25);
  CHECK(sync);
  CHECK_THAT(error_of(flags, {"trainer", "--train_steps=0"}),
             Contains("--train_steps='0' is not an integer >= 1") &&
                 Contains("run 'trainer --help' for the flags"));
  CHECK_THAT(error_of(flags, {"trainer", "--batch_size=-1"}), Contains("is not an integer"));
  CHECK_THAT(error_of(flags, {"trainer", "--model"}), Contains("--model needs a value"));
  CHECK_THAT(error_of(flags, {"trainer", "--sync_replicas=maybe"}), Contains("true or false"));
  CHECK_THAT(error_of(flags, {"trainer", "--train-steps=5"}),
             Contains("unknown flag '--train-steps=5' (did you mean --train_steps?)"));
  CHECK_THAT(error_of(flags, {"trainer", "stray"}), Contains("unexpected argument 'stray'"));
  CHECK_THROWS_AS(flags.add("model", "again", &name), InvalidArgument);
}

TEST_CASE("Flags: --help reads nothing and the text lists every flag with its default") {
  std::int64_t steps = 10;
  TaskFlags task;
  Flags flags("trainer", "trains a model");
  flags.add("train_steps", "global steps", &steps, 1).add_task_flags(&task);
  CHECK_FALSE(flags.parse({"trainer", "--train_steps=99", "--help"}, std::nullopt));
  CHECK(steps == 10);
  const std::string help = flags.help();
  CHECK_THAT(help, Contains("trainer: trains a model") && Contains("--train_steps (10)") &&
                       Contains("--job_name") && Contains("--startup_timeout_s (120)") &&
                       Contains("--orphan_timeout_s (600)") && Contains("--help"));
}

TEST_CASE("Flags with the task flags: a named task fills TaskFlags, the rest the program's") {
  std::int64_t steps = 10;
  TaskFlags task;
  Flags flags("trainer", "trains");
  flags.add("train_steps", "global steps", &steps, 1).add_task_flags(&task);
  REQUIRE(
      flags.parse({"trainer", "--ps_hosts=h0:1", "--worker_hosts=h1:1,h2:1", "--job_name=worker",
                   "--task_index=1", "--train_steps=7", "--startup_timeout_s=30"},
                  std::nullopt));
  CHECK(task.job_name == "worker");
  CHECK(task.task_index == 1);
  CHECK(task.cluster.num_tasks("worker") == 2);
  CHECK(task.startup_timeout_s == 30);
  CHECK(steps == 7);

  // No --job_name and no TF_CONFIG: one process, the task left empty.
  REQUIRE(flags.parse({"trainer", "--train_steps=8"}, std::nullopt));
  CHECK(task.job_name.empty());
  CHECK(steps == 8);
  CHECK_THAT(error_of(flags, {"trainer", "--ps_hosts=h0:1"}),
             Contains("'--ps_hosts=h0:1' is a flag of one task of a cluster"));
  // TF_CONFIG names the task.
  REQUIRE(flags.parse(
      {"trainer"},
      R"({"cluster": {"ps": ["h0:1"], "worker": ["h1:1"]}, "task": {"type": "ps", "index": 0}})"));
  CHECK(task.job_name == "ps");
  CHECK_THAT(
      error_of(flags, {"trainer", "--ps_hosts=h0:1", "--worker_hosts=h1:1", "--job-name=worker"}),
      Contains("did you mean --job_name?"));
}

TEST_CASE("TaskFlags::parse(argc, argv) rejects what is not a task flag, naming the nearest") {
  ::unsetenv("TF_CONFIG");
  const char* typo[] = {"prog", "--ps_hosts=h0:1", "--worker_hosts=h1:1", "--job_name=worker",
                        "--task-index=0"};
  try {
    TaskFlags::parse(5, typo);
    FAIL("an unknown flag was accepted");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.what(), Contains("unknown flag '--task-index=0' (did you mean --task_index?)") &&
                             Contains("run 'prog --help'"));
  }
  const char* fine[] = {"prog", "--ps_hosts=h0:1", "--worker_hosts=h1:1", "--job_name=worker",
                        "--orphan_timeout_s=5"};
  const TaskFlags task = TaskFlags::parse(5, fine);
  CHECK(task.server_options().orphan_timeout == std::chrono::seconds(5));
  const char* zero[] = {"prog", "--ps_hosts=h0:1", "--worker_hosts=h1:1", "--job_name=worker",
                        "--startup_timeout_s=0"};
  CHECK_THROWS_AS(TaskFlags::parse(5, zero), InvalidArgument);
}
