#!/usr/bin/env bash
# Clusters on emulated hosts (tools/hosts.sh), as root; JSON lines on stdout:
# 1. 16 MB push and pull between two hosts over a 1 Gbit/s cap, psgraph's wire
#    (bench_transport --server-netns) beside iperf3 on the same link, in the same run: ratio;
# 2. sync training (mlp, 1 ps, b = 0) of W = 1..4 workers, every link capped at 100 Mbit/s
#    and at 1 Gbit/s, launched with `psgraph launch --ssh`: measured steps/sec beside
#    `psgraph simulate`'s predictions: the overlap model (--trace), calibrated by the trace
#    of an uncapped W = 1 run made in this same run, and the serial model, calibrated by an
#    uncapped W = 1 run (its step time is the compute) and the bytes the ps sent per step
#    (its eth0 counters);
# 3. 3 workers, one of them on a 50 Mbit/s link, with and without a backup worker: steps/sec
#    against the same job uncapped, and the simulator's (--slow-link-gbps 0.05).
# Every line carries load1 (/proc/loadavg) at its measurement: the hosts share the cores.
# Needs root, iperf3 (installed here from Debian when missing), openssh-server.
#   bash bench/hosts.sh [build/cli/psgraph] [STEPS]     (PSG_HOSTS_ONLY=sim: no wire part)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
psgraph=$(realpath "${1:-$root/build/cli/psgraph}")
steps=${2:-60}
transport=$(dirname "$psgraph")/../bench/bench_transport
. "$root/tools/hosts.sh"
. "$root/tests/hosts_sshd.sh"
hosts_init || exit 77
sshd_setup || exit 77
if ! command -v iperf3 >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends iperf3 >/dev/null 2>&1 ||
    echo '{"bench":"hosts","note":"no iperf3 (apt-get install iperf3 failed): the wire ratio is left out"}'
fi
hosts_up ctl p0 w0 w1 w2 w3 || exit 1
sshd_start p0 w0 w1 w2 w3 || exit 1
echo "{\"bench\":\"hosts\",\"note\":\"emulated hosts on one machine: every process shares its cores; numbers are disturbed by whatever else runs there\",\"cores\":$(nproc)}"

# 1. the wire beside iperf3, over a 1 Gbit/s cap on both hosts (PSG_HOSTS_ONLY=sim: skipped)
if [ "${PSG_HOSTS_ONLY:-}" != sim ]; then
hosts_cap p0 1gbit && hosts_cap w0 1gbit
if command -v iperf3 >/dev/null; then
  hosts_exec p0 iperf3 -s -B "$(hosts_ip p0)" -1 >/dev/null 2>&1 &
  sleep 0.5
  iperf=$(hosts_exec w0 iperf3 -c p0 -t 3 -J 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6)')
  hosts_exec p0 iperf3 -s -B "$(hosts_ip p0)" -1 >/dev/null 2>&1 &
  sleep 0.5
  iperf_r=$(hosts_exec w0 iperf3 -c p0 -t 3 -R -J 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6)')
else
  iperf=0 iperf_r=0
fi
hosts_exec w0 "$transport" --sizes 16777216 --rtt-iters 0 --server-netns "/run/netns/$(hosts_ns p0)" \
  --server-ip "$(hosts_ip p0)" | while read -r line; do
  python3 - "$line" "$iperf" "$iperf_r" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
peer = float(sys.argv[2] if d["op"] == "push" else sys.argv[3])
print(json.dumps({"bench": "hosts_wire", "link": "1gbit", "op": d["op"], "bytes": d["bytes"],
                  "psgraph_MBps": d["psgraph_MBps"], "raw_zmq_MBps": d["raw_MBps"],
                  "iperf3_MBps": round(peer, 1), "ratio_to_iperf3": round(d["psgraph_MBps"] / peer, 3) if peer else None}))
PY
done
hosts_uncap p0 && hosts_uncap w0
fi

# a sync run of W workers (1 ps on p0) of $steps steps, extra args after W; prints
# "steps_per_sec ps_tx_bytes"
run() {
  local w=$1 hosts=ps0@p0 i
  shift
  run_steps "$steps" "$w" "$@"
}
run_steps() {
  local steps=$1 w=$2 hosts=ps0@p0 i
  shift 2
  for ((i = 0; i < w; i++)); do hosts="$hosts,worker$i@w$i"; done
  local tx0 tx1 log
  log=$HOSTS_DIR/run.log
  tx0=$(hosts_exec p0 cat /sys/class/net/eth0/statistics/tx_bytes)
  hosts_exec ctl timeout 600 "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" --hosts "$hosts" --ps 1 --workers "$w" \
    -- "$psgraph" train --model mlp --data synthetic --batch 64 --steps "$steps" --log-every 1000 --sync sync \
    --step-timeout 60 "$@" >"$log" 2>&1
  tx1=$(hosts_exec p0 cat /sys/class/net/eth0/statistics/tx_bytes)
  local sps
  sps=$(sed -n 's/^\[worker0\] {"event":"done".*"steps_per_sec":\([0-9.]*\).*/\1/p' "$log")
  echo "${sps:-0} $((tx1 - tx0))"
}
predict() { # W B extra simulate args...; prints steps/sec (the serial model)
  local w=$1 b=$2
  shift 2
  "$psgraph" simulate --tail none --step-ms "$step_ms" --bytes "$bytes" --ps 1 --latency-ms 0.1 --overhead-ms 0 \
    --workers "$w" --backups "$b" --steps 10 "$@" | sed -n 's/.*"steps_per_sec":\([0-9.]*\).*/\1/p'
}
# the overlap model from the calibration trace; tc tbf's burst as tools/hosts.sh sets it
predict_overlap() { # W B extra simulate args...; prints steps/sec
  local w=$1 b=$2
  shift 2
  "$psgraph" simulate --trace "$cal_trace" --tail none --ps 1 --latency-ms 0.05 --overhead-ms 0 \
    --burst-ms 4 --burst-min-bytes 65536 --line-gbps 10 --workers "$w" --backups "$b" --steps 200 "$@" |
    sed -n 's/.*"steps_per_sec":\([0-9.]*\).*/\1/p'
}
load1() { cut -d' ' -f1 /proc/loadavg; }
ratio() { python3 -c "a, b = float('${1:-0}'), float('${2:-0}'); print(round(a / b, 3) if b else 'null')"; }

# calibration: W = 1 uncapped, its step the compute; the bytes the ps sent per step (the
# pull) from runs of 4 x and 8 x STEPS steps, so that start-up and evaluation cancel
# (the first also writes the overlap model's trace: 20 steps from its middle)
cal_trace=$HOSTS_DIR/calibration.json
read -r _ txa <<<"$(run_steps $((4 * steps)) 1 --trace "$cal_trace" --trace-steps $((2 * steps)):$((2 * steps + 20)))"
read -r sps1 txb <<<"$(run_steps $((8 * steps)) 1)"
step_ms=$(python3 -c "print(round(1000 / $sps1, 3) if $sps1 > 0 else 1)")
bytes=$(python3 -c "print(int(($txb - $txa) / (4 * $steps)))")
echo "{\"bench\":\"hosts_calibration\",\"workers\":1,\"link\":\"none\",\"steps_per_sec\":$sps1,\"step_ms\":$step_ms,\"bytes_per_step\":$bytes,\"load1\":$(load1)}"
"$psgraph" simulate --trace "$cal_trace" --workers 1 --backups 0 --steps 10 --line-gbps 10 --ps 1 --tail none \
  --latency-ms 0.05 --overhead-ms 0 | sed -n 's/^{"simulate":"calibration",/{"bench":"hosts_calibration_trace",/p'

# 2. W = 1..4 over 100 Mbit/s and 1 Gbit/s caps on every link
for rate in 100mbit 1gbit; do
  for h in p0 w0 w1 w2 w3; do hosts_cap "$h" "$rate"; done
  gbps=$(python3 -c "print($(tc_rate_bps "$rate") / 1e9)")
  for w in 1 2 3 4; do
    read -r sps _ <<<"$(run "$w")"
    l1=$(load1)
    pred=$(predict_overlap "$w" 0 --link-gbps "$gbps")
    spred=$(predict "$w" 0 --link-gbps "$gbps")
    echo "{\"bench\":\"hosts_scaling\",\"link\":\"$rate\",\"workers\":$w,\"measured_steps_per_sec\":$sps,\"predicted_steps_per_sec\":${pred:-null},\"ratio\":$(ratio "$sps" "$pred"),\"serial_predicted_steps_per_sec\":${spred:-null},\"serial_ratio\":$(ratio "$sps" "$spred"),\"load1\":$l1}"
  done
  for h in p0 w0 w1 w2 w3; do hosts_uncap "$h"; done
done

# 3. one worker (w2) on a 50 Mbit/s link: 3 workers with b = 0 and b = 1 (N = 2)
for b in 0 1; do
  read -r base _ <<<"$(run 3 --backup-workers $b)"
  l1b=$(load1)
  hosts_cap w2 50mbit
  read -r capped _ <<<"$(run 3 --backup-workers $b)"
  l1c=$(load1)
  hosts_uncap w2
  n=$((3 - b))
  pred_base=$(predict_overlap "$n" "$b" --link-gbps 10)
  pred=$(predict_overlap "$n" "$b" --link-gbps 10 --slow-link-gbps 0.05)
  spred=$(predict "$n" "$b" --link-gbps 10 --slow-link-gbps 0.05)
  echo "{\"bench\":\"hosts_slow_link\",\"workers\":3,\"backup_workers\":$b,\"slow_link\":\"50mbit\",\"uncapped_steps_per_sec\":$base,\"capped_steps_per_sec\":$capped,\"capped_over_uncapped\":$(ratio "$capped" "$base"),\"predicted_capped_over_uncapped\":$(ratio "$pred" "$pred_base"),\"predicted_uncapped_steps_per_sec\":${pred_base:-null},\"uncapped_measured_over_predicted\":$(ratio "$base" "$pred_base"),\"predicted_capped_steps_per_sec\":${pred:-null},\"capped_measured_over_predicted\":$(ratio "$capped" "$pred"),\"serial_predicted_capped_steps_per_sec\":${spred:-null},\"load1_uncapped\":$l1b,\"load1_capped\":$l1c}"
done
