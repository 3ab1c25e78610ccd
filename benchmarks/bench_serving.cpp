// Serving benchmark: a CTR model's predictions through serving::Model, next to the same forward
// pass run by the training Session in-process, and over HTTP through examples/serve, next to
// in-process predict, in the same run.
//
//   serving/session_forward/B   the training graph's Session::run of the probability, batch B
//                               (the baseline: what the trainer's own evaluation costs)
//   serving/predict/B           Model::predict of the exported bundle, batch B
//   serving/predict_throughput  Model::predict, batch 1, from 1 and 2 threads at once
//                               (items_per_second: predictions per second)
//   serving/rest/1              POST /v1/models/ctr:predict of one instance to a serve process
//                               (examples/serve/main.cpp, built here as bench_serve) over one
//                               keep-alive loopback connection, JSON in and out
//
// The model: examples/ctr's wide-and-deep click model, 11 int64 feature ids per example, a wide
// table [2^20, 1] and a deep table [2^20, 8] (each in 2 partitions, as on 2 ps tasks), a relu
// layer of 64 units and a linear unit; sigmoid probability. Its values are the initial ones
// (latency does not depend on them).
//
// Counters: p50_us and p99_us per call (B = 1 and 256), items_per_second.
#include <benchmark/benchmark.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <psflow/psflow.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_support.hpp"

using namespace psflow;

namespace {

constexpr std::int64_t kFeatures = 11;
constexpr std::size_t kRows = std::size_t{1} << 20;
constexpr std::size_t kDim = 8;
constexpr std::size_t kHidden = 64;

struct ServingEnv {
  bench::TempDir dir{"bench-serving"};
  Graph graph;
  Output ids, probability;
  std::unique_ptr<Session> session;
  std::optional<serving::Model> model;

  ServingEnv() {
    ids = ops::placeholder(graph, DType::int64, {-1, kFeatures}, "ids");
    auto wide = get_variable(graph, "wide", {kRows, 1}, zeros_initializer(),
                             fixed_size_partitioner(2), DType::float32, true);
    auto deep = get_variable(graph, "deep", {kRows, kDim}, random_normal_initializer(0, 0.05, 1),
                             fixed_size_partitioner(2), DType::float32, true);
    auto w1 =
        get_variable(graph, "hidden/w", {kFeatures * kDim, kHidden}, glorot_uniform_initializer(2));
    auto b1 = get_variable(graph, "hidden/b", {kHidden}, zeros_initializer());
    auto w2 = get_variable(graph, "logits/w", {kHidden, 1}, glorot_uniform_initializer(3));
    auto bias = get_variable(graph, "bias", {1}, zeros_initializer());
    Output wide_logits = ops::reduce_sum(ops::embedding_lookup(wide, ids), {1});
    Output deep_input = ops::reshape(ops::embedding_lookup(deep, ids),
                                     {-1, static_cast<std::int64_t>(kFeatures * kDim)});
    Output hidden = ops::relu(ops::matmul(deep_input, w1.value()) + b1.value());
    Output logits = wide_logits + ops::matmul(hidden, w2.value()) + bias.value();
    probability = ops::sigmoid(ops::reshape(logits, {-1}), "probability");
    session = std::make_unique<Session>(graph);
    session->run(global_variables_initializer(graph));
    serving::export_model(*session, dir / "ctr/1",
                          {.inputs = {{"ids", ids}}, .outputs = {{"probability", probability}}});
    model.emplace(serving::Model::load(dir / "ctr/1"));
  }

  static Tensor batch(std::size_t n, std::uint64_t seed = 7) {
    std::mt19937_64 random(seed);
    std::vector<std::int64_t> values(n * static_cast<std::size_t>(kFeatures));
    for (auto& v : values) v = static_cast<std::int64_t>(random() % kRows);
    return Tensor::from_vector(values, {n, static_cast<std::size_t>(kFeatures)});
  }
};

ServingEnv& env() {
  static ServingEnv e;
  return e;
}

// Times each call of `call`, then reports p50_us and p99_us.
template <class Call>
void timed(benchmark::State& state, Call&& call) {
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["p50_us"] = bench::percentile(seconds, 0.5) * 1e6;
  state.counters["p99_us"] = bench::percentile(seconds, 0.99) * 1e6;
}

void session_forward(benchmark::State& state) {
  ServingEnv& e = env();
  const Tensor input = ServingEnv::batch(static_cast<std::size_t>(state.range(0)));
  timed(state, [&] {
    benchmark::DoNotOptimize(e.session->run({e.probability}, {{e.ids, input}}));
  });
}

void predict(benchmark::State& state) {
  ServingEnv& e = env();
  const std::map<std::string, Tensor> input{
      {"ids", ServingEnv::batch(static_cast<std::size_t>(state.range(0)))}};
  timed(state, [&] { benchmark::DoNotOptimize(e.model->predict(input)); });
}

void predict_throughput(benchmark::State& state) {
  ServingEnv& e = env();
  const std::map<std::string, Tensor> input{
      {"ids", ServingEnv::batch(1, static_cast<std::uint64_t>(state.thread_index()))}};
  for (auto _ : state) benchmark::DoNotOptimize(e.model->predict(input));
  state.SetItemsProcessed(state.iterations());
}

// A serve process on the exported bundle, and one keep-alive HTTP connection to it.
struct RestEnv {
  bench::Child server;
  boost::asio::io_context io;
  boost::beast::tcp_stream stream{io};

  explicit RestEnv(const std::string& model_dir)
      : server({PSFLOW_BENCH_SERVE_BINARY, "--model_dir=" + model_dir, "--model_name=ctr",
                "--port=0", "--bind_address=127.0.0.1", "--threads=2"},
               env().dir / "serve.log") {
    const std::string line = server.wait_for_value("serve:", std::chrono::seconds(60));
    const auto at = line.find("127.0.0.1:") + 10;
    const auto port = static_cast<unsigned short>(std::stoi(line.substr(at)));
    stream.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    stream.socket().set_option(boost::asio::ip::tcp::no_delay(true));
  }

  std::string post(const std::string& body) {
    namespace http = boost::beast::http;
    http::request<http::string_body> request{http::verb::post, "/v1/models/ctr:predict", 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.keep_alive(true);
    request.body() = body;
    request.prepare_payload();
    http::write(stream, request);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(stream, buffer, response);
    if (response.result_int() != 200) throw std::runtime_error("serve answered " + response.body());
    return response.body();
  }
};

void rest(benchmark::State& state) {
  ServingEnv& e = env();
  RestEnv rest(e.dir / "ctr/1");
  const Tensor input = ServingEnv::batch(1);
  std::string body = "{\"instances\": [[";
  for (std::int64_t k = 0; k < kFeatures; ++k)
    body += (k ? ", " : "") + std::to_string(input.data<std::int64_t>()[k]);
  body += "]]}";
  timed(state, [&] { benchmark::DoNotOptimize(rest.post(body)); });
}

}  // namespace

BENCHMARK(session_forward)->Name("serving/session_forward")->Arg(1)->Arg(256)->UseRealTime();
BENCHMARK(predict)->Name("serving/predict")->Arg(1)->Arg(256)->UseRealTime();
BENCHMARK(predict_throughput)
    ->Name("serving/predict_throughput")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(rest)->Name("serving/rest")->Arg(1)->UseRealTime();

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  return bench::run_registered_benchmarks("bench_serving");
}
