// Example 05: what crosses processes in a training step, from Session::describe and
// observe::explain.
//
// When a Session runs on a cluster, the master splits the graph: one partition per task, and
// where an edge goes from one task to another, a _Send/_Recv pair that carries the tensor over
// the network every step. Session::describe(fetches, feeds, targets) returns that plan without
// running anything: which task runs each op (placement) and every tensor that crosses
// (transfers, with bytes and direction). observe::explain renders it as text. This program
// builds example 03's training step for 1 ps + 1 worker, both Servers in this one process on
// free loopback ports, prints the plan read by hand, then explain's account of it, then trains.
//
//   example_05_explain [--steps=N]
#include <iostream>
#include <map>
#include <psflow/psflow.hpp>

#include "example_support.hpp"

int main(int argc, char** argv) {
  int steps = 100;
  psflow::Flags flags("example_05_explain",
                      "prints what a 1 ps + 1 worker training step runs where and sends");
  flags.add("steps", "training steps to run after explaining", &steps, 1);
  example::parse_or_exit(flags, argc, argv);

  // The cluster: 1 ps and 1 worker; here both Servers live in this process.
  const auto addresses = example::free_loopback_addresses(2);
  psflow::ClusterSpec cluster({{"ps", {addresses[0]}}, {"worker", {addresses[1]}}});
  psflow::ServerOptions quiet;
  quiet.log = false;
  psflow::Server ps(cluster, "ps", 0, quiet);
  psflow::Server worker(cluster, "worker", 0, quiet);

  // Example 03's model: variables on the ps, the data and the gradient math on the worker.
  psflow::Graph g;
  psflow::Output loss;
  psflow::Operation train_op;
  psflow::train::GradientDescentOptimizer sgd(0.5);
  {
    auto placement = g.device(psflow::train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster}));
    psflow::Output x = psflow::ops::random_uniform(g, {32, 1});
    psflow::Output y = x * 3.0 + 1.0;
    auto w = psflow::get_variable(g, "w", {1}, psflow::zeros_initializer());
    auto b = psflow::get_variable(g, "b", {1}, psflow::zeros_initializer());
    loss = psflow::ops::reduce_mean(psflow::ops::square(x * w + b - y));
    train_op = sgd.minimize(loss);
  }

  psflow::Session sess(g, worker.target());  // this process is the master (and the worker)
  sess.run(psflow::global_variables_initializer(g));

  // 1. The plan, read by hand: how many ops each task runs, and what crosses.
  std::optional<psflow::PartitionPlan> plan = sess.describe({loss}, {}, {train_op});
  std::map<std::string, int> ops_per_device;
  for (const auto& [op, device] : plan->placement) ++ops_per_device[device];
  std::cout << "== Session::describe({loss}, {}, {train_op}) ==\n";
  for (const auto& [device, count] : ops_per_device)
    std::cout << device << ": " << count << " ops\n";
  for (const psflow::Transfer& t : plan->transfers) {
    // A control signal ("^op") only says that op has run: its consumer waits for it.
    if (t.control)
      std::cout << "control signal " << t.tensor;
    else
      std::cout << "tensor " << t.tensor << " " << psflow::dtype_name(t.dtype)
                << t.shape.to_string();
    std::cout << ": " << t.src_device << " -> " << t.dst_device << "\n";
  }

  // 2. The same plan, explained (what --explain prints in add_mul_div and the trainers).
  std::cout << psflow::observe::explain(sess, {loss}, {}, {train_op});

  // 3. An in-process Session has no plan: everything runs here.
  psflow::Session local(g);
  std::cout << "an in-process session has a plan: " << (local.describe({loss}) ? "yes" : "no")
            << "\n";

  // 4. Train: each step, the ps sends w and b, the worker sends back their gradients.
  float first = 0, last = 0;
  for (int i = 0; i < steps; ++i) {
    last = sess.run({loss}, {}, {train_op})[0].scalar<float>();
    if (i == 0) first = last;
  }
  std::cout << "trained " << steps << " steps: first loss " << first << ", last loss " << last
            << "\n";
  return 0;
}
