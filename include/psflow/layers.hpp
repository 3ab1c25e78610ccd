// TF1's tf.layers: dense, flatten, dropout, conv2d, max_pooling2d and batch_normalization,
// creating their variables with get_variable in the current variable scope. Graph building
// only, like psflow/graph.hpp.
#pragma once

#include "psflow/layers/convolutional.hpp"
#include "psflow/layers/core.hpp"
#include "psflow/layers/normalization.hpp"
