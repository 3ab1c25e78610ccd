// Array ops: constants, placeholders, fills, reshape, identity, concat and slice, with their
// gradients (Slice has none yet), and the int64 helpers Shape, Size and Range.
// Kernels: runtime/kernels/array_kernels.hpp.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

// Resolves one -1 in a reshape target against a known element count; fails when impossible.
inline std::vector<std::int64_t> resolve_reshape(const InferenceContext& ctx,
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
    } else {
      known_product *= target[i];
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

inline std::vector<OutputSpec> infer_const(const InferenceContext& ctx) {
  const auto& value = ctx.attr<Tensor>("value");
  return {OutputSpec{value.dtype(), PartialShape::of_shape(value.shape())}};
}

inline std::vector<OutputSpec> infer_placeholder(const InferenceContext& ctx) {
  const auto& dims = ctx.attr<std::vector<std::int64_t>>("shape");
  for (auto d : dims)
    if (d < -1)
      ctx.fail("placeholder dimension " + std::to_string(d) + " is invalid (use -1 for unknown)");
  return {OutputSpec{ctx.attr<DType>("dtype"), PartialShape::of(dims)}};
}

inline std::vector<OutputSpec> infer_reshape(const InferenceContext& ctx) {
  auto target = ctx.attr<std::vector<std::int64_t>>("shape");
  auto dims = resolve_reshape(ctx, target, ctx.input_shapes[0].num_elements());
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// ConcatV2(values...) with attr axis (psflow keeps the axis an attribute, TF makes it a tensor).
inline std::vector<OutputSpec> infer_concat(const InferenceContext& ctx) {
  if (ctx.input_dtypes.empty()) ctx.fail("needs at least one value to concatenate");
  for (std::size_t i = 1; i < ctx.input_dtypes.size(); ++i) ctx.expect_same_dtype(0, i);
  const auto axis = ctx.attr<std::int64_t>("axis");
  std::optional<std::vector<std::int64_t>> dims;
  for (std::size_t i = 0; i < ctx.input_shapes.size(); ++i) {
    const auto& s = ctx.input_shapes[i];
    if (!s.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
    const auto rank = static_cast<std::int64_t>(s.dims.size());
    if (axis < 0 || axis >= rank)
      ctx.fail("axis " + std::to_string(axis) + " is out of range for " + ctx.describe_input(i));
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
inline std::vector<OutputSpec> infer_slice(const InferenceContext& ctx) {
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

// Range(start, limit, delta): scalars of one integer dtype; a vector of that dtype.
inline std::vector<OutputSpec> infer_range(const InferenceContext& ctx) {
  for (std::size_t i = 0; i < 3; ++i) {
    if (ctx.input_dtypes[i] != DType::int32 && ctx.input_dtypes[i] != DType::int64)
      ctx.fail("start, limit and delta must be int32 or int64, got " + ctx.describe_input(i));
    ctx.expect_same_dtype(0, i);
    if (ctx.input_shapes[i].known && !ctx.input_shapes[i].dims.empty())
      ctx.fail("start, limit and delta must be scalars, got " + ctx.describe_input(i));
  }
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of({-1})}};
}

}  // namespace detail

namespace ops {

// A constant tensor baked into the graph.
inline Output constant(Graph& graph, const Tensor& value, std::string_view name = "") {
  if (value.empty()) throw InvalidArgument("ops::constant: the value is an empty Tensor");
  return detail::build_source_op(graph, "Const", {{"value", value}}, name, "Const").output(0);
}

// A rank-0 constant of `like`'s dtype holding `value` (for `x * 0.5` and friends).
inline Output scalar_like(Output like, double value, std::string_view name = "") {
  Tensor t = visit_numeric_dtype(like.dtype(), "scalar constant", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Tensor(static_cast<T>(value));
  });
  return constant(like.graph(), t, name);
}

// A value fed at run time; shape dimensions of -1 are unknown.
inline Output placeholder(Graph& graph, DType dtype, std::vector<std::int64_t> shape,
                          std::string_view name = "") {
  return detail::build_source_op(graph, "Placeholder",
                                 {{"dtype", dtype}, {"shape", std::move(shape)}}, name,
                                 "Placeholder")
      .output(0);
}

// A tensor of `shape` whose every element is `value`, computed when run (no big constant
// stored in the graph, so it is cheap to ship to another task).
inline Output fill(Graph& graph, DType dtype, const Shape& shape, double value,
                   std::string_view name = "") {
  return detail::build_source_op(graph, "Fill",
                                 {{"dtype", dtype},
                                  {"shape", std::vector<std::int64_t>(shape.begin(), shape.end())},
                                  {"value", value}},
                                 name, "Fill")
      .output(0);
}
inline Output zeros(Graph& graph, DType dtype, const Shape& shape, std::string_view name = "") {
  return fill(graph, dtype, shape, 0.0, name.empty() ? "zeros" : name);
}
inline Output ones(Graph& graph, DType dtype, const Shape& shape, std::string_view name = "") {
  return fill(graph, dtype, shape, 1.0, name.empty() ? "ones" : name);
}

inline Output identity(Output x, std::string_view name = "") {
  return detail::build_op("Identity", {x}, {}, name, "Identity").output(0);
}

// Same elements, new shape; one dimension may be -1 (inferred).
inline Output reshape(Output x, std::vector<std::int64_t> shape, std::string_view name = "") {
  return detail::build_op("Reshape", {x}, {{"shape", std::move(shape)}}, name, "Reshape").output(0);
}

// The values joined along `axis` (TF's tf.concat); all have one dtype and, outside the axis,
// one shape. One value is returned as it is.
inline Output concat(const std::vector<Output>& values, int axis, std::string_view name = "") {
  if (values.empty()) throw InvalidArgument("ops::concat: no values given");
  if (values.size() == 1) return values.front();
  return detail::build_op("ConcatV2", values, {{"axis", std::int64_t{axis}}}, name, "concat")
      .output(0);
}

// The block of x starting at `begin` with `size` elements per axis (-1: the rest of the axis).
inline Output slice(Output x, std::vector<std::int64_t> begin, std::vector<std::int64_t> size,
                    std::string_view name = "") {
  return detail::build_op("Slice", {x}, {{"begin", std::move(begin)}, {"size", std::move(size)}},
                          name, "Slice")
      .output(0);
}

// The run-time shape of x as an int64 vector (TF's tf.shape with out_type int64).
inline Output shape(Output x, std::string_view name = "") {
  return detail::build_op("Shape", {x}, {}, name, "Shape").output(0);
}
// The number of elements of x as an int64 scalar (TF's tf.size with out_type int64).
inline Output size(Output x, std::string_view name = "") {
  return detail::build_op("Size", {x}, {}, name, "Size").output(0);
}
// start, start + delta, ... up to but not including limit (TF's tf.range), for int32 or int64
// scalars of one dtype.
inline Output range(Output start, Output limit, Output delta, std::string_view name = "") {
  return detail::build_op("Range", {start, limit, delta}, {}, name, "range").output(0);
}

}  // namespace ops

// Definitions and gradients, registered once per program.
namespace detail {

inline Grads reshape_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  if (x.shape().fully_defined()) return {ops::reshape(g[0], x.shape().dims)};
  return {ops::reshape_to_shape_of(g[0], x)};  // unknown dims: take x's shape at run time
}

inline Grads identity_grad(const Operation&, const Grads& g) { return {g[0]}; }

// Each value gets its block of the gradient; needs every value's size along the axis.
inline Grads concat_grad(const Operation& op, const Grads& g) {
  const auto axis = static_cast<std::size_t>(op_attr<std::int64_t>(op, "axis"));
  Grads out;
  std::int64_t offset = 0;
  for (int i = 0; i < op.num_inputs(); ++i) {
    const auto shape = op.input(i).shape();
    if (!shape.known || shape.dims[axis] < 0)
      throw InvalidArgument("gradient of ConcatV2 '" + op.name() + "': the size of value '" +
                            op.input(i).name() + "' along axis " + std::to_string(axis) +
                            " must be known when the graph is built");
    std::vector<std::int64_t> begin(shape.dims.size(), 0), size(shape.dims.size(), -1);
    begin[axis] = offset;
    size[axis] = shape.dims[axis];
    out.push_back(ops::slice(g[0], begin, size));
    offset += shape.dims[axis];
  }
  return out;
}

inline const bool array_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "Const", .infer = infer_const});
  defs.add({.type = "Placeholder", .infer = infer_placeholder});
  defs.add({.type = "Fill", .infer = fill_like_shape});
  defs.add({.type = "Identity", .num_inputs = 1, .infer = same_as_input});
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
  auto& grads = GradientRegistry::global();
  grads.add("ConcatV2", concat_grad);
  grads.add("Identity", identity_grad);
  grads.add("Reshape", reshape_grad);
  // Shape, Size and Range give sizes and positions, which do not change with the values.
  grads.add_not_differentiable({"Const", "Placeholder", "Fill", "Shape", "Size", "Range"});
  return true;
}();

}  // namespace detail

}  // namespace psflow
