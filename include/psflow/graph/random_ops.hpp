// Random ops used by initializers: normal and uniform samples computed where they run (so a
// variable's initial value is made on the variable's own device, never shipped).
// A non-zero seed makes the values deterministic; seed 0 draws a fresh seed. Each element's
// value is a function of (seed, run, element index), so a shard of a partitioned variable
// (given its PartitionInfo) draws exactly the elements it holds in the whole variable.
// Kernels: runtime/kernels/random_kernels.hpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/partitioner.hpp"

namespace psflow {

namespace detail {

inline const bool random_ops_registered = [] {
  for (const char* type : {"RandomNormal", "RandomUniform"}) {
    OpRegistry::global().add(
        OpDef{.type = type, .stateful = true, .infer = [](const InferenceContext& ctx) {
                if (!is_floating(ctx.attr<DType>("dtype")))
                  ctx.fail("random values must be float32 or float64");
                return fill_like_shape(ctx);
              }});
  }
  GradientRegistry::global().add_not_differentiable({"RandomNormal", "RandomUniform"});
  return true;
}();

inline std::vector<std::int64_t> int64_dims(const std::vector<std::size_t>& dims) {
  return std::vector<std::int64_t>(dims.begin(), dims.end());
}

// With a partition: attrs full_shape and offset place the values in the whole variable.
inline AttrMap random_attrs(DType dtype, const Shape& shape, double a, double b, std::uint64_t seed,
                            const char* a_name, const char* b_name,
                            const PartitionInfo* partition) {
  AttrMap attrs{{"dtype", dtype},
                {"shape", int64_dims(shape)},
                {a_name, a},
                {b_name, b},
                {"seed", static_cast<std::int64_t>(seed)}};
  if (partition) {
    if (partition->full_shape.size() != shape.size() || partition->offset.size() != shape.size())
      throw InvalidArgument("random op: partition full_shape " +
                            shape_string(partition->full_shape) + " and offset " +
                            shape_string(partition->offset) + " must have the rank of shape " +
                            shape_string(shape));
    for (std::size_t i = 0; i < shape.size(); ++i)
      if (partition->offset[i] + shape[i] > partition->full_shape[i])
        throw InvalidArgument("random op: a shard of shape " + shape_string(shape) + " at offset " +
                              shape_string(partition->offset) + " does not fit in the full shape " +
                              shape_string(partition->full_shape));
    attrs.emplace("full_shape", int64_dims(partition->full_shape));
    attrs.emplace("offset", int64_dims(partition->offset));
  }
  return attrs;
}

}  // namespace detail

namespace ops {

// Normal samples; with `partition`, the shard `shape` at partition->offset of a variable of
// partition->full_shape (the same values the whole variable would get there).
inline Output random_normal(Graph& graph, const Shape& shape, double mean = 0.0,
                            double stddev = 1.0, std::uint64_t seed = 0,
                            DType dtype = DType::float32, std::string_view name = "",
                            const PartitionInfo* partition = nullptr) {
  return detail::build_source_op(
             graph, "RandomNormal",
             detail::random_attrs(dtype, shape, mean, stddev, seed, "mean", "stddev", partition),
             name, "random_normal")
      .output(0);
}

// Uniform on [minval, maxval).
inline Output random_uniform(Graph& graph, const Shape& shape, double minval = 0.0,
                             double maxval = 1.0, std::uint64_t seed = 0,
                             DType dtype = DType::float32, std::string_view name = "",
                             const PartitionInfo* partition = nullptr) {
  return detail::build_source_op(graph, "RandomUniform",
                                 detail::random_attrs(dtype, shape, minval, maxval, seed, "minval",
                                                      "maxval", partition),
                                 name, "random_uniform")
      .output(0);
}

}  // namespace ops

}  // namespace psflow
