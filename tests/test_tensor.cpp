// Tensor: construction, dtype checks, shared buffers, xtensor views, checked sizes.
#include <catch2/catch.hpp>
#include <string>

#include "psflow/core/tensor.hpp"

using psflow::DType;
using psflow::InvalidArgument;
using psflow::num_elements;
using psflow::Tensor;

TEST_CASE("a shaped tensor starts zero-filled") {
  Tensor t(DType::float32, {2, 3});
  CHECK(t.dtype() == DType::float32);
  CHECK(t.shape() == psflow::Shape{2, 3});
  CHECK(t.size() == 6);
  CHECK(t.nbytes() == 24);
  for (float v : t.values<float>()) CHECK(v == 0.0f);
}

TEST_CASE(
    "the buffer is 64-byte aligned, 16-byte up to 16 bytes (held inside the tensor's control "
    "block)") {
  for (std::size_t n : {3u, 17u, 1000u}) {
    Tensor t(DType::float64, {n});
    CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64 == 0);
  }
  for (std::size_t n : {0u, 1u, 2u}) {
    Tensor t(DType::float64, {n});
    CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 16 == 0);
    CHECK(t.nbytes() == n * 8);
  }
  Tensor a(DType::float64, {2}), b(DType::float64, {2});
  CHECK(a.raw_data() != b.raw_data());
}

TEST_CASE("scalars and xarrays convert in with the right dtype") {
  CHECK(Tensor(2.5f).dtype() == DType::float32);
  CHECK(Tensor(2.5).dtype() == DType::float64);
  CHECK(Tensor(std::int32_t{3}).dtype() == DType::int32);
  CHECK(Tensor(std::int64_t{3}).dtype() == DType::int64);
  CHECK(Tensor(true).dtype() == DType::boolean);
  CHECK(Tensor(2.5f).rank() == 0);
  CHECK(Tensor(7.0).scalar<double>() == 7.0);

  xt::xarray<double> a = {{1, 2, 3}, {4, 5, 6}};
  Tensor t(a);
  CHECK(t.shape() == psflow::Shape{2, 3});
  CHECK(t.as<double>()(1, 2) == 6);
  const bool same = t.as<double>() == a;
  CHECK(same);
}

TEST_CASE("as<T>() is a view: writes through it reach every copy") {
  Tensor t(DType::int32, {4});
  Tensor copy = t;
  CHECK(copy.shares_buffer_with(t));
  CHECK_FALSE(t.is_sole_owner());
  auto view = t.as<std::int32_t>();
  view(2) = 42;
  CHECK(copy.values<std::int32_t>()[2] == 42);

  Tensor deep = t.deep_copy();
  deep.data<std::int32_t>()[2] = 1;
  CHECK(t.values<std::int32_t>()[2] == 42);
  CHECK(deep.is_sole_owner());
}

TEST_CASE("reading with the wrong element type throws InvalidArgument") {
  Tensor t(DType::float32, {2});
  CHECK_THROWS_AS(t.as<double>(), psflow::InvalidArgument);
  CHECK_THROWS_WITH(t.data<std::int64_t>(),
                    Catch::Contains("holds float32") && Catch::Contains("int64"));
  CHECK_THROWS_AS(Tensor().data<float>(), psflow::InvalidArgument);
  CHECK_THROWS_AS(t.scalar<float>(), psflow::InvalidArgument);
}

TEST_CASE("reshaped shares the buffer and checks the element count") {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = t.reshaped({3, 2});
  CHECK(r.shares_buffer_with(t));
  CHECK(r.as<float>()(2, 1) == 6);
  CHECK_THROWS_AS(t.reshaped({4}), psflow::InvalidArgument);
  CHECK_THROWS_AS(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), psflow::InvalidArgument);
}

TEST_CASE("equals compares dtype, shape and bytes") {
  Tensor a = Tensor::from_vector<float>({1, 2}, {2});
  CHECK(a.equals(a.deep_copy()));
  CHECK_FALSE(a.equals(a.reshaped({1, 2})));
  CHECK_FALSE(a.equals(Tensor::from_vector<double>({1, 2}, {2})));
  CHECK(Tensor().equals(Tensor()));
  CHECK(Tensor::filled(3.0f, {2}).equals(Tensor::from_vector<float>({3, 3})));
}

TEST_CASE("a shape whose element or byte count overflows 64 bits fails InvalidArgument") {
  const std::size_t huge = std::size_t{1} << 40;
  CHECK_THROWS_WITH(num_elements({huge, huge}),
                    Catch::Contains("number of elements") && Catch::Contains("overflows"));
  CHECK_THROWS_AS(Tensor(DType::float32, {huge, huge}), InvalidArgument);
  // 2^62 elements fit in size_t, their 4-byte size does not: refused before any allocation.
  CHECK_THROWS_WITH(Tensor::uninitialized(DType::float32, {std::size_t{1} << 62}),
                    Catch::Contains("byte size"));
  CHECK(num_elements({0, huge, huge}) == 0);  // an empty dimension first: no overflow
}

TEST_CASE("a tensor is its buffer's sole owner only while no copy shares it") {
  Tensor t(DType::float32, {4});
  CHECK(t.is_sole_owner());
  {
    const Tensor copy = t;
    CHECK_FALSE(t.is_sole_owner());
  }
  CHECK(t.is_sole_owner());
  CHECK_FALSE(Tensor().is_sole_owner());
}

TEST_CASE("a string tensor holds byte strings of any length, embedded NULs included") {
  const std::string with_nul("a\0b", 3);
  const std::string long_one(100000, 'z');
  Tensor t = Tensor::from_vector<std::string>({"", with_nul, long_one, "x"}, {2, 2});
  CHECK(t.dtype() == DType::string);
  CHECK(t.summary() == "string[2,2]");
  const auto v = t.values<std::string>();
  REQUIRE(v.size() == 4);
  CHECK(v[0].empty());
  CHECK(v[1] == with_nul);
  CHECK(v[1].size() == 3);
  CHECK(v[2] == long_one);
  CHECK(t.as<std::string>()(1, 1) == "x");
  CHECK(Tensor(std::string("s")).scalar<std::string>() == "s");
  CHECK(Tensor::filled(std::string("ab"), {3}).values<std::string>()[2] == "ab");

  // A shaped string tensor starts as empty strings; reading it as numbers is refused.
  Tensor empty(DType::string, {3});
  for (const std::string& s : empty.values<std::string>()) CHECK(s.empty());
  CHECK_THROWS_AS(t.values<float>(), InvalidArgument);
  CHECK_THROWS_AS(Tensor(1.0f).values<std::string>(), InvalidArgument);
  // It has no flat bytes: code written for numbers gets a clear error, never the objects.
  CHECK_THROWS_WITH(t.raw_data(), Catch::Contains("string tensor has no flat bytes"));
}

TEST_CASE("string tensors copy, compare and move elements as strings") {
  Tensor t = Tensor::from_vector<std::string>({"one", "two", "three"});
  Tensor same = Tensor::from_vector<std::string>({"one", "two", "three"});
  Tensor other = Tensor::from_vector<std::string>({"one", "two", "four"});
  CHECK(t.equals(same));
  CHECK_FALSE(t.equals(other));
  CHECK_FALSE(t.equals(same.reshaped({3, 1})));

  Tensor copy = t.deep_copy();
  CHECK(copy.equals(t));
  CHECK_FALSE(copy.shares_buffer_with(t));
  copy.values<std::string>()[0] = "changed";
  CHECK(t.values<std::string>()[0] == "one");  // a deep copy owns its strings

  Tensor out(DType::string, {4});
  copy_elements(out, 1, t, 0, 3);
  CHECK(out.equals(Tensor::from_vector<std::string>({"", "one", "two", "three"})));
  Tensor numbers(DType::int32, {3});
  copy_elements(numbers, 1, Tensor::from_vector<std::int32_t>({7, 8}), 0, 2);
  CHECK(numbers.equals(Tensor::from_vector<std::int32_t>({0, 7, 8})));
}

TEST_CASE("move_elements moves the strings of a tensor no other shares, and copies a shared one") {
  const std::string long_one(100, 'x');  // longer than any small-string buffer
  Tensor owned = Tensor::from_vector<std::string>({long_one, "b"});
  Tensor out(DType::string, {2});
  move_elements(out, 0, owned, 0, 2);
  CHECK(out.equals(Tensor::from_vector<std::string>({long_one, "b"})));
  CHECK(owned.values<std::string>()[0].empty());  // moved out

  Tensor shared = Tensor::from_vector<std::string>({long_one});
  const Tensor other_owner = shared;  // shares the buffer
  Tensor out2(DType::string, {1});
  move_elements(out2, 0, shared, 0, 1);
  CHECK(out2.values<std::string>()[0] == long_one);
  CHECK(other_owner.values<std::string>()[0] == long_one);  // copied, not moved
}
