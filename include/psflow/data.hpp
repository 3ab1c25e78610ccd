// Input pipelines (TF1's tf.data): data::Dataset with its sources and transformations, the
// readers and writers of text and TFRecord files, decode_csv and tf.train.Example parsing.
#pragma once

#include "psflow/core/compilation.hpp"
#include "psflow/data/csv.hpp"
#include "psflow/data/dataset.hpp"
#include "psflow/data/example.hpp"
#include "psflow/data/iterator_kernels.hpp"
#include "psflow/data/record_reader.hpp"
#include "psflow/data/record_writer.hpp"
