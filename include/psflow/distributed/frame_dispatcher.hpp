// FrameDispatcher: what a task does with each frame another task sends it, other than replies
// to its own requests: hello, ping, register_graph, run_graph, tensor, abort_step,
// deregister_graph, stop_server and workers_done. Requests are answered on the connection they came
// on. It also remembers which steps each connection's master started here: when that connection
// closes, those steps can never finish normally (their master is gone) and are aborted.
// Plumbing of Server, not meant for users.
//
// Contract: handle() and connection_closed() run on an I/O thread, as the connection's
// handlers, and never block: a step runs on the worker service's threads and is answered when
// it ends, from whichever thread ends it. A frame that fails to decode closes only its own
// connection, logged. Thread-safe. The owner (Server) keeps the worker service, the peer cache
// and the io_context alive longer than the dispatcher.
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "psflow/core/error.hpp"
#include "psflow/distributed/connection.hpp"
#include "psflow/distributed/messages.hpp"
#include "psflow/distributed/peer_cache.hpp"
#include "psflow/distributed/stop_protocol.hpp"
#include "psflow/distributed/worker_service.hpp"

namespace psflow::detail {

class FrameDispatcher {
 public:
  using Log = std::function<void(const std::string&)>;
  // What the task does with a workers_done message; returns its reply's text (the finished
  // workers it knows, end_of_training.hpp).
  using WorkersDoneHandler = std::function<std::string(const wire::WorkersDone&)>;

  // Answers as task `task_name` (incarnation `incarnation`); `stop` stops the task when a peer
  // asks it to (see stop_protocol.hpp); `explain` also logs what it does for others.
  FrameDispatcher(asio::io_context& io, WorkerService& worker, PeerCache& peers,
                  std::string task_name, std::uint64_t incarnation, bool explain, Log log,
                  std::function<void()> stop, WorkersDoneHandler workers_done);
  FrameDispatcher(const FrameDispatcher&) = delete;
  FrameDispatcher& operator=(const FrameDispatcher&) = delete;

  // One frame that came on `connection`.
  void handle(const std::shared_ptr<Connection>& connection, wire::Frame frame);
  // `connection` closed for `reason`: aborts the steps its master started here.
  void connection_closed(const std::shared_ptr<Connection>& connection, const Status& reason);

 private:
  void reply(const std::shared_ptr<Connection>& connection, std::uint64_t request_id,
             const wire::Reply& r);
  void on_hello(const std::shared_ptr<Connection>& connection, const wire::Frame& frame);
  void on_register_graph(const std::shared_ptr<Connection>& connection, const wire::Frame& frame);
  void on_run_graph(const std::shared_ptr<Connection>& connection, const wire::Frame& frame);

  asio::io_context& io_;
  WorkerService& worker_;
  PeerCache& peers_;
  const std::string task_name_;
  const std::uint64_t incarnation_;
  const bool explain_;
  const Log log_;
  const std::function<void()> stop_;
  const WorkersDoneHandler workers_done_;

  std::mutex mutex_;
  std::map<Connection*, std::set<std::uint64_t>> steps_by_connection_;  // running remote steps
};

// ---------------------------------------------------------------------------------------------

inline FrameDispatcher::FrameDispatcher(asio::io_context& io, WorkerService& worker,
                                        PeerCache& peers, std::string task_name,
                                        std::uint64_t incarnation, bool explain, Log log,
                                        std::function<void()> stop, WorkersDoneHandler workers_done)
    : io_(io),
      worker_(worker),
      peers_(peers),
      task_name_(std::move(task_name)),
      incarnation_(incarnation),
      explain_(explain),
      log_(std::move(log)),
      stop_(std::move(stop)),
      workers_done_(std::move(workers_done)) {}

inline void FrameDispatcher::handle(const std::shared_ptr<Connection>& connection,
                                    wire::Frame frame) {
  using wire::MessageType;
  try {
    switch (frame.type) {
      case MessageType::hello:
        return on_hello(connection, frame);
      case MessageType::ping:
        return reply(connection, frame.request_id, wire::Reply{0, task_name_, incarnation_});
      case MessageType::register_graph:
        return on_register_graph(connection, frame);
      case MessageType::run_graph:
        return on_run_graph(connection, frame);
      case MessageType::tensor: {
        auto message = wire::decode<wire::TensorMessage>(frame.metadata, "tensor");
        if (frame.tensors.size() > 1)
          throw DataLoss("a tensor message must carry one tensor, or none for a dead value");
        worker_.deliver(message.step_id, message.key,
                        frame.tensors.empty() ? Tensor() : std::move(frame.tensors[0]));
        return;
      }
      case MessageType::abort_step: {
        auto message = wire::decode<wire::AbortStep>(frame.metadata, "abort_step");
        worker_.abort_step(message.step_id,
                           Status(static_cast<ErrorCode>(message.code), message.message));
        return;
      }
      case MessageType::deregister_graph: {
        auto message = wire::decode<wire::Handle>(frame.metadata, "deregister_graph");
        worker_.deregister_graph(message.handle);
        if (frame.request_id) reply(connection, frame.request_id, wire::Reply{});
        return;
      }
      case MessageType::stop_server:
        return answer_stop_request(io_, connection, frame, task_name_, incarnation_, log_, stop_);
      case MessageType::workers_done: {
        auto message = wire::decode<wire::WorkersDone>(frame.metadata, "workers_done");
        return reply(connection, frame.request_id,
                     wire::Reply{0, workers_done_(message), incarnation_});
      }
      case MessageType::reply:
        return;  // a reply nobody waits for any more
      case MessageType::heartbeat:
        return;  // the connection keeps these to itself
    }
  } catch (const Error& e) {
    log_("bad frame from " + connection->description() + ": " + e.message() +
         " (closing that connection)");
    connection->close(Status(ErrorCode::data_loss, e.message()));
  }  // anything else (std::bad_alloc): the Connection closes itself, logged; the task lives
}

inline void FrameDispatcher::connection_closed(const std::shared_ptr<Connection>& connection,
                                               const Status& reason) {
  std::set<std::uint64_t> orphaned;
  {
    std::lock_guard lock(mutex_);
    if (auto it = steps_by_connection_.find(connection.get()); it != steps_by_connection_.end()) {
      orphaned = std::move(it->second);
      steps_by_connection_.erase(it);
    }
  }
  // Steps a vanished master started here can never finish normally: fail them.
  for (auto step : orphaned) worker_.abort_step(step, reason);
}

inline void FrameDispatcher::reply(const std::shared_ptr<Connection>& connection,
                                   std::uint64_t request_id, const wire::Reply& r) {
  connection->send(wire::make_reply(request_id, r));
}

inline void FrameDispatcher::on_hello(const std::shared_ptr<Connection>& connection,
                                      const wire::Frame& frame) {
  auto hello = wire::decode<wire::Hello>(frame.metadata, "hello");
  connection->set_peer_task(hello.task);
  peers_.accept_hello(hello.task, connection, hello.incarnation);
  reply(connection, frame.request_id, wire::Reply{0, task_name_, incarnation_});
}

inline void FrameDispatcher::on_register_graph(const std::shared_ptr<Connection>& connection,
                                               const wire::Frame& frame) {
  auto request = wire::decode<wire::RegisterGraph>(frame.metadata, "register_graph");
  wire::Reply r;
  if (explain_) {
    std::string ops;
    for (const auto& n : request.graph.nodes)
      ops += (ops.empty() ? "" : ", ") + n.name + " (" + n.op + ")";
    log_("explain: " + connection->peer_task() + " registered a partition to run here: " + ops);
  }
  try {
    r.text = worker_.register_graph(request.graph);
  } catch (...) {
    r = wire::Reply::from(
        Status::from_current_exception().with_context("registering a partition on " + task_name_));
  }
  r.incarnation = incarnation_;
  reply(connection, frame.request_id, r);
}

inline void FrameDispatcher::on_run_graph(const std::shared_ptr<Connection>& connection,
                                          const wire::Frame& frame) {
  const std::int64_t received_ns = trace_clock_ns();
  auto request = wire::decode<wire::RunGraph>(frame.metadata, "run_graph");
  if (request.incarnation != incarnation_) {
    reply(connection, frame.request_id,
          wire::Reply::from(
              Status(ErrorCode::aborted, "task " + task_name_ +
                                             " restarted since the session registered its graph: "
                                             "re-create the session")));
    return;
  }
  {
    std::lock_guard lock(mutex_);
    steps_by_connection_[connection.get()].insert(request.step_id);
  }
  const std::uint64_t request_id = frame.request_id;
  const std::uint64_t step_id = request.step_id;
  if (explain_)
    log_("explain: step " + std::to_string(step_id) + ": running " + request.handle + " for " +
         connection->peer_task());
  // A traced step returns what it recorded, with this task's receive and reply times.
  auto stats = request.trace ? std::make_shared<StepStatsCollector>() : nullptr;
  worker_.run_graph(
      request.handle, step_id,
      [this, connection, request_id, step_id, stats, received_ns](Status status) {
        {
          std::lock_guard lock(mutex_);
          if (auto it = steps_by_connection_.find(connection.get());
              it != steps_by_connection_.end())
            it->second.erase(step_id);
        }
        wire::Reply r = wire::Reply::from(status);
        if (stats) {
          wire::RunGraphTrace trace{stats->take(task_name_, worker_.device().name()), received_ns,
                                    0};
          trace.reply_sent_ns = trace_clock_ns();
          r.trace = wire::encode(trace);
        }
        reply(connection, request_id, r);
      },
      stats.get());
}

}  // namespace psflow::detail
