#!/usr/bin/env bash
# A worker that gets SIGTERM leaves the job cleanly (a scaled-in Kubernetes worker Job's pod:
# docs/hosts.md "Scaling in", docs/distributed.md "Membership"): real processes under
# `psgraph launch --workers 3:4` (worker3 never started), sync with 1 backup worker, the data's
# shards handed out by ps0, 6 epochs of 47 shards (the job outlasts the peer timeout, after which
# the chief says worker3 is not started: 2 epochs ran 5 s in CI); worker2 gets SIGTERM once the chief passed
# its step 30 and said worker3 is not started, and worker2 holds a shard. Checked: worker2 ends its step, says it leaves and
# exits 0; the chief says "worker2 ...: left (it got SIGTERM and said so)" (not "lost", never
# after a peer timeout of silence), hands worker2's shard out again; the job goes on and ends
# at the data's end with exit 0; each shard of each epoch finished once, every example
# finished once an epoch; the done line lists worker2 under workers_left, none lost.
set -u
psgraph=$1
asan=${2:-}
. "$(dirname "$0")/membership_lib.sh"
# the peer timeout: under ASan on a loaded machine a live worker's task server once left the
# chief's probes unanswered for 3.1 s (tests/test_data_shards.sh); a leave never waits for it
peer=5

out="$tmp/out.log"
"$psgraph" launch --transport tcp --ps 1 --workers 3:4 -- "$psgraph" train \
  --model mlp --data synthetic --epochs 6 --batch 128 --data-shards dispatch --shard-batches 10 \
  --log-every 1 --peer-timeout "$peer" --step-timeout 120 --sync sync --backup-workers 1 \
  > >(python3 -u -c "$stamp" >"$out") 2>&1 &
launch_pid=$!
termed=
term_worker2() {
  [ -z "$termed" ] || return 0
  grep -q '^[0-9.]* \[worker0\] step 30 ' "$out" 2>/dev/null &&
    grep -q '\[worker0\] membership: worker3 .*: not started' "$out" &&
    grep -q '\[worker2\] {"event":"shard_taken"' "$out" || return 0
  local pid
  pid=$(sed -n 's/^[0-9.]* psgraph launch: worker2 pid \([0-9]*\)$/\1/p' "$out")
  [ -n "$pid" ] && kill -TERM "$pid" && termed=$pid && date +%s.%N >"$tmp/termed_at"
}
wait_launch term_worker2
sleep 0.5 # the stamper's last lines
done_line=$(grep '\[worker0\] {"event":"done"' "$out" | sed 's/^[0-9.]* \[worker0\] //')
if [ -n "$termed" ] && [ "$launch_rc" = 0 ] &&
   grep -q '\[worker2\] psgraph train: /job:worker/task:2: SIGTERM: leaves the job after its step [0-9]* (the chief was told)$' "$out" &&
   grep -q '\[worker2\] exited with code 0' "$out" &&
   grep -q '\[worker0\] membership: worker2 on 127.0.0.1: left (it got SIGTERM and said so) at step [0-9]*$' "$out" &&
   ! grep -q '\[worker0\] membership: worker2 on 127.0.0.1: lost' "$out" &&
   grep -q "\[worker0\] data shards: worker2's process [0-9a-f]* left the job holding shards: they are handed out again" "$out" &&
   grep -q '\[ps0\] psgraph server: stopped: job done' "$out" &&
   PYTHONPATH="$(dirname "$0")" python3 - "$out" "$done_line" "$(cat "$tmp/termed_at")" <<'PY'
import collections, json, re, sys
import shard_events
shards, per_epoch, epochs = 47, 468 * 128, 6
taken, done = shard_events.read(sys.argv[1], shards, epochs, per_epoch)
# worker2's last shard: in flight when it left, handed out again and finished by another
w2 = [s for s, ws in taken.items() if 2 in ws]
inflight = [s for s in w2 if 2 not in done[s]]
assert len(inflight) == 1, ("worker2's shards not finished by it", inflight)
s = inflight[0]
assert taken[s][0] == 2 and len(taken[s]) == 2 and done[s] != [2], (s, taken[s], done[s])
again = [x for x, ws in taken.items() if len(ws) > 1]
assert again == [s], ("shards taken twice", again)
d = json.loads(sys.argv[2])
assert d["workers_lost"] == [], d
assert [w["task"] for w in d["workers_left"]] == ["worker2"], d
t_term = float(sys.argv[3])
said = [float(l.split(" ", 1)[0]) for l in open(sys.argv[1])
        if re.match(r"[0-9.]+ \[worker0\] membership: worker2 on .*: left", l)]
print("SIGTERM -> the chief said worker2 left: %.2f s (printed, not asserted); shard %d (epoch "
      "%d) in flight on worker2, finished by worker%d; the examples finished an epoch: %d; "
      "shards by worker: %s" % (said[0] - t_term, s, s // shards, done[s][0], per_epoch,
      dict(collections.Counter(ws[0] for ws in done.values()))))
PY
then
  ok "3 of 4 workers, worker2 SIGTERMed: it left after its step (exit 0), the chief said so, its shard handed out again, each of the 6 x 47 shards finished once, $((468 * 128)) examples an epoch, the job ended at the data's end (exit 0)"
else
  cp "$out" "${TMPDIR:-/tmp}/test_membership_leave.failed.log" 2>/dev/null
  fail "leave on SIGTERM (rc $launch_rc, termed '${termed}'): $(grep -v '\] step \|shard_' "$out" | tail -40)"
fi
[ "$fails" = 0 ]
