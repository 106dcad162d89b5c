#!/usr/bin/env bash
# `psgraph launch` with real processes on 127.0.0.1: async training of the mlp on
# Fashion-MNIST by 2 ps + 2 workers (>= 84% in 2 epochs), a busy port named, a failed task
# stopping all, Ctrl-C stopping all, a worker lost with a backup worker not stopping the job,
# sync replicas of 2 workers x 2 CPU towers; every process is gone afterwards.
set -u
psgraph=$1
asan=${2:-}
fails=0
tmp=$(mktemp -d /tmp/psg_test_launch.XXXXXX)
launch_pid=
cleanup() {
  [ -n "$launch_pid" ] && kill -TERM "$launch_pid" 2>/dev/null
  [ -n "${busy_pid:-}" ] && kill -KILL "$busy_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
free_port() { python3 "$(dirname "$0")/python/free_ports.py" 1; }
# true when nothing listens on any port in [base, base+n)
ports_free() {
  python3 - "$1" "$2" <<'PY'
import socket, sys
base, n = int(sys.argv[1]), int(sys.argv[2])
for p in range(base, base + n):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
PY
}

# 1. async training: 2 ps + 2 workers, the mlp, 2 epochs (the workers together)
if [ -n "$asan" ]; then
  echo "skip async training of the mlp to 84%: too slow under AddressSanitizer (runs in the release suite)"
elif [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "skip async training of the mlp: no Fashion-MNIST in /usr/share/datasets/fashion-mnist"
else
  "$psgraph" launch --ps 2 --workers 2 -- "$psgraph" train --model mlp --epochs 2 \
    --optimizer adam --lr 0.001 --batch 64 --log-every 200 >"$tmp/train.log" 2>&1
  rc=$?
  done_line=$(grep '^\[worker0\] {"event":"done"' "$tmp/train.log" | sed 's/^\[worker0\] //')
  if [ $rc = 0 ] && grep -q '^\[ps0\] ' "$tmp/train.log" && grep -q '^\[ps1\] ' "$tmp/train.log" &&
     grep -q '^\[worker1\] {"event":"worker_done"' "$tmp/train.log" &&
     grep -q '^\[ps1\] psgraph server: stopped: job done' "$tmp/train.log" &&
     python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("test accuracy", d["test_accuracy"]); assert d["sync"]=="async" and d["workers"]==2 and d["ps"]==2 and d["test_accuracy"]>=0.84' "$done_line"; then
    ok "async training, 2 ps + 2 workers, mlp 2 epochs: >= 84%, ps tasks exit when the job is done"
  else
    fail "async training (rc $rc): $(grep -v "\] step " "$tmp/train.log" | tail -25)"
  fi
fi

# 1b. one host: Unix domain sockets by default, in a folder removed at the end; TCP on request
out=$(timeout 120 "$psgraph" launch --ps 1 --workers 1 -- "$psgraph" train --model mlp --data synthetic \
      --steps 5 --log-every 5 2>&1); rc=$?
dir=$(grep -o 'ipc://[^"]*/ps0' <<<"$out" | head -1 | sed 's|^ipc://||; s|/ps0$||')
if [ $rc = 0 ] && [ -n "$dir" ] && [ ! -e "$dir" ] && grep -q '^\[worker0\] {"event":"done"' <<<"$out"; then
  ok "launch on Unix domain sockets (ipc://$dir/ps0), folder removed at the end"
else
  fail "launch over ipc (rc $rc, folder '$dir'): $(tail -15 <<<"$out")"
fi
out=$(timeout 120 "$psgraph" launch --transport tcp --ps 1 --workers 1 -- "$psgraph" train --model mlp \
      --data synthetic --steps 5 --log-every 5 2>&1); rc=$?
if [ $rc = 0 ] && grep -q 'cluster {"ps": \["127.0.0.1:[0-9]*"\]' <<<"$out" && grep -q '^\[worker0\] {"event":"done"' <<<"$out"; then
  ok "launch --transport tcp: $(grep -o 'cluster .*' <<<"$out" | head -1)"
else
  fail "launch --transport tcp (rc $rc): $(tail -15 <<<"$out")"
fi
out=$("$psgraph" launch --transport ipc --port-base 4000 --ps 1 --workers 1 -- true 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "takes no --port-base" <<<"$out"; then
  ok "--transport ipc with --port-base refused: $out"
else
  fail "--transport ipc --port-base: rc $rc: $out"
fi

# 2. a busy port is named before anything starts
busy=$(free_port)
"$psgraph" server --listen "tcp://127.0.0.1:$busy" --task-name /job:ps/task:0 >/dev/null 2>&1 &
busy_pid=$!
for _ in $(seq 50); do ports_free "$busy" 1 || break; sleep 0.1; done
out=$("$psgraph" launch --ps 1 --workers 1 --port-base "$busy" -- true 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "port $busy on 127.0.0.1 (for ps0) is busy" <<<"$out"; then
  ok "busy port named: $(head -1 <<<"$out")"
else
  fail "busy port: rc $rc: $out"
fi
kill -TERM "$busy_pid"; wait "$busy_pid" 2>/dev/null; busy_pid=

# the ports of the cluster launch printed, one a line (TCP on free ports the launcher picked:
# a fixed --port-base meets the ports of the other test runs on this machine)
cluster_ports() { grep -o 'cluster {.*' <<<"$1" | head -1 | grep -o ':[0-9]*"' | tr -d ':"'; }
all_free() { local p; for p in "$@"; do ports_free "$p" 1 || return 1; done; }

# 3. a failing worker stops every task; the exit code is the worst of the tasks
out=$(timeout 60 "$psgraph" launch --transport tcp --ps 1 --workers 2 -- "$psgraph" train --model nope 2>&1); rc=$?
ports=$(cluster_ports "$out")
if [ $rc = 1 ] && grep -q "^\[worker[01]\] psgraph train: --model: unknown model 'nope'" <<<"$out" &&
   [ "$(wc -w <<<"$ports")" = 3 ] && all_free $ports; then
  ok "a failed task stops all, exit code 1, ports free again"
else
  fail "failed task: rc $rc: $out"
fi

# 4. Ctrl-C stops every task (process groups killed, nothing left)
marker="31.$$"
"$psgraph" launch --transport tcp --ps 1 --workers 2 -- sleep "$marker" >"$tmp/int.log" 2>&1 &
launch_pid=$!
for _ in $(seq 50); do [ "$(pgrep -f "sleep $marker" | wc -l)" = 2 ] && break; sleep 0.1; done
kill -INT "$launch_pid"
t0=$(date +%s)
wait "$launch_pid"; rc=$?
launch_pid=
sleep 0.2
left=$(pgrep -f "sleep $marker" | wc -l)
ports=$(cluster_ports "$(cat "$tmp/int.log")")
if [ $rc = 130 ] && [ "$left" = 0 ] && [ $(( $(date +%s) - t0 )) -le 8 ] && [ -n "$ports" ] && all_free $ports; then
  ok "Ctrl-C stops all: exit 130, no task left"
else
  fail "Ctrl-C: rc $rc, $left left: $(cat "$tmp/int.log")"
fi
# 5. sync replicas with a backup worker: a worker that dies does not stop the job
#    (--allow-worker-failures defaults to CMD's --backup-workers with --sync sync)
die2='case "$TF_CONFIG" in *"\"index\": 2}"*) sleep 1; echo "worker 2 dies"; exit 3;; esac; exec "$0" "$@"'
out=$(timeout 120 "$psgraph" launch --transport tcp --ps 1 --workers 3 -- sh -c "$die2" "$psgraph" train \
      --model mlp --data synthetic --steps 300 --log-every 100 --sync sync --backup-workers 1 --step-timeout 5 2>&1); rc=$?
if [ $rc = 0 ] && grep -q '^\[worker2\] failed with code 3; the job goes on without it' <<<"$out" &&
   grep -q '^\[worker0\] {"event":"done"' <<<"$out" && grep -q "1 worker failed and the job went on" <<<"$out"; then
  ok "sync, 3 workers with 1 backup: worker 2 died, the job finished, exit code 0"
else
  fail "worker failure with a backup (rc $rc): $(tail -25 <<<"$out")"
fi
# 6. sync replicas of towers: 2 workers, each 2 CPU towers on half its batch
out=$(timeout 120 "$psgraph" launch --transport tcp --ps 1 --workers 2 -- "$psgraph" train --model mlp --data synthetic \
      --steps 20 --batch 16 --log-every 10 --sync sync --towers 2 --step-timeout 20 2>&1); rc=$?
if [ $rc = 0 ] && grep -q '^\[worker1\] psgraph train: .* 2 CPU towers' <<<"$out" &&
   grep -q '^\[worker0\] {"event":"done".*"global_steps":20,.*"gradients_used":40,' <<<"$out"; then
  ok "sync, 2 workers x 2 CPU towers: 20 global steps, 2 gradients each"
else
  fail "sync with towers (rc $rc): $(tail -15 <<<"$out")"
fi
out=$("$psgraph" train --model mlp --data synthetic --batch 2 --towers 3 --steps 1 2>&1); rc=$?
if [ $rc != 0 ] && grep -q -- "--towers 3 is more than --batch 2" <<<"$out"; then
  ok "--towers 3 --batch 2 is refused, naming both"
else
  fail "--towers 3 --batch 2 (rc $rc): $(tail -3 <<<"$out")"
fi
out=$(timeout 60 "$psgraph" launch --ps 1 --workers 2 --allow-worker-failures 1 -- sh -c 'exit 4' 2>&1); rc=$?
if [ $rc = 4 ] && grep -q "a task failed, stopping the others" <<<"$out"; then
  ok "the chief's failure still stops the job (exit code 4)"
else
  fail "chief failure with --allow-worker-failures 1 (rc $rc): $(tail -5 <<<"$out")"
fi
[ $fails = 0 ]
