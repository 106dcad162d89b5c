#!/usr/bin/env bash
# Inception-v3 through the one training loop (worker/inception_train.c, docs/inception3.md),
# on the synthetic ImageNet-format set `psgraph data imagenet` writes (TF's shard names,
# labels 1..C, boxes): TF's recipe flags printed at start; --eval-every on the validation
# shards with top-1 and top-5 of the weights and of their moving average in the output,
# metrics.jsonl, TensorBoard and the done line; checkpoints and a resumed run; then a
# cluster (1 ps + 2 sync workers + 1 backup, the chief slowed: its evaluations at the global
# step) beside an evaluator task, whose numbers for the final checkpoint equal the chief's;
# and psgraph compare --model inception3 --target-top1.
# Under ASan the one-process part only (the cluster's Inception steps take minutes there).
set -u
psgraph=$1
asan=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
fails=0
tmp=$(mktemp -d /tmp/psg_test_inception_train.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$psgraph" data imagenet --out "$tmp/inet" --train 16 --validation 8 --classes 4 >"$tmp/data.json" ||
  fail "psgraph data imagenet: $(cat "$tmp/data.json")"
inc=(train --model inception3 --data imagenet --data-dir "$tmp/inet" --image-size 75 --classes 4
     --batch 4 --log-every 1 --threads 2 --step-timeout 120)

# 1. one process: the recipe's flags, evaluations, checkpoints, TensorBoard; then resumed
out=$(timeout 600 "$psgraph" "${inc[@]}" --steps 4 --eval-every 2 --logdir "$tmp/one" --checkpoint-every 2 \
  --warmup-epochs 1 --rmsprop-epsilon 0.5 --initial-learning-rate 0.01 2>&1); rc=$?
printf '%s\n' "$out" >"$tmp/one.out"
if [ $rc = 0 ] && grep -q 'RMSProp(decay 0.9, momentum 0.9, epsilon 0.5), lr 0.01 x0.94 every 2 epochs (8 steps: 16 examples / batch 4 x 2 / 1 replicas' <<<"$out" &&
   grep -q 'linear warm-up over 4 steps, moving average 0.9999, label smoothing 0.1' <<<"$out" &&
   grep -q 'top-1 .*top-5 .*moving average: top-1 .*top-5 .*(8 images)' <<<"$out" &&
   python3 - "$tmp/one" "$here/read_events.py" <<'PY'
import glob, json, os, subprocess, sys
logdir, reader = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(os.path.join(logdir, "metrics.jsonl"))]
ev = [r for r in recs if r["event"] == "eval"]
assert [r["step"] for r in ev] == [2, 4], ev
for r in ev:
    assert r["examples"] == 8 and all(0 <= r[k] <= 1 for k in ("top1", "top5", "top1_ema", "top5_ema")), r
    assert r["top5"] >= r["top1"] and r["test_accuracy"] == r["top1_ema"], r
done = [r for r in recs if r["event"] == "done"][-1]
assert done["steps"] == 4 and done["top1_ema"] == ev[-1]["top1_ema"], done
files = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
sc = [json.loads(l) for l in subprocess.run([sys.executable, reader] + files, capture_output=True,
                                             text=True, check=True).stdout.splitlines()]
tags = {s["tag"] for s in sc if s["step"] == 4}
assert {"accuracy", "top1", "top5", "top1_ema", "top5_ema", "loss"} <= tags, tags
assert os.path.exists(os.path.join(logdir, "model.ckpt-4.index.json"))
print("evaluations at steps 2 and 4: top-1 %.3f, top-5 %.3f, EMA top-1 %.3f" % (ev[-1]["top1"], ev[-1]["top5"], ev[-1]["top1_ema"]))
PY
then
  ok "one process: recipe printed, --eval-every on the validation shards, checkpoints, TensorBoard"
else
  fail "one process (rc $rc): $(tail -8 <<<"$out")"
fi
out=$(timeout 600 "$psgraph" "${inc[@]}" --steps 6 --eval-every 2 --logdir "$tmp/one" --checkpoint-every 2 \
  --initial-learning-rate 0.01 2>&1); rc=$?
if [ $rc = 0 ] && grep -q 'model.ckpt-4' <<<"$out" && ! grep -q '^step 1 ' <<<"$out" &&
   grep -q '"event":"done","model":"inception3","data":"imagenet","steps":6' <<<"$out"; then
  ok "resumed from the checkpoint at step 4 to step 6"
else
  fail "resume (rc $rc): $(tail -8 <<<"$out")"
fi

# bad inputs named
out=$("$psgraph" "${inc[@]}" --steps 1 --eval-data "$tmp/inet/nothing-*" 2>&1); rc=$?
if [ $rc = 1 ] && grep -q -- "--eval-data: $tmp/inet/nothing-\*: no file matches" <<<"$out"; then
  ok "a wrong --eval-data is named"; else fail "wrong --eval-data (rc $rc): $out"; fi
out=$("$psgraph" train --model inception3 --data fashion-mnist --steps 1 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "inception3 reads imagenet (TFRecord shards) or synthetic" <<<"$out"; then
  ok "inception3 refuses fashion-mnist"; else fail "inception3 on fashion-mnist (rc $rc): $out"; fi

if [ -z "$asan" ]; then
  # 2. a cluster of 2 sync workers and a backup, the chief slowed so that it is the dropped
  #    one, and an evaluator task outside it: the chief's evaluations are the global step's
  #    (its own steps fall behind), the evaluator's top-1 and top-5 of the final checkpoint
  #    are the chief's final evaluation's
  log=$tmp/job
  TF_CONFIG='{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2","127.0.0.1:3","127.0.0.1:4"]},"task":{"type":"evaluator","index":0}}' \
    timeout 600 "$psgraph" "${inc[@]}" --steps 8 --logdir "$log" >"$tmp/eval.out" 2>&1 &
  ev=$!
  pids+=("$ev")
  timeout 600 "$psgraph" launch --ps 1 --workers 3 -- "$psgraph" "${inc[@]}" --threads 1 --steps 8 --sync sync \
    --backup-workers 1 --straggler worker=0,delay_ms=800 --eval-every 1 \
    --logdir "$log" --checkpoint-every 2 --initial-learning-rate 0.01 >"$tmp/job.out" 2>&1
  rc=$?
  wait "$ev"
  erc=$?
  if [ $rc = 0 ] && [ $erc = 0 ] && res=$(python3 - "$log" <<'PY' 2>&1
import json, os, sys
log = sys.argv[1]
chief = [json.loads(l) for l in open(os.path.join(log, "metrics.jsonl"))]
mine = [r for r in chief if r["event"] == "eval" and r["step"] == 8]
done = [r for r in chief if r["event"] == "done"]
assert mine and done and done[-1]["sync"] == "sync" and done[-1]["global_steps"] == 8, chief[-3:]
# each evaluation during training: at the global step the chief's last token gave
steps, during = [], []
for r in chief:
    if r["event"] == "sync_step":
        steps.append(r)
    elif r["event"] == "eval" and r is not mine[-1]:
        assert steps and r["step"] == steps[-1]["next_step"], (r, steps[-1:])
        during.append((len(steps), r["step"]))
assert during and any(g > n for n, g in during), (during, "the slowed chief was never behind")
ev = [json.loads(l) for l in open(os.path.join(log, "metrics.evaluator.jsonl"))]
last = [r for r in ev if r["step"] == 8]
assert last, ev
for k in ("top1", "top5", "top1_ema", "top5_ema", "test_accuracy"):
    assert abs(last[-1][k] - mine[-1][k]) < 1e-9, (k, last[-1], mine[-1])
print("chief's own steps -> global steps evaluated %s; step 8: chief and evaluator top-1 %.3f top-5 %.3f, EMA top-1 %.3f" % (during, mine[-1]["top1"], mine[-1]["top5"], mine[-1]["top1_ema"]))
PY
  ); then
    ok "1 ps + 2 sync workers + 1 backup, an evaluator: $res"
  else
    fail "cluster and evaluator (job rc $rc, evaluator rc $erc): ${res:-} $(tail -5 "$tmp/eval.out") $(grep -v '\] step' "$tmp/job.out" | tail -8)"
  fi

  # 3. psgraph compare: inception3's time to a top-1
  out=$(timeout 600 "$psgraph" compare --model inception3 --data imagenet --variant sync --ps 1 --workers 2 \
    --epochs 1 --eval-every 2 --target-top1 0.01 --straggler none --outdir "$tmp/cmp" --png "$tmp/cmp.png" -- \
    --data-dir "$tmp/inet" --image-size 75 --classes 4 --batch 4 --threads 1 --initial-learning-rate 0.01 2>"$tmp/cmp.err")
  if python3 -c '
import json, sys
d = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")][0]
assert d["compare"] == "sync" and d["exit"] == 0 and d["model"] == "inception3" and d["target"] == 0.01, d
assert d["evaluations"] >= 1 and d["final_accuracy"] is not None and d["global_steps"] >= 1, d
assert d["final_accuracy"] < 0.01 or d["time_to_target_sec"] is not None, d  # reached: timed
' "$out"; then
    ok "compare --model inception3 --target-top1: $(head -c 160 <<<"$out")"
  else
    fail "compare --model inception3: $out $(tail -5 "$tmp/cmp.err") $(tail -5 "$tmp"/cmp/*/run.log 2>/dev/null)"
  fi
fi
[ $fails = 0 ]
