// Every built-in kernel.
#pragma once

#include "psflow/runtime/kernels/array_kernels.hpp"
#include "psflow/runtime/kernels/elementwise.hpp"
#include "psflow/runtime/kernels/matmul.hpp"
#include "psflow/runtime/kernels/nn_kernels.hpp"
#include "psflow/runtime/kernels/random_kernels.hpp"
#include "psflow/runtime/kernels/reduction.hpp"
#include "psflow/runtime/kernels/state_kernels.hpp"
#include "psflow/runtime/kernels/sendrecv.hpp"
#include "psflow/runtime/kernels/is_variable_initialized_kernel.hpp"
#include "psflow/runtime/kernels/grad_kernels.hpp"
#include "psflow/runtime/kernels/sync_kernels.hpp"
#include "psflow/runtime/kernels/training_kernels.hpp"
