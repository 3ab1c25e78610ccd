// InlineFrame: the ops of one inline loop frame as flat arrays, made once per executor
// (runtime/executor.hpp runs a loop without a nested loop or an asynchronous op inline: one
// thread, its iterations one after the other, its ops in LoopPlan::Frame::order).
//
// An iteration of TF1's loop is about eight small ops (Merge, Less, LoopCond, Switch, Identity,
// a constant, Add, NextIteration), so what running one op costs outside its kernel is most of
// what a loop costs. Here each op knows where its inputs are (slots of the frame, numbered as in
// LoopPlan), which slots its outputs go to, and which control inputs can make it dead; the
// control ops and constants say what their kernels would do, so an untraced step runs them
// without a kernel call.
#pragma once

#include <cstdint>
#include <vector>

#include "psflow/runtime/kernel.hpp"

namespace psflow {

struct InlineFrame {
  // What an untraced run does for an op (a traced one calls every kernel, for its times).
  enum class Action : std::uint8_t {
    kernel,    // calls the kernel
    forward,   // LoopCond, NextIteration, Exit, Identity: output 0 is input 0 (not a reference
               // for an Identity, whose kernel reads the variable)
    merge,     // output 0 the first live input, output 1 its index; both dead when none is
    switch_,   // input 0 to output 1 when the scalar bool input 1 is true, else to output 0;
               // the other output dead (a bad predicate goes to the kernel, for its error)
    alias,     // a forwarding op whose producer's edges go straight on to its consumers (it
               // has no control input and its input is no reference): it only records whether
               // its input was dead, for its control successors and the loop's end
    constant,  // a Const: its consumers read its value in place, so it only says whether
               // that value is live in this iteration (dead: a control input's op was)
  };
  struct Op {
    int id = 0;     // plan node
    int local = 0;  // LoopPlan::Node::local
    Action action = Action::kernel;
    bool handles_dead = false;    // its kernel runs even with a dead input (a Merge)
    bool next_iteration = false;  // a live output starts another iteration
    int exit = -1;                // an Exit: its index in LoopPlan::Frame::exits
    std::uint32_t input_base = 0;
    std::uint32_t num_inputs = 0;
    std::uint32_t num_outputs = 0;
    // Inputs that are the op's own slots (not a feed, not a constant Enter's or a Const's
    // value, read in place by every iteration): the op may move from them (bit k: input k).
    std::uint64_t own_inputs = 0;
    std::uint32_t edges_begin = 0, edges_end = 0;        // in `edges`
    std::uint32_t controls_begin = 0, controls_end = 0;  // in `controls`
    Entry constant;                                      // Action::constant: the value
  };
  // An output's way to an input slot of the same iteration (a NextIteration's: of the next).
  struct Edge {
    std::uint32_t slot = 0;
    std::uint32_t src_output = 0;
    bool last_use = false;  // the output's last edge: its value moves along it
    bool value = true;      // false: only whether it is dead (the input of an alias)
  };
  // A control input that can make an op dead: an op of the frame, or an Enter into it.
  struct Control {
    int local = -1;  // >= 0: LoopPlan::Node::local of an op of the frame
    int enter = -1;  // >= 0: index in `enters`
  };
  // An Enter into the frame: its value goes to `edges` once, or is read in place by every
  // iteration when it is constant.
  struct Enter {
    int id = 0;  // plan node
    bool constant = false;
    std::uint32_t edges_begin = 0, edges_end = 0;
  };
  // An input slot that takes a feed: it reads the step's feed in place.
  struct Fed {
    std::uint32_t slot = 0;
    int location = -1;  // the executor's Location of the feed
  };

  std::vector<Op> ops;  // in LoopPlan::Frame::order
  std::vector<Edge> edges;
  std::vector<Control> controls;
  std::vector<Enter> enters;
  std::vector<Fed> fed;
  std::uint32_t num_slots = 0;
  std::uint32_t max_outputs = 0;
  std::vector<Entry> merge_index;  // the int32 scalar i, a Merge's output 1 for input i
};

}  // namespace psflow
