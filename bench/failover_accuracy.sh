#!/usr/bin/env bash
# Issue 30's last number: test_hosts_launch's restore cases, repeated, with hot failover on.
# On emulated hosts (tools/hosts.sh) over ssh, as tests/test_hosts_launch.sh runs them: 2 ps +
# 2 workers on h1..h4, the mlp on Fashion-MNIST (Adam 0.001, batch 64), under
# `launch --restart on-failure`, one of two faults a run, alternating:
#   cut:  ps0's link cut for 8 s at worker0's step 200 (800 steps)
#   kill: SIGKILL of ps1 on h2 at worker0's step 200 (1000 steps)
# With `--ps-replicas 2` the workers fail over to the shard's backup and nothing is read from a
# checkpoint; without it (PSG_FAILOVER_WITHOUT=1 adds those runs, alternating) the shard is
# restored from the last checkpoint and rolls back up to one checkpoint interval (50 steps).
# One JSON line a run (exit code, test accuracy, failover or restore seen, below the bar),
# then one summary line a mode. The bar is the single-host one, 0.84 (test_hosts_launch's
# restore cases use 0.82 because of that roll-back).
# usage: bench/failover_accuracy.sh [RUNS, default 20]   (needs root, sshd, Fashion-MNIST)
set -u
cd "$(dirname "$0")/.."
runs=${1:-20}
bar=0.84
bash tools/build.sh build || exit 1
psgraph=$PWD/build/cli/psgraph
root=$PWD
. "$root/tools/hosts.sh"
. "$root/tests/hosts_sshd.sh"
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "bench/failover_accuracy.sh: no Fashion-MNIST (dataset-fashion-mnist)" >&2; exit 1; }
hosts_init || exit 1
sshd_setup || exit 1
hosts_up ctl h1 h2 h3 h4 || exit 1
sshd_start h1 h2 h3 h4 || exit 1
tmp=$HOSTS_DIR
printf 'ps0@h1\nps1@h2\nworker0@h3\nworker1@h4\n' >"$tmp/hosts"
bg=
HOSTS_AT_EXIT+=('[ -n "$bg" ] && kill -TERM "$bg" 2>/dev/null; wait')
train=("$psgraph" train --model mlp --optimizer adam --lr 0.001 --batch 64 --log-every 200 --peer-timeout 2
       --checkpoint-every 50)
modes=(replicas)
[ "${PSG_FAILOVER_WITHOUT:-0}" = 1 ] && modes+=(without)

one() { # one MODE FAULT I: a run, its JSON line
  local mode=$1 fault=$2 i=$3 log=$tmp/$1.$2.$3.log steps=800 extra=()
  [ "$fault" = kill ] && steps=1000 && extra=(--step-timeout 3)
  [ "$fault" = cut ] && extra=(--step-timeout 20)
  [ "$mode" = replicas ] && extra+=(--ps-replicas 2)
  local t0=$EPOCHREALTIME
  ip netns exec "$(hosts_ns ctl)" "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG" --hosts-file "$tmp/hosts" \
    --ps 2 --workers 2 --restart on-failure -- "${train[@]}" --steps $steps --logdir "$tmp/$mode.$fault.$i" \
    "${extra[@]}" >"$log" 2>&1 &
  bg=$!
  for _ in $(seq 2400); do grep -qs '^\[worker0\] step 200 ' "$log" && break; kill -0 $bg 2>/dev/null || break; sleep 0.05; done
  if [ "$fault" = cut ]; then
    hosts_cut h1
    sleep 8
    hosts_heal h1
  else
    local pid
    pid=$(sed -n 's/^\[ps1\] remote pid \([0-9]*\)$/\1/p' "$log" | head -1)
    [ -n "$pid" ] && kill -KILL "$pid"
  fi
  timeout 300 tail --pid="$bg" -f /dev/null
  wait $bg
  local rc=$?
  bg=
  MODE=$mode FAULT=$fault RUN=$i RC=$rc BAR=$bar WALL=$(python3 -c "print(round($EPOCHREALTIME - $t0, 1))") \
    python3 - "$log" <<'PY'
import json, os, re, sys
text = open(sys.argv[1], errors="replace").read()
m = re.search(r'^\[worker0\] \{"event":"done".*"test_accuracy":([0-9.]+)', text, re.M)
acc = float(m.group(1)) if m else None
g = re.search(r'^\[worker0\] \{"event":"done".*"global_steps":([0-9]+)', text, re.M)
print(json.dumps({"bench": "failover_accuracy", "mode": os.environ["MODE"], "fault": os.environ["FAULT"],
                  "run": int(os.environ["RUN"]), "exit": int(os.environ["RC"]), "test_accuracy": acc,
                  "global_steps": int(g.group(1)) if g else None,
                  "failover": bool(re.search(r"failover: ps[01] is lost .*no checkpoint read", text)),
                  "restored": "restored its shard" in text,
                  "below_bar": acc is None or acc < float(os.environ["BAR"]),
                  "wall_sec": float(os.environ["WALL"])}), flush=True)
PY
}

: >"$tmp/lines"
for i in $(seq "$runs"); do
  fault=$([ $((i % 2)) = 1 ] && echo cut || echo kill)
  for mode in "${modes[@]}"; do one "$mode" "$fault" "$i" | tee -a "$tmp/lines"; done
done
python3 - "$tmp/lines" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for mode in sorted({l["mode"] for l in lines}):
    ls = [l for l in lines if l["mode"] == mode]
    acc = [l["test_accuracy"] for l in ls if l["test_accuracy"] is not None]
    print(json.dumps({"bench": "failover_accuracy_summary", "mode": mode, "runs": len(ls),
                      "below_bar": sum(l["below_bar"] for l in ls), "bar": 0.84,
                      "failed_runs": sum(l["exit"] != 0 for l in ls),
                      "failovers": sum(l["failover"] for l in ls), "restores": sum(l["restored"] for l in ls),
                      "accuracy_min": min(acc) if acc else None, "accuracy_max": max(acc) if acc else None,
                      "accuracy_mean": round(statistics.mean(acc), 4) if acc else None}))
PY
