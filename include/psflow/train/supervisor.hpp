// Supervisor: TF1's tf.train.Supervisor. It hands a worker a Session whose model is ready:
// the chief restores the latest checkpoint of its logdir (or runs the init op when there is
// none), saves a checkpoint at once and then every save_model_secs from a background thread
// and once more at stop(); the other workers wait, bounded by ready_deadline_secs, until every
// variable is initialized (by the chief, on the ps tasks they share). Every worker's session
// then runs local_variables_initializer (TF's local_init_op), so streaming metrics start at 0.
//
// Also ReadinessCheck, TF's report_uninitialized_variables: which variables hold no value yet,
// asked through IsVariableInitialized ops so it works the same in process and across tasks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/train/saver.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <system_error>

#include "psflow/core/log.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/runtime/kernels/state_kernels.hpp"  // the kernels these graphs run
#endif

namespace psflow::train {

// Which of a set of variables hold no value yet. The IsVariableInitialized ops are built once,
// at construction, each colocated with its variable (so build it while building the graph);
// uninitialized() runs them all in one step and may be called from any thread.
class ReadinessCheck {
 public:
  ReadinessCheck() = default;
  explicit ReadinessCheck(const std::vector<Variable>& variables);

  // Names of the variables that are not initialized, in construction order; empty when the
  // model is ready. Session errors (e.g. Unavailable when a ps is down) propagate.
  std::vector<std::string> uninitialized(Session& sess) const;

 private:
  std::vector<std::string> names_;
  std::vector<Output> checks_;
};

struct SupervisorOptions {
  bool is_chief = true;
  std::string logdir;               // "": no checkpoints (nothing restored, nothing saved)
  double save_model_secs = 600;     // <= 0: save only at start and at stop()
  double recovery_wait_secs = 1;    // non-chief: time between readiness polls
  double ready_deadline_secs = 60;  // non-chief: give up (DeadlineExceeded) after this long
  Operation init_op;                // empty: global_variables_initializer(graph)
  std::string checkpoint_basename = "model.ckpt";  // checkpoints: "<logdir>/<basename>-<step>"
  std::size_t max_to_keep = 5;                     // checkpoints kept in logdir (0: all)
};

// Owns the managed Session and the background saver thread.
//
// Build it while building the graph (its constructor adds the init, restore and readiness ops).
// managed_session() blocks until the model is ready (chief: restore or init, then the first
// save; non-chief: polls). managed_session() and stop() are for the thread that owns the
// Supervisor; should_stop() and request_stop() may be called from any thread. The returned
// Session belongs to the Supervisor and is closed by stop(); the Graph must outlive it.
class Supervisor {
 public:
  Supervisor(Graph& graph, SupervisorOptions options);
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;
  // stop(); an error from its final save is logged to standard error, not thrown.
  ~Supervisor();

  // Creates Session(graph, target) ("" = in-process) and makes the model ready. Chief: restores
  // latest_checkpoint(logdir) if there is one, else runs init_op; throws FailedPrecondition if
  // some variable is still uninitialized after that; then saves "<logdir>/model.ckpt-<step>"
  // (step: the value of a variable named "global_step", else 0). Non-chief: polls every
  // recovery_wait_secs until every variable is initialized (retrying Unavailable/Aborted with a
  // fresh Session), logging what it waits for; throws DeadlineExceeded naming the variables
  // after ready_deadline_secs, Aborted if request_stop() is called meanwhile. Once per
  // Supervisor (FailedPrecondition on a second call).
  Session& managed_session(std::string_view target = "");

  // Requests a stop, joins the saver thread, saves a last checkpoint (chief with a logdir) and
  // closes the Session. Idempotent; throws the final save's error.
  void stop();

  bool should_stop() const noexcept { return stop_requested_.load(); }
  // Makes should_stop() true and ends the periodic saves (stop() still saves once more).
  void request_stop();

  // The Saver used for the logdir (nullptr when logdir is empty).
  Saver* saver() noexcept { return saver_.get(); }
  // Saves "<logdir>/<basename>-<global step>" now; returns its path. Chief with a logdir only.
  std::string save_checkpoint();

 private:
  std::unique_ptr<Session> prepare_chief(std::string_view target);
  std::unique_ptr<Session> wait_until_ready(std::string_view target);
  std::int64_t global_step_value(Session& sess) const;
  void saver_loop();

  Graph& graph_;
  SupervisorOptions options_;
  Operation init_op_;
  Operation local_init_op_;  // local_variables_initializer when the graph has local variables
  std::optional<Variable> global_step_;
  std::unique_ptr<Saver> saver_;
  ReadinessCheck readiness_;
  std::unique_ptr<Session> session_;
  std::thread saver_thread_;
  mutable std::mutex mutex_;  // guards the flags below and the waits
  std::condition_variable wake_;
  std::atomic<bool> stop_requested_{false};
  bool started_ = false;
  bool stopped_ = false;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

namespace detail {

// Seconds as a steady_clock duration, clamped so that huge values cannot overflow.
PSFLOW_DECL std::chrono::steady_clock::duration seconds_to_duration(double secs) {
  secs = std::clamp(secs, 0.0, 1e9);
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(secs));
}

// "a, b, c and 7 more": variable lists in logs and errors stay one readable line.
PSFLOW_DECL std::string name_list(const std::vector<std::string>& names, std::size_t shown = 10) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

PSFLOW_DECL std::string seconds_string(double secs) {
  std::ostringstream out;
  out << std::round(secs * 100) / 100 << " s";  // "0.2 s", "12.34 s", "60 s"
  return out.str();
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Definitions

PSFLOW_DECL ReadinessCheck::ReadinessCheck(const std::vector<Variable>& variables) {
  if (variables.empty()) return;
  Graph& graph = variables.front().graph();
  auto scope = graph.name_scope("report_uninitialized_variables");
  for (const auto& v : variables) {
    names_.push_back(v.name());
    checks_.push_back(ops::is_variable_initialized(v.ref()));
  }
}

PSFLOW_DECL std::vector<std::string> ReadinessCheck::uninitialized(Session& sess) const {
  std::vector<std::string> missing;
  if (checks_.empty()) return missing;
  const std::vector<Tensor> ready = sess.run(checks_);
  for (std::size_t i = 0; i < ready.size(); ++i)
    if (!ready[i].scalar<bool>()) missing.push_back(names_[i]);
  return missing;
}

PSFLOW_DECL Supervisor::Supervisor(Graph& graph, SupervisorOptions options)
    : graph_(graph), options_(std::move(options)) {
  init_op_ = options_.init_op ? options_.init_op : global_variables_initializer(graph_);
  if (&init_op_.graph() != &graph_)
    throw InvalidArgument("SupervisorOptions::init_op '" + init_op_.name() +
                          "' belongs to another Graph");
  global_step_ = find_variable(graph_, "global_step");
  if (global_step_ && (!global_step_->shape().empty() || (global_step_->dtype() != DType::int64 &&
                                                          global_step_->dtype() != DType::int32)))
    throw InvalidArgument("variable 'global_step' must be an int64 (or int32) scalar, it is " +
                          std::string(dtype_name(global_step_->dtype())) +
                          shape_string(global_step_->shape()));
  if (!options_.logdir.empty()) saver_ = std::make_unique<Saver>(graph_, options_.max_to_keep);
  readiness_ = ReadinessCheck(global_variables(graph_));
  if (!local_variables(graph_).empty()) local_init_op_ = local_variables_initializer(graph_);
}

PSFLOW_DECL Supervisor::~Supervisor() {
  try {
    stop();
  } catch (const std::exception& e) {
    log_line(std::string("Supervisor: the final checkpoint failed: ") + e.what());
  }
}

PSFLOW_DECL Session& Supervisor::managed_session(std::string_view target) {
  {
    std::lock_guard lock(mutex_);
    if (stopped_)
      throw FailedPrecondition("Supervisor::managed_session(): the Supervisor is stopped");
    if (started_)
      throw FailedPrecondition(
          "Supervisor::managed_session() was already called: keep using the Session it returned "
          "(a Supervisor manages one Session)");
    started_ = true;
  }
  try {
    session_ = options_.is_chief ? prepare_chief(target) : wait_until_ready(target);
    if (local_init_op_.valid()) session_->run(local_init_op_);
  } catch (...) {  // nothing is managed yet: the caller may try again
    std::lock_guard lock(mutex_);
    started_ = false;
    throw;
  }
  if (options_.is_chief && saver_) {
    save_checkpoint();  // as TF's saver thread does at start: a restart never begins from scratch
    if (options_.save_model_secs > 0) saver_thread_ = std::thread([this] { saver_loop(); });
  }
  return *session_;
}

PSFLOW_DECL std::unique_ptr<Session> Supervisor::prepare_chief(std::string_view target) {
  auto sess = std::make_unique<Session>(graph_, target);
  std::optional<std::string> checkpoint;
  if (saver_) {
    std::error_code ec;
    std::filesystem::create_directories(options_.logdir, ec);
    if (ec)
      throw FailedPrecondition("Supervisor: cannot create logdir '" + options_.logdir +
                               "': " + ec.message());
    checkpoint = latest_checkpoint(options_.logdir);
  }
  if (checkpoint) {
    log_line("Supervisor: restoring the model from " + *checkpoint);
    saver_->restore(*sess, *checkpoint);
  } else {
    sess->run(init_op_);
  }
  const auto missing = readiness_.uninitialized(*sess);
  if (!missing.empty())
    throw FailedPrecondition(
        std::string("Supervisor: after ") +
        (checkpoint ? "restoring " + *checkpoint : "running init op '" + init_op_.name() + "'") +
        " these variables are still uninitialized: " + detail::name_list(missing) +
        " (pass an init_op that initializes them, or leave it empty for "
        "global_variables_initializer)");
  return sess;
}

PSFLOW_DECL std::unique_ptr<Session> Supervisor::wait_until_ready(std::string_view target) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + detail::seconds_to_duration(options_.ready_deadline_secs);
  // Never spin: poll at least every millisecond apart.
  const auto poll = std::max<clock::duration>(
      detail::seconds_to_duration(options_.recovery_wait_secs), std::chrono::milliseconds(1));
  constexpr auto log_every = std::chrono::seconds(5);
  std::optional<clock::time_point> last_log;
  std::unique_ptr<Session> sess;
  std::vector<std::string> missing;
  std::string last_error;
  for (;;) {
    try {
      if (!sess) sess = std::make_unique<Session>(graph_, target);
      missing = readiness_.uninitialized(*sess);
      if (missing.empty()) return sess;
      last_error.clear();
    } catch (const Unavailable& e) {  // a ps not up yet, or restarting: ask again later
      last_error = e.what();
      sess.reset();
    } catch (const Aborted& e) {
      last_error = e.what();
      sess.reset();
    }
    const auto now = clock::now();
    const double waited = std::chrono::duration<double>(now - start).count();
    const std::string waiting_for =
        last_error.empty() ? "the chief to initialize " + std::to_string(missing.size()) +
                                 " variable(s): " + detail::name_list(missing)
                           : "the cluster (" + last_error + ")";
    if (now >= deadline)
      throw DeadlineExceeded(
          "Supervisor (non-chief): the model is not ready after " + detail::seconds_string(waited) +
          ": waited for " + waiting_for +
          ". Check that the chief worker is running with the same cluster and graph, or raise "
          "SupervisorOptions::ready_deadline_secs");
    if (!last_log || now - *last_log >= log_every) {
      log_line("Supervisor: waiting for " + waiting_for + " (" + detail::seconds_string(waited) +
               " of " + detail::seconds_string(options_.ready_deadline_secs) + ")");
      last_log = now;
    }
    std::unique_lock lock(mutex_);
    if (wake_.wait_until(lock, std::min(now + poll, deadline), [this] { return should_stop(); }))
      throw Aborted("Supervisor (non-chief): a stop was requested while waiting for " +
                    waiting_for);
  }
}

PSFLOW_DECL std::int64_t Supervisor::global_step_value(Session& sess) const {
  if (!global_step_) return 0;
  const Tensor step = sess.run({global_step_->value()})[0];
  return step.dtype() == DType::int64 ? step.scalar<std::int64_t>()
                                      : static_cast<std::int64_t>(step.scalar<std::int32_t>());
}

PSFLOW_DECL std::string Supervisor::save_checkpoint() {
  if (!options_.is_chief || !saver_)
    throw FailedPrecondition("Supervisor::save_checkpoint: only a chief with a logdir saves");
  if (!session_)
    throw FailedPrecondition("Supervisor::save_checkpoint: call managed_session() first");
  const std::string prefix =
      (std::filesystem::path(options_.logdir) / options_.checkpoint_basename).string();
  const std::string path = saver_->save(*session_, prefix, global_step_value(*session_));
  log_line("Supervisor: saved checkpoint " + path);
  return path;
}

PSFLOW_DECL void Supervisor::saver_loop() {
  const auto interval = detail::seconds_to_duration(options_.save_model_secs);
  auto next = std::chrono::steady_clock::now() + interval;
  std::unique_lock lock(mutex_);
  while (!wake_.wait_until(lock, next, [this] { return should_stop(); })) {
    lock.unlock();
    try {
      save_checkpoint();
    } catch (const std::exception& e) {  // e.g. a ps restarting: training goes on, so do we
      log_line(std::string("Supervisor: periodic checkpoint failed (will retry): ") + e.what());
    }
    lock.lock();
    next += interval;  // a fixed cadence; after a slow save, skip the periods it overran
    const auto now = std::chrono::steady_clock::now();
    if (next <= now) next = now + interval;
  }
}

PSFLOW_DECL void Supervisor::request_stop() {
  {
    std::lock_guard lock(mutex_);
    stop_requested_ = true;
  }
  wake_.notify_all();
}

PSFLOW_DECL void Supervisor::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  request_stop();
  if (saver_thread_.joinable()) saver_thread_.join();
  std::exception_ptr error;
  if (options_.is_chief && saver_ && session_ && !session_->closed()) {
    try {
      save_checkpoint();
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (session_) session_->close();
  if (error) std::rethrow_exception(error);
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
