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
// GraphDefContent::complete (a serving bundle's graph.pb) writes every constant's values, and a
// double attribute that a float cannot hold exactly also as fixed64 field 1000 of AttrValue (a
// field TF's readers skip), so that parse_graph_def gives back exactly the attributes the graph
// has. parse_graph_def reads what this file writes (and TF's GraphDefs that keep to those
// fields), dropping "_output_shapes", which import_graph_def infers again.
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
#include "psflow/graph/graph_def.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <bit>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "psflow/core/string_encoding.hpp"
#include "psflow/observe/proto_reader.hpp"
#include "psflow/observe/proto_writer.hpp"
#endif

namespace psflow::observe {

// Op name -> the device the placer chose for it.
using DevicePlacement = std::map<std::string, std::string, std::less<>>;

// Tensor attributes (constants' values) larger than this are written without their values.
inline constexpr std::size_t kMaxTensorContentBytes = 1024;
// VersionDef.producer of the GraphDefs written here (TensorBoard does not check it).
inline constexpr std::int64_t kGraphDefProducer = 1;

// How much of the graph a GraphDef keeps: enough to draw it, or everything to run it again.
enum class GraphDefContent { for_tensorboard, complete };

// The protocol-buffer bytes of `graph` as a GraphDef.
std::string serialize_graph_def(const Graph& graph, const DevicePlacement& placement = {},
                                GraphDefContent content = GraphDefContent::for_tensorboard);

// The GraphDef in `bytes` (written with GraphDefContent::complete); `what` names it in errors.
// Throws DataLoss naming `what` and the node for bytes that are not such a GraphDef.
GraphDef parse_graph_def(std::string_view bytes, const std::string& what);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

PSFLOW_DECL ProtoWriter tensor_shape_proto(const PartialShape& shape) {
  ProtoWriter proto;
  if (!shape.known) return proto.boolean(3, true);
  for (std::int64_t d : shape.dims) proto.message(2, ProtoWriter().int64(1, d));
  return proto;
}

// AttrValue's field for a double's exact bits (psflow's; TF's readers skip unknown fields).
inline constexpr int kExactDoubleField = 1000;

PSFLOW_DECL ProtoWriter tensor_proto(const Tensor& tensor, GraphDefContent content) {
  ProtoWriter proto;
  proto.varint(1, static_cast<std::uint64_t>(psflow::tf_data_type(tensor.dtype())));
  proto.message(2, tensor_shape_proto(PartialShape::of_shape(tensor.shape())));
  if (tensor.dtype() == DType::string) {  // TensorProto.string_val, one field per element
    const bool values = content == GraphDefContent::complete ||
                        encoded_strings_size(tensor) <= kMaxTensorContentBytes;
    if (values)
      for (const std::string& s : tensor.values<std::string>()) proto.bytes(8, s);
    return proto;
  }
  const bool values =
      content == GraphDefContent::complete || tensor.nbytes() <= kMaxTensorContentBytes;
  if (values && tensor.raw_data())
    proto.bytes(4, std::string_view(static_cast<const char*>(tensor.raw_data()), tensor.nbytes()));
  return proto;
}

PSFLOW_DECL ProtoWriter attr_value_proto(const AttrValue& value, GraphDefContent content) {
  ProtoWriter proto;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>)
          proto.boolean(5, v);
        else if constexpr (std::is_same_v<V, std::int64_t>)
          proto.int64(3, v);
        else if constexpr (std::is_same_v<V, double>) {
          proto.float32(4, static_cast<float>(v));
          if (content == GraphDefContent::complete &&
              static_cast<double>(static_cast<float>(v)) != v)
            proto.float64(kExactDoubleField, v);
        } else if constexpr (std::is_same_v<V, std::string>)
          proto.bytes(2, v);
        else if constexpr (std::is_same_v<V, DType>)
          proto.varint(6, static_cast<std::uint64_t>(psflow::tf_data_type(v)));
        else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>)
          proto.message(1, ProtoWriter().packed_varints(3, v));
        else
          proto.message(8, tensor_proto(v, content));
      },
      value);
  return proto;
}

PSFLOW_DECL void add_attr(ProtoWriter& node, std::string_view key, const ProtoWriter& value) {
  node.message(5, ProtoWriter().bytes(1, key).message(2, value));
}

// ---- reading --------------------------------------------------------------------------------

// Reads one message's fields, failing with the node's name for context.
struct GraphDefParse {
  const ProtoReader& file;
  std::string node;  // the node being read, for errors

  [[noreturn]] void fail(const std::string& problem) const {
    file.fail(node.empty() ? problem : "node '" + node + "': " + problem);
  }
  ProtoReader reader(std::string_view bytes) const { return ProtoReader(bytes, file.what()); }
  void expect(const ProtoReader::Field& f, int wire_type, std::string_view message) const {
    if (f.wire_type != wire_type)
      fail(std::string(message) + " field " + std::to_string(f.number) + " has wire type " +
           std::to_string(f.wire_type));
  }
  DType dtype(std::uint64_t code) const {
    const auto d = dtype_from_tf_data_type(static_cast<std::uint32_t>(code));
    if (!d) fail("DataType " + std::to_string(code) + " is not one psflow has");
    return *d;
  }

  std::vector<std::int64_t> shape(std::string_view bytes) const {
    std::vector<std::int64_t> dims;
    ProtoReader r = reader(bytes);
    for (ProtoReader::Field f; r.next(f);) {
      if (f.number == 3 && f.value) fail("a constant has a shape of unknown rank");
      if (f.number != 2) continue;
      expect(f, 2, "TensorShapeProto");
      std::int64_t size = 0;
      ProtoReader dim = reader(f.bytes);
      for (ProtoReader::Field d; dim.next(d);)
        if (d.number == 1) size = static_cast<std::int64_t>(d.value);
      if (size < 0) fail("a constant has a dimension of unknown size");
      dims.push_back(size);
    }
    return dims;
  }

  // A string constant: one string_val per element (what tensor_proto writes).
  Tensor string_tensor(const std::vector<std::int64_t>& dims,
                       const std::vector<std::string_view>& strings) const {
    Shape tensor_shape;
    std::size_t elements = 1;
    for (std::int64_t d : dims) {
      tensor_shape.push_back(static_cast<std::size_t>(d));
      if (__builtin_mul_overflow(elements, static_cast<std::size_t>(d), &elements))
        fail("a constant's size overflows 64 bits");
    }
    if (strings.size() != elements)
      fail("a string constant of shape " + shape_string(tensor_shape) + " has " +
           std::to_string(strings.size()) + " values, expected " + std::to_string(elements) +
           (strings.empty() ? " (a TensorBoard GraphDef? export the model again)" : ""));
    Tensor t = Tensor::uninitialized(DType::string, tensor_shape);
    std::span<std::string> out = t.values<std::string>();
    for (std::size_t i = 0; i < elements; ++i) out[i].assign(strings[i]);
    return t;
  }

  Tensor tensor(std::string_view bytes) const {
    std::optional<DType> type;
    std::vector<std::int64_t> dims;
    std::vector<std::string_view> strings;
    std::optional<std::string_view> content;
    ProtoReader r = reader(bytes);
    for (ProtoReader::Field f; r.next(f);) {
      if (f.number == 1) {
        expect(f, 0, "TensorProto");
        type = dtype(f.value);
      } else if (f.number == 2) {
        expect(f, 2, "TensorProto");
        dims = shape(f.bytes);
      } else if (f.number == 4) {
        expect(f, 2, "TensorProto");
        content = f.bytes;
      } else if (f.number == 8) {
        expect(f, 2, "TensorProto");
        strings.emplace_back(f.bytes);
      }
    }
    if (!type) fail("a tensor attribute has no dtype");
    if (*type == DType::string) return string_tensor(dims, strings);
    Shape tensor_shape;
    std::size_t nbytes = dtype_size(*type);
    for (std::int64_t d : dims) {
      tensor_shape.push_back(static_cast<std::size_t>(d));
      if (__builtin_mul_overflow(nbytes, static_cast<std::size_t>(d), &nbytes))
        fail("a constant's size overflows 64 bits");
    }
    if (nbytes > 0 && !content)
      fail(
          "a constant was written without its values (a TensorBoard GraphDef?): export the "
          "model again");
    if (content && content->size() != nbytes)
      fail("a constant of shape " + shape_string(tensor_shape) + " has " +
           std::to_string(content->size()) + " bytes of values, expected " +
           std::to_string(nbytes));
    Tensor t = Tensor::uninitialized(*type, tensor_shape);
    if (nbytes > 0) std::memcpy(t.raw_data(), content->data(), nbytes);
    if (*type == DType::boolean)
      for (std::size_t i = 0; i < nbytes; ++i)
        if (static_cast<unsigned char>((*content)[i]) > 1)
          fail("a bool constant holds a byte other than 0 or 1");
    return t;
  }

  AttrValue attr_value(std::string_view bytes, const std::string& key) const {
    std::optional<AttrValue> value;
    std::optional<double> exact;
    ProtoReader r = reader(bytes);
    for (ProtoReader::Field f; r.next(f);) {
      switch (f.number) {
        case 1: {
          expect(f, 2, "AttrValue.list");
          std::vector<std::int64_t> ints;
          ProtoReader list = reader(f.bytes);
          for (ProtoReader::Field l; list.next(l);) {
            if (l.number != 3) continue;
            if (l.wire_type == 2) {
              auto more = list.packed_varints(l.bytes);
              ints.insert(ints.end(), more.begin(), more.end());
            } else {
              expect(l, 0, "ListValue.i");
              ints.push_back(static_cast<std::int64_t>(l.value));
            }
          }
          value = std::move(ints);
          break;
        }
        case 2:
          expect(f, 2, "AttrValue.s");
          value = std::string(f.bytes);
          break;
        case 3:
          expect(f, 0, "AttrValue.i");
          value = static_cast<std::int64_t>(f.value);
          break;
        case 4:
          expect(f, 5, "AttrValue.f");
          value = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(f.value)));
          break;
        case 5:
          expect(f, 0, "AttrValue.b");
          value = f.value != 0;
          break;
        case 6:
          expect(f, 0, "AttrValue.type");
          value = dtype(f.value);
          break;
        case 8:
          expect(f, 2, "AttrValue.tensor");
          value = tensor(f.bytes);
          break;
        case kExactDoubleField:
          expect(f, 1, "AttrValue (exact double)");
          exact = std::bit_cast<double>(f.value);
          break;
        default:
          fail("attribute '" + key + "' has a kind psflow does not have (AttrValue field " +
               std::to_string(f.number) + ")");
      }
    }
    if (exact && value && std::holds_alternative<double>(*value)) value = *exact;
    if (!value) fail("attribute '" + key + "' has no value");
    return *value;
  }

  NodeDef node_def(std::string_view bytes) {
    NodeDef def;
    ProtoReader r = reader(bytes);
    std::vector<std::pair<std::string, std::string_view>> attrs;
    for (ProtoReader::Field f; r.next(f);) {
      if (f.number >= 1 && f.number <= 5) expect(f, 2, "NodeDef");
      switch (f.number) {
        case 1:
          def.name = std::string(f.bytes);
          node = def.name;
          break;
        case 2:
          def.op = std::string(f.bytes);
          break;
        case 3:
          def.inputs.emplace_back(f.bytes);
          break;
        case 4:
          def.device = std::string(f.bytes);
          break;
        case 5: {
          std::string key;
          std::string_view value;
          ProtoReader entry = reader(f.bytes);
          for (ProtoReader::Field e; entry.next(e);) {
            if (e.number == 1) key = std::string(e.bytes);
            if (e.number == 2) value = e.bytes;
          }
          attrs.emplace_back(std::move(key), value);
          break;
        }
        default:
          break;
      }
    }
    if (def.name.empty()) fail("a node has no name");
    if (def.op.empty()) fail("it has no op type");
    for (const auto& [key, value] : attrs)
      if (key != "_output_shapes") def.attrs[key] = attr_value(value, key);
    // TF writes output 0 as "node"; import_graph_def takes "node:index".
    for (std::string& in : def.inputs)
      if (!in.empty() && in[0] != '^' && in.find(':') == std::string::npos) in += ":0";
    return def;
  }
};

}  // namespace detail

PSFLOW_DECL std::string serialize_graph_def(const Graph& graph, const DevicePlacement& placement,
                                            GraphDefContent content) {
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
      detail::add_attr(node_def, key, detail::attr_value_proto(value, content));
    ProtoWriter shapes;
    for (const OutputSpec& out : node.outputs)
      shapes.message(7, detail::tensor_shape_proto(out.shape));
    detail::add_attr(node_def, "_output_shapes", ProtoWriter().message(1, shapes));
    graph_def.message(1, node_def);
  }
  graph_def.message(4, ProtoWriter().int64(1, kGraphDefProducer));
  return graph_def.str();
}

PSFLOW_DECL GraphDef parse_graph_def(std::string_view bytes, const std::string& what) {
  const ProtoReader file(bytes, what);
  GraphDef def;
  ProtoReader r(bytes, what);
  for (ProtoReader::Field f; r.next(f);) {
    if (f.number != 1) continue;  // versions, library: nothing psflow runs
    detail::GraphDefParse parse{file, {}};
    parse.expect(f, 2, "GraphDef.node");
    def.nodes.push_back(parse.node_def(f.bytes));
  }
  return def;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
