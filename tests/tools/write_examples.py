#!/usr/bin/env python3
"""An independent writer of TFRecord files of tf.train.Example, to check psflow's reader.

It shares no code with psflow: it compiles its own example.proto (example_protos/, written from
TF's documented schema) with protoc into a temporary directory, builds the Examples with the
protobuf library (Debian: protobuf-compiler and python3-protobuf, see scripts/setup.sh), and
frames them itself (TFRecord: length, masked CRC-32C of the length, data, masked CRC-32C).

  write_examples.py DIR [COUNT]

writes DIR/examples.tfrecord, DIR/examples.tfrecord.gz (GZIP) and DIR/examples.tfrecord.zlib
(ZLIB), each holding COUNT (default 50) Examples; example i has
  "id"    int64 [i, -i * 1000000007]
  "score" float [i / 4, -1.5]
  "user"  bytes [b"user:<i>"]
  "tags"  bytes, i % 4 values: b"t0", b"t1", ... (none when i % 4 == 0)
  "blob"  bytes [the bytes 0..(i % 7), NULs included]
The test that reads them (test_record_reader) computes the same values.
"""
import gzip
import importlib
import os
import subprocess
import sys
import tempfile
import zlib

from tfrecord import frame  # noqa: E402 (tools/tfrecord.py, beside this file)

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example_protos")


def load_schema(tmp):
    subprocess.run(["protoc", f"--proto_path={PROTO_DIR}", f"--python_out={tmp}", "example.proto"],
                   check=True)
    sys.path.insert(0, tmp)
    return importlib.import_module("example_pb2")


def example(pb, i):
    ex = pb.Example()
    feature = ex.features.feature
    feature["id"].int64_list.value.extend([i, -i * 1000000007])
    feature["score"].float_list.value.extend([i / 4, -1.5])
    feature["user"].bytes_list.value.append(b"user:%d" % i)
    if i % 4:
        feature["tags"].bytes_list.value.extend([b"t%d" % k for k in range(i % 4)])
    feature["blob"].bytes_list.value.append(bytes(range(i % 7)))
    return ex.SerializeToString()


def main():
    out_dir = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pb = load_schema(tmp)
        data = b"".join(frame(example(pb, i)) for i in range(count))
    with open(os.path.join(out_dir, "examples.tfrecord"), "wb") as f:
        f.write(data)
    with open(os.path.join(out_dir, "examples.tfrecord.gz"), "wb") as f:
        f.write(gzip.compress(data))
    with open(os.path.join(out_dir, "examples.tfrecord.zlib"), "wb") as f:
        f.write(zlib.compress(data))
    print(f"wrote {count} examples in 3 files to {out_dir}")


if __name__ == "__main__":
    main()
