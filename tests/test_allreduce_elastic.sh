#!/usr/bin/env bash
# Ring all-reduce over the live workers (docs/sync.md "allreduce", sync/allreduce_ring.c), real
# processes under `psgraph launch`:
# - kill: 3 workers, worker2 SIGKILLed at its step 40: the chief says the loss once and that
#   the ring now holds the 2 live workers; worker0 and worker1 re-form the ring at the same
#   step (generation 1), the job finishes with exit code 0, and the two survivors' model
#   digests (sum and sum of squares of their own copies, exact) are equal at every step both
#   said one after the loss.
# - join: `--workers 2:3`, worker2 started (`--join`) after the chief's step 60: admitted once,
#   it enters the ring at a step boundary with the chief's variables: its digest equals
#   worker0's and worker1's at its first step and after it, the job finishes with exit code 0.
# Every wait is for a line, with deadlines far above a loaded machine's (ASan on 2 shared cores).
set -u
psgraph=$1
asan=${2:-}
. "$(dirname "$0")/membership_lib.sh"

steps=200
[ -n "$asan" ] && steps=150

# check_digests OUT WORKERS MIN_GEN MIN_COMMON: every (step, generation >= MIN_GEN) that two or
# more of WORKERS (e.g. "0 1") said a digest for has one digest; at least MIN_COMMON such
# steps said by all of WORKERS. Prints the steps compared.
check_digests() {
  python3 - "$@" <<'PY'
import re, sys
out, workers, min_gen, min_common = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), int(sys.argv[4])
said = {}
for line in open(out, errors="replace"):
    m = re.search(r"\[worker(\d+)\] allreduce: worker\1 at step (\d+) \(generation (\d+)\): "
                  r"model digest (\S+) (\S+)$", line)
    if m and m.group(1) in workers and int(m.group(3)) >= min_gen:
        said.setdefault((int(m.group(2)), int(m.group(3))), {})[m.group(1)] = m.group(4, 5)
common = sorted(k for k, v in said.items() if len(v) == len(workers))
bad = [(k, v) for k, v in said.items() if len(set(v.values())) > 1]
print("  digests of workers %s compared at (step, generation) %s" % (",".join(workers), common))
assert not bad, bad
assert len(common) >= min_common, said
PY
}

run_kill() {
  local dir="$tmp/kill"
  mkdir -p "$dir"
  local out="$dir/out.log"
  local wrap='case "$TF_CONFIG" in *"\"index\": 2}"*) echo $$ >"'"$dir"'/w2.pid";; esac; exec "$0" "$@"'
  "$psgraph" launch --transport tcp --ps 1 --workers 3 -- sh -c "$wrap" "$psgraph" train \
    --model mlp --data synthetic --steps $steps --log-every 1 --peer-timeout 2 --step-timeout 60 \
    --sync allreduce > >(python3 -u -c "$stamp" >"$out") 2>&1 &
  launch_pid=$!
  local killed= rc t_kill=0
  kill_worker2() { # at worker2's step 40
    if [ -z "$killed" ] && [ -s "$dir/w2.pid" ] &&
       grep -aq "^[0-9.]* \[worker2\] step 40 " "$out" 2>/dev/null; then
      t_kill=$(date +%s.%N)
      kill -KILL "$(cat "$dir/w2.pid")" && killed=1
    fi
  }
  wait_launch kill_worker2
  rc=$launch_rc
  sleep 0.5 # the stamper's last lines
  local ring0 ring1
  ring0=$(grep -ao '\[worker0\] allreduce: worker0 steps in the ring of generation [0-9]* from step [0-9]*: workers 0, 1$' "$out" | sed 's/.*generation //')
  ring1=$(grep -ao '\[worker1\] allreduce: worker1 steps in the ring of generation [0-9]* from step [0-9]*: workers 0, 1$' "$out" | sed 's/.*generation //')
  if [ -n "$killed" ] && [ "$rc" = 0 ] &&
     [ "$(grep -ac '\[worker0\] membership: worker2 on 127.0.0.1: lost (silent [0-9.]* s) at step [0-9]*$' "$out")" = 1 ] &&
     grep -aq '\[worker0\] membership: --sync allreduce now rings the 2 live workers' "$out" &&
     [ -n "$ring0" ] && [ "$ring0" = "$ring1" ] &&
     grep -aq '\[worker2\] failed with code 137; the job goes on without it' "$out" &&
     grep -aq '\[ps0\] psgraph server: stopped: job done' "$out" &&
     check_digests "$out" "0 1" 1 2; then
    ok "kill: worker2 SIGKILLed at its step 40 of 3: worker0 and worker1 re-formed the ring (generation $ring0), the job finished (exit 0), their copies equal at each step both said"
  else
    fail "kill (rc $rc, killed '${killed}', rings '$ring0' / '$ring1'): $(grep -av '\] step \|plain frames' "$out" | tail -30)"
  fi
  # printed only: the kill -> the loss said, -> the chief's first step in the new ring
  say_times "$out" "$t_kill" 'membership: worker2 on .*: lost' '\[worker0\] allreduce: worker0 steps in the ring of generation' "kill"
}

# say_times OUT T0 PAT1 PAT2 WHAT: the first line after T0 matching each pattern, in seconds
say_times() {
  python3 - "$@" <<'PY'
import re, sys
out, t0, p1, p2, what = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
lines = [(float(l.split()[0]), l) for l in open(out, errors="replace") if re.match(r"[0-9.]+ \[", l)]
def after(p):
    return next((round(t - t0, 2) for t, l in lines if t >= t0 and re.search(p, l)), None)
print("  %s -> %s: %s s, -> %s: %s s" % (what, p1, after(p1), p2, after(p2)))
PY
}

run_join() {
  local dir="$tmp/join"
  mkdir -p "$dir"
  local out="$dir/out.log" joined= rc t_join=0
  "$psgraph" launch --transport tcp --ps 1 --workers 2:3 -- "$psgraph" train \
    --model mlp --data synthetic --steps 300 --log-every 1 --peer-timeout 2 --step-timeout 60 \
    --sync allreduce > >(python3 -u -c "$stamp" >"$out") 2>&1 &
  launch_pid=$!
  start_worker2() { # after the chief's step 60
    if [ -z "$joined" ] && grep -aq "^[0-9.]* \[worker0\] step 60 " "$out" 2>/dev/null &&
       grep -aq '\[worker0\] membership: worker2 .*: not started' "$out"; then
      t_join=$(date +%s.%N)
      kill -USR1 "$launch_pid" && joined=1
    fi
  }
  wait_launch start_worker2
  rc=$launch_rc
  sleep 0.5
  local ring2 first
  ring2=$(grep -ao '\[worker2\] allreduce: worker2 steps in the ring of generation [0-9]* from step [0-9]*: workers 0, 1, 2$' "$out" | tail -1)
  first=$(echo "$ring2" | sed -n 's/.*generation \([0-9]*\) from step \([0-9]*\):.*/\1 \2/p')
  if [ -n "$joined" ] && [ "$rc" = 0 ] && [ -n "$first" ] &&
     [ "$(grep -ac '\[worker0\] membership: worker2 on 127.0.0.1: joined at step [0-9]*$' "$out")" = 1 ] &&
     grep -aq '\[worker0\] membership: --sync allreduce now rings the 3 live workers' "$out" &&
     grep -aq "\[worker0\] allreduce: worker0 steps in the ring of generation ${first% *} from step ${first#* }: workers 0, 1, 2$" "$out" &&
     grep -aq "\[worker2\] allreduce: worker2 at step $((${first#* } + 1)) (generation ${first% *}): " "$out" &&
     check_digests "$out" "0 1 2" "${first% *}" 2; then
    ok "join: worker2 joined after the chief's step 60, entered the ring at step ${first#* } (generation ${first% *}) with the others' variables (equal at its first step and after), the job finished (exit 0)"
  else
    fail "join (rc $rc, joined '${joined}', ring '$ring2'): $(grep -av '\] step \|plain frames' "$out" | tail -30)"
  fi
  # printed only: SIGUSR1 -> the chief's admission, -> worker2's first step in the ring
  say_times "$out" "$t_join" 'membership: worker2 on .*: joined' '\[worker2\] allreduce: worker2 at step' "SIGUSR1"
}

run_kill
run_join
[ "$fails" = 0 ] || exit 1
