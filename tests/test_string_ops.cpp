// String tensors in graphs and the string ops: hashing checked against published values
// (FarmHash's and TF's test vectors for Fingerprint64 and string_to_hash_bucket_fast, the
// SipHash paper's vector and TF's for the strong hash), parsing and printing numbers with TF's
// rules, string_split as a SparseTensor, join and substr, the layout ops moving strings, and
// the errors for bad input.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "psflow/core/fingerprint.hpp"
#include "psflow/core/siphash.hpp"
#include "psflow/runtime.hpp"

namespace string_ops_test {

namespace ops = psflow::ops;
using Catch::Contains;
using psflow::DType;
using psflow::FeedMap;
using psflow::Graph;
using psflow::InvalidArgument;
using psflow::Output;
using psflow::Session;
using psflow::Tensor;

inline Tensor strings(std::vector<std::string> values) {
  return Tensor::from_vector(std::move(values));
}
inline Tensor strings(std::vector<std::string> values, psflow::Shape shape) {
  return Tensor::from_vector(std::move(values), std::move(shape));
}
inline std::vector<std::string> values_of(const Tensor& t) {
  const auto v = t.values<std::string>();
  return {v.begin(), v.end()};
}
inline std::vector<std::int64_t> ints_of(const Tensor& t) {
  const auto v = t.values<std::int64_t>();
  return {v.begin(), v.end()};
}
inline Tensor run(Graph& g, Output y, const FeedMap& feeds = {}) {
  Session sess(g);
  return sess.run({y}, feeds)[0];
}

TEST_CASE("fingerprint64 is FarmHash's Fingerprint64 on every length class") {
  // Published values of farmhash::Fingerprint64 (the 0-16, 17-32, 33-64 and long paths).
  const std::pair<std::string, std::uint64_t> published[] = {
      {"", 11160318154034397263ull},
      {"a", 12917804110809363939ull},
      {"hello", 13009744463427800296ull},
      {"hello world", 6381520714923946011ull},
      {"1234567890123456", 17239105360639788068ull},
      {std::string(20, 'a'), 15065261471293997870ull},
      {"The quick brown fox jumps over the lazy dog", 12375473906752639284ull},
      {"session_20b9ed23-cc36-4177-8661-b2a6d4a71c18", 16528987318367749121ull},
      {std::string(64, 'a'), 5893282057753879417ull},
      {std::string(128, 'b'), 17638211491968783095ull},
      {std::string(256, 'c'), 726802415163973935ull},
      {std::string(1000, 'e'), 9485535561285839443ull},
      {std::string(5000, 'g'), 15389559131033639025ull},
  };
  for (const auto& [text, value] : published) {
    INFO("length " << text.size());
    CHECK(psflow::fingerprint64(text) == value);
  }
}

TEST_CASE("siphash24 is SipHash-2-4") {
  // The SipHash paper's vectors: key 00..0f, messages 00..0e and the empty one.
  std::string message;
  for (char c = 0; c < 15; ++c) message.push_back(c);
  const std::array<std::uint64_t, 2> key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  CHECK(psflow::siphash24(key, message) == 0xa129ca6149be45e5ull);
  CHECK(psflow::siphash24(key, "") == 0x726fdb47dd0e0e31ull);
}

TEST_CASE("string_to_hash_bucket_fast puts strings in TF's buckets") {
  Graph g;
  Output in = ops::placeholder(g, DType::string, {-1}, "in");
  // TF's string_to_hash_bucket_op_test and the tf.strings.to_hash_bucket_fast docs.
  CHECK(ints_of(run(g, ops::string_to_hash_bucket_fast(in, 10),
                    {{in, strings({"a", "b", "c", "d"})}})) ==
        std::vector<std::int64_t>{9, 2, 2, 5});
  CHECK(ints_of(run(g, ops::string_to_hash_bucket_fast(in, 3),
                    {{in, strings({"Hello", "TensorFlow", "2.x"})}})) ==
        std::vector<std::int64_t>{0, 2, 2});
  CHECK(ints_of(run(g, ops::string_to_hash_bucket_fast(in, 1), {{in, strings({"a", "b"})}})) ==
        std::vector<std::int64_t>{0, 0});
  // The shape is kept, and an empty input gives an empty output.
  Output m = ops::placeholder(g, DType::string, {2, 2}, "m");
  const Tensor hashed = run(g, ops::string_to_hash_bucket_fast(m, 1000),
                            {{m, strings({"user:1", "user:2", "user:1", ""}, {2, 2})}});
  CHECK(hashed.shape() == psflow::Shape{2, 2});
  CHECK(hashed.values<std::int64_t>()[0] == hashed.values<std::int64_t>()[2]);
  CHECK(run(g, ops::string_to_hash_bucket_fast(in, 5), {{in, Tensor(DType::string, {0})}}).size() ==
        0);
}

TEST_CASE("string_to_hash_bucket_strong hashes with the key, as TF") {
  Graph g;
  Output in = ops::constant(g, strings({"a", "b", "c"}));
  CHECK(ints_of(run(g, ops::string_to_hash_bucket_strong(in, 10, {98765, 132}))) ==
        std::vector<std::int64_t>{4, 2, 8});
  CHECK(ints_of(run(g, ops::string_to_hash_bucket_strong(in, 1, {123, 345}))) ==
        std::vector<std::int64_t>{0, 0, 0});
}

TEST_CASE("string_to_number parses whole numbers of each dtype, and names a bad string") {
  Graph g;
  Output in = ops::placeholder(g, DType::string, {-1}, "in");
  const Tensor f = run(g, ops::string_to_number(in),
                       {{in, strings({"1.5", " -2.25 ", "+3", "1e3", "inf", "-0"})}});
  CHECK(f.dtype() == DType::float32);
  const auto fv = f.values<float>();
  CHECK(fv[0] == 1.5f);
  CHECK(fv[1] == -2.25f);
  CHECK(fv[2] == 3.0f);
  CHECK(fv[3] == 1000.0f);
  CHECK(std::isinf(fv[4]));
  CHECK(std::signbit(fv[5]));
  const Tensor i = run(g, ops::string_to_number(in, DType::int64),
                       {{in, strings({"42", "-9223372036854775808", " 7"})}});
  CHECK(ints_of(i) == std::vector<std::int64_t>{42, INT64_MIN, 7});
  const Tensor d = run(g, ops::string_to_number(in, DType::float64), {{in, strings({"0.1"})}});
  CHECK(d.values<double>()[0] == 0.1);

  for (const char* bad : {"", "abc", "1.5x", "1 2", "--1"}) {
    INFO(bad);
    CHECK_THROWS_WITH(run(g, ops::string_to_number(in), {{in, strings({"1", bad})}}),
                      Contains("cannot convert the string b'" + std::string(bad) + "'"));
  }
  CHECK_THROWS_WITH(
      run(g, ops::string_to_number(in, DType::int32), {{in, strings({"3000000000"})}}),
      Contains("to int32"));
  CHECK_THROWS_WITH(ops::string_to_number(in, DType::boolean), Contains("out_type"));
}

TEST_CASE("as_string prints numbers with printf's formats, as TF's AsString") {
  Graph g;
  Output x = ops::constant(g, Tensor::from_vector<float>({3.14159f, -2.0f}));
  CHECK(values_of(run(g, ops::as_string(x))) == std::vector<std::string>{"3.141590", "-2.000000"});
  CHECK(values_of(run(g, ops::as_string(x, {.precision = 2}))) ==
        std::vector<std::string>{"3.14", "-2.00"});
  CHECK(values_of(run(g, ops::as_string(x, {.scientific = true}))) ==
        std::vector<std::string>{"3.141590e+00", "-2.000000e+00"});
  CHECK(values_of(run(g, ops::as_string(x, {.shortest = true}))) ==
        std::vector<std::string>{"3.14159", "-2"});
  Output n = ops::constant(g, Tensor::from_vector<std::int32_t>({42, -7}));
  CHECK(values_of(run(g, ops::as_string(n))) == std::vector<std::string>{"42", "-7"});
  CHECK(values_of(run(g, ops::as_string(n, {.width = 5, .fill = "0"}))) ==
        std::vector<std::string>{"00042", "-0007"});
  CHECK(values_of(run(g, ops::as_string(n, {.width = 4}))) ==
        std::vector<std::string>{"  42", "  -7"});
  Output b = ops::constant(g, Tensor::from_vector<bool>({true, false}));
  CHECK(values_of(run(g, ops::as_string(b))) == std::vector<std::string>{"true", "false"});
  // Round trip through string_to_number.
  CHECK(run(g, ops::string_to_number(ops::as_string(n), DType::int32))
            .equals(Tensor::from_vector<std::int32_t>({42, -7})));

  CHECK_THROWS_WITH(run(g, ops::as_string(n, {.precision = 2})), Contains("floats only"));
  CHECK_THROWS_WITH(ops::as_string(x, {.fill = "ab"}), Contains("fill"));
  CHECK_THROWS_WITH(ops::as_string(ops::constant(g, strings({"a"}))), Contains("number or bool"));
}

TEST_CASE("string_split gives a SparseTensor of tokens, as TF1's tf.string_split") {
  Graph g;
  Output in = ops::placeholder(g, DType::string, {-1}, "in");
  auto check = [&](const psflow::SparseTensor& sp, const Tensor& input,
                   std::vector<std::int64_t> indices, std::vector<std::string> values,
                   std::vector<std::int64_t> dense_shape) {
    Session sess(g);
    const auto out = sess.run({sp.indices, sp.values, sp.dense_shape}, {{in, input}});
    CHECK(out[0].shape() == psflow::Shape{values.size(), 2});
    CHECK(ints_of(out[0]) == indices);
    CHECK(values_of(out[1]) == values);
    CHECK(ints_of(out[2]) == dense_shape);
  };
  // The example in TF's docs.
  check(ops::string_split(in), strings({"hello world", "a b c"}), {0, 0, 0, 1, 1, 0, 1, 1, 1, 2},
        {"hello", "world", "a", "b", "c"}, {2, 3});
  // Each byte of the delimiter splits; empty tokens are dropped unless asked for.
  check(ops::string_split(in, ",;"), strings({"a,,b;c", "", "d"}), {0, 0, 0, 1, 0, 2, 2, 0},
        {"a", "b", "c", "d"}, {3, 3});
  check(ops::string_split(in, ",", false), strings({"a,,b", "c"}), {0, 0, 0, 1, 0, 2, 1, 0},
        {"a", "", "b", "c"}, {2, 3});
  // An empty delimiter splits into bytes.
  check(ops::string_split(in, ""), strings({"ab", "c"}), {0, 0, 0, 1, 1, 0}, {"a", "b", "c"},
        {2, 2});
  CHECK_THROWS_WITH(ops::string_split(ops::placeholder(g, DType::string, {2, 2})),
                    Contains("vector of strings"));
}

TEST_CASE("string_join and substr work element-wise, scalars repeated") {
  Graph g;
  Output a = ops::constant(g, strings({"user", "item"}));
  Output b = ops::constant(g, strings({"12", "7"}));
  Output colon = ops::constant(g, Tensor(std::string(":")));
  CHECK(values_of(run(g, ops::string_join({a, colon, b}))) ==
        std::vector<std::string>{"user:12", "item:7"});
  CHECK(values_of(run(g, ops::string_join({a, b}, "_"))) ==
        std::vector<std::string>{"user_12", "item_7"});
  CHECK_THROWS_WITH(ops::string_join({a, ops::constant(g, strings({"x", "y", "z"}))}),
                    Contains("one shape"));

  // TF's docs: substr([b'Hello', b'World'], 1, 2) = [b'el', b'or'].
  Output words = ops::constant(g, strings({"Hello", "World"}));
  auto scalar = [&](std::int32_t v) { return ops::constant(g, Tensor(v)); };
  CHECK(values_of(run(g, ops::substr(words, scalar(1), scalar(2)))) ==
        std::vector<std::string>{"el", "or"});
  CHECK(values_of(run(g, ops::substr(words, scalar(-3), scalar(10)))) ==
        std::vector<std::string>{"llo", "rld"});
  Output pos = ops::constant(g, Tensor::from_vector<std::int32_t>({0, 4}));
  Output len = ops::constant(g, Tensor::from_vector<std::int32_t>({2, 5}));
  CHECK(values_of(run(g, ops::substr(words, pos, len))) == std::vector<std::string>{"He", "d"});
  CHECK_THROWS_WITH(run(g, ops::substr(words, scalar(6), scalar(1))),
                    Contains("pos 6 is out of range for the string b'Hello'"));
}

TEST_CASE("regex_full_match matches whole strings with RE2's syntax, and names a bad pattern") {
  Graph g;
  // TF's docs: regex_full_match(["TF lib", "lib TF"], ".*lib$") = [True, False].
  Output docs = ops::constant(g, strings({"TF lib", "lib TF"}));
  const Tensor m = run(g, ops::regex_full_match(docs, ".*lib$"));
  CHECK(m.dtype() == DType::boolean);
  CHECK(m.data<bool>()[0]);
  CHECK_FALSE(m.data<bool>()[1]);
  // The whole string must match, not a part; RE2's classes; the shape is kept.
  Output ids = ops::constant(g, strings({"user:12", "user:x", "item:7", "user:123 "}, {2, 2}));
  const Tensor users = run(g, ops::regex_full_match(ids, R"(user:\d+)"));
  CHECK(users.shape() == psflow::Shape{2, 2});
  CHECK(std::vector<bool>(users.data<bool>(), users.data<bool>() + 4) ==
        std::vector<bool>{true, false, false, false});
  const Tensor some = run(g, ops::regex_full_match(ids, "(user|item):[0-9]"));
  CHECK(std::vector<bool>(some.data<bool>(), some.data<bool>() + 4) ==
        std::vector<bool>{false, false, true, false});
  CHECK_THROWS_AS(ops::regex_full_match(ids, "user:(\\d+"), InvalidArgument);
  CHECK_THROWS_WITH(ops::regex_full_match(ids, "user:(\\d+"),
                    Contains("'user:(\\d+'") && Contains("RE2") && Contains("missing )"));
  CHECK_THROWS_WITH(ops::regex_full_match(ops::constant(g, Tensor(1.0f)), "x"),
                    Contains("needs a string input"));
}

TEST_CASE("the layout ops move strings: identity, reshape, concat, slice, gather, stack") {
  Graph g;
  Output x = ops::placeholder(g, DType::string, {2, 3}, "x");
  const Tensor value = strings({"a", "bb", "", std::string("n\0l", 3), "e", "ffffff"}, {2, 3});
  const FeedMap feeds{{x, value}};
  CHECK(run(g, ops::identity(x), feeds).equals(value));
  CHECK(run(g, ops::reshape(x, {3, 2}), feeds).equals(value.reshaped({3, 2})));
  CHECK(values_of(run(g, ops::concat({x, x}, 1), feeds)) ==
        std::vector<std::string>{"a", "bb", "", "a", "bb", "", std::string("n\0l", 3), "e",
                                 "ffffff", std::string("n\0l", 3), "e", "ffffff"});
  CHECK(values_of(run(g, ops::slice(x, {0, 1}, {2, 2}), feeds)) ==
        std::vector<std::string>{"bb", "", "e", "ffffff"});
  CHECK(values_of(run(g, ops::transpose(x), feeds)) ==
        std::vector<std::string>{"a", std::string("n\0l", 3), "bb", "e", "", "ffffff"});
  CHECK(values_of(run(g, ops::tile(x, {1, 2}), feeds))[3] == "a");
  CHECK(values_of(run(g, ops::strided_slice(x, {0, 0}, {2, 3}, {1, 2}), feeds)) ==
        std::vector<std::string>{"a", "", std::string("n\0l", 3), "ffffff"});
  Output ids = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 0, 1}));
  CHECK(run(g, ops::gather(x, ids), feeds)
            .equals(strings({std::string("n\0l", 3), "e", "ffffff", "a", "bb", "",
                             std::string("n\0l", 3), "e", "ffffff"},
                            {3, 3})));
  const auto rows = ops::unstack(x);
  CHECK(run(g, ops::stack(rows), feeds).equals(value));
  CHECK(values_of(run(g, ops::split(x, 3, 1)[2], feeds)) == std::vector<std::string>{"", "ffffff"});
  CHECK(run(g, ops::expand_dims(x, 0), feeds).shape() == psflow::Shape{1, 2, 3});
  CHECK(ints_of(run(g, ops::shape(x), feeds)) == std::vector<std::int64_t>{2, 3});
}

TEST_CASE("equal and where compare and pick strings") {
  Graph g;
  Output a = ops::constant(g, strings({"x", "y", "z"}));
  Output b = ops::constant(g, strings({"x", "q", "z"}));
  CHECK(run(g, ops::equal(a, b)).equals(Tensor::from_vector<bool>({true, false, true})));
  CHECK(run(g, ops::not_equal(a, b)).equals(Tensor::from_vector<bool>({false, true, false})));
  CHECK(run(g, ops::equal(a, ops::constant(g, Tensor(std::string("y")))))
            .equals(Tensor::from_vector<bool>({false, true, false})));
  Output cond = ops::constant(g, Tensor::from_vector<bool>({true, false, false}));
  CHECK(values_of(run(g, ops::where(cond, a, b))) == std::vector<std::string>{"x", "q", "z"});
}

TEST_CASE("ops on numbers refuse strings with a clear error") {
  Graph g;
  Output s = ops::constant(g, strings({"1", "2"}));
  CHECK_THROWS_WITH(ops::string_to_hash_bucket_fast(ops::constant(g, Tensor(1.0f)), 10),
                    Contains("needs a string input"));
  CHECK_THROWS_WITH(ops::string_to_hash_bucket_fast(s, 0), Contains("num_buckets"));
  CHECK_THROWS_AS(run(g, ops::cast(s, DType::float32)), InvalidArgument);
  CHECK_THROWS_WITH(run(g, ops::cast(s, DType::float32)), Contains("string_to_number"));
}

}  // namespace string_ops_test
