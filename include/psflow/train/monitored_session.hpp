// MonitoredTrainingSession: TF's training-loop session. It creates the Session, makes the model
// ready (the chief restores the latest checkpoint in checkpoint_dir or runs the initializer; a
// non-chief waits, polling every recovery_wait_secs and saying what it waits for, until the
// chief has done so), runs hooks around every run, and when a run fails with Aborted or
// Unavailable (a ps restarted or went away) it closes the session, makes a new one ready again
// and retries until recovery_deadline_secs pass without success. Every recovery attempt is
// logged (standard error) with its number, the error and the time left before that deadline.
// Every session it makes then runs local_variables_initializer (TF's Scaffold local_init_op),
// so streaming metrics (graph/metrics.hpp) start from zero.
//
// The end of training: a worker's session whose training ended normally (StopAtStepHook or
// another hook asked to stop, an input ran out, or the program simply closes it) reports the
// worker done to the cluster when it is closed or destroyed, not when should_stop() turns
// true, so the chief can still use raw_session(), e.g. to export the model. Once every worker
// has reported, the last to do so stops the ps tasks, whose Server::join() then returns
// (distributed/end_of_training.hpp). A session whose run failed past recovery, or that is
// destroyed by an exception, does not report; the ps tasks then stop on their own after
// ServerOptions::orphan_timeout without workers. stop_ps_when_done = false keeps TF1's ps
// tasks, which serve until killed.
//
// Not thread-safe: one training loop per MonitoredTrainingSession.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/hooks.hpp"
#include "psflow/train/saver.hpp"
#include "psflow/train/supervisor.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <cstdio>
#include <thread>

#include "psflow/core/log.hpp"
#include "psflow/distributed/connect_deadline.hpp"
#include "psflow/distributed/server_core.hpp"
#endif

namespace psflow {
class ServerCore;  // distributed/server_core.hpp
}

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
  // Chief: logs global_step/sec (and writes it to summary_dir) every this many global steps;
  // unset: at most once per 10 s; 0: never.
  std::optional<std::int64_t> log_step_count_steps;
  double recovery_wait_secs = 1;  // non-chief poll interval (TF: 30 s)
  // Deprecated: startup_timeout_secs. When set, it bounds a non-chief's wait for the chief
  // instead.
  std::optional<double> ready_deadline_secs;
  double recovery_deadline_secs = 300;  // give up re-creating the session after failures
  Operation init_op;                    // empty: global_variables_initializer(graph)
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
  // Whether this worker's end of training counts towards stopping the ps tasks (see the top
  // of this file). Unset: yes when master is a Server's target and its cluster has a ps job.
  // Reporting waits for each ps task at most min(startup_timeout_secs, 10 s) and for the chief
  // 2 s, so a program that stops its ps tasks itself (Server::stop_job) while such a session is
  // still open should set false, or its close() may wait that long for tasks that are gone.
  std::optional<bool> stop_ps_when_done;
  // Start-up: how long to wait for the cluster (every task the first runs need), and, on a
  // non-chief, how long to wait for the chief to initialize the model. Past it the session
  // fails: Unavailable naming the task and address it could not reach, or DeadlineExceeded
  // naming a variable the chief has not initialized. The waits are logged, less and less often.
  // (Later failures are recovery's, bounded by recovery_deadline_secs.)
  double startup_timeout_secs = 120;
  // Chief: when the newest checkpoint in checkpoint_dir fails to restore with DataLoss (a bad
  // checksum, a truncated file), restore the newest older one still kept instead, logging
  // which file was skipped and why. Off: DataLoss stops the chief, which is the safe default.
  bool restore_fallback = false;
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
  // One of the options that bound a wait, e.g. recovery_deadline_secs.
  struct Deadline {
    const char* name;
    double secs;
    // "300 s"
    PSFLOW_DECL std::string secs_text() const;
    // "recovery_deadline_secs (300 s)"
    std::string text() const { return std::string(name) + " (" + secs_text() + ")"; }
  };
  Deadline recovery_deadline() const {
    return {"recovery_deadline_secs", options_.recovery_deadline_secs};
  }
  Deadline startup_deadline() const {
    return {"startup_timeout_secs", options_.startup_timeout_secs};
  }
  PSFLOW_DECL static std::chrono::steady_clock::duration to_duration(double secs);
  PSFLOW_DECL static std::chrono::duration<double> seconds(double s);
  // "12.3 s left before recovery_deadline_secs (300 s)"
  PSFLOW_DECL static std::string time_left(const Deadline& deadline,
                                           std::chrono::steady_clock::time_point started);
  // Whether a wait that began at `started`, last logged at `last_log`, should log again now:
  // 5 s after the first line, then at doubling intervals.
  PSFLOW_DECL static bool thinning_log_due(std::chrono::steady_clock::time_point started,
                                           std::chrono::steady_clock::time_point last_log,
                                           std::chrono::steady_clock::time_point now);
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
  // Chief: restores the newest checkpoint, or with restore_fallback the newest that restores.
  PSFLOW_DECL void restore(Session& sess, const std::string& newest);
  // This worker's Server when its end of training counts (stop_ps_when_done), else null.
  PSFLOW_DECL ServerCore* cluster_server() const;

  Graph& graph_;
  MonitoredTrainingSessionOptions options_;
  std::vector<std::shared_ptr<SessionRunHook>> hooks_;
  Operation init_op_;
  Operation local_init_op_;  // local_variables_initializer when the graph has local variables
  ReadinessCheck readiness_;
  std::unique_ptr<Saver> saver_;
  std::unique_ptr<Session> session_;
  std::vector<std::unique_ptr<Session>> retired_;
  bool stop_requested_ = false;
  bool closed_ = false;
  bool ends_cluster_ = false;  // stop_ps_when_done, resolved
  bool last_run_failed_ = false;
  int uncaught_at_start_ = std::uncaught_exceptions();  // more when destroyed by an exception
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
      if (!options_.log_step_count_steps)
        hooks_.push_back(StepCounterHook(std::chrono::seconds(10), summary_dir));
      else if (*options_.log_step_count_steps > 0)
        hooks_.push_back(StepCounterHook(*options_.log_step_count_steps, summary_dir));
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
  if (!local_variables(graph_).empty()) local_init_op_ = local_variables_initializer(graph_);
  if (options_.is_chief && !options_.checkpoint_dir.empty())
    saver_ = std::make_unique<Saver>(graph_,
                                     SaverOptions{.max_to_keep = options_.max_checkpoints_to_keep,
                                                  .sharded = options_.sharded_checkpoints});
  for (auto& hook : hooks_) hook->begin(graph_);
  if (options_.master.rfind("psflow://", 0) == 0)
    if (const ServerCore* server = ServerCore::find_local(options_.master))
      ends_cluster_ = options_.stop_ps_when_done.value_or(server->cluster().has_job("ps"));
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
  last_run_failed_ = true;  // until a run returns: a failure escaping here ends no training
  for (;;) {
    try {
      auto results = run_once(bounded, fetches, feeds, targets, metadata);
      last_run_failed_ = false;
      return results;
    } catch (const OutOfRange& e) {
      // An input ran out (e.g. synchronous training ended and its token queue closed): the
      // normal end of the loop, as TF's MonitoredSession treats OutOfRangeError.
      log(std::string("stopping: ") + e.what());
      stop_requested_ = true;
      last_run_failed_ = false;
      return {};
    } catch (const Error& e) {
      if (e.code() != ErrorCode::aborted && e.code() != ErrorCode::unavailable) throw;
      const auto now = std::chrono::steady_clock::now();
      if (!recovery_started) recovery_started = now;
      if (now - *recovery_started > seconds(options_.recovery_deadline_secs)) {
        log("run failed (" + std::string(e.what()) + "); giving up: " + recovery_deadline().text() +
            " passed");
        throw;
      }
      log("run failed (" + std::string(e.what()) + "); re-creating the session, " +
          time_left(recovery_deadline(), *recovery_started));
      create_session_with_retries(Status(e.code(), e.message()), *recovery_started);
    }
  }
}

void MonitoredTrainingSession::close() {
  if (closed_) return;
  closed_ = true;
  const bool training_ended = !last_run_failed_ && std::uncaught_exceptions() <= uncaught_at_start_;
  if (session_) {
    for (auto& hook : hooks_) hook->end(*session_);
    session_->close();
  }
  if (!training_ended) return;
  if (ServerCore* server = cluster_server())
    server->report_done(std::chrono::duration_cast<std::chrono::milliseconds>(
        seconds(std::min(options_.startup_timeout_secs, 10.0))));
}

ServerCore* MonitoredTrainingSession::cluster_server() const {
  return ends_cluster_ ? ServerCore::find_local(options_.master) : nullptr;
}

Session& MonitoredTrainingSession::raw_session() {
  if (!session_) throw FailedPrecondition("no session");
  return *session_;
}

std::chrono::duration<double> MonitoredTrainingSession::seconds(double s) {
  return std::chrono::duration<double>(s);
}

std::chrono::steady_clock::duration MonitoredTrainingSession::to_duration(double secs) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(seconds(secs));
}

std::string MonitoredTrainingSession::Deadline::secs_text() const {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", secs);
  return text;
}

std::string MonitoredTrainingSession::time_left(const Deadline& deadline,
                                                std::chrono::steady_clock::time_point started) {
  const double left =
      deadline.secs -
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  char text[64];
  std::snprintf(text, sizeof text, "%.1f s left before ", left > 0 ? left : 0.0);
  return text + deadline.text();
}

bool MonitoredTrainingSession::thinning_log_due(std::chrono::steady_clock::time_point started,
                                                std::chrono::steady_clock::time_point last_log,
                                                std::chrono::steady_clock::time_point now) {
  if (last_log < started) return true;  // never logged
  return now - last_log >=
         std::max<std::chrono::steady_clock::duration>(std::chrono::seconds(5), last_log - started);
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
  const Deadline deadline = recovering ? recovery_deadline() : startup_deadline();
  const auto give_up_at = started + to_duration(deadline.secs);
  // Starting, every connect waits for its task until the start-up deadline, no longer.
  std::optional<psflow::detail::ConnectDeadline> connect_deadline;
  if (!recovering) connect_deadline.emplace(give_up_at);
  auto last_log = started - std::chrono::hours(1);
  for (int attempt = 1;; ++attempt) {
    try {
      // An old session stays alive (not closed) until this one is destroyed: a hook's
      // background thread may still be finishing a run on it.
      if (session_) retired_.push_back(std::move(session_));
      session_ = std::make_unique<Session>(graph_, options_.master, options_.session_options);
      prepare(*session_);
      // TF's Scaffold local_init_op: every session starts its metrics from zero.
      if (local_init_op_.valid()) session_->run(local_init_op_);
      for (auto& hook : hooks_) hook->after_create_session(*session_);
      if (recovering) log("recovery attempt " + std::to_string(attempt) + " succeeded");
      // Again after a recovery: a restarted ps has forgotten.
      if (ServerCore* server = cluster_server())
        server->announce_end_of_training(std::chrono::seconds(2));
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::aborted && e.code() != ErrorCode::unavailable) throw;
      last = Status(e.code(), e.message());
      const std::string what = recovering ? "recovery attempt " : "creating the session, attempt ";
      const auto now = std::chrono::steady_clock::now();
      if (now >= give_up_at) {
        log(what + std::to_string(attempt) + " failed (" + e.what() +
            "); giving up: " + deadline.text() + " passed");
        if (recovering || e.code() != ErrorCode::unavailable) throw;
        throw Unavailable(e.message() + " (gave up: " + deadline.text() + " passed)");
      }
      // Each recovery attempt is news; start-up waits say so less and less often.
      if (recovering || thinning_log_due(started, last_log, now)) {
        char wait[32];
        std::snprintf(wait, sizeof wait, "%.1f s", options_.recovery_wait_secs);
        log(what + std::to_string(attempt) + " failed (" + e.what() + "); retrying in " + wait +
            ", " + time_left(deadline, started));
        last_log = now;
      }
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          to_duration(options_.recovery_wait_secs), give_up_at - now));
    }
  }
}

void MonitoredTrainingSession::restore(Session& sess, const std::string& newest) {
  std::vector<std::string> candidates{newest};
  if (options_.restore_fallback)
    if (auto state = get_checkpoint_state(options_.checkpoint_dir))
      for (auto it = state->all_model_checkpoint_paths.rbegin();
           it != state->all_model_checkpoint_paths.rend(); ++it)
        if (*it != newest) candidates.push_back(*it);
  for (std::size_t i = 0;; ++i) {
    log("restoring " + candidates[i]);
    try {
      saver_->restore(sess, candidates[i]);
      return;
    } catch (const DataLoss& e) {
      if (i + 1 == candidates.size()) throw;
      log("skipping " + candidates[i] + " (" + e.what() +
          "); restore_fallback: trying the previous checkpoint kept, " + candidates[i + 1]);
    }
  }
}

void MonitoredTrainingSession::prepare(Session& sess) {
  if (options_.is_chief) {
    std::optional<std::string> checkpoint;
    if (!options_.checkpoint_dir.empty()) checkpoint = latest_checkpoint(options_.checkpoint_dir);
    if (checkpoint) {
      restore(sess, *checkpoint);
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
  const Deadline deadline = options_.ready_deadline_secs
                                ? Deadline{"ready_deadline_secs", *options_.ready_deadline_secs}
                                : startup_deadline();
  const psflow::detail::ConnectDeadline connect_deadline(started + to_duration(deadline.secs));
  auto last_log = started - std::chrono::hours(1);
  for (;;) {
    auto missing = readiness_.uninitialized(sess);
    if (missing.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - started > to_duration(deadline.secs))
      throw DeadlineExceeded(
          "waited " + deadline.secs_text() + " (" + deadline.name +
          ") for the chief to initialize the model; still uninitialized: " + missing.front() +
          (missing.size() > 1 ? " and " + std::to_string(missing.size() - 1) + " more" : "") +
          ". Is the chief (worker task 0) running?");
    if (thinning_log_due(started, last_log, now)) {
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
