#!/usr/bin/env bash
# Workers that join a running job (docs/distributed.md "Membership"), real processes under
# `psgraph launch --workers 2:3`: a cluster of 3 workers of which 2 start. The chief finds
# worker2 not started after the peer timeout and goes on without it (sync: N = 2); once it
# said so and passed its step 60, a SIGUSR1 to launch starts worker2 with `--join`: it says
# the global step it joins at, the chief says it joined (once) and, with sync, averages 3 of
# 3 gradients a step from then on; worker2 trains (its gradients used), the job ends with
# exit code 0 and the done line counts the join. Sync and async. The time from the join's
# start to its first step is printed, never asserted.
set -u
psgraph=$1
asan=${2:-}
. "$(dirname "$0")/membership_lib.sh"

# 300 steps under ASan too: with 150 the chief could reach its last steps before the
# "not started" verdict (the peer timeout) and the join, and the join then raced the job's end
steps=300
join_at=60

# run_case NAME ARGS...: `psgraph train ARGS` on 2 of 3 workers, worker2 joining at the
# chief's step $join_at and its "not started"
run_case() {
  local name=$1
  shift
  local dir="$tmp/$name" out="$tmp/$name/out.log"
  mkdir -p "$dir"
  "$psgraph" launch --transport tcp --ps 1 --workers 2:3 -- "$psgraph" train \
    --model mlp --data synthetic --steps $steps --log-every 1 --peer-timeout 2 --step-timeout 30 \
    "$@" > >(python3 -u -c "$stamp" >"$out") 2>&1 &
  launch_pid=$!
  local joined= t_join=0 rc
  for _ in $(seq 1 1200); do
    if [ -z "$joined" ] && grep -q "^[0-9.]* \[worker0\] step $join_at " "$out" 2>/dev/null &&
       grep -q '\[worker0\] membership: worker2 .*: not started' "$out"; then
      t_join=$(date +%s.%N)
      kill -USR1 "$launch_pid" && joined=1
    fi
    kill -0 "$launch_pid" 2>/dev/null || break
    sleep 0.1
  done
  wait "$launch_pid"
  rc=$?
  launch_pid=
  sleep 0.5 # the stamper's last lines
  local done_line
  done_line=$(grep '\[worker0\] {"event":"done"' "$out" | sed 's/^[0-9.]* \[worker0\] //')
  if [ -n "$joined" ] && [ "$rc" = 0 ] &&
     grep -q '\[worker0\] membership: worker2 on 127.0.0.1: not started (silent [0-9.]* s since the job began): the job goes on without it' "$out" &&
     grep -q '\[worker2\] started: pid [0-9]*, joining the running job (SIGUSR1)' "$out" &&
     grep -q '\[worker2\] psgraph train: /job:worker/task:2 joins the running job at global step [0-9]*$' "$out" &&
     [ "$(grep -c '\[worker0\] membership: worker2 on 127.0.0.1: joined at step [0-9]*$' "$out")" = 1 ] &&
     { [ "$name" = async ] ||
       grep -q '\[worker0\] membership: --sync sync now averages 3 of 3 gradients a step (3 live workers)' "$out"; } &&
     grep -q '\[worker2\] step 5 ' "$out" &&
     grep -q '\[ps0\] psgraph server: stopped: job done' "$out" &&
     python3 - "$done_line" "$name" "$steps" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["workers_lost"] == [] and d["workers_joined"] == 1, d
assert d["membership_changes"] == 2 and d["sync"] == sys.argv[2], d
if sys.argv[2] == "sync":
    # the global steps of the run, and worker2's gradients in them
    assert d["global_steps"] == int(sys.argv[3]) and d["per_worker"][2][0] > 0, d
PY
  then
    ok "$name, 2 of 3 workers${*:+ ($*)}, worker2 joined after the chief's step $join_at: the chief went on without it, then admitted it (said once), it trained, the job finished (exit 0), the done line counts the join"
  else
    fail "$name, worker2 joining (rc $rc, joined '${joined}'): $(grep -v '\] step ' "$out" | tail -30)"
  fi
  # printed only: the join's start (SIGUSR1) -> its first step, -> the chief's admission, and
  # the chief's longest step from the start until 1 s after the admission (a stall)
  python3 - "$out" "$t_join" <<'PY'
import re, sys
t0 = float(sys.argv[2])
lines = [(float(l.split()[0]), l) for l in open(sys.argv[1]) if re.match(r"[0-9.]+ \[", l)]
first = [t for t, l in lines if re.match(r"[0-9.]+ \[worker2\] step 1 ", l)]
admit = [t for t, l in lines if "membership: worker2 on 127.0.0.1: joined" in l]
chief = [t for t, l in lines if re.match(r"[0-9.]+ \[worker0\] step ", l)]
gaps = [b - a for a, b in zip(chief, chief[1:]) if a >= t0 and (not admit or a <= admit[0] + 1)]
if t0 and first:
    print("  SIGUSR1 -> worker2's first step %.3f s; -> the chief admits it %s; the chief's longest step meanwhile (until 1 s after) %.3f s"
          % (first[0] - t0, "%.3f s" % (admit[0] - t0) if admit else "never", max(gaps) if gaps else 0))
PY
}

run_case sync --sync sync
run_case async
[ $fails = 0 ]
