// Inference: load a serving bundle and predict (psflow::serving::Model), with the in-process
// runtime and every kernel, without the network layer (no Boost.Asio): what a program that only
// serves a model includes. Exporting a bundle (serving/export.hpp) is in psflow/psflow.hpp.
#pragma once

#include "psflow/core/compilation.hpp"
#include "psflow/runtime.hpp"
#include "psflow/serving/bundle.hpp"
#include "psflow/serving/model.hpp"
#include "psflow/version.hpp"
