// Saver, latest_checkpoint, IsVariableInitialized and Supervisor, through in-process Sessions:
// values survive a save/restore, checkpoints are numbered and pruned, corrupt files never
// change a variable, and a Supervisor restores instead of initializing when it can.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "psflow/graph/state_ops.hpp"
#include "psflow/runtime.hpp"
#include "psflow/runtime/kernels/state_kernels.hpp"
#include "psflow/train/checkpoint_file.hpp"
#include "psflow/train/saver.hpp"
#include "psflow/train/supervisor.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

using namespace psflow;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

using psflow::testing::TempDir;

namespace {

std::string read_text(const std::string& path) { return psflow::testing::read_file(path); }

void write_text(const std::string& path, const std::string& text) {
  psflow::testing::write_file(path, text);
}

// A small model: a float matrix, an int64 scalar, a bool vector and (optionally) global_step.
struct Model {
  Graph g;
  Variable w, count, flags, step;
  explicit Model(bool with_step = true, double w_init = 1.0) {
    w = get_variable(g, "w", {2, 2}, constant_initializer(w_init));
    count = get_variable(g, "count", {}, constant_initializer(5), DType::int64);
    flags = get_variable(g, "flags", {3}, zeros_initializer(), DType::boolean, false);
    if (with_step)
      step = get_variable(g, "global_step", {}, zeros_initializer(), DType::int64, false);
  }
  Tensor get(Session& sess, const Variable& v) { return sess.run({v.value()})[0]; }
  void set(Session& sess, const Variable& v, const Tensor& value) {
    sess.run({v.assign(ops::constant(g, value))});
  }
};

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

}  // namespace

TEST_CASE("IsVariableInitialized says whether a variable holds a value, on its device") {
  Graph g;
  Variable v;
  {
    auto dev = g.device("/job:ps/task:0");
    v = get_variable(g, "v", {2}, zeros_initializer());
  }
  Output ready = ops::is_variable_initialized(v.ref());
  CHECK(ready.dtype() == DType::boolean);
  CHECK(ready.op().type() == "IsVariableInitialized");
  CHECK(ready.device() == v.device());
  CHECK(ready.op().node().colocate_with == v.op().id());
  CHECK_THROWS_AS(ops::is_variable_initialized(v.value()), InvalidArgument);

  train::ReadinessCheck check({v});
  Session sess(g);
  CHECK(sess.run({ready})[0].scalar<bool>() == false);
  CHECK(check.uninitialized(sess) == std::vector<std::string>{"v"});
  sess.run(v.initializer());
  CHECK(sess.run({ready})[0].scalar<bool>() == true);
  CHECK(check.uninitialized(sess).empty());
}

TEST_CASE("save then restore brings the saved values back") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  m.set(sess, m.flags, Tensor::from_vector<bool>({true, false, true}));
  const std::string path = saver.save(sess, dir.file("model.ckpt"));
  CHECK(path == dir.file("model.ckpt"));
  CHECK(fs::exists(train::checkpoint_file_path(path)));
  CHECK(read_text(dir.file("checkpoint")) ==
        "model_checkpoint_path: \"model.ckpt\"\nall_model_checkpoint_paths: \"model.ckpt\"\n");

  m.set(sess, m.w, Tensor::filled(9.0f, {2, 2}));
  m.set(sess, m.count, Tensor(std::int64_t{-3}));
  m.set(sess, m.flags, Tensor::from_vector<bool>({false, false, false}));
  saver.restore(sess, path);
  CHECK(m.get(sess, m.w).equals(Tensor::filled(1.0f, {2, 2})));
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 5);
  CHECK(m.get(sess, m.flags).equals(Tensor::from_vector<bool>({true, false, true})));
  // The file path works too.
  m.set(sess, m.count, Tensor(std::int64_t{0}));
  saver.restore(sess, train::checkpoint_file_path(path));
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 5);

  // The checkpoint holds the variables under their names.
  auto tensors = train::read_checkpoint(train::checkpoint_file_path(path));
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{"w", "count", "flags", "global_step"});
}

TEST_CASE("restore works in a fresh graph whose variables were never initialized") {
  TempDir dir("saver");
  std::string path;
  {
    Model m(true, 4.0);
    train::Saver saver(m.g);
    Session sess(m.g);
    sess.run(global_variables_initializer(m.g));
    path = saver.save(sess, dir.file("model.ckpt"), 12);
  }
  Model fresh;
  train::Saver saver(fresh.g);
  Session sess(fresh.g);
  CHECK_THROWS_AS(fresh.get(sess, fresh.w), FailedPrecondition);
  saver.restore(sess, path);
  CHECK(fresh.get(sess, fresh.w).equals(Tensor::filled(4.0f, {2, 2})));
}

TEST_CASE("global steps number the checkpoints and max_to_keep prunes the oldest") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g, 2);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  for (std::int64_t step = 1; step <= 4; ++step)
    CHECK(saver.save(sess, dir.file("model.ckpt"), step) ==
          dir.file("model.ckpt-" + std::to_string(step)));
  for (int step = 1; step <= 4; ++step)
    CHECK(fs::exists(dir.file("model.ckpt-" + std::to_string(step) + ".psflow")) == (step >= 3));
  CHECK(read_text(dir.file("checkpoint")) ==
        "model_checkpoint_path: \"model.ckpt-4\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-3\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-4\"\n");
  CHECK(saver.last_checkpoints() ==
        std::vector<std::string>{dir.file("model.ckpt-3"), dir.file("model.ckpt-4")});
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-4"));

  // Saving the same step again makes it the newest without duplicating it.
  saver.save(sess, dir.file("model.ckpt"), 3);
  CHECK(saver.last_checkpoints() ==
        std::vector<std::string>{dir.file("model.ckpt-4"), dir.file("model.ckpt-3")});
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-3"));

  // A new Saver on the same directory carries on pruning what the old one kept.
  train::Saver next(m.g, 2);
  next.save(sess, dir.file("model.ckpt"), 5);
  CHECK_FALSE(fs::exists(dir.file("model.ckpt-4.psflow")));
  CHECK(fs::exists(dir.file("model.ckpt-3.psflow")));
  CHECK(fs::exists(dir.file("model.ckpt-5.psflow")));
}

TEST_CASE("max_to_keep 0 keeps every checkpoint file") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g, 0);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  for (std::int64_t step = 0; step < 8; ++step) saver.save(sess, dir.file("model.ckpt"), step);
  for (int step = 0; step < 8; ++step)
    CHECK(fs::exists(dir.file("model.ckpt-" + std::to_string(step) + ".psflow")));
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-7"));
}

TEST_CASE("latest_checkpoint: missing, stale, TF-written and corrupt state files") {
  TempDir dir("saver");
  CHECK_FALSE(train::latest_checkpoint(dir.file("no/such/dir")));
  CHECK_FALSE(train::latest_checkpoint(dir.path()));

  train::write_checkpoint(dir.file("model.ckpt-7.psflow"), {{"w", Tensor(1.0f)}});
  // What TF writes, timestamps included; the checkpoint exists.
  write_text(dir.file("checkpoint"),
             "model_checkpoint_path: \"model.ckpt-7\"\n"
             "all_model_checkpoint_paths: \"model.ckpt-7\"\n"
             "all_model_checkpoint_timestamps: 1700000000.5\n"
             "last_preserved_timestamp: 1699999999.25\n");
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-7"));
  // An absolute path is used as is.
  write_text(dir.file("checkpoint"),
             "model_checkpoint_path: \"" + dir.file("model.ckpt-7") + "\"\n");
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-7"));
  // A state file naming a checkpoint that is gone.
  write_text(dir.file("checkpoint"), "model_checkpoint_path: \"model.ckpt-9\"\n");
  CHECK_FALSE(train::latest_checkpoint(dir.path()));

  const std::vector<std::string> corrupt = {"model_checkpoint_path: model.ckpt-7\n", "garbage\n",
                                            "model_checkpoint_path: \"unterminated\n",
                                            "all_model_checkpoint_paths: \"model.ckpt-7\"\n",
                                            std::string("\0\x01\x02", 3)};
  for (const auto& bad : corrupt) {
    INFO(bad);
    write_text(dir.file("checkpoint"), bad);
    CHECK_THROWS_AS(train::latest_checkpoint(dir.path()), DataLoss);
    CHECK_THROWS_WITH(train::latest_checkpoint(dir.path()),
                      Catch::Contains(dir.file("checkpoint")));
  }
}

TEST_CASE("restoring a corrupt checkpoint is DataLoss naming the file, and changes nothing") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  const std::string path = saver.save(sess, dir.file("model.ckpt"), 1);
  const std::string file = train::checkpoint_file_path(path);
  std::string bytes = read_text(file);
  bytes[bytes.size() - 20] ^= 0x01;  // inside the last tensor's data
  write_text(file, bytes);

  m.set(sess, m.w, Tensor::filled(2.0f, {2, 2}));
  m.set(sess, m.count, Tensor(std::int64_t{8}));
  CHECK_THROWS_AS(saver.restore(sess, path), DataLoss);
  CHECK_THROWS_WITH(saver.restore(sess, path), Catch::Contains(file));
  CHECK(m.get(sess, m.w).equals(Tensor::filled(2.0f, {2, 2})));
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 8);

  CHECK_THROWS_AS(saver.restore(sess, dir.file("model.ckpt-99")), NotFound);
  CHECK_THROWS_WITH(saver.restore(sess, dir.file("model.ckpt-99")),
                    Catch::Contains("model.ckpt-99"));
}

TEST_CASE("a checkpoint lacking a variable, or holding the wrong dtype or shape, is refused") {
  TempDir dir("saver");
  Model m(false);
  train::Saver saver(m.g);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  const auto file = dir.file("partial.psflow");
  auto check_untouched = [&] {
    CHECK(m.get(sess, m.w).equals(Tensor::filled(1.0f, {2, 2})));
    CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 5);
  };
  const Tensor good_count(std::int64_t{1});
  const Tensor good_flags = Tensor::from_vector<bool>({true, true, true});

  train::write_checkpoint(file, {{"w", Tensor::filled(0.0f, {2, 2})}, {"count", good_count}});
  CHECK_THROWS_AS(saver.restore(sess, file), NotFound);
  CHECK_THROWS_WITH(saver.restore(sess, file), Catch::Contains("'flags'") && Catch::Contains(file));
  check_untouched();

  train::write_checkpoint(
      file, {{"w", Tensor::filled(0.0, {2, 2})}, {"count", good_count}, {"flags", good_flags}});
  CHECK_THROWS_AS(saver.restore(sess, file), InvalidArgument);
  CHECK_THROWS_WITH(saver.restore(sess, file),
                    Catch::Contains("'w'") && Catch::Contains("float64") && Catch::Contains(file));
  check_untouched();

  train::write_checkpoint(
      file, {{"w", Tensor::filled(0.0f, {4})}, {"count", good_count}, {"flags", good_flags}});
  CHECK_THROWS_WITH(saver.restore(sess, file), Catch::Contains("'w'") && Catch::Contains("[4]"));
  check_untouched();

  // Extra tensors are ignored, as in TF.
  train::write_checkpoint(file, {{"w", Tensor::filled(0.0f, {2, 2})},
                                 {"count", good_count},
                                 {"flags", good_flags},
                                 {"other", Tensor(1.0)}});
  saver.restore(sess, file);
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 1);
}

TEST_CASE("save fails cleanly on an uninitialized variable or a missing directory") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g);
  Session sess(m.g);
  CHECK_THROWS_AS(saver.save(sess, dir.file("model.ckpt"), 1), FailedPrecondition);
  CHECK(fs::is_empty(dir.path()));
  sess.run(global_variables_initializer(m.g));
  CHECK_THROWS_AS(saver.save(sess, dir.file("missing/model.ckpt"), 1), NotFound);
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("Supervisor chief: initializes, saves at once and at stop, a restart restores") {
  TempDir dir("saver");
  {
    Model m;
    train::SupervisorOptions options;
    options.logdir = dir.file("logs");  // created by the Supervisor
    train::Supervisor sv(m.g, options);
    Session& sess = sv.managed_session();
    CHECK(m.get(sess, m.w).equals(Tensor::filled(1.0f, {2, 2})));
    CHECK(fs::exists(dir.file("logs/model.ckpt-0.psflow")));
    CHECK(train::latest_checkpoint(options.logdir) == dir.file("logs/model.ckpt-0"));
    CHECK_THROWS_AS(sv.managed_session(), FailedPrecondition);

    m.set(sess, m.w, Tensor::filled(7.0f, {2, 2}));
    m.set(sess, m.step, Tensor(std::int64_t{5}));
    CHECK_FALSE(sv.should_stop());
    sv.stop();
    CHECK(sv.should_stop());
    CHECK(sess.closed());
    CHECK(train::latest_checkpoint(options.logdir) == dir.file("logs/model.ckpt-5"));
  }
  // A new process (a new graph): the Supervisor restores instead of initializing.
  Model m;
  train::SupervisorOptions options;
  options.logdir = dir.file("logs");
  train::Supervisor sv(m.g, options);
  Session& sess = sv.managed_session();
  CHECK(m.get(sess, m.w).equals(Tensor::filled(7.0f, {2, 2})));
  CHECK(m.get(sess, m.step).scalar<std::int64_t>() == 5);
  CHECK(train::latest_checkpoint(options.logdir) == dir.file("logs/model.ckpt-5"));
}

TEST_CASE("Supervisor chief saves every save_model_secs from its background thread") {
  TempDir dir("saver");
  Model m;
  train::SupervisorOptions options;
  options.logdir = dir.path();
  options.save_model_secs = 0.05;
  train::Supervisor sv(m.g, options);
  Session& sess = sv.managed_session();
  m.set(sess, m.step, Tensor(std::int64_t{42}));
  const bool saved = wait_for([&] {
    return train::latest_checkpoint(dir.path()) ==
           std::optional<std::string>(dir.file("model.ckpt-42"));
  });
  CHECK(saved);
  sv.request_stop();
  CHECK(sv.should_stop());
  sv.stop();
}

TEST_CASE("Supervisor without a logdir just initializes, with a custom init_op if given") {
  Model m(false);
  train::SupervisorOptions options;
  options.init_op = variables_initializer({m.w, m.count});
  train::Supervisor sv(m.g, options);
  // flags is left uninitialized: the chief refuses to hand out an unready model.
  CHECK_THROWS_WITH(sv.managed_session(),
                    Catch::Contains("flags") && Catch::Contains("uninitialized"));
  Session other(m.g);
  other.run(m.flags.initializer());
  Session& sess = sv.managed_session();  // a failed attempt may be retried
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 5);
  sv.stop();
}

TEST_CASE("Supervisor non-chief waits until another thread initializes the variables") {
  Model m;
  Operation init = global_variables_initializer(m.g);
  train::SupervisorOptions options;
  options.is_chief = false;
  options.recovery_wait_secs = 0.02;
  options.ready_deadline_secs = 30;
  train::Supervisor sv(m.g, options);
  std::atomic<bool> initialized{false};
  std::thread chief([&] {
    std::this_thread::sleep_for(150ms);
    Session sess(m.g);
    sess.run(init);
    initialized = true;
  });
  const auto start = std::chrono::steady_clock::now();
  Session& sess = sv.managed_session();
  const auto waited = std::chrono::steady_clock::now() - start;
  chief.join();
  CHECK(initialized);
  CHECK(waited >= 100ms);
  CHECK(m.get(sess, m.w).equals(Tensor::filled(1.0f, {2, 2})));
  sv.stop();
}

TEST_CASE("Supervisor non-chief gives up with DeadlineExceeded naming what is uninitialized") {
  Model m;
  train::SupervisorOptions options;
  options.is_chief = false;
  options.recovery_wait_secs = 0.02;
  options.ready_deadline_secs = 0.2;
  Session early(m.g);
  early.run(m.w.initializer());  // w is ready, the others are not
  train::Supervisor sv(m.g, options);
  const auto start = std::chrono::steady_clock::now();
  try {
    sv.managed_session();
    FAIL("managed_session returned although variables are uninitialized");
  } catch (const DeadlineExceeded& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("count") && Catch::Contains("flags") &&
                            Catch::Contains("global_step") && !Catch::Contains("w,"));
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= 150ms);
  CHECK(waited < 10s);
}

TEST_CASE("Supervisor non-chief stops waiting when a stop is requested") {
  Model m;
  train::SupervisorOptions options;
  options.is_chief = false;
  options.recovery_wait_secs = 5;  // the request must cut the wait short
  options.ready_deadline_secs = 30;
  train::Supervisor sv(m.g, options);
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    sv.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(sv.managed_session(), Aborted);
  stopper.join();
  CHECK(std::chrono::steady_clock::now() - start < 4s);
}
