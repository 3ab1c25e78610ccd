#!/usr/bin/env python3
"""Chaos run: trains the Fashion-MNIST trainer on 1 ps + 3 workers on loopback while killing a
random task with SIGKILL every 15-25 s and starting it again, then checks that the chief still
printed a test accuracy at or above the target and that nothing it started is left running.

The chief checkpoints often (--save_checkpoint_steps), so a killed ps or chief resumes from the
last checkpoint; the workers' MonitoredTrainingSession rides out a ps that is gone for a while.
A task that exits with an error on its own is started again too, as a cluster manager would
(logged). Kills stop when the chief has exited 0; a task that already finished is not killed.

Usage: examples/trainer/chaos_run.py [--trainer PATH] [--target 0.88] [--timeout 1200]
                                     [--seed N] [-- <extra trainer flags>]
Exit status: 0 when the run reached the target and left nothing running; 1 otherwise.
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def say(line):
    print(f"[chaos {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def free_ports(n):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "free_ports.py"), str(n)],
                         check=True, capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


class Task:
    def __init__(self, name, argv, log_dir):
        self.name, self.argv, self.log_dir = name, argv, log_dir
        self.proc = None
        self.starts = 0
        self.stdout_path = os.path.join(log_dir, f"{name}.out")

    def start(self):
        self.starts += 1
        err = open(os.path.join(self.log_dir, f"{self.name}.{self.starts}.err"), "w")
        out = open(self.stdout_path, "a")
        # Its own process group: a kill reaches only it, and the cleanup reaches all of it.
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err, start_new_session=True)
        out.close()
        err.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainer", default=os.path.join(ROOT, "build", "examples", "trainer",
                                                          "trainer"))
    parser.add_argument("--target", type=float, default=0.88)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--min_gap_s", type=float, default=15)
    parser.add_argument("--max_gap_s", type=float, default=25)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    if not os.access(args.trainer, os.X_OK):
        say(f"no trainer binary at {args.trainer}: build it (cmake --build build --target trainer)")
        return 2
    rng = random.Random(args.seed)
    say(f"seed {args.seed}")

    work = tempfile.mkdtemp(prefix="psflow-chaos-")
    ports = free_ports(4)
    ps_hosts = f"127.0.0.1:{ports[0]}"
    worker_hosts = ",".join(f"127.0.0.1:{p}" for p in ports[1:])
    common = [f"--ps_hosts={ps_hosts}", f"--worker_hosts={worker_hosts}",
              f"--checkpoint_dir={os.path.join(work, 'ckpt')}", "--save_checkpoint_steps=500",
              "--log_every_steps=1000", "--connect_timeout_s=60", "--recovery_deadline_s=120",
              "--heartbeat_timeout_s=5"] + args.extra
    tasks = [Task("ps0", [args.trainer, "--job_name=ps", "--task_index=0"] + common, work)]
    for i in range(3):
        tasks.append(Task(f"worker{i}",
                          [args.trainer, "--job_name=worker", f"--task_index={i}"] + common, work))
    chief = tasks[1]
    say(f"logs in {work}; cluster ps {ps_hosts}, workers {worker_hosts}")
    for t in tasks:
        t.start()

    started = time.monotonic()
    next_kill = started + rng.uniform(args.min_gap_s, args.max_gap_s)
    kills = []
    ok = False
    try:
        while time.monotonic() - started < args.timeout:
            if not chief.alive() and chief.proc.returncode == 0:
                break
            for t in tasks:
                # A task that failed on its own (not killed by us) is started again too: that is
                # what a cluster manager does; it is reported at the end.
                if not t.alive() and t.proc.returncode != 0 and t.proc.returncode != -9:
                    say(f"{t.name} exited {t.proc.returncode} on its own; starting it again")
                    t.start()
            now = time.monotonic()
            if now >= next_kill:
                victims = [t for t in tasks if t.alive()]
                if victims:
                    victim = rng.choice(victims)
                    victim.kill()
                    kills.append((round(now - started, 1), victim.name))
                    say(f"SIGKILL {victim.name} at {now - started:.1f} s; starting it again")
                    time.sleep(1)
                    victim.start()
                next_kill = now + rng.uniform(args.min_gap_s, args.max_gap_s)
            time.sleep(0.2)
        else:
            say(f"timed out after {args.timeout:.0f} s")
        # The chief is done: the others finish on their own (the last worker stops the ps).
        deadline = time.monotonic() + 180
        while any(t.alive() for t in tasks) and time.monotonic() < deadline:
            time.sleep(0.2)
        with open(chief.stdout_path) as f:
            found = re.findall(r"test accuracy: ([0-9.]+)", f.read())
        accuracy = float(found[-1]) if found else None
        left = [t.name for t in tasks if t.alive()]
        codes = {t.name: t.proc.returncode for t in tasks}
        say(f"{len(kills)} kills: {kills}")
        say(f"exit codes after the last start: {codes}; still running: {left or 'none'}")
        say(f"test accuracy: {accuracy} (target {args.target}); "
            f"{time.monotonic() - started:.0f} s in all")
        ok = (accuracy is not None and accuracy >= args.target and not left and
              all(code == 0 for code in codes.values()) and len(kills) > 0)
    finally:
        for t in tasks:
            t.kill()
        # Nothing of ours may be left: every process group we started is gone.
        for t in tasks:
            try:
                os.killpg(t.proc.pid, 0)
                say(f"process group of {t.name} still exists")
                ok = False
            except ProcessLookupError:
                pass
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        say(f"FAILED; logs kept in {work}")
    say("passed" if ok else "failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
