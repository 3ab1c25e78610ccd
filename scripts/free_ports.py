#!/usr/bin/env python3
"""Prints N distinct loopback TCP ports that are free right now, separated by spaces.

Ports come from below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range):
a port the kernel handed out for "any free port" is also what it hands to the next outgoing
connection, so on a busy machine such a port was often taken by a client socket before our
task could listen on it. Random ports below that range are only ever taken on purpose.

Usage: scripts/free_ports.py N
"""
import random
import socket
import sys

LOWEST = 10000  # below this lie the well-known and registered services


def ephemeral_start():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: free_ports.py N   (N >= 1: how many ports)")
    count = int(sys.argv[1])
    top = ephemeral_start()
    candidates = list(range(LOWEST, top)) if top - LOWEST >= 100 * count else []
    random.shuffle(candidates)
    ports = [p for p in candidates[: 50 * count] if is_free(p)][:count]
    if len(ports) < count:  # no room below the ephemeral range: let the kernel choose
        socks = [socket.socket() for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in socks]
    print(" ".join(map(str, ports)))


if __name__ == "__main__":
    main()
