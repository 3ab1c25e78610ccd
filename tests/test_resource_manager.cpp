// ResourceManager and VariableResource: one variable per name (conflicting declarations
// refused), other resources by (type, name), copy-on-write updates that never tear a reader's
// value and lose no concurrent update, and row access by stripe (sparse updates of different
// rows at once, exact on a shared row).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "psflow/runtime/resource_manager.hpp"

using namespace psflow;

namespace {

// Adds `delta` to every element of a float32 variable through update().
void add_to(VariableResource& var, float delta) {
  var.update([delta](const Tensor& current, Tensor& target) {
    const float* src = current.data<float>();
    float* dst = target.data<float>();
    for (std::size_t i = 0; i < current.size(); ++i) dst[i] = src[i] + delta;
  });
}

// Reads a variable over and over on a thread of its own until stop(), counting the reads and
// the torn ones: values whose elements are not all equal (the writers here change them alike).
class UniformReader {
 public:
  explicit UniformReader(const VariableResource& var)
      : thread_([this, &var] {
          do {
            const Tensor t = var.read();
            const float* x = t.data<float>();
            for (std::size_t i = 1; i < t.size(); ++i)
              if (x[i] != x[0]) {
                torn_.fetch_add(1);
                break;
              }
            reads_.fetch_add(1);
          } while (reading_.load());
        }) {}
  ~UniformReader() { stop(); }
  void stop() {
    reading_.store(false);
    if (thread_.joinable()) thread_.join();
  }
  int torn() const { return torn_.load(); }
  int reads() const { return reads_.load(); }

 private:
  std::atomic<bool> reading_{true};
  std::atomic<int> torn_{0}, reads_{0};
  std::thread thread_;  // last: starts once the counters exist
};

// Adds 1 to every element of rows `ids` as a sparse update does: under a RowAccess, each
// stripe's rows under its lock, when nobody else holds the buffer; otherwise (a reader holds
// it, or, under ThreadSanitizer, another writer is checking) with the copying update.
void add_one_to_rows(VariableResource& var, const std::vector<std::int64_t>& ids) {
  {
    VariableResource::RowAccess access(var);
    if (access.writable()) {
      const std::size_t row_size = access.value().size() / access.value().shape()[0];
      RowStripes(ids).for_each([&](std::size_t stripe, std::span<const std::size_t> at) {
        std::lock_guard lock(access.stripe(stripe));
        for (const std::size_t k : at) {
          const std::int64_t row = ids[k];
          float* values = access.buffer().data<float>() + static_cast<std::size_t>(row) * row_size;
          for (std::size_t j = 0; j < row_size; ++j) values[j] += 1;
        }
      });
      return;
    }
  }
  var.update([&](const Tensor& current, Tensor& target) {
    if (target.raw_data() != current.raw_data())
      std::memcpy(target.raw_data(), current.raw_data(), current.nbytes());
    const std::size_t row_size = current.size() / current.shape()[0];
    for (const std::int64_t row : ids)
      for (std::size_t j = 0; j < row_size; ++j)
        target.data<float>()[static_cast<std::size_t>(row) * row_size + j] += 1;
  });
}

}  // namespace

TEST_CASE("lookup_or_create makes one variable per name and refuses conflicting declarations") {
  ResourceManager rm("/job:ps/replica:0/task:0/device:CPU:0");
  auto v = rm.lookup_or_create("v", DType::float32, PartialShape::of({2, 3}));
  REQUIRE(v);
  CHECK(v->name() == "v");
  CHECK(v->device() == "/job:ps/replica:0/task:0/device:CPU:0");
  CHECK(v->dtype() == DType::float32);
  CHECK_FALSE(v->initialized());
  CHECK(rm.lookup_or_create("v", DType::float32, PartialShape::of({2, 3})) == v);
  CHECK(rm.find("v") == v);
  CHECK(rm.find("w") == nullptr);

  CHECK_THROWS_AS(rm.lookup_or_create("v", DType::float64, PartialShape::of({2, 3})),
                  InvalidArgument);
  try {
    rm.lookup_or_create("v", DType::float32, PartialShape::of({3}));
    FAIL("a second declaration of 'v' with another shape was accepted");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.message(), Catch::Contains("'v'") && Catch::Contains("another name"));
  }
  CHECK(rm.find("v") == v);  // the conflicting call left it alone

  auto w = rm.lookup_or_create("w", DType::int32, PartialShape::scalar());
  CHECK(w != v);
  auto all = rm.variables();
  REQUIRE(all.size() == 2);
  CHECK(all[0] == v);  // by name
  CHECK(all[1] == w);
}

TEST_CASE("clear forgets every variable and resource, held pointers stay usable") {
  ResourceManager rm;
  auto v = rm.lookup_or_create("v", DType::float32, PartialShape::scalar());
  v->assign(Tensor(1.0f));
  auto r = rm.lookup_or_create_resource<int>("counter", [] { return new int(5); });
  rm.clear();
  CHECK(rm.find("v") == nullptr);
  CHECK(rm.variables().empty());
  CHECK(v->read().scalar<float>() == 1.0f);
  CHECK(*r == 5);
  auto fresh = rm.lookup_or_create("v", DType::float32, PartialShape::scalar());
  CHECK(fresh != v);
  CHECK_FALSE(fresh->initialized());
  CHECK(rm.lookup_or_create_resource<int>("counter", [] { return new int(6); }) != r);
}

TEST_CASE("other resources are shared by (type, name) and made once") {
  ResourceManager rm;
  int made = 0;
  auto a = rm.lookup_or_create_resource<std::string>("q", [&] {
    ++made;
    return new std::string("first");
  });
  auto b = rm.lookup_or_create_resource<std::string>("q", [&] {
    ++made;
    return new std::string("second");
  });
  CHECK(a == b);
  CHECK(*b == "first");
  CHECK(made == 1);
  // Same name, another type: another resource.
  auto c = rm.lookup_or_create_resource<int>("q", [&] {
    ++made;
    return new int(3);
  });
  CHECK(*c == 3);
  CHECK(made == 2);
}

TEST_CASE("a variable refuses reads before it is set, and values of another dtype or shape") {
  VariableResource v("weights", "/cpu", DType::float32, PartialShape::of({2}));
  try {
    v.read();
    FAIL("reading an uninitialized variable did not throw");
  } catch (const FailedPrecondition& e) {
    CHECK_THAT(e.message(), Catch::Contains("uninitialized value weights"));
  }
  CHECK_THROWS_AS(add_to(v, 1), FailedPrecondition);
  CHECK_THROWS_AS(v.assign(Tensor::filled(1.0, {2})), InvalidArgument);   // float64
  CHECK_THROWS_AS(v.assign(Tensor::filled(1.0f, {3})), InvalidArgument);  // shape
  CHECK_FALSE(v.initialized());
  v.assign(Tensor::filled(1.0f, {3}), /*validate_shape=*/false);
  CHECK(v.read().shape() == Shape{3});
  v.reset();
  CHECK_FALSE(v.initialized());
}

TEST_CASE("updates work in place when nobody holds the value, else copy and leave readers alone") {
  VariableResource v("v", "/cpu", DType::float32, PartialShape::of({1024}));
  v.assign(Tensor::filled(1.0f, {1024}));
  const void* before = v.read().raw_data();  // the temporary read is gone at the semicolon
  add_to(v, 1);
  CHECK(v.read().raw_data() == before);  // in place
  CHECK(v.read().data<float>()[0] == 2.0f);

  const Tensor reader = v.read();
  add_to(v, 1);
  CHECK_FALSE(v.read().shares_buffer_with(reader));  // copy-on-write
  CHECK(reader.data<float>()[0] == 2.0f);
  CHECK(reader.data<float>()[1023] == 2.0f);
  CHECK(v.read().data<float>()[1023] == 3.0f);
  const Tensor returned = v.assign(Tensor::filled(7.0f, {1024}));
  CHECK(returned.shares_buffer_with(v.read()));
  CHECK(reader.data<float>()[0] == 2.0f);
}

TEST_CASE("concurrent updates and reads: no update lost, no read torn") {
  constexpr int kWriters = 4, kUpdates = 500;
  constexpr std::size_t kSize = 4096;
  ResourceManager rm;
  auto v = rm.lookup_or_create("v", DType::float32,
                               PartialShape::of({static_cast<std::int64_t>(kSize)}));
  v->assign(Tensor::filled(0.0f, {kSize}));
  UniformReader reader(*v);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&] {
      // Each writer looks the variable up itself, as a step on another connection would.
      auto mine = rm.lookup_or_create("v", DType::float32,
                                      PartialShape::of({static_cast<std::int64_t>(kSize)}));
      for (int i = 0; i < kUpdates; ++i) add_to(*mine, 1);
    });
  for (auto& t : writers) t.join();
  reader.stop();
  CHECK(reader.torn() == 0);
  CHECK(reader.reads() > 0);
  const Tensor final_value = v->read();
  CHECK(final_value.data<float>()[0] == static_cast<float>(kWriters * kUpdates));
  CHECK(final_value.data<float>()[kSize - 1] == static_cast<float>(kWriters * kUpdates));
}

TEST_CASE("lock-free writers share one buffer, and a reader's value from before never changes") {
  ResourceManager rm;
  auto v = rm.lookup_or_create("v", DType::float32, PartialShape::of({4}));
  CHECK_THROWS_AS(VariableResource::LockFreeWriter(*v), FailedPrecondition);
  v->assign(Tensor::from_vector<float>({1, 2, 3, 4}));
  const Tensor before = v->read();  // a reader holds the buffer
  {
    VariableResource::LockFreeWriter a(*v);
    CHECK(a.buffer().raw_data() != before.raw_data());  // copied away from the reader first
    const Tensor during = v->read();                    // a reader while a writer is at work
    VariableResource::LockFreeWriter b(*v);
    CHECK(b.buffer().raw_data() == a.buffer().raw_data());  // writers at once: one buffer
    a.buffer().data<float>()[0] = 10;
    b.buffer().data<float>()[1] = 20;
    CHECK(during.data<float>()[1] == 20);  // Hogwild: it sees the writes as they happen
  }
  CHECK(std::vector<float>(before.data<float>(), before.data<float>() + 4) ==
        std::vector<float>{1, 2, 3, 4});
  {
    const Tensor after = v->read();
    CHECK(std::vector<float>(after.data<float>(), after.data<float>() + 4) ==
          std::vector<float>{10, 20, 3, 4});
  }
  // Without readers or writers the buffer is written where it is.
  const void* where = v->read().raw_data();
  v->update_lock_free([](const Tensor&, Tensor& out) { out.data<float>()[2] = 30; });
  CHECK(v->read().raw_data() == where);
  CHECK(v->read().data<float>()[2] == 30);
}

TEST_CASE("lock-free updates of disjoint elements from 4 threads run at once and all land") {
  constexpr int kWriters = 4, kUpdates = 2000;
  constexpr std::size_t kPerWriter = 256;
  ResourceManager rm;
  auto v = rm.lookup_or_create(
      "v", DType::float32, PartialShape::of({static_cast<std::int64_t>(kWriters * kPerWriter)}));
  v->assign(Tensor::filled(0.0f, {kWriters * kPerWriter}));
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < kUpdates; ++i)
        v->update_lock_free([w](const Tensor&, Tensor& out) {
          float* mine = out.data<float>() + static_cast<std::size_t>(w) * kPerWriter;
          for (std::size_t e = 0; e < kPerWriter; ++e) mine[e] += 1;
        });
    });
  for (auto& t : writers) t.join();
  const Tensor final_value = v->read();
  for (std::size_t e = 0; e < kWriters * kPerWriter; e += kPerWriter / 2)
    CHECK(final_value.data<float>()[e] == static_cast<float>(kUpdates));
}

TEST_CASE("concurrent lookups of one name all get the same variable") {
  ResourceManager rm;
  std::vector<std::shared_ptr<VariableResource>> got(8);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < got.size(); ++t)
    threads.emplace_back(
        [&, t] { got[t] = rm.lookup_or_create("shared", DType::int64, PartialShape::scalar()); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) CHECK(g == got[0]);
  CHECK(rm.variables().size() == 1);
}

TEST_CASE("RowStripes groups a batch's rows by stripe and keeps the given order in each") {
  const std::vector<std::int64_t> ids{33, 1, 2, 65, 1, 34};
  std::vector<std::pair<std::size_t, std::vector<std::int64_t>>> seen;
  std::vector<std::size_t> positions;
  RowStripes(ids).for_each([&](std::size_t stripe, std::span<const std::size_t> at) {
    std::vector<std::int64_t> rows;
    for (const std::size_t k : at) {
      rows.push_back(ids[k]);
      positions.push_back(k);
    }
    seen.emplace_back(stripe, rows);
  });
  using Seen = std::vector<std::pair<std::size_t, std::vector<std::int64_t>>>;
  CHECK(seen == Seen{{1, {33, 1, 65, 1}}, {2, {2, 34}}});
  CHECK(positions == std::vector<std::size_t>{0, 1, 3, 4, 2, 5});
}

TEST_CASE("row access: a writer of another stripe runs while one stripe is held") {
  ResourceManager rm;
  auto v = rm.lookup_or_create("t", DType::float32, PartialShape::of({64, 2}));
  v->assign(Tensor::filled(0.0f, {64, 2}));
  VariableResource::RowAccess holder(*v);
  std::unique_lock held(holder.stripe(row_stripe(0)));
  // Row 1 is in another stripe: this finishes while stripe 0 stays locked here.
  auto other = std::async(std::launch::async, [&] { add_one_to_rows(*v, {1, 33}); });
  REQUIRE(other.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  other.get();
  CHECK(holder.value().data<float>()[2] == 1.0f);
  CHECK(holder.value().data<float>()[66] == 1.0f);
  // Row 32 shares stripe 0, the lock held here (row 1 does not): its writer waits for it, then
  // lands once it is released.
  CHECK(row_stripe(32) == row_stripe(0));
  CHECK(row_stripe(1) != row_stripe(0));
  std::thread same([&] { add_one_to_rows(*v, {32}); });
  held.unlock();
  same.join();
  CHECK(holder.value().data<float>()[64] == 1.0f);
}

TEST_CASE("row access from 4 threads: private rows and shared rows all hand-counted exactly") {
  constexpr int kThreads = 4, kUpdates = 2000;
  constexpr std::int64_t kShared = 7, kSharedSameStripe = 7 + 32;
  ResourceManager rm;
  auto v = rm.lookup_or_create("t", DType::float32, PartialShape::of({64, 4}));
  v->assign(Tensor::filled(0.0f, {64, 4}));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      // Row 10 + t is this thread's; kShared twice per update and kSharedSameStripe are
      // everyone's: a lost update there would show in the count.
      const std::vector<std::int64_t> ids{10 + t, kShared, kSharedSameStripe, kShared};
      for (int i = 0; i < kUpdates; ++i) add_one_to_rows(*v, ids);
    });
  for (auto& thread : threads) thread.join();
  const Tensor value = v->read();
  auto row = [&](std::int64_t r) {
    const float* x = value.data<float>() + r * 4;
    return std::vector<float>(x, x + 4);
  };
  for (int t = 0; t < kThreads; ++t) CHECK(row(10 + t) == std::vector<float>(4, kUpdates));
  CHECK(row(kShared) == std::vector<float>(4, 2 * kThreads * kUpdates));
  CHECK(row(kSharedSameStripe) == std::vector<float>(4, kThreads * kUpdates));
  CHECK(row(0) == std::vector<float>(4, 0));
}

TEST_CASE("row access waits for the exclusive holders and they for it: a read is never torn") {
  ResourceManager rm;
  auto v = rm.lookup_or_create("t", DType::float32, PartialShape::of({32, 256}));
  v->assign(Tensor::filled(0.0f, {32, 256}));
  std::vector<std::int64_t> every_row(32);
  for (std::int64_t r = 0; r < 32; ++r) every_row[static_cast<std::size_t>(r)] = r;
  UniformReader reader(*v);  // read() is exclusive: no row writer is between its stripes
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        // In place under the stripes when nobody shares the buffer, else (the reader holds it)
        // the copying update under the exclusive lock.
        add_one_to_rows(*v, every_row);
      }
    });
  for (auto& t : writers) t.join();
  reader.stop();
  CHECK(reader.torn() == 0);
  CHECK(reader.reads() > 0);
  const Tensor final_value = v->read();
  CHECK(final_value.data<float>()[0] == 600.0f);
  CHECK(final_value.data<float>()[final_value.size() - 1] == 600.0f);
}
