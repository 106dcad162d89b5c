#!/usr/bin/env bash
# A loss then a join under --sync sync (issue 31), real processes under `psgraph launch
# --workers 2:3`: worker1 is SIGSTOPped until the chief finds it lost, worker2 joins then
# (SIGUSR1), and once the chief says it joined, worker1 is SIGKILLed still stopped. The
# tokens follow the live workers by rank (TokenQueueSetLive): the job averages 1 of 1, then
# 2 of 2 with worker2, whose token of the step in progress is its own, and ends with exit
# code 0 at its last global step. This guards the sequence end to end; it does not reproduce
# the stall of a lost worker that still runs (a stopped worker's connections are dropped by
# ps0 at the peer timeout, so it cannot take tokens once resumed): tests/test_token_live.c
# does, deterministically, on the queue itself. Every step waits for a line of the output,
# never for a time.
set -u
psgraph=$1
asan=${2:-}
. "$(dirname "$0")/membership_lib.sh"

steps=300
stop_at=40
dir="$tmp/sync"
out="$dir/out.log"
mkdir -p "$dir"
# worker 1's process id: the shell's, which exec makes psgraph's
wrap='case "$TF_CONFIG" in *"\"index\": 1}"*) echo $$ >"'"$dir"'/w1.pid";; esac; exec "$0" "$@"'
"$psgraph" launch --transport tcp --ps 1 --workers 2:3 -- sh -c "$wrap" "$psgraph" train \
  --model mlp --data synthetic --steps $steps --log-every 1 --peer-timeout 2 --step-timeout 30 \
  --sync sync > >(python3 -u -c "$stamp" >"$out") 2>&1 &
launch_pid=$!
stopped= joined= killed=
stop_join_kill() {
  if [ -z "$stopped" ] && [ -s "$dir/w1.pid" ] &&
     grep -q "^[0-9.]* \[worker0\] step $stop_at " "$out" 2>/dev/null &&
     grep -q '\[worker0\] membership: worker2 .*: not started' "$out"; then
    kill -STOP "$(cat "$dir/w1.pid")" && stopped=1
  fi
  if [ -n "$stopped" ] && [ -z "$joined" ] &&
     grep -q '\[worker0\] membership: worker1 on 127.0.0.1: lost' "$out"; then
    kill -USR1 "$launch_pid" && joined=1
  fi
  if [ -n "$joined" ] && [ -z "$killed" ] &&
     grep -q '\[worker0\] membership: worker2 on 127.0.0.1: joined at step' "$out"; then
    kill -KILL "$(cat "$dir/w1.pid")" && killed=1
  fi
}
wait_launch stop_join_kill
rc=$launch_rc
sleep 0.5 # the stamper's last lines
if [ -n "$killed" ] && [ "$rc" = 0 ] &&
   grep -q '\[worker0\] membership: --sync sync now averages 1 of 1 gradients a step (1 live workers)' "$out" &&
   [ "$(grep -c '\[worker0\] membership: --sync sync now averages 2 of 2 gradients a step (2 live workers)' "$out")" -ge 2 ] &&
   grep -q '\[worker1\] failed with code 137; the job goes on without it' "$out" &&
   grep -q '\[worker2\] step 5 ' "$out" &&
   grep -q "\[worker0\] {\"event\":\"done\",.*\"global_steps\":$steps," "$out" &&
   grep -q '\[ps0\] psgraph server: stopped: job done' "$out"; then
  ok "sync: worker1 stopped, found lost, worker2 joined, worker1 killed: the job ends (rc 0)"
else
  fail "sync: stopped $stopped, joined $joined, killed $killed, rc $rc"
  tail -n 60 "$out"
fi
[ "$fails" = 0 ] && echo "all ok" || { echo "$fails failed"; exit 1; }
