// Graph building only: tensors, device strings, graphs, ops and variables, without the runtime
// or Boost.Asio. Include psflow/runtime.hpp to run graphs in-process, psflow/psflow.hpp for all.
#pragma once

#include "psflow/core/device_spec.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/control_ops.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/gradients.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/nn_ops.hpp"
#include "psflow/graph/partitioner.hpp"
#include "psflow/graph/random_ops.hpp"
#include "psflow/graph/sendrecv_ops.hpp"
#include "psflow/graph/sparse_ops.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/graph/sync_ops.hpp"
#include "psflow/graph/training_ops.hpp"
#include "psflow/graph/variable.hpp"
