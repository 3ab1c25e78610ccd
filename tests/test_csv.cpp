// decode_csv (data/csv.hpp) with TF's rules: quotes, defaults for empty fields,
// na_value, and errors naming the record and the column.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "psflow/data/csv.hpp"

using Catch::Contains;
using psflow::DType;
using psflow::InvalidArgument;
using psflow::Tensor;
using psflow::data::decode_csv;

namespace {
Tensor lines(std::vector<std::string> v) { return Tensor::from_vector(std::move(v)); }
template <class T>
std::vector<T> values(const Tensor& t) {
  const auto v = t.values<T>();
  return {v.begin(), v.end()};
}
}  // namespace

TEST_CASE("decode_csv gives one tensor per column, of its default's dtype") {
  const std::vector<Tensor> defaults{Tensor(std::int32_t{0}), Tensor(0.5f),
                                     Tensor(std::string("?")), Tensor(std::int64_t{-1}),
                                     Tensor(0.0)};
  const auto cols = decode_csv(lines({"1,2.5,abc,7,0.25", "-3,,\"x,y\",,1e3"}), defaults);
  REQUIRE(cols.size() == 5);
  CHECK(values<std::int32_t>(cols[0]) == std::vector<std::int32_t>{1, -3});
  CHECK(values<float>(cols[1]) == std::vector<float>{2.5f, 0.5f});  // empty: the default
  CHECK(values<std::string>(cols[2]) == std::vector<std::string>{"abc", "x,y"});
  CHECK(values<std::int64_t>(cols[3]) == std::vector<std::int64_t>{7, -1});
  CHECK(values<double>(cols[4]) == std::vector<double>{0.25, 1000.0});
  CHECK(cols[0].shape() == psflow::Shape{2});
}

TEST_CASE(
    "quotes, doubled quotes, other delimiters, na_value and the records' "
    "shape") {
  const std::vector<Tensor> strings{Tensor::from_vector<std::string>({""}),
                                    Tensor::from_vector<std::string>({"d"})};
  auto cols = decode_csv(lines({"\"say \"\"hi\"\"\",b", "\"\",\"\""}), strings);
  CHECK(values<std::string>(cols[0]) == std::vector<std::string>{"say \"hi\"", ""});
  CHECK(values<std::string>(cols[1]) == std::vector<std::string>{"b", "d"});
  // Tab-separated, quotes taken literally when use_quote_delim is false.
  cols = decode_csv(lines({"a\"b\tc"}), strings, '\t', false);
  CHECK(values<std::string>(cols[0]) == std::vector<std::string>{"a\"b"});
  // na_value marks a missing field.
  const std::vector<Tensor> numbers{Tensor(1.0f), Tensor(std::int32_t{9})};
  cols = decode_csv(lines({"NA,NA", "2,3"}), numbers, ',', true, "NA");
  CHECK(values<float>(cols[0]) == std::vector<float>{1.0f, 2.0f});
  CHECK(values<std::int32_t>(cols[1]) == std::vector<std::int32_t>{9, 3});
  // A matrix of records gives matrices; a trailing delimiter is one more,
  // empty, field.
  cols = decode_csv(Tensor::from_vector<std::string>({"1,", "2,", "3,4", "5,"}, {2, 2}), numbers);
  CHECK(cols[1].shape() == psflow::Shape{2, 2});
  CHECK(values<std::int32_t>(cols[1]) == std::vector<std::int32_t>{9, 9, 4, 9});
}

TEST_CASE("decode_csv names the record and column of a bad field") {
  const std::vector<Tensor> defaults{Tensor(std::int32_t{0}), Tensor::from_vector<float>({})};
  CHECK_THROWS_WITH(decode_csv(lines({"1,2", "1,2,3"}), defaults),
                    Contains("record 1 has 3 fields, expected 2"));
  CHECK_THROWS_WITH(decode_csv(lines({"1,2", "x,2"}), defaults),
                    Contains("record 1, column 0: b'x' is not a valid int32"));
  CHECK_THROWS_WITH(decode_csv(lines({"1,"}), defaults),
                    Contains("record 0, column 1: the field is empty and the "
                             "column has no default"));
  CHECK_THROWS_WITH(decode_csv(lines({"\"open,1"}), defaults), Contains("no closing quote"));
  CHECK_THROWS_WITH(decode_csv(lines({"\"a\"b,1"}), defaults),
                    Contains("must be followed by the delimiter"));
  CHECK_THROWS_WITH(decode_csv(lines({"1,2"}), {Tensor(true), Tensor(1.0f)}),
                    Contains("default of column 0"));
  CHECK_THROWS_WITH(decode_csv(lines({"1,2"}), {Tensor::from_vector<float>({1, 2}), Tensor(1.0f)}),
                    Contains("at most one element"));
  CHECK_THROWS_AS(decode_csv(Tensor(1.0f), defaults), InvalidArgument);
}
