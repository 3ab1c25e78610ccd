// Random ops used by initializers: normal and uniform samples computed where they run (so a
// variable's initial value is made on the variable's own device, never shipped).
// A non-zero seed makes the sequence of values deterministic; seed 0 draws a fresh seed.
// Kernels: runtime/kernels/random_kernels.hpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

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

inline AttrMap random_attrs(DType dtype, const Shape& shape, double a, double b, std::uint64_t seed,
                            const char* a_name, const char* b_name) {
  return {{"dtype", dtype},
          {"shape", std::vector<std::int64_t>(shape.begin(), shape.end())},
          {a_name, a},
          {b_name, b},
          {"seed", static_cast<std::int64_t>(seed)}};
}

}  // namespace detail

namespace ops {

inline Output random_normal(Graph& graph, const Shape& shape, double mean = 0.0,
                            double stddev = 1.0, std::uint64_t seed = 0,
                            DType dtype = DType::float32, std::string_view name = "") {
  return detail::build_source_op(
             graph, "RandomNormal",
             detail::random_attrs(dtype, shape, mean, stddev, seed, "mean", "stddev"), name,
             "random_normal")
      .output(0);
}

// Uniform on [minval, maxval).
inline Output random_uniform(Graph& graph, const Shape& shape, double minval = 0.0,
                             double maxval = 1.0, std::uint64_t seed = 0,
                             DType dtype = DType::float32, std::string_view name = "") {
  return detail::build_source_op(
             graph, "RandomUniform",
             detail::random_attrs(dtype, shape, minval, maxval, seed, "minval", "maxval"), name,
             "random_uniform")
      .output(0);
}

}  // namespace ops

}  // namespace psflow
