// The messages tasks exchange (the metadata part of a frame), each with its Boost.Serialization
// save/load. Tensors travel in the frame beside them, never inside.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "psflow/distributed/wire.hpp"
#include "psflow/runtime/step_stats.hpp"

namespace psflow::wire {

// First frame on a new connection, both ways: who is talking, and which process incarnation.
struct Hello {
  std::string task;  // "/job:worker/replica:0/task:0"
  std::uint64_t incarnation = 0;
  template <class A>
  void save(A& ar) const {
    save_string(ar, task);
    ar << incarnation;
  }
  template <class A>
  void load(A& ar) {
    load_string(ar, task);
    ar >> incarnation;
  }
};

// The answer to every request. `code` is an ErrorCode; `text` is the error message, or the
// graph handle for register_graph; `trace` is an encoded RunGraphTrace in the reply to a traced
// run_graph, else empty.
struct Reply {
  std::int32_t code = 0;
  std::string text;
  std::uint64_t incarnation = 0;
  std::string trace = {};
  Status status() const {
    return code == 0 ? Status{} : Status(static_cast<ErrorCode>(code), text);
  }
  static Reply from(const Status& s) {
    return {static_cast<std::int32_t>(s.code()), s.message(), 0, {}};
  }
  template <class A>
  void save(A& ar) const {
    ar << code;
    save_string(ar, text);
    ar << incarnation;
    save_string(ar, trace);
  }
  template <class A>
  void load(A& ar) {
    ar >> code;
    load_string(ar, text);
    ar >> incarnation;
    load_string(ar, trace);
    if (code < 0 || code > static_cast<std::int32_t>(kLastErrorCode))
      throw DataLoss("reply has an unknown status code");
  }
};

struct RegisterGraph {
  GraphDef graph;
  template <class A>
  void save(A& ar) const {
    save_graph_def(ar, graph);
  }
  template <class A>
  void load(A& ar) {
    load_graph_def(ar, graph);
  }
};

struct RunGraph {
  std::string handle;
  std::uint64_t step_id = 0;
  std::uint64_t incarnation = 0;  // of the task the master believes it talks to
  bool trace = false;             // record the step's statistics and return them in the reply
  template <class A>
  void save(A& ar) const {
    save_string(ar, handle);
    ar << step_id << incarnation << trace;
  }
  template <class A>
  void load(A& ar) {
    load_string(ar, handle);
    ar >> step_id >> incarnation >> trace;
  }
};

// What a traced run_graph returns (in Reply::trace): the task's statistics on its own clock,
// and when (on that clock) the request arrived and the reply left, for the master's estimate
// of the clock offset.
struct RunGraphTrace {
  TaskStepStats stats;
  std::int64_t request_received_ns = 0;
  std::int64_t reply_sent_ns = 0;
  template <class A>
  void save(A& ar) const {
    save_string(ar, stats.task);
    save_string(ar, stats.device);
    ar << request_received_ns << reply_sent_ns;
    save_sequence(ar, stats.nodes, [](A& a, const NodeExecStats& n) {
      save_string(a, n.node_name);
      save_string(a, n.op);
      a << n.thread_id << n.async << n.start_ns << n.end_ns;
    });
    auto save_end = [](A& a, const TransferEnd& e) {
      save_string(a, e.key);
      a << e.bytes << e.time_ns;
    };
    save_sequence(ar, stats.sends, save_end);
    save_sequence(ar, stats.recvs, save_end);
  }
  template <class A>
  void load(A& ar) {
    load_string(ar, stats.task);
    load_string(ar, stats.device);
    ar >> request_received_ns >> reply_sent_ns;
    load_sequence(ar, stats.nodes, [](A& a, NodeExecStats& n) {
      load_string(a, n.node_name);
      load_string(a, n.op);
      a >> n.thread_id >> n.async >> n.start_ns >> n.end_ns;
    });
    auto load_end = [](A& a, TransferEnd& e) {
      load_string(a, e.key);
      a >> e.bytes >> e.time_ns;
    };
    load_sequence(ar, stats.sends, load_end);
    load_sequence(ar, stats.recvs, load_end);
  }
};

// One-way: the frame's single tensor, for `key` in step `step_id` on the receiving task; a frame
// without a tensor carries a dead value (the untaken side of a cond).
struct TensorMessage {
  std::uint64_t step_id = 0;
  std::string key;
  template <class A>
  void save(A& ar) const {
    ar << step_id;
    save_string(ar, key);
  }
  template <class A>
  void load(A& ar) {
    ar >> step_id;
    load_string(ar, key);
  }
};

struct AbortStep {
  std::uint64_t step_id = 0;
  std::int32_t code = static_cast<std::int32_t>(ErrorCode::aborted);
  std::string message;
  template <class A>
  void save(A& ar) const {
    ar << step_id << code;
    save_string(ar, message);
  }
  template <class A>
  void load(A& ar) {
    ar >> step_id >> code;
    load_string(ar, message);
    if (code <= 0 || code > static_cast<std::int32_t>(kLastErrorCode))
      throw DataLoss("abort has an unknown status code");
  }
};

struct Handle {
  std::string handle;
  template <class A>
  void save(A& ar) const {
    save_string(ar, handle);
  }
  template <class A>
  void load(A& ar) {
    load_string(ar, handle);
  }
};

struct StopServer {
  std::string reason;
  template <class A>
  void save(A& ar) const {
    save_string(ar, reason);
  }
  template <class A>
  void load(A& ar) {
    load_string(ar, reason);
  }
};

// What a worker tells the other tasks of the end of training (end_of_training.hpp). `done`
// false only announces that this cluster ends itself; true reports `reporter` done, with every
// finished worker it knows in `finished`. The reply's text lists the finished workers the
// receiving task knows then, one per line.
struct WorkersDone {
  bool done = false;
  std::string reporter;
  std::vector<std::string> finished;
  template <class A>
  void save(A& ar) const {
    save_bool(ar, done);
    save_string(ar, reporter);
    save_sequence(ar, finished, [](A& a, const std::string& task) { save_string(a, task); });
  }
  template <class A>
  void load(A& ar) {
    load_bool(ar, done);
    load_string(ar, reporter);
    load_sequence(ar, finished, [](A& a, std::string& task) { load_string(a, task); });
  }
};

// Sent in every step: encoded without a Boost archive object (same bytes; see wire.hpp).
template <>
inline constexpr bool sent_every_step<Reply> = true;
template <>
inline constexpr bool sent_every_step<RunGraph> = true;
template <>
inline constexpr bool sent_every_step<TensorMessage> = true;
template <>
inline constexpr bool sent_every_step<AbortStep> = true;
template <>
inline constexpr bool sent_every_step<RunGraphTrace> = true;

template <class Message>
Frame make_frame(MessageType type, const Message& message, std::vector<Tensor> tensors = {}) {
  return Frame{type, 0, encode(message), std::move(tensors)};
}

// The reply to request `request_id`.
inline Frame make_reply(std::uint64_t request_id, const Reply& reply) {
  Frame frame = make_frame(MessageType::reply, reply);
  frame.request_id = request_id;
  return frame;
}

}  // namespace psflow::wire
