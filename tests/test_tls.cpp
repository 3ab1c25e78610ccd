// Mutual TLS between tasks (distributed/tls.hpp, docs/security.md): certificates made at test
// time with the openssl command (a cluster CA, task certificates, a foreign CA and a certificate
// it signed). Two TLS tasks run a distributed graph; a certificate from another CA is refused
// at once with Unauthenticated and logged; a plain task and a TLS task fail each other within
// their deadlines; half-given or unusable files are InvalidArgument naming the file; TLS and the
// cluster secret work together; heartbeats keep a quiet TLS connection alive.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "psflow/core/log.hpp"
#include "psflow/distributed/server.hpp"
#include "psflow/distributed/server_core.hpp"
#include "psflow/distributed/task_flags.hpp"
#include "psflow/distributed/tls.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/psflow.hpp"
#include "support/child_process.hpp"
#include "support/connect_outcome.hpp"
#include "support/files.hpp"
#include "support/log_capture.hpp"
#include "support/temp_dir.hpp"
#include "support/tls_certs.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using psflow::testing::check_refused_quickly;
using psflow::testing::connect_outcome;
using psflow::testing::ConnectOutcome;
using psflow::testing::LogCapture;
using psflow::testing::loopback;
using psflow::testing::reserve_port;
using psflow::testing::TempDir;
using psflow::testing::TlsCerts;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kPs = "/job:ps/replica:0/task:0";
const std::string kWorker = "/job:worker/replica:0/task:0";

// One set of certificates for the whole run: "ca" signs "ps" and "worker"; "foreign_ca" signs
// "stranger".
struct Pki {
  TempDir dir{"tls"};
  TlsCerts certs{dir.path()};
  Pki() {
    certs.make_ca("ca");
    certs.make_cert("ps", "ca");
    certs.make_cert("worker", "ca");
    certs.make_ca("foreign_ca");
    certs.make_cert("stranger", "foreign_ca");
  }
};
const Pki& pki() {
  static const Pki made;
  return made;
}

ServerOptions quiet(bool log = false) {
  ServerOptions options;
  options.cluster_secret = "";
  options.connect_timeout = 20s;  // long: a refusal must not wait for it
  options.rpc_timeout = 10s;
  options.log = log;
  return options;
}

ServerOptions tls(const std::string& name, const std::string& ca = "ca", bool log = false) {
  return pki().certs.with_tls(quiet(log), name, ca);
}

ClusterSpec two_tasks() {
  return ClusterSpec({{"ps", {loopback(reserve_port())}}, {"worker", {loopback(reserve_port())}}});
}

// A variable on the ps that the worker pushes to and pulls back: `n` floats.
struct PushPull {
  Graph g;
  Output grad, update;
  explicit PushPull(std::size_t n) {
    Variable v;
    {
      auto on_ps = g.device("/job:ps/task:0");
      v = get_variable(g, "v", {n}, constant_initializer(1));
    }
    {
      auto on_worker = g.device("/job:worker/task:0");
      grad = ops::placeholder(g, DType::float32, {static_cast<std::int64_t>(n)}, "grad");
    }
    auto with_v = g.colocate_with(v.op());
    update = v.assign_add(grad);
  }
};

}  // namespace

TEST_CASE("two tasks with mutual TLS push and pull tensors through a distributed graph") {
  const ClusterSpec cluster = two_tasks();
  Server ps(cluster, "ps", 0, tls("ps"));
  Server worker(cluster, "worker", 0, tls("worker"));
  CHECK(worker.core().connect(kPs)->uses_tls());

  const std::size_t n = 300000;  // 1.2 MB each way: many TLS records
  PushPull model(n);
  Session session(model.g, worker.target());
  session.run(global_variables_initializer(model.g));
  const FeedMap feeds{{model.grad, Tensor::filled(0.5f, {n})}};
  for (int step = 1; step <= 3; ++step) {
    const auto out = session.run({model.update}, feeds);
    REQUIRE(out.size() == 1);
    CHECK(out[0].equals(Tensor::filled(1.0f + 0.5f * static_cast<float>(step), {n})));
  }
  CHECK(worker.stop_task("ps", 0, 5s));
  ps.join();
}

TEST_CASE("heartbeats keep a quiet TLS connection alive") {
  const ClusterSpec cluster = two_tasks();
  ServerOptions ps_options = tls("ps"), worker_options = tls("worker");
  ps_options.heartbeat_timeout = worker_options.heartbeat_timeout = 400ms;
  Server ps(cluster, "ps", 0, ps_options);
  Server worker(cluster, "worker", 0, worker_options);
  const auto connection = worker.core().connect(kPs);
  REQUIRE(connection->uses_tls());
  std::this_thread::sleep_for(1500ms);  // nearly four timeouts with nothing else said
  CHECK(connection->is_open());
  CHECK(worker.core().open_connection(kPs) == connection);
  CHECK(worker.stop_task("ps", 0, 5s));
  ps.join();
}

TEST_CASE("a task whose certificate another CA signed is refused at once, logged by address") {
  LogCapture log;
  const ClusterSpec cluster = two_tasks();
  Server ps(cluster, "ps", 0, tls("ps", "ca", /*log=*/true));

  SECTION("its own certificate is foreign: the ps refuses it") {
    Server worker(cluster, "worker", 0, tls("stranger", "ca"));
    const ConnectOutcome outcome = connect_outcome(worker, kPs);
    check_refused_quickly(
        outcome, kPs + " at " + cluster.task_address("ps", 0) + " refused this task over TLS", log);
    CHECK_THAT(outcome.what, Catch::Contains("--tls_ca"));
    CHECK_THAT(log.text(), Catch::Contains("TLS handshake failed"));
    CHECK_FALSE(worker.stop_task("ps", 0, 2s));
  }
  SECTION("it trusts another CA: it refuses the ps") {
    Server worker(cluster, "worker", 0, tls("stranger", "foreign_ca"));
    const ConnectOutcome outcome = connect_outcome(worker, kPs);
    check_refused_quickly(outcome, "TLS handshake with " + kPs, log);
    CHECK_THAT(outcome.what, Catch::Contains("certificate verify failed"));
  }
  // No worker got past the TLS handshake, so none ever sent the ps a frame: nothing could stop
  // it.
  CHECK_FALSE(ps.stopped());
  INFO(log.text());
  // A member still gets in afterwards.
  Server member(cluster, "worker", 0, tls("worker"));
  CHECK(member.stop_task("ps", 0, 5s));
  ps.join();
}

TEST_CASE("a plain task and a TLS task fail each other within their deadlines") {
  LogCapture log;
  const ClusterSpec cluster = two_tasks();

  SECTION("a plain client at a TLS task: no handshake, cut after the handshake timeout") {
    ServerOptions ps_options = tls("ps", "ca", /*log=*/true);
    ps_options.handshake_timeout = 300ms;
    Server ps(cluster, "ps", 0, ps_options);
    ServerOptions plain = quiet();
    plain.handshake_timeout = 1s;  // longer: the TLS task gives up first, and logs it
    plain.connect_timeout = 1500ms;
    Server worker(cluster, "worker", 0, plain);
    const ConnectOutcome outcome = connect_outcome(worker, kPs);
    INFO(outcome.what);
    CHECK(outcome.code == ErrorCode::unavailable);
    CHECK(outcome.took < 10s);
    // The last attempt's reason, unless the connect deadline cut an attempt in flight.
    CHECK_THAT(outcome.what, Catch::Contains("this one needs --tls_cert, --tls_key and --tls_ca") ||
                                 Catch::Contains("no answer within the connect timeout"));
    CHECK(log.wait_for("no TLS handshake within 0.3 s"));
    CHECK_THAT(log.text(), Catch::Contains("rejected client 127.0.0.1:"));
  }
  SECTION("a TLS client at a plain task: refused at once") {
    Server ps(cluster, "ps", 0, quiet(/*log=*/true));
    Server worker(cluster, "worker", 0, tls("worker"));
    const ConnectOutcome outcome = connect_outcome(worker, kPs);
    check_refused_quickly(outcome, "TLS handshake with " + kPs, log);
    CHECK_THAT(log.text(), Catch::Contains("does not speak psflow's handshake"));
  }
}

TEST_CASE("TLS and a cluster secret together: members pass, a wrong secret is still refused") {
  LogCapture log;
  const ClusterSpec cluster = two_tasks();
  ServerOptions ps_options = tls("ps", "ca", /*log=*/true);
  ps_options.cluster_secret = "the-shared-secret";
  Server ps(cluster, "ps", 0, ps_options);
  {
    ServerOptions wrong = tls("worker");
    wrong.cluster_secret = "a-wrong-secret";
    Server worker(cluster, "worker", 0, wrong);
    const ConnectOutcome outcome = connect_outcome(worker, kPs);
    INFO(outcome.what);
    CHECK(outcome.code == ErrorCode::unauthenticated);
    CHECK_THAT(outcome.what, Catch::Contains("rejected this task's cluster secret"));
    CHECK(log.wait_for("its cluster secret differs from this task's"));
  }
  ServerOptions member = tls("worker");
  member.cluster_secret = "the-shared-secret";
  Server worker(cluster, "worker", 0, member);
  CHECK(worker.core().peer_incarnation(kPs) == ps.incarnation());
  CHECK(ps.core().peer_incarnation(kWorker) == worker.incarnation());  // and back, over TLS too
  CHECK(worker.core().connect(kPs)->uses_tls());
  CHECK(worker.stop_task("ps", 0, 5s));
  ps.join();
}

TEST_CASE("half-given TLS options are InvalidArgument naming what is missing") {
  const ClusterSpec cluster({{"ps", {loopback(reserve_port())}}});
  ServerOptions options = quiet();
  options.tls_cert_file = pki().certs.pem("ps");
  CHECK_THROWS_AS(Server(cluster, "ps", 0, options), InvalidArgument);
  CHECK_THROWS_WITH(Server(cluster, "ps", 0, options),
                    Catch::Contains("tls_key_file (--tls_key), tls_ca_file (--tls_ca) is not set"));
  options.tls_key_file = pki().certs.key("ps");
  CHECK_THROWS_WITH(Server(cluster, "ps", 0, options),
                    Catch::Contains("tls_ca_file (--tls_ca) is not set"));
  // None at all: plain TCP, as before.
  Server plain(cluster, "ps", 0, quiet());
}

TEST_CASE("an unreadable, malformed or mismatched TLS file is InvalidArgument naming it") {
  const ClusterSpec cluster({{"ps", {loopback(reserve_port())}}});
  TempDir dir("tls-bad");
  const auto& certs = pki().certs;
  SECTION("a key that cannot be read") {
    ServerOptions options = tls("ps");
    options.tls_key_file = dir / "missing.key";
    CHECK_THROWS_AS(Server(cluster, "ps", 0, options), InvalidArgument);
    CHECK_THROWS_WITH(Server(cluster, "ps", 0, options),
                      Catch::Contains("cannot read the TLS key file '" + dir / "missing.key") &&
                          Catch::Contains("--tls_key"));
  }
  SECTION("a key that is not PEM") {
    psflow::testing::write_file(dir / "garbage.key", "not a key\n");
    ServerOptions options = tls("ps");
    options.tls_key_file = dir / "garbage.key";
    CHECK_THROWS_WITH(
        Server(cluster, "ps", 0, options),
        Catch::Contains("the TLS key file '" + dir / "garbage.key" + "' is unusable"));
  }
  SECTION("another certificate's key") {
    ServerOptions options = tls("ps");
    options.tls_key_file = certs.key("worker");
    CHECK_THROWS_WITH(Server(cluster, "ps", 0, options),
                      Catch::Contains("does not belong to the certificate '" + certs.pem("ps")));
  }
  SECTION("a CA file that is not PEM") {
    psflow::testing::write_file(dir / "ca.pem", "not a certificate\n");
    ServerOptions options = tls("ps");
    options.tls_ca_file = dir / "ca.pem";
    CHECK_THROWS_WITH(Server(cluster, "ps", 0, options),
                      Catch::Contains("the TLS CA file '" + dir / "ca.pem" + "' is unusable"));
  }
}

TEST_CASE("TaskFlags --tls_cert, --tls_key and --tls_ca make the task's ServerOptions") {
  auto parse = [](std::vector<std::string> extra) {
    std::vector<std::string> args{"prog", "--ps_hosts=127.0.0.1:2222", "--job_name=ps"};
    args.insert(args.end(), extra.begin(), extra.end());
    return TaskFlags::parse(args, std::nullopt);
  };
  const ServerOptions options =
      parse({"--tls_cert=/c.pem", "--tls_key", "/k.pem", "--tls_ca=/ca.pem", "--other"})
          .server_options();
  CHECK(options.tls_cert_file == "/c.pem");
  CHECK(options.tls_key_file == "/k.pem");
  CHECK(options.tls_ca_file == "/ca.pem");
  const ServerOptions plain = parse({}).server_options();
  CHECK(plain.tls_cert_file.empty());
  CHECK_FALSE(detail::tls_enabled(plain));
  CHECK_THROWS_WITH(parse({"--tls_ca="}), Catch::Contains("--tls_ca is empty"));
}
