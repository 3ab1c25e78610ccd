#!/usr/bin/env bash
# Installs the Debian 12 packages psflow needs, only those that are missing.
# Runs as root or through sudo. Safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev libboost-serialization1.81-dev  # 1.81 pinned: Debian's default 1.74 conflicts
  libxtensor-dev libxtensor-blas-dev libxsimd-dev
  libopenblas-dev                                  # explicit: the reference BLAS is ~30x slower
  nlohmann-json3-dev zlib1g-dev
  catch2 libbenchmark-dev
  dataset-fashion-mnist python3-numpy
  clang-format git                                 # the style check: clang-format 14, tracked files
  graphviz                                         # --explain=dot renders its pictures (dot -Tsvg)
  protobuf-compiler python3-protobuf               # tests/tools/read_events.py: event files
  python3-yaml                                     # tests/tools/check_deploy.py: deploy/kubernetes
  iproute2                                         # ip: test_multi_host's network namespaces
  libssl-dev                                       # libcrypto, libssl: the cluster secret's HMAC
                                                   # handshake, mutual TLS between tasks
  openssl                                          # test_tls makes its certificates with it
  clang-14 libclang-rt-14-dev                      # fuzz/run.sh: libFuzzer with ASan+UBSan
  curl                                             # tests/tools/check_serving.py: examples/serve
  libre2-dev                                       # regex_full_match: RE2, the engine TF uses
)

missing=()
for p in "${packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "setup: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
