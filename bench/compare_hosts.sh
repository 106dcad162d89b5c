#!/usr/bin/env bash
# `psgraph compare` on emulated hosts (tools/hosts.sh, an sshd on each) with capped links:
# the ps on host p0, worker i on host wi, each worker's link capped at RATE (tc's units;
# "none": uncapped), the runs started by `psgraph launch --ssh` from a host of its own.
# Every other argument goes to compare (--strategy ..., --workers W, --target A, -- ...).
# Prints compare's JSON lines (each with its "launch_args") and one line naming the links.
# Needs root and openssh-server; skips (77) where namespaces cannot be made.
#   bash bench/compare_hosts.sh [build/cli/psgraph] RATE [compare options...]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
psgraph=$(realpath "${1:-$root/build/cli/psgraph}")
rate=${2:-100mbit}
shift 2 || true
workers=4
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[i]}" = --workers ] && workers=${args[i + 1]}; done
. "$root/tools/hosts.sh"
. "$root/tests/hosts_sshd.sh"
hosts_init || exit 77
sshd_setup || exit 77
hosts=(p0)
for ((i = 0; i < workers; i++)); do hosts+=("w$i"); done
hosts_up ctl "${hosts[@]}" || exit 1
sshd_start "${hosts[@]}" || exit 1
placement=$HOSTS_DIR/placement
echo "ps0@p0" >"$placement"
for ((i = 0; i < workers; i++)); do
  echo "worker$i@w$i" >>"$placement"
  if [ "$rate" != none ]; then hosts_cap "w$i" "$rate" || exit 1; fi
done
echo "{\"bench\":\"compare_hosts\",\"ps_host\":\"p0\",\"workers\":$workers,\"worker_link\":\"$rate\",\"note\":\"emulated hosts share this machine's $(nproc) cores\"}"
outdir=$HOSTS_DIR/compare
hosts_exec ctl "$psgraph" compare --outdir "$outdir" \
  --launch-arg --ssh --launch-arg --ssh-config --launch-arg "$SSH_CONFIG" \
  --launch-arg --hosts-file --launch-arg "$placement" "${args[@]}"
rc=$?
[ -f "$outdir/compare.png" ] && cp "$outdir/compare.png" "compare_hosts_$rate.png" &&
  cp "$outdir/compare.csv" "compare_hosts_$rate.csv" &&
  echo "{\"bench\":\"compare_hosts\",\"png\":\"compare_hosts_$rate.png\",\"csv\":\"compare_hosts_$rate.csv\"}"
exit $rc
