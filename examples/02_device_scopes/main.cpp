// Example 02: device scopes and placement, TF1's tf.device() rules.
//
// An op asks for a device when it is created, from the device scopes around it; the placer
// turns that request into a full device name when a Session runs the graph. This program prints
// the requested device of each op for:
//   1. a plain scope, g.device("/job:ps/task:0");
//   2. nested scopes, which merge field by field (the inner one wins where both say something);
//   3. colocate_with(op): ops that must live with another op, whatever the scopes say;
//   4. replica_device_setter with 2 ps tasks: variables round robin, or greedy by bytes;
// and then runs the graph of 4. on a real cluster of 2 ps tasks and 1 worker, all three Servers
// in this process on free loopback ports, printing observe::explain: where each op ran.
//
//   example_02_device_scopes [--strategy=round_robin|greedy]
#include <iostream>
#include <psflow/psflow.hpp>

#include "example_support.hpp"

namespace {
void show(const psflow::Operation& op) {
  std::cout << "  " << op.name() << " (" << op.type() << ") asks for '" << op.device() << "'\n";
}
}  // namespace

int main(int argc, char** argv) {
  std::string strategy = "round_robin";
  psflow::Flags flags("example_02_device_scopes", "shows how device scopes place ops");
  flags.add("strategy", "ps placement in part 4: round_robin or greedy (by bytes)", &strategy);
  example::parse_or_exit(flags, argc, argv);
  if (strategy != "round_robin" && strategy != "greedy")
    example::fail(argv[0], "--strategy must be round_robin or greedy");

  std::cout << "1. a device scope (TF: with tf.device(\"/job:ps/task:0\"))\n";
  psflow::Graph g1;
  {
    auto on_ps = g1.device("/job:ps/task:0");
    show(psflow::ops::constant(g1, psflow::Tensor(1.0f), "c").op());
  }
  show(psflow::ops::constant(g1, psflow::Tensor(2.0f), "outside").op());  // no scope: ""

  std::cout << "2. nested scopes merge: /job:worker, then /task:1, then /device:CPU:0\n";
  psflow::Graph g2;
  {
    auto job = g2.device("/job:worker");
    auto task = g2.device("/task:1");  // adds the task to the job of the outer scope
    show(psflow::ops::constant(g2, psflow::Tensor(1.0f), "a").op());
    auto cpu = g2.device("/device:CPU:0");
    show(psflow::ops::constant(g2, psflow::Tensor(1.0f), "b").op());
    auto other_job = g2.device("/job:ps");  // the inner scope wins: job ps, still task 1
    show(psflow::ops::constant(g2, psflow::Tensor(1.0f), "c").op());
  }

  std::cout << "3. colocate_with: 'near_v' will run wherever 'v' is placed (the placer keeps\n"
               "   a colocation group together; part 4 shows it at run time)\n";
  psflow::Graph g3;
  psflow::Variable v;
  {
    auto on_ps = g3.device("/job:ps/task:1");
    v = psflow::get_variable(g3, "v", {2}, psflow::zeros_initializer());
  }
  {
    auto colocated = g3.colocate_with(v.op());
    show(v.op());
    show(psflow::ops::identity(v.value(), "near_v").op());
  }

  std::cout << "4. replica_device_setter, 2 ps tasks, strategy " << strategy << "\n";
  const auto addresses = example::free_loopback_addresses(3);
  psflow::ClusterSpec cluster({{"ps", {addresses[0], addresses[1]}}, {"worker", {addresses[2]}}});
  psflow::train::ReplicaDeviceSetterOptions setter{.worker_device = "/job:worker/task:0",
                                                   .cluster = cluster};
  if (strategy == "greedy")  // TF contrib's GreedyLoadBalancingStrategy(byte_size_load_fn)
    setter.ps_strategy = psflow::train::greedy_load_balancing_strategy(2);
  psflow::Graph g;
  psflow::Output total, doubled;
  {
    auto placement = g.device(psflow::train::replica_device_setter(setter));
    auto big = psflow::get_variable(g, "big", {1000}, psflow::constant_initializer(1));
    auto small1 = psflow::get_variable(g, "small1", {10}, psflow::constant_initializer(1));
    auto small2 = psflow::get_variable(g, "small2", {10}, psflow::constant_initializer(1));
    for (auto& var : {big, small1, small2}) show(var.op());
    // Round robin: big -> ps0, small1 -> ps1, small2 -> ps0 (ps0 holds 4040 bytes, ps1 40).
    // Greedy: big -> ps0, then both small ones -> ps1, the task with the least bytes so far.
    total = psflow::ops::reduce_sum(big.value()) + psflow::ops::reduce_sum(small1.value()) +
            psflow::ops::reduce_sum(small2.value());
    show(total.op());  // not a variable: the worker
    auto colocated = g.colocate_with(small2.op());
    doubled = psflow::ops::identity(small2.value() * 2.0, "near_small2");  // runs on small2's ps
  }

  // Run it: two ps Servers and the worker's Server in this process (each would usually be its
  // own process, example 03); the Session's target makes this process the worker and master.
  psflow::ServerOptions quiet;
  quiet.log = false;
  psflow::Server ps0(cluster, "ps", 0, quiet), ps1(cluster, "ps", 1, quiet);
  psflow::Server worker(cluster, "worker", 0, quiet);
  psflow::Session sess(g, worker.target());
  sess.run(psflow::global_variables_initializer(g));
  std::cout << "total = " << psflow::repr(sess.run({total})[0]) << "\n";
  sess.run({doubled});
  std::cout << psflow::observe::explain(sess, {total, doubled});
  return 0;
}
