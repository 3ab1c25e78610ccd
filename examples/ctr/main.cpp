// A click-through-rate trainer: TF1's wide-and-deep model on partitioned embedding tables, the
// model parameter servers exist for. Tasks and flags as examples/trainer's:
//
//   ctr --ps_hosts=h0:2222,h1:2222 --worker_hosts=h2:2222,h3:2222 --job_name=ps --task_index=0
//   ctr ... --job_name=worker --task_index=0
//   ctr                           # no --job_name: everything in this process
//
// (examples/ctr/run_local_cluster.sh --ps 2 --workers 2 starts such a cluster on loopback.)
//
// Model (--data=clicks, the default): each example is F + C hashed feature ids (click_log.hpp:
// 8 categorical fields and 3 crosses) into tables of --table_rows rows (default 2^22), both
// partitioned over every ps task (fixed_size_partitioner(number of ps tasks), so
// replica_device_setter puts one shard of each on each ps):
//   wide   "wide" [rows, 1]: the sum of the example's rows, a logistic regression on hashed
//          features, trained with FtrlOptimizer (l1 drives rare features' weights to 0);
//   deep   "deep" [rows, --dim]: the example's F + C rows concatenated, then a relu layer of
//          --hidden units and a linear unit, trained with AdagradOptimizer;
//   logit = wide + deep + bias, loss = mean sigmoid cross-entropy. One backward pass; the
//   gradients of "wide" go to FTRL, the others to Adagrad (TF's DNNLinearCombinedClassifier).
// Only the rows of a batch's distinct ids travel between worker and ps, both ways.
//
// --table=dynamic: both tables are dynamic embedding tables (psflow::get_dynamic_embedding, one
// shard per ps task) keyed by the raw 64-bit feature hashes, with no hashing into a fixed range
// and so no collisions; rows are made on an id's --min_count-th sighting and evicted over
// --capacity rows per shard (--eviction) or after --ttl_steps steps without an update.
// --new_ids_per_step=N adds a "session" feature that brings about N ids never seen before into
// each worker's batch (click_log.hpp's drift), so the id space keeps growing.
//
// At the end the chief prints the test AUC and log-loss of --test_examples held-out examples,
// beside the best achievable ones (the true model's: click_log.hpp), the AUC last, from
// metrics::auc (TF1's tf.metrics.auc, 200 thresholds), after the exact AUC of the same scores:
//   test log-loss: 0.XXXX (best achievable 0.XXXX)
//   test auc (exact): 0.XXXX
//   test auc: 0.XXXX (best achievable 0.XXXX)
//
// --write_data=DIR: writes the click log to DIR as gzip-compressed TFRecord files of
// tf.train.Example (click_files.hpp: the categorical fields as strings such as "user:12345"),
// --train_steps * --batch_size training examples in 8 files and --test_examples held-out ones,
// then exits. --train_data=DIR trains from such files instead of generating examples: each
// worker reads its own files through a data::Dataset (repeated, shuffled, batched, parsed and
// prefetched) pulled by the graph's iterator, so a step has no feed; the graph hashes the
// strings (and the crosses, joined) with string_to_hash_bucket_fast into the tables (--table=
// dynamic: into 2^63 - 1 buckets, which the dynamic tables take as raw ids). The chief
// evaluates on the held-out file and states the best achievable AUC from its true
// probabilities. The training examples' input waits are logged at the end of each worker:
//   input: N batches, waited X s of Y s of steps (Z%)
//
// --data=fashion_mnist: the images as bags of hashed pixel and pixel-pair features
// (sparse_fashion_mnist.hpp), 10 classes: the wide part sums [rows, 10] rows
// (embedding_lookup_sparse, combiner "sum"), the deep part averages [rows, dim] rows (combiner
// "sqrtn") into a relu layer and 10 linear units; softmax cross-entropy. Prints
//   test accuracy: 0.XXXX
//
// --export_dir=DIR: before evaluating, the chief exports the trained model as a serving bundle
// (psflow::serving::export_model through MonitoredTrainingSession::raw_session(), the variables
// fetched from the ps tasks), then prints a request of the first test examples and the training
// session's answers, to check a server against:
//   exported the model to DIR: serve --model_dir=DIR --model_name=ctr
//   serving check: {"instances": [[...], ...]} -> [0.XXXXXXXXX, ...]
// clicks: input "ids" (int64 [-1, features]), output "probability" (float32 [-1]);
// fashion_mnist: inputs "sp_indices", "sp_ids", "sp_shape" (the SparseTensor's parts), output
// "probabilities" (float32 [-1, 10]).
//
// Flags: `ctr --help` prints them (add_flags below; the flags of every task in
// examples/common/cluster_task.hpp and common/flags.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <psflow/psflow.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include "common/cluster_task.hpp"
#include "common/dense_layer.hpp"
#include "common/explain_flag.hpp"
#include "common/export_model.hpp"
#include "common/flags.hpp"
#include "ctr/click_files.hpp"
#include "ctr/click_log.hpp"
#include "ctr/metrics.hpp"
#include "ctr/sparse_fashion_mnist.hpp"

// What `ctr --help` prints first (its flags, then the flags of every task, follow).
constexpr const char* kAbout =
    R"(a wide-and-deep click-through-rate model whose hashed embedding tables are split over
the ps tasks and updated sparsely (FTRL for the wide part, Adagrad for the deep part).

  examples/ctr/run_local_cluster.sh --ps 2 --workers 2 -- [flags]   # a local cluster
  ctr [flags]                                                       # in one process)";

namespace {

using example_layers::dense;

using cluster_task::format;
using cluster_task::log;
using cluster_task::seconds_since;
using Clock = cluster_task::Clock;
namespace ops = psflow::ops;

struct CtrFlags {
  std::string data = "clicks";
  std::string table = "fixed";
  std::size_t table_rows = std::size_t{1} << 22;
  std::int64_t new_ids_per_step = 0;
  std::int64_t min_count = 2;
  std::size_t capacity = std::size_t{1} << 18;
  std::string eviction = "lfu";
  std::int64_t ttl_steps = 0;
  std::int64_t eviction_interval_steps = 500;
  std::size_t dim = 8;
  std::size_t hidden = 64;
  std::int64_t train_steps = 6000;
  std::size_t batch_size = 256;
  double wide_learning_rate = 0.5;
  double l1 = 0;
  double l2 = 0;
  double deep_learning_rate = 0.2;
  std::size_t test_examples = 100000;
  std::size_t eval_batch_size = 5000;
  std::string data_dir = fashion_mnist::kDefaultDir;
  std::string checkpoint_dir;
  std::string export_dir;
  std::string write_data;
  std::string train_data;
  std::uint64_t seed = 1;
  std::int64_t log_every_steps = 500;
  explain_flag::ExplainFlag explain;  // --explain[=words|dot], --explain_dir
};

// Registers the flags of CtrFlags with `flags`.
void add_flags(psflow::Flags& flags, CtrFlags& f) {
  flags
      .add("data", "clicks | fashion_mnist", f.data, "clicks or fashion_mnist", false,
           [&f](const std::string& value) {
             if (value != "clicks" && value != "fashion_mnist") return false;
             f.data = value;
             return true;
           })
      .add("table", "fixed | dynamic", f.table,
           "fixed: hashed ids into tables of --table_rows rows; dynamic: raw 64-bit ids into "
           "dynamic embedding tables",
           false,
           [&f](const std::string& value) {
             if (value != "fixed" && value != "dynamic") return false;
             f.table = value;
             return true;
           })
      .add("table_rows", "rows of each hashed table (--table=fixed)", &f.table_rows, std::size_t{1})
      .add("new_ids_per_step",
           "clicks: about this many never-seen ids in each batch (a drifting session feature)",
           &f.new_ids_per_step, std::int64_t{0})
      .add("min_count", "dynamic: sightings before an id gets a row", &f.min_count, std::int64_t{1})
      .add("capacity", "dynamic: rows per shard before eviction (0: unbounded)", &f.capacity,
           std::size_t{0})
      .add("eviction", "lru | lfu", f.eviction, "dynamic: which rows go over capacity", false,
           [&f](const std::string& value) {
             if (value != "lru" && value != "lfu") return false;
             f.eviction = value;
             return true;
           })
      .add("ttl_steps", "dynamic: evict rows not updated for that many steps (0: off)",
           &f.ttl_steps, std::int64_t{0})
      .add("eviction_interval_steps", "dynamic: global steps between eviction passes",
           &f.eviction_interval_steps, std::int64_t{1})
      .add("dim", "floats per row of the deep table", &f.dim, std::size_t{1})
      .add("hidden", "relu units of the deep part", &f.hidden, std::size_t{1})
      .add("train_steps", "global steps, all workers together", &f.train_steps, std::int64_t{1})
      .add("batch_size", "examples per step and worker", &f.batch_size, std::size_t{1})
      .add("wide_learning_rate", "FTRL's learning rate", &f.wide_learning_rate, 1e-12)
      .add("l1", "FTRL's l1 regularization", &f.l1, 0.0)
      .add("l2", "FTRL's l2 regularization", &f.l2, 0.0)
      .add("deep_learning_rate", "Adagrad's learning rate", &f.deep_learning_rate, 1e-12)
      .add("test_examples", "clicks: held-out examples evaluated by the chief", &f.test_examples,
           std::size_t{1})
      .add("eval_batch_size", "examples per evaluation run", &f.eval_batch_size, std::size_t{1})
      .add("data_dir", "fashion_mnist: where its files are", &f.data_dir)
      .add("checkpoint_dir", "the chief restores from / saves to it", &f.checkpoint_dir)
      .add("export_dir", "chief: export the trained model there (a serving bundle)", &f.export_dir)
      .add("write_data",
           "write the click log to this new directory as gzip TFRecord files of tf.Example "
           "(enough for --train_steps, and --test_examples held out), then exit",
           &f.write_data)
      .add("train_data", "train from the files --write_data wrote there (each worker its share)",
           &f.train_data)
      .add("seed", "the click log's seed (its true model), and the deep init", &f.seed,
           std::uint64_t{0})
      .add("log_every_steps", "chief: log the loss every that many steps", &f.log_every_steps,
           std::int64_t{1});
  f.explain.add_to(flags, "chief", "ctr");
}

// ---- the model -------------------------------------------------------------------------------

// The wide and deep tables: partitioned variables of hashed ids, or dynamic tables of raw ids.
struct Tables {
  std::variant<psflow::PartitionedVariable, psflow::DynamicEmbedding> wide, deep;
  std::vector<psflow::DynamicEmbedding> dynamic;  // for the eviction hook and the sizes
  std::vector<psflow::Variable> wide_shards() const {
    if (const auto* table = std::get_if<psflow::DynamicEmbedding>(&wide)) return table->shards();
    return std::get<psflow::PartitionedVariable>(wide).partitions();
  }
};

Tables make_tables(psflow::Graph& graph, const CtrFlags& flags, std::size_t shards,
                   std::size_t classes) {
  const auto deep_init = psflow::random_normal_initializer(0, 0.05, flags.seed);
  if (flags.table == "fixed")
    return {
        psflow::get_variable(graph, "wide", {flags.table_rows, classes},
                             psflow::zeros_initializer(), psflow::fixed_size_partitioner(shards)),
        psflow::get_variable(graph, "deep", {flags.table_rows, flags.dim}, deep_init,
                             psflow::fixed_size_partitioner(shards)),
        {}};
  const psflow::DynamicEmbeddingOptions options{.num_shards = shards,
                                                .min_count = flags.min_count,
                                                .capacity = flags.capacity,
                                                .eviction = flags.eviction,
                                                .ttl_steps = flags.ttl_steps,
                                                .seed = flags.seed};
  auto wide = psflow::get_dynamic_embedding(graph, "wide", static_cast<std::int64_t>(classes),
                                            psflow::zeros_initializer(), options);
  auto deep = psflow::get_dynamic_embedding(graph, "deep", static_cast<std::int64_t>(flags.dim),
                                            deep_init, options);
  return {wide, deep, {wide, deep}};
}

struct Model {
  // clicks: ids [-1, features] and labels [-1]; fashion_mnist: a SparseTensor of ids and one-hot
  // labels [-1, 10]. --train_data: the fields as strings [-1, F] (ids are their hashes), fed
  // by the training iterator unless a value is fed in their place (evaluation, serving).
  psflow::Output ids, labels, fields;
  std::optional<psflow::data::Iterator> input;
  psflow::SparseTensor sparse_ids;
  psflow::Output logits, loss;
  // clicks: sigmoid(logits) [-1]; fashion_mnist: softmax(logits) [-1, 10]. What is served.
  psflow::Output probability;
  // clicks: the test AUC, TF1's tf.metrics.auc (its counts are local variables of this worker).
  psflow::Output auc;
  psflow::Operation auc_update;
  psflow::Variable global_step;
  psflow::Operation train_op;
  std::unique_ptr<psflow::train::FtrlOptimizer> wide_optimizer;
  std::unique_ptr<psflow::train::AdagradOptimizer> deep_optimizer;
  std::vector<psflow::DynamicEmbedding> dynamic_tables;
};

Model build_model(psflow::Graph& graph, const CtrFlags& flags,
                  const cluster_task::TaskOptions& task, const ctr::ClickLogConfig& clicks,
                  std::size_t features) {
  Model m;
  std::optional<psflow::ScopeGuard> placement;
  if (task.distributed)
    placement.emplace(graph.device(psflow::train::replica_device_setter(
        {.worker_device = "/job:worker/task:" + std::to_string(task.index()),
         .cluster = task.task.cluster})));
  const std::size_t shards = std::max<std::size_t>(1, task.num_ps());
  const bool images = flags.data == "fashion_mnist";
  const std::size_t classes = images ? 10 : 1;
  m.global_step = psflow::train::get_or_create_global_step(graph);
  Tables tables = make_tables(graph, flags, shards, classes);
  auto bias = psflow::get_variable(graph, "bias", {classes}, psflow::zeros_initializer());
  psflow::Output wide_logits, deep_input;
  std::size_t deep_width = 0;
  std::visit(
      [&](const auto& wide, const auto& deep) {
        if (images) {
          m.sparse_ids = {ops::placeholder(graph, psflow::DType::int64, {-1, 2}, "sp_indices"),
                          ops::placeholder(graph, psflow::DType::int64, {-1}, "sp_ids"),
                          ops::placeholder(graph, psflow::DType::int64, {2}, "sp_shape")};
          m.labels = ops::placeholder(graph, psflow::DType::float32, {-1, 10}, "labels");
          wide_logits = ops::embedding_lookup_sparse(wide, m.sparse_ids, "sum");
          deep_input = ops::embedding_lookup_sparse(deep, m.sparse_ids, "sqrtn");
          deep_width = flags.dim;
        } else {
          const auto f = static_cast<std::int64_t>(features);
          if (!flags.train_data.empty()) {
            m.input = ctr::training_pipeline(flags.train_data, task.num_workers(), task.index(),
                                             flags.batch_size, flags.seed)
                          .make_one_shot_iterator(graph);
            const std::vector<psflow::Output> next = m.input->get_next();
            const auto fields = static_cast<std::int64_t>(clicks.vocabulary_sizes.size());
            m.fields = ops::placeholder_with_default(next[0], {-1, fields}, "fields");
            m.labels = ops::placeholder_with_default(next[1], {-1}, "labels");
            const std::int64_t buckets = flags.table == "fixed"
                                             ? static_cast<std::int64_t>(flags.table_rows)
                                             : std::numeric_limits<std::int64_t>::max();
            m.ids = ctr::hashed_feature_ids(m.fields, clicks, buckets);
          } else {
            m.ids = ops::placeholder(graph, psflow::DType::int64, {-1, f}, "ids");
            m.labels = ops::placeholder(graph, psflow::DType::float32, {-1}, "labels");
          }
          wide_logits = ops::reduce_sum(ops::embedding_lookup(wide, m.ids), {1});  // [-1, 1]
          deep_width = features * flags.dim;
          deep_input = ops::reshape(ops::embedding_lookup(deep, m.ids),
                                    {-1, static_cast<std::int64_t>(deep_width)});
        }
      },
      tables.wide, tables.deep);
  psflow::Output hidden = dense(graph, "hidden", deep_input, deep_width, flags.hidden, 2, true);
  psflow::Output deep_logits = dense(graph, "logits", hidden, flags.hidden, classes, 3, false);
  m.logits = wide_logits + deep_logits + bias.value();
  if (images) {
    m.loss = ops::reduce_mean(ops::softmax_cross_entropy_with_logits(m.labels, m.logits), {}, false,
                              "loss");
  } else {
    m.logits = ops::reshape(m.logits, {-1});
    m.loss = ops::reduce_mean(ops::sigmoid_cross_entropy_with_logits(m.labels, m.logits), {}, false,
                              "loss");
  }
  // One backward pass; the wide table's gradients to FTRL, every other one to Adagrad.
  m.wide_optimizer = std::make_unique<psflow::train::FtrlOptimizer>(flags.wide_learning_rate, -0.5,
                                                                    0.1, flags.l1, flags.l2);
  m.deep_optimizer = std::make_unique<psflow::train::AdagradOptimizer>(flags.deep_learning_rate);
  psflow::train::GradsAndVars wide_grads, deep_grads;
  const std::vector<psflow::Variable> wide_parts = tables.wide_shards();
  for (auto& gv : m.deep_optimizer->compute_gradients(m.loss)) {
    const bool is_wide =
        std::find(wide_parts.begin(), wide_parts.end(), gv.second) != wide_parts.end();
    (is_wide ? wide_grads : deep_grads).push_back(gv);
  }
  psflow::Operation wide_update = m.wide_optimizer->apply_gradients(wide_grads);
  psflow::Operation deep_update = m.deep_optimizer->apply_gradients(deep_grads, m.global_step);
  m.train_op = ops::group({wide_update, deep_update}, "train");
  m.dynamic_tables = tables.dynamic;
  placement.reset();
  std::optional<psflow::ScopeGuard> on_this_worker;
  if (task.distributed)
    on_this_worker.emplace(graph.device("/job:worker/task:" + std::to_string(task.index())));
  if (images) {
    m.probability = ops::softmax(m.logits, "probabilities");
  } else {
    m.probability = ops::sigmoid(m.logits, "probability");
    std::tie(m.auc, m.auc_update) = psflow::metrics::auc(m.labels, m.probability);
  }
  return m;
}

// ---- data ------------------------------------------------------------------------------------

// The feeds of one batch.
psflow::FeedMap click_feeds(const Model& m, const ctr::ClickBatch& b) {
  return {{m.ids, psflow::Tensor::from_vector(b.ids, {b.size(), b.num_features})},
          {m.labels, psflow::Tensor::from_vector(b.labels, {b.size()})}};
}

psflow::FeedMap image_feeds(const Model& m, const ctr::SparseImageBatch& b) {
  std::vector<float> one_hot(b.size() * 10, 0.0f);
  for (std::size_t i = 0; i < b.size(); ++i)
    one_hot[i * 10 + static_cast<std::size_t>(b.labels[i])] = 1.0f;
  return {{m.sparse_ids.indices, psflow::Tensor::from_vector(b.indices, {b.ids.size(), 2})},
          {m.sparse_ids.values, psflow::Tensor::from_vector(b.ids, {b.ids.size()})},
          {m.sparse_ids.dense_shape,
           psflow::Tensor::from_vector<std::int64_t>(
               {static_cast<std::int64_t>(b.size()), std::max<std::int64_t>(1, b.max_ids)})},
          {m.labels, psflow::Tensor::from_vector(one_hot, {b.size(), 10})}};
}

// ---- evaluation ------------------------------------------------------------------------------

void evaluate_clicks(psflow::Session& sess, const Model& m, const ctr::ClickLog& clicks,
                     const CtrFlags& flags) {
  std::vector<double> predicted;
  std::vector<float> labels;
  for (std::size_t begin = 0; begin < flags.test_examples; begin += flags.eval_batch_size) {
    const std::size_t count = std::min(flags.eval_batch_size, flags.test_examples - begin);
    const ctr::ClickBatch b = clicks.test_batch(begin, count);
    const psflow::Tensor logits = sess.run({m.logits}, click_feeds(m, b), {m.auc_update})[0];
    for (float z : logits.values<float>()) predicted.push_back(1.0 / (1.0 + std::exp(-z)));
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  }
  std::printf("test log-loss: %.4f (best achievable %.4f)\n", ctr::log_loss(predicted, labels),
              ctr::best_log_loss(clicks, flags.test_examples));
  // The exact AUC (ranks) beside tf.metrics.auc's 200-threshold estimate, which is printed last.
  std::printf("test auc (exact): %.4f\n", ctr::auc(predicted, labels));
  std::printf("test auc: %.4f (best achievable %.4f)\n", sess.run({m.auc})[0].scalar<float>(),
              ctr::best_auc(clicks, flags.test_examples));
  std::fflush(stdout);
}

// --train_data: the same on the held-out file, feeding its fields' strings in place of the
// training iterator's; the best achievable figures come from the file's true probabilities.
void evaluate_click_files(psflow::Session& sess, const Model& m, const CtrFlags& flags) {
  std::vector<double> predicted, truth;
  std::vector<float> labels;
  const auto test = ctr::test_pipeline(flags.train_data, flags.eval_batch_size).make_iterator();
  while (auto batch = test->next()) {
    const psflow::Tensor logits =
        sess.run({m.logits}, {{m.fields, batch->components[0]}, {m.labels, batch->components[1]}},
                 {m.auc_update})[0];
    for (float z : logits.values<float>()) predicted.push_back(1.0 / (1.0 + std::exp(-z)));
    for (float y : batch->components[1].values<float>()) labels.push_back(y);
    for (float p : batch->components[2].values<float>()) truth.push_back(p);
  }
  std::printf("test log-loss: %.4f (best achievable %.4f)\n", ctr::log_loss(predicted, labels),
              ctr::log_loss(truth, labels));
  std::printf("test auc (exact): %.4f\n", ctr::auc(predicted, labels));
  std::printf("test auc: %.4f (best achievable %.4f)\n", sess.run({m.auc})[0].scalar<float>(),
              ctr::auc(truth, labels));
  std::fflush(stdout);
}

void evaluate_images(psflow::Session& sess, const Model& m,
                     const std::vector<ctr::SparseImage>& test, const CtrFlags& flags) {
  std::size_t correct = 0;
  for (std::size_t begin = 0; begin < test.size(); begin += flags.eval_batch_size) {
    const std::size_t count = std::min(flags.eval_batch_size, test.size() - begin);
    const ctr::SparseImageBatch b = ctr::sparse_image_batch(test, begin, count);
    const psflow::Tensor logits = sess.run({m.logits}, image_feeds(m, b))[0];
    const float* row = logits.data<float>();
    for (std::size_t i = 0; i < count; ++i, row += 10)
      correct += (std::max_element(row, row + 10) - row) == b.labels[i];
  }
  std::printf("test accuracy: %.4f\n",
              static_cast<double>(correct) / static_cast<double>(test.size()));
  std::fflush(stdout);
}

// ---- export ----------------------------------------------------------------------------------

// The chief's export (see --export_dir at the top), then the check line.
void export_for_serving(psflow::Session& sess, const Model& m, const ctr::ClickLog& clicks,
                        const CtrFlags& flags) {
  const bool images = flags.data == "fashion_mnist";
  psflow::serving::Signature signature;
  psflow::FeedMap check_feeds;
  const ctr::ClickBatch b = clicks.test_batch(0, 4);
  if (images) {
    signature = {.inputs = {{"sp_indices", m.sparse_ids.indices},
                            {"sp_ids", m.sparse_ids.values},
                            {"sp_shape", m.sparse_ids.dense_shape}},
                 .outputs = {{"probabilities", m.probability}}};
    check_feeds = {
        {m.sparse_ids.indices, psflow::Tensor::from_vector<std::int64_t>({0, 0}, {1, 2})},
        {m.sparse_ids.values, psflow::Tensor::from_vector<std::int64_t>({1})},
        {m.sparse_ids.dense_shape, psflow::Tensor::from_vector<std::int64_t>({1, 1})}};
  } else if (m.fields.valid()) {  // --train_data: the model takes the fields' strings
    signature = {.inputs = {{"fields", m.fields}}, .outputs = {{"probability", m.probability}}};
    const auto test = ctr::test_pipeline(flags.train_data, b.size()).make_iterator();
    check_feeds = {{m.fields, test->next()->components[0]}};
  } else {
    signature = {.inputs = {{"ids", m.ids}}, .outputs = {{"probability", m.probability}}};
    check_feeds = {click_feeds(m, b).front()};
  }
  const psflow::Tensor p =
      example::export_model(sess, flags.export_dir, signature, m.probability, check_feeds);
  std::printf("exported the model to %s: serve --model_dir=%s --model_name=ctr\n",
              flags.export_dir.c_str(), flags.export_dir.c_str());
  if (!images) {
    std::string request, answers;
    const psflow::Tensor* fields = m.fields.valid() ? &check_feeds.begin()->second : nullptr;
    for (std::size_t i = 0; i < b.size(); ++i) {
      std::string row;
      if (fields) {
        const std::size_t width = fields->shape()[1];
        for (std::size_t k = 0; k < width; ++k)
          row += (k ? ", \"" : "\"") + fields->values<std::string>()[i * width + k] + "\"";
      }
      for (std::size_t k = 0; !fields && k < b.num_features; ++k)
        row += (k ? ", " : "") + std::to_string(b.ids[i * b.num_features + k]);
      request += (i ? ", [" : "[") + row + "]";
      answers += format(i ? ", %.9g" : "%.9g", static_cast<double>(p.data<float>()[i]));
    }
    std::printf("serving check: {\"instances\": [%s]} -> [%s]\n", request.c_str(), answers.c_str());
  }
  std::fflush(stdout);
}

// ---- training --------------------------------------------------------------------------------

int run_worker(const CtrFlags& flags, const cluster_task::TaskOptions& task,
               psflow::Server* server) {
  const bool chief = task.chief();
  const std::size_t n = task.num_workers(), index = task.index();
  ctr::ClickLogConfig click_config;
  click_config.seed = flags.seed;
  click_config.table_rows = flags.table_rows;
  click_config.raw_ids = flags.table == "dynamic";
  click_config.fresh_id_rate = std::min(
      1.0, static_cast<double>(flags.new_ids_per_step) / static_cast<double>(flags.batch_size));
  const ctr::ClickLog clicks(click_config);
  if (!flags.write_data.empty()) {
    if (task.distributed)
      throw psflow::InvalidArgument(
          "--write_data runs alone: drop --job_name and the cluster flags");
    const auto started = Clock::now();
    const std::uint64_t train_examples =
        static_cast<std::uint64_t>(flags.train_steps) * flags.batch_size;
    ctr::write_click_files(clicks, flags.write_data, train_examples, flags.test_examples,
                           std::max(1u, std::thread::hardware_concurrency()));
    log(format("wrote %llu training examples in %zu files and %zu held-out ones to %s in %.1f s",
               static_cast<unsigned long long>(train_examples), ctr::kTrainFiles,
               flags.test_examples, flags.write_data.c_str(), seconds_since(started)));
    return 0;
  }
  if (!flags.train_data.empty() && flags.data != "clicks")
    throw psflow::InvalidArgument("--train_data holds click logs: use it with --data=clicks");
  std::vector<ctr::SparseImage> train_images, test_images;
  if (flags.data == "fashion_mnist") {
    ctr::SparseImageConfig config;
    config.table_rows = flags.table_rows;
    train_images = ctr::sparse_images(
        fashion_mnist::load(flags.data_dir, fashion_mnist::Split::train), config);
    if (chief)
      test_images = ctr::sparse_images(
          fashion_mnist::load(flags.data_dir, fashion_mnist::Split::test), config);
  }

  psflow::Graph graph;
  Model m = build_model(graph, flags, task, click_config, clicks.num_features());
  const std::string tables =
      flags.table == "fixed"
          ? format("tables of %zu rows", flags.table_rows)
          : format("dynamic tables (min_count %lld, capacity %zu per shard, %s, ttl %lld)",
                   static_cast<long long>(flags.min_count), flags.capacity, flags.eviction.c_str(),
                   static_cast<long long>(flags.ttl_steps));
  log(format("worker %zu of %zu: %s, %s over %zu ps task(s), batch %zu", index, n,
             flags.data.c_str(), tables.c_str(), std::max<std::size_t>(1, task.num_ps()),
             flags.batch_size));

  // Trains until the global step reaches --train_steps (the chief then evaluates); returns the
  // session, still open.
  auto train_to_the_end = [&] {
    psflow::train::MonitoredTrainingSessionOptions options;
    options.master = server ? server->target() : "";
    options.is_chief = chief;
    options.checkpoint_dir = flags.checkpoint_dir;
    options.hooks = {psflow::train::StopAtStepHook(flags.train_steps)};
    if (!m.dynamic_tables.empty())
      options.hooks.push_back(psflow::train::DynamicEmbeddingEvictionHook(
          flags.eviction_interval_steps, m.dynamic_tables));
    options.log_step_count_steps = 0;
    options.recovery_deadline_secs = task.recovery_deadline_s;
    options.startup_timeout_secs = task.task.startup_timeout_s;
    auto sess = std::make_unique<psflow::train::MonitoredTrainingSession>(graph, options);
    const auto started = Clock::now();
    std::int64_t step = 0, next_log = flags.log_every_steps;
    auto progress = cluster_task::make_progress(task, flags.train_steps);  // --progress
    // Worker `index` of n takes every n-th batch of the log (or of the images, cycling).
    for (std::uint64_t j = 0; !sess->should_stop(); ++j) {
      psflow::FeedMap feeds;  // none with --train_data (m.input): the iterator gives the batch
      if (m.input) {
        // get_next() inside the step reads the batch
      } else if (flags.data == "clicks") {
        feeds = click_feeds(m, clicks.batch(index + j * flags.batch_size * n, flags.batch_size, n));
      } else {
        const std::size_t batches =
            std::max<std::size_t>(1, train_images.size() / flags.batch_size);
        const std::size_t k = (index + j * n) % batches;
        feeds = image_feeds(
            m, ctr::sparse_image_batch(train_images, k * flags.batch_size, flags.batch_size));
      }
      if (chief && j == 0)  // --explain: the training step, across the processes
        flags.explain.run(sess->raw_session(), "ctr", {m.loss, m.global_step.value()}, feeds,
                          {m.train_op}, std::cerr);
      auto values = sess->run({m.loss, m.global_step.value()}, feeds, {m.train_op});
      step = values[1].scalar<std::int64_t>() + 1;
      if (progress) progress->update(step, values[0].scalar<float>());
      if (chief && step >= next_log) {
        log(format("global step %lld: loss %.4f, %.1f global steps/s", static_cast<long long>(step),
                   values[0].scalar<float>(), static_cast<double>(step) / seconds_since(started)),
            progress.get());
        next_log = (step / flags.log_every_steps + 1) * flags.log_every_steps;
      }
    }
    if (progress) progress->finish();
    const double training_s = seconds_since(started);
    log(format("worker %zu done at global step %lld after %.1f s", index,
               static_cast<long long>(step), training_s));
    if (m.input) cluster_task::log_input_wait(*m.input, training_s);
    if (chief) {
      if (!flags.export_dir.empty()) export_for_serving(sess->raw_session(), m, clicks, flags);
      for (const auto& table : m.dynamic_tables) {
        std::int64_t rows = 0;
        for (auto r : sess->raw_session().run({table.size()})[0].values<std::int64_t>()) rows += r;
        log(format("dynamic table %s: %lld live rows", table.name().c_str(),
                   static_cast<long long>(rows)));
      }
      if (m.input)
        evaluate_click_files(sess->raw_session(), m, flags);
      else if (flags.data == "clicks")
        evaluate_clicks(sess->raw_session(), m, clicks, flags);
      else
        evaluate_images(sess->raw_session(), m, test_images, flags);
    }
    return sess;
  };
  // Closing it (the chief: a final checkpoint) reports this worker done; the last worker to
  // do so stops the ps tasks.
  train_to_the_end()->close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cluster_task::program_name() = "ctr";
  CtrFlags flags;
  psflow::Flags reader("ctr", kAbout);
  add_flags(reader, flags);
  return cluster_task::run_task(
      [&] { return cluster_task::parse_task_options(reader, argc, argv); },
      [&](const cluster_task::TaskOptions& task, psflow::Server* server) {
        return run_worker(flags, task, server);
      });
}
