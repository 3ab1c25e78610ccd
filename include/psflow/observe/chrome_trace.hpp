// A traced step as a Chrome trace (the trace-event JSON object format that chrome://tracing
// and https://ui.perfetto.dev open): one process per task ("ps0 (/job:ps/replica:0/task:0)"),
// one track per executor thread plus a "network" track per task, every op a complete ("X")
// event, every transfer an X event on the network tracks of both its tasks joined by a flow
// arrow from sender to receiver. TF1's timeline.Timeline(step_stats).generate_chrome_trace_format()
// for a step that spans processes.
//
// Events on one track always nest or follow each other: where ops overlap without nesting
// (asynchronous kernels such as _Recv wait while their thread runs other ops; transfers are in
// flight together) the track is split into lanes ("thread 3", "thread 3 #2", ...).
// Times are microseconds from the step's first event, on the session's clock.
//
// Pure functions of their argument; write_chrome_trace throws NotFound when the file cannot be
// written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/observe/explain.hpp"
#include "psflow/runtime/step_stats.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <fstream>
#include <nlohmann/json.hpp>
#endif

namespace psflow::observe {

// The trace as a JSON object {"traceEvents": [...], "displayTimeUnit": "ms"} (include
// <nlohmann/json.hpp> to use it).
nlohmann::ordered_json chrome_trace_json(const RunMetadata& metadata);
// The same as text, one event per line.
std::string chrome_trace(const RunMetadata& metadata);
// Writes chrome_trace(metadata) to `path` (replacing it).
void write_chrome_trace(const RunMetadata& metadata, const std::string& path);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

// "ps0 (/job:ps/replica:0/task:0)" for a task name; other names as they are.
PSFLOW_DECL std::string trace_process_name(const std::string& task) {
  if (task.rfind("/job:", 0) != 0) return task;
  return task_label(task) + " (" + task + ")";
}

// Sort key of a task: ps tasks first, then chief, then workers, then other jobs; by index.
PSFLOW_DECL std::tuple<int, std::string, int> trace_process_order(const std::string& task) {
  if (task.rfind("/job:", 0) != 0) return {4, task, 0};
  const DeviceSpec spec = DeviceSpec::parse(task);
  const std::string job = spec.job.value_or("");
  const int rank = job == "ps" ? 0 : job == "chief" ? 1 : job == "worker" ? 2 : 3;
  return {rank, job, spec.task.value_or(0)};
}

struct Span {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  nlohmann::ordered_json event;  // without pid, tid, ts, dur
  int lane = 0;
  int flow = 0;             // a transfer's flow id (0: none)
  bool flow_start = false;  // the flow starts here (its sender's side)
  bool flow_end = false;    // the flow ends here (its receiver's side)
};

// Splits `spans` into lanes where events nest or follow each other; returns the lane count.
PSFLOW_DECL int assign_lanes(std::vector<Span*>& spans) {
  std::sort(spans.begin(), spans.end(), [](const Span* a, const Span* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
  });
  std::vector<std::vector<std::int64_t>> open;  // per lane: ends of the enclosing spans
  for (Span* s : spans) {
    std::size_t lane = 0;
    for (; lane < open.size(); ++lane) {
      auto& stack = open[lane];
      while (!stack.empty() && stack.back() <= s->start_ns) stack.pop_back();
      if (stack.empty() || stack.back() >= s->end_ns) break;
    }
    if (lane == open.size()) open.emplace_back();
    open[lane].push_back(s->end_ns);
    s->lane = static_cast<int>(lane);
  }
  return static_cast<int>(open.size());
}

}  // namespace detail

PSFLOW_DECL nlohmann::ordered_json chrome_trace_json(const RunMetadata& metadata) {
  using nlohmann::ordered_json;
  using Span = detail::Span;
  // Every task, traced or only named by a transfer.
  std::set<std::string> names;
  for (const auto& t : metadata.tasks) names.insert(t.task);
  for (const auto& t : metadata.transfers) {
    if (!t.src_task.empty()) names.insert(t.src_task);
    if (!t.dst_task.empty()) names.insert(t.dst_task);
  }
  std::vector<std::string> order(names.begin(), names.end());
  std::stable_sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
    return detail::trace_process_order(a) < detail::trace_process_order(b);
  });
  std::map<std::string, int> pid_of;
  for (std::size_t i = 0; i < order.size(); ++i) pid_of[order[i]] = static_cast<int>(i) + 1;

  // The first event of the step is time 0.
  std::int64_t base = INT64_MAX;
  for (const auto& t : metadata.tasks)
    for (const auto& n : t.nodes) base = std::min(base, n.start_ns);
  for (const auto& t : metadata.transfers)
    if (t.send_start_ns >= 0 && t.recv_end_ns >= 0) base = std::min(base, t.send_start_ns);
  if (base == INT64_MAX) base = 0;
  auto us = [base](std::int64_t ns) { return static_cast<double>(ns - base) / 1000.0; };

  // Spans by (pid, group): group 0 = network, 1 + thread id = that thread's ops, and the
  // asynchronous kernels of a task share one group after the threads.
  constexpr std::int64_t kAsyncGroup = INT64_MAX;
  std::map<std::pair<int, std::int64_t>, std::vector<Span>> groups;
  for (const auto& t : metadata.tasks) {
    const int pid = pid_of.at(t.task);
    for (const auto& n : t.nodes) {
      Span s{
          n.start_ns, std::max(n.end_ns, n.start_ns),
          ordered_json{{"name", n.node_name},
                       {"cat", "op"},
                       {"ph", "X"},
                       {"args", {{"op", n.op}, {"node", n.node_name}, {"thread", n.thread_id}}}}};
      groups[{pid, n.async ? kAsyncGroup : 1 + std::int64_t{n.thread_id}}].push_back(std::move(s));
    }
  }
  // Transfers: the same span on the sender's and the receiver's network track, joined by a
  // flow arrow from the send to the end of the receive.
  int flow = 0;
  for (const auto& t : metadata.transfers) {
    if (t.send_start_ns < 0 || t.recv_end_ns < 0) continue;
    const std::int64_t end = std::max(t.recv_end_ns, t.send_start_ns);
    ordered_json args{{"tensor", t.tensor_name},
                      {"bytes", t.bytes},
                      {"from", t.src_task},
                      {"to", t.dst_task},
                      {"key", t.key}};
    const int src = pid_of.at(t.src_task), dst = pid_of.at(t.dst_task);
    ++flow;
    auto span = [&](const char* verb) {
      return Span{t.send_start_ns,
                  end,
                  ordered_json{{"name", std::string(verb) + " " + t.tensor_name},
                               {"cat", "transfer"},
                               {"ph", "X"},
                               {"args", args}},
                  0,
                  flow,
                  true,
                  dst == src};
    };
    groups[{src, 0}].push_back(span("send"));
    if (dst != src) {
      groups[{dst, 0}].push_back(span("recv"));
      groups[{dst, 0}].back().flow_start = false;
      groups[{dst, 0}].back().flow_end = true;
    }
  }

  ordered_json events = ordered_json::array();
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int pid = static_cast<int>(i) + 1;
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"args", {{"name", detail::trace_process_name(order[i])}}}});
    events.push_back({{"name", "process_sort_index"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"args", {{"sort_index", pid}}}});
    for (const auto& t : metadata.tasks)
      if (t.task == order[i])
        events.push_back(
            {{"name", "process_labels"},
             {"ph", "M"},
             {"pid", pid},
             {"args",
              {{"labels",
                "clock offset " +
                    nlohmann::json(static_cast<double>(t.clock_offset_ns) / 1000.0).dump() +
                    " us"}}}});
  }
  // Tracks: each group's lanes get consecutive tids in group order; the network track of a
  // task always exists so a transfer's flow has somewhere to land.
  std::map<std::pair<int, std::int64_t>, int> first_tid;  // (pid, group) -> tid of lane 0
  std::map<int, int> next_tid;
  std::vector<ordered_json> flows;
  for (std::size_t i = 0; i < order.size(); ++i) groups[{static_cast<int>(i) + 1, 0}];
  for (auto& [key, spans] : groups) {
    const int pid = key.first;  // plain variables (not a binding): the lambdas below capture them
    const std::int64_t group = key.second;
    std::vector<Span*> refs;
    for (auto& s : spans) refs.push_back(&s);
    const int lanes = std::max(1, detail::assign_lanes(refs));
    int& tid = next_tid[pid];
    first_tid[key] = tid + 1;
    const std::string track = group == 0             ? std::string("network")
                              : group == kAsyncGroup ? std::string("async ops")
                                                     : "thread " + std::to_string(group - 1);
    for (int lane = 0; lane < lanes; ++lane) {
      ++tid;
      events.push_back(
          {{"name", "thread_name"},
           {"ph", "M"},
           {"pid", pid},
           {"tid", tid},
           {"args", {{"name", lane == 0 ? track : track + " #" + std::to_string(lane + 1)}}}});
      events.push_back({{"name", "thread_sort_index"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", tid},
                        {"args", {{"sort_index", tid}}}});
    }
    for (Span* s : refs) {
      ordered_json e = std::move(s->event);
      const int span_tid = first_tid[key] + s->lane;
      e["pid"] = pid;
      e["tid"] = span_tid;
      e["ts"] = us(s->start_ns);
      e["dur"] = static_cast<double>(s->end_ns - s->start_ns) / 1000.0;
      events.push_back(std::move(e));
      // Flow arrows start in the sender's send slice and end in the receiver's recv slice
      // (binding to the slice that encloses the end: "bp": "e").
      auto flow_event = [&](const char* phase, std::int64_t ns) {
        ordered_json f{{"name", "transfer"}, {"cat", "transfer"}, {"ph", phase}};
        if (phase[0] == 'f') f["bp"] = "e";
        f["id"] = s->flow;
        f["pid"] = pid;
        f["tid"] = span_tid;
        f["ts"] = us(ns);
        flows.push_back(std::move(f));
      };
      if (s->flow_start) flow_event("s", s->start_ns);
      if (s->flow_end) flow_event("f", s->end_ns);
    }
  }
  for (auto& f : flows) events.push_back(std::move(f));
  return ordered_json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

PSFLOW_DECL std::string chrome_trace(const RunMetadata& metadata) {
  const auto trace = chrome_trace_json(metadata);
  std::string out = "{\"traceEvents\": [\n";
  const auto& events = trace["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i)
    out += events[i].dump() + (i + 1 < events.size() ? ",\n" : "\n");
  out += "],\n\"displayTimeUnit\": \"ms\"}\n";
  return out;
}

PSFLOW_DECL void write_chrome_trace(const RunMetadata& metadata, const std::string& path) {
  const std::string text = chrome_trace(metadata);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out || !out.flush())
    throw NotFound("cannot write the trace to '" + path +
                   "': check that its directory exists and is writable");
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
