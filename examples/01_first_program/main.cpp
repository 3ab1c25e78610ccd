// Example 01: the first psflow program, for a TF1 user.
//
// In TF1 (Python) you would write:
//
//   with tf.device("/job:worker/task:0"):
//     w = tf.get_variable("w", [2, 2], initializer=tf.constant_initializer(2))
//     b = tf.get_variable("b", [2, 2], initializer=tf.constant_initializer(5))
//     total = w + b
//   with tf.Session() as sess:
//     sess.run(tf.global_variables_initializer())
//     print(sess.run([total])[0])
//
// psflow is the same thing in C++: build a graph first (nothing is computed yet), then run parts
// of it with a Session. Here the Session is in-process: every device of the graph, whatever its
// device scope says, runs in this one process. Example 03 runs the same kind of graph on a
// cluster of ps and worker processes.
//
//   example_01_first_program          prints w + b, w * b and the variables' names and devices
#include <iostream>
#include <psflow/psflow.hpp>

#include "example_support.hpp"

int main(int argc, char** argv) {
  psflow::Flags flags("example_01_first_program",
                      "builds a graph with two variables, runs w + b and w * b in-process");
  example::parse_or_exit(flags, argc, argv);

  // 1. Build the graph. A Graph holds operations ("ops"); building one computes nothing.
  psflow::Graph g;
  psflow::Output sum, product;
  psflow::Variable w, b;
  {
    // A device scope, TF's `with tf.device(...)`: ops created while `on_worker` lives ask for
    // that device. The scope ends at the closing brace (C++'s `with`).
    auto on_worker = g.device("/job:worker/task:0");
    // get_variable creates a VariableV2 op "w" plus its initializer and a read op "w/read".
    w = psflow::get_variable(g, "w", {2, 2}, psflow::constant_initializer(2));
    b = psflow::get_variable(g, "b", {2, 2}, psflow::constant_initializer(5));
    sum = w + b;      // an "Add" op named "add": operators build ops, as in TF
    product = w * b;  // a "Mul" op named "mul"
  }

  // 2. Run it. Session(g) runs in this process; Session(g, server.target()) would run on a
  // cluster (example 03). Variables keep their values between run() calls, as in TF.
  psflow::Session sess(g);
  sess.run(
      psflow::global_variables_initializer(g));  // TF: sess.run(tf.global_variables_initializer())

  // run() takes the tensors to fetch and returns their values, in order (TF: sess.run([a, b])).
  std::vector<psflow::Tensor> values = sess.run({sum, product});
  // repr() prints a Tensor the way numpy's repr prints an array.
  std::cout << "w + b = " << psflow::repr(values[0]) << "\n";
  std::cout << "w * b = " << psflow::repr(values[1]) << "\n";

  // An Output is "op_name:index", like a TF tensor's name; ops remember their requested device.
  std::cout << "sum is the tensor " << sum.name() << ", made by op '" << sum.op().name()
            << "' of type " << sum.op().type() << " on " << sum.op().device() << "\n";
  std::cout << "variables: " << w.name() << " " << psflow::shape_string(w.shape()) << ", "
            << b.name() << " " << psflow::shape_string(b.shape()) << "\n";

  // Assign a new value to w, then fetch again: the graph is the same, the state changed.
  sess.run({w.assign(sum)});  // w = w + b, i.e. 7
  std::cout << "after w.assign(w + b): w + b = " << psflow::repr(sess.run({sum})[0]) << "\n";
  return 0;
}
