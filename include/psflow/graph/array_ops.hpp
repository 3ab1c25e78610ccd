// Array ops: constants, placeholders, fills, reshape, identity, concat and slice, the layout ops
// of TF1's array_ops (transpose, split, pad, strided_slice, stack/unstack, tile, expand_dims,
// squeeze, one_hot), with their gradients, and the helpers Shape, Size and Range.
// Kernels: runtime/kernels/array_kernels.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

// An axis in [-rank, rank) as an index in [0, rank); nullopt when out of range.
PSFLOW_DECL std::optional<std::int64_t> wrap_axis(std::int64_t axis, std::int64_t rank);

// True when `perm` holds each of 0 .. perm.size()-1 once.
PSFLOW_DECL bool is_permutation(const std::vector<std::int64_t>& perm);

// "[[1,2],[0,0]]" from Pad's flat paddings attribute.
PSFLOW_DECL std::string paddings_string(const std::vector<std::int64_t>& flat);

// StridedSlice's attributes: python-slice begin/end/strides per leading axis and TF's masks.
struct StridedSliceAttrs {
  std::vector<std::int64_t> begin, end, strides;
  std::int64_t begin_mask = 0, end_mask = 0, shrink_axis_mask = 0;

  static StridedSliceAttrs of(const AttrMap& attrs, std::string_view node) {
    return {attr_or_throw<std::vector<std::int64_t>>(attrs, "begin", node),
            attr_or_throw<std::vector<std::int64_t>>(attrs, "end", node),
            attr_or_throw<std::vector<std::int64_t>>(attrs, "strides", node),
            attr_or_throw<std::int64_t>(attrs, "begin_mask", node),
            attr_or_throw<std::int64_t>(attrs, "end_mask", node),
            attr_or_throw<std::int64_t>(attrs, "shrink_axis_mask", node)};
  }
  AttrMap to_attrs() const {
    return {{"begin", begin},       {"end", end},
            {"strides", strides},   {"begin_mask", begin_mask},
            {"end_mask", end_mask}, {"shrink_axis_mask", shrink_axis_mask}};
  }
};

// One axis of a strided slice: the first index, the step and the number of elements taken
// (-1: unknown until run time); a shrunk axis takes one element and leaves the output.
struct StridedSliceDim {
  std::int64_t begin = 0, stride = 1, size = -1;
  bool shrink = false;
};

// Resolves the slice for an input of `dims` (-1: unknown) as TF's ValidateStridedSliceOp does
// without ellipsis and new-axis masks: axes past the spec are taken whole, indices below 0
// count from the end, out-of-range ends clamp like python. Reports problems through `fail`.
template <class Fail>
std::vector<StridedSliceDim> resolve_strided_slice(const std::vector<std::int64_t>& dims,
                                                   const StridedSliceAttrs& s, Fail fail) {
  const std::size_t n = s.begin.size();
  if (s.end.size() != n || (!s.strides.empty() && s.strides.size() != n))
    fail("begin " + int_list(s.begin) + ", end " + int_list(s.end) + " and strides " +
         int_list(s.strides) + " need one entry each per sliced axis");
  if (n > dims.size())
    fail("begin " + int_list(s.begin) + " has " + std::to_string(n) +
         " entries, more than the input's rank " + std::to_string(dims.size()));
  std::vector<StridedSliceDim> out(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t dim = dims[i];
    auto& o = out[i];
    if (i >= n) {
      o.size = dim;
      continue;
    }
    const std::int64_t stride = s.strides.empty() ? 1 : s.strides[i];
    const auto bit = std::int64_t{1} << i;
    if (stride == 0) fail("strides[" + std::to_string(i) + "] must be non-zero");
    o.stride = stride;
    o.shrink = (s.shrink_axis_mask & bit) != 0;
    if (o.shrink && stride < 0)
      fail("axis " + std::to_string(i) + " is in shrink_axis_mask, so its stride must be positive");
    if (dim < 0) {
      o.size = o.shrink ? 1 : -1;
      continue;
    }
    if (o.shrink) {
      const std::int64_t index = s.begin[i] < 0 ? s.begin[i] + dim : s.begin[i];
      if (index < 0 || index >= dim)
        fail("index " + std::to_string(s.begin[i]) + " of axis " + std::to_string(i) +
             " is out of bounds for its size " + std::to_string(dim));
      o.begin = index;
      o.stride = 1;
      o.size = 1;
      continue;
    }
    const std::int64_t lo = stride > 0 ? 0 : -1, hi = stride > 0 ? dim : dim - 1;
    auto canonical = [&](std::int64_t x, bool masked, bool is_begin) {
      if (masked) return (stride > 0) == is_begin ? lo : hi;
      const std::int64_t fwd = x < 0 ? x + dim : x;
      return fwd < lo ? lo : fwd > hi ? hi : fwd;
    };
    o.begin = canonical(s.begin[i], (s.begin_mask & bit) != 0, true);
    const std::int64_t end = canonical(s.end[i], (s.end_mask & bit) != 0, false);
    const std::int64_t interval = end - o.begin;
    o.size = interval == 0 || (interval < 0) != (stride < 0)
                 ? 0
                 : interval / stride + (interval % stride != 0 ? 1 : 0);
  }
  return out;
}

}  // namespace detail

namespace ops {

// A constant tensor baked into the graph.
PSFLOW_DECL Output constant(Graph& graph, const Tensor& value, std::string_view name = "");

// A rank-0 constant of `like`'s dtype holding `value` (for `x * 0.5` and friends).
PSFLOW_DECL Output scalar_like(Output like, double value, std::string_view name = "");

// A value fed at run time; shape dimensions of -1 are unknown.
PSFLOW_DECL Output placeholder(Graph& graph, DType dtype, std::vector<std::int64_t> shape,
                               std::string_view name = "");

// `input` unless a value is fed in its place (TF's placeholder_with_default), e.g. dropout's
// keep probability: 1 in evaluation and serving, fed lower by training steps. `shape` (-1 for
// unknown dimensions) is what a fed value must fit; `input`'s shape must fit it too.
PSFLOW_DECL Output placeholder_with_default(Output input, std::vector<std::int64_t> shape,
                                            std::string_view name = "");

// A tensor of `shape` whose every element is `value`, computed when run (no big constant
// stored in the graph, so it is cheap to ship to another task).
PSFLOW_DECL Output fill(Graph& graph, DType dtype, const Shape& shape, double value,
                        std::string_view name = "");
PSFLOW_DECL Output zeros(Graph& graph, DType dtype, const Shape& shape, std::string_view name = "");
PSFLOW_DECL Output ones(Graph& graph, DType dtype, const Shape& shape, std::string_view name = "");

PSFLOW_DECL Output identity(Output x, std::string_view name = "");

// x, as a value gradients() does not differentiate through (TF's tf.stop_gradient).
PSFLOW_DECL Output stop_gradient(Output x, std::string_view name = "");

// Same elements, new shape; one dimension may be -1 (inferred).
PSFLOW_DECL Output reshape(Output x, std::vector<std::int64_t> shape, std::string_view name = "");

// The values joined along `axis` (TF's tf.concat); all have one dtype and, outside the axis,
// one shape. One value is returned as it is.
PSFLOW_DECL Output concat(const std::vector<Output>& values, int axis, std::string_view name = "");

// The block of x starting at `begin` with `size` elements per axis (-1: the rest of the axis).
PSFLOW_DECL Output slice(Output x, std::vector<std::int64_t> begin, std::vector<std::int64_t> size,
                         std::string_view name = "");

// The run-time shape of x as an int64 vector (TF's tf.shape with out_type int64).
PSFLOW_DECL Output shape(Output x, std::string_view name = "");
// The number of elements of x as an int64 scalar (TF's tf.size with out_type int64).
PSFLOW_DECL Output size(Output x, std::string_view name = "");
// start, start + delta, ... up to but not including limit (TF's tf.range), for number scalars
// of one dtype; start past limit in delta's direction is an error at run time, as in TF.
PSFLOW_DECL Output range(Output start, Output limit, Output delta, std::string_view name = "");

// x with its axes permuted: output axis i is x's axis perm[i] (TF's tf.transpose); an empty perm
// reverses the axes.
PSFLOW_DECL Output transpose(Output x, std::vector<int> perm = {}, std::string_view name = "");

// TF1's tf.split with an integer: num_split equal pieces of value along axis ("Split").
PSFLOW_DECL std::vector<Output> split(Output value, int num_split, int axis = 0,
                                      std::string_view name = "");

// TF1's tf.split with a list of sizes: pieces of those sizes along axis, one size may be -1 (the
// rest) ("SplitV"). A one-element list must be spelled std::vector<std::int64_t>{n}: a braced
// {n} picks the num_split overload.
PSFLOW_DECL std::vector<Output> split(Output value, std::vector<std::int64_t> size_splits,
                                      int axis = 0, std::string_view name = "");

// x with paddings[i].first zeros before and paddings[i].second after it along axis i (TF1's
// tf.pad in CONSTANT mode with 0).
PSFLOW_DECL Output pad(Output x, std::vector<std::pair<std::int64_t, std::int64_t>> paddings,
                       std::string_view name = "");

// x[begin:end:strides] like a python slice per leading axis (TF's tf.strided_slice): negative
// indices count from the end, ends clamp, strides may be negative (default: 1s); axes past the
// spec are taken whole. Bit i of begin_mask / end_mask ignores begin[i] / end[i] (the whole
// range); bit i of shrink_axis_mask takes the single index begin[i] and drops the axis.
PSFLOW_DECL Output strided_slice(Output x, std::vector<std::int64_t> begin,
                                 std::vector<std::int64_t> end,
                                 std::vector<std::int64_t> strides = {}, int begin_mask = 0,
                                 int end_mask = 0, int shrink_axis_mask = 0,
                                 std::string_view name = "");

// The gradient of strided_slice(like, ...): dy scattered into zeros shaped like `like` at run
// time (TF's StridedSliceGrad, with the shape taken from `like`).
PSFLOW_DECL Output strided_slice_grad(Output like, Output dy, std::vector<std::int64_t> begin,
                                      std::vector<std::int64_t> end,
                                      std::vector<std::int64_t> strides = {}, int begin_mask = 0,
                                      int end_mask = 0, int shrink_axis_mask = 0,
                                      std::string_view name = "");

// The values, of one dtype and shape, stacked along a new axis (TF's tf.stack, "Pack").
PSFLOW_DECL Output stack(const std::vector<Output>& values, int axis = 0,
                         std::string_view name = "");

// value's slices along axis (TF's tf.unstack, "Unpack"); the axis's size must be known when
// the graph is built.
PSFLOW_DECL std::vector<Output> unstack(Output value, int axis = 0, std::string_view name = "");

// x repeated multiples[i] times along axis i (TF's tf.tile).
PSFLOW_DECL Output tile(Output x, std::vector<std::int64_t> multiples, std::string_view name = "");

// x with a new axis of size 1 at `axis`; a negative axis counts from rank + 1 (TF's
// tf.expand_dims).
PSFLOW_DECL Output expand_dims(Output x, int axis, std::string_view name = "");

// x without the given axes, which must have size 1 (empty: every axis of size 1) (TF's
// tf.squeeze).
PSFLOW_DECL Output squeeze(Output x, std::vector<int> axis = {}, std::string_view name = "");

// One-hot rows (TF's tf.one_hot): a new axis of size depth at `axis` (-1: last) holding on_value
// at each index and off_value elsewhere; an index outside [0, depth) gives all off_value.
PSFLOW_DECL Output one_hot(Output indices, std::int64_t depth, double on_value = 1,
                           double off_value = 0, int axis = -1, DType dtype = DType::float32,
                           std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

// Resolves one -1 in a reshape target against a known element count; fails when impossible.
PSFLOW_DECL std::vector<std::int64_t> resolve_reshape(const InferenceContext& ctx,
                                                      std::vector<std::int64_t> target,
                                                      std::optional<std::int64_t> elements) {
  int unknown = -1;
  std::int64_t known_product = 1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (unknown >= 0)
        ctx.fail("at most one dimension of the new shape may be -1, got " + shape_string(target));
      unknown = static_cast<int>(i);
    } else if (target[i] < 0) {
      ctx.fail("new shape " + shape_string(target) + " has a negative dimension");
    } else if (__builtin_mul_overflow(known_product, target[i], &known_product)) {
      ctx.fail("new shape " + shape_string(target) + " has more elements than 64 bits count");
    }
  }
  if (!elements) return target;
  if (unknown >= 0) {
    if (known_product == 0 || *elements % known_product != 0)
      ctx.fail("cannot reshape " + ctx.describe_input(0) + " to " + shape_string(target));
    target[static_cast<std::size_t>(unknown)] = *elements / known_product;
  } else if (known_product != *elements) {
    ctx.fail("cannot reshape " + ctx.describe_input(0) + " (" + std::to_string(*elements) +
             " elements) to " + shape_string(target) + " (" + std::to_string(known_product) +
             " elements)");
  }
  return target;
}

PSFLOW_DECL std::optional<std::int64_t> wrap_axis(std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

PSFLOW_DECL std::vector<OutputSpec> infer_const(const InferenceContext& ctx) {
  const auto& value = ctx.attr<Tensor>("value");
  return {OutputSpec{value.dtype(), PartialShape::of_shape(value.shape())}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_placeholder(const InferenceContext& ctx) {
  const auto& dims = ctx.attr<std::vector<std::int64_t>>("shape");
  for (auto d : dims)
    if (d < -1)
      ctx.fail("placeholder dimension " + std::to_string(d) + " is invalid (use -1 for unknown)");
  return {OutputSpec{ctx.attr<DType>("dtype"), PartialShape::of(dims)}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_placeholder_with_default(const InferenceContext& ctx) {
  const auto& dims = ctx.attr<std::vector<std::int64_t>>("shape");
  const PartialShape& given = ctx.input_shapes[0];
  bool fits = !given.known || given.dims.size() == dims.size();
  for (std::size_t i = 0; fits && given.known && i < dims.size(); ++i) {
    if (dims[i] < -1) ctx.fail("dimension " + std::to_string(dims[i]) + " is invalid (use -1)");
    fits = dims[i] == -1 || given.dims[i] == -1 || given.dims[i] == dims[i];
  }
  if (!fits)
    ctx.fail("the default value's shape " + given.to_string() + " does not fit the shape " +
             shape_string(dims));
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_reshape(const InferenceContext& ctx) {
  auto target = ctx.attr<std::vector<std::int64_t>>("shape");
  auto dims = resolve_reshape(ctx, target, ctx.input_shapes[0].num_elements());
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// ConcatV2(values...) with attr axis (psflow keeps the axis an attribute, TF makes it a tensor).
PSFLOW_DECL std::vector<OutputSpec> infer_concat(const InferenceContext& ctx) {
  if (ctx.input_dtypes.empty()) ctx.fail("needs at least one value to concatenate");
  for (std::size_t i = 1; i < ctx.input_dtypes.size(); ++i) ctx.expect_same_dtype(0, i);
  const auto given_axis = ctx.attr<std::int64_t>("axis");
  std::optional<std::vector<std::int64_t>> dims;
  std::int64_t axis = given_axis;
  for (std::size_t i = 0; i < ctx.input_shapes.size(); ++i) {
    const auto& s = ctx.input_shapes[i];
    if (!s.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
    const auto rank = static_cast<std::int64_t>(s.dims.size());
    const auto wrapped = wrap_axis(given_axis, rank);  // negative: counted from the end, as TF
    if (!wrapped)
      ctx.fail("axis " + std::to_string(given_axis) + " is out of range for " +
               ctx.describe_input(i));
    axis = *wrapped;
    if (!dims) {
      dims = s.dims;
      continue;
    }
    if (dims->size() != s.dims.size())
      ctx.fail("every value must have the same rank, got " + ctx.describe_input(0) + " and " +
               ctx.describe_input(i));
    for (std::size_t d = 0; d < s.dims.size(); ++d) {
      auto& out = (*dims)[d];
      if (static_cast<std::int64_t>(d) == axis) {
        out = (out < 0 || s.dims[d] < 0) ? -1 : out + s.dims[d];
      } else if (out >= 0 && s.dims[d] >= 0 && out != s.dims[d]) {
        ctx.fail("dimension " + std::to_string(d) + " must match outside the axis, got " +
                 ctx.describe_input(0) + " and " + ctx.describe_input(i));
      } else if (out < 0) {
        out = s.dims[d];
      }
    }
  }
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(*dims)}};
}

// Slice(x) with attrs begin and size (-1: to the end of the axis).
PSFLOW_DECL std::vector<OutputSpec> infer_slice(const InferenceContext& ctx) {
  const auto& begin = ctx.attr<std::vector<std::int64_t>>("begin");
  const auto& size = ctx.attr<std::vector<std::int64_t>>("size");
  if (begin.size() != size.size())
    ctx.fail("begin " + shape_string(begin) + " and size " + shape_string(size) +
             " need one entry per axis each");
  const auto& x = ctx.input_shapes[0];
  std::vector<std::int64_t> dims(size.size(), -1);
  for (std::size_t d = 0; d < size.size(); ++d) {
    if (begin[d] < 0 || size[d] < -1)
      ctx.fail("begin " + shape_string(begin) + " must be >= 0 and size " + shape_string(size) +
               " >= -1");
    const std::int64_t extent = x.known && d < x.dims.size() ? x.dims[d] : -1;
    if (extent >= 0 && (begin[d] > extent || (size[d] >= 0 && begin[d] + size[d] > extent)))
      ctx.fail("begin " + shape_string(begin) + " and size " + shape_string(size) +
               " reach outside " + ctx.describe_input(0));
    dims[d] = size[d] >= 0 ? size[d] : (extent >= 0 ? extent - begin[d] : -1);
  }
  if (x.known && x.dims.size() != size.size())
    ctx.fail("begin and size have " + std::to_string(size.size()) + " entries, " +
             ctx.describe_input(0) + " has another rank");
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// Range(start, limit, delta): scalars of one number dtype; a vector of that dtype.
PSFLOW_DECL std::vector<OutputSpec> infer_range(const InferenceContext& ctx) {
  for (std::size_t i = 0; i < 3; ++i) {
    if (!is_numeric(ctx.input_dtypes[i]))
      ctx.fail("start, limit and delta must be numbers, got " + ctx.describe_input(i));
    ctx.expect_same_dtype(0, i);
    if (ctx.input_shapes[i].known && !ctx.input_shapes[i].dims.empty())
      ctx.fail("start, limit and delta must be scalars, got " + ctx.describe_input(i));
  }
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of({-1})}};
}

// "axis 3 is out of range for 'x:0' float32[2,3] (rank 2)".
PSFLOW_DECL std::string axis_out_of_range(const InferenceContext& ctx, std::int64_t axis,
                                          std::size_t input = 0) {
  return "axis " + std::to_string(axis) + " is out of range for " + ctx.describe_input(input) +
         " (rank " + std::to_string(ctx.input_shapes[input].rank()) + ")";
}

PSFLOW_DECL bool is_permutation(const std::vector<std::int64_t>& perm) {
  std::vector<bool> seen(perm.size(), false);
  for (auto p : perm) {
    if (p < 0 || p >= static_cast<std::int64_t>(perm.size()) || seen[static_cast<std::size_t>(p)])
      return false;
    seen[static_cast<std::size_t>(p)] = true;
  }
  return true;
}

// Transpose(x) with attr perm (empty: the axes reversed, as tf.transpose).
PSFLOW_DECL std::vector<OutputSpec> infer_transpose(const InferenceContext& ctx) {
  const auto& perm = ctx.attr<std::vector<std::int64_t>>("perm");
  const auto& x = ctx.input_shapes[0];
  if (!is_permutation(perm))
    ctx.fail("perm " + int_list(perm) + " is not a permutation of 0.." +
             std::to_string(static_cast<std::int64_t>(perm.size()) - 1));
  if (!x.known)
    return {OutputSpec{ctx.input_dtypes[0],
                       perm.empty()
                           ? PartialShape::unknown()
                           : PartialShape::of(std::vector<std::int64_t>(perm.size(), -1))}};
  if (!perm.empty() && perm.size() != x.dims.size())
    ctx.fail("perm " + int_list(perm) + " has " + std::to_string(perm.size()) + " entries, " +
             ctx.describe_input(0) + " has rank " + std::to_string(x.dims.size()) +
             ": perm must be a permutation of its axes");
  std::vector<std::int64_t> dims(x.dims.rbegin(), x.dims.rend());
  for (std::size_t i = 0; i < perm.size(); ++i) dims[i] = x.dims[static_cast<std::size_t>(perm[i])];
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// Split(x) with attrs num_split and axis: num_split equal blocks along the axis.
PSFLOW_DECL std::vector<OutputSpec> infer_split(const InferenceContext& ctx) {
  const auto num = ctx.attr<std::int64_t>("num_split");
  const auto axis = ctx.attr<std::int64_t>("axis");
  if (num < 1) ctx.fail("num_split must be at least 1, got " + std::to_string(num));
  const auto& x = ctx.input_shapes[0];
  std::vector<OutputSpec> out(static_cast<std::size_t>(num),
                              OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()});
  if (!x.known) return out;
  const auto a = wrap_axis(axis, x.rank());
  if (!a) ctx.fail(axis_out_of_range(ctx, axis));
  auto dims = x.dims;
  auto& d = dims[static_cast<std::size_t>(*a)];
  if (d >= 0) {
    if (d % num != 0)
      ctx.fail("num_split " + std::to_string(num) + " does not evenly divide dimension " +
               std::to_string(*a) + " (size " + std::to_string(d) + ") of " +
               ctx.describe_input(0));
    d /= num;
  }
  for (auto& spec : out) spec.shape = PartialShape::of(dims);
  return out;
}

// SplitV(x) with attrs size_splits (one may be -1: the rest) and axis.
PSFLOW_DECL std::vector<OutputSpec> infer_split_v(const InferenceContext& ctx) {
  auto sizes = ctx.attr<std::vector<std::int64_t>>("size_splits");
  const auto axis = ctx.attr<std::int64_t>("axis");
  if (sizes.empty()) ctx.fail("size_splits must have at least one entry");
  int unknown = -1;
  std::int64_t known_sum = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (unknown >= 0)
        ctx.fail("at most one entry of size_splits " + int_list(sizes) + " may be -1");
      unknown = static_cast<int>(i);
    } else if (sizes[i] < 0) {
      ctx.fail("size_splits " + int_list(sizes) + " has a negative size (only one -1 is allowed)");
    } else {
      known_sum += sizes[i];
    }
  }
  const auto& x = ctx.input_shapes[0];
  std::vector<OutputSpec> out(sizes.size(),
                              OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()});
  if (!x.known) return out;
  const auto a = wrap_axis(axis, x.rank());
  if (!a) ctx.fail(axis_out_of_range(ctx, axis));
  const auto dim = x.dims[static_cast<std::size_t>(*a)];
  if (dim >= 0) {
    if (unknown >= 0 && known_sum > dim)
      ctx.fail("size_splits " + int_list(sizes) + " add up to more than dimension " +
               std::to_string(*a) + " (size " + std::to_string(dim) + ") of " +
               ctx.describe_input(0));
    if (unknown < 0 && known_sum != dim)
      ctx.fail("size_splits " + int_list(sizes) + " add up to " + std::to_string(known_sum) +
               ", dimension " + std::to_string(*a) + " of " + ctx.describe_input(0) + " has size " +
               std::to_string(dim));
    if (unknown >= 0) sizes[static_cast<std::size_t>(unknown)] = dim - known_sum;
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto dims = x.dims;
    dims[static_cast<std::size_t>(*a)] = sizes[i];
    out[i].shape = PartialShape::of(dims);
  }
  return out;
}

PSFLOW_DECL std::string paddings_string(const std::vector<std::int64_t>& flat) {
  std::string out = "[";
  for (std::size_t i = 0; i + 1 < flat.size(); i += 2)
    out += (i ? ",[" : "[") + std::to_string(flat[i]) + "," + std::to_string(flat[i + 1]) + "]";
  return out + "]";
}

// Pad(x) with attr paddings: (before, after) per axis, flattened.
PSFLOW_DECL std::vector<OutputSpec> infer_pad(const InferenceContext& ctx) {
  const auto& p = ctx.attr<std::vector<std::int64_t>>("paddings");
  if (p.size() % 2 != 0) ctx.fail("paddings must hold one (before, after) pair per axis");
  for (auto v : p)
    if (v < 0) ctx.fail("paddings " + paddings_string(p) + " must be non-negative");
  const std::size_t rank = p.size() / 2;
  const auto& x = ctx.input_shapes[0];
  if (x.known && x.dims.size() != rank)
    ctx.fail("paddings " + paddings_string(p) + " has " + std::to_string(rank) + " pairs, " +
             ctx.describe_input(0) + " has rank " + std::to_string(x.dims.size()) +
             ": give one (before, after) pair per axis");
  std::vector<std::int64_t> dims(rank, -1);
  for (std::size_t d = 0; d < rank; ++d)
    if (x.known && x.dims[d] >= 0) dims[d] = x.dims[d] + p[2 * d] + p[2 * d + 1];
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// The output dims of a resolved strided slice (shrunk axes left out).
PSFLOW_DECL std::vector<std::int64_t> strided_slice_output_dims(
    const std::vector<StridedSliceDim>& resolved) {
  std::vector<std::int64_t> dims;
  for (const auto& d : resolved)
    if (!d.shrink) dims.push_back(d.size);
  return dims;
}

PSFLOW_DECL std::vector<OutputSpec> infer_strided_slice(const InferenceContext& ctx) {
  const auto attrs = StridedSliceAttrs::of(ctx.attrs, ctx.node_name);
  const auto& x = ctx.input_shapes[0];
  auto fail = [&](const std::string& message) { ctx.fail(message); };
  if (!x.known) {  // check what can be checked, as if the rank were the spec's length
    resolve_strided_slice(std::vector<std::int64_t>(attrs.begin.size(), -1), attrs, fail);
    return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  }
  const auto resolved = resolve_strided_slice(x.dims, attrs, fail);
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(strided_slice_output_dims(resolved))}};
}

// StridedSliceGrad(like, dy): dy scattered into zeros shaped like `like` (the sliced input).
PSFLOW_DECL std::vector<OutputSpec> infer_strided_slice_grad(const InferenceContext& ctx) {
  ctx.expect_same_dtype(0, 1);
  const auto attrs = StridedSliceAttrs::of(ctx.attrs, ctx.node_name);
  const auto& like = ctx.input_shapes[0];
  if (like.known) {
    const auto resolved =
        resolve_strided_slice(like.dims, attrs, [&](const std::string& m) { ctx.fail(m); });
    if (!shapes_compatible(PartialShape::of(strided_slice_output_dims(resolved)),
                           ctx.input_shapes[1]))
      ctx.fail(ctx.describe_input(1) + " is not shaped like the slice of " + ctx.describe_input(0));
  }
  return {OutputSpec{ctx.input_dtypes[1], like}};
}

// Pack(values...) with attr axis: the values, of one shape, stacked along a new axis.
PSFLOW_DECL std::vector<OutputSpec> infer_pack(const InferenceContext& ctx) {
  if (ctx.input_dtypes.empty()) ctx.fail("needs at least one value to stack");
  PartialShape shape = ctx.input_shapes[0];
  for (std::size_t i = 1; i < ctx.input_dtypes.size(); ++i) {
    ctx.expect_same_dtype(0, i);
    if (!shapes_compatible(shape, ctx.input_shapes[i]))
      ctx.fail("every value must have one shape, got " + ctx.describe_input(0) + " and " +
               ctx.describe_input(i));
    shape = merge_shapes(shape, ctx.input_shapes[i]);
  }
  if (!shape.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  const auto axis = ctx.attr<std::int64_t>("axis");
  const auto rank = shape.rank();
  if (axis < -(rank + 1) || axis > rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range [" + std::to_string(-(rank + 1)) +
             ", " + std::to_string(rank) + "] for stacking values like " + ctx.describe_input(0));
  auto dims = shape.dims;
  dims.insert(dims.begin() + (axis < 0 ? axis + rank + 1 : axis),
              static_cast<std::int64_t>(ctx.input_dtypes.size()));
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// Unpack(x) with attrs num and axis: the num slices of x along the axis.
PSFLOW_DECL std::vector<OutputSpec> infer_unpack(const InferenceContext& ctx) {
  const auto num = ctx.attr<std::int64_t>("num");
  const auto axis = ctx.attr<std::int64_t>("axis");
  if (num < 0) ctx.fail("num must be non-negative, got " + std::to_string(num));
  const auto& x = ctx.input_shapes[0];
  std::vector<OutputSpec> out(static_cast<std::size_t>(num),
                              OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()});
  if (!x.known) return out;
  const auto a = wrap_axis(axis, x.rank());
  if (!a) ctx.fail(axis_out_of_range(ctx, axis));
  auto dims = x.dims;
  const auto d = dims[static_cast<std::size_t>(*a)];
  if (d >= 0 && d != num)
    ctx.fail("axis " + std::to_string(*a) + " of " + ctx.describe_input(0) + " has size " +
             std::to_string(d) + ", not num " + std::to_string(num));
  dims.erase(dims.begin() + *a);
  for (auto& spec : out) spec.shape = PartialShape::of(dims);
  return out;
}

// Tile(x) with attr multiples: x repeated multiples[i] times along axis i.
PSFLOW_DECL std::vector<OutputSpec> infer_tile(const InferenceContext& ctx) {
  const auto& m = ctx.attr<std::vector<std::int64_t>>("multiples");
  for (auto v : m)
    if (v < 0) ctx.fail("multiples " + int_list(m) + " must be non-negative");
  const auto& x = ctx.input_shapes[0];
  if (x.known && x.dims.size() != m.size())
    ctx.fail("multiples " + int_list(m) + " needs one entry per axis of " + ctx.describe_input(0));
  std::vector<std::int64_t> dims(m.size(), -1);
  for (std::size_t d = 0; d < m.size(); ++d)
    if (m[d] == 0)
      dims[d] = 0;
    else if (x.known && x.dims[d] >= 0)
      dims[d] = x.dims[d] * m[d];
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// ExpandDims(x) with attr axis in [-rank-1, rank]: a new axis of size 1.
PSFLOW_DECL std::vector<OutputSpec> infer_expand_dims(const InferenceContext& ctx) {
  const auto axis = ctx.attr<std::int64_t>("axis");
  const auto& x = ctx.input_shapes[0];
  if (!x.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  const auto rank = x.rank();
  if (axis < -(rank + 1) || axis > rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range [" + std::to_string(-(rank + 1)) +
             ", " + std::to_string(rank) + "] for " + ctx.describe_input(0));
  auto dims = x.dims;
  dims.insert(dims.begin() + (axis < 0 ? axis + rank + 1 : axis), 1);
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// Squeeze(x) with attr squeeze_dims (empty: every axis of size 1).
PSFLOW_DECL std::vector<OutputSpec> infer_squeeze(const InferenceContext& ctx) {
  const auto& axes = ctx.attr<std::vector<std::int64_t>>("squeeze_dims");
  const auto& x = ctx.input_shapes[0];
  if (!x.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  std::vector<bool> squeezed(x.dims.size(), false);
  if (axes.empty()) {
    for (std::size_t d = 0; d < x.dims.size(); ++d) {
      if (x.dims[d] < 0)  // may or may not be 1: the rank is known only at run time
        return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
      squeezed[d] = x.dims[d] == 1;
    }
  }
  for (auto axis : axes) {
    const auto a = wrap_axis(axis, x.rank());
    if (!a) ctx.fail(axis_out_of_range(ctx, axis));
    const auto d = x.dims[static_cast<std::size_t>(*a)];
    if (d >= 0 && d != 1)
      ctx.fail("cannot squeeze axis " + std::to_string(axis) + " of " + ctx.describe_input(0) +
               ": its size is " + std::to_string(d) + ", not 1");
    squeezed[static_cast<std::size_t>(*a)] = true;
  }
  std::vector<std::int64_t> dims;
  for (std::size_t d = 0; d < x.dims.size(); ++d)
    if (!squeezed[d]) dims.push_back(x.dims[d]);
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// OneHot(indices) with attrs depth, on_value, off_value, axis (-1: last) and dtype.
PSFLOW_DECL std::vector<OutputSpec> infer_one_hot(const InferenceContext& ctx) {
  if (ctx.input_dtypes[0] != DType::int32 && ctx.input_dtypes[0] != DType::int64)
    ctx.fail("indices must be int32 or int64, got " + ctx.describe_input(0));
  const auto depth = ctx.attr<std::int64_t>("depth");
  const auto axis = ctx.attr<std::int64_t>("axis");
  const auto dtype = ctx.attr<DType>("dtype");
  if (depth < 0) ctx.fail("depth must be non-negative, got " + std::to_string(depth));
  const auto& x = ctx.input_shapes[0];
  if (axis < -1 || (x.known && axis > x.rank()))
    ctx.fail("axis " + std::to_string(axis) + " must be -1 or in [0, " +
             (x.known ? std::to_string(x.rank()) : std::string("rank")) + "] for " +
             ctx.describe_input(0));
  if (!x.known) return {OutputSpec{dtype, PartialShape::unknown()}};
  auto dims = x.dims;
  dims.insert(axis < 0 ? dims.end() : dims.begin() + axis, depth);
  return {OutputSpec{dtype, PartialShape::of(dims)}};
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output constant(Graph& graph, const Tensor& value, std::string_view name) {
  if (value.empty()) throw InvalidArgument("ops::constant: the value is an empty Tensor");
  return detail::build_source_op(graph, "Const", {{"value", value}}, name, "Const").output(0);
}

PSFLOW_DECL Output scalar_like(Output like, double value, std::string_view name) {
  Tensor t = visit_numeric_dtype(like.dtype(), "scalar constant", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Tensor(static_cast<T>(value));
  });
  return constant(like.graph(), t, name);
}

PSFLOW_DECL Output placeholder(Graph& graph, DType dtype, std::vector<std::int64_t> shape,
                               std::string_view name) {
  return detail::build_source_op(graph, "Placeholder",
                                 {{"dtype", dtype}, {"shape", std::move(shape)}}, name,
                                 "Placeholder")
      .output(0);
}

PSFLOW_DECL Output placeholder_with_default(Output input, std::vector<std::int64_t> shape,
                                            std::string_view name) {
  return detail::build_op("PlaceholderWithDefault", {input}, {{"shape", std::move(shape)}}, name,
                          "PlaceholderWithDefault")
      .output(0);
}

PSFLOW_DECL Output fill(Graph& graph, DType dtype, const Shape& shape, double value,
                        std::string_view name) {
  return detail::build_source_op(graph, "Fill",
                                 {{"dtype", dtype},
                                  {"shape", std::vector<std::int64_t>(shape.begin(), shape.end())},
                                  {"value", value}},
                                 name, "Fill")
      .output(0);
}

PSFLOW_DECL Output zeros(Graph& graph, DType dtype, const Shape& shape, std::string_view name) {
  return fill(graph, dtype, shape, 0.0, name.empty() ? "zeros" : name);
}

PSFLOW_DECL Output ones(Graph& graph, DType dtype, const Shape& shape, std::string_view name) {
  return fill(graph, dtype, shape, 1.0, name.empty() ? "ones" : name);
}

PSFLOW_DECL Output identity(Output x, std::string_view name) {
  return detail::build_op("Identity", {x}, {}, name, "Identity").output(0);
}

PSFLOW_DECL Output stop_gradient(Output x, std::string_view name) {
  return detail::build_op("StopGradient", {x}, {}, name, "StopGradient").output(0);
}

PSFLOW_DECL Output reshape(Output x, std::vector<std::int64_t> shape, std::string_view name) {
  return detail::build_op("Reshape", {x}, {{"shape", std::move(shape)}}, name, "Reshape").output(0);
}

PSFLOW_DECL Output concat(const std::vector<Output>& values, int axis, std::string_view name) {
  if (values.empty()) throw InvalidArgument("ops::concat: no values given");
  if (values.size() == 1) return values.front();
  return detail::build_op("ConcatV2", values, {{"axis", std::int64_t{axis}}}, name, "concat")
      .output(0);
}

PSFLOW_DECL Output slice(Output x, std::vector<std::int64_t> begin, std::vector<std::int64_t> size,
                         std::string_view name) {
  return detail::build_op("Slice", {x}, {{"begin", std::move(begin)}, {"size", std::move(size)}},
                          name, "Slice")
      .output(0);
}

PSFLOW_DECL Output shape(Output x, std::string_view name) {
  return detail::build_op("Shape", {x}, {}, name, "Shape").output(0);
}

PSFLOW_DECL Output size(Output x, std::string_view name) {
  return detail::build_op("Size", {x}, {}, name, "Size").output(0);
}

PSFLOW_DECL Output range(Output start, Output limit, Output delta, std::string_view name) {
  return detail::build_op("Range", {start, limit, delta}, {}, name, "range").output(0);
}

PSFLOW_DECL Output transpose(Output x, std::vector<int> perm, std::string_view name) {
  return detail::build_op("Transpose", {x}, {{"perm", detail::to_dims(perm)}}, name, "transpose")
      .output(0);
}

PSFLOW_DECL std::vector<Output> split(Output value, int num_split, int axis,
                                      std::string_view name) {
  auto op = detail::build_op("Split", {value},
                             {{"num_split", std::int64_t{num_split}}, {"axis", std::int64_t{axis}}},
                             name, "split");
  std::vector<Output> out;
  for (int i = 0; i < op.num_outputs(); ++i) out.push_back(op.output(i));
  return out;
}

PSFLOW_DECL std::vector<Output> split(Output value, std::vector<std::int64_t> size_splits, int axis,
                                      std::string_view name) {
  auto op = detail::build_op(
      "SplitV", {value}, {{"size_splits", std::move(size_splits)}, {"axis", std::int64_t{axis}}},
      name, "split");
  std::vector<Output> out;
  for (int i = 0; i < op.num_outputs(); ++i) out.push_back(op.output(i));
  return out;
}

PSFLOW_DECL Output pad(Output x, std::vector<std::pair<std::int64_t, std::int64_t>> paddings,
                       std::string_view name) {
  std::vector<std::int64_t> flat;
  for (const auto& [before, after] : paddings) {
    flat.push_back(before);
    flat.push_back(after);
  }
  return detail::build_op("Pad", {x}, {{"paddings", std::move(flat)}}, name, "Pad").output(0);
}

PSFLOW_DECL Output strided_slice(Output x, std::vector<std::int64_t> begin,
                                 std::vector<std::int64_t> end, std::vector<std::int64_t> strides,
                                 int begin_mask, int end_mask, int shrink_axis_mask,
                                 std::string_view name) {
  const detail::StridedSliceAttrs attrs{std::move(begin), std::move(end), std::move(strides),
                                        begin_mask,       end_mask,       shrink_axis_mask};
  return detail::build_op("StridedSlice", {x}, attrs.to_attrs(), name, "StridedSlice").output(0);
}

PSFLOW_DECL Output strided_slice_grad(Output like, Output dy, std::vector<std::int64_t> begin,
                                      std::vector<std::int64_t> end,
                                      std::vector<std::int64_t> strides, int begin_mask,
                                      int end_mask, int shrink_axis_mask, std::string_view name) {
  const detail::StridedSliceAttrs attrs{std::move(begin), std::move(end), std::move(strides),
                                        begin_mask,       end_mask,       shrink_axis_mask};
  return detail::build_op("StridedSliceGrad", {like, dy}, attrs.to_attrs(), name,
                          "StridedSliceGrad")
      .output(0);
}

PSFLOW_DECL Output stack(const std::vector<Output>& values, int axis, std::string_view name) {
  if (values.empty()) throw InvalidArgument("ops::stack (Pack): no values given");
  return detail::build_op("Pack", values, {{"axis", std::int64_t{axis}}}, name, "stack").output(0);
}

PSFLOW_DECL std::vector<Output> unstack(Output value, int axis, std::string_view name) {
  if (!value.valid()) throw InvalidArgument("ops::unstack (Unpack): value is an empty Output");
  const auto shape = value.shape();
  std::int64_t num = -1;
  if (shape.known) {
    const auto a = detail::wrap_axis(axis, shape.rank());
    if (!a)
      throw InvalidArgument("ops::unstack (Unpack): axis " + std::to_string(axis) +
                            " is out of range for '" + value.name() + "' " + shape.to_string());
    num = shape.dims[static_cast<std::size_t>(*a)];
  }
  if (num < 0)
    throw InvalidArgument("ops::unstack (Unpack): the size of axis " + std::to_string(axis) +
                          " of '" + value.name() + "' " + shape.to_string() +
                          " is unknown; unstack needs it known when the graph is built");
  auto op = detail::build_op("Unpack", {value}, {{"num", num}, {"axis", std::int64_t{axis}}}, name,
                             "unstack");
  std::vector<Output> out;
  for (int i = 0; i < op.num_outputs(); ++i) out.push_back(op.output(i));
  return out;
}

PSFLOW_DECL Output tile(Output x, std::vector<std::int64_t> multiples, std::string_view name) {
  return detail::build_op("Tile", {x}, {{"multiples", std::move(multiples)}}, name, "Tile")
      .output(0);
}

PSFLOW_DECL Output expand_dims(Output x, int axis, std::string_view name) {
  return detail::build_op("ExpandDims", {x}, {{"axis", std::int64_t{axis}}}, name, "ExpandDims")
      .output(0);
}

PSFLOW_DECL Output squeeze(Output x, std::vector<int> axis, std::string_view name) {
  return detail::build_op("Squeeze", {x}, {{"squeeze_dims", detail::to_dims(axis)}}, name,
                          "Squeeze")
      .output(0);
}

PSFLOW_DECL Output one_hot(Output indices, std::int64_t depth, double on_value, double off_value,
                           int axis, DType dtype, std::string_view name) {
  return detail::build_op("OneHot", {indices},
                          {{"depth", depth},
                           {"on_value", on_value},
                           {"off_value", off_value},
                           {"axis", std::int64_t{axis}},
                           {"dtype", dtype}},
                          name, "one_hot")
      .output(0);
}

}  // namespace psflow::ops

namespace psflow::detail {

PSFLOW_DECL Grads reshape_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  if (x.shape().fully_defined()) return {ops::reshape(g[0], x.shape().dims)};
  return {ops::reshape_to_shape_of(g[0], x)};  // unknown dims: take x's shape at run time
}

PSFLOW_DECL Grads identity_grad(const Operation&, const Grads& g) { return {g[0]}; }

// Each value gets its block of the gradient; needs every value's size along the axis.
PSFLOW_DECL Grads concat_grad(const Operation& op, const Grads& g) {
  const auto given_axis = op_attr<std::int64_t>(op, "axis");
  Grads out;
  std::int64_t offset = 0;
  for (int i = 0; i < op.num_inputs(); ++i) {
    const auto shape = op.input(i).shape();
    const auto wrapped = shape.known ? wrap_axis(given_axis, shape.rank()) : std::nullopt;
    const auto axis = static_cast<std::size_t>(wrapped.value_or(0));
    if (!wrapped || shape.dims[axis] < 0)
      throw InvalidArgument("gradient of ConcatV2 '" + op.name() + "': the size of value '" +
                            op.input(i).name() + "' along axis " + std::to_string(given_axis) +
                            " must be known when the graph is built");
    std::vector<std::int64_t> begin(shape.dims.size(), 0), size(shape.dims.size(), -1);
    begin[axis] = offset;
    size[axis] = shape.dims[axis];
    out.push_back(ops::slice(g[0], begin, size));
    offset += shape.dims[axis];
  }
  return out;
}

// TF's _SliceGrad: the gradient padded back to x's shape with zeros; when sizes are unknown
// when the graph is built, scattered into zeros shaped like x at run time.
PSFLOW_DECL Grads slice_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  const auto& begin = op_attr<std::vector<std::int64_t>>(op, "begin");
  const auto& size = op_attr<std::vector<std::int64_t>>(op, "size");
  const auto xs = x.shape(), ys = op.output(0).shape();
  if (xs.fully_defined() && ys.fully_defined()) {
    std::vector<std::pair<std::int64_t, std::int64_t>> paddings;
    for (std::size_t d = 0; d < begin.size(); ++d)
      paddings.emplace_back(begin[d], xs.dims[d] - begin[d] - ys.dims[d]);
    return {ops::pad(g[0], paddings)};
  }
  std::vector<std::int64_t> end(begin.size(), 0);
  int end_mask = 0;
  for (std::size_t d = 0; d < begin.size(); ++d) {
    if (size[d] < 0)
      end_mask |= 1 << d;
    else
      end[d] = begin[d] + size[d];
  }
  return {ops::strided_slice_grad(x, g[0], begin, end, {}, 0, end_mask, 0)};
}

// TF's _PadGrad: the block of the gradient where x was.
PSFLOW_DECL Grads pad_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  const auto& p = op_attr<std::vector<std::int64_t>>(op, "paddings");
  const std::size_t rank = p.size() / 2;
  std::vector<std::int64_t> begin(rank), end(rank, 0);
  for (std::size_t d = 0; d < rank; ++d) begin[d] = p[2 * d];
  if (x.shape().fully_defined()) return {ops::slice(g[0], begin, x.shape().dims)};
  int end_mask = 0;  // unknown sizes: stop `after` elements before the end of each axis
  for (std::size_t d = 0; d < rank; ++d) {
    if (p[2 * d + 1] == 0)
      end_mask |= 1 << d;
    else
      end[d] = -p[2 * d + 1];
  }
  return {ops::strided_slice(g[0], begin, end, {}, 0, end_mask, 0)};
}

PSFLOW_DECL Grads strided_slice_grad(const Operation& op, const Grads& g) {
  const auto a = StridedSliceAttrs::of(op.attrs(), op.name());
  return {ops::strided_slice_grad(op.input(0), g[0], a.begin, a.end, a.strides,
                                  static_cast<int>(a.begin_mask), static_cast<int>(a.end_mask),
                                  static_cast<int>(a.shrink_axis_mask))};
}

// TF's _StridedSliceGradGrad: the slice of the incoming gradient; `like` gets none.
PSFLOW_DECL Grads strided_slice_grad_grad(const Operation& op, const Grads& g) {
  const auto a = StridedSliceAttrs::of(op.attrs(), op.name());
  return {Output{},
          ops::strided_slice(g[0], a.begin, a.end, a.strides, static_cast<int>(a.begin_mask),
                             static_cast<int>(a.end_mask), static_cast<int>(a.shrink_axis_mask))};
}

// Transposed back by the inverse permutation (an empty perm is its own inverse).
PSFLOW_DECL Grads transpose_grad(const Operation& op, const Grads& g) {
  const auto& perm = op_attr<std::vector<std::int64_t>>(op, "perm");
  std::vector<int> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  return {ops::transpose(g[0], inverse)};
}

// The gradients of every output of `op`, zeros for those that get none.
PSFLOW_DECL std::vector<Output> grads_or_zeros(const Operation& op, const Grads& g) {
  std::vector<Output> out;
  for (int i = 0; i < op.num_outputs(); ++i)
    out.push_back(g[static_cast<std::size_t>(i)].valid() ? g[static_cast<std::size_t>(i)]
                                                         : ops::zeros_like(op.output(i)));
  return out;
}

// TF's _SplitGrad / _SplitVGrad: the pieces' gradients joined back along the axis.
PSFLOW_DECL Grads split_grad(const Operation& op, const Grads& g) {
  return {ops::concat(grads_or_zeros(op, g), static_cast<int>(op_attr<std::int64_t>(op, "axis")))};
}

// Unpack with a given number of outputs (Pack's gradient knows it from its inputs).
PSFLOW_DECL std::vector<Output> unstack_n(Output value, std::int64_t num, std::int64_t axis) {
  auto op = build_op("Unpack", {value}, {{"num", num}, {"axis", axis}}, "", "unstack");
  std::vector<Output> out;
  for (int i = 0; i < op.num_outputs(); ++i) out.push_back(op.output(i));
  return out;
}

PSFLOW_DECL Grads pack_grad(const Operation& op, const Grads& g) {
  return unstack_n(g[0], op.num_inputs(), op_attr<std::int64_t>(op, "axis"));
}

PSFLOW_DECL Grads unpack_grad(const Operation& op, const Grads& g) {
  return {ops::stack(grads_or_zeros(op, g), static_cast<int>(op_attr<std::int64_t>(op, "axis")))};
}

// TF's _TileGrad: the gradient reshaped to [m0, d0, m1, d1, ...] and summed over the m axes.
// Needs x's shape when the graph is built, except for at most one dimension.
PSFLOW_DECL Grads tile_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  const auto& m = op_attr<std::vector<std::int64_t>>(op, "multiples");
  if (std::all_of(m.begin(), m.end(), [](auto v) { return v == 1; })) return {g[0]};
  if (std::any_of(m.begin(), m.end(), [](auto v) { return v == 0; }))
    return {ops::zeros_like(x)};  // an empty output: x has no effect on it
  const auto shape = x.shape();
  std::vector<std::int64_t> split_shape, axes;
  int unknown = 0;
  for (std::size_t d = 0; d < m.size(); ++d) {
    const std::int64_t dim = shape.known ? shape.dims[d] : -1;
    unknown += dim < 0;
    axes.push_back(static_cast<std::int64_t>(split_shape.size()));
    split_shape.push_back(m[d]);
    split_shape.push_back(dim);
  }
  if (unknown > 1)
    throw InvalidArgument("gradient of Tile '" + op.name() + "': the shape of '" + x.name() + "' " +
                          shape.to_string() +
                          " must be known when the graph is built, except for one dimension");
  const Output blocks = ops::reshape(g[0], split_shape);
  return {build_op("Sum", {blocks}, {{"axes", axes}, {"keep_dims", false}}, "", "Sum").output(0)};
}

PSFLOW_REGISTERED_AT_STARTUP const bool array_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "Const", .infer = infer_const});
  defs.add({.type = "Placeholder", .infer = infer_placeholder});
  defs.add({.type = "Fill", .infer = fill_like_shape});
  defs.add({.type = "Identity", .num_inputs = 1, .infer = same_as_input});
  defs.add({.type = "StopGradient", .num_inputs = 1, .infer = same_as_input});
  defs.add(
      {.type = "PlaceholderWithDefault", .num_inputs = 1, .infer = infer_placeholder_with_default});
  defs.add({.type = "Reshape", .num_inputs = 1, .infer = infer_reshape});
  defs.add({.type = "ConcatV2", .num_inputs = -1, .infer = infer_concat});
  defs.add({.type = "Slice", .num_inputs = 1, .infer = infer_slice});
  defs.add({.type = "Shape", .num_inputs = 1, .infer = [](const InferenceContext& ctx) {
              const auto& x = ctx.input_shapes[0];
              return std::vector<OutputSpec>{
                  {DType::int64, PartialShape::of({x.known ? x.rank() : -1})}};
            }});
  defs.add({.type = "Size", .num_inputs = 1, .infer = [](const InferenceContext&) {
              return std::vector<OutputSpec>{{DType::int64, PartialShape::scalar()}};
            }});
  defs.add({.type = "Range", .num_inputs = 3, .infer = infer_range});
  defs.add({.type = "Transpose", .num_inputs = 1, .infer = infer_transpose});
  defs.add({.type = "Split", .num_inputs = 1, .infer = infer_split});
  defs.add({.type = "SplitV", .num_inputs = 1, .infer = infer_split_v});
  defs.add({.type = "Pad", .num_inputs = 1, .infer = infer_pad});
  defs.add({.type = "StridedSlice", .num_inputs = 1, .infer = infer_strided_slice});
  defs.add({.type = "StridedSliceGrad", .num_inputs = 2, .infer = infer_strided_slice_grad});
  defs.add({.type = "Pack", .num_inputs = -1, .infer = infer_pack});
  defs.add({.type = "Unpack", .num_inputs = 1, .infer = infer_unpack});
  defs.add({.type = "Tile", .num_inputs = 1, .infer = infer_tile});
  defs.add({.type = "ExpandDims", .num_inputs = 1, .infer = infer_expand_dims});
  defs.add({.type = "Squeeze", .num_inputs = 1, .infer = infer_squeeze});
  defs.add({.type = "OneHot", .num_inputs = 1, .infer = infer_one_hot});
  auto& grads = GradientRegistry::global();
  grads.add("ConcatV2", concat_grad);
  grads.add("Identity", identity_grad);
  grads.add("PlaceholderWithDefault", identity_grad);
  grads.add("Reshape", reshape_grad);
  grads.add("Slice", slice_grad);
  grads.add("Pad", pad_grad);
  grads.add("StridedSlice", strided_slice_grad);
  grads.add("StridedSliceGrad", strided_slice_grad_grad);
  grads.add("Transpose", transpose_grad);
  grads.add("Split", split_grad);
  grads.add("SplitV", split_grad);
  grads.add("Pack", pack_grad);
  grads.add("Unpack", unpack_grad);
  grads.add("Tile", tile_grad);
  grads.add("ExpandDims", reshape_grad);  // both only change the shape: reshape back
  grads.add("Squeeze", reshape_grad);
  // Shape, Size and Range give sizes and positions, which do not change with the values;
  // OneHot's output does not depend smoothly on its indices (TF: not differentiable).
  grads.add_not_differentiable(
      {"Const", "Placeholder", "Fill", "Shape", "Size", "Range", "OneHot", "StopGradient"});
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
