#!/usr/bin/env bash
# Chain replication and hot failover with real processes on 127.0.0.1 (docs/replication.md):
# after async and sync training with --ps-replicas 2, every variable of each ps's shard (Adam's
# slots, the beta powers and the global step included) is bitwise equal, by crc32, on its
# backup (the next ps); SIGKILL of ps0 under `launch --restart on-failure`: the worker fails
# over to ps1 with no checkpoint read and ps1 copies the whole shard to ps0 when it is back;
# SIGKILL of ps1 then: back to ps0; the job reaches its planned step with its variables bitwise
# those of a run without a kill; a second failure of a shard before it was re-replicated falls
# back to the checkpoint restore, said so; a bad --ps-replicas is named. Every process is gone
# afterwards.
set -u
psgraph=$1
. "$(dirname "$0")/replication_lib.sh"
fails=0
tmp=$(mktemp -d /tmp/psg_test_replication.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
free_ports() { python3 "$(dirname "$0")/python/free_ports.py" "$1"; }
data=(--data synthetic)
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && data=(--data fashion-mnist)

# Every ps's own variables (Adam's slots m and v, the beta powers, the global step included)
# against the backup copies on the next ps: names and crc32 equal; and the primary's dense
# updates were replayed on the backup (Inspect's "replication"), not sent by value.
compare_backups() {
  python3 - "$@" <<'PY'
import json, sys
reps = [json.load(open(f)) for f in sys.argv[1:]]
own = [{v["name"]: v["crc32"] for v in r["variables"] if v["initialized"] and not v.get("backup")} for r in reps]
bak = [{v["name"]: v["crc32"] for v in r["variables"] if v.get("backup")} for r in reps]
n = len(reps)
for k in range(n):
    b = (k + 1) % n
    assert reps[k]["backup_task"] == "/job:ps/task:%d" % b, reps[k].get("backup_task")
    assert own[k], "ps%d holds no variable" % k
    assert own[k] == bak[b], ("ps%d's shard and its backup on ps%d differ" % (k, b),
                              {x: (own[k].get(x), bak[b].get(x)) for x in set(own[k]) | set(bak[b]) if own[k].get(x) != bak[b].get(x)})
# the forwards carried the updates (gradients), held by the backup and replayed there (the
# Inspect drains its log) or dropped under a snapshot of the values, not applied twice
for k in range(n):
    b = (k + 1) % n
    fw, bk = reps[k]["replication"], reps[b]["replication"]
    assert fw["updates_replayed"] > 0 and bk["held_as_backup"] == 0 and \
        fw["updates_replayed"] == bk["replayed_as_backup"] + bk["dropped_as_backup"], (
        "ps%d's updates were not held on ps%d" % (k, b), fw, bk)
# the chief's membership (2 workers) asks every ps for a brief report every 250 ms: the backup
# keeps its log held for it; it applies it before a whole report only: this test's, and a sync
# chief's count of its accumulators at its end
for r in reps:
    drains = r["replication"]["drains_as_backup"]
    assert drains.get("Inspect", 0) <= 2, ("%s applied its log for the membership's reports" % r["task"], drains)
print(" ".join("ps%d: %d variables, %d updates forwarded (its backup replayed %d, dropped %d under a snapshot; applied its log before %s), %d values sent" % (
    k, len(own[k]), reps[k]["replication"]["updates_replayed"], reps[(k + 1) % n]["replication"]["replayed_as_backup"],
    reps[(k + 1) % n]["replication"]["dropped_as_backup"], reps[(k + 1) % n]["replication"]["drains_as_backup"],
    reps[k]["replication"]["values"])
    for k in range(n)))
PY
}

# 1-2. bitwise equal backups after async (1 and 2 workers) and sync (2 workers) training
run_cluster() { # name workers train-args...
  local name=$1 nw=$2
  shift 2
  read -r p0 p1 w0 w1 <<<"$(free_ports 4)"
  local workers="\"127.0.0.1:$w0\""
  [ "$nw" = 2 ] && workers="$workers, \"127.0.0.1:$w1\""
  echo "{\"cluster\": {\"ps\": [\"127.0.0.1:$p0\", \"127.0.0.1:$p1\"], \"worker\": [$workers]}, \"ps_replicas\": 2}" >"$tmp/$name.json"
  pids=()
  for k in 0 1; do
    "$psgraph" server --cluster "$tmp/$name.json" --job ps --task $k --expect-workers 0 --idle-timeout 120 \
      >"$tmp/$name.ps$k.log" 2>&1 &
    pids+=($!)
  done
  local wp=() rc=0
  for ((i = 0; i < nw; i++)); do
    timeout 180 "$psgraph" train --cluster "$tmp/$name.json" --job worker --task $i --model mlp "${data[@]}" \
      --optimizer adam --lr 0.001 --batch 64 --log-every 1000 --step-timeout 30 "$@" >"$tmp/$name.w$i.log" 2>&1 &
    wp+=($!)
  done
  for p in "${wp[@]}"; do wait "$p" || rc=$?; done
  "$psgraph" inspect --task "127.0.0.1:$p0" >"$tmp/$name.i0.json" 2>&1 || rc=$?
  "$psgraph" inspect --task "127.0.0.1:$p1" >"$tmp/$name.i1.json" 2>&1 || rc=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  pids=()
  return $rc
}
if run_cluster async 1 --steps 60 && out=$(compare_backups "$tmp/async.i0.json" "$tmp/async.i1.json" 2>&1); then
  ok "async, 60 steps of Adam: every variable and slot of each shard bitwise equal on its backup ($out)"
else
  fail "async backups: ${out:-} $(tail -n 5 "$tmp"/async.w0.log "$tmp"/async.ps*.log)"
fi
# two async workers: their updates of one variable interleave on the primary, in the order the
# log gives the backup (Adam's beta powers, read by one step while another scales them, logged
# as the kernel read them: the backups differed in the weights before that)
out=
if run_cluster async2 2 --steps 150 && out=$(compare_backups "$tmp/async2.i0.json" "$tmp/async2.i1.json" 2>&1); then
  ok "async, 2 workers x 150 steps of Adam: every variable and slot of each shard bitwise equal on its backup ($out)"
else
  fail "async backups, 2 workers: ${out:-} $(tail -n 5 "$tmp"/async2.w*.log "$tmp"/async2.ps*.log)"
fi
out=
if run_cluster sync 2 --steps 40 --sync sync && out=$(compare_backups "$tmp/sync.i0.json" "$tmp/sync.i1.json" 2>&1); then
  ok "sync, 2 workers, 40 global steps: every variable (global step included) bitwise equal on its backup ($out)"
else
  fail "sync backups: ${out:-} $(tail -n 5 "$tmp"/sync.w*.log "$tmp"/sync.ps*.log)"
fi

# 3. SIGKILL of ps0 at step 100 of 1000 under launch --restart on-failure: failover to ps1, which
# copies the shard to the restarted ps0; SIGKILL of ps1 at step 200 or after, once that copy is
# logged: failover to ps0. One worker, the same seed: the final checkpoint bitwise equal to a
# run without a kill. (1000 steps: the restarted ps0 may take seconds to get its copy on a busy
# machine, and the second kill must come before the end.)
total=1000
train=(train --model mlp "${data[@]}" --optimizer adam --lr 0.001 --batch 64 --steps $total --log-every 50
       --peer-timeout 2 --step-timeout 30 --ps-replicas 2)
timeout 240 "$psgraph" launch --ps 2 --workers 1 -- "$psgraph" "${train[@]}" --logdir "$tmp/ref" >"$tmp/ref.log" 2>&1
"$psgraph" launch --ps 2 --workers 1 --restart on-failure -- "$psgraph" "${train[@]}" --logdir "$tmp/killed" \
  >"$tmp/kill.log" 2>&1 &
bg=$!
pids=($bg)
for _ in $(seq 1 600); do grep -q '^\[worker0\] step 100 ' "$tmp/kill.log" && break; sleep 0.1; done
ps0=$(sed -n 's/^psgraph launch: ps0 pid \([0-9]*\)$/\1/p' "$tmp/kill.log")
[ -n "$ps0" ] && kill -9 "$ps0"
# then, once ps1 copied the shard to the restarted ps0 and step 200 passed, SIGKILL of ps1: back to ps0
for _ in $(seq 1 1200); do
  grep -q 'restarted: copying the whole shard\|re-replicated its shard' "$tmp/kill.log" &&
    grep -q '^\[worker0\] step \([2-9][0-9][0-9]\) ' "$tmp/kill.log" && break
  sleep 0.1
done
ps1=$(sed -n 's/^psgraph launch: ps1 pid \([0-9]*\)$/\1/p' "$tmp/kill.log")
grep -q 'restarted: copying the whole shard\|re-replicated its shard' "$tmp/kill.log" && [ -n "$ps1" ] && kill -9 "$ps1"
timeout 240 tail --pid="$bg" -f /dev/null
wait "$bg"; rc=$?
pids=()
steps=$(sed -n 's/^\[worker0\] {"event":"done".*"global_steps":\([0-9]*\).*/\1/p' "$tmp/kill.log")
same=$(ckpt_same "$tmp/ref/model.ckpt-$total.index.json" "$tmp/killed/model.ckpt-$total.index.json")
if [ $rc = 0 ] && grep -q 'variables on 2 ps tasks (each shard backed up on the next ps task: --ps-replicas 2)' "$tmp/kill.log" &&
   grep -q '^\[worker0\] failover: ps0 is lost (.*); its shard is served by its backup ps1 from step [0-9]* (switched in [0-9.]* s; no checkpoint read)' "$tmp/kill.log" &&
   ! grep -q 'restored shard\|re-initialized' "$tmp/kill.log" &&
   grep -q '^\[ps1\] .*task /job:ps/replica:0/task:1: its backup /job:ps/task:0 .*\(restarted: copying the whole shard\|re-replicated its shard\)' "$tmp/kill.log" &&
   grep -q '^\[worker0\] failover: ps1 is lost (.*); its shard is served by its backup ps0 from step' "$tmp/kill.log" &&
   [ "$steps" = $total ] && grep -q "tensors equal, global_step $total" <<<"$same"; then
  ok "SIGKILL of ps0 at step 100: failover to ps1, no checkpoint read, shard copied to the restarted ps0; SIGKILL of ps1 after step 200: failover to ps0; $total global steps, final checkpoint bitwise equal to the run without a kill ($same)"
else
  fail "failover (rc $rc, global steps ${steps:-none}): $same $(grep -v '\] step ' "$tmp/kill.log" | tail -20)"
fi

# 3b. SIGKILL of ps0 at step 100, and of the restarted ps0 as soon as launch says it is back
# (ps1 copies its shard to it at most once a second until a copy goes through: the kill comes
# before or during that copy): ps1 copies it to ps0's third process; the job's final
# checkpoint bitwise that of the run without a kill.
"$psgraph" launch --ps 2 --workers 1 --restart on-failure -- "$psgraph" "${train[@]}" --logdir "$tmp/rerep" \
  >"$tmp/rerep.log" 2>&1 &
bg=$!
pids=($bg)
for _ in $(seq 1 600); do grep -q '^\[worker0\] step 100 ' "$tmp/rerep.log" && break; sleep 0.1; done
ps0=$(sed -n 's/^psgraph launch: ps0 pid \([0-9]*\)$/\1/p' "$tmp/rerep.log")
[ -n "$ps0" ] && kill -9 "$ps0"
again=
for _ in $(seq 1 600); do
  again=$(sed -n 's/^\[ps0\] restarted: pid \([0-9]*\)$/\1/p' "$tmp/rerep.log" | head -1)
  [ -n "$again" ] && break
  sleep 0.02
done
[ -n "$again" ] && kill -9 "$again"
timeout 240 tail --pid="$bg" -f /dev/null
wait "$bg"; rc=$?
pids=()
steps=$(sed -n 's/^\[worker0\] {"event":"done".*"global_steps":\([0-9]*\).*/\1/p' "$tmp/rerep.log")
same=$(ckpt_same "$tmp/ref/model.ckpt-$total.index.json" "$tmp/rerep/model.ckpt-$total.index.json")
if [ $rc = 0 ] && [ -n "$again" ] && grep -q '^\[ps0\] restarting it (restart 2 ' "$tmp/rerep.log" &&
   ! grep -q 'restored shard\|re-initialized' "$tmp/rerep.log" &&
   grep -q '^\[ps1\] .*its backup /job:ps/task:0 .*\(restarted: copying the whole shard\|re-replicated its shard\)' "$tmp/rerep.log" &&
   [ "$steps" = $total ] && grep -q "tensors equal, global_step $total" <<<"$same"; then
  ok "SIGKILL of ps0 at step 100, then of its restarted process while ps1 re-replicates to it: copied to the third; $total global steps, bitwise equal to the run without a kill ($same)"
else
  fail "kill during re-replication (rc $rc, global steps ${steps:-none}): $same $(grep -v '\] step ' "$tmp/rerep.log" | tail -20)"
fi

# 3c. SIGKILL of the chief (worker0, the only worker) and ps0 at once at step 100: the
# restarted chief finds ps1 holding its shard and ps0 empty, and fails ps0's shard over to
# ps1 instead of restoring or initializing it; ps1 copies it to ps0. The job ends.
# 1,500 steps: the restarted chief's run outlasts ps0's return and ps1's copy to it (with 400,
# at 500 steps/s once Adam's loop was vectorized, the job once ended before the copy began)
"$psgraph" launch --ps 2 --workers 1 --restart on-failure -- "$psgraph" train --model mlp "${data[@]}" \
  --optimizer adam --lr 0.001 --batch 64 --steps 1500 --log-every 50 --peer-timeout 2 --step-timeout 30 \
  --ps-replicas 2 --logdir "$tmp/chiefps" >"$tmp/chiefps.log" 2>&1 &
bg=$!
pids=($bg)
for _ in $(seq 1 600); do grep -qs '^\[worker0\] step 100 ' "$tmp/chiefps.log" && break; sleep 0.1; done
ps0=$(sed -n 's/^psgraph launch: ps0 pid \([0-9]*\)$/\1/p' "$tmp/chiefps.log")
w0=$(sed -n 's/^psgraph launch: worker0 pid \([0-9]*\)$/\1/p' "$tmp/chiefps.log")
[ -n "$ps0" ] && [ -n "$w0" ] && kill -9 "$ps0" "$w0"
timeout 240 tail --pid="$bg" -f /dev/null
wait "$bg"; rc=$?
pids=()
steps=$(sed -n 's/^\[worker0\] {"event":"done".*"global_steps":\([0-9]*\).*/\1/p' "$tmp/chiefps.log")
if [ $rc = 0 ] && [ -n "$steps" ] && [ "$steps" -ge 400 ] &&
   grep -q '^\[worker0\] .*1 of 2 ps tasks hold their shards and 1 restarted too: failing those over' "$tmp/chiefps.log" &&
   grep -q '^\[worker0\] failover: ps0 is lost (.*); its shard is served by its backup ps1' "$tmp/chiefps.log" &&
   ! grep -q 'restored shard\|re-initialized' "$tmp/chiefps.log" &&
   grep -q '^\[ps1\] .*its backup /job:ps/task:0 .*\(restarted: copying the whole shard\|re-replicated its shard\)' "$tmp/chiefps.log"; then
  ok "SIGKILL of the chief and ps0 at once: the restarted chief failed ps0's shard over to ps1 (no checkpoint read, nothing initialized again), ps1 copied it to ps0; global steps $steps"
else
  fail "chief and ps0 killed at once (rc $rc, global steps ${steps:-none}): $(grep -v '\] step ' "$tmp/chiefps.log" | tail -20)"
fi

# A cluster file $tmp/NAME.json: 2 ps tasks and W workers on free ports, --ps-replicas 2, a
# peer timeout of 2 s; its checkpoints in $tmp/NAME.
ps_cluster() { # name workers
  local ports w="" i
  read -r -a ports <<<"$(free_ports $((2 + $2)))"
  for ((i = 0; i < $2; i++)); do w="$w${w:+, }\"127.0.0.1:${ports[2 + i]}\""; done
  echo "{\"cluster\": {\"ps\": [\"127.0.0.1:${ports[0]}\", \"127.0.0.1:${ports[1]}\"], \"worker\": [$w]}, \"ps_replicas\": 2, \"peer_timeout\": 2}" >"$tmp/$1.json"
  mkdir -p "$tmp/$1"
}
# Ps task K of $tmp/NAME.json, logging to $tmp/NAME.psK.log; its pid in $! and pids.
start_ps() { # name task
  "$psgraph" server --cluster "$tmp/$1.json" --job ps --task "$2" --expect-workers 0 \
    --idle-timeout 300 --logdir "$tmp/$1" >>"$tmp/$1.ps$2.log" 2>&1 &
  pids+=($!)
}

# 3d. A second failure of a shard before it was re-replicated: SIGKILL of ps0 at step 100 (the
# worker fails over to ps1; ps0 stays down, so ps1 cannot copy the shard back), then of ps1 at
# step 200: both copies of shard 0 are gone. The worker says so and falls back to the checkpoint
# restore; the two ps tasks started again, it restores both shards from the last checkpoint and
# the job runs its 400 steps, its global step rolled back by the steps the restore lost.
second_failure() {
  local rc=0 pid0 pid1
  ps_cluster second 1
  pids=()
  start_ps second 0; pid0=$!
  start_ps second 1; pid1=$!
  timeout 400 "$psgraph" train --cluster "$tmp/second.json" --job worker --task 0 --model mlp "${data[@]}" \
    --optimizer adam --lr 0.001 --batch 64 --steps 400 --log-every 10 --step-timeout 30 \
    --checkpoint-every 50 --recovery-timeout 120 --logdir "$tmp/second" >"$tmp/second.log" 2>&1 &
  local wp=$!
  for _ in $(seq 1 1200); do grep -q '^step 100 ' "$tmp/second.log" && break; sleep 0.1; done
  kill -9 "$pid0"
  for _ in $(seq 1 1200); do
    grep -q '^failover: ps0 is lost' "$tmp/second.log" && grep -q '^step \([2-9][0-9][0-9]\) ' "$tmp/second.log" && break
    sleep 0.1
  done
  kill -9 "$pid1"
  for _ in $(seq 1 1200); do grep -q 'falling back to the checkpoint restore' "$tmp/second.log" && break; sleep 0.1; done
  start_ps second 0
  start_ps second 1
  wait "$wp" || rc=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  pids=()
  return $rc
}
second_failure; rc=$?
steps=$(sed -n 's/^{"event":"done".*"global_steps":\([0-9]*\).*/\1/p' "$tmp/second.log")
# the restore rolls the job back to the checkpoint: its 400 steps end at 400 - the steps lost
lost=$(sed -n 's/^recovery: ps0 restarted; restored its shard 0 from .*; lost \([0-9]*\) steps of shard 0 .*/\1/p' "$tmp/second.log")
if [ $rc = 0 ] && grep -q '^failover: ps0 is lost (.*); its shard is served by its backup ps1' "$tmp/second.log" &&
   grep -q '^failover: ps1 is lost (.*) and so is its backup ps0 (.*); it served the shard of ps0 too since a failover: a second failure of that shard before it was re-replicated; falling back to the checkpoint restore' "$tmp/second.log" &&
   grep -q '^recovery: ps0 restarted; restored its shard 0 from' "$tmp/second.log" &&
   grep -q '^recovery: ps1 restarted; restored its shard 1 from' "$tmp/second.log" &&
   [ -n "$lost" ] && [ "$lost" -gt 0 ] && [ "$steps" = $((400 - lost)) ]; then
  ok "second failure of shard 0 before re-replication (ps0, then ps1 killed): named, fell back to the checkpoint restore of both shards ($lost steps lost); global steps $steps of 400"
else
  fail "second failure before re-replication (rc $rc, global steps ${steps:-none}): $(grep -v '^step ' "$tmp/second.log" | tail -15)"
fi

# 4. sync, 2 ps + 2 workers (N = 2), 1000 global steps: SIGKILL of ps0 at step 300, started
# again by hand at step 500. The chief takes back its failed step's update, empties the
# accumulators and releases that step's tokens again; each worker sends that step's gradient
# again. Every aggregated gradient applied once on every shard: the final checkpoint is
# bitwise that of a run without a kill (the mean of 2 gradients does not depend on their
# order), so the accuracy is too. The time from the kill to the next step is printed, not
# asserted.
sync_job() { # name kill(0|1)
  local name=$1 kill=$2 ps0 rc=0
  ps_cluster "$name" 2
  pids=()
  start_ps "$name" 0; ps0=$!
  start_ps "$name" 1
  local wp=()
  for i in 0 1; do
    timeout 400 "$psgraph" train --cluster "$tmp/$name.json" --job worker --task $i --model mlp "${data[@]}" \
      --optimizer adam --lr 0.001 --batch 64 --steps 1000 --sync sync --log-every 1 --step-timeout 30 \
      --logdir "$tmp/$name" 2>&1 | while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done \
      >"$tmp/$name.w$i.log" &
    wp+=($!)
  done
  if [ "$kill" = 1 ]; then
    for _ in $(seq 1 1200); do grep -q '^[0-9.]* step 300 ' "$tmp/$name.w0.log" && break; sleep 0.1; done
    echo "$EPOCHREALTIME" >"$tmp/$name.t_kill"
    kill -9 "$ps0"
    for _ in $(seq 1 1800); do grep -q '^[0-9.]* step 500 ' "$tmp/$name.w0.log" && break; sleep 0.1; done
    start_ps "$name" 0
  fi
  for p in "${wp[@]}"; do wait "$p" || rc=$?; done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  pids=()
  return $rc
}
sync_job syncref 0
sync_job synckill 1
same=$(ckpt_same "$tmp/syncref/model.ckpt-1000.index.json" "$tmp/synckill/model.ckpt-1000.index.json")
acc() { sed -n 's/^[0-9.]* {"event":"done".*"test_accuracy":\([0-9.]*\).*/\1/p' "$1"; }
gsteps() { sed -n 's/^[0-9.]* {"event":"done".*"global_steps":\([0-9]*\).*/\1/p' "$1"; }
a_ref=$(acc "$tmp/syncref.w0.log") a_kill=$(acc "$tmp/synckill.w0.log") g_kill=$(gsteps "$tmp/synckill.w0.log")
timing=$(python3 - "$tmp/synckill.w0.log" "$(cat "$tmp/synckill.t_kill" 2>/dev/null || echo 0)" <<'PY' 2>&1
import re, sys
t_kill = float(sys.argv[2])
before = after = None
for line in open(sys.argv[1]):
    t, _, rest = line.partition(" ")
    m = re.match(r"step (\d+) ", rest)
    if m and float(t) <= t_kill:
        before = int(m.group(1))
    elif m and after is None and before is not None:
        after = (int(m.group(1)), float(t) - t_kill)
print("kill at step %s, next step %s %.3f s after (peer timeout 2 s)" % (before, after and after[0], after and after[1] or -1))
PY
)
if grep -q "tensors equal, global_step 1000" <<<"$same" && [ "$g_kill" = 1000 ] &&
   grep -q 'failover: ps0 is lost (.*); its shard is served by its backup ps1' "$tmp/synckill.w0.log" &&
   grep -q 'failover: the chief took back its failed step' "$tmp/synckill.w0.log" &&
   grep -q 'failover: /job:worker/replica:0/task:1 rejoins at global step\|failover: /job:worker/task:1 rejoins at global step' "$tmp/synckill.w1.log" &&
   ! grep -q 'restored shard\|re-initialized' "$tmp/synckill.w0.log" &&
   grep -q 'its backup /job:ps/task:0 .*\(restarted: copying the whole shard\|re-replicated its shard\)' "$tmp/synckill.ps1.log"; then
  ok "sync, 2 workers, SIGKILL of ps0 at step 300, back at 500: 1000 global steps, every aggregated gradient applied once on each shard: final checkpoint bitwise equal to the run without a kill ($same); accuracy $a_kill against $a_ref; $timing"
else
  fail "sync failover (global steps ${g_kill:-none}, accuracy ${a_kill:-none} against ${a_ref:-none}): $same $(grep -v '^[0-9.]* step ' "$tmp/synckill.w0.log" | tail -15) $(grep -v '^[0-9.]* step ' "$tmp/synckill.w1.log" | tail -8) $(tail -8 "$tmp/synckill.ps1.log")"
fi

# 5b. The backup holds its primary's forwards as a log, unapplied, until the next snapshot (the
# whole shard by value, every K forwards: PSG_REPL_SNAPSHOT_EVERY) drops it; a failover applies
# the snapshot and the log. One worker trains 39 steps (40 forwards with the first copy), the ps
# tasks stay; ps0 is SIGKILLed and started again empty; the chief's second run fails ps0's shard
# over to ps1 and trains 30 steps more. With K = 13 the backup held a snapshot alone (a log of
# 0), with K = 8 a snapshot and 7 forwards (K - 1), and replayed only those (before the
# chief's second run, or already at the first run's last Inspect of its ps tasks: ps1
# applies what it holds before answering one): every variable ends bitwise equal to the run
# without a kill. (Peer timeout 30 s: the chief's second run reuses its first run's address.)
snapshot_job() { # name K kill(0|1)
  local name=$1 rc=0 ps0 ports
  ps_cluster "$name" 1
  sed -i 's/"peer_timeout": 2}/"peer_timeout": 30}/' "$tmp/$name.json"
  read -r -a ports <<<"$(sed -n 's/.*"ps": \["127.0.0.1:\([0-9]*\)", "127.0.0.1:\([0-9]*\)"\].*/\1 \2/p' "$tmp/$name.json")"
  pids=()
  export PSG_REPL_SNAPSHOT_EVERY=$2
  start_ps "$name" 0; ps0=$!
  start_ps "$name" 1
  local args=(train --cluster "$tmp/$name.json" --job worker --task 0 --model mlp "${data[@]}" --optimizer adam
              --lr 0.001 --batch 64 --log-every 1000 --step-timeout 60)
  timeout 300 "$psgraph" "${args[@]}" --steps 39 >"$tmp/$name.w0.log" 2>&1 || rc=1
  "$psgraph" inspect --task "127.0.0.1:${ports[0]}" >"$tmp/$name.pre.json" 2>&1 || rc=1
  if [ "$3" = 1 ]; then
    kill -9 "$ps0"
    wait "$ps0" 2>/dev/null
    start_ps "$name" 0
  fi
  timeout 300 "$psgraph" "${args[@]}" --steps 30 >>"$tmp/$name.w0.log" 2>&1 || rc=1
  "$psgraph" inspect --task "127.0.0.1:${ports[0]}" >"$tmp/$name.i0.json" 2>&1 || rc=1
  "$psgraph" inspect --task "127.0.0.1:${ports[1]}" >"$tmp/$name.i1.json" 2>&1 || rc=1
  unset PSG_REPL_SNAPSHOT_EVERY
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  pids=()
  return $rc
}
# The crc32 of every variable of the job (the task serving it now), the job's statistics but.
job_crcs() { # name
  python3 - "$tmp/$1.i0.json" "$tmp/$1.i1.json" <<'PY'
import json, sys
own = {}
for f in sys.argv[1:]:
    for v in json.load(open(f))["variables"]:
        if v["initialized"] and not v.get("backup") and v["name"] != "sync_replicas/worker_counts":
            own[v["name"]] = v["crc32"]
assert len(own) > 20, own
print(" ".join("%s=%s" % kv for kv in sorted(own.items())))
PY
}
# Whether ps1 replayed, as ps0's backup, exactly the updates of the LOG forwards after ps0's
# last snapshot (ps0's updates per forward that was not a snapshot, times LOG): the rest were
# dropped under the snapshots, unapplied.
replayed_log() { # name log
  python3 - "$tmp/$1.pre.json" "$tmp/$1.i1.json" "$2" <<'PY'
import json, sys
fw = json.load(open(sys.argv[1]))["replication"]
bk = json.load(open(sys.argv[2]))["replication"]
per = fw["updates_replayed"] // (fw["forwards"] - fw["snapshots"])
assert bk["replayed_as_backup"] == per * int(sys.argv[3]) and bk["dropped_as_backup"] > 0, (fw, bk)
PY
}
since() { sed -n 's/.*"since_snapshot":\([0-9]*\).*/\1/p' "$tmp/$1.pre.json"; }
snapshot_job snapref 0 0; rc_ref=$?
ref_crcs=$(job_crcs snapref 2>&1)
for kk in "13 0" "8 7"; do
  read -r k log <<<"$kk"
  snapshot_job "snap$k" "$k" 1; rc=$?
  crcs=$(job_crcs "snap$k" 2>&1)
  if [ $rc_ref = 0 ] && [ $rc = 0 ] && [ "$(since "snap$k")" = "$log" ] &&
     replayed_log "snap$k" "$log" &&
     grep -q '^failover: ps0 is lost (.*); its shard is served by its backup ps1' "$tmp/snap$k.w0.log" &&
     ! grep -q 'restored shard\|re-initialized' "$tmp/snap$k.w0.log" && [ "$crcs" = "$ref_crcs" ]; then
    ok "snapshot every $k forwards, ps0 SIGKILLed with a log of $log updates after its last snapshot on ps1: ps1 replayed only those (Inspect), the rest dropped under snapshots; every variable bitwise equal to the run without a kill ($(wc -w <<<"$crcs") variables)"
  else
    fail "snapshot every $k, log $log (rc $rc_ref $rc, since the snapshot: $(since "snap$k")): $(diff <(tr ' ' '\n' <<<"$ref_crcs") <(tr ' ' '\n' <<<"$crcs") | head -6) $(grep -v '^step ' "$tmp/snap$k.w0.log" | tail -8) $(tail -5 "$tmp/snap$k.ps1.log")"
  fi
done

# 5. a bad setting is named
out=$("$psgraph" launch --ps 1 --workers 1 -- "$psgraph" train --model mlp --data synthetic --steps 5 --ps-replicas 2 2>&1); rc=$?
if [ $rc != 0 ] && grep -q 'ps replicas 2 needs at least 2 ps tasks (the cluster has 1)' <<<"$out"; then
  ok "--ps-replicas 2 with one ps task: refused, naming why"
else
  fail "one ps with --ps-replicas 2 (rc $rc): $(tail -5 <<<"$out")"
fi
out=$("$psgraph" train --model mlp --data synthetic --steps 5 --ps-replicas 3 2>&1); rc=$?
if [ $rc = 2 ] && grep -q -- '--ps-replicas' <<<"$out"; then
  ok "--ps-replicas 3: a bad option (exit 2)"
else
  fail "--ps-replicas 3 (rc $rc): $out"
fi

[ $fails = 0 ] && echo "all ok" || echo "$fails failed"
exit $((fails > 0))
