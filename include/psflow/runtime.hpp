// Graphs and the in-process runtime: everything in core/, graph/ and runtime/ (tensors, graph
// building, every kernel, the executor, placement and partitioning, the local Session), without
// Boost.Asio or the distributed layer. Include psflow/psflow.hpp for clusters and training.
#pragma once

#include "psflow/core/compilation.hpp"
#include "psflow/version.hpp"

// core + graph
#include "psflow/core/buffer_allocator.hpp"
#include "psflow/core/tensor_format.hpp"
#include "psflow/graph.hpp"
#include "psflow/graph/graph_def.hpp"
#include "psflow/graph/subgraph.hpp"

// runtime
#include "psflow/runtime/cancellation.hpp"
#include "psflow/runtime/deadline_timer.hpp"
#include "psflow/runtime/device.hpp"
#include "psflow/runtime/executor.hpp"
#include "psflow/runtime/gradient_accumulator.hpp"
#if PSFLOW_COMPILES_IMPLEMENTATION  // every kernel: compiled once when separately compiled
#include "psflow/runtime/kernels.hpp"
#endif
#include "psflow/runtime/partition.hpp"
#include "psflow/runtime/placer.hpp"
#include "psflow/runtime/rendezvous.hpp"
#include "psflow/runtime/resource_manager.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/runtime/thread_pool.hpp"
#include "psflow/runtime/token_queue.hpp"
