#!/usr/bin/env bash
# The machine's f32 peak as the anchor (issue 33): each CPU training workload's achieved
# GFLOP/s beside a tuned sgemm's (OpenBLAS, 1024-cube, `bench_gemm peak`) on the same
# number of threads, measured in the same run, rounds alternating (peak, mlp, cnn).
#   bench/peak.sh [mlp,cnn] [--quick]
# One JSON line per workload: best and spread of each, the fraction best / best peak, the
# load average at the start and the end. A training step's multiply-adds are counted as
# 3 forward passes (forward, the gradient of the inputs, of the weights) of its MatMuls
# and convolutions, less the first layer's input gradient (not computed): the mlp
# 784-256-256-10 1.61 MFLOP an example, the cnn 72.4 MFLOP. Env: PSG_BENCH_THREADS (1),
# PSG_BENCH_ROUNDS (3).
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/workloads.sh "$@"
psgraph=build/cli/psgraph
threads=${PSG_BENCH_THREADS:-1}
rounds=${PSG_BENCH_ROUNDS:-3}
data=fashion-mnist
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || data=synthetic
load0=$(cut -d' ' -f1 /proc/loadavg)
out=""
for _ in $(seq "$rounds"); do
  out+="peak $(build/bench/bench_gemm peak | grep "\"threads\":$threads," |
    sed 's/.*"openblas_gflops":\([0-9.]*\).*/\1/')"$'\n'
  for w in ${workloads//,/ }; do
    case $w in
      mlp) steps=$([ $quick = 1 ] && echo 200 || echo 600) ;;
      cnn) steps=$([ $quick = 1 ] && echo 30 || echo 100) ;;
      *) continue ;;
    esac
    out+="$w $("$psgraph" train --model "$w" --data "$data" --steps "$steps" --threads "$threads" \
      --log-every 1000000 --test-examples 100 | sed -n 's/.*"event":"done".*"examples_per_sec":\([0-9.]*\).*/\1/p')"$'\n'
  done
done
OUT="$out" TH="$threads" L0="$load0" L1="$(cut -d' ' -f1 /proc/loadavg)" DATA="$data" python3 - <<'PY'
import json, os
flop = {"mlp": 3 * 2 * (784 * 256 + 256 * 256 + 256 * 10),
        # conv1 and conv2 (SAME, 28x28 then 14x14), fc1, fc2; conv1's input gradient not computed
        "cnn": 3 * 2 * (28 * 28 * 32 * 25 + 14 * 14 * 64 * 25 * 32 + 3136 * 512 + 512 * 10)
               - 2 * 28 * 28 * 32 * 25}
runs = {}
for line in os.environ["OUT"].splitlines():
    k, _, v = line.partition(" ")
    if v.strip():
        runs.setdefault(k, []).append(float(v))
peak = runs.get("peak", [])
for w, eps in runs.items():
    if w == "peak" or not peak:
        continue
    g = [e * flop[w] * 1e-9 for e in eps]
    print(json.dumps({"bench": "peak", "workload": w, "data": os.environ["DATA"],
                      "threads": int(os.environ["TH"]), "rounds": len(g),
                      "mflop_per_example": round(flop[w] / 1e6, 2),
                      "examples_per_sec": [round(e, 1) for e in eps],
                      "gflops_best": round(max(g), 2), "gflops_spread": [round(min(g), 2), round(max(g), 2)],
                      "sgemm_peak_gflops_best": max(peak),
                      "sgemm_peak_spread": [min(peak), max(peak)],
                      "fraction_of_peak": round(max(g) / max(peak), 3),
                      "loadavg_start_end": [float(os.environ["L0"]), float(os.environ["L1"])]}))
PY
