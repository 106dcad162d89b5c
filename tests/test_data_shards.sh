#!/usr/bin/env bash
# Data shards handed out by ps0 (`--data-shards dispatch`, docs/distributed.md "Membership"),
# real processes under `psgraph launch --workers 2:3`, sync with 1 backup worker, 2 epochs of
# 47 shards (10 batches of 128 each; the last shard 8 batches): worker2 joins once the chief
# passed its step 20 and said it is not started; worker1 is killed (SIGKILL) once worker2 took
# a shard. Every worker logs the shards it took and finished (JSON lines); the test counts
# them: each shard of each epoch finished exactly once, the examples finished an epoch are the
# epoch's 468 * 128, the killed worker's shard in flight taken again by another worker (its
# examples the only ones seen twice: printed), the job ends by itself at the data's end (exit
# 0), the done line counts the join and the loss. A kill inside a take (the ps has the shard
# done and the next one handed out, the worker printed neither) loses both lines: the shard is
# counted as worker1's and the next one shows as taken once (shard_events.read's killed).
set -u
psgraph=$1
asan=${2:-}
. "$(dirname "$0")/membership_lib.sh"
# the peer timeout: under ASan on a loaded machine a live worker's task server once left the
# chief's probes unanswered for 3.1 s while it stepped (found lost at 2 s: a false loss)
peer=2
[ -n "$asan" ] && peer=5

out="$tmp/out.log"
"$psgraph" launch --transport tcp --ps 1 --workers 2:3 -- "$psgraph" train \
  --model mlp --data synthetic --epochs 2 --batch 128 --data-shards dispatch --shard-batches 10 \
  --log-every 1 --peer-timeout "$peer" --step-timeout 60 --sync sync --backup-workers 1 \
  > >(python3 -u -c "$stamp" >"$out") 2>&1 &
launch_pid=$!
joined= killed=
join_then_kill() {
  if [ -z "$joined" ] && grep -q '^[0-9.]* \[worker0\] step 20 ' "$out" 2>/dev/null &&
     grep -q '\[worker0\] membership: worker2 .*: not started' "$out"; then
    kill -USR1 "$launch_pid" && joined=1
  fi
  if [ -n "$joined" ] && [ -z "$killed" ] &&
     grep -q '\[worker2\] {"event":"shard_taken"' "$out" 2>/dev/null; then
    pid=$(sed -n 's/^[0-9.]* psgraph launch: worker1 pid \([0-9]*\)$/\1/p' "$out")
    [ -n "$pid" ] && kill -KILL "$pid" && killed=$pid
  fi
}
wait_launch join_then_kill
rc=$launch_rc
sleep 0.5 # the stamper's last lines
done_line=$(grep '\[worker0\] {"event":"done"' "$out" | sed 's/^[0-9.]* \[worker0\] //')
if [ -n "$joined" ] && [ -n "$killed" ] && [ "$rc" = 0 ] &&
   grep -q '\[worker0\] membership: worker1 on 127.0.0.1: lost' "$out" &&
   grep -q "\[worker0\] data shards: worker1's process [0-9a-f]* holds shards and was not heard from" "$out" &&
   grep -q '\[worker0\] membership: worker2 on 127.0.0.1: joined at step [0-9]*$' "$out" &&
   grep -q '\[ps0\] psgraph server: stopped: job done' "$out" &&
   PYTHONPATH="$(dirname "$0")" python3 - "$out" "$done_line" <<'PY'
import collections, json, re, sys
import shard_events
shards, per_epoch, epochs = 47, 468 * 128, 2
w1_steps_since_take = 0  # worker1's steps on its last shard: the batches seen twice


def count_w1_steps(line):
    global w1_steps_since_take
    if re.match(r"[0-9.]+ \[worker1\] step ", line):
        w1_steps_since_take += 1
    if re.match(r"[0-9.]+ \[worker1\] \{\"event\":\"shard_taken\"", line):
        w1_steps_since_take = 0


lost = []  # worker1's shard whose done line died with it (shard_events.read)
taken, done = shard_events.read(sys.argv[1], shards, epochs, per_epoch, count_w1_steps, 1, lost)
# worker1's last shard: in flight when it was killed, handed out again and finished by another
w1 = [s for s, ws in taken.items() if 1 in ws]
inflight = [s for s in w1 if 1 not in done[s]]
again = [s for s, ws in taken.items() if len(ws) > 1]
if lost:  # killed inside a take: its next shard never printed, taken once by another
    assert inflight == [] and again == [], (lost, inflight, again)
    print("worker1 killed inside a take: shard %d done on the ps, its line and the next take's "
          "lost with the process" % lost[0])
    s = lost[0]
else:
    assert len(inflight) == 1, ("worker1's shards not finished by it", inflight)
    s = inflight[0]
    assert taken[s][0] == 1 and len(taken[s]) == 2 and done[s] != [1], (s, taken[s], done[s])
    assert again == [s], ("shards taken twice", again)
assert len(done) == shards * epochs and all(w in (0, 1, 2) for ws in done.values() for w in ws)
d = json.loads(sys.argv[2])
assert d["workers_joined"] == 1 and len(d["workers_lost"]) == 1, d
assert d["workers_lost"][0]["task"] == "worker1", d
print("shard %d (epoch %d) in flight on worker1 (%d of its batches stepped, at most %d "
      "examples seen twice), finished by worker%d; the examples finished an epoch: %d; shards "
      "by worker: %s" % (s, s // shards, w1_steps_since_take, w1_steps_since_take * 128,
      done[s][0], per_epoch, dict(collections.Counter(ws[0] for ws in done.values()))))
PY
then
  ok "2 of 3 workers, worker2 joined, worker1 killed: each of the 2 x 47 shards finished once, $((468 * 128)) examples an epoch, worker1's shard in flight handed out again, the job ended at the data's end (exit 0)"
else
  cp "$out" "${TMPDIR:-/tmp}/test_data_shards.failed.log" 2>/dev/null
  fail "data shards (rc $rc, joined '${joined}', killed '${killed}'): $(grep -v '\] step \|shard_' "$out" | tail -40)"
fi
[ "$fails" = 0 ]
