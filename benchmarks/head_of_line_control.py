#!/usr/bin/python3
# The head-of-line benchmark's shape without psflow (benchmarks/README.md, "A ps serving many
# workers"): is a 4 KiB step's p99 under 64 MiB pushes bounded by this machine, or by psflow?
#
#   /usr/bin/python3 benchmarks/head_of_line_control.py [steps, default 3000] [port, default 47711]
#       [--handoff] [--fast-apply]
#
# Three processes on loopback, as bench_load's: a "ps" with a thread per connection; worker A
# (this process) sends a 4 KiB gradient, the ps applies it (w -= 0.01 * g) and sends the 4 KiB
# variable back; worker B sends 64 MiB gradients one after the other, each applied by another
# thread of the ps (numpy, which lets go of the GIL) before B's next one, as psflow's pool
# applies B's update. Prints A's p50 / p99 / p99.9 alone and while B pushes, and the p99 ratio.
# --handoff: A's step hands its request to a second thread that does the socket I/O and hands
# the reply back (two thread wake-ups more per step, as a caller waiting on an I/O thread has).
# --fast-apply: the ps applies B's gradient in place (scale, then subtract) instead of through a
# 64 MiB temporary, so that B pushes about as often as bench_load's pusher does (25-30/s here).
# Needs python3-numpy.
import socket, struct, sys, threading, time, queue, multiprocessing as mp
import numpy as np

HANDOFF = "--handoff" in sys.argv
FAST_APPLY = "--fast-apply" in sys.argv
ARGS = [a for a in sys.argv[1:] if a not in ("--handoff", "--fast-apply")]
PORT = int(ARGS[1]) if len(ARGS) > 1 else 47711
SMALL = 4096
BIG = 64 << 20

def recv_exact(sock, view):
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0: raise EOFError
        got += n

def connect(deadline_s=10.0):
    # The ps process may not be listening yet: retry until it is, or give up at the deadline.
    until = time.monotonic() + deadline_s
    while True:
        try:
            return socket.create_connection(("127.0.0.1", PORT), timeout=deadline_s)
        except ConnectionRefusedError:
            if time.monotonic() > until:
                raise
            time.sleep(0.01)

def ps():
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", PORT)); srv.listen(4)
    w_small = np.zeros(SMALL // 4, np.float32)
    w_big = np.zeros(BIG // 4, np.float32)
    def serve(conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hdr = bytearray(8)
        small = bytearray(SMALL)
        big = np.empty(BIG // 4, np.float32)
        try:
            while True:
                recv_exact(conn, memoryview(hdr))
                (size,) = struct.unpack("<Q", hdr)
                if size == SMALL:
                    recv_exact(conn, memoryview(small))
                    g = np.frombuffer(small, np.float32)
                    w_small[:] -= 0.01 * g
                    conn.sendall(w_small.tobytes())
                else:
                    recv_exact(conn, memoryview(big).cast("B"))
                    done = threading.Event()
                    def apply():
                        if FAST_APPLY:
                            np.multiply(big, 0.01, out=big)
                            np.subtract(w_big, big, out=w_big)
                        else:
                            np.subtract(w_big, 0.01 * big, out=w_big)
                        done.set()
                    threading.Thread(target=apply).start(); done.wait()
                    conn.sendall(b"k")
        except EOFError:
            pass
    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()

def pusher(stop, pushes):
    s = connect()
    payload = np.ones(BIG // 4, np.float32).tobytes()
    ack = bytearray(1)
    while not stop.is_set():
        s.sendall(struct.pack("<Q", BIG)); s.sendall(payload); recv_exact(s, memoryview(ack))
        with pushes.get_lock(): pushes.value += 1

def steps(s, n):
    req = struct.pack("<Q", SMALL) + bytes(SMALL)
    reply = bytearray(SMALL); times = []
    def one_step():
        s.sendall(req); recv_exact(s, memoryview(reply))
    if HANDOFF:
        todo, done = queue.Queue(), queue.Queue()
        def io_thread():
            while todo.get():
                one_step(); done.put(True)
        threading.Thread(target=io_thread, daemon=True).start()
    for _ in range(n):
        t = time.perf_counter_ns()
        if HANDOFF:
            todo.put(True); done.get()
        else:
            one_step()
        times.append((time.perf_counter_ns() - t) / 1000)
    if HANDOFF: todo.put(False)
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)], times[int(len(times) * 0.999)]

if __name__ == "__main__":
    n = int(ARGS[0]) if ARGS else 3000
    p = mp.Process(target=ps, daemon=True); p.start()
    s = connect(); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    steps(s, 200)
    alone = steps(s, n)
    stop = mp.Event(); pushes = mp.Value("l", 0)
    b = mp.Process(target=pusher, args=(stop, pushes)); b.start()
    until = time.monotonic() + 20  # measure once B's pushes flow: its first is applied
    while pushes.value == 0 and time.monotonic() < until: time.sleep(0.01)
    if pushes.value == 0:
        stop.set(); b.kill(); p.kill()
        sys.exit("worker B pushed nothing in 20 s")
    before, start = pushes.value, time.perf_counter()
    loaded = steps(s, n)
    rate = (pushes.value - before) / (time.perf_counter() - start)
    stop.set(); b.join(timeout=20); b.kill(); p.kill()
    print("alone p50/p99/p99.9 %.0f/%.0f/%.0f us; under 64 MiB pushes (%.0f/s) %.0f/%.0f/%.0f us; "
          "p99 ratio %.2f" % (*alone, rate, *loaded, loaded[1] / alone[1]))
