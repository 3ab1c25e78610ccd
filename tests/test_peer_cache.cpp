// PeerCache: the connection a task uses for a peer is the one the peer said hello on last, even
// while an older one still counts as open here (its close not read yet), and reading that older
// one's close later does not take the newer one away.
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "psflow/distributed/peer_cache.hpp"
#include "support/socket_pair.hpp"

using namespace psflow;
using psflow::detail::PeerCache;
using psflow::testing::socket_pair;

namespace {

const std::string kWorker = "/job:worker/replica:0/task:0";

// A ps's PeerCache that never connects by itself (no task has an address here).
PeerCache cache_of_a_ps(asio::io_context& io, const ServerOptions& options) {
  return PeerCache(
      io, options, "/job:ps/replica:0/task:0", 1,
      [](const std::string& task) -> std::string {
        throw NotFound("no address for " + task + " in this test");
      },
      [](const std::shared_ptr<Connection>&) {}, [](const std::string&) {});
}

}  // namespace

TEST_CASE("a peer's hello on a new connection replaces the one still counted open for it") {
  asio::io_context io;
  const ServerOptions options;
  PeerCache peers = cache_of_a_ps(io, options);
  auto [first_far, first_near] = socket_pair(io);
  auto [second_far, second_near] = socket_pair(io);
  auto first = std::make_shared<Connection>(std::move(first_near), wire::WireLimits{}, "first");
  auto second = std::make_shared<Connection>(std::move(second_near), wire::WireLimits{}, "second");

  peers.accept_hello(kWorker, first, 7);
  REQUIRE(peers.open_connection(kWorker) == first);
  // The worker gave the first connection up (it declared this task dead while it was frozen)
  // and said hello on a second one before this task read the first one's close.
  peers.accept_hello(kWorker, second, 7);
  REQUIRE(first->is_open());
  CHECK(peers.open_connection(kWorker) == second);
  // The first one's close, read late, leaves the second in use.
  peers.forget(first);
  CHECK(peers.open_connection(kWorker) == second);
  // A restarted worker's hello brings its new incarnation.
  auto [third_far, third_near] = socket_pair(io);
  auto third = std::make_shared<Connection>(std::move(third_near), wire::WireLimits{}, "third");
  peers.accept_hello(kWorker, third, 8);
  CHECK(peers.open_connection(kWorker) == third);
  CHECK(peers.incarnation(kWorker) == 8);
  for (auto* c : {&first, &second, &third}) (*c)->close(Status(ErrorCode::aborted, "test over"));
  io.poll();
}
