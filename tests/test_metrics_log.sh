#!/usr/bin/env bash
# The metrics of a cluster's --logdir (docs/checkpoints.md): one writer per file (the chief
# metrics.jsonl, worker 1 metrics.worker1.jsonl), every line a whole JSON record naming its
# task, with --log-every 1 on 2 workers; the final cluster evaluation in the chief's
# TensorBoard event file at the last step, equal to the one in metrics.jsonl.
# usage: test_metrics_log.sh PSGRAPH [asan] [STEPS]   (the issue's run: STEPS 1000)
set -u
psgraph=$1
asan=${2:-}
steps=${3:-200}
[ "$asan" = asan ] && [ $# -lt 3 ] && steps=60
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/psg_test_metrics.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
data=(--data synthetic)
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && data=(--data fashion-mnist)
timeout 300 "$psgraph" launch --ps 1 --workers 2 -- "$psgraph" train --model mlp "${data[@]}" \
  --batch 32 --steps "$steps" --log-every 1 --logdir "$tmp/log" --step-timeout 30 >"$tmp/out" 2>&1
rc=$?
if [ $rc != 0 ]; then
  echo "FAIL: the run (rc $rc): $(tail -10 "$tmp/out")"
  exit 1
fi
python3 - "$tmp/log" "$steps" "$here/read_events.py" <<'PY'
import glob, json, os, subprocess, sys
logdir, steps, reader = sys.argv[1], int(sys.argv[2]), sys.argv[3]
files = sorted(os.listdir(logdir))
assert "metrics.jsonl" in files and "metrics.worker1.jsonl" in files, files
tasks = {"metrics.jsonl": "/job:worker/task:0", "metrics.worker1.jsonl": "/job:worker/task:1"}
lines = 0
for name, task in tasks.items():
    progress = []
    for i, line in enumerate(open(os.path.join(logdir, name))):
        try:
            rec = json.loads(line)
        except ValueError:
            sys.exit("FAIL: %s line %d is not JSON: %r" % (name, i + 1, line[:120]))
        assert rec["task"] == task, (name, i + 1, rec)
        if rec["event"] == "progress":
            progress.append(rec["step"])
        lines += 1
    assert progress == list(range(1, steps + 1)), (name, len(progress), progress[:5], progress[-5:])
metrics = [json.loads(l) for l in open(os.path.join(logdir, "metrics.jsonl"))]
evals = [r for r in metrics if r["event"] == "eval"]
assert evals and evals[-1]["step"] == steps, evals
events = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
assert len(events) == 1, events
out = subprocess.run([sys.executable, reader] + events, capture_output=True, text=True, check=True).stdout
acc = [json.loads(l) for l in out.splitlines() if '"accuracy"' in l]
assert acc and acc[-1]["step"] == steps, ("no final accuracy in TensorBoard", acc)
assert abs(acc[-1]["value"] - evals[-1]["test_accuracy"]) < 1e-5, (acc[-1], evals[-1])
print("ok   %d lines of 2 workers' metrics files (--log-every 1, %d steps) all whole JSON naming "
      "their task; final accuracy %.4f at step %d in TensorBoard" % (lines, steps, acc[-1]["value"], steps))
PY
