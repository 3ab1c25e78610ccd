// ServerOptions: how a Server (one task of a cluster) waits for its peers, bounds its
// requests, sizes its thread pool and what it logs. A plain value; every field has a default
// that suits a real cluster, tests shorten the deadlines.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "psflow/distributed/wire_limits.hpp"

namespace psflow {

struct ServerOptions {
  // How long to keep trying to reach a task that is not up yet before Unavailable.
  std::chrono::milliseconds connect_timeout{30000};
  // While waiting for a task: when to say so again after the first time; then the intervals
  // double (5, 10, 20, 40 s, ...).
  std::chrono::milliseconds wait_log_interval{5000};
  // Deadline of control requests (registering a partition, stopping a task).
  std::chrono::milliseconds rpc_timeout{60000};
  // Deadline of one distributed step; zero means none (a dead peer is still detected at once
  // when its connection drops).
  std::chrono::milliseconds step_timeout{0};
  // A peer that sends nothing (not even a heartbeat, which each side sends when it has been
  // quiet for a quarter of this) for this long is declared dead: its connection closes and the
  // steps waiting on it fail with Unavailable naming it. Catches a peer that froze (SIGSTOP, a
  // hung host, a cut network) without closing its socket. Zero turns heartbeats off.
  std::chrono::milliseconds heartbeat_timeout{10000};
  // A step still running on this task after this long is logged, and again every period while
  // it runs: how long, and the ops it computes or waits in (a receive names the task it waits
  // for), so a stuck step is seen on every task it touches. Zero turns it off. Bound a step
  // with RunOptions::timeout_in_ms.
  std::chrono::milliseconds slow_step_warning{30000};
  wire::WireLimits limits;
  // Threads running expensive ops: 0 = one per core (shared).
  std::size_t inter_op_threads = 0;
  // Log connection events and waits to standard error.
  bool log = true;
  // Also log what this task does for others: partitions registered, steps run, tensors sent.
  bool explain = false;
  // This task's own directory for sharded checkpoints (Saver with SaverOptions::sharded): the
  // shard of its variables is written there and read back from there (created when missing).
  // "": next to the checkpoint path the chief gives, on this task's disk (TF's way).
  std::string checkpoint_dir;
  // Where to listen: "" = on the task's own cluster address (TF's way); "0.0.0.0" = every IPv4
  // interface, "::" or "[::]" = every interface; or one host / IP. The port is the cluster's.
  std::string bind_address;
  // The cluster's shared secret (docs/security.md): when set, only tasks that know it may
  // connect, proving so at connect time (distributed/cluster_auth.hpp). Every task needs the
  // same one. Default: the environment variable PSFLOW_CLUSTER_SECRET ("" when unset: none).
  std::string cluster_secret = [] {
    const char* secret = std::getenv("PSFLOW_CLUSTER_SECRET");
    return std::string(secret ? secret : "");
  }();
  // Deadline of that check at connect, both ways (also run, cheaply, without a secret); with
  // TLS, also of the TLS handshake before it.
  std::chrono::milliseconds handshake_timeout{5000};
  // Mutual TLS (docs/security.md): PEM files of this task's certificate, its private key and
  // the cluster's CA. All three set: every connection is TLS 1.3, both ends showing a
  // certificate signed by that CA (a peer without one is refused). None: plain TCP. Only some:
  // InvalidArgument when the Server starts.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // Threads that run this task's timers (heartbeats, request deadlines), listener, connects
  // and handshakes, and read and write its TLS connections, each with connections of its own
  // (a new connection goes to the thread with the fewest; each connection on a strand of its
  // own, so its frames stay in order). A plain TCP connection reads on a thread of its own
  // instead. At least 1 (InvalidArgument otherwise). Expensive ops never run on them
  // (docs/architecture.md, "Threads of a task").
  std::size_t io_threads = 2;
  // A ps whose workers are gone for good stops by itself after this long. It applies once a
  // worker's MonitoredTrainingSession announced that the cluster ends itself (its option
  // stop_ps_when_done, on by default): from then on, when no worker task has had a connection
  // to this task for orphan_timeout (the chief failed past recovery, say), it logs why and
  // stops, and its join() returns. The default, 10 minutes, outlasts a worker's restart plus
  // its start-up and recovery deadlines. Zero: never.
  std::chrono::milliseconds orphan_timeout{std::chrono::minutes(10)};
};

}  // namespace psflow
