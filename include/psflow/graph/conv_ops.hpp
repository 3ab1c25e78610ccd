// Image ops on NHWC tensors ([batch, height, width, channels]), as TF1's tf.nn: Conv2D, MaxPool,
// AvgPool and BiasAdd, with their gradients and the gradient ops TF builds for them.
// Kernels: runtime/kernels/conv_kernels.hpp.
//
// Op types and their inputs (attrs strides, ksize: 4 ints [1, h, w, 1]; padding "SAME"/"VALID"):
//   Conv2D(input, filter)                        input [N,H,W,C], filter [KH,KW,C,OC] ->
//   [N,OH,OW,OC] Conv2DBackpropInput(input_sizes, filter, out_backprop)   d/d input, shaped
//   input_sizes Conv2DBackpropFilter(input, filter_sizes, out_backprop)  d/d filter, shaped
//   filter_sizes MaxPool(value), AvgPool(value)               the max / mean of each window ->
//   [N,OH,OW,C] MaxPoolGrad(orig_input, orig_output, grad)   grad routed to each window's max
//   (ties: first) AvgPoolGrad(orig_input_shape, grad)          grad spread evenly over each
//   window's cells BiasAdd(value, bias)                         value [..., C] plus bias [C] on the
//   last axis BiasAddGrad(out_backprop)                    out_backprop summed over all but the
//   last axis
// The *_sizes / orig_input_shape inputs are int32 or int64 vectors of 4 (a constant, or a Shape
// op's output). Output sizes follow TF's arithmetic per spatial axis (input in, window k, stride
// s): VALID out = (in - k + s) / s (an error when negative), no padding; SAME out = ceil(in / s),
// padded by max((out - 1) * s + k - in, 0) cells, the smaller half before. Pools ignore padded
// cells: a SAME window at an edge takes the max or mean of its real cells only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

// One spatial axis of a window sliding over an input: the output size and the padding before
// the first cell.
struct WindowedSize {
  std::int64_t out = 0;
  std::int64_t pad_before = 0;
};

// TF's GetWindowedOutputSize (C++ integer division: VALID with in - k + s in (-s, 0) gives 0);
// nullopt where TF reports a negative output size.
PSFLOW_DECL std::optional<WindowedSize> windowed_size(std::int64_t in, std::int64_t k,
                                                      std::int64_t s, bool same);

}  // namespace detail

namespace ops {

// TF1's tf.nn.conv2d for NHWC: input [batch, height, width, in_channels], filter
// [filter_height, filter_width, in_channels, out_channels], strides [1, stride_h, stride_w, 1],
// padding "SAME" or "VALID"; the result is [batch, out_height, out_width, out_channels]
// (cross-correlation, as TF). float32 or float64.
PSFLOW_DECL Output conv2d(Output input, Output filter, std::vector<int> strides,
                          std::string_view padding, std::string_view name = "");

// The gradient of conv2d with respect to its input (TF's tf.nn.conv2d_backprop_input):
// input_sizes is the input's shape as an int32/int64 vector of 4.
PSFLOW_DECL Output conv2d_backprop_input(Output input_sizes, Output filter, Output out_backprop,
                                         std::vector<int> strides, std::string_view padding,
                                         std::string_view name = "");

// The gradient of conv2d with respect to its filter (TF's tf.nn.conv2d_backprop_filter):
// filter_sizes is the filter's shape as an int32/int64 vector of 4.
PSFLOW_DECL Output conv2d_backprop_filter(Output input, Output filter_sizes, Output out_backprop,
                                          std::vector<int> strides, std::string_view padding,
                                          std::string_view name = "");

// TF1's tf.nn.max_pool for NHWC: the max of each ksize window (ksize and strides
// [1, h, w, 1]). SAME padding pads nothing in: an edge window's max is over its real cells.
PSFLOW_DECL Output max_pool(Output value, std::vector<int> ksize, std::vector<int> strides,
                            std::string_view padding, std::string_view name = "");

// TF1's tf.nn.avg_pool for NHWC: the mean of each window; with SAME padding an edge window
// divides by the number of its real cells, as TF.
PSFLOW_DECL Output avg_pool(Output value, std::vector<int> ksize, std::vector<int> strides,
                            std::string_view padding, std::string_view name = "");

// The gradient of max_pool: shaped like orig_input, grad added at the max of each window (on a
// tie the first cell in row-major window order, as TF's CPU kernel). orig_output is the
// forward result (kept for TF's signature; the kernel recomputes the maxima from orig_input).
PSFLOW_DECL Output max_pool_grad(Output orig_input, Output orig_output, Output grad,
                                 std::vector<int> ksize, std::vector<int> strides,
                                 std::string_view padding, std::string_view name = "");

// The gradient of avg_pool: each grad cell divided evenly over its window's real cells, in a
// tensor shaped orig_input_shape (an int32/int64 vector of 4).
PSFLOW_DECL Output avg_pool_grad(Output orig_input_shape, Output grad, std::vector<int> ksize,
                                 std::vector<int> strides, std::string_view padding,
                                 std::string_view name = "");

// TF1's tf.nn.bias_add: value [..., C] (rank 2 or more) plus the 1-D bias [C] along the last
// axis.
PSFLOW_DECL Output bias_add(Output value, Output bias, std::string_view name = "");

// The gradient of bias_add with respect to the bias: out_backprop summed over every axis but
// the last.
PSFLOW_DECL Output bias_add_grad(Output out_backprop, std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL std::optional<WindowedSize> windowed_size(std::int64_t in, std::int64_t k,
                                                      std::int64_t s, bool same) {
  if (same) {
    const std::int64_t out = (in + s - 1) / s;
    const std::int64_t pad_total = std::max<std::int64_t>((out - 1) * s + k - in, 0);
    return WindowedSize{out, pad_total / 2};
  }
  const std::int64_t out = (in - k + s) / s;
  if (out < 0) return std::nullopt;
  return WindowedSize{out, 0};
}

// True for "SAME", false for "VALID"; fails naming the op and the string otherwise.
PSFLOW_DECL bool parse_padding(const InferenceContext& ctx) {
  const auto& padding = ctx.attr<std::string>("padding");
  if (padding == "SAME") return true;
  if (padding == "VALID") return false;
  ctx.fail("padding must be \"SAME\" or \"VALID\", got \"" + padding + "\"");
}

// Checks a 4-int NHWC window attribute (strides, ksize): batch and channel entries 1, the
// spatial ones at least 1.
PSFLOW_DECL void check_nhwc_attr(const InferenceContext& ctx, const char* key) {
  const auto& v = ctx.attr<std::vector<std::int64_t>>(key);
  if (v.size() != 4)
    ctx.fail(std::string(key) + " must have 4 entries [1, h, w, 1] (NHWC), got " + int_list(v));
  if (v[0] != 1 || v[3] != 1)
    ctx.fail(std::string(key) + " " + int_list(v) +
             " must be 1 in the batch and channel entries (first and last): windows slide over "
             "height and width only");
  if (v[1] < 1 || v[2] < 1)
    ctx.fail(std::string(key) + " " + int_list(v) + " must be at least 1 in height and width");
}

PSFLOW_DECL void expect_rank(const InferenceContext& ctx, std::size_t i, std::int64_t rank,
                             const char* what) {
  if (ctx.input_shapes[i].known && ctx.input_shapes[i].rank() != rank)
    ctx.fail(std::string(what) + " must have rank " + std::to_string(rank) + ", got " +
             ctx.describe_input(i));
}

// Dimension d of input i, or -1 when unknown.
PSFLOW_DECL std::int64_t dim_of(const InferenceContext& ctx, std::size_t i, std::size_t d) {
  const auto& s = ctx.input_shapes[i];
  return s.known && d < s.dims.size() ? s.dims[d] : -1;
}

// The spatial output sizes [OH, OW] for input sizes (ih, iw) and window (kh, kw), -1 where not
// known; fails where VALID padding leaves a negative size.
PSFLOW_DECL std::vector<std::int64_t> spatial_out(const InferenceContext& ctx, std::int64_t ih,
                                                  std::int64_t iw, std::int64_t kh, std::int64_t kw,
                                                  const std::string& what) {
  const auto& strides = ctx.attr<std::vector<std::int64_t>>("strides");
  const bool same = parse_padding(ctx);
  std::vector<std::int64_t> out(2, -1);
  const std::int64_t in[2] = {ih, iw}, k[2] = {kh, kw};
  for (std::size_t a = 0; a < 2; ++a) {
    if (in[a] < 0 || k[a] < 0) continue;
    auto w = windowed_size(in[a], k[a], strides[a + 1], same);
    if (!w)
      ctx.fail("the " + std::string(a == 0 ? "height" : "width") + " " + std::to_string(in[a]) +
               " of " + what + " is too small for a window of " + std::to_string(k[a]) +
               " with VALID padding (the output size would be negative): use SAME padding or a "
               "smaller window");
    out[a] = w->out;
  }
  return out;
}

// A sizes input (input_sizes, filter_sizes, orig_input_shape): an int32/int64 vector of 4.
PSFLOW_DECL void check_sizes_input(const InferenceContext& ctx, std::size_t i) {
  if (ctx.input_dtypes[i] != DType::int32 && ctx.input_dtypes[i] != DType::int64)
    ctx.fail("the sizes input must be int32 or int64, got " + ctx.describe_input(i));
  const auto& s = ctx.input_shapes[i];
  if (s.known && (s.rank() != 1 || (s.dims[0] >= 0 && s.dims[0] != 4)))
    ctx.fail("the sizes input must be a vector of 4, got " + ctx.describe_input(i));
}

// What the builder knew about a sizes input's values (attr "sizes_hint": -1 where unknown).
PSFLOW_DECL std::vector<std::int64_t> sizes_hint(const InferenceContext& ctx) {
  std::vector<std::int64_t> dims(4, -1);
  auto it = ctx.attrs.find("sizes_hint");
  if (it == ctx.attrs.end()) return dims;
  const auto* hint = std::get_if<std::vector<std::int64_t>>(&it->second);
  if (!hint || hint->size() != 4) return dims;
  for (std::size_t d = 0; d < 4; ++d) {
    if ((*hint)[d] < -1) ctx.fail("the sizes " + int_list(*hint) + " must not be negative");
    dims[d] = (*hint)[d];
  }
  return dims;
}

// Sets dims[d] from a known `value`, failing when both are known and differ.
PSFLOW_DECL void merge_dim(const InferenceContext& ctx, std::vector<std::int64_t>& dims,
                           std::size_t d, std::int64_t value, const std::string& what) {
  if (value < 0) return;
  if (dims[d] >= 0 && dims[d] != value)
    ctx.fail(what + ": expected " + std::to_string(dims[d]) + ", got " + std::to_string(value));
  dims[d] = value;
}

PSFLOW_DECL std::vector<OutputSpec> infer_conv2d(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  ctx.expect_same_dtype(0, 1);
  check_nhwc_attr(ctx, "strides");
  parse_padding(ctx);
  expect_rank(ctx, 0, 4, "the input (NHWC)");
  expect_rank(ctx, 1, 4, "the filter [height, width, in_channels, out_channels]");
  const std::int64_t c = dim_of(ctx, 0, 3), fc = dim_of(ctx, 1, 2);
  if (c >= 0 && fc >= 0 && c != fc)
    ctx.fail(
        "the input's channels (last dimension) must equal the filter's in_channels (third "
        "dimension), got input " +
        ctx.describe_input(0) + " and filter " + ctx.describe_input(1));
  const auto hw = spatial_out(ctx, dim_of(ctx, 0, 1), dim_of(ctx, 0, 2), dim_of(ctx, 1, 0),
                              dim_of(ctx, 1, 1), "the input " + ctx.describe_input(0));
  return {OutputSpec{ctx.input_dtypes[0],
                     PartialShape::of({dim_of(ctx, 0, 0), hw[0], hw[1], dim_of(ctx, 1, 3)})}};
}

// Checks out_backprop (input `g`) against the forward output that input [n, h, w, c] and filter
// [kh, kw, c, oc] give, as far as they are known.
PSFLOW_DECL void check_conv_backprop(const InferenceContext& ctx,
                                     const std::vector<std::int64_t>& in,
                                     const std::vector<std::int64_t>& filter, std::size_t g) {
  if (in[3] >= 0 && filter[2] >= 0 && in[3] != filter[2])
    ctx.fail("the input's channels " + std::to_string(in[3]) +
             " must equal the filter's in_channels " + std::to_string(filter[2]) +
             " (input sizes " + shape_string(in) + ", filter sizes " + shape_string(filter) + ")");
  const auto hw = spatial_out(ctx, in[1], in[2], filter[0], filter[1],
                              "the input (sizes " + shape_string(in) + ")");
  const std::int64_t want[4] = {in[0], hw[0], hw[1], filter[3]};
  for (std::size_t d = 0; d < 4; ++d) {
    const std::int64_t got = dim_of(ctx, g, d);
    if (want[d] >= 0 && got >= 0 && want[d] != got)
      ctx.fail("out_backprop " + ctx.describe_input(g) + " does not match the forward output " +
               shape_string(std::vector<std::int64_t>(want, want + 4)) + " of input sizes " +
               shape_string(in) + " and filter sizes " + shape_string(filter));
  }
}

// Conv2DBackpropInput(input_sizes, filter, out_backprop).
PSFLOW_DECL std::vector<OutputSpec> infer_conv2d_backprop_input(const InferenceContext& ctx) {
  check_sizes_input(ctx, 0);
  expect_floating(ctx, 1);
  ctx.expect_same_dtype(1, 2);
  check_nhwc_attr(ctx, "strides");
  parse_padding(ctx);
  expect_rank(ctx, 1, 4, "the filter [height, width, in_channels, out_channels]");
  expect_rank(ctx, 2, 4, "out_backprop (NHWC)");
  auto in = sizes_hint(ctx);
  merge_dim(ctx, in, 0, dim_of(ctx, 2, 0), "input_sizes' batch against out_backprop's");
  merge_dim(ctx, in, 3, dim_of(ctx, 1, 2), "input_sizes' channels against the filter's");
  std::vector<std::int64_t> filter(4);
  for (std::size_t d = 0; d < 4; ++d) filter[d] = dim_of(ctx, 1, d);
  check_conv_backprop(ctx, in, filter, 2);
  return {OutputSpec{ctx.input_dtypes[1], PartialShape::of(in)}};
}

// Conv2DBackpropFilter(input, filter_sizes, out_backprop).
PSFLOW_DECL std::vector<OutputSpec> infer_conv2d_backprop_filter(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  check_sizes_input(ctx, 1);
  ctx.expect_same_dtype(0, 2);
  check_nhwc_attr(ctx, "strides");
  parse_padding(ctx);
  expect_rank(ctx, 0, 4, "the input (NHWC)");
  expect_rank(ctx, 2, 4, "out_backprop (NHWC)");
  auto filter = sizes_hint(ctx);
  merge_dim(ctx, filter, 2, dim_of(ctx, 0, 3), "filter_sizes' in_channels against the input's");
  merge_dim(ctx, filter, 3, dim_of(ctx, 2, 3), "filter_sizes' out_channels against out_backprop's");
  std::vector<std::int64_t> in(4);
  for (std::size_t d = 0; d < 4; ++d) in[d] = dim_of(ctx, 0, d);
  check_conv_backprop(ctx, in, filter, 2);
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(filter)}};
}

// The pooled shape of input i (MaxPool, AvgPool; and the forward output the grads check).
PSFLOW_DECL std::vector<std::int64_t> pooled_dims(const InferenceContext& ctx,
                                                  const std::vector<std::int64_t>& in,
                                                  const std::string& what) {
  check_nhwc_attr(ctx, "ksize");
  check_nhwc_attr(ctx, "strides");
  parse_padding(ctx);
  const auto& ksize = ctx.attr<std::vector<std::int64_t>>("ksize");
  const auto hw = spatial_out(ctx, in[1], in[2], ksize[1], ksize[2], what);
  return {in[0], hw[0], hw[1], in[3]};
}

PSFLOW_DECL std::vector<std::int64_t> dims4(const InferenceContext& ctx, std::size_t i) {
  std::vector<std::int64_t> dims(4);
  for (std::size_t d = 0; d < 4; ++d) dims[d] = dim_of(ctx, i, d);
  return dims;
}

PSFLOW_DECL std::vector<OutputSpec> infer_pool(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  expect_rank(ctx, 0, 4, "the value (NHWC)");
  return {OutputSpec{
      ctx.input_dtypes[0],
      PartialShape::of(pooled_dims(ctx, dims4(ctx, 0), "the value " + ctx.describe_input(0)))}};
}

// Fails unless input g is compatible with the pooled shape `want`.
PSFLOW_DECL void check_pool_grad(const InferenceContext& ctx, const std::vector<std::int64_t>& want,
                                 std::size_t g, const std::string& of) {
  for (std::size_t d = 0; d < 4; ++d) {
    const std::int64_t got = dim_of(ctx, g, d);
    if (want[d] >= 0 && got >= 0 && want[d] != got)
      ctx.fail(ctx.describe_input(g) + " does not match the pooled shape " + shape_string(want) +
               " of " + of);
  }
}

// MaxPoolGrad(orig_input, orig_output, grad).
PSFLOW_DECL std::vector<OutputSpec> infer_max_pool_grad(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  ctx.expect_same_dtype(0, 1);
  ctx.expect_same_dtype(0, 2);
  for (std::size_t i = 0; i < 3; ++i)
    expect_rank(ctx, i, 4, i == 0 ? "orig_input" : (i == 1 ? "orig_output" : "grad"));
  const auto in = dims4(ctx, 0);
  const auto want = pooled_dims(ctx, in, "orig_input " + ctx.describe_input(0));
  check_pool_grad(ctx, want, 1, "orig_input " + ctx.describe_input(0));
  check_pool_grad(ctx, want, 2, "orig_input " + ctx.describe_input(0));
  return {OutputSpec{ctx.input_dtypes[0], ctx.input_shapes[0]}};
}

// AvgPoolGrad(orig_input_shape, grad).
PSFLOW_DECL std::vector<OutputSpec> infer_avg_pool_grad(const InferenceContext& ctx) {
  check_sizes_input(ctx, 0);
  expect_floating(ctx, 1);
  expect_rank(ctx, 1, 4, "grad (NHWC)");
  auto in = sizes_hint(ctx);
  merge_dim(ctx, in, 0, dim_of(ctx, 1, 0), "orig_input_shape's batch against grad's");
  merge_dim(ctx, in, 3, dim_of(ctx, 1, 3), "orig_input_shape's channels against grad's");
  const auto want = pooled_dims(ctx, in, "orig_input_shape " + shape_string(in));
  check_pool_grad(ctx, want, 1, "orig_input_shape " + shape_string(in));
  return {OutputSpec{ctx.input_dtypes[1], PartialShape::of(in)}};
}

// BiasAdd(value, bias).
PSFLOW_DECL std::vector<OutputSpec> infer_bias_add(const InferenceContext& ctx) {
  expect_numeric(ctx, 0);
  ctx.expect_same_dtype(0, 1);
  const auto& value = ctx.input_shapes[0];
  if (value.known && value.rank() < 2)
    ctx.fail("the value must have rank 2 or more ([..., channels]), got " + ctx.describe_input(0));
  expect_rank(ctx, 1, 1, "the bias");
  if (!value.known) return {OutputSpec{ctx.input_dtypes[0], value}};
  auto dims = value.dims;
  const std::int64_t c = dims.back(), b = dim_of(ctx, 1, 0);
  if (c >= 0 && b >= 0 && c != b)
    ctx.fail("the bias length must equal the value's last dimension, got value " +
             ctx.describe_input(0) + " and bias " + ctx.describe_input(1));
  if (c < 0) dims.back() = b;
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// BiasAddGrad(out_backprop).
PSFLOW_DECL std::vector<OutputSpec> infer_bias_add_grad(const InferenceContext& ctx) {
  expect_numeric(ctx, 0);
  const auto& g = ctx.input_shapes[0];
  if (g.known && g.rank() < 2)
    ctx.fail("out_backprop must have rank 2 or more ([..., channels]), got " +
             ctx.describe_input(0));
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of({g.known ? g.dims.back() : -1})}};
}

// What graph building knows about the values of a sizes tensor of `rank` entries: a constant's
// values, or the static shape of a Shape op's input; -1 where unknown.
PSFLOW_DECL std::vector<std::int64_t> static_sizes(const Output& sizes, std::size_t rank) {
  std::vector<std::int64_t> dims(rank, -1);
  const Operation op = sizes.op();
  const std::string type = op.type();
  if (type == "Const") {
    const auto& value = op_attr<Tensor>(op, "value");
    if (value.rank() != 1 || value.size() != rank) return dims;
    for (std::size_t d = 0; d < rank; ++d) {
      if (value.dtype() == DType::int32)
        dims[d] = value.data<std::int32_t>()[d];
      else if (value.dtype() == DType::int64)
        dims[d] = value.data<std::int64_t>()[d];
    }
  } else if (type == "Shape") {
    const PartialShape s = op.input(0).shape();
    if (s.known && s.dims.size() == rank) dims = s.dims;
  }
  return dims;
}

// x's shape as a sizes input: a constant when fully known, else x's run-time shape.
PSFLOW_DECL Output sizes_of(const Output& x) {
  const PartialShape s = x.shape();
  if (s.fully_defined()) {
    std::vector<std::int32_t> dims(s.dims.begin(), s.dims.end());
    return ops::constant(x.graph(), Tensor::from_vector(dims));
  }
  return ops::shape(x);
}

PSFLOW_DECL AttrMap window_attrs(const std::vector<int>& strides, std::string_view padding) {
  return {{"strides", to_dims(strides)}, {"padding", std::string(padding)}};
}

PSFLOW_DECL AttrMap pool_attrs(const std::vector<int>& ksize, const std::vector<int>& strides,
                               std::string_view padding) {
  AttrMap attrs = window_attrs(strides, padding);
  attrs.emplace("ksize", to_dims(ksize));
  return attrs;
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output conv2d(Output input, Output filter, std::vector<int> strides,
                          std::string_view padding, std::string_view name) {
  return detail::build_op("Conv2D", {input, filter}, detail::window_attrs(strides, padding), name,
                          "Conv2D")
      .output(0);
}

PSFLOW_DECL Output conv2d_backprop_input(Output input_sizes, Output filter, Output out_backprop,
                                         std::vector<int> strides, std::string_view padding,
                                         std::string_view name) {
  auto attrs = detail::window_attrs(strides, padding);
  attrs.emplace("sizes_hint", detail::static_sizes(input_sizes, 4));
  return detail::build_op("Conv2DBackpropInput", {input_sizes, filter, out_backprop},
                          std::move(attrs), name, "Conv2DBackpropInput")
      .output(0);
}

PSFLOW_DECL Output conv2d_backprop_filter(Output input, Output filter_sizes, Output out_backprop,
                                          std::vector<int> strides, std::string_view padding,
                                          std::string_view name) {
  auto attrs = detail::window_attrs(strides, padding);
  attrs.emplace("sizes_hint", detail::static_sizes(filter_sizes, 4));
  return detail::build_op("Conv2DBackpropFilter", {input, filter_sizes, out_backprop},
                          std::move(attrs), name, "Conv2DBackpropFilter")
      .output(0);
}

PSFLOW_DECL Output max_pool(Output value, std::vector<int> ksize, std::vector<int> strides,
                            std::string_view padding, std::string_view name) {
  return detail::build_op("MaxPool", {value}, detail::pool_attrs(ksize, strides, padding), name,
                          "MaxPool")
      .output(0);
}

PSFLOW_DECL Output avg_pool(Output value, std::vector<int> ksize, std::vector<int> strides,
                            std::string_view padding, std::string_view name) {
  return detail::build_op("AvgPool", {value}, detail::pool_attrs(ksize, strides, padding), name,
                          "AvgPool")
      .output(0);
}

PSFLOW_DECL Output max_pool_grad(Output orig_input, Output orig_output, Output grad,
                                 std::vector<int> ksize, std::vector<int> strides,
                                 std::string_view padding, std::string_view name) {
  return detail::build_op("MaxPoolGrad", {orig_input, orig_output, grad},
                          detail::pool_attrs(ksize, strides, padding), name, "MaxPoolGrad")
      .output(0);
}

PSFLOW_DECL Output avg_pool_grad(Output orig_input_shape, Output grad, std::vector<int> ksize,
                                 std::vector<int> strides, std::string_view padding,
                                 std::string_view name) {
  auto attrs = detail::pool_attrs(ksize, strides, padding);
  attrs.emplace("sizes_hint", detail::static_sizes(orig_input_shape, 4));
  return detail::build_op("AvgPoolGrad", {orig_input_shape, grad}, std::move(attrs), name,
                          "AvgPoolGrad")
      .output(0);
}

PSFLOW_DECL Output bias_add(Output value, Output bias, std::string_view name) {
  return detail::build_op("BiasAdd", {value, bias}, {}, name, "BiasAdd").output(0);
}

PSFLOW_DECL Output bias_add_grad(Output out_backprop, std::string_view name) {
  return detail::build_op("BiasAddGrad", {out_backprop}, {}, name, "BiasAddGrad").output(0);
}

}  // namespace psflow::ops

namespace psflow::detail {

// ---- gradients: TF's nn_grad.py rules ------------------------------------------------------
PSFLOW_DECL std::vector<int> int_attr(const Operation& op, std::string_view key) {
  const auto& v = op_attr<std::vector<std::int64_t>>(op, key);
  return std::vector<int>(v.begin(), v.end());
}

PSFLOW_DECL Grads conv2d_grad(const Operation& op, const Grads& g) {
  const auto strides = int_attr(op, "strides");
  const auto& padding = op_attr<std::string>(op, "padding");
  const Output input = op.input(0), filter = op.input(1);
  return {ops::conv2d_backprop_input(sizes_of(input), filter, g[0], strides, padding),
          ops::conv2d_backprop_filter(input, sizes_of(filter), g[0], strides, padding)};
}

// The backprop ops are linear in each of their tensor inputs; their gradients (TF's
// _Conv2DBackpropInputGrad / _Conv2DBackpropFilterGrad) are the other two convolutions.
PSFLOW_DECL Grads conv2d_backprop_input_grad(const Operation& op, const Grads& g) {
  const auto strides = int_attr(op, "strides");
  const auto& padding = op_attr<std::string>(op, "padding");
  const Output filter = op.input(1), out_backprop = op.input(2);
  return {Output{},
          ops::conv2d_backprop_filter(g[0], sizes_of(filter), out_backprop, strides, padding),
          ops::conv2d(g[0], filter, strides, padding)};
}

PSFLOW_DECL Grads conv2d_backprop_filter_grad(const Operation& op, const Grads& g) {
  const auto strides = int_attr(op, "strides");
  const auto& padding = op_attr<std::string>(op, "padding");
  const Output input = op.input(0), out_backprop = op.input(2);
  return {ops::conv2d_backprop_input(sizes_of(input), g[0], out_backprop, strides, padding),
          Output{}, ops::conv2d(input, g[0], strides, padding)};
}

PSFLOW_DECL Grads max_pool_grad_fn(const Operation& op, const Grads& g) {
  return {ops::max_pool_grad(op.input(0), op.output(0), g[0], int_attr(op, "ksize"),
                             int_attr(op, "strides"), op_attr<std::string>(op, "padding"))};
}

PSFLOW_DECL Grads avg_pool_grad_fn(const Operation& op, const Grads& g) {
  return {ops::avg_pool_grad(sizes_of(op.input(0)), g[0], int_attr(op, "ksize"),
                             int_attr(op, "strides"), op_attr<std::string>(op, "padding"))};
}

// AvgPoolGrad is linear in grad: its gradient pools the incoming one (TF's _AvgPoolGradGrad).
PSFLOW_DECL Grads avg_pool_grad_grad(const Operation& op, const Grads& g) {
  return {Output{}, ops::avg_pool(g[0], int_attr(op, "ksize"), int_attr(op, "strides"),
                                  op_attr<std::string>(op, "padding"))};
}

PSFLOW_DECL Grads bias_add_grad_fn(const Operation&, const Grads& g) {
  return {g[0], ops::bias_add_grad(g[0])};
}

// BiasAddGrad sums over all but the last axis; its gradient broadcasts back over them (TF's
// _BiasAddGradGrad). Needs out_backprop's rank when the graph is built.
PSFLOW_DECL Grads bias_add_grad_grad(const Operation& op, const Grads& g) {
  const Output out_backprop = op.input(0);
  const auto rank = out_backprop.shape().rank();
  if (rank < 0)
    throw InvalidArgument("gradient of BiasAddGrad '" + op.name() + "': the rank of '" +
                          out_backprop.name() + "' must be known when the graph is built");
  std::vector<std::int64_t> axes;
  for (std::int64_t a = 0; a + 1 < rank; ++a) axes.push_back(a);
  return {ops::broadcast_to_shape_of(g[0], out_backprop, axes, false)};
}

PSFLOW_REGISTERED_AT_STARTUP const bool conv_ops_registered = [] {
  auto& defs = OpRegistry::global();
  auto& grads = GradientRegistry::global();
  defs.add({.type = "Conv2D", .num_inputs = 2, .infer = infer_conv2d});
  grads.add("Conv2D", conv2d_grad);
  defs.add({.type = "Conv2DBackpropInput", .num_inputs = 3, .infer = infer_conv2d_backprop_input});
  grads.add("Conv2DBackpropInput", conv2d_backprop_input_grad);
  defs.add(
      {.type = "Conv2DBackpropFilter", .num_inputs = 3, .infer = infer_conv2d_backprop_filter});
  grads.add("Conv2DBackpropFilter", conv2d_backprop_filter_grad);
  defs.add({.type = "MaxPool", .num_inputs = 1, .infer = infer_pool});
  grads.add("MaxPool", max_pool_grad_fn);
  defs.add({.type = "MaxPoolGrad", .num_inputs = 3, .infer = infer_max_pool_grad});
  defs.add({.type = "AvgPool", .num_inputs = 1, .infer = infer_pool});
  grads.add("AvgPool", avg_pool_grad_fn);
  defs.add({.type = "AvgPoolGrad", .num_inputs = 2, .infer = infer_avg_pool_grad});
  grads.add("AvgPoolGrad", avg_pool_grad_grad);
  defs.add({.type = "BiasAdd", .num_inputs = 2, .infer = infer_bias_add});
  grads.add("BiasAdd", bias_add_grad_fn);
  defs.add({.type = "BiasAddGrad", .num_inputs = 1, .infer = infer_bias_add_grad});
  grads.add("BiasAddGrad", bias_add_grad_grad);
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
