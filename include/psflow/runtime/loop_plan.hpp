// LoopPlan: where each op of an executor's plan runs when the plan holds a while_loop
// (graph/while_loop.hpp), worked out once when the executor is built.
//
// Every op runs in a frame: the step's root frame, or the frame of a loop, once per iteration.
// An Enter runs in the enclosing frame and passes its value into the loop's frame; an Exit runs
// in the loop's frame and passes its value out; a NextIteration passes its value to the next
// iteration of its own frame; every other op's value stays in its frame and iteration. So a
// walk along the edges from the plan's sources gives each op its frame, and an op reached in two
// frames is a malformed loop. In a loop's frame, the values an op takes are kept per input
// (input_base), because an iteration's inputs come from several frames and iterations.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/graph/graph.hpp"

namespace psflow {

struct LoopPlan {
  enum class Kind : std::uint8_t { plain, enter, exit, next_iteration, merge };
  struct Frame {
    int parent = -1;  // -1 for the root frame
    std::string name;
    std::int64_t parallel_iterations = 1;
    int num_nodes = 0;
    int num_inputs = 0;        // input slots of an iteration
    int num_enters = 0;        // Enters whose value comes into this frame, once per frame instance
    std::vector<int> members;  // its plan nodes
    std::vector<int> exits;    // its Exits, whose values leave it
    // Its ops in an order that runs one iteration (an edge out of a NextIteration goes to the
    // next iteration); empty when there is none: the frame holds a nested loop.
    std::vector<int> order;
    bool runs_inline = false;  // set by the executor: see runtime/executor.hpp
  };
  struct Node {
    Kind kind = Kind::plain;
    int frame = -1;
    int local = 0;            // index among its frame's ops
    int input_base = 0;       // its first input slot in an iteration of its frame
    int initial_pending = 0;  // edges to wait for (a Merge: its control edges only)
    int data_edges = 0;       // a Merge: its data inputs computed in the plan
    bool fed_input = false;   // a Merge: an input is a feed, so live from the start
    int into_frame = -1;      // an Enter: the frame it enters
    bool constant = false;    // an Enter: is_constant (the value is the same in every iteration)
  };
  struct Edge {
    int src_output = -1;    // -1: a control edge
    int dst = 0;            // plan node
    int dst_input = -1;     // -1: a control edge
    bool last_use = false;  // the last edge of its output: the value may move along it
  };

  std::vector<Frame> frames;  // frames[0]: the root frame
  std::vector<Node> nodes;    // per plan node
  std::vector<std::vector<Edge>> out_edges;

  // True when the plan holds a loop (an Enter), so that it needs frames.
  static bool needed(const std::vector<const detail::Node*>& nodes) {
    for (const detail::Node* n : nodes)
      if (n->type == "Enter" || n->type == "RefEnter") return true;
    return false;
  }

  // `nodes`: the plan's nodes; `plan_index`: graph node id -> plan node (-1: not in the plan);
  // `fed[i][k]`: input k of plan node i is a feed. Throws InvalidArgument for a malformed loop.
  LoopPlan(const std::vector<const detail::Node*>& nodes, const std::vector<int>& plan_index,
           const std::vector<std::vector<bool>>& fed) {
    const std::size_t n = nodes.size();
    this->nodes.resize(n);
    out_edges.resize(n);
    std::vector<int> pending_sources(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const detail::Node& node = *nodes[i];
      Node& info = this->nodes[i];
      const std::string& type = node.type;
      if (type == "Enter" || type == "RefEnter") info.kind = Kind::enter;
      if (type == "Exit" || type == "RefExit") info.kind = Kind::exit;
      if (type == "NextIteration" || type == "RefNextIteration") info.kind = Kind::next_iteration;
      if (type == "Merge") info.kind = Kind::merge;
      for (std::size_t k = 0; k < node.inputs.size(); ++k) {
        if (fed[i][k]) {
          info.fed_input = true;
          continue;
        }
        const int src = plan_index[static_cast<std::size_t>(node.inputs[k].node)];
        out_edges[static_cast<std::size_t>(src)].push_back(
            Edge{node.inputs[k].index, static_cast<int>(i), static_cast<int>(k)});
        ++pending_sources[i];
        if (info.kind == Kind::merge)
          ++info.data_edges;
        else
          ++info.initial_pending;
      }
      for (int c : node.control_inputs) {
        const int src = plan_index[static_cast<std::size_t>(c)];
        if (src < 0) continue;  // pruned away by a feed
        out_edges[static_cast<std::size_t>(src)].push_back(Edge{-1, static_cast<int>(i), -1});
        ++pending_sources[i];
        ++info.initial_pending;
      }
    }

    for (std::size_t u = 0; u < n; ++u) {  // the last edge of each output, found from the end
      std::vector<bool> seen(nodes[u]->outputs.size(), false);
      auto& edges = out_edges[u];
      for (auto e = edges.rbegin(); e != edges.rend(); ++e)
        if (e->src_output >= 0 && !seen[static_cast<std::size_t>(e->src_output)]) {
          e->last_use = true;
          seen[static_cast<std::size_t>(e->src_output)] = true;
        }
    }

    // Each op's frame: a walk from the plan's sources, which run in the root frame.
    frames.emplace_back();                              // the root frame
    std::unordered_map<std::string, int> child_frames;  // "<parent>|<name>" -> frame
    std::vector<int> stack;
    for (std::size_t i = 0; i < n; ++i)
      if (pending_sources[i] == 0) {
        this->nodes[i].frame = 0;
        stack.push_back(static_cast<int>(i));
      }
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      const Node& info = this->nodes[static_cast<std::size_t>(u)];
      int to = info.frame;
      const detail::Node& node = *nodes[static_cast<std::size_t>(u)];
      if (info.kind == Kind::enter) {
        const std::string name =
            detail::attr_or_throw<std::string>(node.attrs, "frame_name", node.name);
        auto [it, inserted] = child_frames.try_emplace(std::to_string(to) + "|" + name, 0);
        if (inserted) {
          it->second = static_cast<int>(frames.size());
          Frame& frame = frames.emplace_back();
          frame.parent = to;
          frame.name = name;
          frame.parallel_iterations = std::max<std::int64_t>(
              1, detail::attr_or_throw<std::int64_t>(node.attrs, "parallel_iterations", node.name));
        }
        to = it->second;
        this->nodes[static_cast<std::size_t>(u)].into_frame = to;
        this->nodes[static_cast<std::size_t>(u)].constant =
            detail::attr_or_throw<bool>(node.attrs, "is_constant", node.name);
        ++frames[static_cast<std::size_t>(to)].num_enters;
      } else if (info.kind == Kind::exit) {
        if (to == 0)
          throw InvalidArgument("Exit '" + node.name + "' is not inside a while_loop's frame");
        to = frames[static_cast<std::size_t>(to)].parent;
      }
      for (const Edge& e : out_edges[static_cast<std::size_t>(u)]) {
        Node& dst = this->nodes[static_cast<std::size_t>(e.dst)];
        if (dst.frame == to) continue;
        if (dst.frame >= 0)
          throw InvalidArgument("'" + nodes[static_cast<std::size_t>(e.dst)]->name +
                                "' takes values from two loop frames ('" + frame_label(dst.frame) +
                                "' and '" + frame_label(to) +
                                "'): an op inside a while_loop may use values from outside it "
                                "only as the loop makes them enter (build it in cond or body)");
        dst.frame = to;
        stack.push_back(e.dst);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      Node& info = this->nodes[i];
      if (info.frame < 0)  // only on a cycle without an Enter: not a loop psflow built
        throw InvalidArgument("'" + nodes[i]->name + "' lies on a cycle that is no while_loop");
      Frame& frame = frames[static_cast<std::size_t>(info.frame)];
      frame.members.push_back(static_cast<int>(i));
      if (info.kind == Kind::exit) frame.exits.push_back(static_cast<int>(i));
      info.local = frame.num_nodes++;
      info.input_base = frame.num_inputs;
      frame.num_inputs += static_cast<int>(nodes[i]->inputs.size());
    }
    for (std::size_t f = 1; f < frames.size(); ++f) order_iteration(static_cast<int>(f));
  }

  // Frame f's `order`: its ops sorted along the edges within one iteration.
  void order_iteration(int f) {
    Frame& frame = frames[static_cast<std::size_t>(f)];
    std::vector<int> pending(static_cast<std::size_t>(frame.num_nodes), 0);
    static const std::vector<Edge> none;
    auto within = [&](int u) -> const std::vector<Edge>& {  // u's edges within its iteration
      return nodes[static_cast<std::size_t>(u)].kind == Kind::next_iteration
                 ? none
                 : out_edges[static_cast<std::size_t>(u)];
    };
    for (int u : frame.members) {
      if (nodes[static_cast<std::size_t>(u)].kind == Kind::enter) return;  // a nested loop
      for (const Edge& e : within(u))
        if (nodes[static_cast<std::size_t>(e.dst)].frame == f)
          ++pending[static_cast<std::size_t>(nodes[static_cast<std::size_t>(e.dst)].local)];
    }
    std::vector<int> ready;
    for (int u : frame.members)
      if (pending[static_cast<std::size_t>(nodes[static_cast<std::size_t>(u)].local)] == 0)
        ready.push_back(u);
    while (!ready.empty()) {
      const int u = ready.back();
      ready.pop_back();
      frame.order.push_back(u);
      for (const Edge& e : within(u)) {
        const Node& dst = nodes[static_cast<std::size_t>(e.dst)];
        if (dst.frame == f && --pending[static_cast<std::size_t>(dst.local)] == 0)
          ready.push_back(e.dst);
      }
    }
    if (frame.order.size() != frame.members.size()) frame.order.clear();
  }

  std::string frame_label(int frame) const {
    return frame == 0 ? std::string("the step") : frames[static_cast<std::size_t>(frame)].name;
  }
};

}  // namespace psflow
