// Every built-in kernel: one header per op family, runtime/kernels/<family>_kernels.hpp, each
// including its graph/<family>_ops.hpp (docs/adding-an-op.md).
#pragma once

#include "psflow/runtime/kernels/array_kernels.hpp"
#include "psflow/runtime/kernels/batch_norm_kernels.hpp"
#include "psflow/runtime/kernels/control_kernels.hpp"
#include "psflow/runtime/kernels/conv_kernels.hpp"
#include "psflow/runtime/kernels/dynamic_embedding_kernels.hpp"
#include "psflow/runtime/kernels/embedding_kernels.hpp"
#include "psflow/runtime/kernels/grad_kernels.hpp"
#include "psflow/runtime/kernels/logic_kernels.hpp"
#include "psflow/runtime/kernels/math_kernels.hpp"
#include "psflow/runtime/kernels/nn_kernels.hpp"
#include "psflow/runtime/kernels/random_kernels.hpp"
#include "psflow/runtime/kernels/sendrecv_kernels.hpp"
#include "psflow/runtime/kernels/sparse_kernels.hpp"
#include "psflow/runtime/kernels/stack_kernels.hpp"
#include "psflow/runtime/kernels/state_kernels.hpp"
#include "psflow/runtime/kernels/string_kernels.hpp"
#include "psflow/runtime/kernels/sync_kernels.hpp"
#include "psflow/runtime/kernels/training_kernels.hpp"
