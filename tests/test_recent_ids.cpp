// RecentIds: remembers the last `capacity` ids (0 included), forgets the oldest first, and keeps
// every other member findable across the removals (checked against a reference model with ids
// chosen to collide in the table).
#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <random>
#include <set>
#include <stdexcept>

#include "psflow/runtime/recent_ids.hpp"

using psflow::detail::RecentIds;

TEST_CASE("ids are remembered until capacity newer ones came") {
  RecentIds ids(3);
  CHECK_FALSE(ids.contains(7));
  ids.add(7);
  ids.add(9);
  ids.add(7);  // already a member: not added twice
  CHECK(ids.size() == 2);
  ids.add(11);
  CHECK(ids.contains(7));
  ids.add(13);  // the fourth distinct id: 7, the oldest, is forgotten
  CHECK_FALSE(ids.contains(7));
  CHECK(ids.contains(9));
  CHECK(ids.contains(11));
  CHECK(ids.contains(13));
  CHECK(ids.size() == 3);
}

TEST_CASE("id 0 is remembered and forgotten like any other, and a capacity of 0 is refused") {
  // 0 marks the table's empty slots, so it is kept apart; a peer may still send step 0.
  RecentIds ids(2);
  CHECK_FALSE(ids.contains(0));
  ids.add(0);
  CHECK(ids.contains(0));
  ids.add(5);
  ids.add(0);  // already a member
  CHECK(ids.size() == 2);
  ids.add(6);  // forgets 0, the oldest
  CHECK_FALSE(ids.contains(0));
  CHECK(ids.contains(5));
  CHECK_THROWS_AS(RecentIds(0), std::invalid_argument);
}

TEST_CASE("membership matches a reference model through many evictions") {
  // Small ids and a small table: long probe runs that wrap around the table's end, so every
  // removal moves other members back.
  for (const std::uint64_t range : {40ull, 1000ull, ~0ull}) {
    RecentIds ids(16);
    std::deque<std::uint64_t> order;
    std::set<std::uint64_t> members;
    std::mt19937_64 rng(range);
    for (int step = 0; step < 20000; ++step) {
      const std::uint64_t id = rng() % range;  // 0 included
      ids.add(id);
      if (!members.count(id)) {
        if (order.size() == 16) {
          members.erase(order.front());
          order.pop_front();
        }
        order.push_back(id);
        members.insert(id);
      }
      const std::uint64_t probe = rng() % range;
      INFO("range " << range << ", step " << step << ", id " << probe);
      REQUIRE(ids.contains(probe) == (members.count(probe) == 1));
      REQUIRE(ids.size() == members.size());
    }
    for (const std::uint64_t id : members) CHECK(ids.contains(id));
  }
}
