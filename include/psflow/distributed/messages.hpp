// The messages tasks exchange (the metadata part of a frame), each with its Boost.Serialization
// save/load. Tensors travel in the frame beside them, never inside.
#pragma once

#include <cstdint>
#include <string>

#include "psflow/distributed/wire.hpp"

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
// graph handle for register_graph.
struct Reply {
  std::int32_t code = 0;
  std::string text;
  std::uint64_t incarnation = 0;
  Status status() const {
    return code == 0 ? Status{} : Status(static_cast<ErrorCode>(code), text);
  }
  static Reply from(const Status& s) {
    return {static_cast<std::int32_t>(s.code()), s.message(), 0};
  }
  template <class A>
  void save(A& ar) const {
    ar << code;
    save_string(ar, text);
    ar << incarnation;
  }
  template <class A>
  void load(A& ar) {
    ar >> code;
    load_string(ar, text);
    ar >> incarnation;
    if (code < 0 || code > static_cast<std::int32_t>(ErrorCode::out_of_range))
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
  template <class A>
  void save(A& ar) const {
    save_string(ar, handle);
    ar << step_id << incarnation;
  }
  template <class A>
  void load(A& ar) {
    load_string(ar, handle);
    ar >> step_id >> incarnation;
  }
};

// One-way: the frame's single tensor, for `key` in step `step_id` on the receiving task.
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
    if (code <= 0 || code > static_cast<std::int32_t>(ErrorCode::out_of_range))
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

// Sent in every step: encoded without a Boost archive object (same bytes; see wire.hpp).
template <>
inline constexpr bool sent_every_step<Reply> = true;
template <>
inline constexpr bool sent_every_step<RunGraph> = true;
template <>
inline constexpr bool sent_every_step<TensorMessage> = true;
template <>
inline constexpr bool sent_every_step<AbortStep> = true;

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
