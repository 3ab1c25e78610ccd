#!/usr/bin/python3
"""Prints the expected-output checks of tests/test_tensor_format.cpp, computed by numpy.

Run with Debian 12's numpy 1.24 (`/usr/bin/python3 tests/tools/gen_format_cases.py`) and paste
the output into the test file below its hand-written cases, then run clang-format on it. Each
case pairs a numpy expression with the C++ expression that builds the same tensor; the C++ side
must produce bit-identical values (the same IEEE operations).
"""
import numpy as np

nan, inf = np.nan, np.inf
f32, f64, i32, i64 = np.float32, np.float64, np.int32, np.int64

# (group title, [(numpy expression, C++ expression), ...])
CASES = [
    ("the seed's float32 2x2 tensors", [
        ("np.full((2, 2), 7, f32)", "Tensor::filled(7.0f, {2, 2})"),
        ("np.full((2, 2), 10, f32)", "Tensor::filled(10.0f, {2, 2})"),
        ("np.full((2, 2), 0.4, f32)", "Tensor::filled(0.4f, {2, 2})"),
        ("np.array([[1, 2], [3, 4]], f32)", "Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})"),
    ]),
    ("rank-0 tensors print like numpy scalars in str", [
        ("np.array(0.4, f32)", "Tensor(0.4f)"),
        ("np.array(7, f32)", "Tensor(7.0f)"),
        ("np.array(0.1 + 0.2)", "Tensor(0.1 + 0.2)"),
        ("np.array(-0.0)", "Tensor(-0.0)"),
        ("np.array(1e16)", "Tensor(1e16)"),
        ("np.array(1.5e-5, f32)", "Tensor(1.5e-5f)"),
        ("np.array(1e-4, f32)", "Tensor(1e-4f)"),
        ("np.array(1e-4)", "Tensor(1e-4)"),
        ("np.array(80635024, f32)", "Tensor(80635024.0f)"),
        ("np.array(nan)", "Tensor(kNaN)"),
        ("np.array(-inf, f32)", "Tensor(-kInfF)"),
        ("np.array(-3, i32)", "Tensor(std::int32_t{-3})"),
        ("np.array(42, i64)", "Tensor(std::int64_t{42})"),
        ("np.array(True)", "Tensor(true)"),
        ("np.array(False)", "Tensor(false)"),
    ]),
    ("positional notation aligns the decimal points", [
        ("np.array([0.5, 0.25, 100.125])", "Tensor::from_vector<double>({0.5, 0.25, 100.125})"),
        ("np.array([1.5, -2.25, 3.0], f32)", "Tensor::from_vector<float>({1.5f, -2.25f, 3.0f})"),
        ("np.array([[-1, -2], [3, 4]], f64)",
         "Tensor::from_vector<double>({-1, -2, 3, 4}, {2, 2})"),
        ("np.array([-1.0, 2.5, -0.0])", "Tensor::from_vector<double>({-1.0, 2.5, -0.0})"),
        ("np.array([0.0, -0.0], f32)", "Tensor::from_vector<float>({0.0f, -0.0f})"),
        ("np.array([1 / 3, 2 / 3, 1.0])", "Tensor::from_vector<double>({1.0 / 3, 2.0 / 3, 1.0})"),
        ("np.array([123456.123456789])", "Tensor::from_vector<double>({123456.123456789})"),
        ("np.array([1 + 2**-30, 1.0])", "Tensor::from_vector<double>({1 + 0x1p-30, 1.0})"),
        # 2**-9 = 0.001953125 needs 9 digits: rounded half to even at 8.
        ("np.array([2**-9, 3 * 2**-9, 1.0])",
         "Tensor::from_vector<double>({0x1p-9, 3 * 0x1p-9, 1.0})"),
        ("np.array([0.001, 1.0], f32)", "Tensor::from_vector<float>({0.001f, 1.0f})"),
        # float32 keeps its exact integer digits in arrays (numpy's min_digits=0).
        ("np.array([80635024, 1e5], f32)", "Tensor::from_vector<float>({80635024.0f, 1e5f})"),
        # max/min is computed in float32: 1000.0 exactly, so no switch to scientific.
        ("np.array([0.56146026, 561.46027], f32)",
         "Tensor::from_vector<float>({0.56146026f, 561.46027f})"),
        ("np.array([99999999.0, 1.0])", "Tensor::from_vector<double>({99999999.0, 1.0})"),
    ]),
    ("scientific notation by numpy's rules", [
        ("np.array([1e-5, 1e5])", "Tensor::from_vector<double>({1e-5, 1e5})"),
        ("np.array([1e8, 1.0])", "Tensor::from_vector<double>({1e8, 1.0})"),
        ("np.array([1e-4, 1.0], f32)", "Tensor::from_vector<float>({1e-4f, 1.0f})"),
        ("np.array([0.0, 1e-5])", "Tensor::from_vector<double>({0.0, 1e-5})"),
        ("np.array([-0.0, 1e-5])", "Tensor::from_vector<double>({-0.0, 1e-5})"),
        ("np.array([1e-100, 1.0])", "Tensor::from_vector<double>({1e-100, 1.0})"),
        ("np.array([1.23456789e-7, 5.0, -2.5])",
         "Tensor::from_vector<double>({1.23456789e-7, 5.0, -2.5})"),
        ("np.array([0.1, 1.23456789e-5], f32)",
         "Tensor::from_vector<float>({0.1f, 1.23456789e-5f})"),
        ("np.array([[-1e-5, 3.3e9], [1.0, 2.0]])",
         "Tensor::from_vector<double>({-1e-5, 3.3e9, 1.0, 2.0}, {2, 2})"),
        ("np.array([0.001, 1.5, 1000.0])", "Tensor::from_vector<double>({0.001, 1.5, 1000.0})"),
        ("np.array([1.7976931348623157e308, 5e-324])",
         "Tensor::from_vector<double>({1.7976931348623157e308, 5e-324})"),
        ("np.array([3.4028235e38, 1e-45], f32)",
         "Tensor::from_vector<float>({3.4028235e38f, 1e-45f})"),
    ]),
    ("nan and inf", [
        ("np.array([nan, -inf, 1.5])", "Tensor::from_vector<double>({kNaN, -kInf, 1.5})"),
        ("np.array([nan, inf], f32)", "Tensor::from_vector<float>({kNaNF, kInfF})"),
        ("np.array([-inf, 1e-9])", "Tensor::from_vector<double>({-kInf, 1e-9})"),
        ("np.array([[nan, 0.25], [inf, 1e10]])",
         "Tensor::from_vector<double>({kNaN, 0.25, kInf, 1e10}, {2, 2})"),
        ("np.array([nan], f32)", "Tensor::from_vector<float>({kNaNF})"),
    ]),
    ("integers and booleans", [
        ("np.array([[1, -20], [300, 4]], i32)",
         "Tensor::from_vector<std::int32_t>({1, -20, 300, 4}, {2, 2})"),
        ("np.array([0, 7], i64)", "Tensor::from_vector<std::int64_t>({0, 7})"),
        ("np.array([-2**63, 2**63 - 1], i64)",
         "Tensor::from_vector<std::int64_t>({kInt64Min, kInt64Max})"),
        ("np.array([[True, False], [False, True]])",
         "Tensor::from_vector<bool>({true, false, false, true}, {2, 2})"),
        ("np.array([True, True])", "Tensor::filled(true, {2})"),
        ("np.zeros((3,), bool)", "Tensor(DType::boolean, {3})"),
    ]),
    ("1-D, 3-D and 4-D shapes", [
        ("np.arange(10, dtype=f32)",
         "generate<float>({10}, [](std::size_t i) { return float(i); })"),
        ("np.arange(24, dtype=f32).reshape(2, 3, 4)",
         "generate<float>({2, 3, 4}, [](std::size_t i) { return float(i); })"),
        ("np.arange(24, dtype=i64).reshape(2, 3, 4) - 5",
         "generate<std::int64_t>({2, 3, 4}, [](std::size_t i) { return std::int64_t(i) - 5; })"),
        ("(np.arange(16) / 4).reshape(2, 2, 2, 2)",
         "generate<double>({2, 2, 2, 2}, [](std::size_t i) { return double(i) / 4; })"),
        ("np.ones((1, 1, 1), i32)", "Tensor::filled(std::int32_t{1}, {1, 1, 1})"),
        ("np.zeros((2, 1))", "Tensor(DType::float64, {2, 1})"),
    ]),
    ("tensors without elements", [
        ("np.zeros((0,), f32)", "Tensor(DType::float32, {0})"),
        ("np.zeros((0,), f64)", "Tensor(DType::float64, {0})"),
        ("np.zeros((0,), i32)", "Tensor(DType::int32, {0})"),
        ("np.zeros((0,), i64)", "Tensor(DType::int64, {0})"),
        ("np.zeros((0,), bool)", "Tensor(DType::boolean, {0})"),
        ("np.zeros((2, 0), f32)", "Tensor(DType::float32, {2, 0})"),
        ("np.zeros((0, 3))", "Tensor(DType::float64, {0, 3})"),
        ("np.zeros((1, 0, 2), i64)", "Tensor(DType::int64, {1, 0, 2})"),
    ]),
    ("long rows wrap at 75 columns", [
        ("np.arange(30, dtype=f32) / f32(7)",
         "generate<float>({30}, [](std::size_t i) { return float(i) / 7.0f; })"),
        # Exactly 75 columns: numpy still wraps, keeping one column free for the ']'.
        ("np.arange(15, dtype=i64) * 100",
         "generate<std::int64_t>({15}, [](std::size_t i) { return std::int64_t(i) * 100; })"),
        # The dtype moves to its own line when it would cross column 75.
        ("np.arange(14, dtype=i32)",
         "generate<std::int32_t>({14}, [](std::size_t i) { return std::int32_t(i); })"),
        ("np.arange(11, dtype=i32) * 100",
         "generate<std::int32_t>({11}, [](std::size_t i) { return std::int32_t(i) * 100; })"),
        ("np.arange(12, dtype=f32) * f32(1.5)",
         "generate<float>({12}, [](std::size_t i) { return float(i) * 1.5f; })"),
        ("np.arange(40, dtype=i64) * 1000",
         "generate<std::int64_t>({40}, [](std::size_t i) { return std::int64_t(i) * 1000; })"),
        ("(np.arange(60) / 3).reshape(3, 20)",
         "generate<double>({3, 20}, [](std::size_t i) { return double(i) / 3; })"),
        ("np.arange(30) % 2 == 0",
         "generate<bool>({30}, [](std::size_t i) { return i % 2 == 0; })"),
        ("(np.arange(36) * 1e-5).reshape(2, 18)",
         "generate<double>({2, 18}, [](std::size_t i) { return double(i) * 1e-5; })"),
    ]),
    ("string tensors print as numpy's arrays of bytes objects", [
        ("np.array([b'a', b'bc'], dtype=object)", 'strings({"a", "bc"})'),
        ("np.array([[b'a', b'bcdef'], [b'x\\x00y', b\"it's\"]], dtype=object)",
         'strings({"a", "bcdef", std::string("x\\0y", 3), "it\'s"}, {2, 2})'),
        ("np.array(b'abc', dtype=object)", 'Tensor(std::string("abc"))'),
        ("np.array([], dtype=object)", "Tensor(DType::string, {0})"),
        ("np.array([b'\\xff\\n\\t\\\\', b'\"q\"', b'\\'\"'], dtype=object)",
         'strings({"\\xff\\n\\t\\\\", "\\"q\\"", "\'\\""})'),
        ("np.array([b'x' * 30] * 5, dtype=object)",
         "Tensor::from_vector(std::vector<std::string>(5, std::string(30, 'x')))"),
        ("np.array([b'a'] * 2000, dtype=object)",
         'Tensor::from_vector(std::vector<std::string>(2000, "a"))'),
    ]),
    ("more than 1000 elements are summarised", [
        ("np.arange(2000, dtype=f32)",
         "generate<float>({2000}, [](std::size_t i) { return float(i); })"),
        ("np.arange(1001) % 3 == 0",
         "generate<bool>({1001}, [](std::size_t i) { return i % 3 == 0; })"),
        ("np.arange(1200, dtype=i32).reshape(40, 30)",
         "generate<std::int32_t>({40, 30}, [](std::size_t i) { return std::int32_t(i); })"),
        ("(np.arange(3000) / 7).reshape(10, 10, 30)",
         "generate<double>({10, 10, 30}, [](std::size_t i) { return double(i) / 7; })"),
        # Only the shown corners decide the format: the huge middle value does not count.
        ("np.where(np.arange(1500) == 700, 1e20, np.arange(1500) % 4 * 0.25)",
         "generate<double>({1500}, [](std::size_t i) { return i == 700 ? 1e20 : i % 4 * 0.25; })"),
        ("np.arange(1001, dtype=f32).reshape(1001, 1)",
         "generate<float>({1001, 1}, [](std::size_t i) { return float(i); })"),
    ]),
]


def cpp_literal(text, indent):
    """A C++ string literal, split after each newline so it reads like the printed array."""
    def esc(s):
        return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    lines = text.split("\n")
    parts = [esc(l + "\n") for l in lines[:-1]] + [esc(lines[-1])]
    return ("\n" + " " * indent).join('"' + p + '"' for p in parts)


def main():
    for title, cases in CASES:
        print(f'TEST_CASE("{title}") {{')
        for np_expr, cpp_expr in cases:
            a = eval(np_expr)
            print(f"  // {np_expr}")
            print(f"  check_prints({cpp_expr},")
            print(f"               {cpp_literal(str(a), 15)},")
            print(f"               {cpp_literal(repr(a), 15)});")
        print("}\n")


if __name__ == "__main__":
    main()
