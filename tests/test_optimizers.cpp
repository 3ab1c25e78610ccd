// Optimizers: each one's update equations against values computed here with plain loops from
// TF's documented formulas (3 steps, float32 and float64, gradients fed through placeholders),
// slot names and placement, the op apply_gradients returns and the global step, in-place
// updates, minimize() on a least-squares problem, and the errors. RMSProp (plain, momentum,
// centered) and Adadelta on dense and sparse gradients; learning rates given as Outputs.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "psflow/graph/training_ops.hpp"
#include "psflow/runtime.hpp"
#include "psflow/runtime/kernels/grad_kernels.hpp"
#include "psflow/runtime/kernels/training_kernels.hpp"
#include "psflow/runtime/local_session.hpp"
#include "psflow/train/adadelta.hpp"
#include "psflow/train/adagrad.hpp"
#include "psflow/train/adam.hpp"
#include "psflow/train/ftrl.hpp"
#include "psflow/train/global_step.hpp"
#include "psflow/train/gradient_descent.hpp"
#include "psflow/train/gradients.hpp"
#include "psflow/train/momentum.hpp"
#include "psflow/train/optimizer.hpp"
#include "psflow/train/rmsprop.hpp"

using namespace psflow;

namespace {

template <class T>
constexpr DType dtype_of_v = std::is_same_v<T, float> ? DType::float32 : DType::float64;

// An initializer producing exactly `values`.
Initializer values_initializer(std::vector<double> values) {
  return Initializer([values](Graph& g, const Shape& shape, DType dtype) {
    Tensor t = visit_floating_dtype(dtype, "test initializer", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return Tensor::from_vector(std::vector<T>(values.begin(), values.end()), shape);
    });
    return ops::constant(g, t, "Const");
  });
}

template <class T>
std::vector<T> values_of(const Tensor& t) {
  auto span = t.values<T>();
  return std::vector<T>(span.begin(), span.end());
}

template <class T>
void check_close(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  const double eps = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  const double margin = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(static_cast<double>(got[i]) ==
          Approx(static_cast<double>(want[i])).epsilon(eps).margin(margin));
  }
}

// The variable resource `name` of the in-process runtime, wherever it was placed.
std::shared_ptr<VariableResource> find_resource(Graph& g, const std::string& name,
                                                std::string* device = nullptr) {
  for (Device* d : g.runtime_state<detail::LocalRuntime>().devices.devices())
    if (auto r = d->resources().find(name)) {
      if (device) *device = d->name();
      return r;
    }
  return nullptr;
}

// What the reference keeps per variable: its value and its slots by slot name.
template <class T>
struct RefState {
  std::vector<T> var;
  std::map<std::string, std::vector<T>> slots;
};

// Updates one variable's state with gradient g at step t (1, 2, 3).
template <class T>
using Reference = std::function<void(RefState<T>&, const std::vector<T>& g, int t)>;

// Two variables, "w" (2x2) and "b" (3), with gradients fed through placeholders. Runs the
// optimizer's apply_gradients for 3 steps with a global step and checks the variables and every
// slot against `reference` after each step.
template <class T>
void check_against_reference(train::Optimizer& opt, const Reference<T>& reference,
                             const std::map<std::string, double>& slot_init) {
  Graph g;
  const DType dt = dtype_of_v<T>;
  const std::vector<double> w0{1.0, -2.0, 0.5, 3.0};
  const std::vector<double> b0{0.1, 0.2, -0.3};
  Variable w = get_variable(g, "w", {2, 2}, values_initializer(w0), dt);
  Variable b = get_variable(g, "b", {3}, values_initializer(b0), dt);
  Variable gs = train::get_or_create_global_step(g);
  Output gw = ops::placeholder(g, dt, {2, 2}, "grad_w");
  Output gb = ops::placeholder(g, dt, {3}, "grad_b");
  Operation train_op = opt.apply_gradients({{gw, w}, {gb, b}}, gs);

  Session sess(g);
  sess.run(global_variables_initializer(g));

  struct Tracked {
    Variable var;
    Output grad;
    Shape shape;
    RefState<T> state;
  };
  std::vector<Tracked> tracked{{w, gw, {2, 2}, {}}, {b, gb, {3}, {}}};
  tracked[0].state.var.assign(w0.begin(), w0.end());
  tracked[1].state.var.assign(b0.begin(), b0.end());
  for (auto& tv : tracked)
    for (const auto& [slot, init] : slot_init)
      tv.state.slots[slot] = std::vector<T>(tv.state.var.size(), static_cast<T>(init));

  for (int t = 1; t <= 3; ++t) {
    FeedMap feeds;
    for (std::size_t k = 0; k < tracked.size(); ++k) {
      auto& tv = tracked[k];
      std::vector<T> grad(tv.state.var.size());
      for (std::size_t i = 0; i < grad.size(); ++i)  // mixed signs and sizes, new each step
        grad[i] = static_cast<T>(std::sin(1.0 + static_cast<double>(i) + 3.0 * t + 7.0 * k) * 1.5);
      feeds.emplace_back(tv.grad, Tensor::from_vector(grad, tv.shape));
      reference(tv.state, grad, t);
    }
    sess.run(train_op, feeds);
    INFO("step " << t);
    for (auto& tv : tracked) {
      check_close(values_of<T>(sess.run({tv.var.value()})[0]), tv.state.var, tv.var.name());
      for (const auto& [slot, want] : tv.state.slots) {
        auto s = opt.get_slot(tv.var, slot);
        REQUIRE(s);
        check_close(values_of<T>(sess.run({s->value()})[0]), want, s->name());
      }
    }
    CHECK(sess.run({gs.value()})[0].scalar<std::int64_t>() == t);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Update equations

TEMPLATE_TEST_CASE("GradientDescent: var -= lr * grad", "[optimizers]", float, double) {
  using T = TestType;
  const double lr = 0.1;
  train::GradientDescentOptimizer opt(lr);
  check_against_reference<T>(opt,
                             [&](RefState<T>& s, const std::vector<T>& g, int) {
                               for (std::size_t i = 0; i < g.size(); ++i)
                                 s.var[i] -= static_cast<T>(lr) * g[i];
                             },
                             {});
  CHECK(opt.get_slot_names().empty());
}

TEMPLATE_TEST_CASE("Momentum: accum = momentum * accum + grad, var -= lr * accum", "[optimizers]",
                   float, double) {
  using T = TestType;
  const T lr = static_cast<T>(0.1), mu = static_cast<T>(0.9);
  SECTION("heavy ball") {
    train::MomentumOptimizer opt(0.1, 0.9);
    check_against_reference<T>(opt,
                               [&](RefState<T>& s, const std::vector<T>& g, int) {
                                 auto& accum = s.slots["momentum"];
                                 for (std::size_t i = 0; i < g.size(); ++i) {
                                   accum[i] = mu * accum[i] + g[i];
                                   s.var[i] -= lr * accum[i];
                                 }
                               },
                               {{"momentum", 0.0}});
    CHECK(opt.get_slot_names() == std::vector<std::string>{"momentum"});
  }
  SECTION("Nesterov: var -= lr * grad + lr * momentum * accum") {
    train::MomentumOptimizer opt(0.1, 0.9, /*use_nesterov=*/true);
    check_against_reference<T>(opt,
                               [&](RefState<T>& s, const std::vector<T>& g, int) {
                                 auto& accum = s.slots["momentum"];
                                 for (std::size_t i = 0; i < g.size(); ++i) {
                                   accum[i] = mu * accum[i] + g[i];
                                   s.var[i] -= lr * g[i] + lr * mu * accum[i];
                                 }
                               },
                               {{"momentum", 0.0}});
  }
}

TEMPLATE_TEST_CASE("Adagrad: accum += grad^2, var -= lr * grad / sqrt(accum)", "[optimizers]",
                   float, double) {
  using T = TestType;
  const T lr = static_cast<T>(0.1);
  SECTION("default initial accumulator 0.1") {
    train::AdagradOptimizer opt(0.1);
    check_against_reference<T>(opt,
                               [&](RefState<T>& s, const std::vector<T>& g, int) {
                                 auto& accum = s.slots["accumulator"];
                                 for (std::size_t i = 0; i < g.size(); ++i) {
                                   accum[i] += g[i] * g[i];
                                   s.var[i] -= lr * g[i] / std::sqrt(accum[i]);
                                 }
                               },
                               {{"accumulator", 0.1}});
    CHECK(opt.get_slot_names() == std::vector<std::string>{"accumulator"});
  }
  SECTION("initial accumulator 2.5") {
    train::AdagradOptimizer opt(0.1, 2.5);
    check_against_reference<T>(opt,
                               [&](RefState<T>& s, const std::vector<T>& g, int) {
                                 auto& accum = s.slots["accumulator"];
                                 for (std::size_t i = 0; i < g.size(); ++i) {
                                   accum[i] += g[i] * g[i];
                                   s.var[i] -= lr * g[i] / std::sqrt(accum[i]);
                                 }
                               },
                               {{"accumulator", 2.5}});
  }
}

TEMPLATE_TEST_CASE("Adam: bias-corrected lr_t, m, v, var -= lr_t * m / (sqrt(v) + eps)",
                   "[optimizers]", float, double) {
  using T = TestType;
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  train::AdamOptimizer opt(lr, beta1, beta2, eps);
  check_against_reference<T>(opt,
                             [&](RefState<T>& s, const std::vector<T>& g, int t) {
                               auto& m = s.slots["m"];
                               auto& v = s.slots["v"];
                               const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
                               const T lr_t = static_cast<T>(lr) *
                                              std::sqrt(T(1) - std::pow(b2, static_cast<T>(t))) /
                                              (T(1) - std::pow(b1, static_cast<T>(t)));
                               for (std::size_t i = 0; i < g.size(); ++i) {
                                 m[i] = b1 * m[i] + (T(1) - b1) * g[i];
                                 v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
                                 s.var[i] -= lr_t * m[i] / (std::sqrt(v[i]) + static_cast<T>(eps));
                               }
                             },
                             {{"m", 0.0}, {"v", 0.0}});
  CHECK(opt.get_slot_names() == std::vector<std::string>{"m", "v"});
}

TEST_CASE("Adam: beta1_power/beta2_power start at beta1/beta2 and multiply once per apply") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, zeros_initializer(), DType::float64);
  Output gw = ops::placeholder(g, DType::float64, {2});
  train::AdamOptimizer opt(0.01, 0.8, 0.95);
  Operation train_op = opt.apply_gradients({{gw, w}});
  auto acc = opt.beta_accumulators(g);
  REQUIRE(acc);
  CHECK(acc->first.name() == "beta1_power");
  CHECK(acc->second.name() == "beta2_power");
  CHECK(acc->first.dtype() == DType::float64);  // the first variable's dtype
  CHECK_FALSE(acc->first.trainable());
  Session sess(g);
  sess.run(global_variables_initializer(g));
  CHECK(sess.run({acc->first.value()})[0].scalar<double>() == Approx(0.8));
  for (int i = 0; i < 3; ++i)
    sess.run(train_op, {{gw, Tensor::from_vector(std::vector<double>{1, -1})}});
  auto out = sess.run({acc->first.value(), acc->second.value()});
  CHECK(out[0].scalar<double>() == Approx(std::pow(0.8, 4)).epsilon(1e-14));
  CHECK(out[1].scalar<double>() == Approx(std::pow(0.95, 4)).epsilon(1e-14));
}

TEST_CASE("Adam: float32 and float64 variables in one optimizer (beta powers converted)") {
  Graph g;
  Variable a = get_variable(g, "a", {2}, constant_initializer(1.0), DType::float64);
  Variable z = get_variable(g, "z", {2}, constant_initializer(1.0), DType::float32);
  Output ga = ops::placeholder(g, DType::float64, {2});
  Output gz = ops::placeholder(g, DType::float32, {2});
  train::AdamOptimizer opt(0.1);
  Operation train_op = opt.apply_gradients({{ga, a}, {gz, z}});
  CHECK(opt.beta_accumulators(g)->first.dtype() == DType::float64);  // "a" comes first by name
  Session sess(g);
  sess.run(global_variables_initializer(g));
  sess.run(train_op, {{ga, Tensor::from_vector(std::vector<double>{0.5, -2.0})},
                      {gz, Tensor::from_vector(std::vector<float>{0.5f, -2.0f})}});
  // First Adam step: m = 0.1 g, v = 0.001 g^2, lr_t = 0.1 sqrt(0.001) / 0.1: var -= ~0.1 sign(g).
  auto out = sess.run({a.value(), z.value()});
  CHECK(out[0].values<double>()[0] == Approx(0.9).epsilon(1e-6));
  CHECK(out[0].values<double>()[1] == Approx(1.1).epsilon(1e-6));
  CHECK(out[1].values<float>()[0] == Approx(0.9).epsilon(1e-5));
  CHECK(out[1].values<float>()[1] == Approx(1.1).epsilon(1e-5));
}

// ---------------------------------------------------------------------------------------------
// Slots, names, placement, global step

TEST_CASE("slots are named like TF's, not trainable, and live with their variable") {
  Graph g;
  Variable w, b, gs;
  {
    auto ps1 = g.device("/job:ps/task:1");
    w = get_variable(g, "w", {2}, constant_initializer(1));
  }
  {
    auto ps0 = g.device("/job:ps/task:0");
    b = get_variable(g, "b", {3}, constant_initializer(1));
    gs = train::get_or_create_global_step(g);
  }
  auto worker = g.device("/job:worker/task:0");
  Output gw = ops::placeholder(g, DType::float32, {2}, "gw");
  Output gb = ops::placeholder(g, DType::float32, {3}, "gb");

  SECTION("Momentum") {
    train::MomentumOptimizer opt(0.1, 0.9);
    Operation op = opt.apply_gradients({{gw, w}, {gb, b}});
    CHECK(op.name() == "Momentum");
    CHECK(op.type() == "NoOp");
    CHECK(op.device() == "/job:worker/task:0");
    CHECK(opt.get_slot(w, "momentum")->name() == "w/Momentum");
    CHECK(opt.get_slot(w, "momentum")->device() == "/job:ps/task:1");
    CHECK(opt.get_slot(b, "momentum")->name() == "b/Momentum");
    CHECK(opt.get_slot(b, "momentum")->device() == "/job:ps/task:0");
    Operation update = g.operation("Momentum/update_w/ApplyMomentum");
    CHECK(update.type() == "ApplyMomentum");
    CHECK(update.device() == "/job:ps/task:1");
    CHECK(update.input(0) == w.ref());
    CHECK(update.input(1) == opt.get_slot(w, "momentum")->ref());
    CHECK(update.input(3) == gw);
    CHECK(g.operation("Momentum/update_w/learning_rate").device() == "/job:ps/task:1");
    CHECK(g.operation("Momentum/update_b/ApplyMomentum").device() == "/job:ps/task:0");
    CHECK(opt.variables(g).size() == 2);
    // A second apply reuses the slots and names its ops "Momentum_1".
    Operation again = opt.apply_gradients({{gw, w}});
    CHECK(again.name() == "Momentum_1");
    CHECK(g.operation("Momentum_1/update_w/ApplyMomentum").input(1) ==
          opt.get_slot(w, "momentum")->ref());
    CHECK_FALSE(g.find_operation("w/Momentum_1"));
  }
  SECTION("Adagrad and GradientDescent") {
    train::AdagradOptimizer adagrad(0.1);
    adagrad.apply_gradients({{gw, w}});
    CHECK(adagrad.get_slot(w, "accumulator")->name() == "w/Adagrad");
    CHECK(adagrad.get_slot(w, "accumulator")->device() == "/job:ps/task:1");
    CHECK(g.operation("Adagrad/update_w/ApplyAdagrad").device() == "/job:ps/task:1");
    train::GradientDescentOptimizer sgd(0.1);
    Operation op = sgd.apply_gradients({{gw, w}, {gb, b}});
    CHECK(op.name() == "GradientDescent");
    CHECK(g.operation("GradientDescent/update_w/ApplyGradientDescent").device() ==
          "/job:ps/task:1");
    CHECK(g.operation("GradientDescent/update_b/ApplyGradientDescent").device() ==
          "/job:ps/task:0");
    // A second optimizer of the same kind gets TF's unique slot names.
    train::AdagradOptimizer second(0.2);
    second.apply_gradients({{gw, w}});
    CHECK(second.get_slot(w, "accumulator")->name() == "w/Adagrad_1");
    CHECK(g.operation("Adagrad_1/update_w/ApplyAdagrad").input(1).op().name() == "w/Adagrad_1");
  }
  SECTION("Adam with a global step") {
    train::AdamOptimizer opt;
    Operation op = opt.apply_gradients({{gw, w}, {gb, b}}, gs);
    // TF: the returned op is the global step's AssignAdd, named after the optimizer, on the
    // global step's device, after the group of updates "Adam/update".
    CHECK(op.name() == "Adam");
    CHECK(op.type() == "AssignAdd");
    CHECK(op.device() == "/job:ps/task:0");
    CHECK(op.input(0) == gs.ref());
    auto deps = op.control_inputs();
    REQUIRE(deps.size() == 1);
    CHECK(deps[0].name() == "Adam/update");
    CHECK(opt.get_slot(w, "m")->name() == "w/Adam");
    CHECK(opt.get_slot(w, "v")->name() == "w/Adam_1");
    CHECK(opt.get_slot(b, "m")->name() == "b/Adam");
    CHECK(opt.get_slot(b, "v")->name() == "b/Adam_1");
    CHECK(opt.get_slot(w, "m")->device() == "/job:ps/task:1");
    CHECK(opt.get_slot(w, "v")->device() == "/job:ps/task:1");
    // beta powers: colocated with the first variable by name ("b").
    CHECK(g.operation("beta1_power").device() == b.device());
    CHECK(g.operation("beta2_power").device() == b.device());
    CHECK(g.operation("Adam/update_w/ApplyAdam").device() == "/job:ps/task:1");
    CHECK(g.operation("Adam/update_b/ApplyAdam").device() == "/job:ps/task:0");
    CHECK(g.operation("Adam/Assign").device() == b.device());  // beta1_power *= beta1
    CHECK(opt.variables(g).size() == 6);
    // Only w and b are trainable.
    auto trainable = trainable_variables(g);
    REQUIRE(trainable.size() == 2);
    CHECK(trainable[0] == w);
    CHECK(trainable[1] == b);

    // Run in-process: the slots' state sits in the resource manager of their variable's device.
    Session sess(g);
    sess.run(global_variables_initializer(g));
    FeedMap feeds{{gw, Tensor::from_vector(std::vector<float>{1, 2})},
                  {gb, Tensor::from_vector(std::vector<float>{1, 2, 3})}};
    for (int i = 0; i < 3; ++i) sess.run(op, feeds);
    CHECK(sess.run({gs.value()})[0].scalar<std::int64_t>() == 3);  // once per apply, not per var
    std::string device;
    REQUIRE(find_resource(g, "w/Adam", &device));
    CHECK(device == "/job:ps/replica:0/task:1/device:CPU:0");
    REQUIRE(find_resource(g, "b/Adam_1", &device));
    CHECK(device == "/job:ps/replica:0/task:0/device:CPU:0");
    REQUIRE(find_resource(g, "beta1_power", &device));
    CHECK(device == "/job:ps/replica:0/task:0/device:CPU:0");
  }
}

TEST_CASE("apply_gradients inside a name scope, and a second apply with a global step") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, zeros_initializer());
  Variable gs = train::get_or_create_global_step(g);
  Output gw = ops::placeholder(g, DType::float32, {2});
  train::GradientDescentOptimizer opt(1.0);
  Operation first, second;
  {
    auto scope = g.name_scope("train");
    first = opt.apply_gradients({{gw, w}}, gs);
    second = opt.apply_gradients({{gw, w}}, gs);
  }
  CHECK(first.name() == "train/GradientDescent");
  CHECK(second.name() == "train/GradientDescent_1");
  CHECK(g.find_operation("train/GradientDescent/update_w/ApplyGradientDescent"));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  FeedMap feeds{{gw, Tensor::from_vector(std::vector<float>{1, -1})}};
  sess.run(first, feeds);
  sess.run(second, feeds);
  sess.run({}, feeds, {first, second});  // both in one step: two updates, two increments
  CHECK(sess.run({gs.value()})[0].scalar<std::int64_t>() == 4);
  CHECK(values_of<float>(sess.run({w.value()})[0]) == std::vector<float>{-4, 4});
}

TEST_CASE("in a ps cluster only the gradient travels to the ps, the update runs there") {
  const std::string ps0 = "/job:ps/replica:0/task:0/device:CPU:0";
  const std::string ps1 = "/job:ps/replica:0/task:1/device:CPU:0";
  const std::string worker = "/job:worker/replica:0/task:0/device:CPU:0";
  Graph g;
  Variable w, gs;
  {
    auto ps = g.device("/job:ps/task:1");
    w = get_variable(g, "w", {4}, zeros_initializer());
  }
  {
    auto ps = g.device("/job:ps/task:0");
    gs = train::get_or_create_global_step(g);
  }
  auto on_worker = g.device("/job:worker/task:0");
  Output x = ops::constant(g, Tensor::from_vector(std::vector<float>{1, 2, 3, 4}), "x");
  Output grad = x * 2.0;
  train::MomentumOptimizer opt(0.1, 0.9);
  Operation train_op = opt.apply_gradients({{grad, w}}, gs);

  const auto nodes = needed_nodes(g, {}, {train_op.id()}, {});
  const auto devices = place_nodes(g, nodes, {ps0, ps1, worker}, worker);
  auto device_of = [&](std::string_view op) {
    const int id = g.operation(op).id();
    return devices.at(
        static_cast<std::size_t>(std::find(nodes.begin(), nodes.end(), id) - nodes.begin()));
  };
  CHECK(device_of("Momentum/update_w/ApplyMomentum") == ps1);
  CHECK(device_of("Momentum/update_w/learning_rate") == ps1);
  CHECK(device_of("w/Momentum") == ps1);
  CHECK(device_of("Momentum") == ps0);  // the global step's AssignAdd
  const auto plan =
      partition_graph(g, nodes, devices, {}, {}, worker, [](const std::string&) { return 7u; });
  std::vector<std::string> data_to_ps;
  for (const auto& t : plan.transfers)
    if (!t.control && t.dst_device != worker) data_to_ps.push_back(t.tensor);
  CHECK(data_to_ps == std::vector<std::string>{grad.name()});
  // Every partition, ApplyMomentum's included, survives the GraphDef round trip.
  for (const auto& [device, def] : plan.graphs) {
    Graph part;
    import_graph_def(part, def);
  }
}

// ---------------------------------------------------------------------------------------------
// In-place updates

TEST_CASE("updates are in place when no reader holds the variable, copy-on-write otherwise") {
  Graph g;
  const std::size_t n = 1 << 16;
  Variable w = get_variable(g, "w", {n}, constant_initializer(1));
  Output gw = ops::placeholder(g, DType::float32, {static_cast<std::int64_t>(n)});
  train::AdamOptimizer opt(0.5);
  Operation train_op = opt.apply_gradients({{gw, w}});
  Session sess(g);
  sess.run(global_variables_initializer(g));
  FeedMap feeds{{gw, Tensor::filled(1.0f, {n})}};
  sess.run(train_op, feeds);  // the first update may copy (the initial value may be shared)

  auto var = find_resource(g, "w");
  auto m = find_resource(g, "w/Adam");
  auto v = find_resource(g, "w/Adam_1");
  REQUIRE(var);
  REQUIRE(m);
  REQUIRE(v);
  const void* var_buffer = var->read().raw_data();  // the reads are dropped at once
  const void* m_buffer = m->read().raw_data();
  const void* v_buffer = v->read().raw_data();
  for (int i = 0; i < 3; ++i) sess.run(train_op, feeds);
  CHECK(var->read().raw_data() == var_buffer);
  CHECK(m->read().raw_data() == m_buffer);
  CHECK(v->read().raw_data() == v_buffer);

  // A reader holding the value keeps it: the update goes to a fresh buffer.
  Tensor held = var->read();
  const std::vector<float> before = values_of<float>(held);
  sess.run(train_op, feeds);
  CHECK(var->read().raw_data() != held.raw_data());
  CHECK(values_of<float>(held) == before);
  CHECK(var->read().values<float>()[0] < before[0]);
}

// ---------------------------------------------------------------------------------------------
// compute_gradients / minimize

TEST_CASE("minimize fits a least-squares line, advancing the global step") {
  Graph g;
  // y = 2 x0 - 3 x1 + 1 on four points.
  Output x =
      ops::constant(g, Tensor::from_vector(std::vector<float>{1, 2, 2, 1, 3, -1, 0, 1}, {4, 2}));
  Output y = ops::constant(g, Tensor::from_vector(std::vector<float>{-3, 2, 10, -2}, {4, 1}));
  Variable w = get_variable(g, "w", {2, 1}, zeros_initializer());
  Variable b = get_variable(g, "b", {1}, zeros_initializer());
  Variable gs = train::get_or_create_global_step(g);
  Output loss = ops::reduce_mean(ops::square(ops::matmul(x, w) + b - y));

  SECTION("GradientDescent") {
    train::GradientDescentOptimizer opt(0.1);
    Operation train_op = opt.minimize(loss, gs);
    CHECK(train_op.name() == "GradientDescent");
    Session sess(g);
    sess.run(global_variables_initializer(g));
    const float initial = sess.run({loss})[0].scalar<float>();
    for (int i = 0; i < 500; ++i) sess.run(train_op);
    auto out = sess.run({loss, w.value(), b.value(), gs.value()});
    CHECK(out[0].scalar<float>() < 1e-6f * initial);
    CHECK(out[1].values<float>()[0] == Approx(2.0).margin(1e-3));
    CHECK(out[1].values<float>()[1] == Approx(-3.0).margin(1e-3));
    CHECK(out[2].values<float>()[0] == Approx(1.0).margin(1e-3));
    CHECK(out[3].scalar<std::int64_t>() == 500);
  }
  SECTION("Momentum") {
    train::MomentumOptimizer opt(0.02, 0.9);
    Operation train_op = opt.minimize(loss);
    Session sess(g);
    sess.run(global_variables_initializer(g));
    for (int i = 0; i < 500; ++i) sess.run(train_op);
    auto out = sess.run({w.value(), b.value()});
    CHECK(out[0].values<float>()[0] == Approx(2.0).margin(1e-3));
    CHECK(out[0].values<float>()[1] == Approx(-3.0).margin(1e-3));
    CHECK(out[1].values<float>()[0] == Approx(1.0).margin(1e-3));
  }
}

TEST_CASE(
    "compute_gradients pairs each trainable variable with its gradient, None when unconnected") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, constant_initializer(3));
  Variable unused = get_variable(g, "unused", {2}, constant_initializer(1));
  Variable frozen = get_variable(g, "frozen", {2}, constant_initializer(1), DType::float32, false);
  Output loss = ops::reduce_sum(ops::square(w.value() * frozen.value()));
  train::GradientDescentOptimizer opt(0.5);
  auto grads = opt.compute_gradients(loss);
  REQUIRE(grads.size() == 2);  // trainable variables only
  CHECK(grads[0].second == w);
  CHECK(grads[0].first.valid());
  CHECK(grads[1].second == unused);
  CHECK_FALSE(grads[1].first.valid());  // TF's None: apply_gradients skips it
  Operation train_op = opt.apply_gradients(grads);
  CHECK_FALSE(g.find_operation("GradientDescent/update_unused/ApplyGradientDescent"));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  CHECK(values_of<float>(sess.run({grads[0].first})[0]) == std::vector<float>{6, 6});
  sess.run(train_op);
  CHECK(values_of<float>(sess.run({w.value()})[0]) == std::vector<float>{0, 0});
  CHECK(values_of<float>(sess.run({unused.value()})[0]) == std::vector<float>{1, 1});

  // An explicit var_list; a loss that depends on none of them fails clearly.
  CHECK(opt.compute_gradients(loss, {frozen})[0].first.valid());
  CHECK_THROWS_AS(opt.minimize(loss, {}, {unused}), InvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST_CASE("optimizer errors are InvalidArgument or FailedPrecondition and say what is wrong") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, zeros_initializer());
  Output g32 = ops::placeholder(g, DType::float32, {2}, "g32");
  Output g64 = ops::placeholder(g, DType::float64, {2}, "g64");
  Output g3 = ops::placeholder(g, DType::float32, {3}, "g3");
  Output gany = ops::placeholder(g, DType::float32, {-1}, "gany");
  train::MomentumOptimizer opt(0.1, 0.9);

  CHECK_THROWS_AS(train::AdagradOptimizer(0.1, 0.0), InvalidArgument);
  CHECK_THROWS_AS(opt.apply_gradients({}), InvalidArgument);
  CHECK_THROWS_WITH(opt.apply_gradients({{g64, w}}), Catch::Contains("float64"));
  CHECK_THROWS_WITH(opt.apply_gradients({{Output(), w}}), Catch::Contains("no gradients"));
  CHECK_THROWS_WITH(opt.apply_gradients({{g3, w}}), Catch::Contains("shape"));
  CHECK_THROWS_AS(ops::apply_gradient_descent(w.value(), ops::scalar_like(g32, 0.1), g32),
                  InvalidArgument);  // not a variable reference
  Variable counter = get_variable(g, "counter", {2}, zeros_initializer(), DType::int32);
  Output gi = ops::placeholder(g, DType::int32, {2});
  CHECK_THROWS_WITH(opt.apply_gradients({{gi, counter}}), Catch::Contains("float32 or float64"));

  Operation train_op = opt.apply_gradients({{gany, w}});
  Session sess(g);
  // Uninitialized slot: the error names it.
  sess.run(w.initializer());
  CHECK_THROWS_WITH(sess.run(train_op, {{gany, Tensor::from_vector(std::vector<float>{1, 1})}}),
                    Catch::Contains("w/Momentum"));
  sess.run(global_variables_initializer(g));
  // A gradient of the wrong run-time shape fails without touching the variable.
  CHECK_THROWS_AS(sess.run(train_op, {{gany, Tensor::from_vector(std::vector<float>{1, 1, 1})}}),
                  InvalidArgument);
  CHECK(values_of<float>(sess.run({w.value()})[0]) == std::vector<float>{0, 0});
  sess.run(train_op, {{gany, Tensor::from_vector(std::vector<float>{1, -1})}});
  CHECK(values_of<float>(sess.run({w.value()})[0]) == std::vector<float>{-0.1f, 0.1f});
}

// ---------------------------------------------------------------------------------------------
// RMSProp and Adadelta

TEMPLATE_TEST_CASE("RMSProp: ms, mom = momentum * mom + lr * g / sqrt(ms + eps), var -= mom",
                   "[optimizers]", float, double) {
  using T = TestType;
  const double lr = 0.01, rho = 0.9, eps = 1e-6;
  for (double mu : {0.0, 0.5}) {
    INFO("momentum " << mu);
    train::RMSPropOptimizer opt(lr, rho, mu, eps);
    check_against_reference<T>(opt,
                               [&](RefState<T>& s, const std::vector<T>& g, int) {
                                 auto& ms = s.slots["rms"];
                                 auto& mom = s.slots["momentum"];
                                 for (std::size_t i = 0; i < g.size(); ++i) {
                                   ms[i] += (g[i] * g[i] - ms[i]) * (T(1) - static_cast<T>(rho));
                                   mom[i] = mom[i] * static_cast<T>(mu) +
                                            (g[i] * static_cast<T>(lr)) /
                                                std::sqrt(ms[i] + static_cast<T>(eps));
                                   s.var[i] -= mom[i];
                                 }
                               },
                               {{"rms", 1.0}, {"momentum", 0.0}});
    CHECK(opt.get_slot_names() == std::vector<std::string>{"momentum", "rms"});
  }
}

TEMPLATE_TEST_CASE("RMSProp centered: mg, mom = ... / sqrt(ms - mg^2 + eps)", "[optimizers]", float,
                   double) {
  using T = TestType;
  const T lr = static_cast<T>(0.02), rho = static_cast<T>(0.8), mu = static_cast<T>(0.7),
          eps = static_cast<T>(1e-4);
  train::RMSPropOptimizer opt(0.02, 0.8, 0.7, 1e-4, /*centered=*/true);
  check_against_reference<T>(opt,
                             [&](RefState<T>& s, const std::vector<T>& g, int) {
                               auto& ms = s.slots["rms"];
                               auto& mg = s.slots["mg"];
                               auto& mom = s.slots["momentum"];
                               for (std::size_t i = 0; i < g.size(); ++i) {
                                 ms[i] += (g[i] * g[i] - ms[i]) * (T(1) - rho);
                                 mg[i] += (g[i] - mg[i]) * (T(1) - rho);
                                 const T denom = (ms[i] - mg[i] * mg[i]) + eps;
                                 mom[i] = mom[i] * mu + g[i] * lr / std::sqrt(denom);
                                 s.var[i] -= mom[i];
                               }
                             },
                             {{"rms", 1.0}, {"mg", 0.0}, {"momentum", 0.0}});
  CHECK(opt.get_slot_names() == std::vector<std::string>{"mg", "momentum", "rms"});
}

TEMPLATE_TEST_CASE("Adadelta: accum, update = sqrt(accum_update + eps) / sqrt(accum + eps) * g",
                   "[optimizers]", float, double) {
  using T = TestType;
  const T lr = static_cast<T>(0.5), rho = static_cast<T>(0.9), eps = static_cast<T>(1e-3);
  train::AdadeltaOptimizer opt(0.5, 0.9, 1e-3);
  check_against_reference<T>(opt,
                             [&](RefState<T>& s, const std::vector<T>& g, int) {
                               auto& a = s.slots["accum"];
                               auto& u = s.slots["accum_update"];
                               for (std::size_t i = 0; i < g.size(); ++i) {
                                 a[i] = a[i] * rho + g[i] * g[i] * (T(1) - rho);
                                 const T update =
                                     std::sqrt(u[i] + eps) * (T(1) / std::sqrt(a[i] + eps)) * g[i];
                                 s.var[i] -= update * lr;
                                 u[i] = u[i] * rho + update * update * (T(1) - rho);
                               }
                             },
                             {{"accum", 0.0}, {"accum_update", 0.0}});
  CHECK(opt.get_slot_names() == std::vector<std::string>{"accum", "accum_update"});
}

TEST_CASE("RMSProp and Adadelta slots: TF's names and initial values, on the variable's ps") {
  Graph g;
  Variable w;
  {
    auto ps1 = g.device("/job:ps/task:1");
    w = get_variable(g, "w", {2}, constant_initializer(3));
  }
  auto worker = g.device("/job:worker/task:0");
  Output gw = ops::placeholder(g, DType::float32, {2}, "gw");
  train::RMSPropOptimizer plain(0.1);
  plain.apply_gradients({{gw, w}});
  CHECK(plain.get_slot(w, "rms")->name() == "w/RMSProp");
  CHECK(plain.get_slot(w, "momentum")->name() == "w/RMSProp_1");
  CHECK_FALSE(plain.get_slot(w, "mg"));
  CHECK(plain.get_slot(w, "rms")->device() == "/job:ps/task:1");
  CHECK_FALSE(plain.get_slot(w, "rms")->trainable());
  CHECK(g.operation("RMSProp/update_w/ApplyRMSProp").device() == "/job:ps/task:1");
  // Centered: TF creates rms, then mg, then momentum.
  train::RMSPropOptimizer centered(0.1, 0.9, 0.0, 1e-10, true, "Centered");
  centered.apply_gradients({{gw, w}});
  CHECK(centered.get_slot(w, "rms")->name() == "w/Centered");
  CHECK(centered.get_slot(w, "mg")->name() == "w/Centered_1");
  CHECK(centered.get_slot(w, "momentum")->name() == "w/Centered_2");
  CHECK(g.operation("Centered/update_w/ApplyCenteredRMSProp").device() == "/job:ps/task:1");
  train::AdadeltaOptimizer adadelta;
  CHECK(adadelta.learning_rate().value() == 0.001);
  CHECK(adadelta.rho() == 0.95);
  adadelta.apply_gradients({{gw, w}});
  CHECK(adadelta.get_slot(w, "accum")->name() == "w/Adadelta");
  CHECK(adadelta.get_slot(w, "accum_update")->name() == "w/Adadelta_1");
  CHECK(adadelta.get_slot(w, "accum")->device() == "/job:ps/task:1");
  CHECK(g.operation("Adadelta/update_w/ApplyAdadelta").device() == "/job:ps/task:1");

  Session sess(g);
  sess.run(global_variables_initializer(g));
  CHECK(values_of<float>(sess.run({plain.get_slot(w, "rms")->value()})[0]) ==
        std::vector<float>{1, 1});  // TF's rule: rms starts at ones
  CHECK(values_of<float>(sess.run({plain.get_slot(w, "momentum")->value()})[0]) ==
        std::vector<float>{0, 0});
  CHECK(values_of<float>(sess.run({centered.get_slot(w, "mg")->value()})[0]) ==
        std::vector<float>{0, 0});
  CHECK(values_of<float>(sess.run({adadelta.get_slot(w, "accum_update")->value()})[0]) ==
        std::vector<float>{0, 0});
}

namespace optimizers_test {

// A 6x2 float64 table "t" whose row r is {r, 100 + r}, trained `steps` times on the loss
// sum(lookup(t, {4, 1, 4}) * weights): row 4's gradient is {1.5, 0}, row 1's {2, 0.25}, the
// other rows get none. Returns every global variable's value by name.
std::map<std::string, std::vector<double>> run_sparse_table(train::Optimizer& opt, int steps) {
  Graph g;
  Tensor rows(DType::float64, {6, 2});
  for (std::size_t r = 0; r < 6; ++r) {
    rows.data<double>()[2 * r] = static_cast<double>(r);
    rows.data<double>()[2 * r + 1] = 100.0 + static_cast<double>(r);
  }
  Variable table = get_variable(g, "t", {6, 2}, Initializer([rows](Graph& gr, const Shape&, DType) {
                                  return ops::constant(gr, rows, "rows");
                                }),
                                DType::float64);
  Output ids = ops::constant(g, Tensor::from_vector(std::vector<std::int64_t>{4, 1, 4}));
  Output weights =
      ops::constant(g, Tensor::from_vector(std::vector<double>{0.5, -1, 2, 0.25, 1, 1}, {3, 2}));
  Output loss = ops::reduce_sum(ops::embedding_lookup(table, ids) * weights);
  auto grads = opt.compute_gradients(loss);
  REQUIRE(as_indexed_slices(grads[0].first));  // the sparse path
  Operation train_op = opt.apply_gradients(grads);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  for (int s = 0; s < steps; ++s) sess.run(train_op);
  std::map<std::string, std::vector<double>> out;
  for (const auto& v : global_variables(g)) {
    const Tensor value = sess.run({v.value()})[0];  // kept alive: values() is a view into it
    const auto t = value.values<double>();
    out[v.name()] = std::vector<double>(t.begin(), t.end());
  }
  return out;
}

const std::map<std::size_t, std::vector<double>> kSparseGrads{{4, {1.5, 0}}, {1, {2, 0.25}}};

double table_initial(std::size_t r, std::size_t c) {
  return static_cast<double>(r) + 100.0 * static_cast<double>(c);
}

// Rows 0, 2, 3, 5 of `table` are exactly `value(r, c)`.
void check_untouched(const std::vector<double>& table,
                     const std::function<double(std::size_t, std::size_t)>& value) {
  for (std::size_t r : {0, 2, 3, 5})
    for (std::size_t c = 0; c < 2; ++c) {
      INFO("row " << r << " column " << c);
      CHECK(table[2 * r + c] == value(r, c));
    }
}

}  // namespace optimizers_test

TEST_CASE("RMSProp and Adadelta on IndexedSlices update only the batch's rows") {
  using namespace optimizers_test;
  const int steps = 3;
  SECTION("RMSProp with momentum") {
    const double lr = 0.1, rho = 0.9, mu = 0.5, eps = 1e-6;
    train::RMSPropOptimizer opt(lr, rho, mu, eps);
    auto out = run_sparse_table(opt, steps);
    for (const auto& [row, grad] : kSparseGrads)
      for (std::size_t c = 0; c < 2; ++c) {
        double var = table_initial(row, c), ms = 1, mom = 0;
        for (int s = 0; s < steps; ++s) {
          ms = ms * rho + grad[c] * grad[c] * (1 - rho);
          mom = mom * mu + (1 / std::sqrt(ms + eps)) * lr * grad[c];
          var -= mom;
        }
        CHECK(out["t"][2 * row + c] == Approx(var).epsilon(1e-12));
        CHECK(out["t/RMSProp"][2 * row + c] == Approx(ms).epsilon(1e-12));
        CHECK(out["t/RMSProp_1"][2 * row + c] == Approx(mom).epsilon(1e-12).margin(1e-300));
      }
    check_untouched(out["t"], table_initial);
    check_untouched(out["t/RMSProp"], [](auto, auto) { return 1.0; });
    check_untouched(out["t/RMSProp_1"], [](auto, auto) { return 0.0; });
  }
  SECTION("RMSProp centered") {
    const double lr = 0.1, rho = 0.8, mu = 0.3, eps = 1e-4;
    train::RMSPropOptimizer opt(lr, rho, mu, eps, true);
    auto out = run_sparse_table(opt, steps);
    for (const auto& [row, grad] : kSparseGrads)
      for (std::size_t c = 0; c < 2; ++c) {
        double var = table_initial(row, c), ms = 1, mg = 0, mom = 0;
        for (int s = 0; s < steps; ++s) {
          ms = ms * rho + grad[c] * grad[c] * (1 - rho);
          mg = mg * rho + grad[c] * (1 - rho);
          mom = mom * mu + (1 / std::sqrt(ms + eps - mg * mg)) * lr * grad[c];
          var -= mom;
        }
        CHECK(out["t"][2 * row + c] == Approx(var).epsilon(1e-12));
        CHECK(out["t/RMSProp"][2 * row + c] == Approx(ms).epsilon(1e-12));
        CHECK(out["t/RMSProp_1"][2 * row + c] == Approx(mg).epsilon(1e-12).margin(1e-300));
        CHECK(out["t/RMSProp_2"][2 * row + c] == Approx(mom).epsilon(1e-12).margin(1e-300));
      }
    check_untouched(out["t"], table_initial);
    check_untouched(out["t/RMSProp"], [](auto, auto) { return 1.0; });
    check_untouched(out["t/RMSProp_1"], [](auto, auto) { return 0.0; });
    check_untouched(out["t/RMSProp_2"], [](auto, auto) { return 0.0; });
  }
  SECTION("Adadelta") {
    const double lr = 1.0, rho = 0.95, eps = 1e-6;
    train::AdadeltaOptimizer opt(lr, rho, eps);
    auto out = run_sparse_table(opt, steps);
    for (const auto& [row, grad] : kSparseGrads)
      for (std::size_t c = 0; c < 2; ++c) {
        double var = table_initial(row, c), a = 0, u = 0;
        for (int s = 0; s < steps; ++s) {
          a = a * rho + grad[c] * grad[c] * (1 - rho);
          const double update = std::sqrt(u + eps) / std::sqrt(a + eps) * grad[c];
          var -= update * lr;
          u = u * rho + update * update * (1 - rho);
        }
        CHECK(out["t"][2 * row + c] == Approx(var).epsilon(1e-12));
        CHECK(out["t/Adadelta"][2 * row + c] == Approx(a).epsilon(1e-12).margin(1e-300));
        CHECK(out["t/Adadelta_1"][2 * row + c] == Approx(u).epsilon(1e-12).margin(1e-300));
      }
    check_untouched(out["t"], table_initial);
    check_untouched(out["t/Adadelta"], [](auto, auto) { return 0.0; });
    check_untouched(out["t/Adadelta_1"], [](auto, auto) { return 0.0; });
  }
}

TEST_CASE("the RMSProp and Adadelta ops check their inputs at build time and run time") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, zeros_initializer());
  Variable ms = get_variable(g, "ms", {2}, zeros_initializer());
  Variable mom = get_variable(g, "mom", {3}, zeros_initializer());
  Variable mom2 = get_variable(g, "mom2", {2}, zeros_initializer());
  Output grad = ops::placeholder(g, DType::float32, {2});
  Output s32 = ops::scalar_like(grad, 0.1);
  Output s64 = ops::constant(g, Tensor(0.1));
  CHECK_THROWS_WITH(ops::apply_rms_prop(w.ref(), ms.ref(), mom.ref(), s32, s32, s32, s32, grad),
                    Catch::Contains("ApplyRMSProp") && Catch::Contains("mom"));
  CHECK_THROWS_WITH(ops::apply_rms_prop(w.ref(), ms.ref(), mom2.ref(), s64, s32, s32, s32, grad),
                    Catch::Contains("ApplyRMSProp"));
  CHECK_THROWS_WITH(ops::apply_adadelta(w.ref(), ms.ref(), mom2.ref(), s32, grad, s32, grad),
                    Catch::Contains("ApplyAdadelta") && Catch::Contains("scalar"));
  Output ids = ops::constant(g, Tensor::from_vector(std::vector<std::int64_t>{5}));
  Output rows = ops::placeholder(g, DType::float32, {1});
  Output bad =
      ops::sparse_apply_rms_prop(w.ref(), ms.ref(), mom2.ref(), s32, s32, s32, s32, rows, ids);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  // An index outside the variable fails before any row is written.
  CHECK_THROWS_WITH(sess.run({bad}, {{rows, Tensor::from_vector(std::vector<float>{1})}}),
                    Catch::Contains("SparseApplyRMSProp") && Catch::Contains("5"));
  CHECK(values_of<float>(sess.run({ms.value()})[0]) == std::vector<float>{0, 0});
}

// ---------------------------------------------------------------------------------------------
// Learning rates as tensors

TEST_CASE("a learning rate fed through a placeholder gives the number's updates, step by step") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, values_initializer({1.0, -2.0}));
  Variable v = get_variable(g, "v", {2}, values_initializer({1.0, -2.0}));
  Output lr = ops::placeholder(g, DType::float32, {}, "lr");
  Output gw = ops::placeholder(g, DType::float32, {2}, "gw");
  train::MomentumOptimizer by_tensor(lr, 0.9, false, "ByTensor");
  train::MomentumOptimizer by_number(0.1, 0.9, false, "ByNumber");
  CHECK(by_tensor.learning_rate().is_tensor());
  CHECK(by_tensor.learning_rate().tensor() == lr);
  CHECK_THROWS_AS(by_tensor.learning_rate().value(), FailedPrecondition);
  CHECK(by_number.learning_rate().value() == 0.1);
  Operation tensor_op = by_tensor.apply_gradients({{gw, w}});
  Operation number_op = by_number.apply_gradients({{gw, v}});
  // The update takes the Output itself (no constant is made for it).
  CHECK(g.operation("ByTensor/update_w/ApplyMomentum").input(2) == lr);
  CHECK_FALSE(g.find_operation("ByTensor/update_w/learning_rate"));

  Session sess(g);
  sess.run(global_variables_initializer(g));
  const std::vector<float> grad{0.5f, -4.0f};
  std::vector<float> var{1.0f, -2.0f}, accum{0, 0};
  auto step = [&](float rate) {
    for (std::size_t i = 0; i < 2; ++i) {
      accum[i] = accum[i] * 0.9f + grad[i];
      var[i] -= accum[i] * rate;
    }
  };
  const Tensor g_value = Tensor::from_vector(grad);
  for (int t = 0; t < 3; ++t) {
    sess.run({}, {{lr, Tensor(0.1f)}, {gw, g_value}}, {tensor_op, number_op});
    step(0.1f);
    INFO("step " << t);
    const auto by_t = values_of<float>(sess.run({w.value()})[0]);
    CHECK(by_t == values_of<float>(sess.run({v.value()})[0]));  // bit for bit
    check_close(by_t, var, "w");
  }
  // A new rate changes the next step only.
  sess.run(tensor_op, {{lr, Tensor(2.0f)}, {gw, g_value}});
  step(2.0f);
  check_close(values_of<float>(sess.run({w.value()})[0]), var, "w after lr 2");
  sess.run(tensor_op, {{lr, Tensor(0.0f)}, {gw, g_value}});
  const float accum0 = accum[0] * 0.9f + grad[0];  // lr 0: the accumulator moves, w does not
  CHECK(values_of<float>(sess.run({w.value()})[0]) == var);
  CHECK(values_of<float>(sess.run({by_tensor.get_slot(w, "momentum")->value()})[0])[0] ==
        Approx(accum0));
}

TEST_CASE("a learning rate computed on the worker travels to the ps with the gradient") {
  const std::string ps0 = "/job:ps/replica:0/task:0/device:CPU:0";
  const std::string worker = "/job:worker/replica:0/task:0/device:CPU:0";
  Graph g;
  Variable w, step;
  {
    auto ps = g.device("/job:ps/task:0");
    w = get_variable(g, "w", {4}, zeros_initializer());
    step = get_variable(g, "step", {}, zeros_initializer(), DType::float32, false);
  }
  auto on_worker = g.device("/job:worker/task:0");
  // A decayed rate: 0.1 / (1 + step), computed on the worker.
  Output lr = ops::div(ops::scalar_like(step.value(), 0.1), step.value() + 1.0, "decayed_lr");
  Output grad = ops::constant(g, Tensor::from_vector(std::vector<float>{1, 2, 3, 4}), "grad");
  train::RMSPropOptimizer opt(lr);
  Operation train_op = opt.apply_gradients({{grad, w}});
  const auto nodes = needed_nodes(g, {}, {train_op.id()}, {});
  const auto devices = place_nodes(g, nodes, {ps0, worker}, worker);
  auto device_of = [&](std::string_view op) {
    const int id = g.operation(op).id();
    return devices.at(
        static_cast<std::size_t>(std::find(nodes.begin(), nodes.end(), id) - nodes.begin()));
  };
  CHECK(device_of("RMSProp/update_w/ApplyRMSProp") == ps0);
  CHECK(device_of("decayed_lr") == worker);
  const auto plan =
      partition_graph(g, nodes, devices, {}, {}, worker, [](const std::string&) { return 7u; });
  std::vector<std::string> data_to_ps;
  for (const auto& t : plan.transfers)
    if (!t.control && t.dst_device != worker) data_to_ps.push_back(t.tensor);
  std::sort(data_to_ps.begin(), data_to_ps.end());
  CHECK(data_to_ps == std::vector<std::string>{"decayed_lr:0", "grad:0"});
}

TEST_CASE("every optimizer takes its learning rate as an Output, dense and sparse") {
  using namespace optimizers_test;
  // For each optimizer: the same training with the learning rate 0.05 as a number and as a
  // float64 variable's value, bit for bit, on the IndexedSlices gradient of a lookup and on its
  // dense form; and, with one step at a time, the same with use_locking = false (its last
  // constructor argument), whose update ops then carry use_locking = false.
  using Make = std::function<std::unique_ptr<train::Optimizer>(train::LearningRate, bool)>;
  const std::vector<std::pair<std::string, Make>> makers{
      {"GradientDescent",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::GradientDescentOptimizer>(std::move(lr), "GradientDescent",
                                                                  locking);
       }},
      {"Momentum",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::MomentumOptimizer>(std::move(lr), 0.9, true, "Momentum",
                                                           locking);
       }},
      {"Adagrad",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::AdagradOptimizer>(std::move(lr), 0.1, "Adagrad", locking);
       }},
      {"Adam",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::AdamOptimizer>(std::move(lr), 0.9, 0.999, 1e-8, "Adam",
                                                       false, locking);
       }},
      {"LazyAdam",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::AdamOptimizer>(std::move(lr), 0.9, 0.999, 1e-8, "Adam",
                                                       true, locking);
       }},
      {"Ftrl",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::FtrlOptimizer>(std::move(lr), -0.5, 0.1, 0.01, 0.01, "Ftrl",
                                                       locking);
       }},
      {"RMSProp",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::RMSPropOptimizer>(std::move(lr), 0.9, 0.5, 1e-10, false,
                                                          "RMSProp", locking);
       }},
      {"RMSPropCentered",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::RMSPropOptimizer>(std::move(lr), 0.9, 0.5, 1e-10, true,
                                                          "RMSProp", locking);
       }},
      {"Adadelta",
       [](train::LearningRate lr, bool locking) {
         return std::make_unique<train::AdadeltaOptimizer>(std::move(lr), 0.95, 1e-8, "Adadelta",
                                                           locking);
       }},
  };
  for (const auto& [name, make] : makers) {
    INFO(name);
    for (bool sparse : {false, true}) {
      INFO("sparse " << sparse);
      auto run = [&, make = make](bool as_tensor, bool locking = true) {
        Graph g;
        Variable table = get_variable(g, "t", {4, 2}, values_initializer({1, 2, 3, 4, 5, 6, 7, 8}),
                                      DType::float64);
        Variable rate = get_variable(g, "rate", {}, constant_initializer(0.05), DType::float64,
                                     /*trainable=*/false);
        auto opt = as_tensor ? make(rate, locking) : make(0.05, locking);
        CHECK(opt->use_locking() == locking);
        Output ids = ops::constant(g, Tensor::from_vector(std::vector<std::int64_t>{2, 0, 2}));
        Output rows = ops::embedding_lookup(table, ids);
        Output weights = ops::constant(
            g, Tensor::from_vector(std::vector<double>{0.5, -1, 2, 0.25, 1, 3}, {3, 2}));
        auto grads = opt->compute_gradients(ops::reduce_sum(rows * weights), {table});
        CHECK(as_indexed_slices(grads[0].first).has_value());
        if (!sparse) grads[0].first = ops::identity(grads[0].first);  // a dense gradient
        Operation train_op = opt->apply_gradients(grads);
        std::size_t updates = 0;  // the ops that write the table, each with the optimizer's flag
        for (std::size_t id = 0; id < g.num_nodes(); ++id) {
          const auto& node = g.node(static_cast<int>(id));
          if (node.attrs.count("use_locking") == 0) continue;
          ++updates;
          CHECK(std::get<bool>(node.attrs.at("use_locking")) == locking);
        }
        CHECK(updates == 1);
        Session sess(g);
        sess.run(global_variables_initializer(g));
        for (int s = 0; s < 3; ++s) sess.run(train_op);
        return values_of<double>(sess.run({table.value()})[0]);
      };
      const auto by_number = run(false);
      const auto by_tensor = run(true);
      CHECK(by_tensor == by_number);
      CHECK(run(false, false) == by_number);
      CHECK(by_number != std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8});
    }
  }
}

TEST_CASE("a learning rate Output of another float dtype is cast to the variable's, as TF") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, zeros_initializer(), DType::float64);
  Output gw = ops::placeholder(g, DType::float64, {2}, "gw");
  Output lr32 = ops::placeholder(g, DType::float32, {}, "lr32");
  train::GradientDescentOptimizer opt(lr32);
  Operation step = opt.apply_gradients({{gw, w}});
  Session sess(g);
  sess.run(global_variables_initializer(g));
  sess.run(step, {{gw, Tensor::from_vector(std::vector<double>{1, -2})}, {lr32, Tensor(0.5f)}});
  CHECK(values_of<double>(sess.run({w.value()})[0]) == std::vector<double>{-0.5, 1});
}

TEST_CASE("learning rate Outputs: wrong dtype, shape or graph are InvalidArgument") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, zeros_initializer(), DType::float64);
  Output gw = ops::placeholder(g, DType::float64, {2}, "gw");
  CHECK_THROWS_WITH(train::GradientDescentOptimizer(ops::placeholder(g, DType::float32, {2}, "v")),
                    Catch::Contains("v:0") && Catch::Contains("[2]") && Catch::Contains("scalar"));
  CHECK_THROWS_WITH(train::AdamOptimizer(ops::placeholder(g, DType::int32, {}, "steps")),
                    Catch::Contains("int32") && Catch::Contains("float32 or float64"));
  CHECK_THROWS_AS(train::MomentumOptimizer(Output(), 0.9), InvalidArgument);
  Graph other;
  train::RMSPropOptimizer foreign(ops::placeholder(other, DType::float64, {}, "lr"));
  CHECK_THROWS_WITH(foreign.apply_gradients({{gw, w}}), Catch::Contains("another graph"));
  Output lr_vector = ops::placeholder(g, DType::float64, {-1}, "lr_vector");
  CHECK_THROWS_WITH(train::GradientDescentOptimizer(lr_vector), Catch::Contains("[?]"));
  // The same Output serves every variable of its dtype.
  Output lr64 = ops::placeholder(g, DType::float64, {}, "lr64");
  Variable b = get_variable(g, "b", {2}, zeros_initializer(), DType::float64);
  train::AdadeltaOptimizer adadelta(lr64);
  Operation op = adadelta.apply_gradients({{gw, w}, {gw, b}});
  CHECK(g.operation("Adadelta/update_w/ApplyAdadelta").input(3) == lr64);
  CHECK(g.operation("Adadelta/update_b/ApplyAdadelta").input(3) == lr64);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  sess.run(op, {{lr64, Tensor(1.0)}, {gw, Tensor::from_vector(std::vector<double>{1, -1})}});
  const auto moved = values_of<double>(sess.run({w.value()})[0]);
  CHECK(moved == values_of<double>(sess.run({b.value()})[0]));
  CHECK(moved[0] < 0);
  CHECK(moved[1] > 0);
}

TEST_CASE("use_locking = false: sparse updates of disjoint rows from 4 threads all land") {
  // Lock-free updates run at once; on disjoint rows none can overwrite another.
  constexpr int kWriters = 4, kSteps = 300;
  Graph g;
  Variable table = get_variable(g, "t", {kWriters, 8}, zeros_initializer());
  train::GradientDescentOptimizer opt(1.0, "GradientDescent", /*use_locking=*/false);
  std::vector<Operation> train_ops;
  for (std::int64_t w = 0; w < kWriters; ++w) {
    Output id = ops::constant(g, Tensor::from_vector(std::vector<std::int64_t>{w}));
    train_ops.push_back(opt.minimize(ops::reduce_sum(ops::embedding_lookup(table, id))));
  }
  Session sess(g);
  sess.run(global_variables_initializer(g));
  std::vector<std::thread> workers;
  for (int w = 0; w < kWriters; ++w)
    workers.emplace_back([&, w] {
      for (int s = 0; s < kSteps; ++s) sess.run(train_ops[static_cast<std::size_t>(w)]);
    });
  for (auto& t : workers) t.join();
  const auto values = values_of<float>(sess.run({table.value()})[0]);
  CHECK(values == std::vector<float>(kWriters * 8, -static_cast<float>(kSteps)));
}

TEST_CASE(
    "use_locking = true: sparse updates from 4 threads are exact, and gathers never tear a row") {
  // Each thread updates its own row and two rows everyone updates (one given twice); the ps
  // runs these stripe by stripe, so only the shared rows' stripes are contended. A reader
  // gathers the shared rows meanwhile: every row it sees has one value in all its elements.
  constexpr int kWriters = 4, kSteps = 300;
  constexpr std::int64_t kShared = 40, kSharedSameStripe = 40 + 32;
  Graph g;
  Variable table = get_variable(g, "t", {128, 8}, zeros_initializer());
  train::GradientDescentOptimizer opt(1.0);  // use_locking defaults to true
  std::vector<Operation> train_ops;
  for (std::int64_t w = 0; w < kWriters; ++w) {
    Output ids = ops::constant(
        g, Tensor::from_vector(std::vector<std::int64_t>{w, kShared, kSharedSameStripe, kShared}));
    train_ops.push_back(opt.minimize(ops::reduce_sum(ops::embedding_lookup(table, ids))));
  }
  Output shared_rows = ops::embedding_lookup(
      table,
      ops::constant(g, Tensor::from_vector(std::vector<std::int64_t>{kShared, kSharedSameStripe})));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  std::atomic<int> writing{kWriters}, torn{0}, reads{0};
  std::thread reader([&] {
    do {
      const auto rows = values_of<float>(sess.run({shared_rows})[0]);
      for (std::size_t r = 0; r < 2; ++r)
        for (std::size_t j = 1; j < 8; ++j)
          if (rows[r * 8 + j] != rows[r * 8]) torn.fetch_add(1);
      reads.fetch_add(1);
    } while (writing.load() > 0);
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < kWriters; ++w)
    workers.emplace_back([&, w] {
      for (int s = 0; s < kSteps; ++s) sess.run(train_ops[static_cast<std::size_t>(w)]);
      writing.fetch_sub(1);
    });
  for (auto& t : workers) t.join();
  reader.join();
  CHECK(torn.load() == 0);
  CHECK(reads.load() > 0);
  const auto values = values_of<float>(sess.run({table.value()})[0]);
  auto row = [&](std::int64_t r) {
    return std::vector<float>(values.begin() + r * 8, values.begin() + r * 8 + 8);
  };
  // Hand-counted: the loss sums each looked-up row once per time it is given, lr 1.
  for (std::int64_t w = 0; w < kWriters; ++w) CHECK(row(w) == std::vector<float>(8, -kSteps));
  CHECK(row(kShared) == std::vector<float>(8, -2.0f * kWriters * kSteps));
  CHECK(row(kSharedSameStripe) == std::vector<float>(8, -1.0f * kWriters * kSteps));
  CHECK(row(kWriters) == std::vector<float>(8, 0.0f));
}
