// Gradient clipping: TF1's tf.clip_by_global_norm, tf.clip_by_norm and tf.global_norm, built
// from existing ops (Square, Sum, Sqrt, Maximum, Minimum, RealDiv, Mul), for use between
// compute_gradients and apply_gradients:
//
//   auto grads = opt.compute_gradients(loss);
//   std::vector<Output> g;
//   for (auto& [grad, var] : grads) g.push_back(grad);
//   auto [clipped, norm] = train::clip_by_global_norm(g, 5.0);
//   for (std::size_t i = 0; i < grads.size(); ++i) grads[i].first = clipped[i];
//   opt.apply_gradients(grads, global_step);
//
// In psflow::train, and also in psflow::ops where TF users look for them (tf.clip_by_norm).
//
// An IndexedSlices gradient (the Output of an IndexedSlicesToDense, what compute_gradients gives
// for an embedding table) is clipped as TF clips one: its norm is taken over its values (rows of
// duplicate ids count separately, as in TF) and the result is again an IndexedSlices (values
// scaled, same indices), so apply_gradients still applies it sparsely. Empty Outputs (TF's None)
// pass through as empty. The tensors must be float32 or float64, all of one dtype for the global
// norm (no Cast: InvalidArgument naming both tensors and dtypes).
//
// Not TF: clip_by_norm's norm is sqrt(sum(t^2)) without TF's where() guard, so its value matches
// TF's but its gradient with respect to an all-zero t is NaN (TF's is 0); differentiate through
// it only away from 0 (clipping gradients before apply_gradients never does).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/sparse_ops.hpp"

namespace psflow::train {

// sqrt(sum over the tensors of sum(t^2)): TF's global_norm ("global_norm/global_norm"). Empty
// Outputs are skipped; throws InvalidArgument when none is left, or for tensors of different or
// non-floating dtypes.
PSFLOW_DECL Output global_norm(const std::vector<Output>& t_list);

// TF's clip_by_global_norm: with global_norm = use_norm or global_norm(t_list), each tensor
// becomes t * clip_norm / max(global_norm, clip_norm) (TF's arithmetic: t * (clip_norm *
// min(1 / global_norm, 1 / clip_norm)), and NaN everywhere when the norm is infinite). Returns
// the clipped list (empty Outputs stay empty, in place) and the global norm. Throws
// InvalidArgument for clip_norm <= 0, a use_norm that is not a scalar of the tensors' dtype, or
// the errors of global_norm.
PSFLOW_DECL std::pair<std::vector<Output>, Output> clip_by_global_norm(
    const std::vector<Output>& t_list, double clip_norm, std::optional<Output> use_norm = {});

// TF's clip_by_norm: t * clip_norm / max(l2norm, clip_norm), where l2norm is sqrt(sum(t^2))
// over `axes` (negative axes count from the end; empty: all), kept as size-1 dimensions so it
// broadcasts against t. Throws InvalidArgument for clip_norm <= 0, an empty or non-floating t.
PSFLOW_DECL Output clip_by_norm(Output t, double clip_norm, std::vector<int> axes = {});

}  // namespace psflow::train

namespace psflow::ops {
using train::clip_by_global_norm;
using train::clip_by_norm;
using train::global_norm;
}  // namespace psflow::ops

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::train::detail {

// The tensor whose elements a norm adds up: an IndexedSlices' values, or t itself.
PSFLOW_DECL Output norm_values(const Output& t) {
  if (auto slices = as_indexed_slices(t)) return slices->values;
  return t;
}

// `t` scaled by the scalar `scale` (an IndexedSlices stays one, with scaled values).
PSFLOW_DECL Output scaled(const Output& t, const Output& scale) {
  if (auto slices = as_indexed_slices(t))
    return IndexedSlices{ops::mul(slices->values, scale), slices->indices, slices->dense_shape};
  return ops::mul(t, scale);
}

PSFLOW_DECL void check_floating(const Output& t, const char* what) {
  if (!is_floating(t.dtype()))
    throw InvalidArgument(std::string(what) + ": '" + t.name() + "' is " +
                          std::string(dtype_name(t.dtype())) + "; it must be float32 or float64");
}

}  // namespace psflow::train::detail

namespace psflow::train {

PSFLOW_DECL Output global_norm(const std::vector<Output>& t_list) {
  std::vector<Output> squares;
  const Output* first = nullptr;
  for (const Output& t : t_list) {
    if (!t.valid()) continue;
    detail::check_floating(t, "global_norm");
    if (!first) first = &t;
    if (t.dtype() != first->dtype())
      throw InvalidArgument("global_norm: '" + t.name() + "' is " +
                            std::string(dtype_name(t.dtype())) + " but '" + first->name() +
                            "' is " + std::string(dtype_name(first->dtype())) +
                            "; all tensors must have one dtype");
  }
  if (!first) throw InvalidArgument("global_norm: no tensors (all empty)");
  auto scope = first->graph().name_scope("global_norm");
  for (const Output& t : t_list)
    if (t.valid()) squares.push_back(ops::reduce_sum(ops::square(detail::norm_values(t))));
  Output sum = squares.size() == 1 ? squares[0] : ops::add_n(squares);
  return ops::sqrt(sum, "global_norm");
}

PSFLOW_DECL std::pair<std::vector<Output>, Output> clip_by_global_norm(
    const std::vector<Output>& t_list, double clip_norm, std::optional<Output> use_norm) {
  if (!(clip_norm > 0))
    throw InvalidArgument("clip_by_global_norm: clip_norm must be positive, got " +
                          std::to_string(clip_norm));
  Output norm;
  if (use_norm) {
    if (!use_norm->valid()) throw InvalidArgument("clip_by_global_norm: use_norm is empty");
    const PartialShape shape = use_norm->shape();
    if (shape.known && !shape.dims.empty())
      throw InvalidArgument("clip_by_global_norm: use_norm '" + use_norm->name() + "' has shape " +
                            shape.to_string() + "; it must be a scalar");
    for (const Output& t : t_list)
      if (t.valid() && t.dtype() != use_norm->dtype())
        throw InvalidArgument("clip_by_global_norm: use_norm '" + use_norm->name() + "' is " +
                              std::string(dtype_name(use_norm->dtype())) + " but '" + t.name() +
                              "' is " + std::string(dtype_name(t.dtype())));
    norm = *use_norm;
  } else {
    norm = global_norm(t_list);
  }
  Graph& g = norm.graph();
  auto scope = g.name_scope("clip_by_global_norm");
  Output clip = ops::scalar_like(norm, clip_norm, "clip_norm");
  Output scale_for_finite = clip * ops::minimum(1.0 / norm, 1.0 / clip);
  Output scale = ops::add(scale_for_finite, norm - norm, "scale");  // NaN when norm is inf
  std::vector<Output> clipped;
  for (const Output& t : t_list) clipped.push_back(t.valid() ? detail::scaled(t, scale) : Output());
  return {clipped, norm};
}

PSFLOW_DECL Output clip_by_norm(Output t, double clip_norm, std::vector<int> axes) {
  if (!t.valid()) throw InvalidArgument("clip_by_norm: t is an empty Output");
  detail::check_floating(t, "clip_by_norm");
  if (!(clip_norm > 0))
    throw InvalidArgument("clip_by_norm: clip_norm must be positive, got " +
                          std::to_string(clip_norm));
  auto scope = t.graph().name_scope("clip_by_norm");
  const Output values = detail::norm_values(t);
  Output l2norm = ops::sqrt(ops::reduce_sum(ops::square(values), axes, /*keep_dims=*/true));
  Output clip = ops::scalar_like(values, clip_norm, "clip_norm");
  Output clipped = ops::div(values * clip, ops::maximum(l2norm, clip));
  if (auto slices = as_indexed_slices(t))
    return IndexedSlices{clipped, slices->indices, slices->dense_shape};
  return clipped;
}

}  // namespace psflow::train

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
