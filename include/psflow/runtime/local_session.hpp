// LocalSession: the in-process session behind Session(graph). Every device of the graph runs
// in this process; its variables live in resource managers kept per graph (LocalRuntime), so
// they persist across run() calls and across Sessions on the same graph. For each new (feeds,
// fetches, targets) signature it prunes the graph to what is needed and builds an executor
// once; later runs reuse it.
//
// RunOptions::timeout_in_ms cancels a step that runs longer (DeadlineExceeded).
//
// run() may be called from several threads at once.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "psflow/graph/subgraph.hpp"
#include "psflow/runtime/executor.hpp"
#include "psflow/runtime/session_impl.hpp"
#include "psflow/runtime/step_deadline.hpp"

namespace psflow {

namespace detail {

// The devices of in-process sessions, kept per graph so variables outlive a Session.
struct LocalRuntime {
  DeviceMgr devices;
  std::atomic<std::uint64_t> next_step_id{1};
};

class LocalSession : public SessionImpl {
 public:
  LocalSession(Graph& graph, const SessionOptions& options)
      : graph_(graph), runtime_(graph.runtime_state<LocalRuntime>()) {
    if (options.inter_op_threads == 0)
      pool_ = &ThreadPool::shared();
    else if (options.inter_op_threads > 1) {
      own_pool_ = std::make_unique<ThreadPool>(options.inter_op_threads);
      pool_ = own_pool_.get();
    }
  }

  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets) override {
    return run(fetches, feeds, targets, RunOptions{}, nullptr);
  }

  // A traced run records into one task named "localhost" (clock offset 0).
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets, const RunOptions& options,
                          RunMetadata* metadata) override {
    validate_run_arguments(graph_, fetches, feeds, targets);
    std::shared_ptr<const Executor> executor = executor_for(fetches, feeds, targets);
    std::vector<Tensor> feed_values;
    feed_values.reserve(feeds.size());
    for (const auto& [out, value] : feeds) feed_values.push_back(value);
    StepContext step;
    CancellationManager cancellation;
    step.step_id = runtime_.next_step_id++;
    step.cancellation = &cancellation;
    // Destroyed first, waiting for a cancel in progress: the callback may use `cancellation`.
    const StepDeadline deadline(options.timeout_in_ms, [&cancellation](const Status& status) {
      cancellation.cancel(status);
    });
    if (!options.trace || !metadata)
      return caller_owned(executor->run(step, std::move(feed_values), pool_));
    StepStatsCollector stats;
    step.stats = &stats;
    metadata->clear();
    std::vector<Tensor> out;
    try {
      out = executor->run(step, std::move(feed_values), pool_);
    } catch (...) {
      metadata->tasks.push_back(stats.take("localhost", "localhost"));  // what ran before failing
      throw;
    }
    metadata->tasks.push_back(stats.take("localhost", "localhost"));
    join_transfers(*metadata);
    return caller_owned(std::move(out));
  }

 private:
  std::shared_ptr<const Executor> executor_for(const std::vector<Output>& fetches,
                                               const FeedMap& feeds,
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

}  // namespace psflow
