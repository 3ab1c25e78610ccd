// Example 04: synchronous training with SyncReplicasOptimizer (TF1's
// tf.train.SyncReplicasOptimizer).
//
// Example 03 trains asynchronously: each worker updates the variables on its own, so with 2
// workers the global step counts the updates of both and each worker runs about half of them.
// Here every global step waits for --replicas_to_aggregate gradients (by default one from every
// worker), applies their AVERAGE once, and only then lets the workers compute the next step.
// So with 2 workers and 200 global steps, each worker runs about 200 steps itself: every global
// step used one gradient from each.
//
//   examples/03_between_graph_training/run_cluster.sh --workers 2
//       build/examples/example_04_sync_replicas --train_steps=200
//
// How it works (as in TF): each worker pushes its gradients into one accumulator per variable
// (on the variable's ps) and waits for a token; the chief takes the average of
// replicas_to_aggregate gradients from each accumulator, applies it, increments the global step
// and hands out one token per worker. A gradient computed for an older global step is stale and
// dropped (num_dropped counts them). make_session_run_hook() starts the chief's loop.
#include <cstdio>
#include <psflow/psflow.hpp>

#include "example_support.hpp"

int main(int argc, char** argv) {
  int train_steps = 200, replicas_to_aggregate = 0, log_every = 50;
  psflow::Flags flags("example_04_sync_replicas",
                      "one task of a cluster training y = 3x + 1 synchronously");
  flags.add("train_steps", "global steps to train", &train_steps, 1)
      .add("replicas_to_aggregate", "gradients averaged per global step (0: one per worker)",
           &replicas_to_aggregate, 0)
      .add("log_every", "print the loss every that many global steps", &log_every, 1);
  psflow::TaskFlags task;
  flags.add_task_flags(&task);
  example::parse_or_exit(flags, argc, argv);
  if (task.job_name.empty())
    example::fail(argv[0], "give --job_name=ps|worker and the cluster (or use run_cluster.sh)");

  psflow::Server server(task.cluster, task.job_name, task.task_index, task.server_options());
  if (task.job_name == "ps") {
    example::serve_until_signal(server);
    return 0;
  }
  const int num_workers = static_cast<int>(task.cluster.num_tasks("worker"));
  if (replicas_to_aggregate == 0) replicas_to_aggregate = num_workers;

  // The model of example 03; only the optimizer differs.
  psflow::Graph g;
  psflow::Output loss;
  psflow::Variable global_step;
  psflow::train::GradientDescentOptimizer sgd(0.5);
  // Wraps sgd: gradients are averaged over replicas_to_aggregate workers before sgd applies
  // them. total_num_replicas (the third argument) is how many workers there are; more workers
  // than replicas_to_aggregate makes the extra ones backups.
  psflow::train::SyncReplicasOptimizer sync(sgd, replicas_to_aggregate, num_workers);
  psflow::Operation train_op;
  {
    auto placement = g.device(psflow::train::replica_device_setter(
        {.worker_device = task.device(), .cluster = task.cluster}));
    psflow::Output x = psflow::ops::random_uniform(g, {32, 1});
    psflow::Output y = x * 3.0 + 1.0;
    auto w = psflow::get_variable(g, "w", {1}, psflow::zeros_initializer());
    auto b = psflow::get_variable(g, "b", {1}, psflow::zeros_initializer());
    loss = psflow::ops::reduce_mean(psflow::ops::square(x * w + b - y));
    global_step = psflow::train::get_or_create_global_step(g);
    train_op = sync.minimize(loss, global_step);  // push gradients, then wait for a token
  }

  psflow::train::MonitoredTrainingSessionOptions options;
  options.master = server.target();
  options.is_chief = task.is_chief();
  // The hook: every worker initializes its local step; the chief also runs the aggregation.
  options.hooks = {psflow::train::StopAtStepHook(train_steps),
                   sync.make_session_run_hook(task.is_chief())};
  psflow::train::MonitoredTrainingSession sess(g, options);
  int local_steps = 0;
  std::int64_t step = 0, next_log = 0;
  float last_loss = 0;
  while (!sess.should_stop()) {
    auto values = sess.run({loss, global_step.value()}, {}, {train_op});
    if (values.empty()) break;  // the chief ended training while this worker waited for a token
    ++local_steps;
    last_loss = values[0].scalar<float>();
    step = values[1].scalar<std::int64_t>();
    if (task.is_chief() && step >= next_log) {
      next_log = (step / log_every + 1) * log_every;
      std::printf("global step %lld: loss %.5f\n", static_cast<long long>(step), last_loss);
    }
  }
  std::printf("worker %zu done: ran %d local steps for %d global steps, last loss %.5f\n",
              task.task_index, local_steps, train_steps, last_loss);
  if (task.is_chief()) {
    auto dropped = sess.raw_session().run({sync.num_dropped()})[0].scalar<std::int64_t>();
    std::printf("each global step averaged %d gradients; stale gradients dropped: %lld\n",
                replicas_to_aggregate, static_cast<long long>(dropped));
  }
  return 0;
}
