// What the example trainers (examples/trainer, examples/ctr) share: the flags of every task
// (parse_task_options: the deadlines, --progress, and TF's cluster flags), one BLAS thread per
// process, logging, progress lines, and the end of a training run, where the chief stops the ps
// tasks only after every other worker has said it is done (the handshake is explained in
// examples/trainer/main.cpp, at the top).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <psflow/psflow.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/flags.hpp"

// OpenBLAS's own threads (one per core, busy-waiting between calls) fight psflow's inter-op
// threads and the other tasks on the same cores: with them a step costs 2-3 times the CPU.
// Weak, so that the program still links against another BLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace cluster_task {

using Clock = std::chrono::steady_clock;

// One BLAS thread per process unless OPENBLAS_NUM_THREADS says otherwise: psflow already runs
// independent ops in parallel, and a cluster's tasks share the machine's cores.
inline void limit_blas_threads() {
  const char* env = std::getenv("OPENBLAS_NUM_THREADS");
  if (openblas_set_num_threads && !(env && *env)) openblas_set_num_threads(1);
}

// The program's name, for log lines ("[trainer] ...") and errors.
inline std::string& program_name() {
  static std::string name = "example";
  return name;
}

inline void log(const std::string& line) {
  std::fprintf(stderr, "[%s] %s\n", program_name().c_str(), line.c_str());
}

inline std::string format(const char* fmt, auto... args) {
  char text[512];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The flags every example task takes (parse_task_options registers them).
struct TaskOptions {
  bool distributed = false;  // --job_name or TF_CONFIG given: one task of a cluster
  psflow::TaskFlags task;
  double connect_timeout_s = 30;    // how long to wait for a task that is not up yet
  double recovery_deadline_s = 60;  // how long MonitoredTrainingSession retries after a failure
  double shutdown_wait_s = 60;      // chief: how long to wait for the other workers to finish
  std::string progress = "auto";    // --progress: auto | live | plain | false (make_progress)
  double progress_every_s = 30;     // --progress_every_s: plain mode's interval

  bool chief() const { return !distributed || task.task_index == 0; }
  std::size_t num_workers() const { return distributed ? task.cluster.num_tasks("worker") : 1; }
  std::size_t num_ps() const { return distributed ? task.cluster.num_tasks("ps") : 0; }
  std::size_t index() const { return distributed ? task.task_index : 0; }
};

// Registers the flags of TaskOptions with `flags` and reads the command line: psflow::TaskFlags
// the cluster flags (with --job_name or TF_CONFIG), `flags` everything else. A bad flag exits 2
// (ExampleFlags).
inline TaskOptions parse_task_options(example::ExampleFlags& flags, int argc, char** argv) {
  TaskOptions options;
  flags
      .add("connect_timeout_s", options.connect_timeout_s,
           "how long to wait for a task that is not up yet", 0.1)
      .add("recovery_deadline_s", options.recovery_deadline_s,
           "how long MonitoredTrainingSession retries after a failure", 0.0)
      .add("shutdown_wait_s", options.shutdown_wait_s,
           "chief: how long to wait for the other workers to finish", 0.0)
      .add("progress",
           "a line with the global step, steps/s, ETA and loss: auto: on a\n"
           "terminal one live line (any worker), else a plain line every\n"
           "--progress_every_s (chief only); live | plain: that mode on every\n"
           "worker; false: none",
           options.progress, "auto, live, plain or false", false,
           [&options](const std::string& value) {
             if (value != "auto" && value != "true" && value != "live" && value != "plain" &&
                 value != "false")
               return false;
             options.progress = value == "true" ? "auto" : value;
             return true;
           })
      .add("progress_every_s", options.progress_every_s, "plain progress lines' interval", 0.1);
  std::optional<psflow::TaskFlags> task = flags.parse_task(argc, argv);
  options.distributed = task.has_value();
  if (task) options.task = std::move(*task);
  return options;
}

// --progress: a line with the global step's way to `total` (observe/progress.hpp), or null.
// auto: on a terminal a live line (every worker: each may have its own terminal), else plain
// lines every --progress_every_s from the chief only (a cluster's log need not repeat them per
// worker); live, plain: that mode on every worker; false: none.
inline std::unique_ptr<psflow::observe::ProgressLine> make_progress(const TaskOptions& options,
                                                                    std::int64_t total) {
  if (options.progress == "false") return nullptr;
  psflow::observe::ProgressOptions progress;
  progress.prefix = "[" + program_name() + "] ";
  progress.plain_every_s = options.progress_every_s;
  if (options.progress != "auto") progress.live = options.progress == "live";
  auto line = std::make_unique<psflow::observe::ProgressLine>(total, progress);
  if (options.progress == "auto" && !line->live() && !options.chief()) return nullptr;
  return line;
}

// log(), above a live progress line when there is one.
inline void log(const std::string& line, psflow::observe::ProgressLine* progress) {
  if (progress)
    progress->print_above("[" + program_name() + "] " + line);
  else
    log(line);
}

// The end-of-training handshake's counter: an int64 on the chief's task (/job:worker/task:0),
// a plain VariableV2 outside the global variables (never saved, restored or waited for).
struct WorkersDone {
  psflow::Operation zero, report;
  psflow::Output value;
};

inline WorkersDone build_workers_done(psflow::Graph& graph) {
  auto on_chief = graph.device("/job:worker/task:0");
  auto scope = graph.name_scope(program_name());
  WorkersDone done;
  psflow::Output counter =
      psflow::ops::variable(graph, {}, psflow::DType::int64, program_name() + "/workers_done");
  auto colocated = graph.colocate_with(counter.op());
  done.zero =
      psflow::ops::assign(counter, psflow::ops::constant(graph, psflow::Tensor(std::int64_t{0})),
                          true, "zero")
          .op();
  done.report =
      psflow::ops::assign_add(
          counter, psflow::ops::constant(graph, psflow::Tensor(std::int64_t{1})), "report")
          .op();
  done.value = psflow::ops::identity(counter, "read");
  return done;
}

inline bool is_peer_gone(const psflow::Error& e) {
  return e.code() == psflow::ErrorCode::unavailable || e.code() == psflow::ErrorCode::aborted;
}

// Chief only: waits until every other worker has reported done (or --shutdown_wait_s), asks the
// unfinished ones to stop, then stops the ps tasks.
inline void end_cluster(psflow::Server& server, psflow::Graph& graph, const WorkersDone& done,
                        const TaskOptions& options) {
  const std::size_t others = options.num_workers() - 1;
  std::int64_t reported = 0;
  if (others > 0) {
    psflow::Session sess(graph, server.target());
    const auto started = Clock::now();
    auto last_log = started;
    for (;;) {
      reported = sess.run({done.value})[0].scalar<std::int64_t>();
      if (reported >= static_cast<std::int64_t>(others) ||
          seconds_since(started) > options.shutdown_wait_s)
        break;
      if (seconds_since(last_log) > 5) {
        log(format("waiting for the other workers to finish: %lld of %zu done",
                   static_cast<long long>(reported), others));
        last_log = Clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    log(format("%lld of %zu other workers reported done after %.2f s",
               static_cast<long long>(reported), others, seconds_since(started)));
  }
  if (reported < static_cast<std::int64_t>(others)) {
    log("not every worker finished within --shutdown_wait_s: asking the unfinished ones to stop");
    for (std::size_t t = 1; t <= others; ++t)
      server.stop_task("worker", t, std::chrono::milliseconds(1000));
  }
  const std::size_t stopped = server.stop_job("ps");
  log(format("asked the ps tasks to stop: %zu of %zu acknowledged", stopped, options.num_ps()));
}

// One worker's run inside the end-of-training protocol. `train` trains with a
// MonitoredTrainingSession until it should stop, sets `training_ended`, and (chief) evaluates;
// it returns the session, still open. Then: the chief closes it (final checkpoint) and ends the
// cluster; another worker closes it (its last use of the ps) and reports done. Failures after
// the chief ended training are a clean end for a non-chief (see examples/trainer/main.cpp).
inline int run_worker_protocol(
    const TaskOptions& options, psflow::Server* server, psflow::Graph& graph,
    const WorkersDone& done,
    const std::function<
        std::unique_ptr<psflow::train::MonitoredTrainingSession>(bool& training_ended)>& train) {
  const bool chief = options.chief();
  bool training_ended = false;
  try {
    if (chief && server) {  // zero the handshake counter before the model can be ready
      psflow::Session sess(graph, server->target());
      sess.run(done.zero);
    }
    auto session = train(training_ended);
    session->close();
    if (chief) {
      if (server) end_cluster(*server, graph, done, options);
      return 0;
    }
    if (server && server->stopped()) {
      log("the chief has already ended training (it stopped this task); not reporting");
    } else if (server) {
      psflow::Session sess(graph, server->target());
      sess.run(done.report);
      log("reported done to the chief");
    }
    return 0;
  } catch (const psflow::Error& e) {
    if (!chief && is_peer_gone(e) && (training_ended || (server && server->stopped()))) {
      log(std::string("training is over (") +
          (training_ended ? "our loop had ended" : "the chief stopped this task") +
          "); ignoring: " + e.what());
      return 0;
    }
    if (chief && server) {
      log(std::string("failed: ") + e.what() + "; asking the ps tasks to stop");
      server->stop_job("ps", std::chrono::milliseconds(2000));
    }
    throw;
  }
}

// main(): parses nothing itself; runs this task. A ps serves until the chief stops it; a worker
// (or the whole program, without --job_name) runs worker(server or nullptr). Errors are printed
// as "<program>: <what to do>" and exit 1.
inline int run_task(const std::function<TaskOptions()>& parse,
                    const std::function<int(const TaskOptions&, psflow::Server*)>& worker) {
  try {
    limit_blas_threads();
    const TaskOptions options = parse();
    if (!options.distributed) return worker(options, nullptr);
    if (options.task.job_name != "ps" && options.task.job_name != "worker")
      throw psflow::InvalidArgument("--job_name='" + options.task.job_name +
                                    "': " + program_name() + " runs ps and worker tasks");
    psflow::ServerOptions server_options =
        options.task.server_options();  // --bind_all, --checkpoint_dir, ...
    server_options.connect_timeout =
        std::chrono::milliseconds(static_cast<long>(options.connect_timeout_s * 1000));
    psflow::Server server(options.task.cluster, options.task.job_name, options.task.task_index,
                          server_options);
    if (options.task.job_name == "ps") {
      server.join();  // until the chief says training is over
      return 0;
    }
    return worker(options, &server);
  } catch (const std::exception& e) {  // psflow::Error says what to do; others what went wrong
    std::cerr << program_name() << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace cluster_task
