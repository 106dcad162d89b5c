#!/usr/bin/env bash
# `psgraph simulate --trace` on the trace of a real cluster (1 ps + 1 worker, processes over
# sockets, `psgraph launch`): the calibration finds the mlp's gradients (their bytes are the
# model's variables, 1,077,288 in f32), its variables, a compute time, and the model of the
# traced run gives back its measured step (what calibration means); 2 workers are predicted.
# No timing is asserted: only what the trace says and what the model does with it.
#   tests/test_simulate_trace.sh build/cli/psgraph
set -u
psgraph=$(realpath "${1:-build/cli/psgraph}")
d=$(mktemp -d /tmp/test_simulate_trace.XXXXXX)
trap 'rm -rf "$d"' EXIT
if ! "$psgraph" launch --ps 1 --workers 1 -- "$psgraph" train --model mlp --data synthetic --batch 64 \
  --steps 40 --log-every 1000 --sync sync --trace "$d/t.json" --trace-steps 10:30 >"$d/launch.log" 2>&1; then
  cat "$d/launch.log"
  echo "FAIL: the traced cluster run"
  exit 1
fi
if ! out=$("$psgraph" simulate --trace "$d/t.json" --workers 1,2 --backups 0 --steps 50 --tail none --ps 1 2>&1); then
  echo "$out"
  echo "FAIL: psgraph simulate --trace"
  exit 1
fi
echo "$out"
python3 - "$out" <<'PY'
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
cal = [l for l in lines if l.get("simulate") == "calibration"]
pts = {l["workers"]: l for l in lines if l.get("simulate") == "sync_replicas"}
fails = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails.append(what)
check(len(cal) == 1, "one calibration line")
c = cal[0] if cal else {}
check(c.get("trace_workers") == 1, "the trace holds 1 worker")
check(c.get("trace_steps", 0) >= 15, "at least 15 traced steps used (10:30, less the first and last)")
# mlp: fc1 in 2 column shards (--shard-bytes 512 KiB), its bias, fc2, fc3: 7 gradients, and
# the worker's local step (8 bytes) beside them
check(c.get("pushes", 0) >= 7, "7 gradients pushed a step (fc1's 2 shards, 5 more)")
check(1077288 <= c.get("push_bytes", 0) <= 1077288 + 64,
      "the gradients' bytes are the mlp's variables' (1,077,288, + the local step)")
check(c.get("pulls", 0) >= 7 and c.get("pull_bytes", 0) >= 1077288, "every variable pulled")
check(c.get("compute_ms", 0) > 0 and c.get("overhead_ms", -1) >= 0, "compute > 0, overhead >= 0")
m, p1 = c.get("measured_step_ms", 0), pts.get(1, {}).get("step_ms", 0)
# the calibration adds the overhead that makes the traced run's own prediction its measured step;
# when the model alone is already slower (a quiet machine: its links' estimate is above what the
# loopback step took), the overhead is 0, the calibration line says so, and the prediction is the
# model's own, not below the measured step
if c.get("overhead_ms", 0) > 0:
    check(m > 0 and abs(p1 - m) <= 0.01 * m, f"1 worker as traced: predicted {p1} ms, measured {m} ms")
else:
    check(m > 0 and p1 >= 0.99 * m and "already as slow as measured" in c.get("note", ""),
          f"1 worker as traced, the model alone slower: predicted {p1} ms, measured {m} ms, said")
check(pts.get(2, {}).get("model") == "overlap" and pts[2]["steps_per_sec"] > 0, "2 workers predicted")
sys.exit(1 if fails else 0)
PY
