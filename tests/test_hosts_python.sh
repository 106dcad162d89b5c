#!/usr/bin/env bash
# `psgraph launch --ssh` of a Python script (docs/python.md, "A cluster") over emulated
# hosts (tools/hosts.sh) with an OpenSSH server on each (tests/hosts_sshd.sh): the hosts
# share this machine's files, so the package (the build tree's copy) and the script are at
# the same paths there. 1 ps + 2 workers of examples/python/mnist_replica.py on h1..h3 train
# async with CURVE, the ps as `psgraph server` writing its shard into the script's
# --train_dir; a worker script that raises stops the job naming the task and its
# traceback's last line, and nothing is left on any host. Under ASan the training is
# skipped (too slow), the raising script runs with the sanitizer preloaded into Python.
# Skips (77) where namespaces, sshd or the Python package are missing.
set -u
psgraph=$(realpath "$1")
build=$(realpath "$2")
asan=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
pyenv=(env PYTHONPATH="$build/python" PYTHONDONTWRITEBYTECODE=1)
if [ -n "$asan" ]; then
  pyenv+=(LD_PRELOAD="$(cc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0)
fi
"${pyenv[@]}" "$py" -c 'import psgraph.compat.v1' 2>/dev/null || { echo "no psgraph package in $build/python: skipped"; exit 77; }
. "$root/tools/hosts.sh"
. "$root/tests/hosts_sshd.sh"
hosts_init || exit 77
sshd_setup || exit 77
hosts_up ctl h1 h2 h3 || { echo "FAIL: hosts_up"; exit 1; }
sshd_start h1 h2 h3 || { echo "FAIL: sshd_start"; exit 1; }
tmp=$HOSTS_DIR
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# within 300 s (timeout's SIGTERM stops the launcher, which stops every task)
launch() { hosts_exec ctl timeout 300 "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" "$@"; }
left_on_hosts() { sshd_left_on h1 h2 h3; }

# 1. mnist_replica.py async over ssh: ps0 on h1, the workers on h2 and h3
if [ -z "$asan" ] && [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  launch --hosts h1,h2,h3 --ps 1 --workers 2 -- "${pyenv[@]}" "$py" "$root/examples/python/mnist_replica.py" \
    --train_steps 200 --train_dir "$tmp/run" >"$tmp/async.log" 2>&1; rc=$?
  done_line=$(sed -n 's/^\[worker0\] \({"event": "done".*\)/\1/p' "$tmp/async.log")
  # trained: chance is 0.1; 200 async steps of 2 workers gave 0.68-0.80 (a bar of 0.7 failed once)
  check=$(python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(int(d["global_step"] >= 199 and d["test_accuracy"] > 0.5))' "$done_line" 2>/dev/null)
  if [ $rc = 0 ] && [ "$check" = 1 ] &&
     grep -q '^\[ps0\] psgraph server: .* serving on tcp://.*:[0-9]* with CURVE' "$tmp/async.log" &&
     grep -q '^\[ps0\] psgraph server: stopped: job done: 2 workers finished' "$tmp/async.log" &&
     grep -q '^\[worker1\] {"event": "done"' "$tmp/async.log" &&
     ls "$tmp/run"/model.ckpt-*.index.json >/dev/null 2>&1 && [ "$(left_on_hosts)" = 0 ]; then
    ok "mnist_replica.py over ssh, 1 ps + 2 workers on h1..h3 with CURVE: $done_line; checkpoints in --train_dir, nothing left on the hosts"
  else
    fail "mnist_replica.py over ssh (rc $rc, done '$done_line'): $(tail -20 "$tmp/async.log")"
  fi
else
  echo "skip training over ssh: $([ -n "$asan" ] && echo "too slow under AddressSanitizer" || echo "no Fashion-MNIST")"
fi

# 2. a worker script that raises: the job stops naming the task and the traceback's last line
cat >"$tmp/raises.py" <<'EOF'
import time
import psgraph.compat.v1 as tf
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
s = tf.train.Server(r.cluster_spec(), r.task_type, r.task_id)
if r.task_id == 1:
    raise ValueError("the data of worker 1 is missing")
time.sleep(120)
EOF
t0=$(date +%s)
launch --hosts h1,h2,h3 --ps 1 --workers 2 -- "${pyenv[@]}" "$py" "$tmp/raises.py" >"$tmp/raises.log" 2>&1; rc=$?
took=$(($(date +%s) - t0))
if [ $rc != 0 ] && [ $took -lt 100 ] && grep -q '^\[worker1\] ValueError: the data of worker 1 is missing' "$tmp/raises.log" &&
   grep -q '^\[worker1\] exited with code 1' "$tmp/raises.log" && [ "$(left_on_hosts)" = 0 ]; then
  ok "a raising worker script over ssh stopped the job in $took s (exit $rc): $(grep '^\[worker1\] ValueError' "$tmp/raises.log")"
else
  fail "raising script over ssh (rc $rc, $took s): $(tail -15 "$tmp/raises.log")"
fi
[ $fails = 0 ]
