// How a tf.layers-style layer names itself and its variables, as TF1 does: the first dense layer
// built in a scope is "dense", the next "dense_1", and so on; its variables are created with
// get_variable inside variable_scope(<that name>) ("dense/kernel", "tower/dense_1/bias"), and its
// ops get the same name scope. Entering a variable scope again (to reuse its variables) starts
// the count again, so the same layers find the same variables.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"

namespace psflow::layers {

// The variable scope of a new layer of kind `base` ("dense", "conv2d", ...), open while it
// lives.
PSFLOW_DECL ScopeGuard layer_scope(Graph& graph, std::string_view base);

}  // namespace psflow::layers

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::layers {

PSFLOW_DECL ScopeGuard layer_scope(Graph& graph, std::string_view base) {
  // Counted per name scope: each entry of a variable scope opens a new one ("tower", then
  // "tower_1"), which is what restarts the count.
  const std::string counted = graph.current_name_scope() + "|" +
                              graph.current_variable_scope().name + "/" + std::string(base);
  constexpr const char* kLayerNames = "psflow/layer_names";
  std::size_t before = 0;
  for (const auto& name : graph.collection<std::string>(kLayerNames)) before += *name == counted;
  graph.add_to_collection(kLayerNames, std::make_shared<std::string>(counted));
  const std::string name =
      before == 0 ? std::string(base) : std::string(base) + "_" + std::to_string(before);
  return graph.variable_scope(name);
}

}  // namespace psflow::layers

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
