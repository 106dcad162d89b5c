#!/usr/bin/env bash
# A TF 1.x distributed script on psgraph against its peers, in one run (docs/python.md,
# "A cluster"): bench/tf1_dist_peer.py (the mlp or the cnn, 1 ps + W workers on loopback, each task
# started with its TF_CONFIG) on psgraph.compat.v1 and on TensorFlow 2.21
# (tensorflow.compat.v1; only the import differs), and psgraph's C trainer on the same
# recipe (`psgraph launch --ps 1 --workers W -- psgraph train --model mlp|cnn --epochs E`).
# One JSON line each: aggregate examples/s (every worker's, after its first 20 steps) and the
# chief's test accuracy, best of the rounds with the spread (worst/best), then the ratios
# psgraph-python / tensorflow and psgraph-python / psgraph-c.
#   bench/python_dist.sh [--sync] [--cnn] [--quick]   (--sync: SyncReplicasOptimizer, N = W)
# Env: PSG_BENCH_ROUNDS (default 3; the sides alternate, the order turning each round),
# PSG_BENCH_WORKERS (2), PSG_BENCH_EPOCHS (1), PSG_BENCH_THREADS (1), PSG_TF_VENV
# (build/tf-venv, made when it lacks TensorFlow 2.21: bench/tf_venv.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
sync=()
model=mlp
for a in "$@"; do
  case $a in
    --sync) sync=(--sync) ;;
    --cnn) model=cnn ;;
    --quick) export PSG_BENCH_ROUNDS=${PSG_BENCH_ROUNDS:-1} ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/python_dist.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
rounds=${PSG_BENCH_ROUNDS:-3}
workers=${PSG_BENCH_WORKERS:-2}
epochs=${PSG_BENCH_EPOCHS:-1}
threads=${PSG_BENCH_THREADS:-1}
venv=${PSG_TF_VENV:-build/tf-venv}
psgraph=build/cli/psgraph
export PYTHONPATH=$PWD/build/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x $psgraph ] && /usr/bin/python3 -c 'import psgraph.compat.v1' 2>/dev/null ||
  { echo '{"bench":"python_dist","error":"build it first: bash tools/build.sh build"}'; exit 1; }
. bench/tf_venv.sh
tf_venv
load=$(cut -d' ' -f1-3 /proc/loadavg)
peer=(launch --model "$model" --workers "$workers" --epochs "$epochs" --threads "$threads" "${sync[@]}")

py_side() { /usr/bin/python3 bench/tf1_dist_peer.py "${peer[@]}" --impl psgraph | tail -1 >>"$tmp/python"; }
tf_side() {
  [ $have_tf = 1 ] && tfpy bench/tf1_dist_peer.py "${peer[@]}" --impl tensorflow | tail -1 >>"$tmp/tensorflow"
}
c_side() {
  local s=()
  [ ${#sync[@]} = 1 ] && s=(--sync sync)
  $psgraph launch --ps 1 --workers "$workers" -- $psgraph train --model "$model" --epochs "$epochs" \
    --threads "$threads" --log-every 1000000 "${s[@]}" 2>/dev/null |
    grep '^\[worker[0-9]*\] {"event":"done"' | sed 's/^\[worker[0-9]*\] //' |
    /usr/bin/python3 -c '
import json, sys
# only the chief prints the done line: its own examples/s (after its first 20 steps) times
# the share of the global steps it ran is the aggregate of the workers, as the peers sum theirs
rows = [json.loads(l) for l in sys.stdin if l.strip()]
c = rows[0] if rows else {}
rate = c.get("examples_per_sec", 0) * c.get("global_steps", 0) / max(1, c.get("steps", 1))
print(json.dumps({"impl": "psgraph-c", "examples_per_sec": round(rate, 1),
                  "test_accuracy": c.get("test_accuracy")}))' >>"$tmp/c"
}
sides=(py_side tf_side c_side)
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < 3; k++)); do ${sides[$(((r + k) % 3))]}; done
done
LOAD="$load" ROUNDS="$rounds" SYNC="${#sync[@]}" W="$workers" E="$epochs" TH="$threads" M="$model" \
  /usr/bin/python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
best = {}
for side in ("python", "tensorflow", "c"):
    try:
        rows = [json.loads(l) for l in open(os.path.join(tmp, side)) if l.strip()]
    except OSError:
        rows = []
    rates = [r["examples_per_sec"] for r in rows if r.get("examples_per_sec")]
    line = {"bench": "python_dist", "side": {"python": "psgraph.compat.v1", "tensorflow":
            "tensorflow 2.21 compat.v1", "c": "psgraph launch + psgraph train"}[side],
            "model": os.environ["M"], "workers": int(os.environ["W"]), "ps": 1,
            "sync": os.environ["SYNC"] == "1",
            "epochs": int(os.environ["E"]), "threads": int(os.environ["TH"]),
            "rounds": len(rows), "load_avg": os.environ["LOAD"]}
    if rates:
        b = max(rates)
        line.update(examples_per_sec=b, spread=round(min(rates) / b, 3),
                    test_accuracy=[r.get("test_accuracy") for r in rows])
        best[side] = (b, rows)
    print(json.dumps(line))
if "python" in best:
    py = best["python"][0]
    out = {"bench": "python_dist", "model": os.environ["M"], "load_avg": os.environ["LOAD"]}
    if "tensorflow" in best:
        out["python_over_tensorflow"] = round(py / best["tensorflow"][0], 3)
    if "c" in best:
        out["python_over_c"] = round(py / best["c"][0], 3)
    print(json.dumps(out))
PY
