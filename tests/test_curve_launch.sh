#!/usr/bin/env bash
# `psgraph launch` with CURVE, real processes on 127.0.0.1 over TCP: the keys it makes for
# its cluster (every task serves with CURVE, the folder is private and removed at the end),
# async training of the mlp on Fashion-MNIST by 2 ps + 2 workers to the usual bar (>= 84%
# in 2 epochs) with every connection encrypted; --keys DIR given; an open key folder
# refused, named; ring all-reduce (--sync allreduce) with its worker-to-worker chunks over
# CURVE. Not the refusals of a server (test_curve).
set -u
psgraph=$1
asan=${2:-}
fails=0
tmp=$(mktemp -d /tmp/psg_test_curve_launch.XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset PSGRAPH_KEYS

# 1. async training over TCP with the keys launch makes
if [ -n "$asan" ]; then
  echo "skip CURVE training of the mlp to 84%: too slow under AddressSanitizer (runs in the release suite)"
elif [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "skip CURVE training of the mlp: no Fashion-MNIST in /usr/share/datasets/fashion-mnist"
else
  timeout 300 "$psgraph" launch --transport tcp --ps 2 --workers 2 -- "$psgraph" train --model mlp --epochs 2 \
    --optimizer adam --lr 0.001 --batch 64 --log-every 200 >"$tmp/train.log" 2>&1
  rc=$?
  keys=$(grep -o 'CURVE keys [^ ]*' "$tmp/train.log" | head -1 | sed 's/^CURVE keys //')
  done_line=$(grep '^\[worker0\] {"event":"done"' "$tmp/train.log" | sed 's/^\[worker0\] //')
  if [ $rc = 0 ] && [ -n "$keys" ] && [ ! -e "$keys" ] &&
     grep -q '^\[ps0\] psgraph server: .* serving on tcp://127.0.0.1:[0-9]* with CURVE' "$tmp/train.log" &&
     grep -q '^\[ps1\] psgraph server: .* serving on tcp://127.0.0.1:[0-9]* with CURVE' "$tmp/train.log" &&
     ! grep -q 'refused a peer\|takes plain frames' "$tmp/train.log" &&
     python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("test accuracy", d["test_accuracy"]); assert d["workers"]==2 and d["ps"]==2 and d["test_accuracy"]>=0.84' "$done_line"; then
    ok "CURVE training over TCP, 2 ps + 2 workers, mlp 2 epochs: >= 84%, keys $keys removed at the end"
  else
    fail "CURVE training (rc $rc, keys '$keys'): $(grep -v "\] step " "$tmp/train.log" | tail -25)"
  fi
fi

# 2. --keys DIR: the tasks use the given folder, which stays
"$psgraph" keygen "$tmp/keys" >/dev/null
out=$(timeout 120 "$psgraph" launch --transport tcp --keys "$tmp/keys" --ps 1 --workers 1 -- "$psgraph" train \
      --model mlp --data synthetic --steps 5 --log-every 5 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "serving on tcp://127.0.0.1:[0-9]* with CURVE (keys $tmp/keys)" <<<"$out" &&
   grep -q '^\[worker0\] {"event":"done"' <<<"$out" && [ -f "$tmp/keys/cluster.key_secret" ]; then
  ok "launch --keys DIR: every task serves with the given keys, which stay"
else
  fail "launch --keys (rc $rc): $(tail -15 <<<"$out")"
fi

# 3. a key folder open to others: refused before any task starts, the folder named
chmod 755 "$tmp/keys"
out=$("$psgraph" launch --transport tcp --keys "$tmp/keys" --ps 1 --workers 1 -- true 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "key folder $tmp/keys is open to other users (mode 0755)" <<<"$out" &&
   ! grep -q "pid" <<<"$out"; then
  ok "launch --keys with an open folder refused: $out"
else
  fail "launch --keys open folder: rc $rc: $out"
fi

# 4. ring all-reduce over CURVE: the workers' chunks go worker to worker, encrypted like the rest
chmod 700 "$tmp/keys"
out=$(timeout 200 "$psgraph" launch --transport tcp --keys "$tmp/keys" --ps 1 --workers 3 -- "$psgraph" train \
      --model mlp --data synthetic --steps 20 --optimizer sgd --sync allreduce --step-timeout 60 \
      --log-every 20 2>&1); rc=$?
done_line=$(grep '^\[worker0\] {"event":"done"' <<<"$out")
if [ $rc = 0 ] && grep -q '"sync":"allreduce",.*"global_steps":20,' <<<"$done_line" &&
   grep -q '"push_bytes_per_step":[1-9]' <<<"$done_line" &&
   ! grep -q 'refused a peer\|takes plain frames' <<<"$out"; then
  ok "allreduce over TCP with CURVE, 3 workers, 20 steps: worker-to-worker chunks encrypted"
else
  fail "allreduce over CURVE (rc $rc): $(tail -15 <<<"$out")"
fi

[ $fails = 0 ] || exit 1
