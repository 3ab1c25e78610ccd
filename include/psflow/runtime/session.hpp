// Session: runs fetches/targets of a Graph, TF1-style.
//
// Session(graph) runs every device in this process; its variables live in resource managers
// kept per graph, so they persist across run() calls and across Sessions on the same graph.
// Session(graph, target) connects to a Server's master (psflow/distributed registers that
// factory; include psflow/psflow.hpp). For each new (feeds, fetches, targets) signature the
// session prunes the graph to what is needed and builds an executor once; later runs reuse it.
//
// run() may be called from several threads at once. close() makes later runs fail.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/graph/graph.hpp"
#include "psflow/graph/subgraph.hpp"
#include "psflow/runtime/executor.hpp"
#include "psflow/runtime/partition.hpp"

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
  virtual void close() {}
  // Where each op of this run would execute and which tensors would cross devices (the
  // distributed session's answer; an in-process session has nothing to say).
  virtual std::optional<PartitionPlan> describe(const std::vector<Output>&, const FeedMap&,
                                                const std::vector<Operation>&) {
    return std::nullopt;
  }
};

using SessionFactory =
    std::function<std::unique_ptr<SessionImpl>(Graph&, std::string_view target, const SessionOptions&)>;

inline std::map<std::string, SessionFactory>& session_factories() {
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
    if (!f.valid()) throw InvalidArgument("Session::run: a fetch is an empty Output (default-constructed)");
    if (&f.graph() != &graph) throw InvalidArgument("Session::run: fetch '" + f.name() + "' belongs to another Graph");
  }
  for (const auto& t : targets) {
    if (!t.valid()) throw InvalidArgument("Session::run: a target is an empty Operation (default-constructed)");
    if (&t.graph() != &graph) throw InvalidArgument("Session::run: target '" + t.name() + "' belongs to another Graph");
  }
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const auto& [out, value] = feeds[i];
    if (!out.valid()) throw InvalidArgument("Session::run: a feed key is an empty Output");
    if (&out.graph() != &graph) throw InvalidArgument("Session::run: feed '" + out.name() + "' belongs to another Graph");
    const std::string what = out.op().type() == "Placeholder" ? "placeholder '" + out.op().name() + "'"
                                                               : "tensor '" + out.name() + "'";
    if (value.empty()) throw InvalidArgument("Session::run: the value fed to " + what + " is an empty Tensor");
    if (value.dtype() != out.dtype())
      throw InvalidArgument("Session::run: cannot feed a " + value.summary() + " value to " + what +
                            ", which has dtype " + std::string(dtype_name(out.dtype())));
    if (!out.shape().is_compatible_with(value.shape()))
      throw InvalidArgument("Session::run: cannot feed a value of shape " + shape_string(value.shape()) +
                            " to " + what + ", which has shape " + out.shape().to_string());
    if (out.is_ref()) throw InvalidArgument("Session::run: cannot feed variable reference '" + out.name() + "'");
    for (std::size_t j = 0; j < i; ++j)
      if (feeds[j].first == out) throw InvalidArgument("Session::run: " + what + " is fed twice");
  }
}

// Unfed placeholders among the nodes to run: a clear error before anything runs.
inline void check_placeholders_fed(const Graph& graph, const std::vector<int>& nodes) {
  for (int id : nodes) {
    const auto& node = graph.node(id);
    if (node.type != "Placeholder") continue;
    throw InvalidArgument("You must feed a value for placeholder tensor '" + node.name + "' with dtype " +
                          std::string(dtype_name(node.outputs[0].dtype)) + " and shape " +
                          node.outputs[0].shape.to_string() + " (pass it in the feeds of Session::run)");
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
  for (const auto& f : fetches) key += std::to_string(f.op().id()) + ":" + std::to_string(f.index()) + ",";
  key += "|";
  for (const auto& [out, value] : feeds) key += std::to_string(out.op().id()) + ":" + std::to_string(out.index()) + ",";
  key += "|";
  for (const auto& t : targets) key += std::to_string(t.id()) + ",";
  return key;
}

// The devices of in-process sessions, kept per graph so variables outlive a Session.
struct LocalRuntime {
  DeviceMgr devices;
  std::atomic<std::uint64_t> next_step_id{1};
};

class LocalSession : public SessionImpl {
 public:
  LocalSession(Graph& graph, const SessionOptions& options)
      : graph_(graph), runtime_(graph.runtime_state<LocalRuntime>()) {
    if (options.inter_op_threads == 0) pool_ = &ThreadPool::shared();
    else if (options.inter_op_threads > 1) {
      own_pool_ = std::make_unique<ThreadPool>(options.inter_op_threads);
      pool_ = own_pool_.get();
    }
  }

  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets) override {
    validate_run_arguments(graph_, fetches, feeds, targets);
    std::shared_ptr<const Executor> executor = executor_for(fetches, feeds, targets);
    std::vector<Tensor> feed_values;
    feed_values.reserve(feeds.size());
    for (const auto& [out, value] : feeds) feed_values.push_back(value);
    StepContext step;
    CancellationManager cancellation;
    step.step_id = runtime_.next_step_id++;
    step.cancellation = &cancellation;
    return caller_owned(executor->run(step, std::move(feed_values), pool_));
  }

 private:
  std::shared_ptr<const Executor> executor_for(const std::vector<Output>& fetches, const FeedMap& feeds,
                                               const std::vector<Operation>& targets) {
    const std::string key = run_signature(fetches, feeds, targets);
    std::lock_guard lock(mutex_);
    if (auto it = executors_.find(key); it != executors_.end()) return it->second;
    Executor::Params params;
    params.graph = &graph_;
    for (const auto& f : fetches) params.fetches.push_back(f.id());
    for (const auto& [out, value] : feeds) params.feeds.push_back(out.id());
    std::vector<int> target_ids;
    for (const auto& t : targets) target_ids.push_back(t.id());
    params.nodes = needed_nodes(graph_, params.fetches, target_ids, params.feeds);
    check_placeholders_fed(graph_, params.nodes);
    params.device_for = [this](const detail::Node& node) -> Device& {
      const std::string& requested =
          node.colocate_with >= 0 ? graph_.node(node.colocate_with).device : node.device;
      return runtime_.devices.get_or_create(complete_device_name(requested, DeviceSpec{}));
    };
    params.stateful_kernel = [this](const detail::Node& node, const auto& create) {
      auto& kernel = stateful_kernels_[node.name];  // under mutex_
      if (!kernel) kernel = create();
      return kernel;
    };
    auto executor = std::make_shared<const Executor>(std::move(params));
    executors_.emplace(key, executor);
    return executor;
  }

  Graph& graph_;
  LocalRuntime& runtime_;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<ThreadPool> own_pool_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Executor>> executors_;
  std::map<std::string, std::shared_ptr<OpKernel>> stateful_kernels_;
};

}  // namespace detail

class Session {
 public:
  // In-process: every device of the graph runs in this process.
  explicit Session(Graph& graph, SessionOptions options = {})
      : graph_(&graph), impl_(std::make_unique<detail::LocalSession>(graph, options)) {}

  // Distributed: `target` is Server::target() of the master task ("" means in-process).
  Session(Graph& graph, std::string_view target, SessionOptions options = {}) : graph_(&graph) {
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

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  Session(Session&&) noexcept = default;
  Session& operator=(Session&&) noexcept = default;
  ~Session() {
    if (impl_) impl_->close();
  }

  // Runs what `fetches` and `targets` need, with `feeds` replacing those tensors; returns the
  // fetched values in order. Throws the typed psflow::Error of the first failing op.
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds = {},
                          const std::vector<Operation>& targets = {}) {
    return impl().run(fetches, feeds, targets);
  }
  void run(const Operation& target, const FeedMap& feeds = {}) { impl().run({}, feeds, {target}); }

  void close() {
    if (impl_) {
      impl_->close();
      impl_.reset();
    }
  }
  bool closed() const noexcept { return impl_ == nullptr; }
  // The placement and cross-process transfers of a run (see observe/explain.hpp); nullopt for
  // an in-process session.
  std::optional<PartitionPlan> describe(const std::vector<Output>& fetches, const FeedMap& feeds = {},
                                        const std::vector<Operation>& targets = {}) {
    return impl().describe(fetches, feeds, targets);
  }
  Graph& graph() const noexcept { return *graph_; }

 private:
  detail::SessionImpl& impl() {
    if (!impl_) throw FailedPrecondition("this Session has been closed: create a new Session to run the graph");
    return *impl_;
  }
  Graph* graph_;
  std::unique_ptr<detail::SessionImpl> impl_;
};

}  // namespace psflow
