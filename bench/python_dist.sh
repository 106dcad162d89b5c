#!/usr/bin/env bash
# A TF 1.x distributed script on psgraph against its peers, in one run (docs/python.md,
# "A cluster"): bench/tf1_dist_peer.py (the mlp or the cnn, 1 ps + W workers on loopback, each task
# started with its TF_CONFIG) on psgraph.compat.v1 and on TensorFlow 2.21
# (tensorflow.compat.v1; only the import differs), and psgraph's C trainer on the same
# recipe (`psgraph launch --ps 1 --workers W -- psgraph train --model mlp|cnn --epochs E`).
# psgraph's tasks, Python's and C's, talk over ipc:// (what `psgraph launch` gives tasks of
# one host); TensorFlow's over 127.0.0.1 ports, the only kind it has.
# One JSON line each: aggregate examples/s (every worker's, after its first 20 steps), best of
# the rounds with the spread (worst/best), and the chief's test accuracy: round r runs every
# side with seed r (initial weights, examples' order), so the accuracies are a mean over the
# seeds with their standard deviation; then the ratios psgraph-python / tensorflow and
# psgraph-python / psgraph-c and the difference of the mean accuracies. With --cnn also the
# FLOP of a training example (bench/tf1_dist_peer.py flops, each side's graph), the machine's
# sgemm GFLOP/s (tf1_dist_peer.py peak: one core's best, times the cores; before and after)
# and each side's best GFLOP/s as a fraction of it.
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
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
seed=1

py_side() {
  /usr/bin/python3 bench/tf1_dist_peer.py "${peer[@]}" --seed $seed --impl psgraph | tail -1 >>"$tmp/python"
}
tf_side() {
  [ $have_tf = 1 ] && tfpy bench/tf1_dist_peer.py "${peer[@]}" --seed $seed --impl tensorflow |
    tail -1 >>"$tmp/tensorflow"
}
# one core's sgemm GFLOP/s, best of short products (a loaded machine still shows it), and
# the machine's (times the cores): "core machine"
sgemm() {
  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/tf1_dist_peer.py peak --impl psgraph |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["sgemm_gflops_one_core"], d["sgemm_gflops_machine"])'
}
if [ $model = cnn ]; then
  peak0=$(sgemm)
  /usr/bin/python3 bench/tf1_dist_peer.py flops --model cnn --impl psgraph >"$tmp/flops"
  [ $have_tf = 1 ] && tfpy bench/tf1_dist_peer.py flops --model cnn --impl tensorflow >>"$tmp/flops"
fi
c_side() {
  local s=()
  [ ${#sync[@]} = 1 ] && s=(--sync sync)
  $psgraph launch --ps 1 --workers "$workers" -- $psgraph train --model "$model" --epochs "$epochs" \
    --threads "$threads" --seed $seed --log-every 1000000 "${s[@]}" 2>/dev/null |
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
  seed=$((r + 1))
  for ((k = 0; k < 3; k++)); do ${sides[$(((r + k) % 3))]}; done
done
[ $model = cnn ] && peak1=$(sgemm)
LOAD="$load" LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)" PEAK="${peak0:-} ${peak1:-}" ROUNDS="$rounds" SYNC="${#sync[@]}" W="$workers" E="$epochs" TH="$threads" M="$model" \
  /usr/bin/python3 - "$tmp" <<'PY'
import json, os, statistics, sys
tmp = sys.argv[1]
best, acc_mean = {}, {}
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
        accs = [r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None]
        line.update(examples_per_sec=b, spread=round(min(rates) / b, 3),
                    examples_per_sec_each=rates, test_accuracy=accs)
        if accs:
            acc_mean[side] = statistics.mean(accs)
            line.update(test_accuracy_mean=round(acc_mean[side], 4),
                        test_accuracy_sd=round(statistics.stdev(accs), 4) if len(accs) > 1 else None)
        best[side] = (b, rows)
    print(json.dumps(line))
if "python" in best:
    py = best["python"][0]
    out = {"bench": "python_dist", "model": os.environ["M"], "load_avg": os.environ["LOAD"]}
    if "tensorflow" in best:
        out["python_over_tensorflow"] = round(py / best["tensorflow"][0], 3)
    if "c" in best:
        out["python_over_c"] = round(py / best["c"][0], 3)
    if "python" in acc_mean and "tensorflow" in acc_mean:
        out["accuracy_mean_python_minus_tensorflow"] = round(
            acc_mean["python"] - acc_mean["tensorflow"], 4)
    out["load_avg_end"] = os.environ["LOAD1"]
    print(json.dumps(out))
# the cnn's rates as FLOP/s: each side's graph's FLOP an example (psgraph train's graph is
# psgraph's: the same layers, conv1's input gradient not computed either) against sgemm's
flops = {}
try:
    for l in open(os.path.join(tmp, "flops")):
        if l.strip():
            f = json.loads(l)
            flops[f["impl"]] = f["flop_per_example"]
except OSError:
    pass
peaks = [float(v) for v in os.environ["PEAK"].split()]
if flops and len(peaks) >= 2:
    p2 = max(peaks[1::2])
    out = {"bench": "python_dist", "model": "cnn", "flop_per_example": flops,
           "sgemm_gflops_one_core": peaks[0::2], "sgemm_gflops_machine": peaks[1::2]}
    for side, impl in (("python", "psgraph"), ("tensorflow", "tensorflow"), ("c", "psgraph")):
        if side in best and impl in flops:
            g = best[side][0] * flops[impl] / 1e9
            out[side + "_gflops"] = round(g, 1)
            out[side + "_of_sgemm_machine"] = round(g / p2, 3)
    if "tensorflow" in best:
        # the 2x bar in FLOP/s: twice TF's examples/s at psgraph's FLOP an example
        need = 2 * best["tensorflow"][0] * flops["psgraph"] / 1e9
        out["twice_tensorflow_gflops"] = round(need, 1)
        out["twice_tensorflow_of_sgemm_machine"] = round(need / p2, 3)
    print(json.dumps(out))
PY
