// Addresses as deployments need them and cluster authentication: host:port splitting with IPv6
// brackets; listening on every interface (bind_address); an IPv6 loopback cluster; a host name
// that never resolves; the shared cluster secret's handshake (the right secret gets in, none or
// another is refused at once with Unauthenticated and logged with the peer's address, a stop
// request from a stranger is never obeyed); and the add/mul/div demo as real processes with
// --secret_file.
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "psflow/core/log.hpp"
#include "psflow/distributed/cluster_auth.hpp"
#include "psflow/distributed/host_port.hpp"
#include "psflow/distributed/master_session.hpp"
#include "psflow/distributed/server.hpp"
#include "psflow/distributed/server_core.hpp"
#include "psflow/distributed/task_flags.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/train/monitored_session.hpp"
#include "support/child_process.hpp"
#include "support/connect_outcome.hpp"
#include "support/demo_command.hpp"
#include "support/error_message.hpp"
#include "support/files.hpp"
#include "support/log_capture.hpp"
#include "support/temp_dir.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using psflow::testing::check_refused_quickly;
using psflow::testing::ChildProcess;
using psflow::testing::connect_outcome;
using psflow::testing::ConnectOutcome;
using psflow::testing::LogCapture;
using psflow::testing::loopback;
using psflow::testing::reserve_port;
using psflow::testing::TempDir;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kPs = "/job:ps/replica:0/task:0";

ServerOptions options_with(const std::string& secret, bool log = false) {
  ServerOptions options;
  options.cluster_secret = secret;
  options.connect_timeout = 20s;  // long: a refusal must not wait for it
  options.rpc_timeout = 10s;
  options.log = log;
  return options;
}

// Reads exactly `n` bytes from a blocking socket within 10 s; "" on failure.
std::string read_bytes(tcp::socket& socket, std::size_t n) {
  std::string bytes(n, '\0');
  std::size_t got = 0;
  const auto deadline = Clock::now() + 10s;
  while (got < n && Clock::now() < deadline) {
    pollfd p{socket.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t r = ::recv(socket.native_handle(), bytes.data() + got, n - got, 0);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got == n ? bytes : std::string();
}

// A port free on the IPv6 loopback a moment ago; 0 when there is no ::1.
unsigned short reserve_ipv6_port() {
  asio::io_context io;
  boost::system::error_code ec;
  tcp::acceptor acceptor(io);
  acceptor.open(tcp::v6(), ec);
  if (!ec) acceptor.bind({asio::ip::make_address("::1"), 0}, ec);
  return ec ? 0 : acceptor.local_endpoint().port();
}

std::string expected_demo_output() {
  std::ifstream file(std::string(PSFLOW_SOURCE_DIR) + "/examples/add_mul_div/expected_output.txt");
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("split_host_port strips IPv6 brackets, join_host_port puts them back") {
  using detail::split_host_port;
  CHECK(split_host_port("h0:2222").host == "h0");
  CHECK(split_host_port("h0:2222").port == "2222");
  CHECK(split_host_port("10.0.0.1:0").host == "10.0.0.1");
  CHECK(split_host_port("[::1]:2222").host == "::1");
  CHECK(split_host_port("[::1]:2222").port == "2222");
  CHECK(split_host_port("[fd00::2]:1").host == "fd00::2");
  CHECK(split_host_port("[ps-0.ps.default.svc]:2222").host == "ps-0.ps.default.svc");
  CHECK(detail::join_host_port("::1", "2222") == "[::1]:2222");
  CHECK(detail::join_host_port("h0", "2222") == "h0:2222");
  CHECK(detail::join_host_port(split_host_port("[::1]:7").host, "7") == "[::1]:7");
  CHECK(detail::is_any_address("0.0.0.0"));
  CHECK(detail::is_any_address("::"));
  CHECK(detail::is_any_address("[::]"));
  CHECK_FALSE(detail::is_any_address("127.0.0.1"));
}

TEST_CASE("split_host_port rejects malformed brackets and ports with InvalidArgument") {
  using psflow::testing::invalid_argument_message;
  auto message = [](const std::string& address) {
    return invalid_argument_message([&] { detail::split_host_port(address); });
  };
  CHECK_THAT(message("[::1:2222"), Catch::Contains("'[' without its ']'"));
  CHECK_THAT(message("[10.0.0.1:2222"), Catch::Contains("'[' without its ']'"));
  CHECK_THAT(message("::1]:2222"), Catch::Contains("']' without its '['"));
  CHECK_THAT(message("[::1]x:2222"), Catch::Contains("'[' without its ']'"));
  CHECK_THAT(message("[]:2222"), Catch::Contains("empty host"));
  CHECK_THAT(message("a[b]:2222"), Catch::Contains("']' without its '['"));
  CHECK_THAT(message("a[b]c:2222"), Catch::Contains("misplaced brackets"));
  CHECK_THAT(message("[a]b]:2222"), Catch::Contains("misplaced brackets"));
  CHECK_THAT(message("::1:2222"), Catch::Contains("IPv6 address without brackets"));
  CHECK_THAT(message("h0"), Catch::Contains("has no port"));
  CHECK_THAT(message("h0:"), Catch::Contains("empty port"));
  CHECK_THAT(message("h0:http"), Catch::Contains("not a number"));
  CHECK_THAT(message("[::1]"), Catch::Contains("[ipv6]:port"));
  // The cluster spec rejects them too, naming the task.
  CHECK_THAT(invalid_argument_message([] {
               ClusterSpec({{"ps", {"[10.0.0.1:2222"}}});
             }),
             Catch::Contains("/job:ps/task:0"));
  CHECK_NOTHROW(ClusterSpec({{"ps", {"[::1]:2222"}}}));
}

TEST_CASE("a task listening on bind_address 0.0.0.0 is reached through another local address") {
  // The cluster says 127.0.0.2; only a listener on every interface answers on 127.0.0.1 too.
  const unsigned short port = reserve_port();
  const std::string address = "127.0.0.2:" + std::to_string(port);
  ServerOptions options = options_with("");
  options.bind_address = "0.0.0.0";
  Server ps(ClusterSpec({{"ps", {address}}}), "ps", 0, options);
  CHECK(ps.target() == "psflow://" + address);
  asio::io_context io;
  for (const char* host : {"127.0.0.1", "127.0.0.2"}) {
    INFO("connecting to " << host);
    tcp::socket socket(io);
    boost::system::error_code ec;
    socket.connect({asio::ip::make_address(host), port}, ec);
    REQUIRE_FALSE(ec);
    CHECK(read_bytes(socket, 4) == "PSFA");  // the handshake's greeting
  }
  // A member connects through the cluster address as usual.
  Server worker(ClusterSpec({{"ps", {address}}, {"worker", {loopback(reserve_port())}}}), "worker",
                0, options_with(""));
  CHECK(worker.core().peer_incarnation(kPs) == ps.incarnation());

  // Without bind_address the task listens on its cluster address only.
  const unsigned short port2 = reserve_port();
  Server exact(ClusterSpec({{"ps", {"127.0.0.2:" + std::to_string(port2)}}}), "ps", 0,
               options_with(""));
  tcp::socket socket(io);
  boost::system::error_code ec;
  socket.connect({asio::ip::make_address("127.0.0.1"), port2}, ec);
  CHECK(ec);
}

TEST_CASE("TaskFlags --bind_all and --secret_file make the task's ServerOptions") {
  TempDir dir("flags");
  psflow::testing::write_file(dir / "secret", "s3cret-value\n");
  const std::vector<std::string> base{"prog", "--ps_hosts=127.0.0.1:2222",
                                      "--worker_hosts=[::1]:2223", "--job_name=ps"};
  auto with = [&](std::vector<std::string> extra, std::string job = "ps") {
    std::vector<std::string> args = base;
    args[3] = "--job_name=" + job;
    args.insert(args.end(), extra.begin(), extra.end());
    return TaskFlags::parse(args, std::nullopt);
  };
  const TaskFlags plain = with({});
  CHECK_FALSE(plain.bind_all);
  CHECK(plain.server_options().bind_address.empty());
  const TaskFlags all = with({"--bind_all", "--secret_file=" + dir / "secret", "--other"});
  CHECK(all.bind_all);
  CHECK(all.server_options().bind_address == "0.0.0.0");
  CHECK(all.server_options().cluster_secret == "s3cret-value");
  CHECK(all.remaining_args == std::vector<std::string>{"prog", "--other"});
  CHECK(with({"--bind_all"}, "worker").server_options().bind_address == "::");  // an IPv6 task
  CHECK_FALSE(with({"--bind_all=false"}).bind_all);
  CHECK_THROWS_AS(with({"--bind_all=maybe"}), InvalidArgument);
  CHECK_THROWS_WITH(with({"--secret_file=" + dir / "missing"}).server_options(),
                    Catch::Contains("cannot read --secret_file"));
  psflow::testing::write_file(dir / "empty", "");
  CHECK_THROWS_WITH(with({"--secret_file", dir / "empty"}).server_options(),
                    Catch::Contains("is empty"));
}

TEST_CASE("a default ServerOptions takes its cluster secret from PSFLOW_CLUSTER_SECRET") {
  ::setenv("PSFLOW_CLUSTER_SECRET", "from-the-environment", 1);
  const ServerOptions set;
  ::unsetenv("PSFLOW_CLUSTER_SECRET");
  const ServerOptions unset;
  CHECK(set.cluster_secret == "from-the-environment");
  CHECK(unset.cluster_secret.empty());
}

TEST_CASE("a cluster on the IPv6 loopback [::1] works") {
  const unsigned short ps_port = reserve_ipv6_port(), worker_port = reserve_ipv6_port();
  if (ps_port == 0 || worker_port == 0)
    FAIL("this machine has no IPv6 loopback (::1): psflow's IPv6 support cannot be tested");
  const std::string ps_address = "[::1]:" + std::to_string(ps_port);
  const ClusterSpec cluster(
      {{"ps", {ps_address}}, {"worker", {"[::1]:" + std::to_string(worker_port)}}});
  Server ps(cluster, "ps", 0, options_with("v6"));
  Server worker(cluster, "worker", 0, options_with("v6"));
  CHECK(ps.target() == "psflow://" + ps_address);
  CHECK(ServerCore::find_local(ps.target()) == &ps.core());
  CHECK(worker.core().peer_incarnation(kPs) == ps.incarnation());
  CHECK(worker.stop_task("ps", 0, 5s));
  ps.join();
}

TEST_CASE("a host name that never resolves fails within connect_timeout with a clear error") {
  ServerOptions options = options_with("");
  options.connect_timeout = 2s;
  Server worker(
      ClusterSpec({{"ps", {"no-such-host.invalid:2222"}}, {"worker", {loopback(reserve_port())}}}),
      "worker", 0, options);
  const ConnectOutcome outcome = connect_outcome(worker, kPs);
  INFO(outcome.what);
  CHECK_THAT(outcome.what,
             Catch::StartsWith("Unavailable: could not resolve host no-such-host.invalid for "
                               "task /job:ps/replica:0/task:0 after "));
  CHECK_THAT(
      outcome.what,
      Catch::EndsWith("check the host name in the cluster spec (and that its DNS record exists)"));
  CHECK(outcome.took >= 2s);  // it kept trying: records appear late
  CHECK(outcome.took < 20s);  // and gave up at its deadline (generous: a loaded machine)
}

TEST_CASE("the handshake's proofs depend on the secret, both nonces and the role") {
  const auto a = detail::random_nonce(), b = detail::random_nonce();
  CHECK_FALSE(detail::same_proof(a, b));
  using detail::AuthRole;
  const auto proof = detail::auth_proof("secret", AuthRole::client, a, b);
  CHECK(detail::same_proof(proof, detail::auth_proof("secret", AuthRole::client, a, b)));
  CHECK_FALSE(detail::same_proof(proof, detail::auth_proof("secret", AuthRole::server, a, b)));
  CHECK_FALSE(detail::same_proof(proof, detail::auth_proof("secret", AuthRole::client, b, a)));
  CHECK_FALSE(detail::same_proof(proof, detail::auth_proof("Secret", AuthRole::client, a, b)));
}

TEST_CASE("tasks with the same cluster secret talk, stop_server included") {
  const ClusterSpec cluster(
      {{"ps", {loopback(reserve_port())}}, {"worker", {loopback(reserve_port())}}});
  Server ps(cluster, "ps", 0, options_with("the-shared-secret"));
  Server worker(cluster, "worker", 0, options_with("the-shared-secret"));
  CHECK(worker.core().peer_incarnation(kPs) == ps.incarnation());
  // The ps connects back over its own connection too.
  CHECK(ps.core().peer_incarnation("/job:worker/replica:0/task:0") == worker.incarnation());
  CHECK(worker.stop_task("ps", 0, 5s));
  ps.join();
}

TEST_CASE("no secret or a wrong one is refused at once with Unauthenticated, logged by address") {
  LogCapture log;
  const std::string ps_address = loopback(reserve_port());
  const ClusterSpec cluster({{"ps", {ps_address}}, {"worker", {loopback(reserve_port())}}});
  Server ps(cluster, "ps", 0, options_with("the-right-secret", /*log=*/true));

  SECTION("no secret") {
    Server worker(cluster, "worker", 0, options_with(""));
    const ConnectOutcome outcome = connect_outcome(worker, kPs);
    check_refused_quickly(
        outcome, kPs + " at " + ps_address + " requires a cluster secret and this task has none",
        log);
    CHECK_THAT(log.text(), Catch::Contains("it has no cluster secret but this task has one"));
    CHECK_FALSE(worker.stop_task("ps", 0, 2s));
  }
  SECTION("a wrong secret") {
    Server worker(cluster, "worker", 0, options_with("a-wrong-secret"));
    const ConnectOutcome outcome = connect_outcome(worker, kPs);
    check_refused_quickly(outcome, "rejected this task's cluster secret (the secrets differ)", log);
    CHECK_THAT(log.text(), Catch::Contains("its cluster secret differs from this task's"));
    CHECK_FALSE(worker.stop_task("ps", 0, 2s));
  }
  // The refusals the worker saw came from the ps's handshake, which reads no frame on a
  // connection it refused: no stop request could reach it.
  CHECK_FALSE(ps.stopped());
  INFO(log.text());
  // A member still gets in afterwards.
  Server member(cluster, "worker", 0, options_with("the-right-secret"));
  CHECK(member.stop_task("ps", 0, 5s));
  ps.join();
}

TEST_CASE("MonitoredTrainingSession does not retry Unauthenticated: it fails at once") {
  const ClusterSpec cluster(
      {{"ps", {loopback(reserve_port())}}, {"worker", {loopback(reserve_port())}}});
  Server ps(cluster, "ps", 0, options_with("the-ps-secret"));
  Server worker(cluster, "worker", 0, options_with("the-worker-secret"));
  Graph g;
  {
    auto on_ps = g.device("/job:ps/task:0");
    get_variable(g, "v", {2}, constant_initializer(1));
  }
  train::MonitoredTrainingSessionOptions options;
  options.master = worker.target();
  options.recovery_deadline_secs = 60;  // retried, it would take a minute
  options.log_step_count_steps = 0;
  const auto start = Clock::now();
  CHECK_THROWS_AS(train::MonitoredTrainingSession(g, options), Unauthenticated);
  CHECK(Clock::now() - start < 20s);
  ps.stop();
}

TEST_CASE(
    "a client that says nothing is dropped after the handshake timeout, logged, a probe not") {
  LogCapture log;
  const std::string ps_address = loopback(reserve_port());
  ServerOptions options = options_with("the-right-secret", /*log=*/true);
  options.handshake_timeout = 300ms;
  Server ps(ClusterSpec({{"ps", {ps_address}}}), "ps", 0, options);
  asio::io_context io;
  const auto host_port = detail::split_host_port(ps_address);
  const tcp::endpoint endpoint(asio::ip::make_address(host_port.host),
                               static_cast<unsigned short>(std::stoi(host_port.port)));
  {
    // A port probe (run_local_cluster.sh's "is it up?") closes without a word: not logged.
    tcp::socket probe(io);
    probe.connect(endpoint);
    probe.shutdown(tcp::socket::shutdown_send);
    // The ps closes its end once it has handled the probe (and logs right then, if it does).
    boost::system::error_code ec;
    std::array<char, 64> sink{};
    while (!ec) probe.read_some(asio::buffer(sink), ec);
  }
  tcp::socket socket(io);
  socket.connect(endpoint);
  const std::string silent_client =
      "rejected client 127.0.0.1:" + std::to_string(socket.local_endpoint().port());
  CHECK(read_bytes(socket, 40).substr(0, 4) == "PSFA");  // the greeting, then nothing
  CHECK(log.wait_for("no handshake within 0.3 s"));
  CHECK_THAT(log.text(), Catch::Contains(silent_client));
  CHECK(read_bytes(socket, 1).empty());  // closed
  // The probe, handled long before, left no line: the one rejection is the silent client's.
  const std::string text = log.text();
  CHECK(text.find("rejected") == text.rfind("rejected"));
}

TEST_CASE("a client with a secret is refused by a task without one") {
  LogCapture log;
  const ClusterSpec cluster(
      {{"ps", {loopback(reserve_port())}}, {"worker", {loopback(reserve_port())}}});
  Server ps(cluster, "ps", 0, options_with("", /*log=*/true));
  Server worker(cluster, "worker", 0, options_with("only-the-worker-has-one"));
  const ConnectOutcome outcome = connect_outcome(worker, kPs);
  check_refused_quickly(outcome, "this task has a cluster secret but " + kPs, log);
  CHECK_THAT(log.text(), Catch::Contains("it has a cluster secret but this task has none"));
}

TEST_CASE("a stop_server frame from a client that skipped the handshake is not obeyed") {
  LogCapture log;
  const std::string ps_address = loopback(reserve_port());
  const ClusterSpec cluster({{"ps", {ps_address}}});
  Server ps(cluster, "ps", 0, options_with("the-right-secret", /*log=*/true));
  // A stranger sends a well-formed stop_server frame as its very first bytes.
  const wire::Frame frame =
      wire::make_frame(wire::MessageType::stop_server, wire::StopServer{"requested by a stranger"});
  const std::string table = wire::encode_tensor_table(frame.tensors);
  std::string bytes(wire::kHeaderBytes, '\0');
  wire::encode_header(wire::frame_header(frame, table.size()),
                      reinterpret_cast<unsigned char*>(bytes.data()));
  bytes += frame.metadata + table;
  bytes.resize(std::max<std::size_t>(bytes.size(), 128), '\0');  // more than a client greeting
  asio::io_context io;
  tcp::socket socket(io);
  const auto host_port = detail::split_host_port(ps_address);
  socket.connect({asio::ip::make_address(host_port.host),
                  static_cast<unsigned short>(std::stoi(host_port.port))});
  CHECK(read_bytes(socket, 4) == "PSFA");
  asio::write(socket, asio::buffer(bytes));
  CHECK(log.wait_for("rejected client 127.0.0.1:"));
  CHECK_THAT(log.text(), Catch::Contains("does not speak psflow's handshake"));
  // The ps logs a rejection after closing the socket: the frame after the greeting can never
  // be read now.
  CHECK_FALSE(ps.stopped());
  CHECK_THAT(log.text(), !Catch::Contains("asked to stop"));
  ps.stop();
}

TEST_CASE(
    "the add/mul/div demo with --secret_file: a wrong or no secret fails fast, the right "
    "one prints the seed's output") {
  if (std::string(PSFLOW_DEMO_BINARY).empty())
    FAIL("configure with PSFLOW_BUILD_EXAMPLES=ON to run the demo test");
  REQUIRE(std::getenv("PSFLOW_CLUSTER_SECRET") == nullptr);  // the children inherit it
  TempDir dir("demo_auth");
  psflow::testing::write_file(dir / "right", "the-cluster-secret\n");
  psflow::testing::write_file(dir / "wrong", "another-secret\n");
  const std::string ps_host = loopback(reserve_port()), worker_host = loopback(reserve_port());
  auto args = [&](const std::string& job, std::vector<std::string> extra) {
    extra.push_back("--interval_ms=0");
    return psflow::testing::demo_command(PSFLOW_DEMO_BINARY, job, ps_host, worker_host,
                                         dir / "simple_log", extra);
  };
  ChildProcess ps(args("ps", {"--secret_file=" + dir / "right"}), dir / "ps");

  for (const std::string secret : {"", "wrong"}) {
    INFO("worker secret: " << (secret.empty() ? "none" : secret));
    const auto start = Clock::now();
    ChildProcess worker(
        args("worker", secret.empty() ? std::vector<std::string>{}
                                      : std::vector<std::string>{"--secret_file=" + dir / secret}),
        dir / ("worker_" + (secret.empty() ? std::string("none") : secret)));
    REQUIRE(worker.wait_for(60s));
    INFO("worker stderr:\n" << worker.err());
    CHECK(Clock::now() - start < 20s);  // --connect_timeout_s is 30: it did not wait for it
    CHECK(worker.exit_code() != 0);
    CHECK_THAT(worker.err(), Catch::Contains("Unauthenticated: "));
    CHECK_THAT(worker.err(), Catch::Contains("cluster secret"));
    CHECK(worker.out().empty());
    CHECK(ps.running());
  }
  ChildProcess worker(args("worker", {"--secret_file=" + dir / "right"}), dir / "worker_right");
  REQUIRE(worker.wait_for(60s));
  REQUIRE(ps.wait_for(20s));
  INFO("worker stderr:\n" << worker.err() << "\nps stderr:\n" << ps.err());
  CHECK(worker.exit_code() == 0);
  CHECK(ps.exit_code() == 0);
  CHECK(worker.out() == expected_demo_output());
  CHECK_THAT(ps.err(), Catch::Contains("rejected client 127.0.0.1:"));
  CHECK_THAT(ps.err(), Catch::Contains("it has no cluster secret but this task has one"));
  CHECK_THAT(ps.err(), Catch::Contains("its cluster secret differs from this task's"));
}
