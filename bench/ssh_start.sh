#!/usr/bin/env bash
# The cost of starting a cluster over ssh: a 5-task cluster (1 ps + 4 workers) on 5
# emulated hosts (tools/hosts.sh, an sshd on each) started with `psgraph launch --ssh`,
# beside the same cluster started with plain `psgraph launch` on one host (the tasks' own
# start-up), alternating, ROUNDS rounds; the time from the launcher's start until every task
# is up (the ps serving, each worker's first line). JSON lines on stdout: each round, then
# the best of each and the difference (the issue's bar: <= 1 s beyond the tasks' own), beside
# the peer: 5 bare `ssh HOST true` at once, what OpenSSH itself costs on this machine.
# Needs root and openssh-server.   bash bench/ssh_start.sh [build/cli/psgraph] [ROUNDS]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
psgraph=$(realpath "${1:-$root/build/cli/psgraph}")
rounds=${2:-3}
. "$root/tools/hosts.sh"
. "$root/tests/hosts_sshd.sh"
. "$root/bench/start_time.sh"
hosts_init || exit 77
sshd_setup || exit 77
hosts_up ctl h1 h2 h3 h4 h5 || exit 1
sshd_start h1 h2 h3 h4 h5 || exit 1

# seconds for 5 bare `ssh HOST true` at once (the sessions alone)
ssh_alone() {
  hosts_exec ctl bash -c "s=\$(date +%s%N); for h in h1 h2 h3 h4 h5; do ssh -F '$SSH_CONFIG' \$h true & done; wait;
    echo \$(( (\$(date +%s%N) - s) / 1000000 ))" | awk '{printf "%.3f", $1 / 1000}'
}
task=(sh -c 'echo up; exec sleep 60')
best_local= best_ssh= best_bare=
for r in $(seq "$rounds"); do
  local_s=$(hosts_exec ctl bash -c "$(declare -f time_up); time_up 5 \"\$@\"" _ \
    "$psgraph" launch --transport tcp --ps 1 --workers 4 -- "${task[@]}")
  ssh_s=$(hosts_exec ctl bash -c "$(declare -f time_up); time_up 5 \"\$@\"" _ \
    "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" --hosts h1,h2,h3,h4,h5 --ps 1 --workers 4 -- "${task[@]}")
  bare_s=$(ssh_alone)
  echo "{\"bench\":\"ssh_start\",\"round\":$r,\"tasks\":5,\"local_s\":$local_s,\"ssh_s\":$ssh_s,\"bare_ssh5_s\":$bare_s,\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
  best_bare=$(best_of $best_bare $bare_s)
  best_local=$(best_of $best_local $local_s)
  best_ssh=$(best_of $best_ssh $ssh_s)
done
echo "{\"bench\":\"ssh_start_best\",\"rounds\":$rounds,\"local_s\":$best_local,\"ssh_s\":$best_ssh,\"ssh_over_local_s\":$(over "$best_local" "$best_ssh"),\"bare_ssh5_s\":$best_bare,\"bar_s\":1.0}"
