// train::gradients: TF1's tf.gradients under the name training code uses. The walk and its
// rules live in graph/gradients.hpp (gradients are graph-to-graph); each op family registers
// its gradient functions next to its op definitions (graph/gradient_registry.hpp).
#pragma once

#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/gradients.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/nn_ops.hpp"

namespace psflow::train {

using psflow::GradientFunction;
using psflow::GradientRegistry;
using psflow::gradients;
using psflow::IndexedSlices;

}  // namespace psflow::train
