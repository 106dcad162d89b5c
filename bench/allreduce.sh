#!/usr/bin/env bash
# Ring all-reduce against sync through one ps: 4 workers (and 1 ps, unused by allreduce's
# step), mlp, SGD, on this host's loopback (psgraph launch), the two alternating in each
# round (odd rounds sync first). One JSON line per run, then a summary line:
#   bytes a worker sends a step (its task server's count, the mean over the workers other
#   than the chief) against the ring's bound 2 (N - 1) / N x the model's bytes, and the
#   chief's steps/s from its sync_step lines (steps 10 to the last: no start-up), both
#   strategies measured the same way; ratio = allreduce / sync, best of the rounds and spread.
#   bench/allreduce.sh [--quick]
# Env: PSG_BENCH_ROUNDS (default 3), PSG_BENCH_STEPS (300; --quick: 100), PSG_BENCH_BATCH (32).
# Each line carries the 1-minute load average before the run: a shared machine's numbers are
# only comparable within a round.
set -uo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  -h | --help) sed -n '2,/^set /p' bench/allreduce.sh | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
  "" | --quick) ;;
  *) echo "usage: bench/allreduce.sh [--quick]" >&2; exit 2 ;;
esac
steps=${PSG_BENCH_STEPS:-300}
[ "${1:-}" = --quick ] && steps=${PSG_BENCH_STEPS:-100}
rounds=${PSG_BENCH_ROUNDS:-3}
batch=${PSG_BENCH_BATCH:-32}
workers=4
bash tools/build.sh build >/dev/null || exit 1
psgraph=build/cli/psgraph
data=fashion-mnist
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || data=synthetic
tmp=$(mktemp -d /tmp/psg_bench_allreduce.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/lines.jsonl
# run SYNC ROUND: one training, its JSON line
run() {
  local dir=$tmp/$1-$2 load
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$psgraph" launch --ps 1 --workers $workers -- "$psgraph" train --model mlp --data $data \
    --batch "$batch" --steps "$steps" --optimizer sgd --sync "$1" --step-timeout 60 \
    --log-every 1000000 --logdir "$dir" >"$dir.log" 2>&1
  SYNC=$1 ROUND=$2 LOAD=$load LOG=$dir.log METRICS=$dir/metrics.jsonl W=$workers \
    BATCH=$batch DATA=$data python3 - <<'PY'
import json, os
e = os.environ
done, walls = None, []
for l in open(e["LOG"]):
    l = l.split("] ", 1)[-1]
    if l.startswith('{"event":"done"'):
        done = json.loads(l)
try:
    for l in open(e["METRICS"]):
        d = json.loads(l)
        if d.get("event") == "sync_step" and d.get("wall_sec") is not None:
            walls.append(d["wall_sec"])
except OSError:
    pass
line = {"bench": "allreduce", "sync": e["SYNC"], "round": int(e["ROUND"]), "load": float(e["LOAD"]),
        "workers": int(e["W"]), "model": "mlp", "data": e["DATA"], "batch": int(e["BATCH"])}
if done is None or len(walls) < 20:
    line["error"] = "no done line or too few steps: see the run's log"
else:
    w = 10
    line["steps"] = len(walls)
    line["steps_per_sec"] = round((len(walls) - 1 - w) / (walls[-1] - walls[w]), 2)
    line["push_bytes_per_step"] = done["push_bytes_per_step"]
    line["pull_bytes_per_step"] = done["pull_bytes_per_step"]
    line["model_push_bytes_per_step"] = done["model_push_bytes_per_step"]
    line["test_accuracy"] = done.get("test_accuracy")
print(json.dumps(line))
PY
}
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="sync allreduce"; else order="allreduce sync"; fi
  for s in $order; do run "$s" "$r" | tee -a "$out"; done
done
W=$workers python3 - "$out" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ok = lambda s: [r for r in rows if r["sync"] == s and "steps_per_sec" in r]
ring, ps = ok("allreduce"), ok("sync")
n = int(os.environ["W"])
line = {"bench": "allreduce", "summary": True, "workers": n, "rounds": len(rows) // 2,
        "loads": [r["load"] for r in rows]}
if ring and ps:
    model = ps[0]["model_push_bytes_per_step"]  # sync pushes the model's bytes: its size
    bound = 2 * (n - 1) / n * model
    sent = max(r["push_bytes_per_step"] for r in ring)
    a, b = [r["steps_per_sec"] for r in ring], [r["steps_per_sec"] for r in ps]
    ratios = [x["steps_per_sec"] / y["steps_per_sec"] for x in ring for y in ps
              if x["round"] == y["round"]]
    line.update(model_bytes=model, ring_bound_bytes=round(bound), allreduce_push_bytes_per_step=sent,
                bytes_over_bound=round(sent / bound, 4), target_bytes_over_bound=1.05,
                allreduce_steps_per_sec={"best": max(a), "min": min(a)},
                sync_steps_per_sec={"best": max(b), "min": min(b)},
                ratio=round(max(a) / max(b), 3),
                ratio_per_round=[round(x, 3) for x in ratios], target_ratio=0.9)
print(json.dumps(line))
PY
