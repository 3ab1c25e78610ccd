// SessionRunHook: code that runs around every MonitoredTrainingSession::run, as in TF:
// begin() once, after_create_session() each time a session is (re)created, before_run() may
// add fetches, after_run() sees their values and may request a stop, end() once at the end.
// Built-in hooks: StopAtStepHook, CheckpointSaverHook, StepCounterHook, LoggingTensorHook,
// SummarySaverHook, DynamicEmbeddingEvictionHook.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/dynamic_embedding.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/observe/event_file_writer.hpp"
#include "psflow/observe/summary.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/train/saver.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <utility>

#include "psflow/core/log.hpp"
#include "psflow/core/tensor_format.hpp"
#endif

namespace psflow::train {

// What a hook sees of the run in progress.
class SessionRunContext {
 public:
  SessionRunContext(Session& session, const std::vector<Output>& fetches)
      : session_(session), fetches_(fetches) {}
  Session& session() const noexcept { return session_; }
  const std::vector<Output>& original_fetches() const noexcept { return fetches_; }
  void request_stop() noexcept { stop_requested_ = true; }
  bool stop_requested() const noexcept { return stop_requested_; }

 private:
  Session& session_;
  const std::vector<Output>& fetches_;
  bool stop_requested_ = false;
};

struct SessionRunArgs {
  std::vector<Output> fetches;  // fetched along with the caller's fetches
};

struct SessionRunValues {
  std::vector<Tensor> results;  // values of SessionRunArgs::fetches, in order
};

class SessionRunHook {
 public:
  virtual ~SessionRunHook() = default;
  virtual void begin(Graph&) {}
  virtual void after_create_session(Session&) {}
  virtual SessionRunArgs before_run(SessionRunContext&) { return {}; }
  virtual void after_run(SessionRunContext&, const SessionRunValues&) {}
  virtual void end(Session&) {}
};

// Saves "<checkpoint_dir>/model.ckpt-<global step>" when a session is created, every
// save_secs seconds or save_steps global steps, and at the end. `sharded`: each task writes
// its own shard (SaverOptions::sharded).
class CheckpointSaverHook : public SessionRunHook {
 public:
  PSFLOW_DECL CheckpointSaverHook(std::string checkpoint_dir, std::optional<double> save_secs,
                                  std::optional<std::int64_t> save_steps,
                                  std::size_t max_to_keep = 5, bool sharded = false);

  PSFLOW_DECL void begin(Graph& graph) override;
  PSFLOW_DECL void after_create_session(Session& sess) override;
  PSFLOW_DECL SessionRunArgs before_run(SessionRunContext&) override;
  // As TF's: the global step fetched with the training step is the value before this step's
  // increment, so the step that completes a period is the fetched value + 1; only then is the
  // real value read, and the checkpoint named by it. With save_steps = 200 one worker saves
  // at 200, 400, 600; with several, another worker's steps may move it a little past.
  PSFLOW_DECL void after_run(SessionRunContext& ctx, const SessionRunValues& values) override;
  // A last checkpoint, unless the last one already has this step (TF's end()).
  PSFLOW_DECL void end(Session& sess) override;
  const std::string& last_saved() const noexcept { return last_path_; }

 private:
  PSFLOW_DECL bool should_save(std::int64_t step) const;
  PSFLOW_DECL void save(Session& sess);
  PSFLOW_DECL void save(Session& sess, std::int64_t step);

  std::string dir_;
  std::optional<double> save_secs_;
  std::optional<std::int64_t> save_steps_;
  std::size_t max_to_keep_;
  bool sharded_;
  Output global_step_;
  std::unique_ptr<Saver> saver_;
  std::int64_t last_saved_step_ = 0;
  std::chrono::steady_clock::time_point last_saved_time_;
  std::string last_path_;
};

// TF1's SummarySaverHook: writes the graph's summaries (summary::merge_all at begin(), or the
// ones given) to an event file in output_dir, fetched with the training step of the first run
// and then every save_steps global steps or save_secs seconds (give exactly one), at the global
// step read after that run. Writes the graph (requested devices) once, when the first session
// is created (TF1 has CheckpointSaverHook write it into the same directory; here it comes with
// the summaries, so a summary_dir without checkpoints has it too), and flushes at the end.
// Shares the directory's writer (summary::FileWriterCache) with StepCounterHook.
class SummarySaverHook : public SessionRunHook {
 public:
  PSFLOW_DECL SummarySaverHook(std::string output_dir, std::optional<std::int64_t> save_steps,
                               std::optional<double> save_secs = std::nullopt,
                               std::optional<summary::MergedSummary> summaries = std::nullopt);

  PSFLOW_DECL void begin(Graph& graph) override;
  PSFLOW_DECL void after_create_session(Session&) override;
  PSFLOW_DECL SessionRunArgs before_run(SessionRunContext&) override;
  PSFLOW_DECL void after_run(SessionRunContext& ctx, const SessionRunValues& values) override;
  PSFLOW_DECL void end(Session&) override;

  const std::string& output_dir() const noexcept { return dir_; }
  // The event file written to (after begin()).
  PSFLOW_DECL std::string path() const;

 private:
  PSFLOW_DECL bool should_trigger(std::int64_t step) const;

  std::string dir_;
  std::optional<std::int64_t> save_steps_;
  std::optional<double> save_secs_;
  std::optional<summary::MergedSummary> summaries_;
  std::shared_ptr<summary::FileWriter> writer_;
  Graph* graph_ = nullptr;
  bool graph_written_ = false;
  Output global_step_;
  bool request_ = false;
  std::optional<std::int64_t> next_step_, last_step_;
  std::chrono::steady_clock::time_point last_time_;
};

// Requests a stop when the global step reaches last_step (shared by all workers).
PSFLOW_DECL std::shared_ptr<SessionRunHook> StopAtStepHook(std::int64_t last_step);
// Requests a stop after num_steps more global steps, counted from session creation.
PSFLOW_DECL std::shared_ptr<SessionRunHook> StopAfterStepsHook(std::int64_t num_steps);
// Logs global steps/sec every `every_n_steps` global steps; with an output_dir also writes it
// there as the summary "global_step/sec" (TF's StepCounterHook(output_dir=...)), into the file
// shared through summary::FileWriterCache.
PSFLOW_DECL std::shared_ptr<SessionRunHook> StepCounterHook(std::int64_t every_n_steps = 100,
                                                            std::string output_dir = "");
// The same at most once per `every` (TF's every_n_secs), however fast the steps go.
PSFLOW_DECL std::shared_ptr<SessionRunHook> StepCounterHook(std::chrono::duration<double> every,
                                                            std::string output_dir = "");
// Logs the values of `tensors` every `every_n_steps` runs.
PSFLOW_DECL std::shared_ptr<SessionRunHook> LoggingTensorHook(std::vector<Output> tensors,
                                                              std::int64_t every_n_steps);

// Runs DynamicEmbedding::evict() on `tables` (empty: every dynamic table of the graph) each time
// the global step has moved eviction_interval_steps past the last pass, so ttl_steps (and
// capacity) apply while training without the program calling evict(). Throws InvalidArgument for
// an interval below 1; begin() throws FailedPrecondition without a global step.
PSFLOW_DECL std::shared_ptr<SessionRunHook> DynamicEmbeddingEvictionHook(
    std::int64_t eviction_interval_steps, std::vector<DynamicEmbedding> tables = {});

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

PSFLOW_DECL Variable require_global_step(Graph& graph, const char* hook) {
  auto step = find_variable(graph, "global_step");
  if (!step)
    throw FailedPrecondition(std::string(hook) +
                             " needs a global step: call train::get_or_create_global_step(graph) "
                             "and pass it to minimize()/apply_gradients()");
  return *step;
}

PSFLOW_DECL std::int64_t step_value(const Tensor& t) {
  return t.dtype() == DType::int32 ? t.scalar<std::int32_t>() : t.scalar<std::int64_t>();
}

// Stops once the global step (shared by every worker) reaches last_step.
class StopAtStep : public SessionRunHook {
 public:
  StopAtStep(std::optional<std::int64_t> last_step, std::optional<std::int64_t> num_steps)
      : last_step_(last_step), num_steps_(num_steps) {
    if (!!last_step == !!num_steps)
      throw InvalidArgument("StopAtStepHook: give exactly one of last_step and num_steps");
  }
  void begin(Graph& graph) override {
    global_step_ = require_global_step(graph, "StopAtStepHook").value();
  }
  void after_create_session(Session& sess) override {
    if (num_steps_ && !last_step_)
      last_step_ = step_value(sess.run({global_step_})[0]) + *num_steps_;
  }
  SessionRunArgs before_run(SessionRunContext&) override { return {{global_step_}}; }
  void after_run(SessionRunContext& ctx, const SessionRunValues& values) override {
    // As TF: the fetched value may predate this step's increment, so check again when close.
    if (step_value(values.results[0]) + 1 >= *last_step_ &&
        step_value(ctx.session().run({global_step_})[0]) >= *last_step_)
      ctx.request_stop();
  }

 private:
  std::optional<std::int64_t> last_step_, num_steps_;
  Output global_step_;
};

class EvictEvery : public SessionRunHook {
 public:
  EvictEvery(std::int64_t interval, std::vector<DynamicEmbedding> tables)
      : interval_(interval), tables_(std::move(tables)) {
    if (interval < 1)
      throw InvalidArgument(
          "DynamicEmbeddingEvictionHook: eviction_interval_steps must be at "
          "least 1, got " +
          std::to_string(interval));
  }
  void begin(Graph& graph) override {
    global_step_ = require_global_step(graph, "DynamicEmbeddingEvictionHook").value();
    if (tables_.empty()) tables_ = dynamic_embeddings(graph);
    std::vector<Operation> evictions;
    for (const auto& table : tables_) evictions.push_back(table.evict());
    if (!evictions.empty()) evict_ = ops::group(evictions, "evict_dynamic_embeddings");
  }
  SessionRunArgs before_run(SessionRunContext&) override { return {{global_step_}}; }
  void after_run(SessionRunContext& ctx, const SessionRunValues& values) override {
    const std::int64_t step = step_value(values.results[0]) + 1;  // this run's increment
    if (!next_) next_ = step + interval_;
    if (step < *next_ || !evict_.valid()) return;
    ctx.session().run(evict_);
    next_ = step + interval_;
  }

 private:
  std::int64_t interval_;
  std::vector<DynamicEmbedding> tables_;
  Output global_step_;
  Operation evict_;
  std::optional<std::int64_t> next_;
};

class StepCounter : public SessionRunHook {
 public:
  // Every `every_n_steps` global steps, or (when 0) every `every` of time.
  StepCounter(std::int64_t every_n_steps, std::chrono::duration<double> every,
              std::string output_dir)
      : every_(every_n_steps), every_time_(every), output_dir_(std::move(output_dir)) {}
  void begin(Graph& graph) override {
    global_step_ = require_global_step(graph, "StepCounterHook").value();
    if (!output_dir_.empty()) writer_ = summary::FileWriterCache::get(output_dir_);
  }
  SessionRunArgs before_run(SessionRunContext&) override { return {{global_step_}}; }
  void after_run(SessionRunContext&, const SessionRunValues& values) override {
    const std::int64_t step = step_value(values.results[0]);
    const auto now = std::chrono::steady_clock::now();
    if (!last_step_) {
      last_step_ = step;
      last_time_ = now;
      return;
    }
    if (every_ > 0 ? step - *last_step_ < every_ : now - last_time_ < every_time_) return;
    const double seconds = std::chrono::duration<double>(now - last_time_).count();
    if (seconds > 0) {
      rate_ = static_cast<double>(step - *last_step_) / seconds;
      char rate[32];
      std::snprintf(rate, sizeof rate, "%.4g", rate_);
      log_line(std::string("global_step/sec: ") + rate + " (global step " + std::to_string(step) +
               ")");
      // TF's tag: the global step op's name + "/sec".
      if (writer_) writer_->add_summary(summary::Summary().add("global_step/sec", rate_), step);
    }
    last_step_ = step;
    last_time_ = now;
  }
  void end(Session&) override {
    if (writer_) writer_->flush();
  }
  double last_rate() const noexcept { return rate_; }

 private:
  std::int64_t every_;
  std::chrono::duration<double> every_time_;
  std::string output_dir_;
  std::shared_ptr<summary::FileWriter> writer_;
  Output global_step_;
  std::optional<std::int64_t> last_step_;
  std::chrono::steady_clock::time_point last_time_;
  double rate_ = 0;
};

class LoggingTensors : public SessionRunHook {
 public:
  LoggingTensors(std::vector<Output> tensors, std::int64_t every_n_steps)
      : tensors_(std::move(tensors)), every_(every_n_steps) {
    if (every_ <= 0) throw InvalidArgument("LoggingTensorHook: every_n_steps must be positive");
  }
  SessionRunArgs before_run(SessionRunContext&) override {
    return {(count_++ % every_ == 0) ? tensors_ : std::vector<Output>{}};
  }
  void after_run(SessionRunContext&, const SessionRunValues& values) override {
    if (values.results.empty()) return;
    std::ostringstream line;
    for (std::size_t i = 0; i < tensors_.size(); ++i)
      line << (i ? ", " : "") << tensors_[i].name() << " = " << values.results[i];
    log_line(line.str());
  }

 private:
  std::vector<Output> tensors_;
  std::int64_t every_;
  std::int64_t count_ = 0;
};

}  // namespace detail

CheckpointSaverHook::CheckpointSaverHook(std::string checkpoint_dir,
                                         std::optional<double> save_secs,
                                         std::optional<std::int64_t> save_steps,
                                         std::size_t max_to_keep, bool sharded)
    : dir_(std::move(checkpoint_dir)),
      save_secs_(save_secs),
      save_steps_(save_steps),
      max_to_keep_(max_to_keep),
      sharded_(sharded) {}

void CheckpointSaverHook::begin(Graph& graph) {
  global_step_ = detail::require_global_step(graph, "CheckpointSaverHook").value();
  saver_ = std::make_unique<Saver>(graph,
                                   SaverOptions{.max_to_keep = max_to_keep_, .sharded = sharded_});
}
void CheckpointSaverHook::after_create_session(Session& sess) { save(sess); }
SessionRunArgs CheckpointSaverHook::before_run(SessionRunContext&) { return {{global_step_}}; }
void CheckpointSaverHook::after_run(SessionRunContext& ctx, const SessionRunValues& values) {
  const std::int64_t stale_step = detail::step_value(values.results[0]);
  if (!should_save(stale_step + 1)) return;
  const std::int64_t step = detail::step_value(ctx.session().run({global_step_})[0]);
  if (should_save(step)) save(ctx.session(), step);
}
void CheckpointSaverHook::end(Session& sess) {
  const std::int64_t step = detail::step_value(sess.run({global_step_})[0]);
  if (last_path_.empty() || step != last_saved_step_) save(sess, step);
}
bool CheckpointSaverHook::should_save(std::int64_t step) const {
  if (step == last_saved_step_) return false;
  const bool by_steps = save_steps_ && step >= last_saved_step_ + *save_steps_;
  const bool by_time = save_secs_ && std::chrono::steady_clock::now() - last_saved_time_ >=
                                         std::chrono::duration<double>(*save_secs_);
  return by_steps || by_time;
}
void CheckpointSaverHook::save(Session& sess) {
  save(sess, detail::step_value(sess.run({global_step_})[0]));
}
void CheckpointSaverHook::save(Session& sess, std::int64_t step) {
  std::filesystem::create_directories(dir_);
  last_path_ = saver_->save(sess, dir_ + "/model.ckpt", step);
  last_saved_step_ = step;
  last_saved_time_ = std::chrono::steady_clock::now();
  log_line("saved checkpoint " + last_path_);
}

SummarySaverHook::SummarySaverHook(std::string output_dir, std::optional<std::int64_t> save_steps,
                                   std::optional<double> save_secs,
                                   std::optional<summary::MergedSummary> summaries)
    : dir_(std::move(output_dir)),
      save_steps_(save_steps),
      save_secs_(save_secs),
      summaries_(std::move(summaries)) {
  if (dir_.empty()) throw InvalidArgument("SummarySaverHook: empty output_dir");
  if (!!save_steps_ == !!save_secs_)
    throw InvalidArgument("SummarySaverHook: give exactly one of save_steps and save_secs");
  if ((save_steps_ && *save_steps_ <= 0) || (save_secs_ && !(*save_secs_ > 0)))
    throw InvalidArgument("SummarySaverHook: save_steps or save_secs must be positive");
}

void SummarySaverHook::begin(Graph& graph) {
  global_step_ = detail::require_global_step(graph, "SummarySaverHook").value();
  if (!summaries_) summaries_ = summary::merge_all(graph);
  writer_ = summary::FileWriterCache::get(dir_);
  graph_ = &graph;
}
void SummarySaverHook::after_create_session(Session&) {
  if (graph_written_) return;
  writer_->add_graph(*graph_);
  writer_->flush();
  graph_written_ = true;
}
SessionRunArgs SummarySaverHook::before_run(SessionRunContext&) {
  request_ = !next_step_ || should_trigger(*next_step_);
  SessionRunArgs args{{global_step_}};
  if (request_) {
    const auto extra = summaries_->fetches();
    args.fetches.insert(args.fetches.end(), extra.begin(), extra.end());
  }
  return args;
}
void SummarySaverHook::after_run(SessionRunContext& ctx, const SessionRunValues& values) {
  // As TF: the fetched step may predate this run's increment; read it again when writing.
  std::int64_t step = detail::step_value(values.results[0]) + 1;
  if (!next_step_ || request_) step = detail::step_value(ctx.session().run({global_step_})[0]);
  if (request_) {
    last_step_ = step;
    last_time_ = std::chrono::steady_clock::now();
    if (!summaries_->empty())
      writer_->add_summary(summaries_->evaluate({values.results.begin() + 1, values.results.end()}),
                           step);
  }
  next_step_ = step + 1;
}
void SummarySaverHook::end(Session&) { writer_->flush(); }
std::string SummarySaverHook::path() const { return writer_ ? writer_->path() : ""; }
bool SummarySaverHook::should_trigger(std::int64_t step) const {
  if (!last_step_) return true;
  if (step == *last_step_) return false;
  if (save_steps_) return step >= *last_step_ + *save_steps_;
  return std::chrono::steady_clock::now() - last_time_ >=
         std::chrono::duration<double>(*save_secs_);
}

std::shared_ptr<SessionRunHook> DynamicEmbeddingEvictionHook(std::int64_t eviction_interval_steps,
                                                             std::vector<DynamicEmbedding> tables) {
  return std::make_shared<detail::EvictEvery>(eviction_interval_steps, std::move(tables));
}

std::shared_ptr<SessionRunHook> StopAtStepHook(std::int64_t last_step) {
  return std::make_shared<detail::StopAtStep>(last_step, std::nullopt);
}
std::shared_ptr<SessionRunHook> StopAfterStepsHook(std::int64_t num_steps) {
  return std::make_shared<detail::StopAtStep>(std::nullopt, num_steps);
}
std::shared_ptr<SessionRunHook> StepCounterHook(std::int64_t every_n_steps,
                                                std::string output_dir) {
  if (every_n_steps <= 0)
    throw InvalidArgument("StepCounterHook: every_n_steps must be positive (got " +
                          std::to_string(every_n_steps) + ")");
  return std::make_shared<detail::StepCounter>(every_n_steps, std::chrono::duration<double>(0),
                                               std::move(output_dir));
}
std::shared_ptr<SessionRunHook> StepCounterHook(std::chrono::duration<double> every,
                                                std::string output_dir) {
  if (!(every.count() > 0)) throw InvalidArgument("StepCounterHook: the interval must be positive");
  return std::make_shared<detail::StepCounter>(0, every, std::move(output_dir));
}
std::shared_ptr<SessionRunHook> LoggingTensorHook(std::vector<Output> tensors,
                                                  std::int64_t every_n_steps) {
  return std::make_shared<detail::LoggingTensors>(std::move(tensors), every_n_steps);
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
