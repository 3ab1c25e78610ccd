#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, to check what psflow writes.

It shares no code with psflow: it compiles its own .proto files (tensorboard_protos/, written
from TF's documented event.proto/summary.proto/graph.proto) with protoc into a temporary
directory, decodes them with the protobuf library (Debian: protobuf-compiler and
python3-protobuf, see scripts/setup.sh), and reads the TFRecord framing itself, checking both
masked CRC-32C checksums of every record.

  read_events.py [checks] PATH...

PATH is an event file or a directory (every file in it whose name holds "tfevents"). It prints
each file's events, one line each, and then checks, always: the file name is TF's
(events.out.tfevents.<10 digits>.<host>...), the first event's file_version is "brain.Event:2",
every record's checksums match. Optional checks (repeatable):
  --expect TAG@STEP=VALUE  a scalar TAG at STEP with VALUE (compared as float32)
  --steps TAG=S1,S2,...    TAG's steps are exactly these
  --every TAG=N            TAG appears at least twice, its steps N apart, give or take 2
  --first-step TAG=S       TAG's first step is S
  --range TAG=LO:HI        every value of TAG lies in [LO, HI]
  --graph-device TEXT      a graph_def is present, and some node's device contains TEXT
Exits 0 when all checks pass; otherwise prints each failure and exits 1.
"""
import argparse
import collections
import importlib
import os
import re
import struct
import subprocess
import sys
import tempfile

from tfrecord import records  # noqa: E402 (tools/tfrecord.py, beside this file)

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensorboard_protos")


def compile_protos(out_dir):
    protos = sorted(p for p in os.listdir(PROTO_DIR) if p.endswith(".proto"))
    subprocess.run(["protoc", f"--proto_path={PROTO_DIR}", f"--python_out={out_dir}"] + protos,
                   check=True)
    sys.path.insert(0, out_dir)
    return importlib.import_module("event_pb2"), importlib.import_module("graph_pb2")


def event_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if "tfevents" in f)
        else:
            files.append(p)
    return files


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--steps", action="append", default=[])
    parser.add_argument("--every", action="append", default=[])
    parser.add_argument("--first-step", action="append", default=[])
    parser.add_argument("--range", action="append", default=[])
    parser.add_argument("--graph-device", action="append", default=[])
    args = parser.parse_args()

    failures = []
    scalars = collections.defaultdict(list)  # tag -> [(step, value)]
    devices = collections.Counter()
    graphs = 0
    with tempfile.TemporaryDirectory() as tmp:
        event_pb2, graph_pb2 = compile_protos(tmp)
        files = event_files(args.paths)
        if not files:
            failures.append(f"no event files in {' '.join(args.paths)}")
        for path in files:
            name = os.path.basename(path)
            print(f"{path}:")
            if not re.fullmatch(r"events\.out\.tfevents\.\d{10}\..+", name):
                failures.append(f"{name}: not named events.out.tfevents.<10 digits>.<host>")
            try:
                for i, body in enumerate(records(path)):
                    event = event_pb2.Event()
                    event.ParseFromString(body)
                    what = event.WhichOneof("what")
                    if i == 0 and event.file_version != "brain.Event:2":
                        failures.append(f"{name}: first event is not file_version brain.Event:2")
                    line = f"  step {event.step:>6} wall {event.wall_time:.3f} "
                    if what == "file_version":
                        line += f"file_version {event.file_version}"
                    elif what == "graph_def":
                        graph = graph_pb2.GraphDef()
                        graph.ParseFromString(event.graph_def)
                        graphs += 1
                        here = collections.Counter(n.device or "(none)" for n in graph.node)
                        devices.update(n.device for n in graph.node if n.device)
                        line += (f"graph_def: {len(graph.node)} nodes, producer "
                                 f"{graph.versions.producer}, devices: " +
                                 ", ".join(f"{d} ({c})" for d, c in sorted(here.items())))
                    elif what == "summary":
                        parts = []
                        for v in event.summary.value:
                            scalars[v.tag].append((event.step, v.simple_value))
                            parts.append(f"{v.tag}={v.simple_value:.6g}")
                        line += "summary " + " ".join(parts)
                    else:
                        line += f"({what})"
                    print(line)
            except ValueError as e:
                failures.append(str(e))

    def tag_and(spec, sep):
        tag, _, rest = spec.rpartition(sep)
        if tag not in scalars:
            failures.append(f"tag {tag!r}: not found (tags: {', '.join(sorted(scalars))})")
            return tag, None
        return tag, rest

    for spec in args.expect:
        where, _, value = spec.rpartition("=")
        tag, step = tag_and(where, "@")
        if step is None:
            continue
        found = [v for s, v in scalars[tag] if s == int(step)]
        if found != [f32(float(value))]:
            failures.append(f"{tag} at step {step}: expected {value}, found {found}")
    for spec in args.steps:
        tag, steps = tag_and(spec, "=")
        if steps is not None and [s for s, _ in scalars[tag]] != [int(x) for x in steps.split(",")]:
            failures.append(f"{tag}: steps {[s for s, _ in scalars[tag]]}, expected {steps}")
    for spec in args.every:
        tag, n = tag_and(spec, "=")
        if n is None:
            continue
        steps = [s for s, _ in scalars[tag]]
        gaps = [b - a for a, b in zip(steps, steps[1:])]
        if len(steps) < 2 or any(abs(g - int(n)) > 2 for g in gaps):
            failures.append(f"{tag}: steps {steps} are not {n} apart (give or take 2)")
    for spec in args.first_step:
        tag, step = tag_and(spec, "=")
        if step is not None and scalars[tag][0][0] != int(step):
            failures.append(f"{tag}: first step {scalars[tag][0][0]}, expected {step}")
    for spec in args.range:
        tag, bounds = tag_and(spec, "=")
        if bounds is None:
            continue
        lo, hi = (float(b) for b in bounds.split(":"))
        outside = [(s, v) for s, v in scalars[tag] if not lo <= v <= hi]
        if outside:
            failures.append(f"{tag}: values outside [{lo}, {hi}]: {outside}")
    for text in args.graph_device:
        if not graphs:
            failures.append("no graph_def event")
        elif not any(text in d for d in devices):
            failures.append(f"no graph node's device contains {text!r} (devices: {dict(devices)})")

    for f in failures:
        print(f"read_events: FAILED: {f}")
    if not failures:
        print(f"read_events: OK ({sum(len(v) for v in scalars.values())} scalars, "
              f"tags {', '.join(sorted(scalars))}; {graphs} graph(s))")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
