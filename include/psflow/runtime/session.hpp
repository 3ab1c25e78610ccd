// Session: runs fetches/targets of a Graph, TF1-style.
//
// Session(graph) runs every device in this process (runtime/local_session.hpp); its variables
// live in resource managers kept per graph, so they persist across run() calls and across
// Sessions on the same graph. Session(graph, target) connects to a Server's master
// (psflow/distributed registers that factory; include psflow/psflow.hpp). For each new (feeds,
// fetches, targets) signature the session prunes the graph to what is needed and builds an
// executor once; later runs reuse it.
//
// run() may be called from several threads at once. close() makes later runs fail.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/runtime/session_impl.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include "psflow/runtime/local_session.hpp"
#endif

namespace psflow {

class Session {
 public:
  // In-process: every device of the graph runs in this process.
  explicit Session(Graph& graph, SessionOptions options = {});
  // Distributed: `target` is Server::target() of the master task ("" or "local" means
  // in-process). Throws InvalidArgument when no session type serves `target`.
  Session(Graph& graph, std::string_view target, SessionOptions options = {});

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  Session(Session&&) noexcept = default;
  Session& operator=(Session&&) noexcept = default;
  ~Session();

  // Runs what `fetches` and `targets` need, with `feeds` replacing those tensors; returns the
  // fetched values in order. Throws the typed psflow::Error of the first failing op.
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds = {},
                          const std::vector<Operation>& targets = {});
  void run(const Operation& target, const FeedMap& feeds = {});
  // TF's Run(RunOptions, ..., RunMetadata*): with options.trace, `metadata` (required then)
  // receives the step's per-op and per-transfer times on every task involved, on this
  // process's clock (runtime/step_stats.hpp; observe/chrome_trace.hpp renders it). Untraced
  // runs cost what the other overloads cost.
  std::vector<Tensor> run(const RunOptions& options, const std::vector<Output>& fetches,
                          const FeedMap& feeds, const std::vector<Operation>& targets,
                          RunMetadata* metadata);

  // Later runs throw FailedPrecondition.
  void close();
  bool closed() const noexcept { return impl_ == nullptr; }
  // The placement and cross-process transfers of a run (see observe/explain.hpp); nullopt for
  // an in-process session.
  std::optional<PartitionPlan> describe(const std::vector<Output>& fetches,
                                        const FeedMap& feeds = {},
                                        const std::vector<Operation>& targets = {});
  Graph& graph() const noexcept { return *graph_; }

 private:
  detail::SessionImpl& impl();

  Graph* graph_;
  std::unique_ptr<detail::SessionImpl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Definitions, compiled where psflow's implementation is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

PSFLOW_DECL Session::Session(Graph& graph, SessionOptions options)
    : graph_(&graph), impl_(std::make_unique<detail::LocalSession>(graph, options)) {}

PSFLOW_DECL Session::Session(Graph& graph, std::string_view target, SessionOptions options)
    : graph_(&graph) {
  if (target.empty() || target == "local") {
    impl_ = std::make_unique<detail::LocalSession>(graph, options);
    return;
  }
  detail::SessionFactory factory;
  {
    std::lock_guard lock(detail::session_factories_mutex());
    for (const auto& [prefix, f] : detail::session_factories())
      if (target.substr(0, prefix.size()) == prefix) factory = f;
  }
  if (!factory)
    throw InvalidArgument("no session type serves target '" + std::string(target) +
                          "': pass Server::target() (e.g. \"psflow://127.0.0.1:2222\") and include "
                          "psflow/psflow.hpp, or \"\" for an in-process session");
  impl_ = factory(graph, target, options);
}

PSFLOW_DECL Session::~Session() {
  if (impl_) impl_->close();
}

PSFLOW_DECL std::vector<Tensor> Session::run(const std::vector<Output>& fetches,
                                             const FeedMap& feeds,
                                             const std::vector<Operation>& targets) {
  return impl().run(fetches, feeds, targets);
}

PSFLOW_DECL void Session::run(const Operation& target, const FeedMap& feeds) {
  impl().run({}, feeds, {target});
}

PSFLOW_DECL std::vector<Tensor> Session::run(const RunOptions& options,
                                             const std::vector<Output>& fetches,
                                             const FeedMap& feeds,
                                             const std::vector<Operation>& targets,
                                             RunMetadata* metadata) {
  if (options.trace && !metadata)
    throw InvalidArgument(
        "Session::run: RunOptions.trace is set but no RunMetadata was given to fill: pass one");
  return impl().run(fetches, feeds, targets, options, metadata);
}

PSFLOW_DECL void Session::close() {
  if (impl_) {
    impl_->close();
    impl_.reset();
  }
}

PSFLOW_DECL std::optional<PartitionPlan> Session::describe(const std::vector<Output>& fetches,
                                                           const FeedMap& feeds,
                                                           const std::vector<Operation>& targets) {
  return impl().describe(fetches, feeds, targets);
}

PSFLOW_DECL detail::SessionImpl& Session::impl() {
  if (!impl_)
    throw FailedPrecondition("this Session has been closed: create a new Session to run the graph");
  return *impl_;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow
