// tf.train.Example (data/example.hpp): data::Example writes what parse_example
// reads back, the reader takes every wire form protobuf allows (packed and
// unpacked lists, unknown fields, a key given twice), FixedLenFeature defaults
// and VarLenFeature sparse tensors, and errors name the example and the
// feature.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "psflow/data/example.hpp"
#include "psflow/observe/proto_writer.hpp"

using Catch::Contains;
using psflow::DType;
using psflow::InvalidArgument;
using psflow::Shape;
using psflow::Tensor;
namespace data = psflow::data;
using data::FixedLenFeature;
using data::VarLenFeature;

namespace {
Tensor serialized(std::vector<std::string> examples) {
  return Tensor::from_vector(std::move(examples));
}
const Tensor& dense(const std::map<std::string, data::ParsedFeature>& parsed,
                    const std::string& name) {
  return std::get<Tensor>(parsed.at(name));
}
const std::array<Tensor, 3>& sparse(const std::map<std::string, data::ParsedFeature>& parsed,
                                    const std::string& name) {
  return std::get<std::array<Tensor, 3>>(parsed.at(name));
}
template <class T>
std::vector<T> values(const Tensor& t) {
  const auto v = t.values<T>();
  return {v.begin(), v.end()};
}
}  // namespace

TEST_CASE("parse_example reads back what data::Example writes") {
  const std::string a = data::Example()
                            .set("age", std::vector<std::int64_t>{31})
                            .set("score", std::vector<float>{0.5f, -1.25f})
                            .set("user", std::vector<std::string>{"user:12345"})
                            .set("tags", std::vector<std::string>{"x", std::string("n\0l", 3)})
                            .serialize();
  const std::string b = data::Example()
                            .set("age", std::vector<std::int64_t>{-7})
                            .set("score", std::vector<float>{2, 3})
                            .set("user", std::vector<std::string>{""})
                            .serialize();
  const auto parsed = data::parse_example(
      serialized({a, b}), {{"age", FixedLenFeature{{}, DType::int64, {}}},
                           {"score", FixedLenFeature{{2}, DType::float32, {}}},
                           {"user", FixedLenFeature{{1}, DType::string, {}}},
                           {"tags", VarLenFeature{DType::string}},
                           {"missing", FixedLenFeature{{2}, DType::float32, Tensor(9.0f)}}});
  CHECK(dense(parsed, "age").equals(Tensor::from_vector<std::int64_t>({31, -7})));
  CHECK(dense(parsed, "score").equals(Tensor::from_vector<float>({0.5f, -1.25f, 2, 3}, {2, 2})));
  CHECK(dense(parsed, "user").equals(Tensor::from_vector<std::string>({"user:12345", ""}, {2, 1})));
  CHECK(dense(parsed, "missing").equals(Tensor::from_vector<float>({9, 9, 9, 9}, {2, 2})));
  const auto& tags = sparse(parsed, "tags");
  CHECK(tags[0].equals(Tensor::from_vector<std::int64_t>({0, 0, 0, 1}, {2, 2})));
  CHECK(tags[1].equals(Tensor::from_vector<std::string>({"x", std::string("n\0l", 3)})));
  CHECK(tags[2].equals(Tensor::from_vector<std::int64_t>({2, 2})));

  const auto single =
      data::parse_single_example(Tensor(a), {{"score", FixedLenFeature{{2}, DType::float32, {}}},
                                             {"tags", VarLenFeature{DType::string}}});
  CHECK(dense(single, "score").equals(Tensor::from_vector<float>({0.5f, -1.25f})));
  CHECK(sparse(single, "tags")[0].equals(Tensor::from_vector<std::int64_t>({0, 1}, {2, 1})));
  CHECK(sparse(single, "tags")[2].equals(Tensor::from_vector<std::int64_t>({2})));
}

TEST_CASE(
    "the reader takes unpacked lists, unknown fields, and the last of a "
    "repeated key") {
  using psflow::observe::ProtoWriter;
  auto feature = [](int kind, const ProtoWriter& list) {
    return ProtoWriter().message(kind, list);
  };
  auto entry = [](const std::string& key, const ProtoWriter& value) {
    return ProtoWriter().bytes(1, key).message(2, value);
  };
  // Unpacked floats (wire type 5) and int64s (varints), an unknown field in
  // Example and in a Feature, and "id" given twice: the second wins.
  ProtoWriter features;
  features.message(1, entry("f", feature(2, ProtoWriter().float32(1, 1.5f).float32(1, -2))));
  features.message(1, entry("id", feature(3, ProtoWriter().varint(1, 5))));
  features.message(1, entry("id", feature(3, ProtoWriter().int64(1, -3)).varint(9, 1)));
  const std::string bytes = ProtoWriter().message(1, features).varint(7, 42).str();
  const auto parsed =
      data::parse_example(serialized({bytes}), {{"f", FixedLenFeature{{2}, DType::float32, {}}},
                                                {"id", FixedLenFeature{{1}, DType::int64, {}}}});
  CHECK(dense(parsed, "f").equals(Tensor::from_vector<float>({1.5f, -2}, {1, 2})));
  CHECK(dense(parsed, "id").equals(Tensor::from_vector<std::int64_t>({-3}, {1, 1})));
}

TEST_CASE("parse_example names the example and feature of what is wrong") {
  const std::string ok = data::Example().set("x", std::vector<float>{1, 2}).serialize();
  const std::string other = data::Example().set("y", std::vector<float>{1}).serialize();
  const std::map<std::string, data::Feature> x2{{"x", FixedLenFeature{{2}, DType::float32, {}}}};
  CHECK_THROWS_WITH(data::parse_example(serialized({ok, other}), x2),
                    Contains("example 1, feature 'x' is missing and has no default_value"));
  CHECK_THROWS_WITH(
      data::parse_example(serialized({ok}), {{"x", FixedLenFeature{{3}, DType::float32, {}}}}),
      Contains("example 0, feature 'x' has 2 values, its shape [3] needs 3"));
  CHECK_THROWS_WITH(
      data::parse_example(serialized({ok}), {{"x", FixedLenFeature{{2}, DType::int64, {}}}}),
      Contains("holds float32 values, the feature is declared int64"));
  CHECK_THROWS_WITH(
      data::parse_example(serialized({ok}), {{"x", FixedLenFeature{{2}, DType::int32, {}}}}),
      Contains("float32, int64 or string"));
  CHECK_THROWS_WITH(
      data::parse_example(
          serialized({ok}),
          {{"x", FixedLenFeature{{2}, DType::float32, Tensor::from_vector<float>({1, 2, 3})}}}),
      Contains("the default of feature 'x'"));
  CHECK_THROWS_AS(data::parse_example(Tensor(ok), x2), InvalidArgument);
  CHECK_THROWS_AS(data::parse_single_example(serialized({ok}), x2), InvalidArgument);
  // Bytes that are not a protocol buffer: DataLoss naming the example.
  CHECK_THROWS_WITH(data::parse_example(serialized({ok, "\x0a\xff\xff"}), x2),
                    Contains("serialized example 1"));
}
