#!/usr/bin/env bash
# The chief's live set of workers (worker/membership.c) with real processes under `psgraph
# launch`: sync with a backup worker (3 workers, N = 2), sync without (N = 3), local SGD
# (N = 3), SSP, easgd and async (launch lets the worker go by default), worker 2 SIGKILLed
# mid-run. The job finishes with exit code 0; the chief says the loss once, naming worker2,
# its host and why; with sync it says the N it averages now (2 of the 2 live: without backup
# workers the job would stall on the lost one's gradient otherwise), with SSP that the clocks
# wait for the 2 live workers; its done line counts the loss; its end-of-job wait neither
# times out nor blames a ps task; the ps task stops because the job is done. The times (kill
# -> the chief's next step, its first step once the loss was said, its last step -> the end
# of the job) are printed, never asserted.
set -u
psgraph=$1
asan=${2:-}
. "$(dirname "$0")/membership_lib.sh"

steps=200
[ -n "$asan" ] && steps=150
kill_at=$((steps / 4))

# run_case NAME STRATEGY ARGS...: 3 workers of `psgraph train ARGS`, worker 2 SIGKILLed at
# its step $kill_at; the checks above, then the times
run_case() {
  local name=$1 strategy=$2
  shift 2
  local dir="$tmp/$name"
  mkdir -p "$dir"
  # worker 2's process id: the shell's, which exec makes psgraph's
  local wrap='case "$TF_CONFIG" in *"\"index\": 2}"*) echo $$ >"'"$dir"'/w2.pid";; esac; exec "$0" "$@"'
  "$psgraph" launch --transport tcp --ps 1 --workers 3 -- sh -c "$wrap" "$psgraph" train \
    --model mlp --data synthetic --steps $steps --log-every 1 --peer-timeout 2 --step-timeout 30 \
    "$@" > >(python3 -u -c "$stamp" >"$dir/out.log") 2>&1 &
  launch_pid=$!
  local killed= t_kill=0 rc t_end
  kill_worker2() {
    if [ -z "$killed" ] && [ -s "$dir/w2.pid" ] &&
       grep -q "^[0-9.]* \[worker2\] step $kill_at " "$dir/out.log" 2>/dev/null; then
      t_kill=$(date +%s.%N)
      kill -KILL "$(cat "$dir/w2.pid")" && killed=1
    fi
  }
  wait_launch kill_worker2
  rc=$launch_rc
  t_end=$(date +%s.%N)
  sleep 0.5 # the stamper's last lines
  local out="$dir/out.log" done_line lost_lines
  done_line=$(grep '\[worker0\] {"event":"done"' "$out" | sed 's/^[0-9.]* \[worker0\] //')
  lost_lines=$(grep -c '\[worker0\] membership: worker2 on 127.0.0.1: lost (silent [0-9.]* s) at step [0-9]*$' "$out")
  if [ -n "$killed" ] && [ "$rc" = 0 ] && [ "$lost_lines" = 1 ] &&
     grep -q '\[worker2\] failed with code .*the job goes on without it' "$out" &&
     grep -q '\[ps0\] psgraph server: stopped: job done' "$out" &&
     ! grep -q 'WaitDone\|waiting for the workers to finish' "$out" &&
     case $strategy in
       async | easgd) true ;; # nothing waits for another worker: nothing to follow
       ssp) grep -q '\[worker0\] membership: --sync ssp now waits for the 2 live workers, each gradient divided by 2$' "$out" ;;
       *) grep -q "\[worker0\] membership: --sync $strategy now averages 2 of 2 gradients a step (2 live workers)" "$out" ;;
     esac &&
     python3 - "$done_line" "$strategy" "$steps" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
lost = d["workers_lost"]
assert len(lost) == 1 and lost[0]["task"] == "worker2" and lost[0]["host"] == "127.0.0.1", lost
assert lost[0]["why"].startswith("lost (silent ") and lost[0]["at_step"] > 0, lost
assert d["membership_changes"] == 1 and d["sync"] == sys.argv[2], d
# the live count at the end, and N as it followed it (sync b = 1: 2 of 3 kept; b = 0 and
# local: 3 -> 2)
assert d["workers_live"] == 2, d
assert sys.argv[2] not in ("sync", "local") or d["replicas_to_aggregate_live"] == 2, d
# sync: the global steps of the run; local: its averages (every 4 steps); easgd: none (each
# worker's own copy, the center's exchanges are not steps); async, ssp: every step of the
# two that lived, and some of the lost one's
steps = int(sys.argv[3])
want = {"sync": steps, "local": steps // 4, "easgd": 0}.get(sys.argv[2])
assert d["global_steps"] == want if want is not None else d["global_steps"] > 2 * steps, d
PY
  then
    ok "$name, 3 workers${*:+ ($*)}, worker2 SIGKILLed at its step $kill_at: the job finished (exit 0), the chief said the loss once (worker2 on 127.0.0.1), the done line counts it, no wait blamed a ps task"
  else
    fail "$name, worker2 killed (rc $rc, killed '${killed}', $lost_lines loss lines): $(grep -v '\] step ' "$out" | tail -30)"
  fi
  # the times, printed only: the kill -> the chief's next step, and its first step once the
  # loss was said (with b = 0 the first without worker2); its last step -> the job's end
  python3 - "$out" "$t_kill" "$t_end" <<'PY'
import re, sys
kill, end = float(sys.argv[2]), float(sys.argv[3])
lines = [(float(l.split()[0]), l) for l in open(sys.argv[1]) if re.match(r"[0-9.]+ \[worker0\] ", l)]
steps = [t for t, l in lines if re.match(r"[0-9.]+ \[worker0\] step ", l)]
lost = [t for t, l in lines if "membership: worker2" in l]
after = [t for t in steps if t > kill]
without = [t for t in steps if lost and t >= lost[0]]
if kill and after and steps:
    print("  kill -> the chief's next step %.3f s; kill -> the loss said %s; kill -> the chief's first step after it %s; the chief's last step -> the end of the job %.3f s"
          % (after[0] - kill, "%.3f s" % (lost[0] - kill) if lost else "never",
             "%.3f s" % (without[0] - kill) if without else "none", end - steps[-1]))
PY
}

# sync replicas with a backup worker (N = 2 of 3): the loss is within b
run_case sync sync --sync sync --backup-workers 1
# sync without backup workers (N = 3): the chief's membership lowers N to 2 and the tokens
# to 2 a step, so the job goes on
run_case sync_b0 sync --sync sync
# local SGD (its averages through sync's accumulators, N = 3): the same
run_case local local --sync local --local-steps 4
# SSP (staleness 1): the lost worker's clocks no longer hold the others back
run_case ssp ssp --sync ssp --staleness 1
# easgd: nothing waits for another worker; launch lets it go, the end follows the live set
run_case easgd easgd --sync easgd --local-steps 4
# async (no --sync: psgraph train's default in a cluster): launch lets any worker but the
# chief go, as the strategy waits for none
run_case async async
[ $fails = 0 ]
