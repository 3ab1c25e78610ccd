// The stop protocol: how one task tells another to stop, so that its join() returns (TF has
// none; psflow's ps tasks use it to exit 0 at the end of training). The asking task sends a
// stop_server request and waits for the acknowledgement; the asked task acknowledges, then
// stops 50 ms later, so that the reply leaves before its connections close. Plumbing of
// Server (Server::stop_task, Server::stop_job), not meant for users.
//
// Contract: request_stop blocks up to its timeout (twice: once to connect, once for the
// acknowledgement), so it must not run on an I/O thread (Server::stop_task refuses that).
// answer_stop_request runs on an I/O thread, as a frame handler, and does not block.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/messages.hpp"
#include "psflow/distributed/peer_cache.hpp"

namespace psflow::detail {

// Asks `task` to stop on behalf of task `requester`. True when it acknowledged within
// `timeout`; false when it could not be reached or did not answer (it may already be gone).
bool request_stop(PeerCache& peers, const std::string& task, const std::string& requester,
                  std::chrono::milliseconds timeout);

// request_stop for every task of `job` in `cluster` except `requester` itself; returns how
// many acknowledged.
std::size_t request_stop_job(PeerCache& peers, const ClusterSpec& cluster, std::string_view job,
                             const std::string& requester, std::chrono::milliseconds timeout);

// Answers the stop_server request `frame` that came on `connection`, acknowledging as task
// `self` (incarnation `incarnation`), then calls `stop` on `io` once the reply had a moment
// to leave.
void answer_stop_request(asio::io_context& io, const std::shared_ptr<Connection>& connection,
                         const wire::Frame& frame, const std::string& self,
                         std::uint64_t incarnation,
                         const std::function<void(const std::string&)>& log,
                         std::function<void()> stop);

// ---------------------------------------------------------------------------------------------

inline bool request_stop(PeerCache& peers, const std::string& task, const std::string& requester,
                         std::chrono::milliseconds timeout) {
  std::promise<std::pair<Status, std::shared_ptr<Connection>>> connected;
  auto connection_future = connected.get_future();
  peers.connect_async(
      task,
      [&connected](Status s, std::shared_ptr<Connection> c) {
        connected.set_value({std::move(s), std::move(c)});
      },
      timeout);
  auto [status, connection] = connection_future.get();  // bounded by `timeout`
  if (!status.ok()) return false;
  std::promise<Status> acked;
  auto ack = acked.get_future();
  connection->call(
      wire::make_frame(wire::MessageType::stop_server,
                       wire::StopServer{"requested by " + requester}),
      [&acked](Status s, wire::Frame) { acked.set_value(std::move(s)); }, timeout);
  return ack.get().ok();  // bounded by `timeout` and by the connection closing
}

inline std::size_t request_stop_job(PeerCache& peers, const ClusterSpec& cluster,
                                    std::string_view job, const std::string& requester,
                                    std::chrono::milliseconds timeout) {
  std::size_t acknowledged = 0;
  for (std::size_t t = 0; t < cluster.num_tasks(job); ++t) {
    const std::string task = full_task_name(job, t);
    if (task != requester && request_stop(peers, task, requester, timeout)) ++acknowledged;
  }
  return acknowledged;
}

inline void answer_stop_request(asio::io_context& io, const std::shared_ptr<Connection>& connection,
                                const wire::Frame& frame, const std::string& self,
                                std::uint64_t incarnation,
                                const std::function<void(const std::string&)>& log,
                                std::function<void()> stop) {
  auto message = wire::decode<wire::StopServer>(frame.metadata, "stop_server");
  const std::string peer = connection->peer_task();
  log("asked to stop by " + (peer.empty() ? connection->description() : peer) +
      (message.reason.empty() ? "" : ": " + message.reason));
  connection->send(wire::make_reply(frame.request_id, wire::Reply{0, self, incarnation}));
  // Stop once the reply had a moment to leave.
  auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(50));
  timer->async_wait([timer, stop = std::move(stop)](const boost::system::error_code&) { stop(); });
}

}  // namespace psflow::detail
