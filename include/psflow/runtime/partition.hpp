// Partitioner: splits the placed nodes of one run into one GraphDef per device, cutting every
// edge between devices into a _Send on the producer's side and a _Recv on the consumer's side.
// One Send/Recv pair carries a tensor to a device however many consumers it has there; a
// control edge between devices becomes a tiny tensor sent after the controlling op. Fed tensors
// come from _Feed nodes on the client's device, and fetches of tensors produced elsewhere are
// received there too, so the client's partition alone talks to the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "psflow/graph/graph_def.hpp"
#include "psflow/graph/sendrecv_ops.hpp"
#include "psflow/runtime/rendezvous.hpp"

namespace psflow {

// One tensor (or control signal) crossing from one device to another in each step.
struct Transfer {
  std::string tensor;  // producer's tensor name, e.g. "w/read:0" ("^op" for a control edge)
  std::string src_device;
  std::string dst_device;
  std::string key;  // rendezvous key
  DType dtype = DType::float32;
  PartialShape shape;
  bool control = false;
};

struct PartitionPlan {
  std::string client_device;               // where the master (and so the caller) is
  std::map<std::string, GraphDef> graphs;  // by device; always holds the client's device
  std::vector<std::string> feed_nodes;     // node in the client's graph standing for feed i
  std::vector<std::string> fetch_tensors;  // tensor in the client's graph holding fetch i
  std::vector<std::pair<std::string, std::string>> placement;  // (op, device) in graph order
  std::vector<Transfer> transfers;
};

inline PartitionPlan partition_graph(
    const Graph& graph, const std::vector<int>& nodes, const std::vector<std::string>& assigned,
    const std::vector<TensorId>& feeds, const std::vector<TensorId>& fetches,
    const std::string& client_device,
    const std::function<std::uint64_t(const std::string&)>& incarnation_of) {
  PartitionPlan plan;
  plan.client_device = client_device;
  plan.graphs[client_device];
  std::map<int, std::string> device_of;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    device_of[nodes[i]] = assigned[i];
    plan.placement.emplace_back(graph.node(nodes[i]).name, assigned[i]);
  }

  // Where a tensor comes from: (device, name in that device's graph).
  auto source_of = [&](TensorId t) -> std::pair<std::string, std::string> {
    for (std::size_t f = 0; f < feeds.size(); ++f)
      if (feeds[f] == t) return {client_device, plan.feed_nodes[f] + ":0"};
    return {device_of.at(t.node), graph.node(t.node).name + ":" + std::to_string(t.index)};
  };
  for (std::size_t f = 0; f < feeds.size(); ++f) {
    const auto& spec = graph.node(feeds[f].node).outputs[static_cast<std::size_t>(feeds[f].index)];
    plan.feed_nodes.push_back("_feed_" + std::to_string(f));
    plan.graphs[client_device].nodes.push_back(NodeDef{
        plan.feed_nodes.back(),
        "_Feed",
        {},
        client_device,
        {{"dtype", spec.dtype}, {"shape", spec.shape.dims}, {"shape_known", spec.shape.known}}});
  }

  // (tensor in its source graph, destination device) -> Recv node name in the destination.
  std::map<std::pair<std::string, std::string>, std::string> received;
  std::map<std::pair<std::string, std::string>, std::string> control_received;  // (op, dst)
  int counter = 0;
  auto transfer = [&](const std::string& src_device, const std::string& src_tensor,
                      const std::string& dst_device, const OutputSpec& spec,
                      const std::string& display, bool control) -> std::string {
    auto [it, inserted] = received.try_emplace({src_device + "|" + src_tensor, dst_device});
    if (!inserted) return it->second;
    const int k = counter++;
    const std::string send_name = "_send_" + std::to_string(k);
    const std::string recv_name = "_recv_" + std::to_string(k);
    const std::int64_t incarnation = static_cast<std::int64_t>(incarnation_of(src_device));
    AttrMap attrs = {{"tensor_name", display},
                     {"send_device", src_device},
                     {"send_device_incarnation", incarnation},
                     {"recv_device", dst_device}};
    plan.graphs[src_device].nodes.push_back(
        NodeDef{send_name, "_Send", {src_tensor}, src_device, attrs});
    attrs["dtype"] = spec.dtype;
    attrs["shape"] = spec.shape.dims;
    attrs["shape_known"] = spec.shape.known;
    plan.graphs[dst_device].nodes.push_back(NodeDef{recv_name, "_Recv", {}, dst_device, attrs});
    plan.transfers.push_back(Transfer{
        display, src_device, dst_device,
        rendezvous_key(src_device, static_cast<std::uint64_t>(incarnation), dst_device, display),
        spec.dtype, spec.shape, control});
    it->second = recv_name;
    return recv_name;
  };

  for (int id : nodes) {
    const std::string& device = device_of.at(id);
    NodeDef def = to_node_def(graph, id);
    def.device = device;
    def.inputs.clear();
    const auto& node = graph.node(id);
    for (const TensorId& in : node.inputs) {
      auto [src_device, src_tensor] = source_of(in);
      if (src_device == device) {
        def.inputs.push_back(src_tensor);
      } else {
        const auto& spec = graph.node(in.node).outputs[static_cast<std::size_t>(in.index)];
        OutputSpec value_spec{spec.dtype, spec.shape, false};  // a reference arrives as its value
        def.inputs.push_back(transfer(src_device, src_tensor, device, value_spec,
                                      graph.node(in.node).name + ":" + std::to_string(in.index),
                                      false) +
                             ":0");
      }
    }
    for (int c : node.control_inputs) {
      auto found = device_of.find(c);
      if (found == device_of.end()) continue;  // pruned away by a feed
      const std::string& src_device = found->second;
      const std::string& control_name = graph.node(c).name;
      if (src_device == device) {
        def.inputs.push_back("^" + control_name);
        continue;
      }
      // A control edge across devices: send a scalar produced after the controlling op.
      auto [it, inserted] = control_received.try_emplace({control_name, device});
      if (inserted) {
        const std::string signal = "_ctrl_" + std::to_string(counter);
        plan.graphs[src_device].nodes.push_back(NodeDef{signal,
                                                        "Const",
                                                        {"^" + control_name},
                                                        src_device,
                                                        {{"value", Tensor(std::int32_t{0})}}});
        it->second = transfer(src_device, signal + ":0", device,
                              OutputSpec{DType::int32, PartialShape::scalar(), false},
                              "^" + control_name, true);
      }
      def.inputs.push_back("^" + it->second);
    }
    plan.graphs[device].nodes.push_back(std::move(def));
  }

  for (const TensorId& f : fetches) {
    auto [src_device, src_tensor] = source_of(f);
    if (src_device == client_device) {
      plan.fetch_tensors.push_back(src_tensor);
    } else {
      const auto& spec = graph.node(f.node).outputs[static_cast<std::size_t>(f.index)];
      plan.fetch_tensors.push_back(
          transfer(src_device, src_tensor, client_device, OutputSpec{spec.dtype, spec.shape, false},
                   graph.node(f.node).name + ":" + std::to_string(f.index), false) +
          ":0");
    }
  }
  return plan;
}

}  // namespace psflow
