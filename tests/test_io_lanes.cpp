// IoLanes: a new connection goes to the lane with the fewest open connections (ties in turn);
// each lane runs on a thread of its own, and lane_of names the lane of an executor; after
// stop_and_join, drain runs what the lanes still hold, including work one lane posts to another.
#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "psflow/distributed/io_lanes.hpp"

using psflow::detail::IoLanes;
namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST_CASE("a new connection goes to the lane with the fewest open connections, ties in turn") {
  IoLanes lanes(3);
  REQUIRE(lanes.size() == 3);
  // Nothing open yet: connections still being set up are not counted, so ties go round.
  CHECK(lanes.pick({0, 0, 0}) == 0);
  CHECK(lanes.pick({0, 0, 0}) == 1);
  CHECK(lanes.pick({0, 0, 0}) == 2);
  CHECK(lanes.pick({0, 0, 0}) == 0);
  // The fewest wins wherever the turn is.
  CHECK(lanes.pick({4, 0, 3}) == 1);
  CHECK(lanes.pick({0, 5, 5}) == 0);
  CHECK(lanes.pick({2, 2, 1}) == 2);
  // A tie between lanes 0 and 1 after lane 2 was picked: the turn is at lane 0.
  CHECK(lanes.pick({1, 1, 2}) == 0);
  CHECK(lanes.pick({1, 1, 2}) == 1);
  // One count per lane, no fewer and no more.
  CHECK_THROWS_AS(lanes.pick({0, 0}), std::invalid_argument);
  CHECK_THROWS_AS(lanes.pick({0, 0, 0, 0}), std::invalid_argument);
}

TEST_CASE("IoLanes of 0 has one lane") {
  IoLanes lanes(0);
  CHECK(lanes.size() == 1);
  CHECK(lanes.pick({7}) == 0);
}

TEST_CASE("each lane runs on a thread of its own, and lane_of names an executor's lane") {
  IoLanes lanes(3);
  std::vector<std::promise<std::thread::id>> started(3);
  lanes.start([&](std::size_t lane) { started[lane].set_value(std::this_thread::get_id()); });
  std::vector<std::thread::id> threads;
  for (auto& s : started) {
    auto f = s.get_future();
    REQUIRE(f.wait_for(20s) == std::future_status::ready);
    threads.push_back(f.get());
  }
  CHECK(std::set<std::thread::id>(threads.begin(), threads.end()).size() == 3);
  for (std::size_t lane = 0; lane < 3; ++lane) {
    // Work on a strand of the lane (as a connection's) runs on that lane's thread.
    const auto strand = asio::make_strand(lanes.context(lane));
    CHECK(lanes.lane_of(strand.get_inner_executor()) == lane);
    // An outgoing connection's strand nests inside its connect attempt's strand.
    const auto nested = asio::make_strand(asio::any_io_executor(strand));
    CHECK(lanes.lane_of(nested.get_inner_executor()) == lane);
    std::promise<std::thread::id> ran;
    asio::post(strand, [&] { ran.set_value(std::this_thread::get_id()); });
    auto f = ran.get_future();
    REQUIRE(f.wait_for(20s) == std::future_status::ready);
    CHECK(f.get() == threads[lane]);
  }
  CHECK(&lanes.main() == &lanes.context(0));
  asio::io_context elsewhere;
  CHECK(lanes.lane_of(elsewhere.get_executor()) == lanes.size());
  lanes.stop_and_join();
  lanes.stop_and_join();  // idempotent
}

TEST_CASE("after stop_and_join, drain runs what the lanes hold, also work posted across lanes") {
  IoLanes lanes(2);
  lanes.start([](std::size_t) {});
  lanes.stop_and_join();
  std::atomic<int> ran{0};
  // As a connection's close on lane 1 might hand its last step to lane 0.
  asio::post(lanes.context(1), [&] {
    ++ran;
    asio::post(lanes.context(0), [&] {
      ++ran;
      asio::post(lanes.context(1), [&] { ++ran; });
    });
  });
  lanes.drain();
  CHECK(ran.load() == 3);
}

TEST_CASE("lanes are destroyed safely while one lane's queued work owns another lane's timer") {
  auto lanes = std::make_unique<IoLanes>(2);
  lanes->start([](std::size_t) {});
  lanes->stop_and_join();
  // A wait on lane 0 that never ends, and a handler queued on lane 1 that owns its timer (as a
  // handler can own a connection whose socket is on another lane). Under AddressSanitizer,
  // destroying lane 0 before lane 1's queue is a use after free.
  auto on_lane_0 = std::make_shared<asio::steady_timer>(lanes->context(0), 1h);
  on_lane_0->async_wait([](const boost::system::error_code&) {});
  asio::post(lanes->context(1), [on_lane_0] { on_lane_0->cancel(); });
  std::weak_ptr<asio::steady_timer> watched = on_lane_0;
  on_lane_0.reset();
  REQUIRE_FALSE(watched.expired());
  lanes.reset();
  CHECK(watched.expired());
}
