#!/usr/bin/env bash
# Clusters on emulated hosts (tools/hosts.sh), as root; JSON lines on stdout:
# 1. 16 MB push and pull between two hosts over a 1 Gbit/s cap, psgraph's wire
#    (bench_transport --server-netns) beside iperf3 on the same link, in the same run: ratio;
# 2. sync training (mlp, 1 ps, b = 0) of W = 1..4 workers, every link capped at 100 Mbit/s
#    and at 1 Gbit/s, launched with `psgraph launch --ssh`: measured steps/sec beside
#    `psgraph simulate`'s predictions: the overlap model (--trace), calibrated by the trace
#    of an uncapped W = 1 run made just before the case (PSG_HOSTS_CALIBRATE=once: one for
#    every case, at the start), and the serial model, calibrated by that uncapped W = 1 run
#    (its step time is the compute) and the bytes the ps sent per step (its eth0 counters);
# 3. 3 workers, one of them on a 50 Mbit/s link, with and without a backup worker: steps/sec
#    against the same job uncapped, and the simulator's (--slow-link-gbps 0.05).
# Beside the overlap model, its CPU bounds (--cores: the hosts share this machine's cores;
# the ps's critical path: a worker's CPU, then the ps's for the step, serial), the CPU per step calibrated from the processes' CPU time (/proc/PID/stat, sampled
# every 0.05 s) in the two calibration runs. Each run lasts about PSG_HOSTS_RUN_S seconds
# (default 6; at least STEPS steps) at the predicted pace. Every run's line carries load1,
# its processes' CPU per step, the mean runnable tasks and the cores the machine spent on
# other processes during it: a run where others took more than a quarter of the cores is
# "disturbed": true (flagged, not left out).
# Needs root, iperf3 (installed here from Debian when missing), openssh-server.
#   bash bench/hosts.sh [build/cli/psgraph] [STEPS]     (PSG_HOSTS_ONLY=sim: no wire part)
# e.g. PSG_HOSTS_ONLY=sim nice -n 5 bash bench/hosts.sh build/cli/psgraph 40 (about 7 minutes)
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

cores=$(nproc)
net_inodes=()
for h in ctl p0 w0 w1 w2 w3; do net_inodes+=("$(stat -L -c %i "/run/netns/$(hosts_ns "$h")")"); done
# The CPU time of this run's processes while it runs, those in the emulated hosts' network
# namespaces: psgraph's by role (argv[1]: train, server, launch), the rest (sshd, ssh:
# "ssh_s"); the machine's busy time, the runnable tasks; the machine's speed (a fixed piece
# of work timed in this thread's CPU time each sample, "probe_ms": its mean; this VM's cores
# run the same work up to 1.7x slower from one minute to the next, whatever its own load:
# docs/hosts.md); a JSON object into $2 on SIGTERM. $3...: the network namespaces' inodes.
cat >"$HOSTS_DIR/cpu_watch.py" <<'PY'
import json, os, signal, sys, time
exe, out, nets = os.path.realpath(sys.argv[1]), sys.argv[2], {f"net:[{i}]" for i in sys.argv[3:]}
tck = os.sysconf("SC_CLK_TCK")
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
def busy():  # user + nice + system of every core, s
    with open("/proc/stat") as f:
        return sum(int(x) for x in f.readline().split()[1:4]) / tck
def probe():  # CPU s of a fixed piece of work (~0.4-0.7 ms: ~1 % of a core at one a sample)
    t, x = time.thread_time(), 0
    for i in range(5000):
        x = (x * 31 + i) & 0xFFFFFFFF
    return time.thread_time() - t
def runnable():  # less this process
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0]) - 1
cpu, known, t0, b0, rsum, n, scan, probes = {}, {}, time.monotonic(), busy(), 0, 0, 0.0, []
def sample(pid, role):  # cumulative user + system CPU of pid, s; False when gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read()
    except OSError:
        return False
    v = v[v.rindex(")") + 2:].split()
    cpu[pid] = (role, (int(v[11]) + int(v[12])) / tck)
    return True
while True:  # the known processes every 0.05 s (a process's last 0.05 s is lost), new ones every 0.25 s
    now = time.monotonic()
    if now >= scan:
        scan = now + 0.25
        for pid in os.listdir("/proc"):
            try:
                if not pid.isdigit() or pid in known:
                    continue
                # only the emulated hosts' processes: a psgraph of the same build outside
                # them (another job's) is the machine's load, not this run's
                if os.readlink(f"/proc/{pid}/ns/net") not in nets:
                    continue
                ours = os.readlink(f"/proc/{pid}/exe") == exe
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            known[pid] = (argv[1].decode() if len(argv) > 1 else "?") if ours else "ssh"
    for pid, role in list(known.items()):
        if not sample(pid, role):
            del known[pid]
    rsum, n = rsum + runnable(), n + 1
    probes.append(probe())
    if stop:
        break
    time.sleep(0.05)
wall, me = time.monotonic() - t0, sum(os.times()[:2])
role = {r: round(sum(s for q, s in cpu.values() if q == r), 3) for r in ("train", "server", "launch", "ssh")}
ours = sum(s for _, s in cpu.values())
with open(out, "w") as f:
    json.dump({"wall_s": round(wall, 3), "worker_s": role["train"], "ps_s": role["server"],
               "launch_s": role["launch"], "ssh_s": role["ssh"], "others_cores": round(max(0, busy() - b0 - ours - me) / wall, 3),
               "runnable": round(rsum / max(n, 1), 2), "probe_ms": round(1000 * sum(probes) / len(probes), 4)},
              f, separators=(",", ":"))
PY
# a sync run of STEPS steps of W workers (1 ps on p0), extra args after W; prints
# "steps_per_sec ps_tx_bytes gradients cpu" (gradients: the chief's gradients used and
# dropped a global step, the workers that ran a step, per step; cpu: cpu_watch.py's object)
run_steps() {
  local steps=$1 w=$2 hosts=ps0@p0 i
  shift 2
  for ((i = 0; i < w; i++)); do hosts="$hosts,worker$i@w$i"; done
  local tx0 tx1 log
  log=$HOSTS_DIR/run.log
  tx0=$(hosts_exec p0 cat /sys/class/net/eth0/statistics/tx_bytes)
  python3 "$HOSTS_DIR/cpu_watch.py" "$psgraph" "$HOSTS_DIR/cpu.json" "${net_inodes[@]}" &
  local watch=$!
  hosts_exec ctl timeout 600 "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" --hosts "$hosts" --ps 1 --workers "$w" \
    -- "$psgraph" train --model mlp --data synthetic --batch 64 --steps "$steps" --log-every 1000 --sync sync \
    --step-timeout 60 "$@" >"$log" 2>&1
  kill -TERM "$watch" && wait "$watch"
  tx1=$(hosts_exec p0 cat /sys/class/net/eth0/statistics/tx_bytes)
  local sps grads
  sps=$(sed -n 's/^\[worker0\] {"event":"done".*"steps_per_sec":\([0-9.]*\).*/\1/p' "$log")
  grads=$(sed -n 's/^\[worker0\] \({"event":"done".*\)/\1/p' "$log" | python3 -c '
import json, sys
try:
    d = json.loads(sys.stdin.readline())
    print(round((d["gradients_used"] + d["gradients_dropped"]) / d["global_steps"], 3))
except (ValueError, KeyError, ZeroDivisionError):
    print("null")')
  echo "${sps:-0} $((tx1 - tx0)) ${grads:-null} $(cat "$HOSTS_DIR/cpu.json" 2>/dev/null || echo '{}')"
}
predict() { # W B extra simulate args...; prints steps/sec (the serial model)
  local w=$1 b=$2
  shift 2
  "$psgraph" simulate --tail none --step-ms "$step_ms" --bytes "$bytes" --ps 1 --latency-ms 0.1 --overhead-ms 0 \
    --workers "$w" --backups "$b" --steps 10 "$@" | sed -n 's/.*"steps_per_sec":\([0-9.]*\).*/\1/p'
}
# the overlap model from the calibration trace (tc tbf's burst as tools/hosts.sh sets it),
# alone, with the CPU bounds (the shared cores, the ps's critical path), and alone with the
# links first come, first served (--link-fifo); prints the JSON fields
# "predicted_steps_per_sec" (alone), "cores_predicted_steps_per_sec" (with the bounds),
# "fifo_predicted_steps_per_sec", "cpu_bound_ms", "path_bound_ms", "workers_per_step", "bound"
predict_both() { # W B extra simulate args...
  local w=$1 b=$2
  shift 2
  local args=(--trace "$cal_trace" --tail none --ps 1 --latency-ms 0.05 --overhead-ms 0
    --burst-ms 4 --burst-min-bytes 65536 --line-gbps "$line" --workers "$w" --backups "$b" --steps 200
    --cores "${pcores:-$cores}" --worker-cpu-ms "$wcpu" --ps-cpu-ms "$pcpu" "$@")
  { "$psgraph" simulate "${args[@]}"; "$psgraph" simulate "${args[@]}" --link-fifo | sed 's/^{"simulate":"sync_replicas"/{"simulate":"fifo"/'; } | python3 -c '
import json, sys
d = {}
for l in sys.stdin:
    if l.startswith("{\"simulate\":"):
        j = json.loads(l)
        d[j["simulate"]] = j
s, f = d.get("sync_replicas", {}), d.get("fifo", {})
link, flink = s.get("link_step_ms"), f.get("link_step_ms")
print(json.dumps({"predicted_steps_per_sec": round(1000 / link, 3) if link else None,
                  "cores_predicted_steps_per_sec": s.get("steps_per_sec"),
                  "fifo_predicted_steps_per_sec": round(1000 / flink, 3) if flink else None,
                  "cpu_bound_ms": s.get("cpu_step_ms"), "path_bound_ms": s.get("path_step_ms"),
                  "workers_per_step": s.get("workers_per_step"), "bound": s.get("bound")}))'
}
# a run's measured CPU and load (cpu_watch.py's object $1, STEPS $2, W $3) as JSON fields:
# worker and ps CPU a step (less the calibration's fixed CPU of a run: start-up, evaluation),
# the cores others took, runnable tasks, "disturbed"; the workers that ran a step, per step
# (run_steps' gradients $5: "measured_workers_per_step") and the ps's critical path with
# this run's own CPU a step ("run_path_ms": all workers' CPU over those workers or the
# cores, whichever fewer, then the ps's; "run_path_ratio": the measured step over it)
cpu_fields() { # CPU STEPS W PREDICTIONS (predict_both's) GRADIENTS SPS
  python3 - "$1" "$2" "$3" "${wfix:-0}" "${pfix:-0}" "$cores" "$4" "${5:-null}" "${6:-0}" <<'PY'
import json, sys
c, steps, w = json.loads(sys.argv[1] or "{}"), int(sys.argv[2]), int(sys.argv[3])
wfix, pfix, cores = map(float, sys.argv[4:7])
p = json.loads(sys.argv[7] or "{}")
m, sps = json.loads(sys.argv[8]), float(sys.argv[9] or 0)
ok = "worker_s" in c
wk = (c["worker_s"] / w - wfix) * 1000 / steps if ok else None
ps = (c["ps_s"] - pfix) * 1000 / steps if ok else None
path = w * wk / min(m, cores) + ps if ok and m else None
print(json.dumps({"steps": steps, "measured_workers_per_step": m,
                  "run_path_ms": round(path, 3) if path else None,
                  "run_path_ratio": round(path / (1000 / sps), 3) if path and path > 0 and sps else None,
                  "measured_worker_cpu_ms": round(wk, 3) if ok else None,
                  "measured_ps_cpu_ms": round(ps, 3) if ok else None,
                  "measured_cpu_ms": round(w * wk + ps, 3) if ok else None,
                  "model_cpu_ms": round(p["cpu_bound_ms"] * cores, 3) if p.get("cpu_bound_ms") is not None else None,
                  "others_cores": c.get("others_cores"), "runnable": c.get("runnable"),
                  "disturbed": c.get("others_cores", 0) > 0.25 * cores}))
PY
}
# steps for a run of about $PSG_HOSTS_RUN_S seconds (default 6) at predict_both's pace $1,
# at least STEPS: start-up and evaluation then weigh little in the CPU a step
steps_for() {
  python3 -c 'import json, sys; p = json.loads(sys.argv[1] or "{}"); r = p.get("cores_predicted_steps_per_sec") or 0
print(max(int(sys.argv[2]), min(40 * int(sys.argv[2]), int(r * float(sys.argv[3])))))' "$1" "$steps" "${PSG_HOSTS_RUN_S:-6}"
}
# {"a":1} {"b":2} -> {"a":1,"b":2}
join() { python3 -c 'import json, sys; d = {}; [d.update(json.loads(a)) for a in sys.argv[1:] if a.strip()]; print(json.dumps(d))' "$@"; }
# the shared-cores model again with the cores others left in the run (cpu_watch.py's object
# $1; W B and simulate args after it): "loaded_cores", "loaded_predicted_steps_per_sec" and
# "loaded_ratio" (measured $2 over it). After the fact: it says whether a miss is the load's
loaded() {
  local cpu=$1 sps=$2 left
  shift 2
  left=$(python3 -c 'import json, sys; c = json.loads(sys.argv[1] or "{}"); print(round(max(0.05, float(sys.argv[2]) - c.get("others_cores", 0)), 3))' "$cpu" "$cores")
  pcores=$left predict_both "$@" | python3 -c '
import json, sys
p, m, left = json.loads(sys.stdin.read() or "{}"), float(sys.argv[1] or 0), float(sys.argv[2])
r = p.get("cores_predicted_steps_per_sec")
print(json.dumps({"loaded_cores": left, "loaded_predicted_steps_per_sec": r, "loaded_ratio": round(m / r, 3) if r else None}))' "$sps" "$left"
}
load1() { cut -d' ' -f1 /proc/loadavg; }
ratio() { python3 -c "a, b = float('${1:-0}'), float('${2:-0}'); print(round(a / b, 3) if b else 'null')"; }
# measured $1 over predict_both's predictions $2: "ratio" (the overlap model alone), "cores_ratio"
# (with the CPU bounds: the prediction), "fifo_ratio" (links first come, first served)
ratios() {
  python3 -c '
import json, sys
m, p = float(sys.argv[1] or 0), json.loads(sys.argv[2] or "{}")
r = lambda k: round(m / p[k], 3) if p.get(k) else None
print(json.dumps({"ratio": r("predicted_steps_per_sec"), "cores_ratio": r("cores_predicted_steps_per_sec"),
                  "fifo_ratio": r("fifo_predicted_steps_per_sec")}))' "$@"
}

# calibration: W = 1 uncapped, its step the compute; the bytes the ps sent per step (the
# pull) from runs of 10 x and 20 x STEPS steps, so that start-up and evaluation cancel
# (the first also writes the overlap model's trace: 2 x STEPS steps from its middle, at most 200)
# Every link uncapped when called. Once at the start and again before each case, its line's
# "case" naming it (PSG_HOSTS_CALIBRATE=once: only at the start): this VM runs the same work
# up to 1.5x slower from one minute to the next (docs/hosts.md), so a calibration minutes
# old does not describe the machine a case runs on.
cal_trace=$HOSTS_DIR/calibration.json
trace_n=$((steps < 100 ? 2 * steps : 200)) # steps traced: their medians ride out a burst of load
calibrate_each=$([ "${PSG_HOSTS_CALIBRATE:-each}" = each ] && echo 1)
calibrate() { # [CASE]
  # (the CPU a step of the worker and the ps likewise: the difference of the two runs' CPU
  # time; what is left of the first, its fixed part, is taken off the other runs' CPU)
  read -r _ txa _ cpua <<<"$(run_steps $((10 * steps)) 1 --trace "$cal_trace" --trace-steps $((5 * steps)):$((5 * steps + trace_n)))"
  read -r sps1 txb _ cpub <<<"$(run_steps $((20 * steps)) 1)"
  step_ms=$(python3 -c "print(round(1000 / $sps1, 3) if $sps1 > 0 else 1)")
  bytes=$(python3 -c "print(int(($txb - $txa) / (10 * $steps)))")
  read -r wcpu pcpu wfix pfix <<<"$(python3 - "$cpua" "$cpub" "$steps" <<'PY'
import json, sys
a, b, s = json.loads(sys.argv[1] or "{}"), json.loads(sys.argv[2] or "{}"), int(sys.argv[3])
def per_step(k):  # ms a step, and the fixed part of a run in s
    if k not in a or k not in b:
        return 0, 0
    d = (b[k] - a[k]) / (10 * s)
    d = d if d > 0 else b[k] / (20 * s)
    return d * 1000, max(0, a[k] - 10 * s * d)
(w, wf), (p, pf) = per_step("worker_s"), per_step("ps_s")
print(round(w, 3), round(p, 3), round(wf, 3), round(pf, 3))
PY
  )"
  # the wire between two hosts uncapped, the overlap model's line (under a cap and uncapped):
  # the tasks' CURVE, not the 10 Gbit/s veth, bounds it (~3.5 Gbit/s, docs/hosts.md); each
  # message's encryption then overlaps the previous one's transfer under a cap, as the model
  # has it, instead of sitting in the calibration's overhead
  line=$(hosts_exec w0 "$transport" --sizes 1048576 --rtt-iters 0 --curve --server-netns "/run/netns/$(hosts_ns p0)" \
    --server-ip "$(hosts_ip p0)" 2>/dev/null | python3 -c 'import json, sys
v = [json.loads(l)["psgraph_curve_MBps"] for l in sys.stdin if "psgraph_curve_MBps" in l]
print(round(8 * sum(v) / len(v) / 1000, 3) if v else 10)')
  # the machine's speed while calibrating: the two runs' probes, weighted by their steps
  cal_probe=$(python3 -c 'import json, sys; a, b = (json.loads(x or "{}").get("probe_ms") for x in sys.argv[1:])
print(round((a + 2 * b) / 3, 4) if a and b else 0)' "$cpua" "$cpub")
  echo "{\"bench\":\"hosts_calibration\",\"workers\":1,\"link\":\"none\",\"steps_per_sec\":$sps1,\"step_ms\":$step_ms,\"bytes_per_step\":$bytes,\"worker_cpu_ms\":$wcpu,\"ps_cpu_ms\":$pcpu,\"worker_fixed_cpu_s\":$wfix,\"ps_fixed_cpu_s\":$pfix,\"probe_ms\":$cal_probe,\"line_gbps\":$line,\"cores\":$cores,\"cpu_run_a\":${cpua:-null},\"cpu_run_b\":${cpub:-null},\"disturbed\":$(python3 -c 'import json, sys; print(str(any(json.loads(a or "{}").get("others_cores", 0) > 0.25 * float(sys.argv[1]) for a in sys.argv[2:])).lower())' "$cores" "$cpua" "$cpub"),\"load1\":$(load1)${1:+,\"case\":\"$1\"}}"
  "$psgraph" simulate --trace "$cal_trace" --workers 1 --backups 0 --steps 10 --line-gbps "$line" --ps 1 --tail none \
    --latency-ms 0.05 --overhead-ms 0 --cores "$cores" --worker-cpu-ms "$wcpu" --ps-cpu-ms "$pcpu" |
    sed -n 's/^{"simulate":"calibration",/{"bench":"hosts_calibration_trace",/p'
}
[ -n "$calibrate_each" ] || calibrate

# 2. W = 1..4 over 100 Mbit/s and 1 Gbit/s caps on every link; the ps's TCP flows keep a
# window each in its link's queue (BBR's congestion window, `ss -tin` on p0 during such runs:
# medians of 243-252 KB at 100 Mbit/s and 452-495 KB at 1 Gbit/s; docs/hosts.md)
for rate in 100mbit 1gbit; do
  for h in p0 w0 w1 w2 w3; do hosts_cap "$h" "$rate"; done
  gbps=$(python3 -c "print($(tc_rate_bps "$rate") / 1e9)")
  window=$([ "$rate" = 1gbit ] && echo 480000 || echo 250000)
  for w in 1 2 3 4; do
    if [ -n "$calibrate_each" ]; then
      for h in p0 w0 w1 w2 w3; do hosts_uncap "$h"; done
      calibrate "$rate, W = $w"
      for h in p0 w0 w1 w2 w3; do hosts_cap "$h" "$rate"; done
    fi
    both=$(predict_both "$w" 0 --link-gbps "$gbps" --link-window-bytes "$window")
    n_steps=$(steps_for "$both")
    read -r sps _ grads cpu <<<"$(run_steps "$n_steps" "$w")"
    l1=$(load1)
    spred=$(predict "$w" 0 --link-gbps "$gbps")
    join "{\"bench\":\"hosts_scaling\",\"link\":\"$rate\",\"workers\":$w,\"link_window_bytes\":$window,\"measured_steps_per_sec\":$sps}" "$both" \
      "$(ratios "$sps" "$both")" "{\"serial_predicted_steps_per_sec\":${spred:-null},\"serial_ratio\":$(ratio "$sps" "$spred"),\"load1\":$l1}" \
      "$(cpu_fields "$cpu" "$n_steps" "$w" "$both" "$grads" "$sps")" "$(loaded "$cpu" "$sps" "$w" 0 --link-gbps "$gbps" --link-window-bytes "$window")"
  done
  for h in p0 w0 w1 w2 w3; do hosts_uncap "$h"; done
done

# 3. one worker (w2) on a 50 Mbit/s link: 3 workers with b = 0 and b = 1 (N = 2)
# (each of the four runs a line of its own: "link" uncapped or 50mbit on w2)
for b in 0 1; do
  n=$((3 - b))
  for slow in none 50mbit; do
    [ -n "$calibrate_each" ] && calibrate "w2 $slow, b = $b"
    args=(--link-gbps "$line")
    if [ "$slow" = 50mbit ]; then
      hosts_cap w2 50mbit
      args+=(--slow-link-gbps 0.05)
    fi
    both=$(predict_both "$n" "$b" "${args[@]}")
    n_steps=$(steps_for "$both")
    read -r sps _ grads cpu <<<"$(run_steps "$n_steps" 3 --backup-workers $b)"
    l1=$(load1)
    [ "$slow" = 50mbit ] && hosts_uncap w2
    spred=$(predict "$n" "$b" "${args[@]}")
    join "{\"bench\":\"hosts_slow_link\",\"workers\":3,\"backup_workers\":$b,\"slow_link\":\"$slow\",\"measured_steps_per_sec\":$sps}" \
      "$both" "$(ratios "$sps" "$both")" "{\"serial_predicted_steps_per_sec\":${spred:-null},\"serial_ratio\":$(ratio "$sps" "$spred"),\"load1\":$l1}" \
      "$(cpu_fields "$cpu" "$n_steps" 3 "$both" "$grads" "$sps")" "$(loaded "$cpu" "$sps" "$n" "$b" "${args[@]}")"
  done
done
