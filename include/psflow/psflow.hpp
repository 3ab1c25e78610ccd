// psflow: TensorFlow 1.x-style parameter-server training in C++. Includes everything.
#pragma once

#include "psflow/core/compilation.hpp"

// core, graph, runtime, distributed and train (also available alone: psflow/train.hpp;
// psflow/runtime.hpp has core, graph and runtime without Boost.Asio; psflow/graph.hpp core and
// graph alone)
#include "psflow/train.hpp"

// input pipelines: data::Dataset, file readers and writers, decode_csv, tf.train.Example
#include "psflow/data.hpp"

// observe
#include "psflow/observe/chrome_trace.hpp"
#include "psflow/observe/dot_files.hpp"
#include "psflow/observe/explain.hpp"
#include "psflow/observe/graph_dot.hpp"
#include "psflow/observe/progress.hpp"
// TensorBoard event files: summary::FileWriter, summary::scalar, summary::merge_all
#include "psflow/observe/event_file_writer.hpp"
#include "psflow/observe/summary.hpp"

// serving: export a trained model as a bundle (serving::export_model); loading one for
// inference alone is psflow/serving.hpp
#include "psflow/serving.hpp"
#include "psflow/serving/export.hpp"
