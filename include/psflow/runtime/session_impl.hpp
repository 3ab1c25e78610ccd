// What a Session delegates to: the SessionImpl interface (in-process or remote), the options
// and feeds a session takes, the registry that maps target prefixes ("psflow://") to session
// factories, and the argument checks every kind of session shares.
//
// The factory registry is thread-safe; SessionImpl implementations must let run() be called
// from several threads at once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/runtime/partition.hpp"
#include "psflow/runtime/step_stats.hpp"

namespace psflow {

using FeedMap = std::vector<std::pair<Output, Tensor>>;

struct SessionOptions {
  // Threads that run expensive ops in parallel: 0 = the shared pool (one thread per core),
  // 1 = run everything on the calling thread.
  std::size_t inter_op_threads = 0;
};

namespace detail {

// What Session delegates to: in-process or remote.
class SessionImpl {
 public:
  virtual ~SessionImpl() = default;
  virtual std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                  const std::vector<Operation>& targets) = 0;
  // A run with options: with options.trace, `metadata` (never null then) receives the step's
  // statistics of every task. The default ignores the options.
  virtual std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                  const std::vector<Operation>& targets, const RunOptions&,
                                  RunMetadata*) {
    return run(fetches, feeds, targets);
  }
  virtual void close() {}
  // Where each op of this run would execute and which tensors would cross devices (the
  // distributed session's answer; an in-process session has nothing to say).
  virtual std::optional<PartitionPlan> describe(const std::vector<Output>&, const FeedMap&,
                                                const std::vector<Operation>&) {
    return std::nullopt;
  }
};

using SessionFactory = std::function<std::unique_ptr<SessionImpl>(Graph&, std::string_view target,
                                                                  const SessionOptions&)>;

inline std::map<std::string, SessionFactory>& session_factories() {
  detail::link_compiled_library();
  static std::map<std::string, SessionFactory> factories;
  return factories;
}
inline std::mutex& session_factories_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Lets the distributed layer serve targets starting with `prefix` (e.g. "psflow://").
inline bool register_session_factory(const std::string& prefix, SessionFactory factory) {
  std::lock_guard lock(session_factories_mutex());
  session_factories()[prefix] = std::move(factory);
  return true;
}

// Checks one run's arguments against the graph; shared by local and remote sessions.
inline void validate_run_arguments(const Graph& graph, const std::vector<Output>& fetches,
                                   const FeedMap& feeds, const std::vector<Operation>& targets) {
  for (const auto& f : fetches) {
    if (!f.valid())
      throw InvalidArgument("Session::run: a fetch is an empty Output (default-constructed)");
    if (&f.graph() != &graph)
      throw InvalidArgument("Session::run: fetch '" + f.name() + "' belongs to another Graph");
  }
  for (const auto& t : targets) {
    if (!t.valid())
      throw InvalidArgument("Session::run: a target is an empty Operation (default-constructed)");
    if (&t.graph() != &graph)
      throw InvalidArgument("Session::run: target '" + t.name() + "' belongs to another Graph");
  }
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const auto& [out, value] = feeds[i];
    if (!out.valid()) throw InvalidArgument("Session::run: a feed key is an empty Output");
    if (&out.graph() != &graph)
      throw InvalidArgument("Session::run: feed '" + out.name() + "' belongs to another Graph");
    // Named only for an error: a valid run builds no strings.
    const auto what = [&out] {
      return out.op().type() == "Placeholder" ? "placeholder '" + out.op().name() + "'"
                                              : "tensor '" + out.name() + "'";
    };
    if (value.empty())
      throw InvalidArgument("Session::run: the value fed to " + what() + " is an empty Tensor");
    if (value.dtype() != out.dtype())
      throw InvalidArgument("Session::run: cannot feed a " + value.summary() + " value to " +
                            what() + ", which has dtype " + std::string(dtype_name(out.dtype())));
    if (!out.shape().is_compatible_with(value.shape()))
      throw InvalidArgument("Session::run: cannot feed a value of shape " +
                            shape_string(value.shape()) + " to " + what() + ", which has shape " +
                            out.shape().to_string());
    if (out.is_ref())
      throw InvalidArgument("Session::run: cannot feed variable reference '" + out.name() + "'");
    for (std::size_t j = 0; j < i; ++j)
      if (feeds[j].first == out) throw InvalidArgument("Session::run: " + what() + " is fed twice");
  }
}

// Unfed placeholders among the nodes to run: a clear error before anything runs.
inline void check_placeholders_fed(const Graph& graph, const std::vector<int>& nodes) {
  for (int id : nodes) {
    const auto& node = graph.node(id);
    if (node.type != "Placeholder") continue;
    throw InvalidArgument("You must feed a value for placeholder tensor '" + node.name +
                          "' with dtype " + std::string(dtype_name(node.outputs[0].dtype)) +
                          " and shape " + node.outputs[0].shape.to_string() +
                          " (pass it in the feeds of Session::run)");
  }
}

// Fetched tensors belong to the caller alone: one still sharing its buffer with a constant, a
// variable or a feed is copied, so writing into it can never change the graph's state.
inline std::vector<Tensor> caller_owned(std::vector<Tensor> fetches) {
  for (auto& t : fetches)
    if (!t.empty() && !t.is_sole_owner()) t = t.deep_copy();
  return fetches;
}

// Signature of one run: which executor to use.
inline std::string run_signature(const std::vector<Output>& fetches, const FeedMap& feeds,
                                 const std::vector<Operation>& targets) {
  std::string key;
  for (const auto& f : fetches)
    key += std::to_string(f.op().id()) + ":" + std::to_string(f.index()) + ",";
  key += "|";
  for (const auto& [out, value] : feeds)
    key += std::to_string(out.op().id()) + ":" + std::to_string(out.index()) + ",";
  key += "|";
  for (const auto& t : targets) key += std::to_string(t.id()) + ",";
  return key;
}

}  // namespace detail

}  // namespace psflow
