// Tensor printing: operator<< is numpy's str() and repr() is numpy's repr(), character for
// character. Every expected string below was printed by numpy 1.24 (Debian 12's python3-numpy)
// with tests/tools/gen_format_cases.py; the comment above each check is the numpy expression.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/tensor_format.hpp"

using psflow::DType;
using psflow::Shape;
using psflow::Tensor;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// A tensor of `shape` whose row-major element i is f(i).
template <class T, class F>
Tensor generate(Shape shape, F f) {
  Tensor t(psflow::dtype_of<T>(), std::move(shape));
  T* data = t.data<T>();
  for (std::size_t i = 0; i < t.size(); ++i) data[i] = f(i);
  return t;
}

// A string tensor of `values`, a vector unless a shape is given.
Tensor strings(std::vector<std::string> values) { return Tensor::from_vector(std::move(values)); }
Tensor strings(std::vector<std::string> values, Shape shape) {
  return Tensor::from_vector(std::move(values), std::move(shape));
}

// Checks both numpy renderings of `t`.
void check_prints(const Tensor& t, const std::string& expected_str,
                  const std::string& expected_repr) {
  std::ostringstream os;
  os << t;
  CHECK(os.str() == expected_str);
  CHECK(psflow::to_string(t) == expected_str);
  CHECK(psflow::repr(t) == expected_repr);
}

}  // namespace

TEST_CASE("an empty (default-constructed) tensor says so") {
  check_prints(Tensor(), "<empty tensor>", "<empty tensor>");
}

TEST_CASE("operator<< writes into any stream, between other output") {
  std::ostringstream os;
  os << "x = " << Tensor::filled(7.0f, {2}) << ";";
  CHECK(os.str() == "x = [7. 7.];");
}

TEST_CASE("copies and reshaped views print their own shape") {
  Tensor t = generate<std::int32_t>({6}, [](std::size_t i) { return std::int32_t(i); });
  CHECK(psflow::to_string(t.reshaped({2, 3})) == "[[0 1 2]\n [3 4 5]]");
  CHECK(psflow::repr(t.reshaped({3, 2})) ==
        "array([[0, 1],\n       [2, 3],\n       [4, 5]], dtype=int32)");
}

TEST_CASE("the seed's float32 2x2 tensors") {
  // np.full((2, 2), 7, f32)
  check_prints(Tensor::filled(7.0f, {2, 2}),
               "[[7. 7.]\n"
               " [7. 7.]]",
               "array([[7., 7.],\n"
               "       [7., 7.]], dtype=float32)");
  // np.full((2, 2), 10, f32)
  check_prints(Tensor::filled(10.0f, {2, 2}),
               "[[10. 10.]\n"
               " [10. 10.]]",
               "array([[10., 10.],\n"
               "       [10., 10.]], dtype=float32)");
  // np.full((2, 2), 0.4, f32)
  check_prints(Tensor::filled(0.4f, {2, 2}),
               "[[0.4 0.4]\n"
               " [0.4 0.4]]",
               "array([[0.4, 0.4],\n"
               "       [0.4, 0.4]], dtype=float32)");
  // np.array([[1, 2], [3, 4]], f32)
  check_prints(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}),
               "[[1. 2.]\n"
               " [3. 4.]]",
               "array([[1., 2.],\n"
               "       [3., 4.]], dtype=float32)");
}

TEST_CASE("rank-0 tensors print like numpy scalars in str") {
  // np.array(0.4, f32)
  check_prints(Tensor(0.4f), "0.4", "array(0.4, dtype=float32)");
  // np.array(7, f32)
  check_prints(Tensor(7.0f), "7.0", "array(7., dtype=float32)");
  // np.array(0.1 + 0.2)
  check_prints(Tensor(0.1 + 0.2), "0.30000000000000004", "array(0.3)");
  // np.array(-0.0)
  check_prints(Tensor(-0.0), "-0.0", "array(-0.)");
  // np.array(1e16)
  check_prints(Tensor(1e16), "1e+16", "array(1.e+16)");
  // np.array(1.5e-5, f32)
  check_prints(Tensor(1.5e-5f), "1.5e-05", "array(1.5e-05, dtype=float32)");
  // np.array(1e-4, f32)
  check_prints(Tensor(1e-4f), "1e-04", "array(1.e-04, dtype=float32)");
  // np.array(1e-4)
  check_prints(Tensor(1e-4), "0.0001", "array(0.0001)");
  // np.array(80635024, f32)
  check_prints(Tensor(80635024.0f), "80635020.0", "array(80635024., dtype=float32)");
  // np.array(nan)
  check_prints(Tensor(kNaN), "nan", "array(nan)");
  // np.array(-inf, f32)
  check_prints(Tensor(-kInfF), "-inf", "array(-inf, dtype=float32)");
  // np.array(-3, i32)
  check_prints(Tensor(std::int32_t{-3}), "-3", "array(-3, dtype=int32)");
  // np.array(42, i64)
  check_prints(Tensor(std::int64_t{42}), "42", "array(42)");
  // np.array(True)
  check_prints(Tensor(true), "True", "array(True)");
  // np.array(False)
  check_prints(Tensor(false), "False", "array(False)");
}

TEST_CASE("positional notation aligns the decimal points") {
  // np.array([0.5, 0.25, 100.125])
  check_prints(Tensor::from_vector<double>({0.5, 0.25, 100.125}), "[  0.5     0.25  100.125]",
               "array([  0.5  ,   0.25 , 100.125])");
  // np.array([1.5, -2.25, 3.0], f32)
  check_prints(Tensor::from_vector<float>({1.5f, -2.25f, 3.0f}), "[ 1.5  -2.25  3.  ]",
               "array([ 1.5 , -2.25,  3.  ], dtype=float32)");
  // np.array([[-1, -2], [3, 4]], f64)
  check_prints(Tensor::from_vector<double>({-1, -2, 3, 4}, {2, 2}),
               "[[-1. -2.]\n"
               " [ 3.  4.]]",
               "array([[-1., -2.],\n"
               "       [ 3.,  4.]])");
  // np.array([-1.0, 2.5, -0.0])
  check_prints(Tensor::from_vector<double>({-1.0, 2.5, -0.0}), "[-1.   2.5 -0. ]",
               "array([-1. ,  2.5, -0. ])");
  // np.array([0.0, -0.0], f32)
  check_prints(Tensor::from_vector<float>({0.0f, -0.0f}), "[ 0. -0.]",
               "array([ 0., -0.], dtype=float32)");
  // np.array([1 / 3, 2 / 3, 1.0])
  check_prints(Tensor::from_vector<double>({1.0 / 3, 2.0 / 3, 1.0}),
               "[0.33333333 0.66666667 1.        ]", "array([0.33333333, 0.66666667, 1.        ])");
  // np.array([123456.123456789])
  check_prints(Tensor::from_vector<double>({123456.123456789}), "[123456.12345679]",
               "array([123456.12345679])");
  // np.array([1 + 2**-30, 1.0])
  check_prints(Tensor::from_vector<double>({1 + 0x1p-30, 1.0}), "[1. 1.]", "array([1., 1.])");
  // np.array([2**-9, 3 * 2**-9, 1.0])
  check_prints(Tensor::from_vector<double>({0x1p-9, 3 * 0x1p-9, 1.0}),
               "[0.00195312 0.00585938 1.        ]", "array([0.00195312, 0.00585938, 1.        ])");
  // np.array([0.001, 1.0], f32)
  check_prints(Tensor::from_vector<float>({0.001f, 1.0f}), "[0.001 1.   ]",
               "array([0.001, 1.   ], dtype=float32)");
  // np.array([80635024, 1e5], f32)
  check_prints(Tensor::from_vector<float>({80635024.0f, 1e5f}), "[80635024.   100000.]",
               "array([80635024.,   100000.], dtype=float32)");
  // np.array([0.56146026, 561.46027], f32)
  check_prints(Tensor::from_vector<float>({0.56146026f, 561.46027f}), "[  0.56146026 561.46027   ]",
               "array([  0.56146026, 561.46027   ], dtype=float32)");
  // np.array([99999999.0, 1.0])
  check_prints(Tensor::from_vector<double>({99999999.0, 1.0}), "[9.9999999e+07 1.0000000e+00]",
               "array([9.9999999e+07, 1.0000000e+00])");
}

TEST_CASE("scientific notation by numpy's rules") {
  // np.array([1e-5, 1e5])
  check_prints(Tensor::from_vector<double>({1e-5, 1e5}), "[1.e-05 1.e+05]",
               "array([1.e-05, 1.e+05])");
  // np.array([1e8, 1.0])
  check_prints(Tensor::from_vector<double>({1e8, 1.0}), "[1.e+08 1.e+00]",
               "array([1.e+08, 1.e+00])");
  // np.array([1e-4, 1.0], f32)
  check_prints(Tensor::from_vector<float>({1e-4f, 1.0f}), "[1.e-04 1.e+00]",
               "array([1.e-04, 1.e+00], dtype=float32)");
  // np.array([0.0, 1e-5])
  check_prints(Tensor::from_vector<double>({0.0, 1e-5}), "[0.e+00 1.e-05]",
               "array([0.e+00, 1.e-05])");
  // np.array([-0.0, 1e-5])
  check_prints(Tensor::from_vector<double>({-0.0, 1e-5}), "[-0.e+00  1.e-05]",
               "array([-0.e+00,  1.e-05])");
  // np.array([1e-100, 1.0])
  check_prints(Tensor::from_vector<double>({1e-100, 1.0}), "[1.e-100 1.e+000]",
               "array([1.e-100, 1.e+000])");
  // np.array([1.23456789e-7, 5.0, -2.5])
  check_prints(Tensor::from_vector<double>({1.23456789e-7, 5.0, -2.5}),
               "[ 1.23456789e-07  5.00000000e+00 -2.50000000e+00]",
               "array([ 1.23456789e-07,  5.00000000e+00, -2.50000000e+00])");
  // np.array([0.1, 1.23456789e-5], f32)
  check_prints(Tensor::from_vector<float>({0.1f, 1.23456789e-5f}), "[1.0000000e-01 1.2345679e-05]",
               "array([1.0000000e-01, 1.2345679e-05], dtype=float32)");
  // np.array([[-1e-5, 3.3e9], [1.0, 2.0]])
  check_prints(Tensor::from_vector<double>({-1e-5, 3.3e9, 1.0, 2.0}, {2, 2}),
               "[[-1.0e-05  3.3e+09]\n"
               " [ 1.0e+00  2.0e+00]]",
               "array([[-1.0e-05,  3.3e+09],\n"
               "       [ 1.0e+00,  2.0e+00]])");
  // np.array([0.001, 1.5, 1000.0])
  check_prints(Tensor::from_vector<double>({0.001, 1.5, 1000.0}), "[1.0e-03 1.5e+00 1.0e+03]",
               "array([1.0e-03, 1.5e+00, 1.0e+03])");
  // np.array([1.7976931348623157e308, 5e-324])
  check_prints(Tensor::from_vector<double>({1.7976931348623157e308, 5e-324}),
               "[1.79769313e+308 4.94065646e-324]", "array([1.79769313e+308, 4.94065646e-324])");
  // np.array([3.4028235e38, 1e-45], f32)
  check_prints(Tensor::from_vector<float>({3.4028235e38f, 1e-45f}), "[3.4028235e+38 1.4012985e-45]",
               "array([3.4028235e+38, 1.4012985e-45], dtype=float32)");
}

TEST_CASE("nan and inf") {
  // np.array([nan, -inf, 1.5])
  check_prints(Tensor::from_vector<double>({kNaN, -kInf, 1.5}), "[ nan -inf  1.5]",
               "array([ nan, -inf,  1.5])");
  // np.array([nan, inf], f32)
  check_prints(Tensor::from_vector<float>({kNaNF, kInfF}), "[nan inf]",
               "array([nan, inf], dtype=float32)");
  // np.array([-inf, 1e-9])
  check_prints(Tensor::from_vector<double>({-kInf, 1e-9}), "[  -inf 1.e-09]",
               "array([  -inf, 1.e-09])");
  // np.array([[nan, 0.25], [inf, 1e10]])
  check_prints(Tensor::from_vector<double>({kNaN, 0.25, kInf, 1e10}, {2, 2}),
               "[[    nan 2.5e-01]\n"
               " [    inf 1.0e+10]]",
               "array([[    nan, 2.5e-01],\n"
               "       [    inf, 1.0e+10]])");
  // np.array([nan], f32)
  check_prints(Tensor::from_vector<float>({kNaNF}), "[nan]", "array([nan], dtype=float32)");
}

TEST_CASE("integers and booleans") {
  // np.array([[1, -20], [300, 4]], i32)
  check_prints(Tensor::from_vector<std::int32_t>({1, -20, 300, 4}, {2, 2}),
               "[[  1 -20]\n"
               " [300   4]]",
               "array([[  1, -20],\n"
               "       [300,   4]], dtype=int32)");
  // np.array([0, 7], i64)
  check_prints(Tensor::from_vector<std::int64_t>({0, 7}), "[0 7]", "array([0, 7])");
  // np.array([-2**63, 2**63 - 1], i64)
  check_prints(Tensor::from_vector<std::int64_t>({kInt64Min, kInt64Max}),
               "[-9223372036854775808  9223372036854775807]",
               "array([-9223372036854775808,  9223372036854775807])");
  // np.array([[True, False], [False, True]])
  check_prints(Tensor::from_vector<bool>({true, false, false, true}, {2, 2}),
               "[[ True False]\n"
               " [False  True]]",
               "array([[ True, False],\n"
               "       [False,  True]])");
  // np.array([True, True])
  check_prints(Tensor::filled(true, {2}), "[ True  True]", "array([ True,  True])");
  // np.zeros((3,), bool)
  check_prints(Tensor(DType::boolean, {3}), "[False False False]", "array([False, False, False])");
}

TEST_CASE("1-D, 3-D and 4-D shapes") {
  // np.arange(10, dtype=f32)
  check_prints(generate<float>({10}, [](std::size_t i) { return float(i); }),
               "[0. 1. 2. 3. 4. 5. 6. 7. 8. 9.]",
               "array([0., 1., 2., 3., 4., 5., 6., 7., 8., 9.], dtype=float32)");
  // np.arange(24, dtype=f32).reshape(2, 3, 4)
  check_prints(generate<float>({2, 3, 4}, [](std::size_t i) { return float(i); }),
               "[[[ 0.  1.  2.  3.]\n"
               "  [ 4.  5.  6.  7.]\n"
               "  [ 8.  9. 10. 11.]]\n"
               "\n"
               " [[12. 13. 14. 15.]\n"
               "  [16. 17. 18. 19.]\n"
               "  [20. 21. 22. 23.]]]",
               "array([[[ 0.,  1.,  2.,  3.],\n"
               "        [ 4.,  5.,  6.,  7.],\n"
               "        [ 8.,  9., 10., 11.]],\n"
               "\n"
               "       [[12., 13., 14., 15.],\n"
               "        [16., 17., 18., 19.],\n"
               "        [20., 21., 22., 23.]]], dtype=float32)");
  // np.arange(24, dtype=i64).reshape(2, 3, 4) - 5
  check_prints(generate<std::int64_t>({2, 3, 4}, [](std::size_t i) { return std::int64_t(i) - 5; }),
               "[[[-5 -4 -3 -2]\n"
               "  [-1  0  1  2]\n"
               "  [ 3  4  5  6]]\n"
               "\n"
               " [[ 7  8  9 10]\n"
               "  [11 12 13 14]\n"
               "  [15 16 17 18]]]",
               "array([[[-5, -4, -3, -2],\n"
               "        [-1,  0,  1,  2],\n"
               "        [ 3,  4,  5,  6]],\n"
               "\n"
               "       [[ 7,  8,  9, 10],\n"
               "        [11, 12, 13, 14],\n"
               "        [15, 16, 17, 18]]])");
  // (np.arange(16) / 4).reshape(2, 2, 2, 2)
  check_prints(generate<double>({2, 2, 2, 2}, [](std::size_t i) { return double(i) / 4; }),
               "[[[[0.   0.25]\n"
               "   [0.5  0.75]]\n"
               "\n"
               "  [[1.   1.25]\n"
               "   [1.5  1.75]]]\n"
               "\n"
               "\n"
               " [[[2.   2.25]\n"
               "   [2.5  2.75]]\n"
               "\n"
               "  [[3.   3.25]\n"
               "   [3.5  3.75]]]]",
               "array([[[[0.  , 0.25],\n"
               "         [0.5 , 0.75]],\n"
               "\n"
               "        [[1.  , 1.25],\n"
               "         [1.5 , 1.75]]],\n"
               "\n"
               "\n"
               "       [[[2.  , 2.25],\n"
               "         [2.5 , 2.75]],\n"
               "\n"
               "        [[3.  , 3.25],\n"
               "         [3.5 , 3.75]]]])");
  // np.ones((1, 1, 1), i32)
  check_prints(Tensor::filled(std::int32_t{1}, {1, 1, 1}), "[[[1]]]",
               "array([[[1]]], dtype=int32)");
  // np.zeros((2, 1))
  check_prints(Tensor(DType::float64, {2, 1}),
               "[[0.]\n"
               " [0.]]",
               "array([[0.],\n"
               "       [0.]])");
}

TEST_CASE("tensors without elements") {
  // np.zeros((0,), f32)
  check_prints(Tensor(DType::float32, {0}), "[]", "array([], dtype=float32)");
  // np.zeros((0,), f64)
  check_prints(Tensor(DType::float64, {0}), "[]", "array([], dtype=float64)");
  // np.zeros((0,), i32)
  check_prints(Tensor(DType::int32, {0}), "[]", "array([], dtype=int32)");
  // np.zeros((0,), i64)
  check_prints(Tensor(DType::int64, {0}), "[]", "array([], dtype=int64)");
  // np.zeros((0,), bool)
  check_prints(Tensor(DType::boolean, {0}), "[]", "array([], dtype=bool)");
  // np.zeros((2, 0), f32)
  check_prints(Tensor(DType::float32, {2, 0}), "[]", "array([], shape=(2, 0), dtype=float32)");
  // np.zeros((0, 3))
  check_prints(Tensor(DType::float64, {0, 3}), "[]", "array([], shape=(0, 3), dtype=float64)");
  // np.zeros((1, 0, 2), i64)
  check_prints(Tensor(DType::int64, {1, 0, 2}), "[]", "array([], shape=(1, 0, 2), dtype=int64)");
}

TEST_CASE("long rows wrap at 75 columns") {
  // np.arange(30, dtype=f32) / f32(7)
  check_prints(generate<float>({30}, [](std::size_t i) { return float(i) / 7.0f; }),
               "[0.         0.14285715 0.2857143  0.42857143 0.5714286  0.71428573\n"
               " 0.85714287 1.         1.1428572  1.2857143  1.4285715  1.5714285\n"
               " 1.7142857  1.8571428  2.         2.142857   2.2857144  2.4285715\n"
               " 2.5714285  2.7142856  2.857143   3.         3.142857   3.2857144\n"
               " 3.4285715  3.5714285  3.7142856  3.857143   4.         4.142857  ]",
               "array([0.        , 0.14285715, 0.2857143 , 0.42857143, 0.5714286 ,\n"
               "       0.71428573, 0.85714287, 1.        , 1.1428572 , 1.2857143 ,\n"
               "       1.4285715 , 1.5714285 , 1.7142857 , 1.8571428 , 2.        ,\n"
               "       2.142857  , 2.2857144 , 2.4285715 , 2.5714285 , 2.7142856 ,\n"
               "       2.857143  , 3.        , 3.142857  , 3.2857144 , 3.4285715 ,\n"
               "       3.5714285 , 3.7142856 , 3.857143  , 4.        , 4.142857  ],\n"
               "      dtype=float32)");
  // np.arange(15, dtype=i64) * 100
  check_prints(generate<std::int64_t>({15}, [](std::size_t i) { return std::int64_t(i) * 100; }),
               "[   0  100  200  300  400  500  600  700  800  900 1000 1100 1200 1300\n"
               " 1400]",
               "array([   0,  100,  200,  300,  400,  500,  600,  700,  800,  900, 1000,\n"
               "       1100, 1200, 1300, 1400])");
  // np.arange(14, dtype=i32)
  check_prints(generate<std::int32_t>({14}, [](std::size_t i) { return std::int32_t(i); }),
               "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13]",
               "array([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13],\n"
               "      dtype=int32)");
  // np.arange(11, dtype=i32) * 100
  check_prints(generate<std::int32_t>({11}, [](std::size_t i) { return std::int32_t(i) * 100; }),
               "[   0  100  200  300  400  500  600  700  800  900 1000]",
               "array([   0,  100,  200,  300,  400,  500,  600,  700,  800,  900, 1000],\n"
               "      dtype=int32)");
  // np.arange(12, dtype=f32) * f32(1.5)
  check_prints(generate<float>({12}, [](std::size_t i) { return float(i) * 1.5f; }),
               "[ 0.   1.5  3.   4.5  6.   7.5  9.  10.5 12.  13.5 15.  16.5]",
               "array([ 0. ,  1.5,  3. ,  4.5,  6. ,  7.5,  9. , 10.5, 12. , 13.5, 15. ,\n"
               "       16.5], dtype=float32)");
  // np.arange(40, dtype=i64) * 1000
  check_prints(generate<std::int64_t>({40}, [](std::size_t i) { return std::int64_t(i) * 1000; }),
               "[    0  1000  2000  3000  4000  5000  6000  7000  8000  9000 10000 11000\n"
               " 12000 13000 14000 15000 16000 17000 18000 19000 20000 21000 22000 23000\n"
               " 24000 25000 26000 27000 28000 29000 30000 31000 32000 33000 34000 35000\n"
               " 36000 37000 38000 39000]",
               "array([    0,  1000,  2000,  3000,  4000,  5000,  6000,  7000,  8000,\n"
               "        9000, 10000, 11000, 12000, 13000, 14000, 15000, 16000, 17000,\n"
               "       18000, 19000, 20000, 21000, 22000, 23000, 24000, 25000, 26000,\n"
               "       27000, 28000, 29000, 30000, 31000, 32000, 33000, 34000, 35000,\n"
               "       36000, 37000, 38000, 39000])");
  // (np.arange(60) / 3).reshape(3, 20)
  check_prints(generate<double>({3, 20}, [](std::size_t i) { return double(i) / 3; }),
               "[[ 0.          0.33333333  0.66666667  1.          1.33333333  1.66666667\n"
               "   2.          2.33333333  2.66666667  3.          3.33333333  3.66666667\n"
               "   4.          4.33333333  4.66666667  5.          5.33333333  5.66666667\n"
               "   6.          6.33333333]\n"
               " [ 6.66666667  7.          7.33333333  7.66666667  8.          8.33333333\n"
               "   8.66666667  9.          9.33333333  9.66666667 10.         10.33333333\n"
               "  10.66666667 11.         11.33333333 11.66666667 12.         12.33333333\n"
               "  12.66666667 13.        ]\n"
               " [13.33333333 13.66666667 14.         14.33333333 14.66666667 15.\n"
               "  15.33333333 15.66666667 16.         16.33333333 16.66666667 17.\n"
               "  17.33333333 17.66666667 18.         18.33333333 18.66666667 19.\n"
               "  19.33333333 19.66666667]]",
               "array([[ 0.        ,  0.33333333,  0.66666667,  1.        ,  1.33333333,\n"
               "         1.66666667,  2.        ,  2.33333333,  2.66666667,  3.        ,\n"
               "         3.33333333,  3.66666667,  4.        ,  4.33333333,  4.66666667,\n"
               "         5.        ,  5.33333333,  5.66666667,  6.        ,  6.33333333],\n"
               "       [ 6.66666667,  7.        ,  7.33333333,  7.66666667,  8.        ,\n"
               "         8.33333333,  8.66666667,  9.        ,  9.33333333,  9.66666667,\n"
               "        10.        , 10.33333333, 10.66666667, 11.        , 11.33333333,\n"
               "        11.66666667, 12.        , 12.33333333, 12.66666667, 13.        ],\n"
               "       [13.33333333, 13.66666667, 14.        , 14.33333333, 14.66666667,\n"
               "        15.        , 15.33333333, 15.66666667, 16.        , 16.33333333,\n"
               "        16.66666667, 17.        , 17.33333333, 17.66666667, 18.        ,\n"
               "        18.33333333, 18.66666667, 19.        , 19.33333333, 19.66666667]])");
  // np.arange(30) % 2 == 0
  check_prints(generate<bool>({30}, [](std::size_t i) { return i % 2 == 0; }),
               "[ True False  True False  True False  True False  True False  True False\n"
               "  True False  True False  True False  True False  True False  True False\n"
               "  True False  True False  True False]",
               "array([ True, False,  True, False,  True, False,  True, False,  True,\n"
               "       False,  True, False,  True, False,  True, False,  True, False,\n"
               "        True, False,  True, False,  True, False,  True, False,  True,\n"
               "       False,  True, False])");
  // (np.arange(36) * 1e-5).reshape(2, 18)
  check_prints(generate<double>({2, 18}, [](std::size_t i) { return double(i) * 1e-5; }),
               "[[0.0e+00 1.0e-05 2.0e-05 3.0e-05 4.0e-05 5.0e-05 6.0e-05 7.0e-05 8.0e-05\n"
               "  9.0e-05 1.0e-04 1.1e-04 1.2e-04 1.3e-04 1.4e-04 1.5e-04 1.6e-04 1.7e-04]\n"
               " [1.8e-04 1.9e-04 2.0e-04 2.1e-04 2.2e-04 2.3e-04 2.4e-04 2.5e-04 2.6e-04\n"
               "  2.7e-04 2.8e-04 2.9e-04 3.0e-04 3.1e-04 3.2e-04 3.3e-04 3.4e-04 3.5e-04]]",
               "array([[0.0e+00, 1.0e-05, 2.0e-05, 3.0e-05, 4.0e-05, 5.0e-05, 6.0e-05,\n"
               "        7.0e-05, 8.0e-05, 9.0e-05, 1.0e-04, 1.1e-04, 1.2e-04, 1.3e-04,\n"
               "        1.4e-04, 1.5e-04, 1.6e-04, 1.7e-04],\n"
               "       [1.8e-04, 1.9e-04, 2.0e-04, 2.1e-04, 2.2e-04, 2.3e-04, 2.4e-04,\n"
               "        2.5e-04, 2.6e-04, 2.7e-04, 2.8e-04, 2.9e-04, 3.0e-04, 3.1e-04,\n"
               "        3.2e-04, 3.3e-04, 3.4e-04, 3.5e-04]])");
}

TEST_CASE("string tensors print as numpy's arrays of bytes objects") {
  // np.array([b'a', b'bc'], dtype=object)
  check_prints(strings({"a", "bc"}), "[b'a' b'bc']", "array([b'a', b'bc'], dtype=object)");
  // np.array([[b'a', b'bcdef'], [b'x\x00y', b"it's"]], dtype=object)
  check_prints(strings({"a", "bcdef", std::string("x\0y", 3), "it's"}, {2, 2}),
               "[[b'a' b'bcdef']\n"
               " [b'x\\x00y' b\"it's\"]]",
               "array([[b'a', b'bcdef'],\n"
               "       [b'x\\x00y', b\"it's\"]], dtype=object)");
  // np.array(b'abc', dtype=object)
  check_prints(Tensor(std::string("abc")), "b'abc'", "array(b'abc', dtype=object)");
  // np.array([], dtype=object)
  check_prints(Tensor(DType::string, {0}), "[]", "array([], dtype=object)");
  // np.array([b'\xff\n\t\\', b'"q"', b'\'"'], dtype=object)
  check_prints(strings({"\xff\n\t\\", "\"q\"", "'\""}), "[b'\\xff\\n\\t\\\\' b'\"q\"' b'\\'\"']",
               "array([b'\\xff\\n\\t\\\\', b'\"q\"', b'\\'\"'], dtype=object)");
  // np.array([b'x' * 30] * 5, dtype=object)
  check_prints(Tensor::from_vector(std::vector<std::string>(5, std::string(30, 'x'))),
               "[b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'\n"
               " b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'\n"
               " b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx']",
               "array([b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx',\n"
               "       b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx',\n"
               "       b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx',\n"
               "       b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx',\n"
               "       b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'], dtype=object)");
  // np.array([b'a'] * 2000, dtype=object)
  check_prints(Tensor::from_vector(std::vector<std::string>(2000, "a")),
               "[b'a' b'a' b'a' ... b'a' b'a' b'a']",
               "array([b'a', b'a', b'a', ..., b'a', b'a', b'a'], dtype=object)");
}

TEST_CASE("more than 1000 elements are summarised") {
  // np.arange(2000, dtype=f32)
  check_prints(generate<float>({2000}, [](std::size_t i) { return float(i); }),
               "[0.000e+00 1.000e+00 2.000e+00 ... 1.997e+03 1.998e+03 1.999e+03]",
               "array([0.000e+00, 1.000e+00, 2.000e+00, ..., 1.997e+03, 1.998e+03,\n"
               "       1.999e+03], dtype=float32)");
  // np.arange(1001) % 3 == 0
  check_prints(generate<bool>({1001}, [](std::size_t i) { return i % 3 == 0; }),
               "[ True False False ... False  True False]",
               "array([ True, False, False, ..., False,  True, False])");
  // np.arange(1200, dtype=i32).reshape(40, 30)
  check_prints(generate<std::int32_t>({40, 30}, [](std::size_t i) { return std::int32_t(i); }),
               "[[   0    1    2 ...   27   28   29]\n"
               " [  30   31   32 ...   57   58   59]\n"
               " [  60   61   62 ...   87   88   89]\n"
               " ...\n"
               " [1110 1111 1112 ... 1137 1138 1139]\n"
               " [1140 1141 1142 ... 1167 1168 1169]\n"
               " [1170 1171 1172 ... 1197 1198 1199]]",
               "array([[   0,    1,    2, ...,   27,   28,   29],\n"
               "       [  30,   31,   32, ...,   57,   58,   59],\n"
               "       [  60,   61,   62, ...,   87,   88,   89],\n"
               "       ...,\n"
               "       [1110, 1111, 1112, ..., 1137, 1138, 1139],\n"
               "       [1140, 1141, 1142, ..., 1167, 1168, 1169],\n"
               "       [1170, 1171, 1172, ..., 1197, 1198, 1199]], dtype=int32)");
  // (np.arange(3000) / 7).reshape(10, 10, 30)
  check_prints(generate<double>({10, 10, 30}, [](std::size_t i) { return double(i) / 7; }),
               "[[[0.00000000e+00 1.42857143e-01 2.85714286e-01 ... 3.85714286e+00\n"
               "   4.00000000e+00 4.14285714e+00]\n"
               "  [4.28571429e+00 4.42857143e+00 4.57142857e+00 ... 8.14285714e+00\n"
               "   8.28571429e+00 8.42857143e+00]\n"
               "  [8.57142857e+00 8.71428571e+00 8.85714286e+00 ... 1.24285714e+01\n"
               "   1.25714286e+01 1.27142857e+01]\n"
               "  ...\n"
               "  [3.00000000e+01 3.01428571e+01 3.02857143e+01 ... 3.38571429e+01\n"
               "   3.40000000e+01 3.41428571e+01]\n"
               "  [3.42857143e+01 3.44285714e+01 3.45714286e+01 ... 3.81428571e+01\n"
               "   3.82857143e+01 3.84285714e+01]\n"
               "  [3.85714286e+01 3.87142857e+01 3.88571429e+01 ... 4.24285714e+01\n"
               "   4.25714286e+01 4.27142857e+01]]\n"
               "\n"
               " [[4.28571429e+01 4.30000000e+01 4.31428571e+01 ... 4.67142857e+01\n"
               "   4.68571429e+01 4.70000000e+01]\n"
               "  [4.71428571e+01 4.72857143e+01 4.74285714e+01 ... 5.10000000e+01\n"
               "   5.11428571e+01 5.12857143e+01]\n"
               "  [5.14285714e+01 5.15714286e+01 5.17142857e+01 ... 5.52857143e+01\n"
               "   5.54285714e+01 5.55714286e+01]\n"
               "  ...\n"
               "  [7.28571429e+01 7.30000000e+01 7.31428571e+01 ... 7.67142857e+01\n"
               "   7.68571429e+01 7.70000000e+01]\n"
               "  [7.71428571e+01 7.72857143e+01 7.74285714e+01 ... 8.10000000e+01\n"
               "   8.11428571e+01 8.12857143e+01]\n"
               "  [8.14285714e+01 8.15714286e+01 8.17142857e+01 ... 8.52857143e+01\n"
               "   8.54285714e+01 8.55714286e+01]]\n"
               "\n"
               " [[8.57142857e+01 8.58571429e+01 8.60000000e+01 ... 8.95714286e+01\n"
               "   8.97142857e+01 8.98571429e+01]\n"
               "  [9.00000000e+01 9.01428571e+01 9.02857143e+01 ... 9.38571429e+01\n"
               "   9.40000000e+01 9.41428571e+01]\n"
               "  [9.42857143e+01 9.44285714e+01 9.45714286e+01 ... 9.81428571e+01\n"
               "   9.82857143e+01 9.84285714e+01]\n"
               "  ...\n"
               "  [1.15714286e+02 1.15857143e+02 1.16000000e+02 ... 1.19571429e+02\n"
               "   1.19714286e+02 1.19857143e+02]\n"
               "  [1.20000000e+02 1.20142857e+02 1.20285714e+02 ... 1.23857143e+02\n"
               "   1.24000000e+02 1.24142857e+02]\n"
               "  [1.24285714e+02 1.24428571e+02 1.24571429e+02 ... 1.28142857e+02\n"
               "   1.28285714e+02 1.28428571e+02]]\n"
               "\n"
               " ...\n"
               "\n"
               " [[3.00000000e+02 3.00142857e+02 3.00285714e+02 ... 3.03857143e+02\n"
               "   3.04000000e+02 3.04142857e+02]\n"
               "  [3.04285714e+02 3.04428571e+02 3.04571429e+02 ... 3.08142857e+02\n"
               "   3.08285714e+02 3.08428571e+02]\n"
               "  [3.08571429e+02 3.08714286e+02 3.08857143e+02 ... 3.12428571e+02\n"
               "   3.12571429e+02 3.12714286e+02]\n"
               "  ...\n"
               "  [3.30000000e+02 3.30142857e+02 3.30285714e+02 ... 3.33857143e+02\n"
               "   3.34000000e+02 3.34142857e+02]\n"
               "  [3.34285714e+02 3.34428571e+02 3.34571429e+02 ... 3.38142857e+02\n"
               "   3.38285714e+02 3.38428571e+02]\n"
               "  [3.38571429e+02 3.38714286e+02 3.38857143e+02 ... 3.42428571e+02\n"
               "   3.42571429e+02 3.42714286e+02]]\n"
               "\n"
               " [[3.42857143e+02 3.43000000e+02 3.43142857e+02 ... 3.46714286e+02\n"
               "   3.46857143e+02 3.47000000e+02]\n"
               "  [3.47142857e+02 3.47285714e+02 3.47428571e+02 ... 3.51000000e+02\n"
               "   3.51142857e+02 3.51285714e+02]\n"
               "  [3.51428571e+02 3.51571429e+02 3.51714286e+02 ... 3.55285714e+02\n"
               "   3.55428571e+02 3.55571429e+02]\n"
               "  ...\n"
               "  [3.72857143e+02 3.73000000e+02 3.73142857e+02 ... 3.76714286e+02\n"
               "   3.76857143e+02 3.77000000e+02]\n"
               "  [3.77142857e+02 3.77285714e+02 3.77428571e+02 ... 3.81000000e+02\n"
               "   3.81142857e+02 3.81285714e+02]\n"
               "  [3.81428571e+02 3.81571429e+02 3.81714286e+02 ... 3.85285714e+02\n"
               "   3.85428571e+02 3.85571429e+02]]\n"
               "\n"
               " [[3.85714286e+02 3.85857143e+02 3.86000000e+02 ... 3.89571429e+02\n"
               "   3.89714286e+02 3.89857143e+02]\n"
               "  [3.90000000e+02 3.90142857e+02 3.90285714e+02 ... 3.93857143e+02\n"
               "   3.94000000e+02 3.94142857e+02]\n"
               "  [3.94285714e+02 3.94428571e+02 3.94571429e+02 ... 3.98142857e+02\n"
               "   3.98285714e+02 3.98428571e+02]\n"
               "  ...\n"
               "  [4.15714286e+02 4.15857143e+02 4.16000000e+02 ... 4.19571429e+02\n"
               "   4.19714286e+02 4.19857143e+02]\n"
               "  [4.20000000e+02 4.20142857e+02 4.20285714e+02 ... 4.23857143e+02\n"
               "   4.24000000e+02 4.24142857e+02]\n"
               "  [4.24285714e+02 4.24428571e+02 4.24571429e+02 ... 4.28142857e+02\n"
               "   4.28285714e+02 4.28428571e+02]]]",
               "array([[[0.00000000e+00, 1.42857143e-01, 2.85714286e-01, ...,\n"
               "         3.85714286e+00, 4.00000000e+00, 4.14285714e+00],\n"
               "        [4.28571429e+00, 4.42857143e+00, 4.57142857e+00, ...,\n"
               "         8.14285714e+00, 8.28571429e+00, 8.42857143e+00],\n"
               "        [8.57142857e+00, 8.71428571e+00, 8.85714286e+00, ...,\n"
               "         1.24285714e+01, 1.25714286e+01, 1.27142857e+01],\n"
               "        ...,\n"
               "        [3.00000000e+01, 3.01428571e+01, 3.02857143e+01, ...,\n"
               "         3.38571429e+01, 3.40000000e+01, 3.41428571e+01],\n"
               "        [3.42857143e+01, 3.44285714e+01, 3.45714286e+01, ...,\n"
               "         3.81428571e+01, 3.82857143e+01, 3.84285714e+01],\n"
               "        [3.85714286e+01, 3.87142857e+01, 3.88571429e+01, ...,\n"
               "         4.24285714e+01, 4.25714286e+01, 4.27142857e+01]],\n"
               "\n"
               "       [[4.28571429e+01, 4.30000000e+01, 4.31428571e+01, ...,\n"
               "         4.67142857e+01, 4.68571429e+01, 4.70000000e+01],\n"
               "        [4.71428571e+01, 4.72857143e+01, 4.74285714e+01, ...,\n"
               "         5.10000000e+01, 5.11428571e+01, 5.12857143e+01],\n"
               "        [5.14285714e+01, 5.15714286e+01, 5.17142857e+01, ...,\n"
               "         5.52857143e+01, 5.54285714e+01, 5.55714286e+01],\n"
               "        ...,\n"
               "        [7.28571429e+01, 7.30000000e+01, 7.31428571e+01, ...,\n"
               "         7.67142857e+01, 7.68571429e+01, 7.70000000e+01],\n"
               "        [7.71428571e+01, 7.72857143e+01, 7.74285714e+01, ...,\n"
               "         8.10000000e+01, 8.11428571e+01, 8.12857143e+01],\n"
               "        [8.14285714e+01, 8.15714286e+01, 8.17142857e+01, ...,\n"
               "         8.52857143e+01, 8.54285714e+01, 8.55714286e+01]],\n"
               "\n"
               "       [[8.57142857e+01, 8.58571429e+01, 8.60000000e+01, ...,\n"
               "         8.95714286e+01, 8.97142857e+01, 8.98571429e+01],\n"
               "        [9.00000000e+01, 9.01428571e+01, 9.02857143e+01, ...,\n"
               "         9.38571429e+01, 9.40000000e+01, 9.41428571e+01],\n"
               "        [9.42857143e+01, 9.44285714e+01, 9.45714286e+01, ...,\n"
               "         9.81428571e+01, 9.82857143e+01, 9.84285714e+01],\n"
               "        ...,\n"
               "        [1.15714286e+02, 1.15857143e+02, 1.16000000e+02, ...,\n"
               "         1.19571429e+02, 1.19714286e+02, 1.19857143e+02],\n"
               "        [1.20000000e+02, 1.20142857e+02, 1.20285714e+02, ...,\n"
               "         1.23857143e+02, 1.24000000e+02, 1.24142857e+02],\n"
               "        [1.24285714e+02, 1.24428571e+02, 1.24571429e+02, ...,\n"
               "         1.28142857e+02, 1.28285714e+02, 1.28428571e+02]],\n"
               "\n"
               "       ...,\n"
               "\n"
               "       [[3.00000000e+02, 3.00142857e+02, 3.00285714e+02, ...,\n"
               "         3.03857143e+02, 3.04000000e+02, 3.04142857e+02],\n"
               "        [3.04285714e+02, 3.04428571e+02, 3.04571429e+02, ...,\n"
               "         3.08142857e+02, 3.08285714e+02, 3.08428571e+02],\n"
               "        [3.08571429e+02, 3.08714286e+02, 3.08857143e+02, ...,\n"
               "         3.12428571e+02, 3.12571429e+02, 3.12714286e+02],\n"
               "        ...,\n"
               "        [3.30000000e+02, 3.30142857e+02, 3.30285714e+02, ...,\n"
               "         3.33857143e+02, 3.34000000e+02, 3.34142857e+02],\n"
               "        [3.34285714e+02, 3.34428571e+02, 3.34571429e+02, ...,\n"
               "         3.38142857e+02, 3.38285714e+02, 3.38428571e+02],\n"
               "        [3.38571429e+02, 3.38714286e+02, 3.38857143e+02, ...,\n"
               "         3.42428571e+02, 3.42571429e+02, 3.42714286e+02]],\n"
               "\n"
               "       [[3.42857143e+02, 3.43000000e+02, 3.43142857e+02, ...,\n"
               "         3.46714286e+02, 3.46857143e+02, 3.47000000e+02],\n"
               "        [3.47142857e+02, 3.47285714e+02, 3.47428571e+02, ...,\n"
               "         3.51000000e+02, 3.51142857e+02, 3.51285714e+02],\n"
               "        [3.51428571e+02, 3.51571429e+02, 3.51714286e+02, ...,\n"
               "         3.55285714e+02, 3.55428571e+02, 3.55571429e+02],\n"
               "        ...,\n"
               "        [3.72857143e+02, 3.73000000e+02, 3.73142857e+02, ...,\n"
               "         3.76714286e+02, 3.76857143e+02, 3.77000000e+02],\n"
               "        [3.77142857e+02, 3.77285714e+02, 3.77428571e+02, ...,\n"
               "         3.81000000e+02, 3.81142857e+02, 3.81285714e+02],\n"
               "        [3.81428571e+02, 3.81571429e+02, 3.81714286e+02, ...,\n"
               "         3.85285714e+02, 3.85428571e+02, 3.85571429e+02]],\n"
               "\n"
               "       [[3.85714286e+02, 3.85857143e+02, 3.86000000e+02, ...,\n"
               "         3.89571429e+02, 3.89714286e+02, 3.89857143e+02],\n"
               "        [3.90000000e+02, 3.90142857e+02, 3.90285714e+02, ...,\n"
               "         3.93857143e+02, 3.94000000e+02, 3.94142857e+02],\n"
               "        [3.94285714e+02, 3.94428571e+02, 3.94571429e+02, ...,\n"
               "         3.98142857e+02, 3.98285714e+02, 3.98428571e+02],\n"
               "        ...,\n"
               "        [4.15714286e+02, 4.15857143e+02, 4.16000000e+02, ...,\n"
               "         4.19571429e+02, 4.19714286e+02, 4.19857143e+02],\n"
               "        [4.20000000e+02, 4.20142857e+02, 4.20285714e+02, ...,\n"
               "         4.23857143e+02, 4.24000000e+02, 4.24142857e+02],\n"
               "        [4.24285714e+02, 4.24428571e+02, 4.24571429e+02, ...,\n"
               "         4.28142857e+02, 4.28285714e+02, 4.28428571e+02]]])");
  // np.where(np.arange(1500) == 700, 1e20, np.arange(1500) % 4 * 0.25)
  check_prints(
      generate<double>({1500}, [](std::size_t i) { return i == 700 ? 1e20 : i % 4 * 0.25; }),
      "[0.   0.25 0.5  ... 0.25 0.5  0.75]", "array([0.  , 0.25, 0.5 , ..., 0.25, 0.5 , 0.75])");
  // np.arange(1001, dtype=f32).reshape(1001, 1)
  check_prints(generate<float>({1001, 1}, [](std::size_t i) { return float(i); }),
               "[[   0.]\n"
               " [   1.]\n"
               " [   2.]\n"
               " ...\n"
               " [ 998.]\n"
               " [ 999.]\n"
               " [1000.]]",
               "array([[   0.],\n"
               "       [   1.],\n"
               "       [   2.],\n"
               "       ...,\n"
               "       [ 998.],\n"
               "       [ 999.],\n"
               "       [1000.]], dtype=float32)");
}
