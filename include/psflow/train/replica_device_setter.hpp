// replica_device_setter: the device function that spreads a replicated model over a cluster,
// as TensorFlow's tf.train.replica_device_setter, plus the ps placement strategies (round robin,
// and TF contrib's GreedyLoadBalancingStrategy with byte_size_load_fn).
//
//   auto scope = graph.device(train::replica_device_setter({.cluster = cluster}));
//   Variable w = get_variable(graph, "w", ...);  // VariableV2 "w" on /job:ps/task:0
//   Variable b = get_variable(graph, "b", ...);  // VariableV2 "b" on /job:ps/task:1
//   Output y = w.value() + b.value();            // on /job:worker
//
// Only ops whose type is in ps_ops (the variables) go to a ps task; everything else goes to the
// worker device. A variable's initializer, Assign and read ops follow it through colocation.
// Light on purpose: graph building and ClusterSpec only, no runtime and no Boost.Asio.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/device_spec.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/core/error.hpp"
#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/graph/partial_shape.hpp"

namespace psflow::train {

// Picks the ps task index for a ps op (TF's ps_strategy). A strategy is stateful (round robin
// keeps a counter, greedy keeps the load of every task); copies of the std::function returned
// below share that state, as every use of one TF strategy object does. Called while the graph
// is built, hence from one thread at a time: strategies do no locking.
using PsStrategy = std::function<std::size_t(const Operation&)>;

// The load an op puts on the ps task that holds it, in any unit consistent across ops (TF's
// load_fn of GreedyLoadBalancingStrategy).
using LoadFunction = std::function<double(const Operation&)>;

// Options of replica_device_setter, TF's keyword arguments with TF's defaults. Designated
// initializers work: replica_device_setter({.worker_device = "/job:worker/task:0",
// .cluster = cluster}). (The "= {}" keep GCC's -Wmissing-field-initializers quiet.)
struct ReplicaDeviceSetterOptions {
  // Number of ps tasks. Ignored when `cluster` is given (as in TF): the count is then the
  // number of tasks of ps_device's job in the cluster. 0 without a cluster: no ps placement.
  std::size_t ps_tasks = 0;
  // Device of the ps job; "" means no ps job (ps ops then go to worker_device, like any op).
  // A ps op gets "/task:N" from ps_strategy only when this has a job and the op's own device
  // names no job or the same one.
  std::string ps_device = "/job:ps";
  // Device of every other op; "" leaves them as the inner scopes set them.
  std::string worker_device = "/job:worker";
  // true: the op's own fields (from inner device scopes) are merged over the chosen device and
  // win field by field. false: an op that already has a device is left exactly as it is.
  bool merge_devices = true;
  // The cluster; when given, ps_tasks comes from its ps job (see the no-op rule below).
  std::optional<ClusterSpec> cluster = {};
  // Op types placed on ps tasks (TF's default is STANDARD_PS_OPS, which also lists its hash
  // tables; psflow's are these, DynamicTable being a shard of a dynamic embedding table).
  std::vector<std::string> ps_ops = {"Variable", "VariableV2", "VarHandleOp", "DynamicTable"};
  // Chooses the ps task of each ps op; empty: round robin over the ps tasks.
  PsStrategy ps_strategy = {};
};

// Returns a device function for Graph::device(). For each op, with `current` its device so far
// (set by inner device scopes):
//   - merge_devices == false and current != "": returns current unchanged;
//   - a ps op (type in ps_ops), ps_tasks > 0 and ps_device != "": ps_device, with "/task:N" from
//     ps_strategy if ps_device has a job and current has none or the same, then current merged
//     over it (current's fields win). The strategy is asked only when its task is used, so the
//     round-robin counter advances once per ps op so placed;
//   - any other op: worker_device with current merged over it.
// No ps tasks (ps_tasks == 0 and no cluster; or a cluster without ps_device's job, with that job
// empty, or ps_device without a job): TF returns None, and tf.device(None) would then drop every
// enclosing device scope. psflow instead returns a function that keeps the op's device as the
// inner scopes set it, so enclosing scopes still apply: a no-op scope, as TF documents.
// Throws InvalidArgument at once for a malformed ps_device or worker_device (TF fails later, on
// the first op). The returned function throws InvalidArgument if the strategy returns a task
// index that does not fit a device string, and whatever the strategy throws.
PSFLOW_DECL DeviceFunction replica_device_setter(ReplicaDeviceSetterOptions options);

// TF's _RoundRobinStrategy: 0, 1, ..., num_tasks - 1, 0, ... one step per call. Throws
// InvalidArgument for num_tasks == 0.
PSFLOW_DECL PsStrategy round_robin_strategy(std::size_t num_tasks);

// TF contrib's GreedyLoadBalancingStrategy: returns the task with the least total load so far
// (the lowest index on ties, like numpy's argmin), then adds load_fn(op) to it. Sensitive to the
// order in which variables are created. Throws InvalidArgument for num_tasks == 0 or an empty
// load_fn.
PSFLOW_DECL PsStrategy greedy_load_balancing_strategy(std::size_t num_tasks, LoadFunction load_fn);
// The same with byte_size_load_fn: spreads variables over the ps tasks by their size in bytes.
PSFLOW_DECL PsStrategy greedy_load_balancing_strategy(std::size_t num_tasks);

// TF contrib's byte_size_load_fn: the size in bytes of `op`'s single output, element count x
// dtype size; a VariableV2 of shape {2, 3} and float32 counts 24. The output's shape is used, or
// when it is not fully known the op's "shape" attribute (TF does the same for legacy scalar
// variables). Throws InvalidArgument, as TF raises ValueError, for an op without exactly one
// output or whose shape is not fully known (e.g. a Placeholder with a -1 dimension).
PSFLOW_DECL std::size_t byte_size_load_fn(const Operation& op);

}  // namespace psflow::train

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::train::detail {

// TF's _ReplicaDeviceChooser.device_function. The strategy holds the (shared) state.
struct ReplicaDeviceChooser {
  std::size_t ps_tasks = 0;
  bool has_ps_device = false;
  DeviceSpec ps_device;
  DeviceSpec worker_device;
  bool merge_devices = true;
  std::vector<std::string> ps_ops;
  PsStrategy ps_strategy;

  std::string operator()(const Operation& op) const {
    std::string current_device = op.device();
    if (!merge_devices && !current_device.empty()) return current_device;
    const DeviceSpec current = DeviceSpec::parse(current_device);
    if (ps_tasks > 0 && has_ps_device && is_ps_op(op.type())) {
      DeviceSpec spec = ps_device;
      if (spec.job && (!current.job || current.job == spec.job)) spec.task = task_of(op);
      return spec.merge_from(current).to_string();
    }
    return worker_device.merged_with(current).to_string();
  }

  bool is_ps_op(const std::string& type) const {
    return std::find(ps_ops.begin(), ps_ops.end(), type) != ps_ops.end();
  }

  int task_of(const Operation& op) const {
    const std::size_t task = ps_strategy(op);
    if (task > static_cast<std::size_t>(INT_MAX)) {
      throw InvalidArgument("replica_device_setter: ps_strategy returned task " +
                            std::to_string(task) + " for op '" + op.name() +
                            "', which does not fit a device string; return an index below the "
                            "number of ps tasks (" +
                            std::to_string(ps_tasks) + ")");
    }
    return static_cast<int>(task);
  }
};

// The device function used when there are no ps tasks: the op keeps its device so far.
PSFLOW_DECL std::string keep_device(const Operation& op) { return op.device(); }

}  // namespace psflow::train::detail

namespace psflow::train {

PSFLOW_DECL DeviceFunction replica_device_setter(ReplicaDeviceSetterOptions options) {
  const DeviceSpec ps_device = DeviceSpec::parse(options.ps_device);
  const DeviceSpec worker_device = DeviceSpec::parse(options.worker_device);
  std::size_t ps_tasks = options.ps_tasks;
  if (options.cluster) {
    // TF: the ps job is ps_device's job; a cluster without it (or an empty one) means no ps.
    if (!ps_device.job || !options.cluster->has_job(*ps_device.job)) return detail::keep_device;
    ps_tasks = options.cluster->num_tasks(*ps_device.job);
  }
  if (ps_tasks == 0) return detail::keep_device;
  if (!options.ps_strategy) options.ps_strategy = round_robin_strategy(ps_tasks);
  detail::ReplicaDeviceChooser chooser;
  chooser.ps_tasks = ps_tasks;
  chooser.has_ps_device = !options.ps_device.empty();
  chooser.ps_device = ps_device;
  chooser.worker_device = worker_device;
  chooser.merge_devices = options.merge_devices;
  chooser.ps_ops = std::move(options.ps_ops);
  chooser.ps_strategy = std::move(options.ps_strategy);
  return chooser;
}

PSFLOW_DECL PsStrategy round_robin_strategy(std::size_t num_tasks) {
  if (num_tasks == 0) {
    throw InvalidArgument("round_robin_strategy: num_tasks is 0; give the number of ps tasks");
  }
  auto next_task = std::make_shared<std::size_t>(0);
  return [num_tasks, next_task](const Operation&) {
    const std::size_t task = *next_task;
    *next_task = (task + 1) % num_tasks;
    return task;
  };
}

PSFLOW_DECL PsStrategy greedy_load_balancing_strategy(std::size_t num_tasks, LoadFunction load_fn) {
  if (num_tasks == 0) {
    throw InvalidArgument(
        "greedy_load_balancing_strategy: num_tasks is 0; give the number of ps tasks");
  }
  if (!load_fn) {
    throw InvalidArgument(
        "greedy_load_balancing_strategy: empty load function (use byte_size_load_fn)");
  }
  auto loads = std::make_shared<std::vector<double>>(num_tasks, 0.0);
  return [loads, load_fn = std::move(load_fn)](const Operation& op) {
    const auto least = std::min_element(loads->begin(), loads->end());  // first one on ties
    const auto task = static_cast<std::size_t>(least - loads->begin());
    *least += load_fn(op);
    return task;
  };
}

PSFLOW_DECL PsStrategy greedy_load_balancing_strategy(std::size_t num_tasks) {
  return greedy_load_balancing_strategy(
      num_tasks, [](const Operation& op) { return static_cast<double>(byte_size_load_fn(op)); });
}

PSFLOW_DECL std::size_t byte_size_load_fn(const Operation& op) {
  if (op.num_outputs() != 1) {
    throw InvalidArgument("byte_size_load_fn: op '" + op.name() + "' (" + op.type() + ") has " +
                          std::to_string(op.num_outputs()) +
                          " outputs; it measures ops with a single output, such as variables");
  }
  const Output output = op.output(0);
  PartialShape shape = output.shape();
  if (!shape.fully_defined()) {
    const auto& attrs = op.attrs();
    if (const auto it = attrs.find("shape"); it != attrs.end()) {
      if (const auto* dims = std::get_if<std::vector<std::int64_t>>(&it->second)) {
        shape = PartialShape::of(*dims);
      }
    }
  }
  const std::optional<std::int64_t> elements = shape.num_elements();
  if (!elements) {
    throw InvalidArgument("byte_size_load_fn: the shape of op '" + op.name() + "' (" + op.type() +
                          ") is " + shape.to_string() +
                          ", not fully known; give the variable a complete shape");
  }
  return static_cast<std::size_t>(*elements) * dtype_size(output.dtype());
}

}  // namespace psflow::train

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
