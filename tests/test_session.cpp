// In-process Session and the dataflow executor: variables, feeds, pruning, errors, and a
// randomized parallel-execution check against a reference evaluation.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "psflow/graph/sync_ops.hpp"
#include "psflow/runtime.hpp"
#include "support/error_message.hpp"

using namespace psflow;

namespace {

// A test-only op whose kernel throws DataLoss, to check error propagation keeps the type.
inline const bool test_ops_registered = [] {
  OpRegistry::global().add(OpDef{"TestFail", 1, {}, false, detail::same_as_input});
  struct FailKernel : OpKernel {
    explicit FailKernel(const OpKernelConstruction&) {}
    void compute(OpKernelContext&) override { throw DataLoss("the test kernel failed on purpose"); }
  };
  KernelRegistry::global().add<FailKernel>("TestFail");
  // A long computation that, like a well-behaved long op, polls its step's cancellation and
  // returns early (successfully) once the step is cancelled; bounded at 10 s.
  OpRegistry::global().add(OpDef{"TestPollCancel", 1, {}, true, detail::same_as_input});
  struct PollCancelKernel : OpKernel {
    explicit PollCancelKernel(const OpKernelConstruction&) {}
    void compute(OpKernelContext& ctx) override {
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!ctx.step().cancellation->cancelled() && std::chrono::steady_clock::now() < limit)
        std::this_thread::yield();
      ctx.set_output(0, ctx.input(0));
    }
  };
  KernelRegistry::global().add<PollCancelKernel>("TestPollCancel");
  return true;
}();

Output test_fail(Output x) {
  return detail::build_op("TestFail", {x}, {}, "", "TestFail").output(0);
}

}  // namespace

TEST_CASE("the seed's graph computes w+b, w*b, w/b") {
  Graph g;
  auto w = get_variable(g, "w", {2, 2}, constant_initializer(2));
  auto b = get_variable(g, "b", {2, 2}, constant_initializer(5));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  auto out = sess.run({w + b, w * b, w / b});
  REQUIRE(out.size() == 3);
  CHECK(out[0].equals(Tensor::filled(7.0f, {2, 2})));
  CHECK(out[1].equals(Tensor::filled(10.0f, {2, 2})));
  CHECK(out[2].equals(Tensor::filled(0.4f, {2, 2})));
}

TEST_CASE("reading an uninitialized variable throws FailedPrecondition naming it") {
  Graph g;
  auto w = get_variable(g, "weights", {3}, zeros_initializer());
  Session sess(g);
  CHECK_THROWS_AS(sess.run({w.value()}), FailedPrecondition);
  CHECK_THROWS_WITH(sess.run({w.value() * 2.0}), Catch::Contains("uninitialized value weights") &&
                                                     Catch::Contains("initializer"));
  sess.run(w.initializer());
  CHECK(sess.run({w.value()})[0].equals(Tensor(DType::float32, {3})));
}

TEST_CASE("variables persist across runs and across Sessions on the same graph") {
  Graph g;
  auto counter = get_variable(g, "counter", {}, zeros_initializer(), DType::int64);
  Output one = ops::constant(g, Tensor(std::int64_t{1}));
  Output increment = counter.assign_add(one);
  {
    Session first(g);
    first.run(global_variables_initializer(g));
    for (int i = 0; i < 5; ++i) first.run({increment});
  }
  Session second(g);
  CHECK(second.run({counter.value()})[0].scalar<std::int64_t>() == 5);
  CHECK(second.run({increment})[0].scalar<std::int64_t>() == 6);
  CHECK(second.run({counter.value()})[0].scalar<std::int64_t>() == 6);
  Output set = counter.assign(ops::constant(g, Tensor(std::int64_t{40})));
  second.run({set});
  CHECK(second.run({counter.value() + one})[0].scalar<std::int64_t>() == 41);
  // A different graph has its own variables.
  Graph other;
  auto same_name = get_variable(other, "counter", {}, zeros_initializer(), DType::int64);
  Session third(other);
  CHECK_THROWS_AS(third.run({same_name.value()}), FailedPrecondition);
}

TEST_CASE("assign checks dtype and shape, and assign_sub subtracts") {
  Graph g;
  auto v = get_variable(g, "v", {2}, constant_initializer(10));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  CHECK(sess.run({v.assign_sub(ops::constant(g, Tensor::from_vector<float>({1, 2})))})[0].equals(
      Tensor::from_vector<float>({9, 8})));
  CHECK_THROWS_AS(v.assign(ops::constant(g, Tensor::from_vector<float>({1, 2, 3}))),
                  InvalidArgument);
  CHECK_THROWS_AS(v.assign(ops::constant(g, Tensor::from_vector<double>({1, 2}))), InvalidArgument);
}

TEST_CASE("a read taken before an update keeps its value (copy-on-write)") {
  Graph g;
  auto v = get_variable(g, "v", {2}, constant_initializer(1));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  Tensor before = sess.run({v.value()})[0];
  sess.run({v.assign_add(ops::constant(g, Tensor::from_vector<float>({1, 1})))});
  CHECK(before.equals(Tensor::from_vector<float>({1, 1})));
  CHECK(sess.run({v.value()})[0].equals(Tensor::from_vector<float>({2, 2})));
}

TEST_CASE("feeds replace placeholders and any other tensor, and bad feeds are named") {
  Graph g;
  Output x = ops::placeholder(g, DType::float32, {-1, 2}, "x");
  Output doubled = x * 2.0;
  Output plus_one = doubled + 1.0;
  Session sess(g);
  Tensor value = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  CHECK(sess.run({plus_one}, {{x, value}})[0].equals(
      Tensor::from_vector<float>({3, 5, 7, 9}, {2, 2})));
  // Feeding the intermediate tensor prunes the placeholder away.
  CHECK(sess.run({plus_one}, {{doubled, value}})[0].equals(
      Tensor::from_vector<float>({2, 3, 4, 5}, {2, 2})));
  // Fetching a fed tensor returns the fed value.
  CHECK(sess.run({x}, {{x, value}})[0].equals(value));

  CHECK_THROWS_WITH(sess.run({plus_one}),
                    Catch::Contains("must feed a value for placeholder tensor 'x'"));
  CHECK_THROWS_AS(sess.run({plus_one}), InvalidArgument);
  CHECK_THROWS_WITH(sess.run({plus_one}, {{x, Tensor::from_vector<double>({1, 2})}}),
                    Catch::Contains("placeholder 'x'") && Catch::Contains("float32"));
  CHECK_THROWS_WITH(sess.run({plus_one}, {{x, Tensor::from_vector<float>({1, 2, 3})}}),
                    Catch::Contains("placeholder 'x'") && Catch::Contains("[?,2]"));
  CHECK_THROWS_AS(sess.run({plus_one}, {{x, value}, {x, value}}), InvalidArgument);
}

TEST_CASE("only the ops the fetches and targets need run") {
  Graph g;
  auto counter = get_variable(g, "counter", {}, zeros_initializer(), DType::int32);
  Output bump = counter.assign_add(ops::constant(g, Tensor(std::int32_t{1})));
  Output unrelated = ops::constant(g, Tensor(3.0f)) * 2.0;
  Session sess(g);
  sess.run(global_variables_initializer(g));
  for (int i = 0; i < 3; ++i) sess.run({unrelated});
  CHECK(sess.run({counter.value()})[0].scalar<std::int32_t>() == 0);
  sess.run({unrelated}, {}, {bump.op()});
  CHECK(sess.run({counter.value()})[0].scalar<std::int32_t>() == 1);
  // Control dependencies pull ops in.
  Output after;
  {
    auto deps = g.control_dependencies({bump.op()});
    after = ops::identity(unrelated);
  }
  sess.run({after});
  CHECK(sess.run({counter.value()})[0].scalar<std::int32_t>() == 2);
}

TEST_CASE("a failing kernel's error reaches the caller typed, and the session keeps working") {
  Graph g;
  Output x = ops::placeholder(g, DType::float32, {4}, "x");
  // Many independent branches around the failing op, so some run in parallel with it.
  std::vector<Output> branches;
  for (int i = 0; i < 50; ++i) branches.push_back(ops::tanh(x * static_cast<double>(i)));
  Output failing = test_fail(branches[10]);
  Output total = branches[0];
  for (int i = 1; i < 50; ++i) total = total + branches[static_cast<std::size_t>(i)];
  Session sess(g);
  Tensor value = Tensor::from_vector<float>({0.1f, 0.2f, 0.3f, 0.4f});
  for (int attempt = 0; attempt < 20; ++attempt) {
    CHECK_THROWS_AS(sess.run({total, failing}, {{x, value}}), DataLoss);
    CHECK_THROWS_WITH(sess.run({failing}, {{x, value}}),
                      Catch::Contains("TestFail 'TestFail'") && Catch::Contains("on purpose"));
    CHECK(sess.run({total}, {{x, value}})[0].size() == 4);
  }
  // Integer division by zero is a typed error too.
  Output zero = ops::constant(g, Tensor(std::int32_t{0}));
  CHECK_THROWS_AS(sess.run({ops::constant(g, Tensor(std::int32_t{1})) / zero}), InvalidArgument);
}

TEST_CASE("RunOptions::timeout_in_ms ends a waiting step with DeadlineExceeded and withdraws it") {
  Graph g;
  Output dequeue = ops::token_queue_dequeue(g, "tokens", /*timeout_ms=*/0);  // waits forever
  Operation put = ops::token_queue_enqueue_many(
      ops::constant(g, Tensor::from_vector<std::int64_t>({7})), "tokens");
  Session sess(g);
  const auto started = std::chrono::steady_clock::now();
  CHECK_THAT(psflow::testing::deadline_exceeded_message(
                 [&] { sess.run(RunOptions{.timeout_in_ms = 100}, {dequeue}, {}, {}, nullptr); }),
             Catch::Contains("timeout_in_ms = 100"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
  // The cancelled dequeue no longer waits: the next token goes to the next dequeue.
  sess.run(put);
  CHECK(sess.run(RunOptions{.timeout_in_ms = 10000}, {dequeue}, {}, {}, nullptr)[0]
            .scalar<std::int64_t>() == 7);
  CHECK_THROWS_AS(sess.run(RunOptions{.timeout_in_ms = -1}, {dequeue}, {}, {}, nullptr),
                  InvalidArgument);
}

TEST_CASE("a step over its timeout starts no op after the one computing at the deadline") {
  Graph g;
  auto count = get_variable(g, "count", {}, zeros_initializer());
  Output slow =
      detail::build_op("TestPollCancel", {ops::constant(g, Tensor(1.0f))}, {}, "", "TestPollCancel")
          .output(0);
  Output after = count.assign_add(slow);
  Session sess(g);
  sess.run(count.initializer());
  CHECK_THROWS_AS(sess.run(RunOptions{.timeout_in_ms = 50}, {after}, {}, {}, nullptr),
                  DeadlineExceeded);
  CHECK(sess.run({count.value()})[0].scalar<float>() == 0.0f);
}

TEST_CASE("a closed session refuses to run") {
  Graph g;
  Output c = ops::constant(g, Tensor(1.0f));
  Session sess(g);
  sess.close();
  CHECK_THROWS_AS(sess.run({c}), FailedPrecondition);
  CHECK_THROWS_AS(Session(g, "grpc://localhost:1"), InvalidArgument);
}

TEST_CASE("concurrent runs apply every update exactly once") {
  Graph g;
  auto counter = get_variable(g, "counter", {8}, zeros_initializer(), DType::int64);
  Output bump = counter.assign_add(ops::constant(g, Tensor::filled(std::int64_t{1}, {8})));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  constexpr int kThreads = 4, kSteps = 250;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kSteps; ++i) sess.run({}, {}, {bump.op()});
    });
  for (auto& t : threads) t.join();
  auto value = sess.run({counter.value()})[0];
  for (auto v : value.values<std::int64_t>()) CHECK(v == kThreads * kSteps);
}

// A random 200-node DAG of element-wise ops, run 1000 times in parallel and compared with a
// direct evaluation of the same expressions.
TEST_CASE("the parallel executor matches a reference evaluation on a random DAG") {
  constexpr int kNodes = 200, kSteps = 1000, kWidth = 4;
  std::mt19937 rng(1234);
  Graph g;
  Output x = ops::placeholder(g, DType::float64, {kWidth}, "x");
  std::vector<Output> outputs = {x};
  enum Kind { kTanhAdd, kMul, kSub, kNeg, kScale };
  struct Recipe {
    Kind kind;
    int a, b;
    double scale;
  };
  std::vector<Recipe> recipes;
  for (int i = 0; i < kNodes; ++i) {
    const int n = static_cast<int>(outputs.size());
    // Prefer recent nodes so the DAG is deep as well as wide.
    auto pick = [&] {
      return std::max(0, n - 1 - static_cast<int>(rng() % static_cast<unsigned>(std::min(n, 12))));
    };
    Recipe r{static_cast<Kind>(rng() % 5), pick(), pick(), 0.5 + (rng() % 100) / 200.0};
    Output a = outputs[static_cast<std::size_t>(r.a)], b = outputs[static_cast<std::size_t>(r.b)];
    switch (r.kind) {
      case kTanhAdd:
        outputs.push_back(ops::tanh(a + b));
        break;
      case kMul:
        outputs.push_back(ops::tanh(a) * ops::tanh(b));
        break;
      case kSub:
        outputs.push_back(a - b);
        break;
      case kNeg:
        outputs.push_back(-a);
        break;
      case kScale:
        outputs.push_back(ops::tanh(a * r.scale));
        break;
    }
    recipes.push_back(r);
  }
  auto reference = [&](const std::vector<double>& input) {
    std::vector<std::vector<double>> values = {input};
    for (const Recipe& r : recipes) {
      const auto& a = values[static_cast<std::size_t>(r.a)];
      const auto& b = values[static_cast<std::size_t>(r.b)];
      std::vector<double> out(kWidth);
      for (int j = 0; j < kWidth; ++j) {
        switch (r.kind) {
          case kTanhAdd:
            out[j] = std::tanh(a[j] + b[j]);
            break;
          case kMul:
            out[j] = std::tanh(a[j]) * std::tanh(b[j]);
            break;
          case kSub:
            out[j] = a[j] - b[j];
            break;
          case kNeg:
            out[j] = -a[j];
            break;
          case kScale:
            out[j] = std::tanh(a[j] * r.scale);
            break;
        }
      }
      values.push_back(out);
    }
    return values;
  };
  std::vector<Output> fetches(outputs.end() - 20, outputs.end());
  Session sess(g, SessionOptions{2});
  int mismatches = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<double> input(kWidth);
    for (int j = 0; j < kWidth; ++j) input[static_cast<std::size_t>(j)] = std::sin(step * 0.37 + j);
    auto got = sess.run(fetches, {{x, Tensor::from_vector(input)}});
    auto want = reference(input);
    for (std::size_t f = 0; f < fetches.size(); ++f) {
      const auto& expected = want[want.size() - fetches.size() + f];
      auto values = got[f].values<double>();
      for (int j = 0; j < kWidth; ++j)
        if (std::abs(values[static_cast<std::size_t>(j)] - expected[static_cast<std::size_t>(j)]) >
            1e-12)
          ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}
