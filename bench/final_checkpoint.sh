#!/usr/bin/env bash
# Issue 37's check of a cluster's last checkpoint: the test accuracy the chief reports in its
# final line against the one numpy computes from the last checkpoint's files alone
# (tests/ckpt_accuracy.py), and the checkpoint's step (psgraph inspect) against the final
# line's global_steps: async and sync, 1 ps + 2 workers and 2 ps + 2 workers, with and
# without a straggler (worker 1 delayed 40 ms a step), RUNS runs each (the mlp, 50 steps a
# worker, batch 64). One JSON line a run, then one a setting and a total; the "peer" here is
# numpy reading the files, and the figure is how many runs agree exactly (want: all).
#   bench/final_checkpoint.sh [RUNS]        (default 5: 40 cluster runs, a few minutes)
# PSGRAPH=path: another build's binary (e.g. the main branch's, for the figure before the fix).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
psgraph=${PSGRAPH:-build/cli/psgraph}
[ -n "${PSGRAPH:-}" ] || bash tools/build.sh build >/dev/null || exit 1
data_dir=/usr/share/datasets/fashion-mnist
[ -f "$data_dir/t10k-images-idx3-ubyte.gz" ] || { echo '{"skipped":"no Fashion-MNIST (dataset-fashion-mnist)"}'; exit 0; }
. tests/numpy_python.sh
py=$(numpy_python build)
[ -n "$py" ] || { echo '{"skipped":"no numpy (python3 -m venv + pip install numpy failed)"}'; exit 0; }
tmp=$(mktemp -d /tmp/psg_bench_final_ckpt.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
total=0
equal=0
for sync in async sync; do
  for ps in 1 2; do
    for strag in none worker=1,delay_ms=40; do
      set_equal=0
      for run in $(seq "$runs"); do
        dir=$tmp/$sync-$ps-${strag%%,*}-$run
        extra=()
        [ "$strag" != none ] && extra=(--straggler "$strag")
        "$psgraph" launch --ps "$ps" --workers 2 -- "$psgraph" train --model mlp --steps 50 --batch 64 \
          --sync "$sync" --log-every 1000 --step-timeout 60 --logdir "$dir" "${extra[@]}" >"$tmp/log" 2>&1
        rc=$?
        done_line=$(grep '^\[worker0\] {"event":"done"' "$tmp/log" | tail -1 | sed 's/^\[worker0\] //')
        ckpt=$("$py" tests/ckpt_accuracy.py "$dir" "$data_dir" 2>&1)
        step=$("$psgraph" inspect "$dir" 2>&1 | head -1 | sed -n 's/.*: global step \([0-9]*\),.*/\1/p')
        line=$(SYNC=$sync PS=$ps STRAG=$strag RUN=$run RC=$rc DONE="$done_line" CKPT="$ckpt" STEP="$step" "$py" - <<'PY'
import json, os
e = os.environ
try:
    done, ck = json.loads(e["DONE"]), json.loads(e["CKPT"])
except ValueError:
    print(json.dumps({"sync": e["SYNC"], "ps": int(e["PS"]), "straggler": e["STRAG"], "run": int(e["RUN"]),
                      "rc": int(e["RC"]), "equal": False, "error": (e["DONE"] + " " + e["CKPT"])[-400:]}))
    raise SystemExit
eq = done["test_accuracy"] == ck["test_accuracy"] and str(done["global_steps"]) == e["STEP"] == str(ck["step"])
print(json.dumps({"sync": e["SYNC"], "ps": int(e["PS"]), "workers": 2, "straggler": e["STRAG"], "run": int(e["RUN"]),
                  "rc": int(e["RC"]), "done_test_accuracy": done["test_accuracy"],
                  "checkpoint_test_accuracy": ck["test_accuracy"], "done_global_steps": done["global_steps"],
                  "inspect_global_step": int(e["STEP"] or -1), "checkpoint_global_step_tensor": ck["global_step"],
                  "equal": eq}))
PY
)
        echo "$line"
        total=$((total + 1))
        if grep -q '"equal": true' <<<"$line"; then
          equal=$((equal + 1))
          set_equal=$((set_equal + 1))
        fi
      done
      echo "{\"setting\":\"$sync, $ps ps + 2 workers, straggler $strag\",\"runs\":$runs,\"equal\":$set_equal}"
    done
  done
done
echo "{\"bench\":\"final_checkpoint\",\"runs\":$total,\"equal\":$equal,\"ratio\":$(python3 -c "print(round($equal / $total, 4))")}"
