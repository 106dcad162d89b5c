#!/usr/bin/env bash
# The psgraph binary as a user runs it: usage, option errors, a short run's output.
set -u
psgraph=$1
fails=0
check() { # description, command..., expects exit code $expect and output containing $want
  local out rc
  out=$("${@:3}" 2>&1); rc=$?
  if [ "$rc" != "$1" ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL: ${*:3} -> rc $rc, wanted $1 and '$2'; got: $out" | head -5
    fails=$((fails + 1))
  else
    echo "ok   ${*:3}"
  fi
}
check 2 "usage: psgraph" "$psgraph"
check 0 "train" "$psgraph" --help
check 2 "unknown command 'frobnicate'" "$psgraph" frobnicate
check 0 "--model mlp|cnn" "$psgraph" train --help
check 2 "unknown option '--colour'" "$psgraph" train --colour red
check 2 "--batch: 'many' is not a number" "$psgraph" train --batch many
check 2 "missing value for '--steps'" "$psgraph" train --steps
check 1 "unknown model 'vgg'" "$psgraph" train --model vgg --steps 1
check 1 "/nowhere/train-images-idx3-ubyte.gz" "$psgraph" train --data-dir /nowhere --steps 1
check 0 '"params":23851784' "$psgraph" bench inception3 --print-model
check 2 "--workers: 'x' is not a list of counts" "$psgraph" simulate --workers x
check 0 '"simulate":"sync_replicas","workers":8,"backups":1' "$psgraph" simulate --workers 8 --backups 0,1
out=$("$psgraph" train --model mlp --data synthetic --steps 25 --log-every 10 --threads 2 2>&1)
rc=$?
last=$(tail -1 <<<"$out")
if [ $rc = 0 ] && grep -q '^step 20 ' <<<"$out" && python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["event"]=="done" and d["steps"]==25 and d["model"]=="mlp" and d["examples_per_sec"]>0' "$last"; then
  echo "ok   short synthetic run: progress lines and one final JSON line"
else
  echo "FAIL: short run: $out" | head -20
  fails=$((fails + 1))
fi
[ $fails = 0 ]
