#!/usr/bin/env bash
# A cluster's final checkpoint holds every worker's last update (issue 37, worker/trainer.c,
# worker/cluster_ckpt.c): the chief saves once every worker is done and the ps tasks applied
# all updates, names the checkpoint by the job's global step, then evaluates that state. As
# a user checks it: the chief's final line against `psgraph inspect` (the step), numpy on the
# checkpoint's files (tests/ckpt_accuracy.py; skipped without numpy) and the project's own
# evaluator task run on the logdir afterwards (the accuracy): async 1 ps + 2 workers with a
# straggler, sync 2 ps + 2 workers, and a cluster started by hand with a "chief" job (whose
# /job:worker/task:0 names itself so in its summary line).
# usage: test_final_checkpoint.sh PSGRAPH BUILDDIR [asan]
set -u
psgraph=$1
builddir=$2
asan=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
fails=0
tmp=$(mktemp -d /tmp/psg_test_final_ckpt.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
free_port() { python3 "$(dirname "$0")/python/free_ports.py" 1; }
data_dir=/usr/share/datasets/fashion-mnist
data=synthetic
[ -f "$data_dir/t10k-images-idx3-ubyte.gz" ] && data=fashion-mnist
steps=50
[ "$asan" = asan ] && steps=20
. "$here/numpy_python.sh"
py=""
[ $data = fashion-mnist ] && py=$(numpy_python "$builddir")
[ -n "$py" ] || echo "skip numpy's reading of the checkpoints: no numpy (or no Fashion-MNIST)"
train=(train --model mlp --data "$data" --batch 64 --steps "$steps" --log-every 1000 --step-timeout 60)

# checks logdir $1 against the chief's final line in file $2; $3 names the case
check() {
  local done_line step ev_out ev_rc np=""
  done_line=$(grep -o '{"event":"done".*' "$2" | tail -1)
  step=$("$psgraph" inspect "$1" 2>&1 | head -1 | sed -n 's/.*: global step \([0-9]*\),.*/\1/p')
  # the project's own reader: an evaluator task started after the job evaluates its newest checkpoint
  ev_out=$(TF_CONFIG='{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2","127.0.0.1:3"]},"task":{"type":"evaluator","index":0}}' \
    timeout 120 "$psgraph" "${train[@]}" --logdir "$1" 2>&1 | grep -o '{"event":"evaluator_done".*')
  ev_rc=$?
  [ -n "$py" ] && np=$("$py" "$here/ckpt_accuracy.py" "$1" "$data_dir" 2>&1)
  if res=$(python3 - "$done_line" "$step" "$ev_out" "$np" <<'PY' 2>&1
import json, sys
done, step, ev = json.loads(sys.argv[1]), int(sys.argv[2] or -1), json.loads(sys.argv[3])
gs, acc = done["global_steps"], done["test_accuracy"]
assert step == gs, "psgraph inspect: global step %d, the chief's final line: global_steps %d" % (step, gs)
assert ev["step"] == gs and ev["test_accuracy"] == acc, ("evaluator", ev, "chief", gs, acc)
msg = "global step %d in the final line, inspect and the evaluator; accuracy %.4f = the evaluator's" % (gs, acc)
if sys.argv[4]:
    np = json.loads(sys.argv[4])
    assert np["step"] == gs and np["global_step"] == gs and np["test_accuracy"] == acc, ("numpy", np, gs, acc)
    msg += " = numpy's on the files"
print(msg)
PY
  ); then
    ok "$3: $res"
  else
    fail "$3: $res (evaluator rc $ev_rc: $ev_out; numpy: $np) $(tail -4 "$2")"
  fi
}

# 1. async, 1 ps + 2 workers, worker 1 delayed: the case the issue reported (updates of the
# last steps of the slower worker came after the chief's own last step)
timeout 300 "$psgraph" launch --ps 1 --workers 2 -- "$psgraph" "${train[@]}" --logdir "$tmp/a" \
  --straggler worker=1,delay_ms=40 >"$tmp/a.out" 2>&1 || fail "async launch: $(tail -5 "$tmp/a.out")"
check "$tmp/a" "$tmp/a.out" "async, 1 ps + 2 workers, a straggler"

# 2. sync, 2 ps + 2 workers
timeout 300 "$psgraph" launch --ps 2 --workers 2 -- "$psgraph" "${train[@]}" --sync sync --logdir "$tmp/s" \
  >"$tmp/s.out" 2>&1 || fail "sync launch: $(tail -5 "$tmp/s.out")"
check "$tmp/s" "$tmp/s.out" "sync, 2 ps + 2 workers"

# 3. started by hand from TF_CONFIG files as TF's guides write them, with a "chief" job and an
# evaluator beside the job: the evaluator's last evaluation is the chief's final one
cluster=$(printf '{"chief":["127.0.0.1:%s"],"worker":["127.0.0.1:%s"],"ps":["127.0.0.1:%s"]}' \
  "$(free_port)" "$(free_port)" "$(free_port)")
cfg() { printf '{"cluster":%s,"task":{"type":"%s","index":%s}}' "$cluster" "$1" "$2"; }
h=$tmp/h
TF_CONFIG=$(cfg ps 0) timeout 300 "$psgraph" server --logdir "$h" >"$tmp/ps.out" 2>&1 &
pids+=("$!")
TF_CONFIG=$(cfg evaluator 0) timeout 300 "$psgraph" "${train[@]}" --logdir "$h" >"$tmp/ev.out" 2>&1 &
ev=$!
pids+=("$ev")
TF_CONFIG=$(cfg worker 0) timeout 300 "$psgraph" "${train[@]}" --logdir "$h" --checkpoint-every 10 \
  --straggler worker=1,delay_ms=20 >"$tmp/w.out" 2>&1 &
w=$!
pids+=("$w")
TF_CONFIG=$(cfg chief 0) timeout 300 "$psgraph" "${train[@]}" --logdir "$h" --checkpoint-every 10 \
  --straggler worker=1,delay_ms=20 >"$tmp/c.out" 2>&1
rc=$?
wait "$w"
rcw=$?
wait "$ev"
rce=$?
if [ $rc = 0 ] && [ $rcw = 0 ] && [ $rce = 0 ]; then
  check "$h" "$tmp/c.out" "TF_CONFIG by hand, chief + worker + ps"
  last=$(grep -o '{"event":"evaluator_done".*' "$tmp/ev.out")
  if python3 -c 'import json,sys; e,d=json.loads(sys.argv[1]),json.loads(sys.argv[2]); assert e["step"]==d["global_steps"] and e["test_accuracy"]==d["test_accuracy"], (e, d)' \
       "$last" "$(grep -o '{"event":"done".*' "$tmp/c.out")" 2>"$tmp/err"; then
    ok "the evaluator beside the job ended on the chief's final checkpoint: $last"
  else
    fail "the evaluator beside the job: $(cat "$tmp/err")"
  fi
  if grep -q '{"event":"sync_summary","task":"/job:worker/task:0","worker":1,' "$tmp/w.out" &&
     grep -q 'psgraph train: /job:worker/task:0 of 2 workers (not chief)' "$tmp/w.out" &&
     grep -q '{"event":"sync_summary","task":"/job:chief/task:0","worker":0,' "$tmp/c.out"; then
    ok "with a chief job, /job:worker/task:0 names its task beside its rank: $(grep -o '"task":"[^"]*","worker":[0-9]' "$tmp/w.out")"
  else
    fail "task names with a chief job: $(grep sync_summary "$tmp/w.out" "$tmp/c.out")"
  fi
else
  fail "cluster by hand (chief rc $rc, worker $rcw, evaluator $rce): $(tail -4 "$tmp/c.out") $(tail -4 "$tmp/w.out") $(tail -4 "$tmp/ev.out")"
fi
[ $fails = 0 ]
