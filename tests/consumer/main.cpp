// Builds and runs a tiny graph through an installed psflow package, and connects two Servers
// that share a cluster secret (so the package's OpenSSL dependency links and works).
#include <chrono>
#include <iostream>
#include <psflow/psflow.hpp>
#include <string>
#include <thread>

int main() {
  psflow::Graph graph;
  auto w = psflow::get_variable(graph, "w", {2, 2}, psflow::constant_initializer(2));
  auto b = psflow::get_variable(graph, "b", {2, 2}, psflow::constant_initializer(5));
  psflow::Session sess(graph);
  sess.run(psflow::global_variables_initializer(graph));
  std::cout << psflow::repr(sess.run({w + b})[0]) << "\n";

  psflow::ServerOptions options;
  options.log = false;
  options.cluster_secret = "the-consumer's-secret";
  psflow::Server ps(psflow::ClusterSpec({{"ps", {"127.0.0.1:0"}}}), "ps", 0, options);
  const std::string ps_address = ps.target().substr(std::string("psflow://").size());
  psflow::Server worker(psflow::ClusterSpec({{"ps", {ps_address}}, {"worker", {"127.0.0.1:0"}}}),
                        "worker", 0, options);
  // The worker reaches the ps (through the secret's handshake) and asks it to stop; the ps
  // acknowledges, then stops.
  if (!worker.stop_task("ps", 0)) return 1;
  for (int i = 0; i < 1000 && !ps.stopped(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return ps.stopped() ? 0 : 1;
}
