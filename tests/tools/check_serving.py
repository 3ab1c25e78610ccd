#!/usr/bin/env python3
"""Drives examples/serve with curl (a client psflow did not write) against a bundle a training
run exported, and compares its answers with the training session's.

The training run's log must hold the line its chief printed after exporting:
    serving check: {"instances": [...]} -> [...]
(the request, and the training session's predictions for it). This script starts
`serve --model_dir=DIR --model_name=NAME --port=0`, then checks, each bad request sent between
good ones:
  - GET status and metadata (TF Serving's layout, -1 for the batch dimension);
  - POST :predict in the row and columnar formats: the predictions equal the training
    session's within 1e-6;
  - concurrent requests from several clients all get their right answers;
  - malformed JSON, wrong types and wrong shapes: 400 with an {"error": ...} body;
  - an unknown model or path: 404; an oversized body: 413;
  - a client too slow to send its request is disconnected after the read timeout, while
    another client is served meanwhile;
  - SIGTERM stops the server with exit status 0.
Exits 0 when all hold, else 1 naming what failed.

Usage: check_serving.py --serve BIN --model_dir DIR --model_name NAME --log TRAINING_LOG
"""
import argparse
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time

READ_TIMEOUT_S = 2
MAX_REQUEST_BYTES = 1 << 20
failures = []


def check(condition, what):
    print(("ok:   " if condition else "FAIL: ") + what, flush=True)
    if not condition:
        failures.append(what)
    return condition


def curl(url, body=None, method=None):
    """(status, parsed JSON body or None) of one request made with curl."""
    command = ["curl", "-sS", "--max-time", "30", "-o", "-", "-w", "\n%{http_code}"]
    if method:
        command += ["-X", method]
    if body is not None:
        command += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    done = subprocess.run(command + [url], input=body.encode() if body is not None else None,
                          capture_output=True, timeout=60)
    text, _, status = done.stdout.decode().rpartition("\n")
    try:
        parsed = json.loads(text) if text else None
    except json.JSONDecodeError:
        parsed = None
    return int(status or 0), parsed


def close_enough(got, expected, tolerance=1e-6):
    if isinstance(expected, list):
        return (isinstance(got, list) and len(got) == len(expected) and
                all(close_enough(g, e, tolerance) for g, e in zip(got, expected)))
    return isinstance(got, (int, float)) and abs(got - expected) <= tolerance


def serving_check(log_path):
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for line in log:
            match = re.search(r"serving check: (\{.*\}) -> (\[.*\])\s*$", line)
            if match:
                return json.loads(match.group(1)), json.loads(match.group(2))
    sys.exit(f"check_serving: no 'serving check:' line in {log_path}")


def start_server(args):
    server = subprocess.Popen(
        [args.serve, f"--model_dir={args.model_dir}", f"--model_name={args.model_name}",
         "--port=0", "--bind_address=127.0.0.1", f"--read_timeout_s={READ_TIMEOUT_S}",
         f"--max_request_bytes={MAX_REQUEST_BYTES}", "--threads=4"],
        stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    line = ""
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        match = re.search(r"on http://127\.0\.0\.1:(\d+)/", line)
        if match:
            return server, int(match.group(1))
        if not line and server.poll() is not None:
            break
    server.kill()
    sys.exit(f"check_serving: serve did not start (last line: {line!r})")


def slow_client_is_disconnected(port, good_request):
    """Sends half a request and goes quiet; True when the server closes the connection after
    its read timeout (not before, not never), while a good request meanwhile is answered."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S + 10)
    sock.sendall(b"POST /v1/models/x:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    started = time.monotonic()
    answered = good_request()
    try:
        closed = sock.recv(4096) == b""
    except (ConnectionResetError, socket.timeout):
        closed = False
    waited = time.monotonic() - started
    sock.close()
    check(answered, "a good request is answered while another client stalls")
    return closed and READ_TIMEOUT_S - 0.5 <= waited <= READ_TIMEOUT_S + 8


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", required=True)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--model_name", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    request, expected = serving_check(args.log)
    instances = request["instances"]

    server, port = start_server(args)
    base = f"http://127.0.0.1:{port}/v1/models/{args.model_name}"
    predict = base + ":predict"
    try:
        def good():
            status, body = curl(predict, json.dumps(request))
            return status == 200 and close_enough(body.get("predictions"), expected)

        status, body = curl(base)
        check(status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE",
              "GET status: AVAILABLE")
        status, body = curl(base + "/metadata")
        signature = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
        first_input = next(iter(signature["inputs"].values()))
        check(status == 200 and first_input["dtype"].startswith("DT_") and
              first_input["tensor_shape"]["dim"][0]["size"] == "-1",
              "GET metadata: signature_def.serving_default with dtype and a -1 batch dimension")

        check(good(), "POST :predict (row format) equals the training session's predictions")
        status, body = curl(predict, json.dumps({"inputs": instances}))
        check(status == 200 and close_enough(body["outputs"], expected),
              "POST :predict (columnar format) equals them too")

        results = []
        threads = [threading.Thread(target=lambda: results.append(good())) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(results == [True] * 8, "8 concurrent clients all get the right predictions")

        # A leaf of the other kind: a string where the model takes numbers, a number where
        # it takes strings.
        first_leaf = instances[0]
        while isinstance(first_leaf, list):
            first_leaf = first_leaf[0]
        wrong_leaf = 7 if isinstance(first_leaf, str) else "a"
        bad = [
            ("malformed JSON", predict, '{"instances": [', 400),
            ("wrong types", predict, json.dumps({"instances": [[wrong_leaf] * len(instances[0])]}), 400),
            ("wrong shapes", predict, json.dumps({"instances": [instances[0] + instances[0]]}), 400),
            ("an unknown model", f"http://127.0.0.1:{port}/v1/models/nope:predict",
             json.dumps(request), 404),
            ("an unknown path", f"http://127.0.0.1:{port}/v2/what", None, 404),
            ("an oversized body", predict, " " * (MAX_REQUEST_BYTES + 1), 413),
        ]
        for what, url, body_text, wanted in bad:
            status, body = curl(url, body_text)
            check(status == wanted and isinstance(body, dict) and "error" in body,
                  f"{what}: {wanted} with an error body (got {status}: {body})")
            check(good(), f"... and the next good request is answered right")

        check(slow_client_is_disconnected(port, good),
              f"a client too slow to send its request is disconnected after {READ_TIMEOUT_S} s")
        check(good(), "the server still answers after that")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            code = None
    check(code == 0, "SIGTERM stops serve with exit status 0")
    if failures:
        print(f"check_serving: {len(failures)} check(s) failed", flush=True)
        return 1
    print("check_serving: all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
