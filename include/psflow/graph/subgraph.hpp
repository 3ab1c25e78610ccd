// Pruning: which nodes one run needs. Starting from the fetches and targets, walk inputs and
// control inputs backwards, stopping at fed tensors (a fed tensor's producer runs only if some
// other needed output of it is not fed). Node ids are a topological order, since an op's
// inputs always exist before it, so the result comes back sorted.
#pragma once

#include <algorithm>
#include <set>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"

namespace psflow {

PSFLOW_DECL std::vector<int> needed_nodes(const Graph& graph, const std::vector<TensorId>& fetches,
                                          const std::vector<int>& targets,
                                          const std::vector<TensorId>& feeds);

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

PSFLOW_DECL std::vector<int> needed_nodes(const Graph& graph, const std::vector<TensorId>& fetches,
                                          const std::vector<int>& targets,
                                          const std::vector<TensorId>& feeds) {
  auto is_fed = [&](TensorId t) { return std::find(feeds.begin(), feeds.end(), t) != feeds.end(); };
  std::vector<char> needed(graph.num_nodes(), 0);
  std::vector<int> stack;
  auto visit = [&](int id) {
    if (!needed[static_cast<std::size_t>(id)]) {
      needed[static_cast<std::size_t>(id)] = 1;
      stack.push_back(id);
    }
  };
  for (const TensorId& f : fetches)
    if (!is_fed(f)) visit(f.node);
  for (int t : targets) visit(t);
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    const auto& node = graph.node(id);
    for (const TensorId& in : node.inputs)
      if (!is_fed(in)) visit(in.node);
    for (int c : node.control_inputs) visit(c);
  }
  std::vector<int> out;
  for (std::size_t i = 0; i < needed.size(); ++i)
    if (needed[i]) out.push_back(static_cast<int>(i));
  return out;
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
