// ChunkPool (runtime/chunk_pool.hpp): chunks of the asked size that never overlap, carved from
// 2 MiB blocks, reused after release, and handed out to many threads at once.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "psflow/runtime/chunk_pool.hpp"

using psflow::ChunkPool;

TEST_CASE("chunks are distinct, aligned, inside 2 MiB blocks, and released ones come back") {
  ChunkPool pool(12288);  // 128 rows of 96 bytes
  CHECK(pool.chunk_bytes() == 12288);
  CHECK(pool.bytes() == 0);
  std::vector<std::byte*> chunks;
  for (int i = 0; i < 400; ++i) {  // more than one block's 170 chunks
    chunks.push_back(pool.allocate());
    std::memset(chunks.back(), i & 0xff, pool.chunk_bytes());
  }
  CHECK(pool.bytes() == 3 * ChunkPool::kBlockBytes);
  std::set<std::byte*> distinct(chunks.begin(), chunks.end());
  CHECK(distinct.size() == chunks.size());
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    CHECK(reinterpret_cast<std::uintptr_t>(chunks[i]) % 64 == 0);
    // Every chunk still holds its own pattern: none overlaps another.
    CHECK(chunks[i][0] == static_cast<std::byte>(i & 0xff));
    CHECK(chunks[i][pool.chunk_bytes() - 1] == static_cast<std::byte>(i & 0xff));
  }
  pool.release(chunks[7]);
  CHECK(pool.allocate() == chunks[7]);
  CHECK(pool.bytes() == 3 * ChunkPool::kBlockBytes);  // reused, no new block
}

TEST_CASE("a chunk larger than a block gets blocks of its own size") {
  ChunkPool pool(3 << 20);
  std::byte* a = pool.allocate();
  std::byte* b = pool.allocate();
  CHECK(a != b);
  std::memset(a, 1, pool.chunk_bytes());
  std::memset(b, 2, pool.chunk_bytes());
  CHECK(a[pool.chunk_bytes() - 1] == std::byte{1});
  CHECK(pool.bytes() == 2 * (4u << 20));
}

TEST_CASE("4 threads allocate, write and release at once: no chunk is handed out twice") {
  ChunkPool pool(4096);
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::byte*> mine;
      for (int r = 0; r < kRounds; ++r) {
        std::byte* chunk = pool.allocate();
        std::memset(chunk, t + 1, pool.chunk_bytes());
        mine.push_back(chunk);
        if (r % 3 == 2) {  // give some back while others allocate
          pool.release(mine.front());
          mine.erase(mine.begin());
        }
      }
      for (std::byte* chunk : mine)
        if (chunk[0] != static_cast<std::byte>(t + 1) ||
            chunk[pool.chunk_bytes() - 1] != static_cast<std::byte>(t + 1))
          ++bad[static_cast<std::size_t>(t)];
    });
  for (auto& th : threads) th.join();
  CHECK(bad == std::vector<int>(kThreads, 0));
}
