// Fuzz target: a serving bundle's graph.pb, TF's GraphDef protobuf (observe/graph_def_proto.hpp)
// read by parse_graph_def, then rebuilt into a Graph by import_graph_def, as Model::load does.
// Properties checked beyond "no crash": a GraphDef that imports writes out (GraphDefContent::
// complete) and reads back as the same nodes, attributes included (devices are compared in
// their canonical form by the graph, inputs as the graph orders them: not here).
#include "psflow/graph/graph_def.hpp"

#include <variant>

#include "fuzz_common.hpp"
#include "psflow/graph.hpp"
#include "psflow/observe/graph_def_proto.hpp"

namespace {

using namespace psflow;

bool same_attr(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const auto* t = std::get_if<Tensor>(&a)) return t->equals(std::get<Tensor>(b));
  if (const auto* d = std::get_if<double>(&a))  // NaN never equals itself
    return *d == std::get<double>(b) || (*d != *d && std::get<double>(b) != std::get<double>(b));
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Tensor>)
          return false;
        else
          return x == std::get<T>(b);
      },
      a);
}

void read_graph(std::string_view bytes) {
  const GraphDef def = observe::parse_graph_def(bytes, "graph.pb");
  Graph graph;
  import_graph_def(graph, def);
  const GraphDef again = observe::parse_graph_def(
      observe::serialize_graph_def(graph, {}, observe::GraphDefContent::complete), "rewritten");
  fuzz::check(again.nodes.size() == def.nodes.size(), "a rewritten GraphDef has other nodes");
  for (std::size_t i = 0; i < def.nodes.size(); ++i) {
    const NodeDef &a = def.nodes[i], &b = again.nodes[i];
    fuzz::check(a.name == b.name && a.op == b.op,
                "node '" + a.name + "' does not read back as written");
    fuzz::check(a.attrs.size() == b.attrs.size(), "node '" + a.name + "' lost attributes");
    for (const auto& [key, value] : a.attrs)
      fuzz::check(b.attrs.count(key) && same_attr(value, b.attrs.at(key)),
                  "attribute '" + key + "' of node '" + a.name + "' does not read back");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  psflow::fuzz::only_psflow_errors([&] { read_graph(psflow::fuzz::as_text(data, size)); });
  return 0;
}
