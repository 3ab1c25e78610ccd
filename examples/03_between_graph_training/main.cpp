// Example 03: between-graph training on a cluster, TF1's standard ps/worker recipe.
//
// The same program runs once per task, with TF's flags:
//   example_03_between_graph_training --ps_hosts=127.0.0.1:2222
//       --worker_hosts=127.0.0.1:2223,127.0.0.1:2224 --job_name=ps     --task_index=0
//   ... --job_name=worker --task_index=0    (the chief: initializes, saves checkpoints)
//   ... --job_name=worker --task_index=1
// or all at once on free ports: examples/03_between_graph_training/run_cluster.sh --workers 2
//       build/examples/example_03_between_graph_training --checkpoint_dir=/tmp/example_03
//
// A ps task only serves: it holds the variables and applies the updates sent to it. Each worker
// builds the whole model itself ("between-graph replication"); replica_device_setter puts the
// variables on the ps and everything else on this worker. Every worker trains on its own batches
// and updates the shared variables asynchronously; the shared global step counts the updates of
// all workers, and StopAtStepHook ends every worker's loop when it reaches --train_steps.
// The model is a linear regression on synthetic data, y = 3x + 1: w and b go to about 3 and 1.
//
// Unlike TF's ps, which never exits, ours stops on Ctrl-C or SIGTERM and exits 0 (run_cluster.sh
// sends SIGTERM once every worker has exited).
#include <cstdio>
#include <memory>
#include <psflow/psflow.hpp>

#include "example_support.hpp"

int main(int argc, char** argv) {
  int train_steps = 1000, save_checkpoint_steps = 250, log_every = 100;
  std::string checkpoint_dir;
  psflow::Flags flags("example_03_between_graph_training",
                      "one task (ps or worker) of a cluster training y = 3x + 1");
  flags.add("train_steps", "global steps to train, all workers together", &train_steps, 1)
      .add("checkpoint_dir", "where the chief saves checkpoints; \"\" saves none", &checkpoint_dir)
      .add("save_checkpoint_steps", "a checkpoint every that many steps", &save_checkpoint_steps, 1)
      .add("log_every", "print the loss every that many global steps", &log_every, 1);
  psflow::TaskFlags task;
  flags.add_task_flags(&task);
  example::parse_or_exit(flags, argc, argv);
  if (task.job_name.empty())
    example::fail(argv[0], "give --job_name=ps|worker and the cluster (or use run_cluster.sh)");

  // ---- the program: cluster, model, training loop ----
  psflow::Server server(task.cluster, task.job_name, task.task_index, task.server_options());
  if (task.job_name == "ps") {
    example::serve_until_signal(server);  // TF: server.join()
    return 0;
  }

  psflow::Graph g;
  psflow::Output loss;
  psflow::Variable w, b, global_step;
  psflow::train::GradientDescentOptimizer optimizer(0.5);
  psflow::Operation train_op;
  {
    // Variables to the ps tasks (round robin), every other op to this worker.
    auto placement = g.device(psflow::train::replica_device_setter(
        {.worker_device = task.device(), .cluster = task.cluster}));
    psflow::Output x = psflow::ops::random_uniform(g, {32, 1});  // a fresh batch every step
    psflow::Output y = x * 3.0 + 1.0;                            // the targets
    w = psflow::get_variable(g, "w", {1}, psflow::zeros_initializer());
    b = psflow::get_variable(g, "b", {1}, psflow::zeros_initializer());
    loss = psflow::ops::reduce_mean(psflow::ops::square(x * w + b - y));
    global_step = psflow::train::get_or_create_global_step(g);
    train_op = optimizer.minimize(loss, global_step);  // the update runs on the ps
  }

  psflow::train::MonitoredTrainingSessionOptions options;
  options.master = server.target();
  options.is_chief = task.is_chief();  // worker 0 initializes (or restores) and saves
  options.checkpoint_dir = checkpoint_dir;
  options.save_checkpoint_steps = save_checkpoint_steps;
  options.hooks = {psflow::train::StopAtStepHook(train_steps)};
  psflow::train::MonitoredTrainingSession sess(g, options);
  int local_steps = 0;
  std::int64_t next_log = 0;
  float last_loss = 0;
  while (!sess.should_stop()) {
    auto values = sess.run({loss, global_step.value()}, {}, {train_op});
    if (values.empty()) break;  // training ended while this step waited
    last_loss = values[0].scalar<float>();
    const auto step = values[1].scalar<std::int64_t>();  // the global step, around this update
    ++local_steps;
    if (step >= next_log) {  // the workers share the global step: log as it passes the marks
      next_log = (step / log_every + 1) * log_every;
      std::printf("worker %zu: global step %lld, loss %.5f\n", task.task_index,
                  static_cast<long long>(step), last_loss);
    }
  }
  // ---- end of the program's core ----

  auto final_values = sess.raw_session().run({w.value(), b.value()});
  std::printf("worker %zu done: %d local steps, last loss %.5f, w = %.3f, b = %.3f\n",
              task.task_index, local_steps, last_loss, final_values[0].values<float>()[0],
              final_values[1].values<float>()[0]);
  return 0;  // the chief's session saves a last checkpoint as it closes
}
