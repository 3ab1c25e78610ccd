// The trainer's --trace_steps=100,200: the chief traces its first training step at or after
// each of those global steps across every task it runs on (RunOptions{.trace = true}) and
// writes it as a Chrome trace, trace_step_<N>.json, into the given directory (the current
// one when empty), logging the path to standard error. Open it in chrome://tracing or
// https://ui.perfetto.dev ("Open trace file"). Global steps, not the chief's own step count:
// they are what the chief's log lines and checkpoints count, whatever the number of workers.
#pragma once

#include <charconv>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <psflow/observe/chrome_trace.hpp>
#include <psflow/runtime/step_stats.hpp>
#include <set>
#include <sstream>
#include <string>

#include "common/cluster_task.hpp"

namespace step_trace {

class StepTracer {
 public:
  // "100,200" (positive global steps); false for anything else.
  bool set_steps(const std::string& list) {
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) {
      std::int64_t step = 0;
      const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), step);
      if (error != std::errc() || end != item.data() + item.size() || step < 1) return false;
      pending_.insert(step);
    }
    return true;
  }
  void set_directory(std::string dir) { dir_ = std::move(dir); }

  // The options for the run that starts at global step `step` (trace it when a requested step
  // is due), and where its statistics go.
  psflow::RunOptions options(bool chief, std::int64_t step) {
    due_ = chief && !pending_.empty() && step >= *pending_.begin();
    return psflow::RunOptions{.trace = due_};
  }
  psflow::RunMetadata* metadata() { return &metadata_; }

  // After the run: writes the trace when it was traced. `step` is the global step it reached.
  void write_if_traced(std::int64_t step) {
    if (!due_) return;
    due_ = false;
    const std::int64_t requested = *pending_.begin();
    pending_.erase(pending_.begin());
    if (metadata_.tasks.empty()) return;  // the run ended training (no step ran)
    const std::filesystem::path dir = dir_.empty() ? "." : dir_;
    const std::string path = (dir / ("trace_step_" + std::to_string(requested) + ".json")).string();
    try {
      std::filesystem::create_directories(dir);
      psflow::observe::write_chrome_trace(metadata_, path);
    } catch (const std::exception& e) {  // a trace is not worth stopping training for
      cluster_task::log(cluster_task::format("could not write the trace: %s", e.what()));
      metadata_.clear();
      return;
    }
    std::size_t ops = 0;
    for (const auto& t : metadata_.tasks) ops += t.nodes.size();
    cluster_task::log(cluster_task::format(
        "traced the step to global step %lld (%zu tasks, %zu ops, %zu transfers): %s",
        static_cast<long long>(step), metadata_.tasks.size(), ops, metadata_.transfers.size(),
        path.c_str()));
    metadata_.clear();
  }

 private:
  std::set<std::int64_t> pending_;
  std::string dir_;
  bool due_ = false;
  psflow::RunMetadata metadata_;
};

}  // namespace step_trace
