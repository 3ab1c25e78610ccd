// Training ops: the fused update rules the optimizers in psflow/train/ emit, named and shaped
// like TF's training_ops (ApplyGradientDescent, ApplyMomentum, ApplyAdagrad, ApplyAdam,
// ApplyFtrl, ApplyRMSProp, ApplyCenteredRMSProp, ApplyAdadelta), and their sparse forms for
// IndexedSlices gradients (SparseApplyMomentum, SparseApplyAdagrad, SparseApplyFtrl,
// SparseApplyRMSProp, SparseApplyCenteredRMSProp, SparseApplyAdadelta, and psflow's
// SparseApplyAdam, which TF composes from scatter ops).
//
// Each op takes its variable and slot variables as references (Variable::ref()), so it always
// runs where the variable lives: in a ps cluster only the gradient travels to the ps, and the
// update happens there. The builders colocate the op with its variable. Output 0 is the
// variable's reference again (TF's `out: Ref(T)`), so fetching it reads the updated value.
//
// Contract of every Apply op (checked at graph building when shapes are known, and again by the
// kernel): float32 or float64; the slots and the gradient have the variable's dtype and shape;
// the hyper-parameters (lr, momentum, beta1, ...) are scalars of the variable's dtype. The one
// exception is ApplyAdam's beta1_power/beta2_power, which may be float32 or float64 whatever
// the variable's dtype (the kernel converts these two scalars where TF would insert a Cast, so
// no scalar Cast runs per step). The kernels are in psflow/runtime/kernels/training_kernels.hpp:
// every process that may run these ops (each ps task) must include it.
//
// use_locking (each builder's last argument, TF's attr; the optimizers pass theirs): true holds
// the variable's and slots' locks for the whole update; false updates in place without them,
// at the same time as other such updates (TF's Hogwild; see VariableResource::LockFreeWriter).
//
// Equations (TF's CPU kernels, element-wise; `lr`, `mu`, ... are the scalar inputs):
//   ApplyGradientDescent(var, alpha, delta):   var -= delta * alpha
//   ApplyMomentum(var, accum, lr, grad, mu):   accum = accum * mu + grad
//                                              var -= accum * lr                      (default)
//                                              var -= grad * lr + accum * mu * lr     (nesterov)
//   ApplyAdagrad(var, accum, lr, grad):        accum += grad * grad
//                                              var -= grad * lr * (1 / sqrt(accum))
//   ApplyAdam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
//       alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
//       m += (grad - m) * (1 - beta1)
//       v += (grad * grad - v) * (1 - beta2)
//       var -= m * alpha / (sqrt(v) + epsilon)                                        (default)
//       var -= (grad * (1 - beta1) + beta1 * m) * alpha / (sqrt(v) + epsilon)         (nesterov)
//   ApplyFtrl(var, accum, linear, grad, lr, l1, l2, lr_power):   (TF's FTRL-Proximal)
//       accum_new = accum + grad * grad
//       linear += grad - (accum_new^-lr_power - accum^-lr_power) / lr * var
//       quadratic = accum_new^-lr_power / lr + 2 * l2
//       var = |linear| > l1 ? (sign(linear) * l1 - linear) / quadratic : 0
//       accum = accum_new                     (lr_power -0.5 uses sqrt, exactly as TF)
//   ApplyRMSProp(var, ms, mom, lr, rho, momentum, epsilon, grad):
//       ms += (grad * grad - ms) * (1 - rho)          (ms = rho * ms + (1 - rho) * grad^2)
//       mom = mom * momentum + grad * lr / sqrt(ms + epsilon)
//       var -= mom
//   ApplyCenteredRMSProp(var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
//       ms += (grad * grad - ms) * (1 - rho)
//       mg += (grad - mg) * (1 - rho)
//       mom = mom * momentum + grad * lr / sqrt(ms - mg * mg + epsilon)
//       var -= mom
//   ApplyAdadelta(var, accum, accum_update, lr, rho, epsilon, grad):
//       accum = accum * rho + grad * grad * (1 - rho)
//       update = sqrt(accum_update + epsilon) * (1 / sqrt(accum + epsilon)) * grad
//       var -= update * lr
//       accum_update = accum_update * rho + update * update * (1 - rho)
// Slot updates use the new slot values, as TF's do. The kernels always hold the variable's lock
// (TF's use_locking=true), so there is no use_locking attribute.
//
// The sparse forms take the gradient as rows: grad [n, row...] and indices [n] (int32/int64),
// and apply the same equations to rows indices[i] of the variable and its slots only; every
// other row, of the variable and of the slots, is left untouched. The indices must be distinct
// (the optimizers sum duplicates first, as TF's _apply_sparse_duplicate_indices does) and in
// [0, rows): every index is checked before any row is written. SparseApplyAdam has an attr
// `lazy`: false follows TF1's AdamOptimizer._apply_sparse, which decays m and v of every row and
// moves every row of the variable (dense work on the ps, no dense traffic); true touches only
// the given rows (TF's LazyAdamOptimizer). The sparse RMSProp forms write the moving average as
// TF's sparse kernels do, ms = ms * rho + grad^2 * (1 - rho) (the same value, rounded
// differently from the dense ms += (grad^2 - ms) * (1 - rho)).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

// Which inputs of an Apply op are what, for its shape function.
struct ApplyOpLayout {
  std::vector<int> refs;           // variable and slots: the variable's dtype and shape
  std::vector<int> like_var;       // plain tensors with the variable's dtype and shape (grad)
  std::vector<int> scalars;        // scalars of the variable's dtype
  std::vector<int> float_scalars;  // scalars of any floating dtype (Adam's beta powers)
};

// Registers an Apply op; a sparse one also names its gradient-rows and indices inputs.
struct SparseRowsInputs {
  int grad;
  int indices;
};

}  // namespace detail

namespace ops {

// var -= delta * alpha. `var` is a variable reference; returns it after the update.
PSFLOW_DECL Output apply_gradient_descent(Output var, Output alpha, Output delta,
                                          std::string_view name = "", bool use_locking = true);

// accum = accum * momentum + grad; var -= accum * lr (or the Nesterov form, see above).
PSFLOW_DECL Output apply_momentum(Output var, Output accum, Output lr, Output grad, Output momentum,
                                  bool use_nesterov = false, std::string_view name = "",
                                  bool use_locking = true);

// accum += grad^2; var -= grad * lr / sqrt(accum).
PSFLOW_DECL Output apply_adagrad(Output var, Output accum, Output lr, Output grad,
                                 std::string_view name = "", bool use_locking = true);

// Adam's update of var, m and v (see the equations above).
PSFLOW_DECL Output apply_adam(Output var, Output m, Output v, Output beta1_power,
                              Output beta2_power, Output lr, Output beta1, Output beta2,
                              Output epsilon, Output grad, bool use_nesterov = false,
                              std::string_view name = "", bool use_locking = true);

// FTRL-Proximal (see the equations above).
PSFLOW_DECL Output apply_ftrl(Output var, Output accum, Output linear, Output grad, Output lr,
                              Output l1, Output l2, Output lr_power, std::string_view name = "",
                              bool use_locking = true);

// The sparse forms: `grad` holds the rows for the distinct `indices`.
PSFLOW_DECL Output sparse_apply_momentum(Output var, Output accum, Output lr, Output grad,
                                         Output indices, Output momentum, bool use_nesterov = false,
                                         std::string_view name = "", bool use_locking = true);
PSFLOW_DECL Output sparse_apply_adagrad(Output var, Output accum, Output lr, Output grad,
                                        Output indices, std::string_view name = "",
                                        bool use_locking = true);
PSFLOW_DECL Output sparse_apply_adam(Output var, Output m, Output v, Output beta1_power,
                                     Output beta2_power, Output lr, Output beta1, Output beta2,
                                     Output epsilon, Output grad, Output indices, bool lazy,
                                     std::string_view name = "", bool use_locking = true);
PSFLOW_DECL Output sparse_apply_ftrl(Output var, Output accum, Output linear, Output grad,
                                     Output indices, Output lr, Output l1, Output l2,
                                     Output lr_power, std::string_view name = "",
                                     bool use_locking = true);

// RMSProp (see the equations above): ms and mom are the slots "rms" and "momentum".
PSFLOW_DECL Output apply_rms_prop(Output var, Output ms, Output mom, Output lr, Output rho,
                                  Output momentum, Output epsilon, Output grad,
                                  std::string_view name = "", bool use_locking = true);
// Centered RMSProp: also keeps mg, the moving average of the gradient (slot "mg").
PSFLOW_DECL Output apply_centered_rms_prop(Output var, Output mg, Output ms, Output mom, Output lr,
                                           Output rho, Output momentum, Output epsilon, Output grad,
                                           std::string_view name = "", bool use_locking = true);
// Adadelta (see the equations above).
PSFLOW_DECL Output apply_adadelta(Output var, Output accum, Output accum_update, Output lr,
                                  Output rho, Output epsilon, Output grad,
                                  std::string_view name = "", bool use_locking = true);
PSFLOW_DECL Output sparse_apply_rms_prop(Output var, Output ms, Output mom, Output lr, Output rho,
                                         Output momentum, Output epsilon, Output grad,
                                         Output indices, std::string_view name = "",
                                         bool use_locking = true);
PSFLOW_DECL Output sparse_apply_centered_rms_prop(Output var, Output mg, Output ms, Output mom,
                                                  Output lr, Output rho, Output momentum,
                                                  Output epsilon, Output grad, Output indices,
                                                  std::string_view name = "",
                                                  bool use_locking = true);
PSFLOW_DECL Output sparse_apply_adadelta(Output var, Output accum, Output accum_update, Output lr,
                                         Output rho, Output epsilon, Output grad, Output indices,
                                         std::string_view name = "", bool use_locking = true);

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL std::vector<OutputSpec> infer_apply(const InferenceContext& ctx,
                                                const ApplyOpLayout& layout) {
  expect_floating(ctx, 0);
  auto same_as_var = [&](int i) {
    const auto k = static_cast<std::size_t>(i);
    ctx.expect_same_dtype(0, k);
    if (!shapes_compatible(ctx.input_shapes[0], ctx.input_shapes[k]))
      ctx.fail("input " + ctx.describe_input(k) + " must have the shape of the variable " +
               ctx.describe_input(0));
  };
  auto scalar = [&](int i) {
    const auto k = static_cast<std::size_t>(i);
    if (ctx.input_shapes[k].known && !ctx.input_shapes[k].dims.empty())
      ctx.fail("input " + ctx.describe_input(k) + " must be a scalar");
  };
  for (int i : layout.refs) same_as_var(i);
  for (int i : layout.like_var) same_as_var(i);
  for (int i : layout.scalars) {
    ctx.expect_same_dtype(0, static_cast<std::size_t>(i));
    scalar(i);
  }
  for (int i : layout.float_scalars) {
    expect_floating(ctx, static_cast<std::size_t>(i));
    scalar(i);
  }
  return {OutputSpec{ctx.input_dtypes[0], ctx.input_shapes[0], true}};
}

// The sparse forms: refs as above, grad [n] + var.shape[1:], indices [n].
PSFLOW_DECL std::vector<OutputSpec> infer_sparse_apply(const InferenceContext& ctx,
                                                       const ApplyOpLayout& layout, int grad,
                                                       int indices) {
  auto result = infer_apply(ctx, layout);
  const auto g = static_cast<std::size_t>(grad);
  const auto ix = static_cast<std::size_t>(indices);
  ctx.expect_same_dtype(0, g);
  if (ctx.input_dtypes[ix] != DType::int32 && ctx.input_dtypes[ix] != DType::int64)
    ctx.fail("indices must be int32 or int64, got " + ctx.describe_input(ix));
  const auto& var = ctx.input_shapes[0];
  const auto& gs = ctx.input_shapes[g];
  const auto& is = ctx.input_shapes[ix];
  if (is.known && is.dims.size() != 1)
    ctx.fail("indices must be a vector, got " + ctx.describe_input(ix));
  if (var.known && gs.known) {
    std::vector<std::int64_t> rows{is.known ? is.dims[0] : -1};
    rows.insert(rows.end(), var.dims.begin() + (var.dims.empty() ? 0 : 1), var.dims.end());
    if (var.dims.empty() || !shapes_compatible(PartialShape::of(rows), gs))
      ctx.fail("the gradient rows " + ctx.describe_input(g) +
               " must have shape [indices] + variable.shape[1:] for variable " +
               ctx.describe_input(0));
  }
  return result;
}

PSFLOW_DECL bool register_apply_op(const char* type, int num_inputs, ApplyOpLayout layout,
                                   std::optional<SparseRowsInputs> sparse = std::nullopt) {
  std::vector<int> refs = layout.refs;
  return OpRegistry::global().add(
      OpDef{.type = type,
            .num_inputs = num_inputs,
            .ref_inputs = std::move(refs),
            .stateful = true,
            .infer = [layout = std::move(layout), sparse](const InferenceContext& ctx) {
              return sparse ? infer_sparse_apply(ctx, layout, sparse->grad, sparse->indices)
                            : infer_apply(ctx, layout);
            }});
}

PSFLOW_REGISTERED_AT_STARTUP const bool training_ops_registered = [] {
  register_apply_op("ApplyGradientDescent", 3, {{0}, {2}, {1}, {}});
  register_apply_op("ApplyMomentum", 5, {{0, 1}, {3}, {2, 4}, {}});
  register_apply_op("ApplyAdagrad", 4, {{0, 1}, {3}, {2}, {}});
  register_apply_op("ApplyAdam", 10, {{0, 1, 2}, {9}, {5, 6, 7, 8}, {3, 4}});
  register_apply_op("ApplyFtrl", 8, {{0, 1, 2}, {3}, {4, 5, 6, 7}, {}});
  // (var, accum, lr, grad, indices, momentum)
  register_apply_op("SparseApplyMomentum", 6, {{0, 1}, {}, {2, 5}, {}}, {{3, 4}});
  // (var, accum, lr, grad, indices)
  register_apply_op("SparseApplyAdagrad", 5, {{0, 1}, {}, {2}, {}}, {{3, 4}});
  // (var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, indices)
  register_apply_op("SparseApplyAdam", 11, {{0, 1, 2}, {}, {5, 6, 7, 8}, {3, 4}}, {{9, 10}});
  // (var, accum, linear, grad, indices, lr, l1, l2, lr_power)
  register_apply_op("SparseApplyFtrl", 9, {{0, 1, 2}, {}, {5, 6, 7, 8}, {}}, {{3, 4}});
  // (var, ms, mom, lr, rho, momentum, epsilon, grad)
  register_apply_op("ApplyRMSProp", 8, {{0, 1, 2}, {7}, {3, 4, 5, 6}, {}});
  // (var, mg, ms, mom, lr, rho, momentum, epsilon, grad)
  register_apply_op("ApplyCenteredRMSProp", 9, {{0, 1, 2, 3}, {8}, {4, 5, 6, 7}, {}});
  // (var, accum, accum_update, lr, rho, epsilon, grad)
  register_apply_op("ApplyAdadelta", 7, {{0, 1, 2}, {6}, {3, 4, 5}, {}});
  // The sparse forms: the dense inputs, then grad rows and indices.
  register_apply_op("SparseApplyRMSProp", 9, {{0, 1, 2}, {}, {3, 4, 5, 6}, {}}, {{7, 8}});
  register_apply_op("SparseApplyCenteredRMSProp", 10, {{0, 1, 2, 3}, {}, {4, 5, 6, 7}, {}},
                    {{8, 9}});
  register_apply_op("SparseApplyAdadelta", 8, {{0, 1, 2}, {}, {3, 4, 5}, {}}, {{6, 7}});
  return true;
}();

// Creates an Apply op colocated with its variable (inputs[0], a variable reference).
PSFLOW_DECL Output build_apply_op(const char* type, std::vector<Output> inputs, AttrMap attrs,
                                  std::string_view name, bool use_locking) {
  attrs.emplace("use_locking", use_locking);
  const Output& ref = inputs.at(0);
  if (!ref.valid() || !ref.is_ref())
    throw InvalidArgument(std::string(type) +
                          ": the first input must be a variable reference (Variable::ref()), got " +
                          (ref.valid() ? "'" + ref.name() + "'" : std::string("an empty Output")));
  auto colocated = ref.graph().colocate_with(ref.op());
  return build_op(type, std::move(inputs), std::move(attrs), name, type).output(0);
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output apply_gradient_descent(Output var, Output alpha, Output delta,
                                          std::string_view name, bool use_locking) {
  return detail::build_apply_op("ApplyGradientDescent", {var, alpha, delta}, {}, name, use_locking);
}

PSFLOW_DECL Output apply_momentum(Output var, Output accum, Output lr, Output grad, Output momentum,
                                  bool use_nesterov, std::string_view name, bool use_locking) {
  return detail::build_apply_op("ApplyMomentum", {var, accum, lr, grad, momentum},
                                {{"use_nesterov", use_nesterov}}, name, use_locking);
}

PSFLOW_DECL Output apply_adagrad(Output var, Output accum, Output lr, Output grad,
                                 std::string_view name, bool use_locking) {
  return detail::build_apply_op("ApplyAdagrad", {var, accum, lr, grad}, {}, name, use_locking);
}

PSFLOW_DECL Output apply_adam(Output var, Output m, Output v, Output beta1_power,
                              Output beta2_power, Output lr, Output beta1, Output beta2,
                              Output epsilon, Output grad, bool use_nesterov, std::string_view name,
                              bool use_locking) {
  return detail::build_apply_op(
      "ApplyAdam", {var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad},
      {{"use_nesterov", use_nesterov}}, name, use_locking);
}

PSFLOW_DECL Output apply_ftrl(Output var, Output accum, Output linear, Output grad, Output lr,
                              Output l1, Output l2, Output lr_power, std::string_view name,
                              bool use_locking) {
  return detail::build_apply_op("ApplyFtrl", {var, accum, linear, grad, lr, l1, l2, lr_power}, {},
                                name, use_locking);
}

PSFLOW_DECL Output sparse_apply_momentum(Output var, Output accum, Output lr, Output grad,
                                         Output indices, Output momentum, bool use_nesterov,
                                         std::string_view name, bool use_locking) {
  return detail::build_apply_op("SparseApplyMomentum", {var, accum, lr, grad, indices, momentum},
                                {{"use_nesterov", use_nesterov}}, name, use_locking);
}

PSFLOW_DECL Output sparse_apply_adagrad(Output var, Output accum, Output lr, Output grad,
                                        Output indices, std::string_view name, bool use_locking) {
  return detail::build_apply_op("SparseApplyAdagrad", {var, accum, lr, grad, indices}, {}, name,
                                use_locking);
}

PSFLOW_DECL Output sparse_apply_adam(Output var, Output m, Output v, Output beta1_power,
                                     Output beta2_power, Output lr, Output beta1, Output beta2,
                                     Output epsilon, Output grad, Output indices, bool lazy,
                                     std::string_view name, bool use_locking) {
  return detail::build_apply_op(
      "SparseApplyAdam",
      {var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, indices},
      {{"lazy", lazy}}, name, use_locking);
}

PSFLOW_DECL Output sparse_apply_ftrl(Output var, Output accum, Output linear, Output grad,
                                     Output indices, Output lr, Output l1, Output l2,
                                     Output lr_power, std::string_view name, bool use_locking) {
  return detail::build_apply_op("SparseApplyFtrl",
                                {var, accum, linear, grad, indices, lr, l1, l2, lr_power}, {}, name,
                                use_locking);
}

PSFLOW_DECL Output apply_rms_prop(Output var, Output ms, Output mom, Output lr, Output rho,
                                  Output momentum, Output epsilon, Output grad,
                                  std::string_view name, bool use_locking) {
  return detail::build_apply_op("ApplyRMSProp", {var, ms, mom, lr, rho, momentum, epsilon, grad},
                                {}, name, use_locking);
}

PSFLOW_DECL Output apply_centered_rms_prop(Output var, Output mg, Output ms, Output mom, Output lr,
                                           Output rho, Output momentum, Output epsilon, Output grad,
                                           std::string_view name, bool use_locking) {
  return detail::build_apply_op("ApplyCenteredRMSProp",
                                {var, mg, ms, mom, lr, rho, momentum, epsilon, grad}, {}, name,
                                use_locking);
}

PSFLOW_DECL Output apply_adadelta(Output var, Output accum, Output accum_update, Output lr,
                                  Output rho, Output epsilon, Output grad, std::string_view name,
                                  bool use_locking) {
  return detail::build_apply_op("ApplyAdadelta", {var, accum, accum_update, lr, rho, epsilon, grad},
                                {}, name, use_locking);
}

PSFLOW_DECL Output sparse_apply_rms_prop(Output var, Output ms, Output mom, Output lr, Output rho,
                                         Output momentum, Output epsilon, Output grad,
                                         Output indices, std::string_view name, bool use_locking) {
  return detail::build_apply_op("SparseApplyRMSProp",
                                {var, ms, mom, lr, rho, momentum, epsilon, grad, indices}, {}, name,
                                use_locking);
}

PSFLOW_DECL Output sparse_apply_centered_rms_prop(Output var, Output mg, Output ms, Output mom,
                                                  Output lr, Output rho, Output momentum,
                                                  Output epsilon, Output grad, Output indices,
                                                  std::string_view name, bool use_locking) {
  return detail::build_apply_op("SparseApplyCenteredRMSProp",
                                {var, mg, ms, mom, lr, rho, momentum, epsilon, grad, indices}, {},
                                name, use_locking);
}

PSFLOW_DECL Output sparse_apply_adadelta(Output var, Output accum, Output accum_update, Output lr,
                                         Output rho, Output epsilon, Output grad, Output indices,
                                         std::string_view name, bool use_locking) {
  return detail::build_apply_op("SparseApplyAdadelta",
                                {var, accum, accum_update, lr, rho, epsilon, grad, indices}, {},
                                name, use_locking);
}

}  // namespace psflow::ops

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
