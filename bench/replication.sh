#!/usr/bin/env bash
# The cost of --ps-replicas 2 and the time of a failover (docs/replication.md), on loopback:
# mlp, 2 ps + 2 workers, async and sync, alternating in one run: without replication, without
# replication and without overlapped steps (what replication also turns off), and with it.
# One JSON line per run ({"bench":"replication","build","mode","sync","round","steps_per_sec",
# "cpu_sec"}: cpu_sec the user+sys seconds of every process of the job, on loopback), then one
# summary line per build, strategy and mode with the best, the median, the spread, the ratio
# to the run without replication (of the bests, and the median of the rounds' ratios) and the
# CPU replication adds (medians). --against PSGRAPH: each round runs that binary's job too
# (build "against"; this tree's is "this"), in turn: an A/B in one run. Then, --failover
# runs: 2 ps + 1 worker async, --log-every 1, SIGKILL of ps0 at step 100 under launch
# --restart on-failure, and the time from the kill to the next step the worker completes (each
# output line stamped as it comes), against the peer timeout. The load average is printed beside.
# --link RATE: the same cost rounds (without replication, with it) on 4 emulated hosts (ps0,
# ps1, w0, w1: tools/hosts.sh, root), each host's link capped at RATE (tc tbf, e.g. 1gbit),
# tasks --insecure; no failover runs. Lines {"bench":"replication","link":RATE,...}.
# PSGRAPH in the environment: this build's psgraph (default build/cli/psgraph).
#   bench/replication.sh [--against PSGRAPH] [ROUNDS] [STEPS] [FAILOVERS]   (default 3 400 3)
#   bench/replication.sh [--against PSGRAPH] --link 1gbit [ROUNDS] [STEPS]   (default 2 300)
set -uo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
against=
if [ "${1:-}" = --against ]; then
  against=$(realpath "${2:?--against PSGRAPH: the psgraph of another build}") || exit 2
  [ -x "$against" ] || { echo "replication.sh: --against: $against is not a program" >&2; exit 2; }
  shift 2
fi
link=
if [ "${1:-}" = --link ]; then
  link=${2:?--link RATE (tc units: 1gbit)}
  shift 2
  rounds=${1:-2} steps=${2:-300} failovers=0
else
  rounds=${1:-3} steps=${2:-400} failovers=${3:-3}
fi
psgraph=${PSGRAPH:-build/cli/psgraph}
[ -x "$psgraph" ] || bash tools/build.sh build >/dev/null || exit 1
data=(--data synthetic)
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && data=(--data fashion-mnist)
tmp=$(mktemp -d /tmp/psg_bench_replication.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }

run() { # sync mode round build
  local sync=$1 mode=$2 round=$3 build=$4 extra=() cpu=null
  case $mode in
    none) ;;
    no_overlap) extra=(--overlap off) ;;
    replicas2) extra=(--ps-replicas 2) ;;
  esac
  local timer=()
  [ -x /usr/bin/time ] && timer=(/usr/bin/time -f "%U %S" -o "$tmp/time")
  rm -f "$tmp/time"
  "${timer[@]}" timeout 600 "$psgraph" launch --ps 2 --workers 2 -- "$psgraph" train --model mlp "${data[@]}" \
    --optimizer adam --lr 0.001 --batch 64 --steps "$steps" --log-every 100000 --sync "$sync" \
    --step-timeout 60 "${extra[@]}" >"$tmp/run.log" 2>&1
  local sps
  sps=$(sed -n 's/^\[worker0\] {"event":"done".*"steps_per_sec":\([0-9.]*\).*/\1/p' "$tmp/run.log")
  [ -s "$tmp/time" ] && cpu=$(awk 'END { print $1 + $2 }' "$tmp/time")
  echo "{\"bench\":\"replication\",\"build\":\"$build\",\"sync\":\"$sync\",\"mode\":\"$mode\",\"round\":$round,\"steps_per_sec\":${sps:-null},\"cpu_sec\":$cpu,\"load\":$(load)}"
}

# --link: the tasks on emulated hosts, each link capped
port=25000
run_link() { # sync mode round build
  local sync=$1 mode=$2 build=$4 extra=() wp=() k i
  [ "$mode" = replicas2 ] && extra=(--ps-replicas 2)
  port=$((port + 10))
  echo "{\"cluster\": {\"ps\": [\"ps0:$port\", \"ps1:$((port + 1))\"], \"worker\": [\"w0:$((port + 2))\", \"w1:$((port + 3))\"]}}" >"$tmp/c.json"
  for k in 0 1; do
    hosts_exec ps$k "$psgraph" server --cluster "$tmp/c.json" --job ps --task $k --expect-workers 2 \
      --insecure --idle-timeout 120 "${extra[@]}" >"$tmp/ps$k.log" 2>&1 &
  done
  for i in 0 1; do
    hosts_exec w$i timeout 600 "$psgraph" train --cluster "$tmp/c.json" --job worker --task $i --insecure \
      --model mlp "${data[@]}" --optimizer adam --lr 0.001 --batch 64 --steps "$steps" \
      --log-every 100000 --sync "$sync" --step-timeout 60 "${extra[@]}" >"$tmp/w$i.log" 2>&1 &
    wp+=($!)
  done
  for p in "${wp[@]}"; do wait "$p"; done
  local sps
  sps=$(sed -n 's/^{"event":"done".*"steps_per_sec":\([0-9.]*\).*/\1/p' "$tmp/w0.log")
  echo "{\"bench\":\"replication\",\"link\":\"$link\",\"build\":\"$build\",\"sync\":\"$sync\",\"mode\":\"$mode\",\"round\":$3,\"steps_per_sec\":${sps:-null},\"load\":$(load)}"
  for k in 0 1; do for p in $(hosts_pids ps$k); do kill -TERM "$p" 2>/dev/null; done; done
  for _ in $(seq 1 50); do [ -z "$(hosts_pids ps0)$(hosts_pids ps1)" ] && break; sleep 0.1; done
}
modes=(none no_overlap replicas2)
if [ -n "$link" ]; then
  psgraph=$(realpath "$psgraph")
  . tools/hosts.sh
  hosts_init || exit 77
  HOSTS_AT_EXIT+=('rm -rf "$tmp"') # hosts_init's trap replaces this script's
  hosts_up ps0 ps1 w0 w1 || exit 1
  for h in ps0 ps1 w0 w1; do hosts_cap $h "$link" || exit 1; done
  modes=(none replicas2)
fi
this=$psgraph
builds=(this)
[ -n "$against" ] && builds=(against this)
for ((r = 1; r <= rounds; r++)); do
  for build in "${builds[@]}"; do
    psgraph=$this
    [ "$build" = against ] && psgraph=$against
    for sync in async sync; do
      for mode in "${modes[@]}"; do
        if [ -n "$link" ]; then run_link "$sync" "$mode" "$r" "$build"; else run "$sync" "$mode" "$r" "$build"; fi
      done
    done
  done
done | tee "$tmp/lines.jsonl"
psgraph=$this
python3 - "$tmp/lines.jsonl" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for build in dict.fromkeys(l.get("build", "this") for l in lines):
    for sync in ("async", "sync"):
        best, cpu = {}, {}
        for mode in ("none", "no_overlap", "replicas2"):
            runs = [l for l in lines if l.get("build", "this") == build and l["sync"] == sync and l["mode"] == mode]
            v = [l["steps_per_sec"] for l in runs if l["steps_per_sec"]]
            if not v:
                continue
            best[mode] = max(v)
            out = {"bench": "replication_summary", "build": build, "sync": sync, "mode": mode, "runs": len(v),
                   "best_steps_per_sec": max(v), "median_steps_per_sec": statistics.median(v),
                   "spread": round(max(v) / min(v) - 1, 3)}
            c = [l["cpu_sec"] for l in runs if l.get("cpu_sec")]
            if c:
                cpu[mode] = statistics.median(c)
                out["median_cpu_sec"] = cpu[mode]
            if mode != "none" and "none" in best:
                out["ratio_to_none"] = round(max(v) / best["none"], 3)
                paired = []
                for r in sorted({l["round"] for l in runs}):
                    g = {l["mode"]: l["steps_per_sec"] for l in lines if l.get("build", "this") == build
                         and l["sync"] == sync and l["round"] == r and l["steps_per_sec"]}
                    if "none" in g and mode in g:
                        paired.append(g[mode] / g["none"])
                if paired:
                    out["paired_ratio_median"] = round(statistics.median(paired), 3)
                if mode in cpu and "none" in cpu:
                    out["cpu_added"] = round(cpu[mode] / cpu["none"] - 1, 3)
            print(json.dumps(out))
PY

# failover: the time from SIGKILL of ps0 to the next step the worker completes
for ((f = 1; f <= failovers; f++)); do
  peer=2
  "$psgraph" launch --ps 2 --workers 1 --restart on-failure -- "$psgraph" train --model mlp "${data[@]}" \
    --optimizer adam --lr 0.001 --batch 64 --steps 300 --log-every 1 --peer-timeout $peer \
    --step-timeout 30 --ps-replicas 2 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done >"$tmp/f.log" &
  for _ in $(seq 1 600); do grep -q '\[worker0\] step 100 ' "$tmp/f.log" && break; sleep 0.05; done
  pid=$(sed -n 's/^[0-9.]* psgraph launch: ps0 pid \([0-9]*\)$/\1/p' "$tmp/f.log")
  t_kill=$EPOCHREALTIME
  kill -9 "$pid"
  wait
  python3 - "$tmp/f.log" "$t_kill" "$peer" "$(load)" <<'PY'
import json, re, sys
t_kill, peer, load = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
last_before, after, switch = None, None, None
for line in open(sys.argv[1]):
    t, _, rest = line.partition(" ")
    m = re.match(r"\[worker0\] step (\d+) ", rest)
    if m and float(t) <= t_kill:
        last_before = int(m.group(1))
    if m and float(t) > t_kill and after is None and last_before is not None and int(m.group(1)) > last_before:
        after = (int(m.group(1)), float(t) - t_kill)
    s = re.search(r"failover: ps0 is lost .*switched in ([0-9.]+) s", rest)
    if s:
        switch = float(s.group(1))
print(json.dumps({"bench": "replication_failover", "last_step_before_kill": last_before,
                  "next_step": after[0] if after else None,
                  "kill_to_next_step_sec": round(after[1], 3) if after else None,
                  "switch_sec": switch, "peer_timeout_sec": peer,
                  "within_peer_timeout_plus_1s": bool(after and after[1] <= peer + 1), "load": load}))
PY
done
