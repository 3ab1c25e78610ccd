// Datasets in the graph (data/iterator.hpp): get_next in a step with no feed, OutOfRange at the
// end, initializable iterators and their initializer, a map function's error reaching run(),
// MonitoredTrainingSession ending (and the chief saving) when the input ends, an iterator's
// threads ending with its session, and between-graph workers each reading their own shard.
#include <dirent.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "psflow/psflow.hpp"
#include "support/eventually.hpp"
#include "support/local_cluster.hpp"
#include "support/temp_dir.hpp"

namespace iterator_test {

using namespace psflow;
namespace data = psflow::data;
using Catch::Contains;
using data::Dataset;

inline Dataset range(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return Dataset::from_tensor_slices({Tensor::from_vector(std::move(v))});
}

inline std::vector<std::int64_t> ints(const Tensor& t) {
  const auto v = t.values<std::int64_t>();
  return {v.begin(), v.end()};
}

// The threads of this process (/proc/self/task).
inline std::size_t thread_count() {
  std::size_t n = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
    ::closedir(dir);
  }
  return n;
}

TEST_CASE("a one-shot iterator feeds a step with no feed, then OutOfRange") {
  Graph g;
  data::Iterator it = range(5).batch(2).make_one_shot_iterator(g);
  const std::vector<Output> next = it.get_next();
  REQUIRE(next.size() == 1);
  CHECK(next[0].dtype() == DType::int64);
  CHECK(next[0].shape() == PartialShape::of({-1}));
  Output doubled = next[0] * ops::scalar_like(next[0], 2);
  Session sess(g);
  CHECK(ints(sess.run({doubled})[0]) == std::vector<std::int64_t>{0, 2});
  CHECK(ints(sess.run({doubled})[0]) == std::vector<std::int64_t>{4, 6});
  CHECK(ints(sess.run({next[0]})[0]) == std::vector<std::int64_t>{4});  // another fetch, same pass
  CHECK_THROWS_AS(sess.run({doubled}), OutOfRange);
  CHECK_THROWS_WITH(sess.run({doubled}), Contains("End of sequence"));

  // Each session has its own pass.
  Session again(g);
  CHECK(ints(again.run({next[0]})[0]) == std::vector<std::int64_t>{0, 1});
}

TEST_CASE("two get_next ops in one step take two elements, with strings and several components") {
  Graph g;
  Dataset pairs =
      Dataset::from_tensor_slices({Tensor::from_vector<std::string>({"a", "b", "c", "d"}),
                                   Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2})});
  data::Iterator it = pairs.make_one_shot_iterator(g);
  const auto first = it.get_next();
  const auto second = it.get_next();
  REQUIRE(first.size() == 2);
  CHECK(first[0].dtype() == DType::string);
  CHECK(first[1].shape() == PartialShape::of({2}));
  Session sess(g);
  const auto out = sess.run({first[0], second[0], first[1]});
  std::set<std::string> seen{out[0].scalar<std::string>(), out[1].scalar<std::string>()};
  CHECK(seen == std::set<std::string>{"a", "b"});
  CHECK(out[2].values<float>().size() == 2);
}

TEST_CASE("an initializable iterator needs its initializer, which starts a new pass") {
  Graph g;
  data::Iterator it = range(3).make_initializable_iterator(g);
  const Output x = it.get_next()[0];
  Session sess(g);
  CHECK_THROWS_AS(sess.run({x}), FailedPrecondition);
  CHECK_THROWS_WITH(sess.run({x}), Contains("has not been initialized"));
  sess.run(it.initializer());
  CHECK(sess.run({x})[0].scalar<std::int64_t>() == 0);
  CHECK(sess.run({x})[0].scalar<std::int64_t>() == 1);
  sess.run(it.initializer());  // back to the start
  CHECK(sess.run({x})[0].scalar<std::int64_t>() == 0);
  CHECK_THROWS_AS(range(3).make_one_shot_iterator(g).initializer(), FailedPrecondition);
}

TEST_CASE("a map function's error reaches run() naming the stage and with its message") {
  Graph g;
  const Output x = range(4)
                       .map([](std::vector<Tensor> e) {
                         if (e[0].scalar<std::int64_t>() == 2) throw std::runtime_error("bad two");
                         return e;
                       })
                       .make_one_shot_iterator(g)
                       .get_next()[0];
  Session sess(g);
  sess.run({x});
  sess.run({x});
  try {
    sess.run({x});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("Dataset.map, stage 2") && Contains("bad two"));
  }
  CHECK(sess.run({x})[0].scalar<std::int64_t>() == 3);  // the process and the pass go on
}

TEST_CASE("the threads of an iterator's map and prefetch end with its session") {
  Graph g;
  const Output x = range(1000)
                       .repeat()
                       .map([](std::vector<Tensor> e) { return e; }, 3)
                       .prefetch(8)
                       .make_one_shot_iterator(g)
                       .get_next()[0];
  { Session warm(g); }  // the process-wide pools, started once
  const std::size_t before = thread_count();
  {
    Session sess(g);
    for (int i = 0; i < 5; ++i) sess.run({x});
    CHECK(thread_count() >= before + 4);  // 3 map threads and the prefetch thread
  }
  CHECK(thread_count() == before);  // joined when the session went
}

TEST_CASE("an iterator counts its elements and input waits, and a traced step shows the wait") {
  Graph g;
  data::Iterator it = range(3)
                          .map([](std::vector<Tensor> e) {
                            std::this_thread::sleep_for(std::chrono::milliseconds(20));
                            return e;
                          })
                          .make_one_shot_iterator(g);
  const Output x = it.get_next()[0];
  CHECK(it.stats().elements == 0);
  Session sess(g);
  sess.run({x});
  RunMetadata metadata;
  sess.run(RunOptions{.trace = true}, {x}, {}, {}, &metadata);
  const data::IteratorStats stats = it.stats();
  CHECK(stats.elements == 2);
  CHECK(stats.wait_ns >= 2 * 20'000'000);  // both waited for the map's sleep
  std::int64_t traced_ns = -1;
  for (const TaskStepStats& task : metadata.tasks)
    for (const NodeExecStats& node : task.nodes)
      if (node.op == "IteratorGetNext") traced_ns = node.end_ns - node.start_ns;
  CHECK(traced_ns >= 20'000'000);
  sess.run({x});
  CHECK_THROWS_AS(sess.run({x}), OutOfRange);
  CHECK(it.stats().elements == 3);  // the end is not an element
}

TEST_CASE("MonitoredTrainingSession ends when the input ends, and the chief saves the last step") {
  testing::TempDir checkpoints("iterator-mts");
  Graph g;
  Variable global_step = train::get_or_create_global_step(g);
  const Output x = range(7).batch(2).make_one_shot_iterator(g).get_next()[0];
  Variable total = get_variable(g, "total", {}, zeros_initializer(), DType::int64, false);
  // The step counts only after its batch was read: a run that finds the end counts nothing.
  Operation read_batch = total.assign_add(ops::reduce_sum(x, {0})).op();
  Operation step;
  {
    auto after_read = g.control_dependencies({read_batch});
    step = global_step.assign_add(ops::constant(g, Tensor(std::int64_t{1}))).op();
  }
  train::MonitoredTrainingSessionOptions options;
  options.checkpoint_dir = checkpoints.path();
  options.save_checkpoint_secs.reset();
  options.save_checkpoint_steps = 1000;  // a saver, whose last save comes when training ends
  options.log_step_count_steps = 0;
  int steps = 0;
  {
    train::MonitoredTrainingSession sess(g, options);
    while (!sess.should_stop() && steps < 100) {
      sess.run(step);
      ++steps;
    }
    CHECK(sess.raw_session().run({total.value()})[0].scalar<std::int64_t>() == 21);
  }
  CHECK(steps == 5);  // 4 batches, then the run that found the end
  const auto latest = train::latest_checkpoint(checkpoints.path());
  REQUIRE(latest);
  CHECK_THAT(*latest, Contains("model.ckpt-4"));
}

TEST_CASE("between-graph workers each read their own shard, and an iterator on a ps is refused") {
  testing::LocalCluster cluster(1, 2);
  std::vector<std::vector<std::int64_t>> read(2);
  for (int task = 0; task < 2; ++task) {
    Server worker(cluster.spec(), "worker", task, cluster.quiet());
    Graph g;
    Output x;
    {
      auto placement = g.device(
          train::replica_device_setter({.worker_device = "/job:worker/task:" + std::to_string(task),
                                        .cluster = cluster.spec()}));
      x = range(9).shard(2, static_cast<std::size_t>(task)).make_one_shot_iterator(g).get_next()[0];
    }
    Session sess(g, worker.target());
    for (int i = 0; i < 10; ++i) {
      try {
        read[static_cast<std::size_t>(task)].push_back(sess.run({x})[0].scalar<std::int64_t>());
      } catch (const OutOfRange&) {
        break;
      }
    }
    if (task == 1) {
      Graph bad;
      Output on_ps;
      {
        auto placement = bad.device("/job:ps/task:0");
        on_ps = range(3).make_one_shot_iterator(bad).get_next()[0];
      }
      Session wrong(bad, worker.target());
      CHECK_THROWS_AS(wrong.run({on_ps}), FailedPrecondition);
      CHECK_THROWS_WITH(wrong.run({on_ps}), Contains("not in this process"));
      worker.stop_job("ps");
    }
  }
  CHECK(read[0] == std::vector<std::int64_t>{0, 2, 4, 6, 8});
  CHECK(read[1] == std::vector<std::int64_t>{1, 3, 5, 7});
}

}  // namespace iterator_test
