#!/usr/bin/env bash
# `psgraph bench inception3` as a user runs it, with real processes on 127.0.0.1 and tiny
# images (75x75, batch 2, 10 classes): a local cluster of 1 ps + 2 workers + 1 backup
# (sync replicas: the final JSON line, W gradients used a global step), 2 CPU towers (in one
# process and in each of 2 sync workers), the GPU fallback, a task that fails naming itself, and the option combinations refused.
set -u
psgraph=$1
asan=${2:-}
fails=0
tmp=$(mktemp -d /tmp/psg_test_bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tiny=(--image-size 75 --batch 2 --classes 10 --warmup 0 --log-every 1)
check() { # exit code, text wanted, command...
  local out rc
  out=$("${@:3}" 2>&1); rc=$?
  if [ "$rc" = "$1" ] && grep -qF -- "$2" <<<"$out"; then ok "${*:3}"; else fail "${*:3} -> rc $rc, wanted $1 and '$2': $(tail -5 <<<"$out")"; fi
}

# 1. a local cluster: 1 ps, 2 workers aggregated, 1 backup (under ASan: 2 workers, no backup)
W=2; b=1
[ -n "$asan" ] && b=0
out=$(timeout 240 "$psgraph" bench inception3 "${tiny[@]}" --warmup 1 --steps 1 --ps 1 --workers $W --backup-workers $b 2>&1)
rc=$?
last=$(tail -1 <<<"$out")
if [ $rc = 0 ] && grep -q '^\[worker1\] {"event":"worker_done"' <<<"$out" &&
   grep -q '^\[ps0\] psgraph server: stopped: job done' <<<"$out" &&
   python3 - "$last" "$W" "$b" <<'PY'
import json, math, sys
d = json.loads(sys.argv[1]); W, b = int(sys.argv[2]), int(sys.argv[3])
print("cluster:", {k: d[k] for k in ("workers", "backup_workers", "images_per_sec", "global_steps", "gradients_used", "gradients_dropped", "per_worker_images_per_sec")})
assert d["bench"] == "inception3" and d["ps"] == 1 and d["workers"] == W and d["backup_workers"] == b
assert d["sync"] == "sync" and math.isfinite(d["images_per_sec"]) and d["images_per_sec"] > 0
assert d["global_steps"] == 2 and d["gradients_used"] == W * d["global_steps"]
assert len(d["per_worker_images_per_sec"]) == W + b and all(r > 0 for r in d["per_worker_images_per_sec"])
# the chief's own timed steps (none when the other workers ended the job first: null)
assert (d["steps"] == 0 and d["step_ms_median"] is None) or (d["step_ms_median"] > 0 and d["step_ms_p90"] >= d["step_ms_median"]), d
# why each worker's gradients were dropped adds up to its dropped count
why = d["per_worker_dropped"]
assert len(why) == W + b and all(sum(x.values()) == p[1] for x, p in zip(why, d["per_worker"])), (why, d["per_worker"])
PY
then
  ok "local cluster, 1 ps + $W workers + $b backup: final JSON line, $W gradients used a global step"
else
  fail "local cluster (rc $rc): $(grep -v '\] [0-9]' <<<"$out" | tail -25)"
fi

# 2. towers: 2 CPU towers split the batch; --device gpu without a GPU runs on the CPU
out=$("$psgraph" bench inception3 "${tiny[@]}" --steps 1 --threads 2 --towers 2 2>&1); rc=$?
if [ $rc = 0 ] && python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["towers"]==2 and d["images_per_sec"]>0 and d["params"]==21823274' "$(tail -1 <<<"$out")"; then
  ok "--towers 2: two towers on one batch of 2"
else
  fail "--towers 2 (rc $rc): $(tail -5 <<<"$out")"
fi
out=$("$psgraph" bench inception3 "${tiny[@]}" --steps 1 --threads 2 --device gpu --towers 2 --precision mixed 2>&1); rc=$?
if [ $rc = 0 ] && { grep -q 'running on the CPU' <<<"$out" || grep -q '"device":"gpu"' <<<"$out"; } &&
   grep -q '"precision":"mixed"' <<<"$out"; then
  ok "--device gpu --towers 2 --precision mixed: $(grep -m1 -o 'running on the CPU\|"device":"gpu"' <<<"$out")"
else
  fail "--device gpu --towers 2 --precision mixed (rc $rc): $(tail -5 <<<"$out")"
fi
check 2 "precision 'f8' is not" "$psgraph" bench inception3 "${tiny[@]}" --precision f8
# a cluster of towers: 2 sync workers of 2 CPU towers each, one averaged gradient a variable
out=$(timeout 240 "$psgraph" bench inception3 "${tiny[@]}" --steps 2 --ps 1 --workers 2 --towers 2 2>&1); rc=$?
if [ $rc = 0 ] && grep -q '^\[worker1\] 2 CPU towers, 1 images each' <<<"$out" &&
   python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["towers"]==2 and d["workers"]==2 and d["sync"]=="sync" and d["global_steps"]==2 and d["gradients_used"]==4 and d["images_per_sec"]>0' "$(tail -1 <<<"$out")"; then
  ok "--ps 1 --workers 2 --towers 2: 2 workers of 2 CPU towers, 2 gradients a global step"
else
  fail "--ps 1 --workers 2 --towers 2 (rc $rc): $(grep -v '\] [0-9]' <<<"$out" | tail -15)"
fi

# 3. a task that fails names itself
port=$(python3 "$(dirname "$0")/python/free_ports.py" 1)
cfg="{\"cluster\": {\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:$port\", \"127.0.0.1:2\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}"
check 1 "/job:worker/task:0: --workers 3 --backup-workers 0: the cluster has 2 worker tasks" \
  env TF_CONFIG="$cfg" "$psgraph" bench inception3 "${tiny[@]}" --steps 1 --workers 3

# 4. combinations refused before anything starts
check 2 "--towers 3 is more than --batch 2" "$psgraph" bench inception3 "${tiny[@]}" --towers 3
check 2 "need --ps P >= 1" "$psgraph" bench inception3 "${tiny[@]}" --workers 2
check 2 "need --ps P >= 1" "$psgraph" bench inception3 "${tiny[@]}" --backup-workers 1
check 2 "--towers 3 is more than --batch 2" "$psgraph" bench inception3 "${tiny[@]}" --ps 1 --workers 2 --towers 3
check 2 "--forward-only runs in one process" "$psgraph" bench inception3 "${tiny[@]}" --ps 1 --forward-only
check 2 "--straggler delays the workers of a cluster" "$psgraph" bench inception3 "${tiny[@]}" --straggler worker=0,delay_ms=10
check 2 "--device: 'tpu' is not cpu or gpu" "$psgraph" bench inception3 --device tpu
check 0 "--backup-workers b" "$psgraph" bench inception3 --help
check 2 "--optimizer adam: rmsprop or sgd" "$psgraph" bench inception3 "${tiny[@]}" --optimizer adam
check 2 "--trace is of one process" "$psgraph" bench inception3 "${tiny[@]}" --ps 1 --workers 1 --trace "$tmp/t.json"

# 5. the PyTorch peer's optimizer, and a trace of the timed steps only (bench/inception3.sh, docs/engine.md)
out=$("$psgraph" bench inception3 "${tiny[@]}" --warmup 1 --steps 2 --threads 2 --optimizer sgd --trace "$tmp/t.json" 2>&1)
if [ $? = 0 ] && python3 - "$tmp/t.json" "$(tail -1 <<<"$out")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("ph") == "X"]
ops = {e["cat"] for e in ev}
assert {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "ApplyGradientDescent"} <= ops, ops
assert "ApplyRMSProp" not in ops and "L2Loss" not in ops, ops  # no RMSProp, no weight decay
assert {e["args"]["step"] for e in ev} == {2, 3}  # the timed steps, not the warmup
line = json.loads(sys.argv[2])
assert line["bench"] == "inception3" and line["images_per_sec"] > 0 and line["blas"]
PY
then
  ok "--optimizer sgd --trace: plain SGD, the timed steps' ops traced"
else
  fail "--optimizer sgd --trace: $(tail -5 <<<"$out")"
fi

# 6. --op-profile: the timed steps by op type; the convolutions' FLOPs are the model's
#    multiply-adds x 2 (forward), and as many for each gradient
check 2 "--op-profile is of one process" "$psgraph" bench inception3 "${tiny[@]}" --ps 1 --workers 1 --op-profile
out=$("$psgraph" bench inception3 "${tiny[@]}" --warmup 1 --steps 2 --threads 2 --op-profile 2>&1)
if [ $? = 0 ] && printf '%s\n' "$out" >"$tmp/prof.txt" && python3 - "$tmp/prof.txt" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
prof = {l["op_profile"]: l for l in lines if "op_profile" in l}
bench = [l for l in lines if l.get("bench") == "inception3"][0]
fwd = 2 * bench["macs_per_image"] * bench["batch"] / 1e9
conv = sum(prof[k]["gflop_per_step"] for k in ("Conv2D", "Dense") if k in prof)
assert abs(conv - fwd) < 1e-3 * fwd, (conv, fwd)
assert abs(prof["Conv2DBackpropFilter"]["gflop_per_step"] - prof["Conv2D"]["gflop_per_step"]) < 1e-6
assert list(prof)[-1] == "total" and prof["total"]["step_ms"] > 0 and prof["Conv2D"]["ms_per_step"] > 0
PY
then
  ok "--op-profile: the timed steps by op type, FLOPs as the model's"
else
  fail "--op-profile: $(tail -5 <<<"$out")"
fi

# psgraph train --model inception3 is the same loop, with its evaluation (top-1, top-5 of the
# weights and of their moving average) at the end
out=$("$psgraph" train --model inception3 --image-size 75 --batch 2 --classes 10 --steps 1 --threads 2 --test-examples 4 2>&1); rc=$?
if [ $rc = 0 ] && python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["event"] == "done" and d["model"] == "inception3" and d["steps"] == 1, d
assert all(0 <= d[k] <= 1 for k in ("top1", "top5", "top1_ema", "top5_ema")) and d["top5"] >= d["top1"], d
' "$(tail -1 <<<"$out")"; then
  ok "train --model inception3: the one loop, top-1 and top-5 with and without the moving average"
else
  fail "train --model inception3 (rc $rc): $(tail -5 <<<"$out")"
fi
[ $fails = 0 ]
