// String ops, with TF1's names and semantics: hashing strings into buckets
// (StringToHashBucketFast, FarmHash's Fingerprint64 as TF uses it; StringToHashBucketStrong,
// keyed SipHash-2-4), parsing and printing numbers (StringToNumber, AsString), splitting into a
// SparseTensor (StringSplit), joining (StringJoin) and byte substrings (Substr). Strings are
// byte strings: lengths and positions count bytes, as TF's default unit "BYTE".
// Kernels: runtime/kernels/string_kernels.hpp. None of these ops is differentiable.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/embedding_ops.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow::ops {

// Each string of `input` to Fingerprint64(string) % num_buckets (int64, input's shape), as
// tf.string_to_hash_bucket_fast: a string lands in the same bucket as in a TF model.
PSFLOW_DECL Output string_to_hash_bucket_fast(Output input, std::int64_t num_buckets,
                                              std::string_view name = "");

// Each string of `input` to SipHash-2-4(key, string) % num_buckets (int64), as
// tf.string_to_hash_bucket_strong: slower, and an adversary without the key cannot aim strings
// at one bucket.
PSFLOW_DECL Output string_to_hash_bucket_strong(Output input, std::int64_t num_buckets,
                                                std::array<std::uint64_t, 2> key,
                                                std::string_view name = "");

// Each string parsed as a number of `out_type` (float32, float64, int32, int64), as
// tf.string_to_number: surrounding spaces allowed, anything else that is not the whole number
// is InvalidArgument naming the string.
PSFLOW_DECL Output string_to_number(Output input, DType out_type = DType::float32,
                                    std::string_view name = "");

// Options of as_string, TF's attributes of AsString.
struct AsStringOptions {
  std::int64_t precision = -1;  // digits after the point for floats; -1: printf's default (6)
  bool scientific = false;      // floats as "1.500000e+00"
  bool shortest = false;        // floats in the shortest of %e and %f ("%g")
  std::int64_t width = -1;      // pad to this width; -1: no padding
  std::string fill = "";        // the pad character: "" (spaces), " " or "0"
};

// Each number or bool of `input` as a string (tf.as_string): floats with printf's %f unless
// the options say otherwise, integers in decimal, bools "true" / "false".
PSFLOW_DECL Output as_string(Output input, const AsStringOptions& options = {},
                             std::string_view name = "");

// TF1's tf.string_split: each string of the vector `input` split at any byte of `delimiter`
// (each byte a delimiter; an empty delimiter splits into single bytes), empty tokens dropped
// when skip_empty. A SparseTensor: indices int64 [n, 2] (row, position), values string [n],
// dense_shape int64 [2] (rows, most tokens in a row).
PSFLOW_DECL SparseTensor string_split(Output input, std::string_view delimiter = " ",
                                      bool skip_empty = true, std::string_view name = "");

// The strings of `inputs` joined element-wise with `separator` (tf.strings.join): the inputs
// have one shape, or are scalars, which are repeated.
PSFLOW_DECL Output string_join(const std::vector<Output>& inputs, std::string_view separator = "",
                               std::string_view name = "");

// The substring of each string starting at byte `pos` with up to `len` bytes (tf.substr):
// pos and len are int32 or int64, scalars or of input's shape; a negative pos counts from the
// end. A pos outside the string is InvalidArgument.
PSFLOW_DECL Output substr(Output input, Output pos, Output len, std::string_view name = "");

// Whether each whole string of `input` matches `pattern` (bool, input's shape), as
// tf.strings.regex_full_match with a constant pattern (TF's StaticRegexFullMatch): RE2's syntax,
// the engine TF uses. A pattern RE2 does not accept is InvalidArgument with RE2's reason.
PSFLOW_DECL Output regex_full_match(Output input, std::string_view pattern,
                                    std::string_view name = "");

}  // namespace psflow::ops

namespace re2 {
class RE2;
}

namespace psflow::detail {
// `pattern` compiled by RE2; InvalidArgument naming it with RE2's reason when RE2 refuses it.
std::unique_ptr<re2::RE2> compile_regex(const std::string& pattern);
}  // namespace psflow::detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <re2/re2.h>

namespace psflow::detail {

PSFLOW_DECL void expect_string(const InferenceContext& ctx, std::size_t i) {
  if (ctx.input_dtypes[i] != DType::string)
    ctx.fail("needs a string input, got " + ctx.describe_input(i) +
             " (as_string turns numbers into strings)");
}

PSFLOW_DECL std::vector<OutputSpec> infer_hash_bucket(const InferenceContext& ctx) {
  expect_string(ctx, 0);
  if (ctx.attr<std::int64_t>("num_buckets") < 1)
    ctx.fail("num_buckets must be at least 1, got " +
             std::to_string(ctx.attr<std::int64_t>("num_buckets")));
  return {OutputSpec{DType::int64, ctx.input_shapes[0]}};
}

PSFLOW_DECL std::unique_ptr<re2::RE2> compile_regex(const std::string& pattern) {
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_unique<re2::RE2>(pattern, options);
  if (!re->ok())
    throw InvalidArgument("regex_full_match: the pattern '" + pattern + "' is not a regular " +
                          "expression RE2 accepts: " + re->error());
  return re;
}

PSFLOW_DECL std::vector<OutputSpec> infer_regex_full_match(const InferenceContext& ctx) {
  expect_string(ctx, 0);
  compile_regex(ctx.attr<std::string>("pattern"));  // a bad pattern fails where it is written
  return {OutputSpec{DType::boolean, ctx.input_shapes[0]}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_string_to_number(const InferenceContext& ctx) {
  expect_string(ctx, 0);
  const DType out = ctx.attr<DType>("out_type");
  if (!is_numeric(out))
    ctx.fail("out_type must be float32, float64, int32 or int64, got " +
             std::string(dtype_name(out)));
  return {OutputSpec{out, ctx.input_shapes[0]}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_as_string(const InferenceContext& ctx) {
  if (ctx.input_dtypes[0] == DType::string)
    ctx.fail("needs a number or bool input, got " + ctx.describe_input(0));
  const std::string& fill = ctx.attr<std::string>("fill");
  if (fill.size() > 1) ctx.fail("fill must be one character or empty, got '" + fill + "'");
  if (ctx.attr<bool>("scientific") && ctx.attr<bool>("shortest"))
    ctx.fail("scientific and shortest cannot both be set");
  return {OutputSpec{DType::string, ctx.input_shapes[0]}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_string_split(const InferenceContext& ctx) {
  expect_string(ctx, 0);
  const PartialShape& in = ctx.input_shapes[0];
  if (in.known && in.dims.size() != 1)
    ctx.fail("input must be a vector of strings, got " + ctx.describe_input(0));
  return {OutputSpec{DType::int64, PartialShape::of({-1, 2})},
          OutputSpec{DType::string, PartialShape::of({-1})},
          OutputSpec{DType::int64, PartialShape::of({2})}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_string_join(const InferenceContext& ctx) {
  if (ctx.input_dtypes.empty()) ctx.fail("needs at least one input");
  PartialShape shape = PartialShape::scalar();
  for (std::size_t i = 0; i < ctx.input_dtypes.size(); ++i) {
    expect_string(ctx, i);
    const PartialShape& s = ctx.input_shapes[i];
    if (s.known && s.dims.empty()) continue;  // a scalar is repeated
    if (shape.known && shape.dims.empty()) {
      shape = s;
    } else if (!shapes_compatible(shape, s)) {
      ctx.fail("inputs must have one shape or be scalars, got " + ctx.describe_input(i) +
               " after " + shape.to_string());
    } else {
      shape = merge_shapes(shape, s);
    }
  }
  return {OutputSpec{DType::string, shape}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_substr(const InferenceContext& ctx) {
  expect_string(ctx, 0);
  for (std::size_t i : {1, 2}) {
    if (ctx.input_dtypes[i] != DType::int32 && ctx.input_dtypes[i] != DType::int64)
      ctx.fail("pos and len must be int32 or int64, got " + ctx.describe_input(i));
    const PartialShape& s = ctx.input_shapes[i];
    if (s.known && !s.dims.empty() && !shapes_compatible(s, ctx.input_shapes[0]))
      ctx.fail("pos and len must be scalars or have the input's shape, got " +
               ctx.describe_input(i) + " for " + ctx.describe_input(0));
  }
  ctx.expect_same_dtype(1, 2);
  return {OutputSpec{DType::string, ctx.input_shapes[0]}};
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output string_to_hash_bucket_fast(Output input, std::int64_t num_buckets,
                                              std::string_view name) {
  return detail::build_op("StringToHashBucketFast", {input}, {{"num_buckets", num_buckets}}, name,
                          "StringToHashBucketFast")
      .output(0);
}

PSFLOW_DECL Output string_to_hash_bucket_strong(Output input, std::int64_t num_buckets,
                                                std::array<std::uint64_t, 2> key,
                                                std::string_view name) {
  // TF keeps the key as a list of ints; int64 attributes carry the key's bits unchanged.
  const std::vector<std::int64_t> key_bits{static_cast<std::int64_t>(key[0]),
                                           static_cast<std::int64_t>(key[1])};
  return detail::build_op("StringToHashBucketStrong", {input},
                          {{"num_buckets", num_buckets}, {"key", key_bits}}, name,
                          "StringToHashBucketStrong")
      .output(0);
}

PSFLOW_DECL Output string_to_number(Output input, DType out_type, std::string_view name) {
  return detail::build_op("StringToNumber", {input}, {{"out_type", out_type}}, name,
                          "StringToNumber")
      .output(0);
}

PSFLOW_DECL Output as_string(Output input, const AsStringOptions& options, std::string_view name) {
  return detail::build_op("AsString", {input},
                          {{"precision", options.precision},
                           {"scientific", options.scientific},
                           {"shortest", options.shortest},
                           {"width", options.width},
                           {"fill", options.fill}},
                          name, "AsString")
      .output(0);
}

PSFLOW_DECL SparseTensor string_split(Output input, std::string_view delimiter, bool skip_empty,
                                      std::string_view name) {
  const Operation op = detail::build_op(
      "StringSplit", {input}, {{"delimiter", std::string(delimiter)}, {"skip_empty", skip_empty}},
      name, "StringSplit");
  return SparseTensor{op.output(0), op.output(1), op.output(2)};
}

PSFLOW_DECL Output string_join(const std::vector<Output>& inputs, std::string_view separator,
                               std::string_view name) {
  return detail::build_op("StringJoin", inputs, {{"separator", std::string(separator)}}, name,
                          "StringJoin")
      .output(0);
}

PSFLOW_DECL Output substr(Output input, Output pos, Output len, std::string_view name) {
  return detail::build_op("Substr", {input, pos, len}, {}, name, "Substr").output(0);
}

PSFLOW_DECL Output regex_full_match(Output input, std::string_view pattern, std::string_view name) {
  return detail::build_op("StaticRegexFullMatch", {input}, {{"pattern", std::string(pattern)}},
                          name, "StaticRegexFullMatch")
      .output(0);
}

}  // namespace psflow::ops

namespace psflow::detail {

PSFLOW_REGISTERED_AT_STARTUP const bool string_ops_registered = [] {
  auto& defs = OpRegistry::global();
  for (const char* type : {"StringToHashBucketFast", "StringToHashBucketStrong"})
    defs.add({.type = type, .num_inputs = 1, .infer = infer_hash_bucket});
  defs.add({.type = "StringToNumber", .num_inputs = 1, .infer = infer_string_to_number});
  defs.add({.type = "AsString", .num_inputs = 1, .infer = infer_as_string});
  defs.add({.type = "StringSplit", .num_inputs = 1, .infer = infer_string_split});
  defs.add({.type = "StringJoin", .num_inputs = -1, .infer = infer_string_join});
  defs.add({.type = "Substr", .num_inputs = 3, .infer = infer_substr});
  defs.add({.type = "StaticRegexFullMatch", .num_inputs = 1, .infer = infer_regex_full_match});
  GradientRegistry::global().add_not_differentiable(
      {"StringToHashBucketFast", "StringToHashBucketStrong", "StringToNumber", "AsString",
       "StringSplit", "StringJoin", "Substr", "StaticRegexFullMatch"});
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
