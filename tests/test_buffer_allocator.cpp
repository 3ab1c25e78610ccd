// Tensor memory: freed large buffers come back for the next tensor of their size, small ones
// through a per-thread free list, and a block freed on another thread serves the next tensor of
// its size (through glibc, or psflow's shelf when the freeing thread cannot keep it); the cache
// stays within its byte limit.
#include <catch2/catch.hpp>
#include <cstdint>
#include <thread>
#include <vector>

#include "psflow/core/buffer_allocator.hpp"
#include "psflow/core/tensor.hpp"

using psflow::DType;
using psflow::Tensor;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
std::size_t floats(std::size_t bytes) { return bytes / 4; }
// An empty cache with this limit, whatever earlier test cases in this process left.
void reset_cache(std::size_t limit_bytes) {
  psflow::set_buffer_cache_limit(0);
  psflow::set_buffer_cache_limit(limit_bytes);
}
}  // namespace

TEST_CASE("a freed large buffer is reused by the next tensor of its size class") {
  reset_cache(std::size_t{256} << 20);
  const auto before = psflow::buffer_cache_stats();
  const void* first = nullptr;
  {
    Tensor t = Tensor::uninitialized(DType::float32, {floats(64 * kMiB)});
    first = t.raw_data();
  }
  CHECK(psflow::buffer_cache_stats().cached_bytes == before.cached_bytes + 64 * kMiB);
  Tensor again = Tensor::uninitialized(DType::float32, {floats(64 * kMiB)});
  CHECK(again.raw_data() == first);
  const auto after = psflow::buffer_cache_stats();
  CHECK(after.hits == before.hits + 1);
  CHECK(after.misses == before.misses + 1);
  CHECK(after.cached_bytes == before.cached_bytes);
}

TEST_CASE("a reused buffer still gives a zero-filled tensor") {
  {
    Tensor dirty = Tensor::uninitialized(DType::float32, {floats(kMiB)});
    for (float& v : dirty.values<float>()) v = 7.0f;
  }
  Tensor zeros(DType::float32, {floats(kMiB)});
  for (float v : zeros.values<float>()) REQUIRE(v == 0.0f);
}

TEST_CASE("sizes within one class share buffers, other classes do not") {
  reset_cache(std::size_t{256} << 20);
  const void* p = nullptr;
  { p = Tensor::uninitialized(DType::boolean, {4 * kMiB + 1000}).raw_data(); }
  // Classes are 1/8 of a power of two apart: both sizes round up to 4.5 MiB.
  { CHECK(Tensor::uninitialized(DType::boolean, {4 * kMiB + 100000}).raw_data() == p); }
  const auto before = psflow::buffer_cache_stats();
  Tensor other = Tensor::uninitialized(DType::boolean, {5 * kMiB});
  CHECK(psflow::buffer_cache_stats().misses == before.misses + 1);
}

TEST_CASE("the cache keeps at most its limit, dropping the oldest buffers") {
  reset_cache(std::size_t{8} << 20);
  {
    Tensor a = Tensor::uninitialized(DType::boolean, {4 * kMiB});
    Tensor b = Tensor::uninitialized(DType::boolean, {3 * kMiB});
    Tensor c = Tensor::uninitialized(DType::boolean, {2 * kMiB});
  }  // freed c, b, a: a does not fit next to c and b, so c (the oldest) is dropped
  CHECK(psflow::buffer_cache_stats().cached_bytes == 7 * kMiB);
  { Tensor too_big = Tensor::uninitialized(DType::boolean, {16 * kMiB}); }
  CHECK(psflow::buffer_cache_stats().cached_bytes == 7 * kMiB);
  psflow::set_buffer_cache_limit(0);
  CHECK(psflow::buffer_cache_stats().cached_bytes == 0);
  const auto before = psflow::buffer_cache_stats();
  { Tensor t = Tensor::uninitialized(DType::boolean, {4 * kMiB}); }
  Tensor t = Tensor::uninitialized(DType::boolean, {4 * kMiB});
  CHECK(psflow::buffer_cache_stats().hits == before.hits);
}

TEST_CASE("small buffers are recycled on the thread that freed them, 64-byte aligned") {
  const void* p = nullptr;
  { p = Tensor(DType::float32, {64}).raw_data(); }
  Tensor again(DType::float32, {60});  // 240 bytes: the same 256-byte class
  CHECK(again.raw_data() == p);
  for (float v : again.values<float>()) REQUIRE(v == 0.0f);
  for (std::size_t n : {5u, 15u, 16u, 17u, 1000u, 1024u, 1025u, 70000u, 300000u}) {
    Tensor t(DType::float32, {n});
    CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64 == 0);
  }
}

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// glibc's own heap only (the sanitizers' allocators hold freed memory back on purpose).
TEST_CASE("a block freed on another thread serves the next tensor of its size") {
  // A worker's I/O thread allocates each received tensor and the caller frees it. Blocks from
  // glibc's aligned allocation were never reused for a request of their own size, so the heap
  // grew by about a tensor a step (a 4 KiB ps step: 242 MB after 60000 steps, 14.5 MB now).
  for (std::size_t bytes : {1024u, 4096u, 16384u, 100000u}) {
    const void* first = nullptr;
    const void* second = nullptr;
    std::thread allocating([&] {
      std::vector<char> before(20000, 1);  // live neighbours: the freed block cannot merge away
      Tensor t(DType::float32, {floats(bytes)});
      std::vector<char> after(20000, 1);
      first = t.raw_data();
      std::thread([&t] { Tensor freed = std::move(t); }).join();
      const Tensor again(DType::float32, {floats(bytes)});
      second = again.raw_data();
    });
    allocating.join();
    INFO(bytes << " bytes");
    CHECK(first == second);
  }
}
#endif

TEST_CASE("a block its freeing thread cannot keep serves the next request of its size anywhere") {
  // The shelf, psflow's own (so also under the sanitizers): a 4 KiB block freed by a thread
  // whose own list of that size is full, and a 100000-byte block (no per-thread list), are
  // handed to the next request of their size on a third thread.
  for (std::size_t bytes : {4096u, 100000u}) {
    std::vector<Tensor> emptying;  // takes what earlier tests left on the shelf of this size
    std::thread([&] {
      for (int i = 0; i < 40; ++i)
        emptying.emplace_back(DType::float32, psflow::Shape{floats(bytes)});
    }).join();
    // One more 4 KiB block than a thread's own list keeps.
    const int count = bytes == 4096 ? 33 : 1;
    std::vector<Tensor> made;
    std::thread([&] {
      for (int i = 0; i < count; ++i)
        made.emplace_back(DType::float32, psflow::Shape{floats(bytes)});
    }).join();
    const void* last_freed = made.back().raw_data();
    std::thread([&] { made.clear(); }).join();  // frees in order: the last one is shelved
    const void* reused = nullptr;
    std::thread([&] { reused = Tensor(DType::float32, {floats(bytes)}).raw_data(); }).join();
    INFO(bytes << " bytes");
    CHECK(reused == last_freed);
  }
}

TEST_CASE("tensors freed by exiting threads and after them are returned cleanly") {
  // Run under AddressSanitizer this shows no leak and no use of a thread's freed list.
  std::vector<Tensor> made_elsewhere;
  std::thread worker([&] {
    std::vector<Tensor> local;
    for (int i = 0; i < 100; ++i)
      local.push_back(Tensor::from_vector(std::vector<float>(8, static_cast<float>(i)), {8}));
    made_elsewhere.assign(local.begin(), local.begin() + 50);
  });
  worker.join();
  CHECK(made_elsewhere[49].values<float>()[7] == 49.0f);
  made_elsewhere.clear();  // freed here, into this thread's list (or the heap once it is full)
  std::thread late([] {
    thread_local Tensor kept(DType::float32, {100});
    CHECK(kept.size() == 100);
  });
  late.join();
}

TEST_CASE("PSFLOW_BUFFER_CACHE_MB must be a whole number of MiB") {
  using psflow::detail::buffer_cache_limit_from;
  CHECK(buffer_cache_limit_from("0") == 0);
  CHECK(buffer_cache_limit_from("512") == std::size_t{512} << 20);
  for (const char* bad : {"", "lots", "12x", "-1", "1.5", "99999999999999999999"})
    CHECK_THROWS_AS(buffer_cache_limit_from(bad), psflow::InvalidArgument);
  CHECK_THROWS_WITH(buffer_cache_limit_from("lots"),
                    Catch::Contains("PSFLOW_BUFFER_CACHE_MB='lots'"));
}
