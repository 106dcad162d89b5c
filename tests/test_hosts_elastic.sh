#!/usr/bin/env bash
# `psgraph launch --ssh --workers MIN:MAX` over emulated hosts (tools/hosts.sh), an OpenSSH
# server on each (tests/hosts_sshd.sh): 1 ps + 3 workers placed ps0@h1, worker0@h2,
# worker1@h3, worker2@h3, of which 2 start; the chief goes on without worker2 (not started);
# a SIGUSR1 to the launcher after the chief's step 20 starts worker2 on h3 over ssh with
# --join: it joins (said once by the chief, with its host), trains, the data's shards handed
# out by ps0 (--data-shards dispatch) and the job ends at the data's end with exit code 0,
# every shard finished once. The launcher runs on a host of its own (ctl). Skips (77) where
# namespaces or sshd are missing.
set -u
psgraph=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/hosts.sh"
. "$root/tests/hosts_sshd.sh"
hosts_init || exit 77
sshd_setup || exit 77
hosts_up ctl h1 h2 h3 || { echo "FAIL: hosts_up"; exit 1; }
sshd_start h1 h2 h3 || { echo "FAIL: sshd_start"; exit 1; }
tmp=$HOSTS_DIR
. "$root/tests/wait_launch.sh"
launch_pid=
HOSTS_AT_EXIT+=('[ -n "$launch_pid" ] && kill -TERM "$launch_pid" 2>/dev/null; wait')
log=$tmp/elastic.log
ip netns exec "$(hosts_ns ctl)" "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" \
  --hosts ps0@h1,worker0@h2,worker1@h3,worker2@h3 --ps 1 --workers 2:3 -- "$psgraph" train \
  --model mlp --data synthetic --epochs 4 --batch 128 --data-shards dispatch --shard-batches 12 \
  --log-every 1 --peer-timeout 2 --step-timeout 60 --sync async >"$log" 2>&1 &
launch_pid=$!
joined=
join_worker2() {
  if [ -z "$joined" ] && grep -q '^\[worker0\] step 20 ' "$log" &&
     grep -q '^\[worker0\] membership: worker2 on h3: not started' "$log"; then
    kill -USR1 "$launch_pid" && joined=1
  fi
}
wait_launch join_worker2
rc=$launch_rc
if [ -n "$joined" ] && [ $rc = 0 ] &&
   grep -q '^\[worker2\] started: pid [0-9]*, joining the running job (SIGUSR1)' "$log" &&
   grep -q '^\[worker2\] psgraph train: /job:worker/task:2 joins the running job at global step' "$log" &&
   [ "$(grep -c '^\[worker0\] membership: worker2 on h3: joined at step [0-9]*$' "$log")" = 1 ] &&
   grep -q '^\[worker2\] {"event":"shard_done"' "$log" &&
   python3 - "$log" <<'PY'
import collections, json, re, sys
done, by = collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r"\[worker\d\] (\{\"event\":\"shard_done\".*)", line)
    if m:
        e = json.loads(m.group(1))
        done[e["shard"]] += 1
        by["worker%d" % e["worker"]] += 1
assert sorted(done) == list(range(156)) and set(done.values()) == {1}, done  # 4 x 468 / 12
print("shards finished by worker:", dict(sorted(by.items())))
PY
then
  echo "ok   --ssh --workers 2:3: worker2 started on h3 over ssh by a SIGUSR1, joined (said once), took shards; each of the 4 x 39 shards finished once; exit 0"
  exit 0
fi
echo "FAIL: --ssh --workers 2:3 (rc $rc, joined '$joined'): $(grep -v '\] step \|shard_' "$log" | tail -30)"
exit 1
