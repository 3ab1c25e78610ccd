#!/usr/bin/env python3
"""Checks Chrome trace files written by the trainer's --trace_steps: each is well-formed JSON in
the trace-event object format, names a ps and a worker process, holds complete events (ops) on
both, and has no partially overlapping complete events on one track.

usage: check_chrome_trace.py DIR EXPECTED_FILE...   (exit 0 when every expected file passes)
"""
import json
import os
import sys


def check(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    assert trace.get("displayTimeUnit") == "ms", "displayTimeUnit is not ms"
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    ps = [pid for pid, name in names.items() if name.startswith("ps0 (/job:ps/")]
    workers = [pid for pid, name in names.items() if name.startswith("worker0 (/job:worker/")]
    assert ps and workers, "process names %s lack ps0 or worker0" % sorted(names.values())
    ops = {}
    tracks = {}
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0, "negative duration in %s" % e
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
            if e.get("cat") == "op":
                ops.setdefault(e["pid"], []).append(e["args"]["op"])
    assert ops.get(ps[0]), "no ops on the ps"
    assert ops.get(workers[0]), "no ops on the worker"
    assert any(e["ph"] == "s" for e in events), "no transfer flows"
    for spans in tracks.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for start, end in spans:
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], "partially overlapping events on a track"
            stack.append(end)
    return "%s: %d events, ps ops %s" % (os.path.basename(path), len(events),
                                         sorted(set(ops[ps[0]]))[:6])


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    directory = sys.argv[1]
    for name in sys.argv[2:]:
        print(check(os.path.join(directory, name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
