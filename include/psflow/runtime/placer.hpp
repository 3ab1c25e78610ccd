// Placer: decides the device each node of a run executes on.
//
// Nodes that must share a device form colocation groups: a node and the node it was created
// colocated with (a variable's initializer, read and updates), and a node and the producer of
// a variable reference it consumes. A group's requested devices are merged (a conflict is an
// error naming both ops); the partial spec is completed against the devices that exist,
// preferring the session's own device; a group with no request runs on the session's device.
#pragma once

#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "psflow/core/device_spec.hpp"
#include "psflow/core/error.hpp"
#include "psflow/graph/graph.hpp"

namespace psflow {

namespace detail {

class UnionFind {
 public:
  explicit UnionFind(std::size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int find(int x) {
    while (parent_[static_cast<std::size_t>(x)] != x) {
      parent_[static_cast<std::size_t>(x)] =
          parent_[static_cast<std::size_t>(parent_[static_cast<std::size_t>(x)])];
      x = parent_[static_cast<std::size_t>(x)];
    }
    return x;
  }
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent_[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);
  }

 private:
  std::vector<int> parent_;
};

inline std::string join_devices(const std::vector<std::string>& devices) {
  std::string out;
  for (const auto& d : devices) out += (out.empty() ? "" : ", ") + d;
  return out;
}

}  // namespace detail

// Returns the assigned device of every node in `nodes` (indexed like `nodes`).
// `devices`: full names of the devices that exist; `default_device`: the session's own.
inline std::vector<std::string> place_nodes(const Graph& graph, const std::vector<int>& nodes,
                                            const std::vector<std::string>& devices,
                                            const std::string& default_device) {
  detail::UnionFind groups(graph.num_nodes());
  for (int id : nodes) {
    const auto& node = graph.node(id);
    if (node.colocate_with >= 0) groups.unite(id, node.colocate_with);
    for (const TensorId& in : node.inputs)
      if (graph.node(in.node).outputs[static_cast<std::size_t>(in.index)].is_ref)
        groups.unite(id, in.node);
  }

  // Merge the requests of each group, remembering which op set each field first.
  struct Request {
    DeviceSpec spec;
    int first_op = -1;
  };
  std::unordered_map<int, Request> requests;
  auto merge_into = [&](Request& r, int id) {
    const auto& node = graph.node(id);
    const DeviceSpec spec = DeviceSpec::parse(node.device);
    if (spec.empty()) return;
    auto conflict = [&](bool clash) {
      if (clash)
        throw InvalidArgument(
            "ops '" + graph.node(r.first_op).name + "' (" + r.spec.to_string() + ") and '" +
            node.name + "' (" + node.device +
            ") must run on one device (colocated, or one updates the other's "
            "variable) but ask for different devices: make their device scopes agree");
    };
    if (r.first_op >= 0) {
      conflict(spec.job && r.spec.job && *spec.job != *r.spec.job);
      conflict(spec.replica && r.spec.replica && *spec.replica != *r.spec.replica);
      conflict(spec.task && r.spec.task && *spec.task != *r.spec.task);
      conflict(spec.device_type && r.spec.device_type && *spec.device_type != *r.spec.device_type);
      conflict(spec.device_index && r.spec.device_index &&
               *spec.device_index != *r.spec.device_index);
    } else {
      r.first_op = id;
    }
    r.spec.merge_from(spec);
  };
  for (int id : nodes) {
    Request& r = requests[groups.find(id)];
    merge_into(r, id);
    if (const int root = graph.node(id).colocate_with; root >= 0) merge_into(r, root);
  }

  std::unordered_map<int, std::string> chosen;
  std::vector<std::string> out;
  out.reserve(nodes.size());
  for (int id : nodes) {
    const int group = groups.find(id);
    auto it = chosen.find(group);
    if (it == chosen.end()) {
      const Request& r = requests[group];
      std::string device;
      if (r.spec.empty() || r.spec.is_satisfied_by(DeviceSpec::parse(default_device))) {
        device = default_device;
      } else {
        for (const auto& d : devices)
          if (r.spec.is_satisfied_by(DeviceSpec::parse(d))) {
            device = d;
            break;
          }
      }
      if (device.empty())
        throw InvalidArgument(
            "op '" + graph.node(r.first_op >= 0 ? r.first_op : id).name + "' (" +
            graph.node(id).type + ") asks for device '" + r.spec.to_string() +
            "', which is not in the cluster. Devices that exist: " + detail::join_devices(devices));
      it = chosen.emplace(group, device).first;
    }
    out.push_back(it->second);
  }
  return out;
}

}  // namespace psflow
