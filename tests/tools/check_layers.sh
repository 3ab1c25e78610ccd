#!/bin/sh
# Includes never point up the layer order, and each heavy dependency enters through its one place.
#   core <- graph <- runtime <- distributed;  observe reads graph and runtime;  data (input
#   pipelines) sits on runtime and observe;  layers (tf.layers) build on graph alone;  train
#   uses them all;
#   serving (bundles and Model) sits on train without distributed; impl/src.hpp (separate
#   compilation) includes everything.
# Umbrellas: psflow/graph.hpp is the graph layer, psflow/runtime.hpp the runtime layer,
# psflow/train.hpp the train layer.
# Usage: check_layers.sh <include dir>     Prints every violation; exits 1 if there is any.
set -u
cd "$1" || exit 2

allowed() {  # layer -> the layers its headers may include
  case $1 in
    core) echo "core" ;;
    graph) echo "core graph" ;;
    runtime) echo "core graph runtime" ;;
    distributed) echo "core graph runtime distributed" ;;
    observe) echo "core graph runtime observe" ;;
    data) echo "core graph runtime observe data" ;;
    layers) echo "core graph layers" ;;
    train) echo "core graph runtime distributed observe data layers train" ;;
    serving) echo "core graph runtime observe train serving" ;;
    impl) echo "core graph runtime distributed observe data layers train serving impl" ;;  # compiles all of psflow
    *) echo "" ;;
  esac
}

layer_of() {  # header path -> its layer, or "any" for the top-level psflow.hpp and version.hpp
  case $1 in
    psflow/graph.hpp) echo graph ;;
    psflow/runtime.hpp) echo runtime ;;
    psflow/train.hpp) echo train ;;
    psflow/layers.hpp) echo layers ;;
    psflow/serving.hpp) echo serving ;;
    psflow/data.hpp) echo data ;;
    psflow/*/*) echo "$1" | cut -d/ -f2 ;;
    *) echo any ;;
  esac
}

violations=0
report() {
  echo "$1"
  violations=$((violations + 1))
}

for header in $(find psflow -name '*.hpp' | sort); do
  layer=$(layer_of "$header")
  # psflow headers it includes, by their layer
  for included in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\(psflow\/[^>"]*\)[>"].*/\1/p' "$header"); do
    [ "$layer" = any ] && continue
    target=$(layer_of "$included")
    [ "$target" = any ] && continue
    case " $(allowed "$layer") " in
      *" $target "*) ;;
      *) report "$header ($layer) includes $included ($target): a $layer header may include only: $(allowed "$layer")" ;;
    esac
  done
  # heavy dependencies, each through one place
  if grep -Eq '^[[:space:]]*#[[:space:]]*include[[:space:]]*<boost/asio' "$header" && [ "$layer" != distributed ]; then
    report "$header includes Boost.Asio: only distributed/ may (keep the network out of graph and runtime code)"
  fi
  if grep -Eq '^[[:space:]]*#[[:space:]]*include[[:space:]]*<cblas\.h>' "$header" &&
     [ "$header" != psflow/runtime/kernels/math_kernels.hpp ] &&
     [ "$header" != psflow/runtime/kernels/blas.hpp ]; then
    report "$header includes cblas.h: BLAS enters only through psflow/runtime/kernels/math_kernels.hpp or psflow/runtime/kernels/blas.hpp (include blas.hpp for its gemm)"
  fi
done

# psflow/serving.hpp is what a predict-only program includes: nothing it reaches, however
# indirectly, may be in distributed/ (the network layer, Boost.Asio).
includes_of() {
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\(psflow\/[^>"]*\)[>"].*/\1/p' "$1"
}
reached=" psflow/serving.hpp "
pending="psflow/serving.hpp"
while [ -n "$pending" ]; do
  next=""
  for header in $pending; do
    for included in $(includes_of "$header"); do
      case "$reached" in *" $included "*) continue ;; esac
      reached="$reached$included "
      next="$next $included"
      case $included in
        psflow/distributed/*) report "psflow/serving.hpp reaches $included (through $header): inference must not need the network layer" ;;
      esac
    done
  done
  pending=$next
done

if [ "$violations" -gt 0 ]; then
  echo "$violations layer violation(s)"
  exit 1
fi
echo "no include points up the layer order ($(find psflow -name '*.hpp' | wc -l) headers checked)"
