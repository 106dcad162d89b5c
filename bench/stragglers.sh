#!/usr/bin/env bash
# What backup workers buy: steps/sec of sync training with N = 2 and b = 0, 1, 2 backup
# workers (N + b worker processes and 1 ps, psgraph launch on this host), with an injected
# straggler — one worker delayed a fixed 300 ms every step, and a lognormal tail on every
# worker (median 20 ms, sigma 1) — beside the same run with no straggler, as ratios. One JSON
# line per (b, straggler) (target: the fixed 300 ms straggler with b = 1 at >= 0.9x).
#   bench/stragglers.sh [--quick]
# Each run's steps/sec is the chief's, from its first global step to its last (no start-up).
# Global steps a run: 300 without a straggler and with the fixed one when b >= 1, 15 with
# the fixed one when b = 0 (its pace is the straggler's: ~3 steps/s), 100 with the tail;
# --quick: a third of each. Env: PSG_BENCH_ROUNDS (default 1: the best of the rounds is
# kept), PSG_BENCH_MODEL (mlp), PSG_BENCH_BATCH (32).
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = --quick ] && quick=1
bash tools/build.sh build >/dev/null || exit 1
psgraph=build/cli/psgraph
div=$([ $quick = 1 ] && echo 3 || echo 1)
rounds=${PSG_BENCH_ROUNDS:-1}
model=${PSG_BENCH_MODEL:-mlp}
batch=${PSG_BENCH_BATCH:-32}
data=fashion-mnist
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || data=synthetic
n=2
# the chief's final line of one run: run WORKERS B STEPS [--straggler SPEC]
run() {
  "$psgraph" launch --ps 1 --workers "$1" -- "$psgraph" train --model "$model" --data "$data" \
    --batch "$batch" --steps $(($3 / div)) --sync sync --replicas-to-aggregate $n --backup-workers "$2" \
    --step-timeout 60 --log-every 1000000 "${@:4}" 2>&1 |
    grep '^\[worker0\] {"event":"done"' | tail -1 | sed 's/^\[worker0\] //'
}
for b in 0 1 2; do
  w=$((n + b))
  none=""; fixed=""; tail=""
  for _ in $(seq "$rounds"); do
    none+=$(run $w $b 300)$'\n'
    fixed+=$(run $w $b $([ $b = 0 ] && echo 15 || echo 300) --straggler "worker=$((w - 1)),delay_ms=300")$'\n'
    tail+=$(run $w $b 100 --straggler "worker=all,dist=lognormal,median_ms=20,sigma=1")$'\n'
  done
  for kind in fixed lognormal; do
    if [ $kind = fixed ]; then runs=$fixed; spec="worker=$((w - 1)),delay_ms=300"
    else runs=$tail; spec="worker=all,dist=lognormal,median_ms=20,sigma=1"; fi
    NONE="$none" RUNS="$runs" B=$b W=$w N=$n SPEC="$spec" KIND=$kind MODEL=$model \
    BATCH=$batch DATA=$data python3 - <<'PY'
import json, os
def runs(v):
    out = []
    for l in v.splitlines():
        try:
            out.append(json.loads(l))
        except ValueError:
            pass
    return out
e = os.environ
a, s = runs(e["NONE"]), runs(e["RUNS"])
best = lambda rs: max((r["steps_per_sec"] for r in rs), default=None)
x, y = best(a), best(s)
dropped = max(s, key=lambda r: r["steps_per_sec"])["gradients_dropped"] if s else None
line = {"bench": "stragglers", "model": e["MODEL"], "data": e["DATA"], "batch": int(e["BATCH"]),
        "replicas_to_aggregate": int(e["N"]), "backup_workers": int(e["B"]),
        "workers": int(e["W"]), "straggler": e["SPEC"],
        "global_steps": max(s, key=lambda r: r["steps_per_sec"])["global_steps"] if s else None,
        "no_straggler_steps_per_sec": x, "straggler_steps_per_sec": y,
        "ratio": round(y / x, 3) if x and y else None, "gradients_dropped": dropped}
if e["KIND"] == "fixed" and int(e["B"]) == 1:
    line["target_ratio"] = 0.9
print(json.dumps(line))
PY
  done
done
