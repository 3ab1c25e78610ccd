// What the example trainers (examples/trainer, examples/ctr) share: the flags of every task
// (parse_task_options: the deadlines, --progress, and TF's cluster flags), one BLAS thread per
// process, logging, progress lines, and running a task (run_task). The end of a training run is
// the library's: each worker's MonitoredTrainingSession reports done when closed, and the last
// stops the ps tasks.
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

// How much of a worker's `training_s` went to waiting for its input iterator's batches.
inline void log_input_wait(const psflow::data::Iterator& input, double training_s) {
  const psflow::data::IteratorStats waits = input.stats();
  const double waited_s = static_cast<double>(waits.wait_ns) * 1e-9;
  log(format("input: %llu batches, waited %.2f s of %.1f s of steps (%.1f%%)",
             static_cast<unsigned long long>(waits.elements), waited_s, training_s,
             100.0 * waited_s / training_s));
}

// The flags every example task takes (parse_task_options registers them).
struct TaskOptions {
  bool distributed = false;  // --job_name or TF_CONFIG given: one task of a cluster
  psflow::TaskFlags task;
  double connect_timeout_s = 30;    // how long to wait for a task that is not up yet
  double recovery_deadline_s = 60;  // how long MonitoredTrainingSession retries after a failure
  std::string progress = "auto";    // --progress: auto | live | plain | false (make_progress)
  double progress_every_s = 30;     // --progress_every_s: plain mode's interval

  bool chief() const { return !distributed || task.task_index == 0; }
  std::size_t num_workers() const { return distributed ? task.cluster.num_tasks("worker") : 1; }
  std::size_t num_ps() const { return distributed ? task.cluster.num_tasks("ps") : 0; }
  std::size_t index() const { return distributed ? task.task_index : 0; }
};

// Registers the flags of TaskOptions with `flags` and reads the command line: psflow::TaskFlags
// the cluster flags (with --job_name or TF_CONFIG), `flags` everything else. A bad flag exits 2
// (common/flags.hpp).
inline TaskOptions parse_task_options(psflow::Flags& flags, int argc, char** argv) {
  TaskOptions options;
  flags
      .add("connect_timeout_s", "how long to wait for a task that is not up yet",
           &options.connect_timeout_s, 0.1)
      .add("recovery_deadline_s", "how long MonitoredTrainingSession retries after a failure",
           &options.recovery_deadline_s, 0.0)
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
      .add("progress_every_s", "plain progress lines' interval", &options.progress_every_s, 0.1);
  psflow::TaskFlags task;
  flags.add_task_flags(&task);
  example::parse_or_exit(flags, argc, argv);
  options.distributed = !task.job_name.empty();
  if (options.distributed) options.task = std::move(task);
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

// main(): parses nothing itself; runs this task. A ps serves until the last worker is done; a
// worker (or the whole program, without --job_name) runs worker(server or nullptr). Errors are
// printed as "<program>: <what to do>" and exit 1.
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
      server.join();  // until every worker's session reported done
      return 0;
    }
    return worker(options, &server);
  } catch (const std::exception& e) {  // psflow::Error says what to do; others what went wrong
    std::cerr << program_name() << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace cluster_task
