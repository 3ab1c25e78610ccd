#!/usr/bin/env python3
"""How long a user's file that includes psflow takes to compile, against a file that includes
only <boost/asio.hpp>, measured in the same run.

It installs psflow (headers and CMake package) into a temporary prefix, takes the README's
"A first program" (which includes <psflow/psflow.hpp>) and compiles it at -O0 with only the
install's include directory added, in both modes:
  header-only   the default: that file compiles every part of psflow it includes;
  separate      -DPSFLOW_SEPARATE_COMPILATION: the file only declares psflow's implementation,
                which one other file compiles once (psflow/impl/src.hpp, the CMake target
                psflow::compiled); that file's time is reported too.
Two more rows say where the header-only time goes (no target): the first program's front end
alone (-fsyntax-only: parsing and template instantiation, no code generated), and a file that
includes only the outside headers psflow's headers include (Asio and its TLS, nlohmann-json,
xtensor, Boost.Serialization, OpenSSL, the standard library: the floor no psflow change lowers).
Every compilation runs --runs times (default 3), in rounds that compile each file once; the
median time and the largest peak memory (of the compiler process) are kept.

Usage: benchmarks/compile_time.py [--runs N] [--cxx g++] [--check]
  --check   exit 1 when a target below is missed (the table is printed either way)
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The targets (issue "A user's first hour"): the first program's time as a multiple of the Asio
# file's, and its peak memory.
TARGETS = {"header-only": (6.3, None), "separate": (4.0, 600)}


def first_program():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme.split("## A first program", 1)[1]
    match = re.search(r"```cpp\n(.*?)```", section, re.S)
    if not match or "psflow/psflow.hpp" not in match.group(1):
        sys.exit("compile_time: README.md has no 'A first program' C++ block including psflow.hpp")
    return match.group(1)


def outside_headers(include):
    """A file including every outside header that psflow's installed headers include."""
    found = set()
    for folder, _, files in os.walk(os.path.join(include, "psflow")):
        for name in files:
            with open(os.path.join(folder, name)) as f:
                found.update(re.findall(r'^\s*#\s*include <([^>]+)>', f.read(), re.M))
    # sanitizer/ headers are included only in sanitizer builds
    found = sorted(h for h in found if not h.startswith(("psflow/", "sanitizer/")))
    return "".join(f"#include <{h}>\n" for h in found) + "int main() {}\n"


def install(prefix, build_dir):
    subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-DPSFLOW_BUILD_TESTS=OFF",
                    "-DPSFLOW_BUILD_EXAMPLES=OFF", "-DCMAKE_INSTALL_PREFIX=" + prefix],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--install", build_dir], check=True, stdout=subprocess.DEVNULL)


def compile_once(command):
    """Seconds and peak resident MB of one compilation (the compiler driver and its cc1plus)."""
    start = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)  # wait4: this child's own resource usage
    seconds = time.monotonic() - start
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    errors = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if child.returncode != 0:
        sys.exit("compile_time: this failed:\n  " + " ".join(command) + "\n" + errors)
    return seconds, usage.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def measure_all(commands, runs):
    """Median time and largest peak memory of each command. The runs are interleaved (every
    command once per round), so that a slower moment of the machine affects all of them alike
    rather than the baseline alone."""
    results = [[] for _ in commands]
    for _ in range(runs):
        for i, command in enumerate(commands):
            results[i].append(compile_once(command))
    return [(statistics.median(s for s, _ in r), max(m for _, m in r)) for r in results]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.runs < 1:
        sys.exit("compile_time: --runs must be at least 1")
    if not shutil.which(args.cxx):
        sys.exit(f"compile_time: compiler '{args.cxx}' not found (scripts/setup.sh installs g++)")

    work = tempfile.mkdtemp(prefix="psflow-compile-time-")
    try:
        prefix = os.path.join(work, "install")
        install(prefix, os.path.join(work, "build"))
        include = os.path.join(prefix, "include")
        for name, text in [("first.cpp", first_program()),
                           ("asio.cpp", "#include <boost/asio.hpp>\nint main() {}\n"),
                           ("src.cpp", "#include <psflow/impl/src.hpp>\n"),
                           ("outside.cpp", outside_headers(include))]:
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        compiler = [args.cxx, "-std=c++20", "-O0"]
        base = compiler + ["-c", "-o", os.devnull]
        separate = ["-DPSFLOW_SEPARATE_COMPILATION"]
        rows = [
            ("boost/asio.hpp alone (the baseline)", "baseline",
             base + [os.path.join(work, "asio.cpp")]),
            ("first program, header-only", "header-only",
             base + ["-I" + include, os.path.join(work, "first.cpp")]),
            ("first program, separate compilation", "separate",
             base + separate + ["-I" + include, os.path.join(work, "first.cpp")]),
            ("psflow/impl/src.hpp, compiled once per program", "library",
             base + separate + ["-I" + include, os.path.join(work, "src.cpp")]),
            ("first program, header-only, front end only (-fsyntax-only)", "front end",
             compiler + ["-fsyntax-only", "-I" + include, os.path.join(work, "first.cpp")]),
            ("the outside headers psflow includes, alone", "outside",
             base + ["-I" + include, os.path.join(work, "outside.cpp")]),
        ]
        version = subprocess.run([args.cxx, "--version"], capture_output=True, text=True)
        print(f"{version.stdout.splitlines()[0]}, -O0, {args.runs} run(s) each, median time, "
              f"largest peak memory; load average {os.getloadavg()[0]:.2f} at the start")
        print(f"| file | time | × asio | peak memory | target | met |")
        print(f"|---|---|---|---|---|---|")
        measured = measure_all([command for _, _, command in rows], args.runs)
        baseline = measured[0][0]
        missed = []
        for (label, mode, _), (seconds, megabytes) in zip(rows, measured):
            ratio = seconds / baseline
            target, met = "—", "—"
            if mode in TARGETS:
                max_ratio, max_mb = TARGETS[mode]
                target = f"≤ {max_ratio}×" + (f", ≤ {max_mb} MB" if max_mb else "")
                ok = ratio <= max_ratio and (max_mb is None or megabytes <= max_mb)
                met = "yes" if ok else "**no**"
                if not ok:
                    missed.append(mode)
            print(f"| {label} | {seconds:.1f} s | {ratio:.2f} | {megabytes:.0f} MB | {target} "
                  f"| {met} |", flush=True)
        if args.check and missed:
            print("compile_time: missed the target of: " + ", ".join(missed))
            return 1
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
