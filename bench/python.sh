#!/usr/bin/env bash
# The Python package against its peers, in one run, JSON lines with the ratios
# (docs/python.md, "Numbers"):
#   train:    the Python mlp and cnn (examples/python, tf.layers, feed_dict every step, one
#             process) beside `psgraph train` on the same recipe: examples/s and the test
#             accuracy after E epochs (PSG_PY_EPOCHS, default 3), both from the C model's
#             initial values (a `psgraph train --steps 0` checkpoint) and the same batches.
#   overhead: one Session.run (3 feeds, 2 fetches, one Add) on psgraph beside TensorFlow
#             2.21's tf.compat.v1.Session.run.
#   tf1:      bench/tf1_peer.py, one TF 1.x script (mlp, cnn with tf.layers), on TensorFlow and
#             on psgraph.compat.v1: test accuracy and examples/s.
#   bench/python.sh [train,overhead,tf1] [--quick]
# --quick: 1 epoch of the mlp and 200 steps of the cnn. Rounds: PSG_BENCH_ROUNDS (default 3)
# alternate the two sides (odd rounds psgraph first); ratios are best against best, each
# side's spread (worst/best) beside, and the load average at the start. Threads:
# PSG_BENCH_THREADS (default 1) for both. PSG_PY_MODELS (default "mlp cnn"): the models of
# train and tf1. TensorFlow is the peer, not a dependency: it lives in the venv PSG_TF_VENV
# (default build/tf-venv), made here when it lacks tensorflow-cpu==2.21.0 and tf-keras
# (tf.compat.v1.layers needs Keras 2: TF_USE_LEGACY_KERAS=1).
set -uo pipefail
cd "$(dirname "$0")/.."
parts=train,overhead,tf1
quick=0
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    -*) echo "bench/python.sh: unknown option $a" >&2; exit 2 ;;
    *) parts=$a ;;
  esac
done
rounds=${PSG_BENCH_ROUNDS:-3}
threads=${PSG_BENCH_THREADS:-1}
epochs=${PSG_PY_EPOCHS:-3}
models=${PSG_PY_MODELS:-mlp cnn} # train and tf1: which models
venv=${PSG_TF_VENV:-build/tf-venv}
py=/usr/bin/python3
export PYTHONPATH=$PWD/build/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x build/cli/psgraph ] && $py -c 'import psgraph.compat.v1' 2>/dev/null ||
  { echo '{"bench":"python","error":"build it first: bash tools/build.sh build (with python3-dev python3-numpy)"}'; exit 1; }

. bench/tf_venv.sh # tf_venv, tfpy: TensorFlow 2.21 in $venv (uses $tmp)

# alternate A B: rounds of the commands in functions A and B (each appends a JSON line to its
# side's file in $tmp, which report reads and then removes), odd rounds A first
alternate() {
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2 == 1)); then $1; $2; else $2; $1; fi
  done
}

# report NAME KEY A B SENSE: best-against-best of KEY in $tmp/A and $tmp/B (SENSE max or min)
report() {
  $py - "$@" "$tmp" "$(cut -d' ' -f1 /proc/loadavg)" <<'PYEOF'
import json, sys
name, key, a, b, sense, tmp, load = sys.argv[1:8]
def lines(f):
    try:
        return [json.loads(l) for l in open(tmp + "/" + f) if l.startswith("{")]
    except OSError:
        return []
A, B = lines(a), lines(b)
if not A or not B:
    print(json.dumps({"bench": "python", "workload": name, "error": "a side gave no result", a: len(A), b: len(B)}))
    sys.exit()
pick = max if sense == "max" else min
va, vb = [x[key] for x in A], [x[key] for x in B]
out = {"bench": "python", "workload": name, "metric": key, "rounds": len(va),
       a: pick(va), b: pick(vb), "ratio": round(pick(va) / pick(vb), 3),
       a + "_spread": round(max(va) / min(va), 3), b + "_spread": round(max(vb) / min(vb), 3),
       "load_at_end": float(load)}
for k in ("test_accuracy",):
    if k in A[0] and k in B[0]:
        out[a + "_" + k] = [x[k] for x in A]
        out[b + "_" + k] = [x[k] for x in B]
        out["accuracy_difference"] = round(max(abs(x[k] - y[k]) for x, y in zip(A, B)), 4)
if "cpu_us" in A[0] and "cpu_us" in B[0]:  # CPU time a run: what load does not inflate
    out[a + "_cpu_us"] = min(x["cpu_us"] for x in A)
    out[b + "_cpu_us"] = min(x["cpu_us"] for x in B)
for extra in ("version",):
    if extra in B[0]:
        out[b + "_" + extra] = B[0][extra]
print(json.dumps(out))
PYEOF
  rm -f "$tmp/$3" "$tmp/$4" # the next report starts from its own runs
}

for part in ${parts//,/ }; do
  case $part in
    train)
      for m in $models; do
        span=(--epochs "$epochs")
        [ $quick = 1 ] && { [ $m = mlp ] && span=(--epochs 1) || span=(--steps 200); }
        build/cli/psgraph train --model $m --steps 0 --logdir "$tmp/init_$m" >/dev/null || exit 1
        c_side() { build/cli/psgraph train --model $m "${span[@]}" --threads "$threads" --log-every 1000000 |
                     grep '"event":"done"' >>"$tmp/psgraph_train"; }
        py_side() { $py examples/python/$m.py "${span[@]}" --threads "$threads" \
                      --init_from "$tmp/init_$m/model.ckpt-0" | grep '"event": "done"' >>"$tmp/python"; }
        alternate py_side c_side
        report "$m" examples_per_sec python psgraph_train max
      done ;;
    overhead)
      tf_venv
      runs=$([ $quick = 1 ] && echo 5000 || echo 20000)
      ours() { $py bench/session_overhead.py --backend psgraph --runs $runs >>"$tmp/psgraph"; }
      theirs() { [ $have_tf = 1 ] && tfpy bench/session_overhead.py --backend tf --runs $runs >>"$tmp/tensorflow"; }
      alternate ours theirs
      report session_run mean_us psgraph tensorflow min ;;
    tf1)
      tf_venv
      for m in $models; do
        span=(--epochs "$epochs")
        [ $m = cnn ] && span=(--epochs 1)
        [ $quick = 1 ] && span=(--steps 200)
        ours() { $py bench/tf1_peer.py --backend psgraph --model $m "${span[@]}" --threads "$threads" >>"$tmp/psgraph"; }
        theirs() { [ $have_tf = 1 ] && tfpy bench/tf1_peer.py --backend tf --model $m "${span[@]}" --threads "$threads" >>"$tmp/tensorflow"; }
        alternate ours theirs
        report "tf1_$m" examples_per_sec psgraph tensorflow max
      done ;;
    *) echo "{\"bench\":\"python\",\"error\":\"unknown part $part (train, overhead, tf1)\"}" ;;
  esac
done
