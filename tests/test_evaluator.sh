#!/usr/bin/env bash
# TensorFlow's evaluator task (worker/evaluator.c, docs/distributed.md): a `psgraph train`
# whose TF_CONFIG task is {"type": "evaluator"} watches the job's --logdir, evaluates each
# new checkpoint once (steps strictly increasing, the last one the job's final checkpoint:
# its step the chief's global_steps, its accuracy exactly the chief's final one, issue 37),
# writes metrics.evaluator.jsonl and LOGDIR/eval TensorBoard scalars, and exits 0 when
# the job ends: once with the evaluator outside the cluster (the job run by `psgraph
# launch`), once listed as a job of a cluster started by hand. Every process is gone after.
set -u
psgraph=$1
asan=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
fails=0
tmp=$(mktemp -d /tmp/psg_test_evaluator.XXXXXX)
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
steps=100
[ "$asan" = asan ] && steps=60
data=synthetic
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && data=fashion-mnist
train=(train --model mlp --data "$data" --batch 32 --steps "$steps" --log-every 20
       --checkpoint-every 20 --step-timeout 30)

# checks the evaluator's records and event file in $1 (logdir), its output in $2, against the
# chief's final line in $3
check_eval() {
  python3 - "$1" "$steps" "$here/read_events.py" "$2" "$data" "$3" <<'PY'
import glob, json, os, subprocess, sys
logdir, steps, reader, out, data, chief = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
final = [json.loads(l[l.index("{"):]) for l in open(chief) if '{"event":"done"' in l][-1]
steps = final["global_steps"]  # the final checkpoint's: every worker's last update in
recs = [json.loads(l) for l in open(os.path.join(logdir, "metrics.evaluator.jsonl"))]
assert recs and all(r["task"] == "/job:evaluator/task:0" and r["event"] == "eval" for r in recs), recs
st = [r["step"] for r in recs]
assert st == sorted(set(st)) and st[-1] == steps, st
ev = glob.glob(os.path.join(logdir, "eval", "events.out.tfevents.*"))
assert len(ev) == 1, ev
acc = [json.loads(l) for l in subprocess.run([sys.executable, reader] + ev, capture_output=True,
                                              text=True, check=True).stdout.splitlines()]
assert [a["step"] for a in acc if a["tag"] == "accuracy"] == st, (acc, st)
assert abs(acc[-1]["value"] - recs[-1]["test_accuracy"]) < 1e-5
assert data != "fashion-mnist" or recs[-1]["test_accuracy"] > 0.3, recs[-1]  # it learned (chance: 0.1)
done = [json.loads(l) for l in open(out) if l.startswith('{"event":"evaluator_done"')]
assert done and done[0]["step"] == steps, open(out).read()[-600:]
assert round(recs[-1]["test_accuracy"], 4) == final["test_accuracy"] == done[0]["test_accuracy"], (recs[-1], final)
print("evaluated steps %s, last accuracy %.4f = the chief's" % (st, recs[-1]["test_accuracy"]))
PY
}

# 1. the evaluator outside the cluster: TF_CONFIG names its task, the cluster has no such job
log1=$tmp/job1
TF_CONFIG='{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2","127.0.0.1:3"]},"task":{"type":"evaluator","index":0}}' \
  timeout 300 "$psgraph" "${train[@]}" --logdir "$log1" >"$tmp/eval1.out" 2>&1 &
ev=$!
pids+=("$ev")
timeout 300 "$psgraph" launch --ps 1 --workers 2 -- "$psgraph" "${train[@]}" --logdir "$log1" >"$tmp/job1.out" 2>&1
rc=$?
wait "$ev"
erc=$?
if [ $rc = 0 ] && [ $erc = 0 ] && res=$(check_eval "$log1" "$tmp/eval1.out" "$tmp/job1.out" 2>&1); then
  ok "evaluator outside the cluster: $res"
else
  fail "evaluator outside the cluster (job rc $rc, evaluator rc $erc): $res $(tail -5 "$tmp/eval1.out") $(tail -5 "$tmp/job1.out")"
fi

# 2. listed as a job of the cluster: the workers and the ps never wait for it
log2=$tmp/job2
cluster=$(printf '{"ps":["127.0.0.1:%s"],"worker":["127.0.0.1:%s","127.0.0.1:%s"],"evaluator":["127.0.0.1:%s"]}' \
  "$(free_port)" "$(free_port)" "$(free_port)" "$(free_port)")
cfg() { printf '{"cluster":%s,"task":{"type":"%s","index":%s}}' "$cluster" "$1" "$2"; }
TF_CONFIG=$(cfg ps 0) timeout 300 "$psgraph" server --logdir "$log2" >"$tmp/ps.out" 2>&1 &  # where its shards go
pids+=("$!")
TF_CONFIG=$(cfg evaluator 0) timeout 300 "$psgraph" "${train[@]}" --logdir "$log2" >"$tmp/eval2.out" 2>&1 &
ev=$!
pids+=("$ev")
TF_CONFIG=$(cfg worker 1) timeout 300 "$psgraph" "${train[@]}" --logdir "$log2" >"$tmp/w1.out" 2>&1 &
w1=$!
pids+=("$w1")
TF_CONFIG=$(cfg worker 0) timeout 300 "$psgraph" "${train[@]}" --logdir "$log2" >"$tmp/w0.out" 2>&1
rc=$?
wait "$w1"
rc1=$?
wait "$ev"
erc=$?
if [ $rc = 0 ] && [ $rc1 = 0 ] && [ $erc = 0 ] && grep -q '"event":"done"' "$tmp/w0.out" &&
   res=$(check_eval "$log2" "$tmp/eval2.out" "$tmp/w0.out" 2>&1); then
  ok "evaluator listed as a job: $res"
else
  fail "evaluator listed as a job (rc $rc, $rc1, evaluator $erc): $res $(tail -5 "$tmp/eval2.out") $(tail -5 "$tmp/w0.out")"
fi

# 3. an evaluator without --logdir is refused, saying why
out=$(TF_CONFIG='{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"task":{"type":"evaluator","index":0}}' \
  "$psgraph" train --model mlp --data synthetic 2>&1)
rc=$?
if [ $rc = 1 ] && grep -q "the evaluator needs --logdir" <<<"$out"; then ok "no --logdir: $out"; else fail "no --logdir (rc $rc): $out"; fi
[ $fails = 0 ]
