#!/usr/bin/env bash
# Checkpoints of an async cluster while the ps tasks apply updates (docs/checkpoints.md):
# 2 ps + 2 workers with Adam and with momentum, a checkpoint every 10 steps, every one
# kept; each one must verify (`psgraph inspect`: the crc32 of every shard's data matches
# its header and the index). Each variable and its slots are read at one update. And a
# cluster whose checkpoints all fail verification stops unless --fresh-start.
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
# a cluster whose checkpoints all fail verification stops, naming each (whichever worker
# says it first: launch then stops the others); --fresh-start goes on (the final checkpoint is
# named by the job's global step: every worker's steps in async)
dir="$tmp/fresh"
job=(launch --ps 1 --workers 2 -- "$psgraph" train --model mlp --data synthetic --batch 16 --log-every 100
     --checkpoint-every 10 --logdir "$dir" --step-timeout 30)
timeout 120 "$psgraph" "${job[@]}" --steps 20 >"$tmp/log" 2>&1
for f in "$dir"/*.safetensors; do printf 'x' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null; done
timeout 120 "$psgraph" "${job[@]}" --steps 30 >"$tmp/log2" 2>&1
rc=$?
timeout 120 "$psgraph" "${job[@]}" --steps 30 --fresh-start >"$tmp/log3" 2>&1
rc3=$?
if [ $rc != 0 ] && grep -q "\] psgraph train: /job:worker/task:[01]: $dir holds 2 checkpoints and none verifies" "$tmp/log2" &&
   grep -q "model.ckpt-10.index.json: " "$tmp/log2" && [ "$(grep -c "model.ckpt-[0-9]*.index.json: " "$tmp/log2")" -ge 2 ] &&
   [ $rc3 = 0 ] && grep -q "\[worker0\] --fresh-start: none of the 2 checkpoints" "$tmp/log3" &&
   grep -q "model.ckpt-[0-9]*.index.json written" "$tmp/log3"; then
  echo "ok   a cluster with only corrupt checkpoints stops naming them; --fresh-start starts over"
else
  echo "FAIL: all-corrupt cluster logdir (rc $rc, $rc3): $(tail -6 "$tmp/log2") --- $(tail -4 "$tmp/log3")"
  fails=$((fails + 1))
fi
echo "{\"checkpoints\":$total,\"corrupt\":$bad,\"runs\":$runs,\"steps\":$steps,\"optimizers\":[\"adam\",\"momentum\"]}"
if [ $bad -gt 0 ]; then
  echo "FAIL: $bad of $total checkpoints do not verify"
  fails=$((fails + 1))
else
  echo "ok   $total checkpoints of 2 ps + 2 workers (adam, momentum, every 10 steps) all verify"
fi
[ $fails = 0 ]
