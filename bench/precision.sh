#!/usr/bin/env bash
# Mixed precision against f32 on the same workloads, in one run: one JSON
# line per workload with examples/sec and test accuracy of each, and the
# ratio mixed / f32.
#   bench/precision.sh [mlp,cnn] [cpu|gpu] [mixed|mixed-f16]
# On the CPU mixed is expected to be slower: no CPU kernel computes in bf16
# (each 16-bit product converts to f32, runs the f32 GEMM and rounds back),
# so the casts are pure overhead; the speed-up is the GPU's (tensor cores,
# half the bytes), measured by bench/cuda_train.sh --precision mixed.
set -uo pipefail
cd "$(dirname "$0")/.."
workloads=${1:-mlp,cnn}
device=${2:-cpu}
mixed=${3:-mixed}
threads=${PSG_BENCH_THREADS:-2}
bash tools/build.sh build || exit 1
for w in ${workloads//,/ }; do
  case $w in
    mlp) args=(--model mlp --epochs 1 --optimizer adam --lr 0.001) ;;
    cnn) args=(--model cnn --steps 300) ;;
    *) echo "{\"bench\":\"precision\",\"error\":\"unknown workload $w\"}"; continue ;;
  esac
  run() {
    build/cli/psgraph train "${args[@]}" --device "$device" --precision "$1" --threads "$threads" \
      --log-every 1000000 | grep '"event":"done"' | tail -1
  }
  F32=$(run f32) MIXED=$(run "$mixed") W="$w" D="$device" P="$mixed" python3 - <<'PY'
import json, os
f = json.loads(os.environ["F32"]) if os.environ["F32"] else {}
m = json.loads(os.environ["MIXED"]) if os.environ["MIXED"] else {}
out = {"bench": "precision", "workload": os.environ["W"], "device": os.environ["D"],
       "precision": os.environ["P"], "steps": m.get("steps"),
       "f32_examples_per_sec": f.get("examples_per_sec"),
       "mixed_examples_per_sec": m.get("examples_per_sec"),
       "f32_test_accuracy": f.get("test_accuracy"), "mixed_test_accuracy": m.get("test_accuracy")}
if f.get("examples_per_sec") and m.get("examples_per_sec"):
    out["ratio"] = round(m["examples_per_sec"] / f["examples_per_sec"], 3)
print(json.dumps(out))
PY
done
