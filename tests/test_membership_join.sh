#!/usr/bin/env bash
# Workers that join a running job (docs/distributed.md "Membership"), real processes under
# `psgraph launch --workers 2:3`: a cluster of 3 workers of which 2 start. The chief finds
# worker2 not started after the peer timeout and goes on without it (sync: N = 2); once it
# said so and passed its step 60, a SIGUSR1 to launch starts worker2 with `--join`: it says
# the global step it joins at, the chief says it joined (once) and, with sync, averages 3 of
# 3 gradients a step from then on; worker2 trains (its gradients used), the job ends with
# exit code 0 and the done line counts the join. Sync and async. The time from the join's
# start to its first step is printed, never asserted. Then a join at the job's end (run_late).
set -u
psgraph=$1
asan=${2:-}
. "$(dirname "$0")/membership_lib.sh"

# The job must outlast the "not started" verdict (the peer timeout, 2 s) and the join by far:
# with 150 steps the chief reached its last steps before them under ASan, and with 300 a quick
# machine's async job (115 steps/s a worker) ended 0.3 s after the join, before its admission
steps=800
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
  join_worker2() {
    if [ -z "$joined" ] && grep -q "^[0-9.]* \[worker0\] step $join_at " "$out" 2>/dev/null &&
       grep -q '\[worker0\] membership: worker2 .*: not started' "$out"; then
      t_join=$(date +%s.%N)
      kill -USR1 "$launch_pid" && joined=1
    fi
  }
  wait_launch join_worker2
  rc=$launch_rc
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
assert d["workers_live"] == 3, d  # the count the strategy followed: worker2 in again
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

# A join at the job's end (async): the chief's end-of-job wait is over and it said the job
# ends without worker2 (not started, or never heard from: lost). The stamper holds the chief
# there (SIGSTOP, the moment it reads that line) and starts worker2 (SIGUSR1); once worker2
# made its first step the chief goes on: it tells the ps tasks the job is done, worker2's next step
# fails with it and worker2 stops at once, saying so (no recovery), exit 0. The chief never
# admits it; launch exits 0. Tried again (at most 3 runs) when the chief got past its JobDone
# before the stop landed (the ps stopped before worker2 made its steps): a race of the test's.
hold='import os, re, signal, sys, time
chief = launch = None
for line in sys.stdin:
    if chief and launch and re.match(r"\[worker0\] membership: worker2 on .*: the job ends without it", line):
        os.kill(chief, signal.SIGSTOP)
        os.kill(launch, signal.SIGUSR1)
        sys.stdout.write("%.3f test: the chief held, worker2 started\n" % time.time())
    sys.stdout.write("%.3f %s" % (time.time(), line))
    sys.stdout.flush()
    m = re.search(r"kill -USR1 ([0-9]+)", line)
    launch = int(m.group(1)) if m else launch
    m = re.match(r"psgraph launch: worker0 pid ([0-9]+)$", line)
    chief = int(m.group(1)) if m else chief'

# late_run OUT ARGS...: one run of `psgraph train ARGS`; sets rc and held (2: the chief held,
# then let go)
late_run() {
  local out=$1 chief=
  shift
  # --peer-timeout 8: the chief held while worker2 starts (seconds under ASan on a loaded
  # machine) stays well within it
  "$psgraph" launch --transport tcp --ps 1 --workers 2:3 -- "$psgraph" train \
    --model mlp --data synthetic --steps 100 --log-every 1 --peer-timeout 8 --step-timeout 30 \
    "$@" > >(python3 -u -c "$hold" >"$out") 2>&1 &
  launch_pid=$!
  held=
  hold_chief() {
    if [ -z "$held" ] && grep -q '^[0-9.]* test: the chief held' "$out" 2>/dev/null; then
      chief=$(sed -n 's/^[0-9.]* psgraph launch: worker0 pid \([0-9]*\)$/\1/p' "$out")
      held=1
    fi
    # worker2 stepping (or gone): the chief goes on
    if [ "$held" = 1 ] && grep -q '\[worker2\] step 1 \|\[worker2\] exited\|psgraph launch: SIGUSR1' "$out"; then
      kill -CONT "$chief"
      held=2
    fi
  }
  wait_launch hold_chief
  [ "$held" = 1 ] && kill -CONT "$chief"
  rc=$launch_rc
  sleep 0.5 # the stamper's last lines
}

# run_late NAME ARGS...: a late join's run (tried again when the test's race was lost), checked.
# async: worker2's step fails with the job's end, said; sync: its step finds the token queue
# closed (training over) or the job's end: either way it ends at once, exit 0, and its own
# JobDone after the chief's for it counts once (the chief's evaluation still has its ps)
run_late() {
  local name=$1 dir="$tmp/$1" out held rc try
  shift
  mkdir -p "$dir"
  for try in 1 2 3; do
    out="$dir/out$try.log"
    late_run "$out" "$@"
    # the race lost: the ps stopped before worker2's steps
    grep -q '\[worker2\] step 1 ' "$out" && break
    echo "  (run $try: the chief got past its JobDone before it was held; again)"
  done
  local done_line
  done_line=$(grep '\[worker0\] {"event":"done"' "$out" | sed 's/^[0-9.]* \[worker0\] //')
  if [ "$held" = 2 ] && [ "$rc" = 0 ] &&
     grep -q '\[worker2\] started: pid [0-9]*, joining the running job (SIGUSR1)' "$out" &&
     grep -q '\[worker2\] step 1 ' "$out" &&
     { grep -q '\[worker2\] psgraph train: /job:worker/task:2: the job ended (task /job:ps/replica:0/task:0: job done: 3 workers finished at global step [0-9]*) before this worker.s step [0-9]*: it stops here$' "$out" ||
       { [ "$name" = late_sync ] && grep -q '\[worker2\] {"event":"worker_done"' "$out"; }; } &&
     grep -q '\[worker2\] exited with code 0$' "$out" &&
     grep -q '\[worker0\] exited with code 0$' "$out" &&
     ! grep -q '\[worker2\] recovery:' "$out" &&
     ! grep -q '\[worker0\] membership: worker2 on 127.0.0.1: joined' "$out" &&
     grep -q '\[ps0\] psgraph server: stopped: job done' "$out" &&
     python3 - "$done_line" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["workers_joined"] == 0 and d["workers_live"] == 2, d
PY
  then
    ok "$name${*:+ ($*)}, worker2 started after the chief's end-of-job wait: not admitted, it stopped at once (exit 0; async: its step told the job is done, said), the chief and launch exit 0"
  else
    fail "$name, worker2 joining at the job's end (rc $rc, held '$held'): $(grep -v '\] step ' "$out" | tail -30)"
  fi
  grep '\[worker2\] psgraph train: .*the job ended\|\[worker0\] membership: worker2 .*after the job' "$out" |
    sed 's/^[0-9.]* /  /'
}

run_case sync --sync sync
run_case async
run_late late
run_late late_sync --sync sync
[ $fails = 0 ]
