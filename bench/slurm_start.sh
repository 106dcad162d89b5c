#!/usr/bin/env bash
# The cost of starting a cluster under Slurm: a 3-task cluster (1 ps + 2 workers) on 3
# emulated hosts, each with a real slurmd (tests/hosts_slurm.sh), started with
# `psgraph launch --slurm` inside an allocation (salloc), beside the same cluster started
# with plain `psgraph launch` on one host (the tasks' own start-up), alternating, ROUNDS
# rounds; the time from the launcher's start until every task is up (the ps serving, each
# worker's first line). JSON lines on stdout: each round, then the best of each and the
# difference (the issue's bar: <= 1 s beyond the tasks' own), beside the peer: 3 bare
# `srun --overlap -N1 -n1 -w HOST true` at once in the same allocation, what Slurm itself
# costs on this machine. Needs root, slurm-wlm and munge.
#   bash bench/slurm_start.sh [build/cli/psgraph] [ROUNDS]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
psgraph=$(realpath "${1:-$root/build/cli/psgraph}")
rounds=${2:-3}
. "$root/tools/hosts.sh"
. "$root/tests/hosts_slurm.sh"
. "$root/bench/start_time.sh"
hosts_init || exit 77
slurm_setup || exit 77
hosts_up ctl h1 h2 h3 || exit 1
slurm_start ctl h1 h2 h3 || exit 1

# seconds for 3 bare job steps at once, one a node (Slurm's own cost)
srun_alone() {
  s=$(date +%s%N)
  for h in h1 h2 h3; do srun --overlap -N1 -n1 -w "$h" true & done
  wait
  awk -v ns=$(($(date +%s%N) - s)) 'BEGIN {printf "%.3f", ns / 1e9}'
}
in_alloc() { # the command $@ inside a fresh allocation of the 3 nodes, one task each
  hosts_exec ctl salloc --quiet --nodes 3 --ntasks-per-node 1 bash -c "$(declare -f time_up srun_alone); \"\$@\"" _ "$@"
}
task=(sh -c 'echo up; exec sleep 60')
best_local= best_slurm= best_bare=
for r in $(seq "$rounds"); do
  local_s=$(hosts_exec ctl bash -c "$(declare -f time_up); time_up 3 \"\$@\"" _ \
    "$psgraph" launch --transport tcp --ps 1 --workers 2 -- "${task[@]}")
  slurm_s=$(in_alloc time_up 3 "$psgraph" launch --slurm --ps 1 --workers 2 -- "${task[@]}")
  bare_s=$(in_alloc srun_alone)
  echo "{\"bench\":\"slurm_start\",\"round\":$r,\"tasks\":3,\"local_s\":$local_s,\"slurm_s\":$slurm_s,\"bare_srun3_s\":$bare_s,\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
  best_bare=$(best_of $best_bare $bare_s)
  best_local=$(best_of $best_local $local_s)
  best_slurm=$(best_of $best_slurm $slurm_s)
done
echo "{\"bench\":\"slurm_start_best\",\"rounds\":$rounds,\"local_s\":$best_local,\"slurm_s\":$best_slurm,\"slurm_over_local_s\":$(over "$best_local" "$best_slurm"),\"bare_srun3_s\":$best_bare,\"bar_s\":1.0}"
