// examples/serve/rest_api.hpp without sockets: TF Serving's status, metadata and :predict in
// both request formats against in-process predict, one input and several, and every bad request
// answered with its status and an {"error": ...} body. (tests/tools/check_serving.py drives the
// real program over HTTP with curl.)
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "psflow/core/fingerprint.hpp"
#include "psflow/psflow.hpp"
#include "serve/rest_api.hpp"
#include "support/temp_dir.hpp"

namespace rest_api_test {

using namespace psflow;
using Catch::Contains;
using nlohmann::json;

// y = x @ w + b (x [-1, 2]); z = sum(ids) as int64 per row; served with one input or two.
struct Bundles {
  testing::TempDir dir{"rest"};
  Bundles() {
    Graph g;
    auto x = ops::placeholder(g, DType::float32, {-1, 2}, "x");
    auto ids = ops::placeholder(g, DType::int64, {-1, 3}, "ids");
    auto w = get_variable(g, "w", {2, 1}, constant_initializer(0.5));
    auto b = get_variable(g, "b", {1}, constant_initializer(0.25));
    auto y = ops::matmul(x, w.value()) + b.value();
    auto z = ops::reduce_sum(ids, {1});
    Session sess(g);
    sess.run(global_variables_initializer(g));
    serving::export_model(sess, dir / "one", {.inputs = {{"x", x}}, .outputs = {{"y", y}}});
    serving::export_model(sess, dir / "two",
                          {.inputs = {{"x", x}, {"ids", ids}}, .outputs = {{"y", y}, {"z", z}}});
  }
};

json call(const serve::RestApi& api, const char* method, const std::string& target,
          const std::string& body, unsigned expected_status) {
  const serve::Response r = api.handle(method, target, body);
  INFO(r.body);
  CHECK(r.status == expected_status);
  return json::parse(r.body);
}

TEST_CASE("status and metadata in TF Serving's layout") {
  Bundles bundles;
  const auto model = serving::Model::load(bundles.dir / "one");
  const serve::RestApi api(model, "m", "3");
  const json status = call(api, "GET", "/v1/models/m", "", 200);
  CHECK(status["model_version_status"][0]["version"] == "3");
  CHECK(status["model_version_status"][0]["state"] == "AVAILABLE");
  CHECK(call(api, "GET", "/v1/models/m/versions/3", "", 200) == status);

  const json meta = call(api, "GET", "/v1/models/m/metadata", "", 200);
  CHECK(meta["model_spec"]["name"] == "m");
  const json& x =
      meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]["x"];
  CHECK(x["dtype"] == "DT_FLOAT");
  CHECK(x["name"] == "x:0");
  CHECK(x["tensor_shape"]["dim"][0]["size"] == "-1");
  CHECK(x["tensor_shape"]["dim"][1]["size"] == "2");
  const json& y =
      meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["outputs"]["y"];
  CHECK(y["dtype"] == "DT_FLOAT");
  CHECK(y["tensor_shape"]["dim"].size() == 2);
}

TEST_CASE(":predict answers the row and columnar formats as in-process predict does") {
  Bundles bundles;
  const auto one = serving::Model::load(bundles.dir / "one");
  const serve::RestApi api(one, "m", "1");
  // y = 0.5 * (x0 + x1) + 0.25
  CHECK(call(api, "POST", "/v1/models/m:predict", R"({"instances": [[1, 2], [3, 4.5]]})", 200) ==
        json::parse(R"({"predictions": [[1.75], [4.0]]})"));
  CHECK(call(api, "POST", "/v1/models/m/versions/1:predict",
             R"({"signature_name": "serving_default", "inputs": [[1, 2]]})",
             200) == json::parse(R"({"outputs": [[1.75]]})"));
  CHECK(call(api, "POST", "/v1/models/m:predict", R"({"inputs": {"x": [[0, 0]]}})", 200) ==
        json::parse(R"({"outputs": [[0.25]]})"));

  const auto two = serving::Model::load(bundles.dir / "two");
  const serve::RestApi api2(two, "m", "1");
  CHECK(call(api2, "POST", "/v1/models/m:predict",
             R"({"instances": [{"x": [1, 2], "ids": [1, 2, 3]}, {"x": [0, 0], "ids": [4, 5, 6]}]})",
             200) ==
        json::parse(R"({"predictions": [{"y": [1.75], "z": 6}, {"y": [0.25], "z": 15}]})"));
  CHECK(call(api2, "POST", "/v1/models/m:predict",
             R"({"inputs": {"x": [[1, 2]], "ids": [[1, 1, 1]]}})",
             200) == json::parse(R"({"outputs": {"y": [[1.75]], "z": [3]}})"));
}

TEST_CASE("bad requests get their status and an error body, and good ones still work") {
  Bundles bundles;
  const auto two = serving::Model::load(bundles.dir / "two");
  const serve::RestApi api(two, "m", "1");
  auto refused = [&](const char* method, const std::string& target, const std::string& body,
                     unsigned status, const std::string& message) {
    const json r = call(api, method, target, body, status);
    CHECK_THAT(r["error"].get<std::string>(), Contains(message));
  };
  const std::string predict = "/v1/models/m:predict";
  refused("POST", predict, "{\"instances\": [", 400, "malformed JSON");
  refused("POST", predict, "[1, 2]", 400, "must be a JSON object");
  refused("POST", predict, "{}", 400, "exactly one of \"instances\"");
  refused("POST", predict, R"({"instances": [[1, 2]]})", 400, "each instance must be an object");
  refused("POST", predict, R"({"instances": [{"x": [1, 2]}]})", 400, "no input 'ids'");
  refused("POST", predict, R"({"instances": [{"x": [1, 2], "ids": [1, 2, 3], "q": 1}]})", 400,
          "unknown input 'q'");
  refused("POST", predict, R"({"instances": [{"x": [1, "a"], "ids": [1, 2, 3]}]})", 400,
          "input 'x': expected a number, got \"a\"");
  refused("POST", predict, R"({"instances": [{"x": [1, 2], "ids": [1.5, 2, 3]}]})", 400,
          "input 'ids': expected an integer, got 1.5");
  refused("POST", predict, R"({"inputs": {"x": [[1, 2], [3]], "ids": [[1, 2, 3]]}})", 400,
          "ragged");
  refused("POST", predict, R"({"inputs": {"x": [[1, 2, 3]], "ids": [[1, 2, 3]]}})", 400,
          "input 'x' is float32 [1,3], but the signature expects float32 [?,2]");
  refused("POST", predict, R"({"signature_name": "other", "inputs": {"x": [[1, 2]]}})", 400,
          "unknown signature_name");
  refused("POST", "/v1/models/other:predict", "{}", 404, "Servable not found");
  refused("GET", "/v1/models/m/versions/7", "", 404, "Servable not found");
  refused("GET", "/v2/anything", "", 404, "no such path");
  refused("GET", "/v1/models/m/labels", "", 404, "no such path");
  refused("GET", predict, "", 405, "takes POST");
  refused("POST", "/v1/models/m/metadata", "", 405, "takes GET");
  CHECK(call(api, "POST", predict, R"({"inputs": {"x": [[1, 2]], "ids": [[1, 1, 1]]}})", 200)
            .contains("outputs"));
}

TEST_CASE("string inputs and outputs: JSON strings, and {\"b64\": ...} for binary bytes") {
  testing::TempDir dir("rest-strings");
  {
    Graph g;
    auto user = ops::placeholder(g, DType::string, {-1}, "user");
    auto bucket = ops::string_to_hash_bucket_fast(user, 1000);
    auto tagged = ops::string_join({user, ops::constant(g, Tensor(std::string("\xff")))});
    Session sess(g);
    serving::export_model(
        sess, dir / "m",
        {.inputs = {{"user", user}}, .outputs = {{"bucket", bucket}, {"tagged", tagged}}});
  }
  const auto model = serving::Model::load(dir / "m");
  const serve::RestApi api(model, "m", "1");
  const json meta = call(api, "GET", "/v1/models/m/metadata", "", 200);
  CHECK(meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]["user"]
            ["dtype"] == "DT_STRING");
  // "a\0b" in base64 is "YQBi".
  const json out = call(api, "POST", "/v1/models/m:predict",
                        R"({"instances": ["user:12345", {"b64": "YQBi"}]})", 200);
  REQUIRE(out["predictions"].size() == 2);
  CHECK(out["predictions"][0]["bucket"] ==
        static_cast<std::int64_t>(fingerprint64("user:12345") % 1000));
  CHECK(out["predictions"][1]["bucket"] ==
        static_cast<std::int64_t>(fingerprint64(std::string("a\0b", 3)) % 1000));
  // Not UTF-8 (a 0xff byte): answered as base64.
  CHECK(out["predictions"][0]["tagged"] == json{{"b64", serve::base64_encode("user:12345\xff")}});
  const std::string binary("any\0bytes\xff", 10);
  CHECK(serve::base64_decode(serve::base64_encode(binary)) == binary);
  CHECK(serve::base64_encode("ab") == "YWI=");
  const json bad = call(api, "POST", "/v1/models/m:predict", R"({"instances": [12]})", 400);
  CHECK_THAT(bad["error"].get<std::string>(), Contains("expected a string"));
  call(api, "POST", "/v1/models/m:predict", R"({"instances": [{"b64": "not base64!"}]})", 400);
}

}  // namespace rest_api_test
