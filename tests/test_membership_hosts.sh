#!/usr/bin/env bash
# A worker's link cut for good on emulated hosts (tools/hosts.sh; docs/distributed.md
# "Membership"): 1 ps and 3 workers, each on a host of its own, `--sync sync
# --backup-workers 1`, `--peer-timeout 2`. worker2's link is cut at the chief's step 60 (the
# process lives on, cut off): the chief says it lost worker2 on w2 once, the job goes on
# without it to its last step, the chief tells the ps task worker2 is done, and the chief and
# the ps task exit 0 (the ps: job done). worker2, cut off, is stopped at the end. The time
# from the cut to the loss said and the chief's last step to its exit are printed, never
# asserted. Skips (77) where namespaces cannot be made. The tasks run --insecure: the
# subject is the cut, not CURVE (test_hosts_launch covers that). Run it under the shared
# lock of the emulated-hosts tests (flock /work/notes/netns.lock on the shared machine).
set -u
psgraph=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/hosts.sh"
hosts_init || exit 77
hosts_up ps0 w0 w1 w2 || { echo "FAIL: hosts_up"; exit 1; }
tmp=$HOSTS_DIR
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
steps=300
port=24100
echo "{\"cluster\": {\"ps\": [\"ps0:$port\"], \"worker\": [\"w0:$((port + 1))\", \"w1:$((port + 2))\", \"w2:$((port + 3))\"]}, \"peer_timeout\": 2}" \
  >"$tmp/cluster.json"
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
hosts_exec ps0 timeout 300 "$psgraph" server --cluster "$tmp/cluster.json" --job ps --task 0 \
  --expect-workers 3 --insecure > >(stamp >"$tmp/ps0.log") 2>&1 &
ps_pid=$!
pids=()
for k in 0 1 2; do
  hosts_exec "w$k" timeout 300 "$psgraph" train --cluster "$tmp/cluster.json" --job worker --task $k \
    --insecure --model mlp --data synthetic --steps $steps --log-every 1 --sync sync \
    --backup-workers 1 --step-timeout 30 > >(stamp >"$tmp/w$k.log") 2>&1 &
  pids+=($!)
done
t_cut=
for _ in $(seq 1 2400); do
  if grep -q '^[0-9.]* step 60 ' "$tmp/w0.log" 2>/dev/null; then
    t_cut=$EPOCHREALTIME
    hosts_cut w2
    break
  fi
  sleep 0.05
done
wait "${pids[0]}"
chief_rc=$?
t_end=$EPOCHREALTIME
wait "$ps_pid"
ps_rc=$?
for p in $(hosts_pids w2); do kill -TERM "$p" 2>/dev/null; done # cut off: stopped here
wait "${pids[1]}"
w1_rc=$?
wait "${pids[2]}" 2>/dev/null
sleep 0.3 # the stampers' last lines
done_line=$(sed -n 's/^[0-9.]* \({"event":"done".*\)/\1/p' "$tmp/w0.log")
if [ -n "$t_cut" ] && [ "$chief_rc" = 0 ] && [ "$ps_rc" = 0 ] && [ "$w1_rc" = 0 ] &&
   [ "$(grep -c '^[0-9.]* membership: worker2 on w2: lost (silent [0-9.]* s) at step [0-9]*$' "$tmp/w0.log")" = 1 ] &&
   grep -q '^[0-9.]* membership: worker2 on w2 (lost): the job ends without it' "$tmp/w0.log" &&
   grep -q '^[0-9.]* psgraph server: stopped: job done: 3 workers finished' "$tmp/ps0.log" &&
   ! grep -q 'WaitDone\|waiting for the workers to finish' "$tmp/w0.log" &&
   python3 - "$done_line" "$steps" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
lost = d["workers_lost"]
assert len(lost) == 1 and lost[0]["task"] == "worker2" and lost[0]["host"] == "w2", lost
assert d["global_steps"] == int(sys.argv[2]) and d["workers_live"] == 2, d
PY
then
  ok "worker2's link cut at the chief's step 60 (3 workers on hosts of their own, sync, b = 1): the chief said the loss once (worker2 on w2), the job went on to its $steps global steps, the chief and the ps task exited 0 (job done)"
else
  fail "link cut (chief rc $chief_rc, ps rc $ps_rc, worker1 rc $w1_rc, cut at '${t_cut}'): $(grep -v '^[0-9.]* step ' "$tmp/w0.log" | tail -12) $(tail -4 "$tmp/ps0.log")"
fi
python3 - "$tmp/w0.log" "${t_cut:-0}" "$t_end" <<'PY'
import re, sys
t_cut, t_end = float(sys.argv[2]), float(sys.argv[3])
lines = [(float(l.split()[0]), l) for l in open(sys.argv[1]) if re.match(r"[0-9.]+ ", l)]
lost = [t for t, l in lines if "membership: worker2 on w2: lost" in l]
steps = [t for t, l in lines if re.match(r"[0-9.]+ step ", l)]
if t_cut and lost and steps:
    print("  the cut -> the loss said %.3f s (peer timeout 2 s); the chief's last step -> its exit %.3f s"
          % (lost[0] - t_cut, t_end - steps[-1]))
PY
[ $fails = 0 ]
