#!/usr/bin/env bash
# Training throughput of 1 ps + 1 worker (psgraph launch, async) beside the single-process
# engine on the same workload, in one run: one JSON line per workload with both figures
# and the ratio (targets: cnn >= 0.9, mlp >= 0.7). Then the step round trip (bench_dist_rtt).
#   bench/dist.sh [mlp,cnn] [--quick]
# Env: PSG_BENCH_THREADS (compute threads of each trainer, default 1), PSG_BENCH_ROUNDS
# (default 3): single and distributed runs alternate, the best of each is kept, so that
# a busy machine slows both alike.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/workloads.sh "$@"
psgraph=build/cli/psgraph
threads=${PSG_BENCH_THREADS:-1}
data=fashion-mnist
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || data=synthetic
for w in ${workloads//,/ }; do
  case $w in
    mlp) args=(--model mlp --steps $([ $quick = 1 ] && echo 400 || echo 1500)); target=0.7 ;;
    cnn) args=(--model cnn --steps $([ $quick = 1 ] && echo 120 || echo 400)); target=0.9 ;;
    *) echo "{\"bench\":\"dist_train\",\"error\":\"unknown workload $w\"}"; continue ;;
  esac
  args+=(--data "$data" --threads "$threads" --log-every 1000000)
  single=""; dist=""
  for _ in $(seq "${PSG_BENCH_ROUNDS:-3}"); do
    single+=$("$psgraph" train "${args[@]}" | grep '"event":"done"' | tail -1)$'\n'
    dist+=$("$psgraph" launch --ps 1 --workers 1 -- "$psgraph" train "${args[@]}" |
            grep '^\[worker0\] {"event":"done"' | tail -1 | sed 's/^\[worker0\] //')$'\n'
  done
  SINGLE="$single" DIST="$dist" W="$w" T="$target" TH="$threads" DATA="$data" python3 - <<'PY'
import json, os
def runs(v):
    return [json.loads(l) for l in v.splitlines() if l.strip()]
s, d = runs(os.environ["SINGLE"]), runs(os.environ["DIST"])
a = max((r["examples_per_sec"] for r in s), default=None)
b = max((r["examples_per_sec"] for r in d), default=None)
s = s[0] if s else {}
print(json.dumps({"bench": "dist_train", "workload": os.environ["W"], "data": os.environ["DATA"],
                  "steps": s.get("steps"), "threads": int(os.environ["TH"]),
                  "rounds": len(d),
                  "single_process_examples_per_sec": a,
                  "ps1_worker1_examples_per_sec": b,
                  "ratio": round(b / a, 3) if a and b else None,
                  "target_ratio": float(os.environ["T"])}))
PY
done
# the round trips on loopback TCP (another host's path) and on one host's ipc:// (launch's
# default: psgraph's stream transport, raw ZeroMQ over ipc:// beside it)
for transport in tcp ipc; do
  build/bench/bench_dist_rtt --iters $([ $quick = 1 ] && echo 1000 || echo 3000) --transport $transport
done
