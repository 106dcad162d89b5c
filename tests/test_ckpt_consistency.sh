#!/usr/bin/env bash
# Checkpoints of an async cluster while the ps tasks apply updates (docs/checkpoints.md):
# 2 ps + 2 workers with Adam and with momentum, a checkpoint every 10 steps, every one
# kept; each one must verify (`psgraph inspect`: the crc32 of every shard's data matches
# its header and the index). Each variable and its slots are read at one update.
# usage: test_ckpt_consistency.sh PSGRAPH [asan] [RUNS] [STEPS]
#   (the issue's full check: RUNS 5, STEPS 300; the test runs 1 x 150 per optimizer,
#   80 under ASan)
set -u
psgraph=$1
asan=${2:-}
runs=${3:-1}
steps=${4:-150}
[ "$asan" = asan ] && [ $# -lt 4 ] && steps=80
fails=0
tmp=$(mktemp -d /tmp/psg_test_ckpt_cons.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
data=(--data synthetic)
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && data=(--data fashion-mnist)
total=0
bad=0
for opt in adam momentum; do
  for run in $(seq 1 "$runs"); do
    dir="$tmp/$opt$run"
    timeout 300 "$psgraph" launch --ps 2 --workers 2 -- "$psgraph" train --model mlp "${data[@]}" \
      --optimizer "$opt" --lr 0.001 --batch 32 --steps "$steps" --log-every 1000 \
      --checkpoint-every 10 --keep 1000 --logdir "$dir" --step-timeout 30 >"$tmp/log" 2>&1
    rc=$?
    n=0
    for idx in "$dir"/model.ckpt-*.index.json; do
      [ -f "$idx" ] || continue
      n=$((n + 1))
      if ! "$psgraph" inspect "$idx" >"$tmp/inspect" 2>&1; then
        bad=$((bad + 1))
        echo "corrupt: $(head -3 "$tmp/inspect")"
      fi
    done
    total=$((total + n))
    want=$((steps / 10))
    if [ $rc != 0 ] || [ $n -lt $want ]; then
      echo "FAIL: $opt run $run (rc $rc): $n checkpoints, want $want: $(tail -8 "$tmp/log")"
      fails=$((fails + 1))
    fi
  done
done
echo "{\"checkpoints\":$total,\"corrupt\":$bad,\"runs\":$runs,\"steps\":$steps,\"optimizers\":[\"adam\",\"momentum\"]}"
if [ $bad -gt 0 ]; then
  echo "FAIL: $bad of $total checkpoints do not verify"
  fails=$((fails + 1))
else
  echo "ok   $total checkpoints of 2 ps + 2 workers (adam, momentum, every 10 steps) all verify"
fi
[ $fails = 0 ]
