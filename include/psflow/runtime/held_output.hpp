// Held output: a thread may hold back the frames it sends, to write them together when it is
// done (Connection::HeldWrites: a ps's tensor and its reply in one write; a worker's run_graph
// requests and the tensors its own partition sends in one write). Held frames must never wait
// on a long computation, so the executor releases them before it runs an expensive kernel
// (runtime/executor.hpp). The holder lives in a higher layer; it registers itself here.
//
// Contract: per thread; a holder registers with hold_output() and unregisters by restoring what
// hold_output() returned.
#pragma once

namespace psflow::detail {

struct OutputHolder {
  void (*release)(void* holder) = nullptr;  // writes what `holder` holds, now
  void* holder = nullptr;
};

inline OutputHolder& output_holder() noexcept {
  thread_local OutputHolder current;
  return current;
}

// Makes `next` this thread's holder; returns the previous one, to restore later.
inline OutputHolder hold_output(OutputHolder next) noexcept {
  const OutputHolder previous = output_holder();
  output_holder() = next;
  return previous;
}

// Writes whatever this thread holds (nothing when no holder is registered).
inline void release_held_output() {
  const OutputHolder& current = output_holder();
  if (current.release) current.release(current.holder);
}

}  // namespace psflow::detail
