// MonitoredTrainingSession: TF's training-loop session. It creates the Session, makes the model
// ready (the chief restores the latest checkpoint in checkpoint_dir or runs the initializer; a
// non-chief waits, polling every recovery_wait_secs and saying what it waits for, until the
// chief has done so), runs hooks around every run, and when a run fails with Aborted or
// Unavailable (a ps restarted or went away) it closes the session, makes a new one ready again
// and retries until recovery_deadline_secs pass without success. Every recovery attempt is
// logged (standard error) with its number, the error and the time left before that deadline.
//
// Not thread-safe: one training loop per MonitoredTrainingSession.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/hooks.hpp"
#include "psflow/train/saver.hpp"
#include "psflow/train/supervisor.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <cstdio>
#include <thread>

#include "psflow/core/log.hpp"
#endif

namespace psflow::train {

struct MonitoredTrainingSessionOptions {
  std::string master;  // Server::target(), "" for in-process
  bool is_chief = true;
  std::string checkpoint_dir;  // "": no checkpoints
  std::vector<std::shared_ptr<SessionRunHook>> hooks;
  std::vector<std::shared_ptr<SessionRunHook>> chief_only_hooks;
  std::optional<double> save_checkpoint_secs = 600;   // chief with checkpoint_dir
  std::optional<std::int64_t> save_checkpoint_steps;  // chief with checkpoint_dir
  std::size_t max_checkpoints_to_keep = 5;
  // Each ps writes and restores its own variables in its own directory (SaverOptions::sharded;
  // ServerOptions::checkpoint_dir); checkpoint_dir then holds the index and state file.
  bool sharded_checkpoints = false;
  std::int64_t log_step_count_steps = 100;  // chief: logs global_step/sec (0: never)
  double recovery_wait_secs = 1;            // non-chief poll interval (TF: 30 s)
  double ready_deadline_secs = 300;         // non-chief: give up waiting for the chief
  double recovery_deadline_secs = 300;      // give up re-creating the session after failures
  Operation init_op;                        // empty: global_variables_initializer(graph)
  SessionOptions session_options;
  // Chief: where SummarySaverHook and StepCounterHook write TensorBoard event files. As TF:
  // nullopt means checkpoint_dir; "" writes none. Summaries (summary::merge_all) are written
  // every save_summaries_steps global steps (TF's default 100) or save_summaries_secs seconds
  // (used when save_summaries_steps is nullopt), and the graph once.
  std::optional<std::string> summary_dir;
  std::optional<std::int64_t> save_summaries_steps = 100;
  std::optional<double> save_summaries_secs;
  // The RunOptions::timeout_in_ms of every run() whose RunOptions leave it 0 (0: no limit). A
  // step over it fails DeadlineExceeded, which is thrown, not recovered from.
  std::int64_t run_timeout_in_ms = 0;
};

class MonitoredTrainingSession {
 public:
  PSFLOW_DECL MonitoredTrainingSession(Graph& graph, MonitoredTrainingSessionOptions options);

  MonitoredTrainingSession(const MonitoredTrainingSession&) = delete;
  MonitoredTrainingSession& operator=(const MonitoredTrainingSession&) = delete;
  PSFLOW_DECL ~MonitoredTrainingSession();

  bool should_stop() const noexcept { return stop_requested_ || closed_; }

  // Runs fetches/targets with the hooks; on Aborted/Unavailable re-creates the session and
  // retries (bounded by recovery_deadline_secs). OutOfRange (an input or the token queue of
  // synchronous training closed) ends training: should_stop() becomes true and the result is
  // empty. Other errors propagate.
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds = {},
                          const std::vector<Operation>& targets = {}) {
    return run(RunOptions{}, fetches, feeds, targets, nullptr);
  }
  void run(const Operation& target, const FeedMap& feeds = {}) { run({}, feeds, {target}); }
  // The same with RunOptions (e.g. trace = true: `metadata` then receives the step's
  // statistics of every task, see runtime/step_stats.hpp). Hooks run as for any run.
  PSFLOW_DECL std::vector<Tensor> run(const RunOptions& options, const std::vector<Output>& fetches,
                                      const FeedMap& feeds, const std::vector<Operation>& targets,
                                      RunMetadata* metadata);

  // Ends the hooks (a final checkpoint on the chief) and closes the session.
  PSFLOW_DECL void close();

  // The underlying session (valid until the next recovery).
  PSFLOW_DECL Session& raw_session();

 private:
  PSFLOW_DECL static std::chrono::duration<double> seconds(double s);
  // "recovery_deadline_secs (300 s)"
  PSFLOW_DECL std::string deadline_text() const;
  // "12.3 s left before recovery_deadline_secs (300 s)"
  PSFLOW_DECL std::string time_left(std::chrono::steady_clock::time_point started) const;
  PSFLOW_DECL void log(const std::string& line) const;
  PSFLOW_DECL std::vector<Tensor> run_once(const RunOptions& options,
                                           const std::vector<Output>& fetches, const FeedMap& feeds,
                                           const std::vector<Operation>& targets,
                                           RunMetadata* metadata);

  // Creates a session and makes the model ready, retrying on Aborted/Unavailable until the
  // recovery deadline, counted from `started` (the first failure; now when none), logging every
  // failed attempt.
  PSFLOW_DECL void create_session_with_retries(
      const Status& why,
      std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now());

  // Chief: restore the latest checkpoint or initialize. Others: wait until the chief has.
  PSFLOW_DECL void prepare(Session& sess);

  Graph& graph_;
  MonitoredTrainingSessionOptions options_;
  std::vector<std::shared_ptr<SessionRunHook>> hooks_;
  Operation init_op_;
  ReadinessCheck readiness_;
  std::unique_ptr<Saver> saver_;
  std::unique_ptr<Session> session_;
  std::vector<std::unique_ptr<Session>> retired_;
  bool stop_requested_ = false;
  bool closed_ = false;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
MonitoredTrainingSession::MonitoredTrainingSession(Graph& graph,
                                                   MonitoredTrainingSessionOptions options)
    : graph_(graph), options_(std::move(options)), hooks_(options_.hooks) {
  if (options_.is_chief) {
    hooks_.insert(hooks_.end(), options_.chief_only_hooks.begin(), options_.chief_only_hooks.end());
    if (find_variable(graph_, "global_step")) {
      const std::string summary_dir = options_.summary_dir.value_or(options_.checkpoint_dir);
      if (options_.log_step_count_steps > 0)
        hooks_.push_back(StepCounterHook(options_.log_step_count_steps, summary_dir));
      if (!summary_dir.empty() && (options_.save_summaries_steps || options_.save_summaries_secs))
        hooks_.push_back(std::make_shared<SummarySaverHook>(
            summary_dir, options_.save_summaries_steps,
            options_.save_summaries_steps ? std::nullopt : options_.save_summaries_secs));
      if (!options_.checkpoint_dir.empty() &&
          (options_.save_checkpoint_secs || options_.save_checkpoint_steps))
        hooks_.push_back(std::make_shared<CheckpointSaverHook>(
            options_.checkpoint_dir, options_.save_checkpoint_secs, options_.save_checkpoint_steps,
            options_.max_checkpoints_to_keep, options_.sharded_checkpoints));
    }
  }
  init_op_ = options_.init_op.valid() ? options_.init_op : global_variables_initializer(graph_);
  readiness_ = ReadinessCheck(global_variables(graph_));
  if (options_.is_chief && !options_.checkpoint_dir.empty())
    saver_ = std::make_unique<Saver>(graph_,
                                     SaverOptions{.max_to_keep = options_.max_checkpoints_to_keep,
                                                  .sharded = options_.sharded_checkpoints});
  for (auto& hook : hooks_) hook->begin(graph_);
  create_session_with_retries(Status(ErrorCode::ok, ""));
}

MonitoredTrainingSession::~MonitoredTrainingSession() {
  try {
    close();
  } catch (const std::exception& e) {
    log_line(std::string("MonitoredTrainingSession: closing failed: ") + e.what());
  }
}

std::vector<Tensor> MonitoredTrainingSession::run(const RunOptions& options,
                                                  const std::vector<Output>& fetches,
                                                  const FeedMap& feeds,
                                                  const std::vector<Operation>& targets,
                                                  RunMetadata* metadata) {
  if (closed_) throw FailedPrecondition("this MonitoredTrainingSession is closed");
  std::optional<std::chrono::steady_clock::time_point> recovery_started;
  RunOptions bounded = options;
  if (bounded.timeout_in_ms == 0) bounded.timeout_in_ms = options_.run_timeout_in_ms;
  for (;;) {
    try {
      return run_once(bounded, fetches, feeds, targets, metadata);
    } catch (const OutOfRange& e) {
      // An input ran out (e.g. synchronous training ended and its token queue closed): the
      // normal end of the loop, as TF's MonitoredSession treats OutOfRangeError.
      log(std::string("stopping: ") + e.what());
      stop_requested_ = true;
      return {};
    } catch (const Error& e) {
      if (e.code() != ErrorCode::aborted && e.code() != ErrorCode::unavailable) throw;
      const auto now = std::chrono::steady_clock::now();
      if (!recovery_started) recovery_started = now;
      if (now - *recovery_started > seconds(options_.recovery_deadline_secs)) {
        log("run failed (" + std::string(e.what()) + "); giving up: " + deadline_text() +
            " passed");
        throw;
      }
      log("run failed (" + std::string(e.what()) + "); re-creating the session, " +
          time_left(*recovery_started));
      create_session_with_retries(Status(e.code(), e.message()), *recovery_started);
    }
  }
}

void MonitoredTrainingSession::close() {
  if (closed_) return;
  closed_ = true;
  if (session_) {
    for (auto& hook : hooks_) hook->end(*session_);
    session_->close();
  }
}

Session& MonitoredTrainingSession::raw_session() {
  if (!session_) throw FailedPrecondition("no session");
  return *session_;
}

std::chrono::duration<double> MonitoredTrainingSession::seconds(double s) {
  return std::chrono::duration<double>(s);
}

std::string MonitoredTrainingSession::deadline_text() const {
  char text[64];
  std::snprintf(text, sizeof text, "recovery_deadline_secs (%.0f s)",
                options_.recovery_deadline_secs);
  return text;
}

std::string MonitoredTrainingSession::time_left(
    std::chrono::steady_clock::time_point started) const {
  const double left =
      options_.recovery_deadline_secs -
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  char text[64];
  std::snprintf(text, sizeof text, "%.1f s left before ", left > 0 ? left : 0.0);
  return text + deadline_text();
}

void MonitoredTrainingSession::log(const std::string& line) const {
  log_line(std::string("MonitoredTrainingSession") + (options_.is_chief ? " (chief)" : "") + ": " +
           line);
}

std::vector<Tensor> MonitoredTrainingSession::run_once(const RunOptions& options,
                                                       const std::vector<Output>& fetches,
                                                       const FeedMap& feeds,
                                                       const std::vector<Operation>& targets,
                                                       RunMetadata* metadata) {
  SessionRunContext context(*session_, fetches);
  std::vector<SessionRunArgs> extra;
  std::vector<Output> all = fetches;
  for (auto& hook : hooks_) {
    extra.push_back(hook->before_run(context));
    all.insert(all.end(), extra.back().fetches.begin(), extra.back().fetches.end());
  }
  std::vector<Tensor> results = session_->run(options, all, feeds, targets, metadata);
  std::size_t offset = fetches.size();
  for (std::size_t i = 0; i < hooks_.size(); ++i) {
    SessionRunValues values;
    for (std::size_t j = 0; j < extra[i].fetches.size(); ++j)
      values.results.push_back(results[offset + j]);
    offset += extra[i].fetches.size();
    hooks_[i]->after_run(context, values);
  }
  if (context.stop_requested()) stop_requested_ = true;
  results.resize(fetches.size());
  return results;
}

void MonitoredTrainingSession::create_session_with_retries(
    const Status& why, std::chrono::steady_clock::time_point started) {
  Status last = why;
  const bool recovering = !why.ok();
  for (int attempt = 1;; ++attempt) {
    try {
      // An old session stays alive (not closed) until this one is destroyed: a hook's
      // background thread may still be finishing a run on it.
      if (session_) retired_.push_back(std::move(session_));
      session_ = std::make_unique<Session>(graph_, options_.master, options_.session_options);
      prepare(*session_);
      for (auto& hook : hooks_) hook->after_create_session(*session_);
      if (recovering) log("recovery attempt " + std::to_string(attempt) + " succeeded");
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::aborted && e.code() != ErrorCode::unavailable) throw;
      last = Status(e.code(), e.message());
      const std::string what = recovering ? "recovery attempt " : "creating the session, attempt ";
      if (std::chrono::steady_clock::now() - started > seconds(options_.recovery_deadline_secs)) {
        log(what + std::to_string(attempt) + " failed (" + e.what() +
            "); giving up: " + deadline_text() + " passed");
        throw;
      }
      char wait[32];
      std::snprintf(wait, sizeof wait, "%.1f s", options_.recovery_wait_secs);
      log(what + std::to_string(attempt) + " failed (" + e.what() + "); retrying in " + wait +
          ", " + time_left(started));
      std::this_thread::sleep_for(seconds(options_.recovery_wait_secs));
    }
  }
}

void MonitoredTrainingSession::prepare(Session& sess) {
  if (options_.is_chief) {
    std::optional<std::string> checkpoint;
    if (!options_.checkpoint_dir.empty()) checkpoint = latest_checkpoint(options_.checkpoint_dir);
    if (checkpoint) {
      log("restoring " + *checkpoint);
      saver_->restore(sess, *checkpoint);
    } else {
      sess.run(init_op_);
    }
    auto missing = readiness_.uninitialized(sess);
    if (!missing.empty())
      throw FailedPrecondition("the model is not ready after initialization: " + missing.front() +
                               " is still uninitialized (does init_op cover every variable?)");
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  auto last_log = started - std::chrono::hours(1);
  for (;;) {
    auto missing = readiness_.uninitialized(sess);
    if (missing.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - started > seconds(options_.ready_deadline_secs))
      throw DeadlineExceeded(
          "waited " + std::to_string(static_cast<int>(options_.ready_deadline_secs)) +
          " s for the chief to initialize the model; still uninitialized: " + missing.front() +
          (missing.size() > 1 ? " and " + std::to_string(missing.size() - 1) + " more" : "") +
          ". Is the chief (worker task 0) running?");
    if (now - last_log > std::chrono::seconds(5)) {
      log("waiting for the chief to initialize the model (" + missing.front() +
          (missing.size() > 1 ? " and " + std::to_string(missing.size() - 1) + " more" : "") +
          " uninitialized)");
      last_log = now;
    }
    std::this_thread::sleep_for(seconds(options_.recovery_wait_secs));
  }
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
