// The C++ twin of TensorFlow 1.x's distributed trainer.py tutorial: between-graph replicated,
// asynchronous data-parallel training of a Fashion-MNIST classifier on ps and worker tasks.
//
//   trainer --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=ps --task_index=0
//   trainer --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=worker --task_index=0
//   trainer --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=worker --task_index=1
//   trainer                     # no --job_name and no TF_CONFIG: everything in this process
//
// (examples/trainer/run_local_cluster.sh --ps N --workers M starts such a cluster on loopback.)
//
// As in the tutorial: a ps task only serves (Server::join()); each worker builds the whole model
// under replica_device_setter, so the variables (and the optimizer's slots and updates, which
// are colocated with them) live on the ps tasks and the forward/backward pass runs on the
// worker, and trains with a MonitoredTrainingSession until StopAtStepHook sees the shared
// global step reach --train_steps. Every worker reads its own shard of the training set
// (worker i of n gets examples i, i+n, i+2n, ...) through a data::Dataset, TF1's tf.data:
// from_tensor_slices(images, labels).shard(n, i).shuffle(shard size).repeat().batch()
// .prefetch(), whose one-shot iterator gives the graph its batch, so a step has no feed (the
// images and labels are placeholder_with_default over the iterator's batch, so evaluation and
// serving feed their own). Updates are asynchronous, or with
// --sync_replicas synchronous through a SyncReplicasOptimizer: every global step averages the
// gradients of --replicas_to_aggregate workers (the others are backups). Worker 0 is the chief: it
// initializes (or restores from
// --checkpoint_dir) the model, prints where the variables live, logs the loss and global
// steps/sec, and at the end evaluates the 10k test images and prints exactly one line
// "test accuracy: 0.XXXX" to standard output (everything else goes to standard error).
// With --export_dir=DIR the chief first exports the classifier as a serving bundle (input
// "images" float32 [-1, 784], output "probabilities" float32 [-1, 10]; the variables fetched from
// the ps tasks through MonitoredTrainingSession::raw_session()) and logs
//   serving check: {"instances": [[...784 pixels...]]} -> [[...10 probabilities...]]
// the training session's answer for the first test image, to check a server against.
//
// Models (--model): "mlp", 784-256-128-10 with relu; "cnn", in the spirit of TF's "Deep MNIST"
// tutorial but smaller, written with psflow::layers (tf.layers): conv 5x5x16 - batch norm -
// max_pool - conv 5x5x32 - batch norm - max_pool - dense 128 with dropout - dense 10 (the
// tutorial's 32/64/1024 sizes cost 83 MFLOP per example, far too slow for 2 cores). Its
// "training" input (false unless fed; training steps feed true) switches dropout and batch
// normalization with ops::cond, and the train op runs batch norm's update ops.
// Both: softmax cross-entropy, glorot_uniform weights with fixed seeds, zero biases, accuracy
// computed in the graph (argmax, equal, cast, reduce_mean). The defaults (Adam, lr 1e-3 then 1e-4
// for the last quarter, batch 100; mlp 12000 global steps, 20 epochs between all workers, about
// 0.89-0.90 test accuracy in about a minute on 1 ps + 2 workers; cnn 8000 global steps, 13
// epochs, about 0.92 in about 3 minutes) train to the README's figures.
//
// The learning rate is piecewise constant in the global step, TF's tf.train.piecewise_constant:
// with one constant rate the final weights keep jumping around the optimum (the mlp's last-step
// test accuracy varies by +-0.5% from run to run at lr 1e-3); the last quarter at a tenth of the
// rate settles them. Every worker reads the shared global step, so all switch together.
//
// Each process limits OpenBLAS to one thread (unless OPENBLAS_NUM_THREADS is set): its
// busy-waiting threads would otherwise compete with psflow's own threads and the other tasks
// on the same cores, and halve the throughput.
//
// Flags: `trainer --help` prints them (parse_flags below; the flags of every task in
// examples/common/cluster_task.hpp and common/flags.hpp).
//
// The end of training
// -------------------
// TF's ps tasks never exit; ours do, and the library does it (MonitoredTrainingSession, "the
// end of training"): every worker leaves its loop when StopAtStepHook sees the shared global
// step reach --train_steps; the chief evaluates; each closes its session (the chief: a final
// checkpoint), which reports the worker done to the ps tasks and the chief. The last worker to
// report stops the ps tasks, so no worker ever sees a ps go away before it is done with it.
// A worker that dies and is never restarted holds the ps tasks until --orphan_timeout_s after
// the last worker left.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <psflow/psflow.hpp>  // everything, the optimizers' kernels too (the ps tasks run them)
#include <string>
#include <vector>

#include "common/cluster_task.hpp"
#include "common/dense_layer.hpp"
#include "common/explain_flag.hpp"
#include "common/export_model.hpp"
#include "common/flags.hpp"
#include "fashion_mnist.hpp"
#include "step_trace.hpp"

namespace {

using example_layers::dense;

using cluster_task::Clock;
using cluster_task::format;
using cluster_task::log;
using cluster_task::seconds_since;

// The cnn's sizes and default length (see "Models" above).
constexpr std::int64_t kCnnFilters1 = 16, kCnnFilters2 = 32, kCnnDense = 128;
constexpr std::int64_t kCnnTrainSteps = 8000;

struct TrainerFlags {
  cluster_task::TaskOptions cluster;  // the task, and the connect/recovery/shutdown deadlines
  std::string model = "mlp";
  std::int64_t train_steps = 0;  // 0: the model's default
  std::size_t batch_size = 100;
  double learning_rate = 0.001;
  double keep_prob = 0.75;  // cnn: dropout's keep probability in training
  std::string optimizer = "adam";
  double lr_decay = 0.1;
  double lr_decay_at = 0.75;
  std::string checkpoint_dir;
  std::string export_dir;
  std::int64_t save_checkpoint_steps = 0;
  bool sharded_checkpoints = false;
  bool sync_replicas = false;
  int replicas_to_aggregate = 0;  // 0: every worker
  double token_timeout_s = 60;
  std::string data_dir = fashion_mnist::kDefaultDir;
  std::uint64_t seed = 1;
  std::int64_t log_every_steps = 500;
  std::size_t eval_batch_size = 1000;
  // --trace_steps and the directory the traces go to (--summary_dir).
  step_trace::StepTracer tracer;
  explain_flag::ExplainFlag explain;  // --explain[=words|dot], --explain_dir
  // TensorBoard event files and traces (--summary_dir, --save_summaries_steps).
  std::string summary_dir;
  std::int64_t save_summaries_steps = 100;
};

// What `trainer --help` prints first (its flags, then the flags of every task, follow).
constexpr const char* kAbout =
    R"(between-graph data-parallel training of a Fashion-MNIST classifier on ps and
worker tasks (TF1's distributed trainer.py), or in one process.

  trainer --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=ps --task_index=0
  trainer --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=worker --task_index=0
  trainer                     # everything in this process
  examples/trainer/run_local_cluster.sh --ps 1 --workers 2 -- [flags]   # a local cluster)";

// ---- flags -----------------------------------------------------------------------------------

TrainerFlags parse_flags(int argc, char** argv) {
  TrainerFlags f;
  psflow::Flags flags("trainer", kAbout);
  flags.add("model", "mlp | cnn", &f.model)
      .add("train_steps",
           "global steps to train for, all workers together (0: the model's\n"
           "default, mlp 12000, cnn 8000)",
           &f.train_steps, std::int64_t{0})
      .add("batch_size", "examples per step and worker", &f.batch_size, std::size_t{1})
      .add("learning_rate", "the optimizer's learning rate", &f.learning_rate, 0.0)
      .add("optimizer", "sgd | momentum (0.9) | adagrad | adam | rmsprop", &f.optimizer)
      .add("keep_prob", "cnn: dropout's keep probability while training (1 at test), in (0, 1]",
           &f.keep_prob, 0.0)
      .add("lr_decay",
           "from global step lr_decay_at * train_steps on, train with\n"
           "learning_rate * lr_decay (1: one rate throughout)",
           &f.lr_decay, 0.0)
      .add("lr_decay_at", "see --lr_decay", &f.lr_decay_at, 0.0)
      .add("checkpoint_dir",
           "the chief restores from / saves to it; \"\" for none (the\n"
           "tutorial uses /tmp/train_log); a ps: where it keeps its\n"
           "shards with --sharded_checkpoints",
           &f.checkpoint_dir)
      .add("export_dir", "chief: export the trained classifier there (a serving bundle)",
           &f.export_dir)
      .add("save_checkpoint_steps",
           "chief: also save every that many global steps (0: only\n"
           "every 600 s, at the start and at the end)",
           &f.save_checkpoint_steps, std::int64_t{0})
      .add("sharded_checkpoints",
           "each ps saves and restores its own variables in its own\n"
           "--checkpoint_dir; the chief's holds the index and state file",
           &f.sharded_checkpoints)
      .add("sync_replicas", "synchronous training (SyncReplicasOptimizer)", &f.sync_replicas)
      .add("replicas_to_aggregate",
           "gradients averaged per global step in sync mode (0: all workers)",
           &f.replicas_to_aggregate, 0)
      .add("token_timeout_s",
           "sync mode: how long a worker waits for the chief's go-ahead\n"
           "before it fails with DeadlineExceeded",
           &f.token_timeout_s, 0.1)
      .add("data_dir", "where the Fashion-MNIST files are", &f.data_dir)
      .add("seed", "shuffling seed; worker i uses seed + i", &f.seed, std::uint64_t{0})
      .add("log_every_steps", "chief: log loss and global steps/sec every that many steps",
           &f.log_every_steps, std::int64_t{1})
      .add("eval_batch_size", "examples per evaluation run", &f.eval_batch_size, std::size_t{1})
      .add("summary_dir",
           "chief: write TensorBoard event files there (scalars loss,\n"
           "accuracy, learning_rate, global_step/sec and the graph);\n"
           "\"\" for none. Open with `tensorboard --logdir DIR`.",
           &f.summary_dir)
      .add("save_summaries_steps", "with --summary_dir: write the scalars every that many steps",
           &f.save_summaries_steps, std::int64_t{1})
      .add("trace_steps",
           "e.g. 100,200: the chief traces its first step at or after\n"
           "each of these global steps on every task and writes\n"
           "trace_step_<N>.json (Chrome trace) into --summary_dir (or\n"
           "the current directory when it is \"\")",
           "\"\"", "a list of global steps >= 1, like 100,200", false,
           [&f](const std::string& value) { return f.tracer.set_steps(value); });
  f.explain.add_to(flags, "chief", "trainer");
  f.cluster = cluster_task::parse_task_options(flags, argc, argv);
  if (f.model != "mlp" && f.model != "cnn")
    example::fail("trainer", "--model='" + f.model + "': choose mlp or cnn");
  if (f.train_steps == 0) f.train_steps = f.model == "cnn" ? kCnnTrainSteps : 12000;
  if (!(f.keep_prob > 0 && f.keep_prob <= 1))
    example::fail("trainer", "--keep_prob=" + std::to_string(f.keep_prob) +
                                 ": must be in (0, 1] (1: no dropout)");
  if (f.optimizer != "sgd" && f.optimizer != "momentum" && f.optimizer != "adagrad" &&
      f.optimizer != "adam" && f.optimizer != "rmsprop")
    example::fail("trainer", "--optimizer='" + f.optimizer +
                                 "': choose sgd, momentum, adagrad, adam or rmsprop");
  const int workers = static_cast<int>(f.cluster.num_workers());
  if (f.replicas_to_aggregate == 0) f.replicas_to_aggregate = workers;
  if (f.sync_replicas && f.replicas_to_aggregate > workers)
    example::fail(
        "trainer",
        "--replicas_to_aggregate=" + std::to_string(f.replicas_to_aggregate) +
            " is more than the " + std::to_string(workers) +
            " worker(s): every global step would wait forever; pass at most the number of "
            "workers");
  return f;
}

// ---- the model -------------------------------------------------------------------------------

struct Model {
  // float32 [-1,784] and [-1,10]: the training iterator's batch unless fed in its place.
  psflow::Output images;
  psflow::Output labels;
  std::optional<psflow::data::Iterator> input;
  psflow::Output training;  // cnn: true in training steps (dropout, batch norm); empty for mlp
  psflow::Output logits;
  psflow::Output probabilities;  // softmax(logits): what is served
  psflow::Output loss;
  psflow::Output accuracy;       // the batch's fraction of correct predictions, in the graph
  psflow::Output learning_rate;  // piecewise constant in the global step
  psflow::Variable global_step;
  psflow::Operation train_op;
  std::unique_ptr<psflow::train::Optimizer> optimizer;
  std::unique_ptr<psflow::train::SyncReplicasOptimizer> sync;  // --sync_replicas
  std::int64_t decay_step = -1;                                // -1: one learning rate throughout

  // What an evaluation run feeds: the batch, in place of the iterator's.
  psflow::FeedMap feeds(const fashion_mnist::Batch& batch) const {
    return {{images, batch.images}, {labels, batch.labels}};
  }
  // What a training step feeds: training = true (false unless fed), nothing else.
  psflow::FeedMap training_feeds() const {
    if (!training.valid()) return {};
    return {{training, psflow::Tensor(true)}};
  }
};

std::unique_ptr<psflow::train::Optimizer> make_optimizer(const TrainerFlags& flags,
                                                         psflow::Output lr) {
  using namespace psflow::train;
  if (flags.optimizer == "sgd") return std::make_unique<GradientDescentOptimizer>(lr);
  if (flags.optimizer == "momentum") return std::make_unique<MomentumOptimizer>(lr, 0.9);
  if (flags.optimizer == "adagrad") return std::make_unique<AdagradOptimizer>(lr);
  if (flags.optimizer == "rmsprop") return std::make_unique<RMSPropOptimizer>(lr);
  return std::make_unique<AdamOptimizer>(lr);
}

// MLP 784-256-128-10.
psflow::Output mlp_logits(psflow::Graph& graph, psflow::Output images) {
  psflow::Output hidden1 = dense(graph, "hidden1", images, 784, 256, 1, true);
  psflow::Output hidden2 = dense(graph, "hidden2", hidden1, 256, 128, 2, true);
  return dense(graph, "softmax_linear", hidden2, 128, 10, 3, false);
}

// One 5x5 SAME convolution, batch normalization, relu, then 2x2 max pooling: halves height
// and width. The convolution needs no bias: batch normalization's beta is one.
psflow::Output conv_block(psflow::Output x, std::int64_t filters, std::uint64_t seed,
                          psflow::Output training) {
  namespace layers = psflow::layers;
  x = layers::conv2d(x, filters, {5, 5}, {1, 1}, "same", {},
                     psflow::glorot_uniform_initializer(seed));
  x = psflow::ops::relu(layers::batch_normalization(x, training));
  return layers::max_pooling2d(x, {2, 2}, {2, 2}, "same");
}

// TF's "Deep MNIST" shape, smaller, written with tf.layers: conv 5x5x16 - batch norm - pool -
// conv 5x5x32 - batch norm - pool - dense 128 with dropout - dense 10 (about 6 MFLOP per example
// forward, against Deep MNIST's 83 at 32/64/1024).
psflow::Output cnn_logits(psflow::Output images, psflow::Output training, double keep_prob) {
  namespace layers = psflow::layers;
  psflow::Output x = psflow::ops::reshape(images, {-1, 28, 28, 1});
  x = conv_block(x, kCnnFilters1, 1, training);
  x = conv_block(x, kCnnFilters2, 2, training);
  x = layers::dense(
      layers::flatten(x), kCnnDense, [](psflow::Output v) { return psflow::ops::relu(v); },
      psflow::glorot_uniform_initializer(3));
  x = layers::dropout(x, 1 - keep_prob, training);
  return layers::dense(x, 10, {}, psflow::glorot_uniform_initializer(4));
}

Model build_model(psflow::Graph& graph, const TrainerFlags& flags,
                  const psflow::data::Dataset& training_input) {
  Model m;
  {
    std::optional<psflow::ScopeGuard> placement;
    if (flags.cluster.distributed) {
      placement.emplace(graph.device(psflow::train::replica_device_setter(
          {.worker_device = "/job:worker/task:" + std::to_string(flags.cluster.index()),
           .cluster = flags.cluster.task.cluster,
           .ps_strategy = psflow::train::greedy_load_balancing_strategy(flags.cluster.num_ps())})));
    }
    m.global_step = psflow::train::get_or_create_global_step(graph);
    m.input = training_input.make_one_shot_iterator(graph);  // on this worker
    const std::vector<psflow::Output> batch = m.input->get_next();
    m.images = psflow::ops::placeholder_with_default(batch[0], {-1, 784}, "images");
    m.labels = psflow::ops::placeholder_with_default(batch[1], {-1, 10}, "labels");
    if (flags.model == "cnn") {
      m.training = psflow::ops::placeholder_with_default(
          psflow::ops::constant(graph, psflow::Tensor(false)), {}, "training");
      m.logits = cnn_logits(m.images, m.training, flags.keep_prob);
    } else {
      m.logits = mlp_logits(graph, m.images);
    }
    m.probabilities = psflow::ops::softmax(m.logits, "probabilities");
    m.loss = psflow::ops::reduce_mean(
        psflow::ops::softmax_cross_entropy_with_logits(m.labels, m.logits), {}, false, "loss");
    {
      auto scope = graph.name_scope("accuracy");
      psflow::Output correct =
          psflow::ops::equal(psflow::ops::argmax(m.logits, 1), psflow::ops::argmax(m.labels, 1));
      m.accuracy = psflow::ops::reduce_mean(psflow::ops::cast(correct, psflow::DType::float32));
    }
    // The learning rate drops to learning_rate * lr_decay after global step decay_step, like
    // TF's tf.train.piecewise_constant(global_step, [decay_step], [lr, lr * lr_decay]).
    const auto decay_step =
        static_cast<std::int64_t>(flags.lr_decay_at * static_cast<double>(flags.train_steps));
    if (flags.lr_decay != 1 && decay_step < flags.train_steps) m.decay_step = decay_step;
    m.learning_rate =
        m.decay_step >= 0
            ? psflow::train::piecewise_constant(
                  m.global_step, {m.decay_step},
                  {flags.learning_rate, flags.learning_rate * flags.lr_decay})
            : psflow::ops::constant(graph, psflow::Tensor(static_cast<float>(flags.learning_rate)),
                                    "learning_rate");
    m.optimizer = make_optimizer(flags, m.learning_rate);
    if (flags.sync_replicas) {
      const int workers = static_cast<int>(flags.cluster.num_workers());
      m.sync = std::make_unique<psflow::train::SyncReplicasOptimizer>(
          *m.optimizer, flags.replicas_to_aggregate, workers,
          psflow::train::SyncReplicasOptions{
              static_cast<std::int64_t>(flags.token_timeout_s * 1000)});
      auto after_updates = graph.control_dependencies(
          psflow::get_collection_ops(graph, psflow::kUpdateOps));  // batch norm's statistics
      m.train_op = m.sync->minimize(m.loss, m.global_step);
    } else {
      auto after_updates =
          graph.control_dependencies(psflow::get_collection_ops(graph, psflow::kUpdateOps));
      m.train_op = m.optimizer->minimize(m.loss, m.global_step);
    }
  }
  return m;
}

// Where the variables live: one line per ps task (count and bytes), from each variable's
// requested device and its shape and dtype.
void print_placement(const psflow::Graph& graph, const TrainerFlags& flags) {
  struct Load {
    std::size_t count = 0, bytes = 0;
    std::string names;
  };
  std::map<std::string, Load> by_device;
  std::size_t total = 0;
  for (const auto& v : psflow::global_variables(graph)) {
    std::string where = v.device().empty() ? "(this process)" : v.device();
    if (flags.cluster.distributed) {
      const psflow::DeviceSpec spec = psflow::DeviceSpec::parse(v.device());
      if (spec.job && spec.task)
        where = *spec.job + std::to_string(*spec.task) + " (" + v.device() + ")";
    }
    Load& load = by_device[where];
    const std::size_t bytes = psflow::num_elements(v.shape()) * psflow::dtype_size(v.dtype());
    ++load.count;
    load.bytes += bytes;
    total += bytes;
    load.names += (load.names.empty() ? "" : ", ") + v.name();
  }
  if (flags.cluster.distributed)
    for (std::size_t t = 0; t < flags.cluster.num_ps(); ++t) {
      const std::string device = "/job:ps/task:" + std::to_string(t);
      by_device.try_emplace("ps" + std::to_string(t) + " (" + device + ")");
    }
  log(format("%zu bytes of variables in %zu places:", total, by_device.size()));
  for (const auto& [where, load] : by_device) {
    log(format("  %s: %zu variables, %zu bytes", where.c_str(), load.count, load.bytes));
    if (!load.names.empty()) log("      " + load.names);
  }
}

// ---- training --------------------------------------------------------------------------------

// The test set's accuracy, from the graph's per-batch accuracy weighted by batch size.
double evaluate(psflow::Session& sess, const Model& m, const fashion_mnist::Dataset& test,
                std::size_t batch_size) {
  double correct = 0;
  for (std::size_t begin = 0; begin < test.size(); begin += batch_size) {
    const std::size_t count = std::min(batch_size, test.size() - begin);
    fashion_mnist::Batch batch = fashion_mnist::slice(test, begin, count);
    correct +=
        static_cast<double>(count) * sess.run({m.accuracy}, m.feeds(batch))[0].scalar<float>();
  }
  return correct / static_cast<double>(test.size());
}

// The chief's export (--export_dir), then the check line on standard error.
void export_for_serving(psflow::Session& sess, const Model& m, const fashion_mnist::Dataset& test,
                        const std::string& dir) {
  const fashion_mnist::Batch first = fashion_mnist::slice(test, 0, 1);
  const psflow::FeedMap check_feeds{{m.images, first.images}};
  const psflow::Tensor p = example::export_model(
      sess, dir,
      {.inputs = {{"images", m.images}}, .outputs = {{"probabilities", m.probabilities}}},
      m.probabilities, check_feeds);
  auto list = [](const psflow::Tensor& t) {
    std::string out;
    for (float v : t.values<float>())
      out += (out.empty() ? "" : ", ") + format("%.9g", static_cast<double>(v));
    return "[[" + out + "]]";
  };
  log(format("exported the model to %s: serve --model_dir=%s --model_name=trainer", dir.c_str(),
             dir.c_str()));
  std::fprintf(stderr, "serving check: {\"instances\": %s} -> %s\n", list(first.images).c_str(),
               list(p).c_str());
}

int run_worker(const TrainerFlags& flags, psflow::Server* server) {
  const bool chief = flags.cluster.chief();
  const std::size_t num_workers = flags.cluster.num_workers();
  const std::size_t index = flags.cluster.index();
  const std::string target = server ? server->target() : "";

  // Data first: a missing or corrupt file fails before we join the cluster.
  const auto load_started = Clock::now();
  const fashion_mnist::Dataset train =
      fashion_mnist::load(flags.data_dir, fashion_mnist::Split::train);
  std::optional<fashion_mnist::Dataset> test;
  if (chief) test = fashion_mnist::load(flags.data_dir, fashion_mnist::Split::test);
  // This worker's input: its shard, reshuffled every epoch, in batches that may span two epochs
  // (every batch full), made ahead of the steps on a background thread.
  const std::size_t shard_size = (train.size() - index + num_workers - 1) / num_workers;
  const psflow::data::Dataset training_input =
      psflow::data::Dataset::from_tensor_slices({train.images, train.labels})
          .shard(num_workers, index)
          .shuffle(shard_size, flags.seed + index)
          .repeat()
          .batch(flags.batch_size)
          .prefetch(2);
  log(format(
      "worker %zu of %zu: %zu training examples (examples %zu, %zu, %zu, ...)%s, loaded in %.2f s",
      index, num_workers, shard_size, index, index + num_workers, index + 2 * num_workers,
      chief ? ", 10000 test examples" : "", seconds_since(load_started)));

  psflow::Graph graph;
  Model m = build_model(graph, flags, training_input);
  // TensorBoard: the chief's MonitoredTrainingSession writes these scalars every
  // --save_summaries_steps global steps into --summary_dir, with global_step/sec and the graph.
  if (!flags.summary_dir.empty()) {
    psflow::summary::scalar("loss", m.loss);
    psflow::summary::scalar("accuracy", m.accuracy);
    psflow::summary::scalar("learning_rate", m.learning_rate);
  }
  if (chief) {
    print_placement(graph, flags);
    std::string schedule = format("%s model, %s, learning rate %g", flags.model.c_str(),
                                  flags.optimizer.c_str(), flags.learning_rate);
    if (m.decay_step >= 0)
      schedule += format(", %g from global step %lld", flags.learning_rate * flags.lr_decay,
                         static_cast<long long>(m.decay_step));
    if (flags.sync_replicas)
      schedule += format("; synchronous: each global step averages %d workers' gradients",
                         flags.replicas_to_aggregate);
    log(format("training %lld global steps, batch %zu per worker: %s",
               static_cast<long long>(flags.train_steps), flags.batch_size, schedule.c_str()));
  }

  // Trains until the global step reaches --train_steps (the chief then evaluates); returns the
  // session, still open.
  auto train_to_the_end = [&] {
    psflow::train::MonitoredTrainingSessionOptions options;
    options.master = target;
    options.is_chief = chief;
    options.checkpoint_dir = flags.checkpoint_dir;
    options.sharded_checkpoints = flags.sharded_checkpoints;
    options.hooks = {psflow::train::StopAtStepHook(flags.train_steps)};
    if (m.sync) options.hooks.push_back(m.sync->make_session_run_hook(chief));
    if (flags.save_checkpoint_steps > 0)
      options.save_checkpoint_steps = flags.save_checkpoint_steps;
    options.log_step_count_steps = 0;  // we log global steps/sec with the loss
    // TensorBoard event files ("": none, even with --checkpoint_dir).
    options.summary_dir = flags.summary_dir;
    options.save_summaries_steps = flags.save_summaries_steps;
    if (!flags.summary_dir.empty()) options.log_step_count_steps = flags.save_summaries_steps;
    options.recovery_deadline_secs = flags.cluster.recovery_deadline_s;
    options.startup_timeout_secs = flags.cluster.task.startup_timeout_s;
    auto mon_sess = std::make_unique<psflow::train::MonitoredTrainingSession>(graph, options);

    const auto started = Clock::now();
    auto window_started = started;
    // The global step so far (more than 0 after a restore, or when joining late).
    std::int64_t step =
        mon_sess->raw_session().run({m.global_step.value()})[0].scalar<std::int64_t>();
    const std::int64_t first_step = step;
    log(format("worker %zu: starting at global step %lld", index, static_cast<long long>(step)));
    // --progress: the global step's way to --train_steps (on a terminal, one live line).
    auto progress = cluster_task::make_progress(flags.cluster, flags.train_steps);
    if (progress) progress->update(step);
    std::int64_t window_step = step, local_steps = 0;
    std::int64_t next_log = (step / flags.log_every_steps + 1) * flags.log_every_steps;
    double loss = 0, accuracy = 0, learning_rate = 0;
    step_trace::StepTracer tracer = flags.tracer;
    tracer.set_directory(flags.summary_dir);
    while (!mon_sess->should_stop()) {
      if (chief && local_steps == 0)  // --explain: the training step, across the processes
        flags.explain.run(mon_sess->raw_session(), "trainer",
                          {m.loss, m.accuracy, m.learning_rate, m.global_step.value()},
                          m.training_feeds(), {m.train_op}, std::cerr);
      auto values = mon_sess->run(tracer.options(chief, step),
                                  {m.loss, m.accuracy, m.learning_rate, m.global_step.value()},
                                  m.training_feeds(), {m.train_op}, tracer.metadata());
      loss = values[0].scalar<float>();
      accuracy = values[1].scalar<float>();
      learning_rate = values[2].scalar<float>();
      step = values[3].scalar<std::int64_t>() + 1;  // read before or after this step's increment
      ++local_steps;
      if (progress) progress->update(step, loss);
      tracer.write_if_traced(step);
      if (chief && step >= next_log) {
        log(format("global step %lld: loss %.4f, batch accuracy %.2f, learning rate %g, %.1f "
                   "global steps/s (epoch %zu of this worker's shard)",
                   static_cast<long long>(step), loss, accuracy, learning_rate,
                   static_cast<double>(step - window_step) / seconds_since(window_started),
                   static_cast<std::size_t>(m.input->stats().elements * flags.batch_size /
                                            shard_size)),
            progress.get());
        window_started = Clock::now();
        window_step = step;
        next_log = (step / flags.log_every_steps + 1) * flags.log_every_steps;
      }
    }
    if (progress) progress->finish();
    const double elapsed = seconds_since(started);
    log(format(
        "worker %zu done: global step %lld after %.1f s, %.1f global steps/s; "
        "this worker ran %lld steps (%.1f/s), last loss %.4f",
        index, static_cast<long long>(step), elapsed,
        static_cast<double>(step - first_step) / elapsed, static_cast<long long>(local_steps),
        static_cast<double>(local_steps) / elapsed, loss));
    cluster_task::log_input_wait(*m.input, elapsed);

    if (chief) {
      if (!flags.export_dir.empty())
        export_for_serving(mon_sess->raw_session(), m, *test, flags.export_dir);
      const auto eval_started = Clock::now();
      const double accuracy = evaluate(mon_sess->raw_session(), m, *test, flags.eval_batch_size);
      std::printf("test accuracy: %.4f\n", accuracy);
      std::fflush(stdout);
      log(format("evaluated %zu test examples in %.2f s", test->size(),
                 seconds_since(eval_started)));
    }
    return mon_sess;
  };
  // Closing it (the chief: a final checkpoint) reports this worker done; the last worker to
  // do so stops the ps tasks.
  train_to_the_end()->close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cluster_task::program_name() = "trainer";
  std::optional<TrainerFlags> flags;
  return cluster_task::run_task(
      [&] {
        flags = parse_flags(argc, argv);
        return flags->cluster;
      },
      [&](const cluster_task::TaskOptions&, psflow::Server* server) {
        return run_worker(*flags, server);
      });
}
