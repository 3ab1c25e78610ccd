// A Graph as the protocol-buffer bytes of TF's GraphDef, what an event file's Event.graph_def
// holds and TensorBoard's graph tab draws (it groups nodes by name scope and can colour them by
// device). Written with ProtoWriter; the fields, from TF's graph.proto, node_def.proto,
// attr_value.proto, tensor_shape.proto, tensor.proto and versions.proto:
//   GraphDef    { repeated NodeDef node = 1; VersionDef versions = 4; }
//   VersionDef  { int32 producer = 1; }
//   NodeDef     { string name = 1; string op = 2; repeated string input = 3; string device = 4;
//                 map<string, AttrValue> attr = 5; }        // map entry: key = 1, value = 2
//   AttrValue   { ListValue list = 1; bytes s = 2; int64 i = 3; float f = 4; bool b = 5;
//                 DataType type = 6; TensorShapeProto shape = 7; TensorProto tensor = 8; }
//   ListValue   { repeated int64 i = 3 [packed]; repeated TensorShapeProto shape = 7; }
//   TensorShapeProto { repeated Dim dim = 2; bool unknown_rank = 3; }   Dim { int64 size = 1; }
//   TensorProto { DataType dtype = 1; TensorShapeProto tensor_shape = 2;
//                 bytes tensor_content = 4; }
//   DataType    DT_FLOAT = 1, DT_DOUBLE = 2, DT_INT32 = 3, DT_INT64 = 9, DT_BOOL = 10
//
// Each node: its name and op type, its inputs as TF writes them ("node" for output 0,
// "node:1" for others, "^node" for a control input), its device, and its attributes mapped by
// their psflow type: bool -> b, int -> i, double -> f (float), string -> s, DType -> type,
// list of ints -> list.i, Tensor -> tensor (dtype and shape, and the raw little-endian values
// when they take at most kMaxTensorContentBytes, so that large constants do not bloat the
// file). Like TF's as_graph_def(add_shapes=True), every node also gets "_output_shapes" (a
// list of shapes, -1 for an unknown dimension), which TensorBoard shows on the edges.
//
// The device is the one the placer chose when `placement` (op name -> device) names the node,
// else the requested one ("" when none). A distributed Session's plan gives the placement:
//   auto plan = session.describe(fetches, feeds, targets);   // nullopt in process
//   observe::DevicePlacement placed(plan->placement.begin(), plan->placement.end());
// Pure function of the graph; call it while no thread adds to the graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <cstring>
#include <type_traits>
#include <variant>

#include "psflow/observe/proto_writer.hpp"
#endif

namespace psflow::observe {

// Op name -> the device the placer chose for it.
using DevicePlacement = std::map<std::string, std::string, std::less<>>;

// Tensor attributes (constants' values) larger than this are written without their values.
inline constexpr std::size_t kMaxTensorContentBytes = 1024;
// VersionDef.producer of the GraphDefs written here (TensorBoard does not check it).
inline constexpr std::int64_t kGraphDefProducer = 1;

// The protocol-buffer bytes of `graph` as a GraphDef.
std::string serialize_graph_def(const Graph& graph, const DevicePlacement& placement = {});

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

PSFLOW_DECL ProtoWriter tensor_shape_proto(const PartialShape& shape) {
  ProtoWriter proto;
  if (!shape.known) return proto.boolean(3, true);
  for (std::int64_t d : shape.dims) proto.message(2, ProtoWriter().int64(1, d));
  return proto;
}

PSFLOW_DECL ProtoWriter tensor_proto(const Tensor& tensor) {
  ProtoWriter proto;
  proto.varint(1, static_cast<std::uint64_t>(psflow::tf_data_type(tensor.dtype())));
  proto.message(2, tensor_shape_proto(PartialShape::of_shape(tensor.shape())));
  if (tensor.nbytes() <= kMaxTensorContentBytes && tensor.raw_data())
    proto.bytes(4, std::string_view(static_cast<const char*>(tensor.raw_data()), tensor.nbytes()));
  return proto;
}

PSFLOW_DECL ProtoWriter attr_value_proto(const AttrValue& value) {
  ProtoWriter proto;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>)
          proto.boolean(5, v);
        else if constexpr (std::is_same_v<V, std::int64_t>)
          proto.int64(3, v);
        else if constexpr (std::is_same_v<V, double>)
          proto.float32(4, static_cast<float>(v));
        else if constexpr (std::is_same_v<V, std::string>)
          proto.bytes(2, v);
        else if constexpr (std::is_same_v<V, DType>)
          proto.varint(6, static_cast<std::uint64_t>(psflow::tf_data_type(v)));
        else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>)
          proto.message(1, ProtoWriter().packed_varints(3, v));
        else
          proto.message(8, tensor_proto(v));
      },
      value);
  return proto;
}

PSFLOW_DECL void add_attr(ProtoWriter& node, std::string_view key, const ProtoWriter& value) {
  node.message(5, ProtoWriter().bytes(1, key).message(2, value));
}

}  // namespace detail

PSFLOW_DECL std::string serialize_graph_def(const Graph& graph, const DevicePlacement& placement) {
  ProtoWriter graph_def;
  for (std::size_t id = 0; id < graph.num_nodes(); ++id) {
    const psflow::detail::Node& node = graph.node(static_cast<int>(id));
    ProtoWriter node_def;
    node_def.bytes(1, node.name).bytes(2, node.type);
    for (const TensorId& in : node.inputs) {
      const std::string& producer = graph.node(in.node).name;
      node_def.bytes(3, in.index == 0 ? producer : producer + ":" + std::to_string(in.index));
    }
    for (int c : node.control_inputs) node_def.bytes(3, "^" + graph.node(c).name);
    const auto placed = placement.find(node.name);
    const std::string& device = placed != placement.end() ? placed->second : node.device;
    if (!device.empty()) node_def.bytes(4, device);
    for (const auto& [key, value] : node.attrs)
      detail::add_attr(node_def, key, detail::attr_value_proto(value));
    ProtoWriter shapes;
    for (const OutputSpec& out : node.outputs)
      shapes.message(7, detail::tensor_shape_proto(out.shape));
    detail::add_attr(node_def, "_output_shapes", ProtoWriter().message(1, shapes));
    graph_def.message(1, node_def);
  }
  graph_def.message(4, ProtoWriter().int64(1, kGraphDefProducer));
  return graph_def.str();
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
