// DeviceSpec: TensorFlow's device-string grammar, canonical printing, merging and errors.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <unordered_set>

#include "psflow/core/device_spec.hpp"

using psflow::DeviceSpec;

namespace {

std::string canon(std::string_view s) { return DeviceSpec::parse(s).to_string(); }

// The InvalidArgument message parse() throws for `spec` ("" when it does not throw).
std::string parse_error(std::string_view spec) {
  try {
    DeviceSpec::parse(spec);
  } catch (const psflow::InvalidArgument& e) {
    return e.message();
  }
  return "";
}

}  // namespace

TEST_CASE("a full device string parses into every field") {
  const DeviceSpec d = DeviceSpec::parse("/job:worker/replica:1/task:3/device:CPU:2");
  CHECK(d.job == "worker");
  CHECK(d.replica == 1);
  CHECK(d.task == 3);
  CHECK(d.device_type == "CPU");
  CHECK(d.device_index == 2);
  CHECK(d.is_fully_specified());
  CHECK(d.to_string() == "/job:worker/replica:1/task:3/device:CPU:2");
}

TEST_CASE("the empty spec parses from \"\" and \"/\" and prints as \"\"") {
  CHECK(DeviceSpec::parse("").empty());
  CHECK(DeviceSpec::parse("/").empty());
  CHECK(DeviceSpec{}.to_string().empty());
  CHECK_FALSE(DeviceSpec{}.is_fully_specified());
}

TEST_CASE("canonical strings round-trip unchanged") {
  for (const char* s :
       {"/job:ps", "/job:ps/task:1", "/replica:0", "/task:7", "/device:CPU:0", "/device:GPU:*",
        "/job:foo/replica:12/device:GPU:2", "/job:worker/replica:0/task:0/device:CPU:0",
        "/job:muu/device:MyDev_2:3", "/job:a_1/task:10"}) {
    INFO(s);
    CHECK(canon(s) == s);
    CHECK(DeviceSpec::parse(DeviceSpec::parse(s).to_string()) == DeviceSpec::parse(s));
  }
}

TEST_CASE("printing follows job, replica, task, device whatever the input order") {
  CHECK(canon("/device:CPU:0/task:1/job:ps") == "/job:ps/task:1/device:CPU:0");
  CHECK(canon("/task:2/replica:0") == "/replica:0/task:2");
  CHECK(canon("/cpu:0/job:w") == "/job:w/device:CPU:0");
}

TEST_CASE("legacy device forms are read as /device:TYPE:N") {
  CHECK(canon("/cpu:0") == "/device:CPU:0");
  CHECK(canon("/gpu:1") == "/device:GPU:1");
  CHECK(canon("/CPU:3") == "/device:CPU:3");
  CHECK(canon("/GPU:*") == "/device:GPU:*");
  CHECK(canon("/cpu") == "/device:CPU:*");
  CHECK(canon("/replica:1/task:0/cpu:0") == "/replica:1/task:0/device:CPU:0");
  CHECK(canon("/job:localhost/replica:0/task:0/cpu:0") ==
        "/job:localhost/replica:0/task:0/device:CPU:0");
}

TEST_CASE("lowercase cpu/gpu type names are upper-cased, other types keep their case") {
  CHECK(canon("/device:cpu:0") == "/device:CPU:0");
  CHECK(canon("/device:gpu:1") == "/device:GPU:1");
  CHECK(DeviceSpec::parse("/device:cpu:0").device_type == "CPU");
  CHECK(canon("/device:MyFunnyDevice:2") == "/device:MyFunnyDevice:2");
}

TEST_CASE("a missing device index prints as '*'") {
  const DeviceSpec d = DeviceSpec::parse("/device:CPU");
  CHECK(d.device_type == "CPU");
  CHECK_FALSE(d.device_index.has_value());
  CHECK(d.to_string() == "/device:CPU:*");
  CHECK(DeviceSpec{.job = "foo", .replica = 12, .task = 3, .device_type = "GPU"}.to_string() ==
        "/job:foo/replica:12/task:3/device:GPU:*");
  CHECK(DeviceSpec{.device_type = "CPU"}.to_string() == "/device:CPU:*");
}

TEST_CASE("'*' means any value for every field") {
  CHECK(DeviceSpec::parse("/job:*/replica:*/task:*/device:*:*").empty());
  CHECK(canon("/job:ps/task:*") == "/job:ps");
  CHECK(canon("/device:GPU:*") == "/device:GPU:*");
}

TEST_CASE("the leading slash and empty pieces are optional, as in TF") {
  CHECK(canon("CPU:0") == "/device:CPU:0");
  CHECK(canon("job:ps/task:0") == "/job:ps/task:0");
  CHECK(canon("/job:ps//task:0/") == "/job:ps/task:0");
}

TEST_CASE("designated initializers build specs that print canonically") {
  CHECK(DeviceSpec{.job = "ps", .task = 1}.to_string() == "/job:ps/task:1");
  CHECK(DeviceSpec{.job = "j", .replica = 0, .task = 1, .device_type = "CPU", .device_index = 2}
            .to_string() == "/job:j/replica:0/task:1/device:CPU:2");
  // An index without a type is not printed (TF drops it too).
  CHECK(DeviceSpec{.device_index = 3}.to_string().empty());
}

TEST_CASE("merge_from: fields set in the argument win, others are kept") {
  DeviceSpec d = DeviceSpec::parse("/job:foo/replica:0");
  d.merge_from(DeviceSpec::parse("/task:1/device:GPU:2"));
  CHECK(d.to_string() == "/job:foo/replica:0/task:1/device:GPU:2");

  d = DeviceSpec{};
  d.merge_from(DeviceSpec::parse("/task:1/cpu:0"));
  CHECK(d.to_string() == "/task:1/device:CPU:0");
  d.merge_from(DeviceSpec::parse("/job:boo/device:GPU:0"));
  CHECK(d.to_string() == "/job:boo/task:1/device:GPU:0");
  d.merge_from(DeviceSpec::parse("/job:muu/cpu:2"));
  CHECK(d.to_string() == "/job:muu/task:1/device:CPU:2");
  d.merge_from(DeviceSpec::parse("/job:muu/device:MyFunnyDevice:2"));
  CHECK(d.to_string() == "/job:muu/task:1/device:MyFunnyDevice:2");

  // Field by field: a new type with no index keeps the old index (TF's merge_from).
  d = DeviceSpec::parse("/device:CPU:1");
  d.merge_from(DeviceSpec::parse("/device:GPU:*"));
  CHECK(d.to_string() == "/device:GPU:1");

  // Merging the empty spec changes nothing; merge_from returns *this for chaining.
  const DeviceSpec before = DeviceSpec::parse("/job:ps/task:0");
  d = before;
  CHECK(d.merge_from(DeviceSpec{}) == before);
}

TEST_CASE("nested scopes: inner fields win (TF's documented cases)") {
  // with tf.device("/job:worker"): with tf.device("/device:GPU:1"): -> /job:worker/device:GPU:1
  DeviceSpec outer = DeviceSpec::parse("/job:worker");
  CHECK(outer.merged_with(DeviceSpec::parse("/device:GPU:1")).to_string() ==
        "/job:worker/device:GPU:1");

  // DeviceSpec docstring: job="train" outside; inner job="ps", GPU:0 -> /job:ps/device:GPU:0,
  // inner GPU:1 only -> /job:train/device:GPU:1.
  outer = DeviceSpec{.job = "train"};
  CHECK(outer.merged_with(DeviceSpec{.job = "ps", .device_type = "GPU", .device_index = 0})
            .to_string() == "/job:ps/device:GPU:0");
  CHECK(outer.merged_with(DeviceSpec{.device_type = "GPU", .device_index = 1}).to_string() ==
        "/job:train/device:GPU:1");
  CHECK(outer.to_string() == "/job:train");  // merged_with leaves the original alone

  // merge_device's docstring: GPU:0, then /job:worker, then CPU:0, then /job:ps.
  DeviceSpec scope = DeviceSpec::parse("/device:GPU:0");
  CHECK(scope.merge_from(DeviceSpec::parse("/job:worker")).to_string() ==
        "/job:worker/device:GPU:0");
  CHECK(scope.merge_from(DeviceSpec::parse("/device:CPU:0")).to_string() ==
        "/job:worker/device:CPU:0");
  CHECK(scope.merge_from(DeviceSpec::parse("/job:ps")).to_string() == "/job:ps/device:CPU:0");
}

TEST_CASE("matches, is_satisfied_by, address_space") {
  const DeviceSpec ps1 = DeviceSpec::parse("/job:ps/task:1");
  const DeviceSpec full = DeviceSpec::parse("/job:ps/replica:0/task:1/device:CPU:0");
  CHECK(ps1.matches(full));
  CHECK(full.matches(ps1));
  CHECK(ps1.matches(DeviceSpec::parse("/device:CPU:0")));
  CHECK_FALSE(ps1.matches(DeviceSpec::parse("/job:ps/task:2")));
  CHECK_FALSE(ps1.matches(DeviceSpec::parse("/job:worker")));
  CHECK(DeviceSpec{}.matches(full));

  CHECK(ps1.is_satisfied_by(full));
  CHECK_FALSE(full.is_satisfied_by(ps1));
  CHECK_FALSE(ps1.is_satisfied_by(DeviceSpec::parse("/device:CPU:0")));
  CHECK(DeviceSpec{}.is_satisfied_by(ps1));

  CHECK(full.address_space().to_string() == "/job:ps/replica:0/task:1");
}

TEST_CASE("equality, hashing, canonical_device, printing") {
  CHECK(DeviceSpec::parse("/cpu:0") == DeviceSpec::parse("/device:CPU:0"));
  CHECK(DeviceSpec::parse("/cpu:0") != DeviceSpec::parse("/cpu:1"));
  std::unordered_set<DeviceSpec> set{DeviceSpec::parse("/cpu:0"),
                                     DeviceSpec::parse("/device:CPU:0")};
  CHECK(set.size() == 1);
  CHECK(psflow::canonical_device("/task:0/job:ps/cpu:0") == "/job:ps/task:0/device:CPU:0");
  std::ostringstream os;
  os << DeviceSpec::parse("/gpu:1");
  CHECK(os.str() == "/device:GPU:1");
  CHECK(psflow::is_valid_job_name("worker_2"));
  CHECK_FALSE(psflow::is_valid_job_name("2worker"));
  CHECK_FALSE(psflow::is_valid_job_name("my-job"));
  CHECK_FALSE(psflow::is_valid_job_name(""));
}

TEST_CASE("errors are InvalidArgument quoting the whole string and naming the bad piece") {
  struct Case {
    const char* spec;
    const char* piece;   // must appear in the message
    const char* reason;  // must appear in the message
  };
  const Case cases[] = {
      {"/foo:bar", "foo", "unknown attribute"},
      {"/job:ps/foo:bar", "/foo:bar", "unknown attribute 'foo'"},
      {"/cpu:0/gpu:1", "/gpu:1", "two device types"},
      {"/device:GPU:0/device:CPU:0", "/device:CPU:0", "two device types"},
      {"/job:muu/device:GPU:2/cpu:0", "/cpu:0", "two device types"},
      {"/task:x", "/task:x", "task 'x' is not a non-negative integer"},
      {"/task:-1", "/task:-1", "is not a non-negative integer"},
      {"/task:", "/task:", "empty task"},
      {"/replica:1.5", "/replica:1.5", "replica '1.5' is not a non-negative integer"},
      {"/device:CPU:abc", "/device:CPU:abc", "device index 'abc'"},
      {"/cpu:x", "/cpu:x", "device index 'x'"},
      {"/device:CPU:99999999999", "99999999999", "too large"},
      {"/job:", "/job:", "empty job name"},
      {"/job:my-job", "/job:my-job", "bad job name 'my-job'"},
      {"/job:a:b", "/job:a:b", "'job' takes exactly one value"},
      {"/job", "/job", "'job' takes exactly one value"},
      {"/job:a/job:b", "/job:b", "job is given twice"},
      {"/task:0/task:1", "/task:1", "task is given twice"},
      {"/device:C-PU:0", "/device:C-PU:0", "bad device type"},
      {"/device:CPU:0:1", "/device:CPU:0:1", "expected /device:<TYPE>:<int|*>"},
      {"/device:*:0", "/device:*:0", "needs a device type"},
      {"/:0", "/:0", "missing attribute name"},
      {" /cpu:0", "/ ", "unknown attribute"},
  };
  for (const Case& c : cases) {
    INFO(c.spec);
    CHECK_THROWS_AS(DeviceSpec::parse(c.spec), psflow::InvalidArgument);
    const std::string message = parse_error(c.spec);
    CHECK_THAT(message, Catch::Contains(std::string("'") + c.spec + "'"));
    CHECK_THAT(message, Catch::Contains(c.piece));
    CHECK_THAT(message, Catch::Contains(c.reason));
  }
}

TEST_CASE("an error's what() carries the code and says what is expected") {
  try {
    DeviceSpec::parse("/foo:bar");
    FAIL("no exception");
  } catch (const psflow::Error& e) {
    CHECK(e.code() == psflow::ErrorCode::invalid_argument);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("InvalidArgument: "));
    CHECK_THAT(std::string(e.what()), Catch::Contains("/job:<name>/replica:<int>/task:<int>"));
  }
}
