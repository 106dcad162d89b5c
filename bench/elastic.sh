#!/usr/bin/env bash
# Issue 31's scenario (docs/distributed.md "Membership"): the mlp on Fashion-MNIST, 1 ps, 3
# epochs, the data's shards handed out by ps0 (--data-shards dispatch): `launch --workers 2:4`
# starts 2 workers, 2 more join at the chief's step 200 (two SIGUSR1), one of them (worker3)
# is SIGKILLed at the chief's step 400; the job runs to the data's end. Then a fixed 3-worker
# run for the accuracy, like with like (--fixed-strategy, --fixed-shards). The pair is run
# --repeats times (default 3), interleaved (elastic 1, fixed 1, elastic 2, ...), repeat i with
# --seed i in both runs. A JSON line a run pair: per phase steps/s (the chief's step lines,
# each phase from its change to the next), the examples finished per epoch (the shard_done
# lines), the kill -> the loss said and -> the chief's first step after it, the chief's last
# step -> launch's exit, both test accuracies and their difference; then a summary line: each
# kind's mean accuracy, its spread (min, max, standard deviation), and the difference of the
# means (elastic - fixed) with its 95 % interval (Student's t over the repeats' paired
# differences: same seed, same pair). The bar: the elastic job within 0.01 of the fixed one
# (docs/distributed.md says how to read it under the fixed run's own spread).
#   --strategy 'S'  the strategy, passed as `--sync S` to both runs: 'async', 'ssp
#                   --staleness 2', 'local --local-steps 4' or 'sync --backup-workers 1'
#                   (the default)
#   --repeats N     run pairs (default 3)
#   --fixed-strategy 'S'  the fixed run's `--sync S`; default: the elastic run's without its
#                   --backup-workers (like with like: from the loss on, the elastic job's 3 live
#                   workers of 4 with b = 1 average 3 of 3 gradients, as `sync` does on 3; with
#                   `--fixed-strategy 'sync --backup-workers 1'` the fixed run averages 2 of 3)
#   --fixed-shards fixed|dispatch  the fixed run's --data-shards (default dispatch, as the
#                   elastic run's)
#   --hosts         the elastic run on emulated hosts (tools/hosts.sh; root): `launch --ssh`
#                   from a host of its own (ctl), ps0@h1 worker0@h2 worker1@h3 worker2@h4
#                   worker3@h5; worker3's process on h5 SIGKILLed at step 400 and worker2's
#                   link cut for good at the chief's step 600 (as tests/test_membership_hosts.sh
#                   cuts one); the JSON adds the cut -> the loss said and -> the chief's first
#                   step after it. The fixed run stays on this machine (loopback). On the
#                   shared machine: flock /work/notes/netns.lock nice -n 5 bash bench/elastic.sh --hosts
#   nice -n 5 bash bench/elastic.sh [--strategy S] [--repeats N] [--fixed-strategy S]
#     [--fixed-shards fixed|dispatch] [--hosts]                                 (minutes a pair)
# PSGRAPH=path: another build's binary; ELASTIC_LOGS=dir: the runs' logs copied there;
# ELASTIC_DEADLINE=s: an elastic run stopped after s seconds (default 900).
set -uo pipefail
cd "$(dirname "$0")/.."
strategy='sync --backup-workers 1'
on_hosts=
repeats=3
fixed_strategy=
fixed_shards=dispatch
while [ $# -gt 0 ]; do
  case $1 in
    --strategy) strategy=${2:?--strategy needs a value}; shift 2 ;;
    --repeats) repeats=${2:?--repeats needs a value}; shift 2 ;;
    --fixed-strategy) fixed_strategy=${2:?--fixed-strategy needs a value}; shift 2 ;;
    --fixed-shards) fixed_shards=${2:?--fixed-shards needs a value}; shift 2 ;;
    --hosts) on_hosts=1; shift ;;
    *) echo "bench/elastic.sh: unknown option '$1' (--strategy S, --repeats N, --fixed-strategy S, --fixed-shards fixed|dispatch, --hosts)" >&2; exit 2 ;;
  esac
done
[ -n "$fixed_strategy" ] || fixed_strategy=$(sed -E 's/ *--backup-workers[ =]+[0-9]+//' <<<"$strategy")
read -r -a fixed_sync_args <<<"$fixed_strategy"
case $fixed_shards in fixed | dispatch) ;; *) echo "bench/elastic.sh: --fixed-shards fixed or dispatch" >&2; exit 2 ;; esac
case $repeats in '' | *[!0-9]* | 0) echo "bench/elastic.sh: --repeats takes a count >= 1" >&2; exit 2 ;; esac
read -r -a sync_args <<<"$strategy"
psgraph=${PSGRAPH:-build/cli/psgraph}
[ -n "${PSGRAPH:-}" ] || bash tools/build.sh build >/dev/null || exit 1
data_dir=/usr/share/datasets/fashion-mnist
[ -f "$data_dir/t10k-images-idx3-ubyte.gz" ] || { echo '{"skipped":"no Fashion-MNIST (dataset-fashion-mnist)"}'; exit 0; }
psgraph=$(realpath "$psgraph")
launch_pid=
if [ -n "$on_hosts" ]; then
  . tools/hosts.sh
  . tests/hosts_sshd.sh
  hosts_init || { echo '{"skipped":"no emulated hosts (root, ip, tc)"}'; exit 0; }
  sshd_setup || { echo '{"skipped":"no sshd"}'; exit 0; }
  hosts_up ctl h1 h2 h3 h4 h5 || { echo "bench/elastic.sh: hosts_up failed" >&2; exit 1; }
  sshd_start h1 h2 h3 h4 h5 || { echo "bench/elastic.sh: sshd_start failed" >&2; exit 1; }
  tmp=$HOSTS_DIR
  HOSTS_AT_EXIT+=('[ -n "$launch_pid" ] && kill -TERM "$launch_pid" 2>/dev/null; wait')
  launch_at=(ip netns exec "$(hosts_ns ctl)" "$psgraph" launch --ssh --ssh-config "$SSH_CONFIG"
             --hosts ps0@h1,worker0@h2,worker1@h3,worker2@h4,worker3@h5)
else
  tmp=$(mktemp -d /tmp/psg_bench_elastic.XXXXXX)
  trap '[ -n "$launch_pid" ] && kill -TERM "$launch_pid" 2>/dev/null; wait; rm -rf "$tmp"' EXIT
  launch_at=("$psgraph" launch --transport tcp)
fi
stamp='import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line))
    sys.stdout.flush()'
train=(train --model mlp --epochs 3 --batch 32 --log-every 1 --peer-timeout 2 --step-timeout 60)

# run_pair REP: the elastic run and the fixed one with --seed REP; their JSON line
run_pair() {
local rep=$1 out base rc rc_base t_end
joined= killed= cut= t_kill=0 t_cut=0
out=$tmp/elastic_$rep.log
"${launch_at[@]}" --ps 1 --workers 2:4 -- "$psgraph" "${train[@]}" --seed "$rep" \
  --sync "${sync_args[@]}" --data-shards dispatch > >(python3 -u -c "$stamp" >"$out") 2>&1 &
launch_pid=$!
# worker3's train process: over ssh the launcher's pid is the ssh client's, so the one on h5
kill_worker3() {
  local pid
  if [ -n "$on_hosts" ]; then
    for pid in $(hosts_pids h5); do
      tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' train ' || continue
      kill -KILL "$pid" && killed=$pid
    done
  else
    pid=$(sed -n 's/^[0-9.]* \[worker3\] started: pid \([0-9]*\),.*/\1/p' "$out")
    [ -n "$pid" ] && kill -KILL "$pid" && killed=$pid
  fi
}
deadline=$((SECONDS + ${ELASTIC_DEADLINE:-900}))
while kill -0 "$launch_pid" 2>/dev/null; do
  if [ $SECONDS -gt $deadline ]; then
    echo "bench/elastic.sh: the elastic run still going after ${ELASTIC_DEADLINE:-900} s: stopped" >&2
    kill -TERM "$launch_pid"
  fi
  if [ -z "$joined" ] && grep -q '^[0-9.]* \[worker0\] step 200 ' "$out" 2>/dev/null; then
    kill -USR1 "$launch_pid"; sleep 0.2; kill -USR1 "$launch_pid"; joined=1
  fi
  if [ -n "$joined" ] && [ -z "$killed" ] && grep -q '^[0-9.]* \[worker0\] step 400 ' "$out"; then
    t_kill=$(date +%s.%N)
    kill_worker3
  fi
  if [ -n "$on_hosts" ] && [ -n "$killed" ] && [ -z "$cut" ] && grep -q '^[0-9.]* \[worker0\] step 600 ' "$out"; then
    t_cut=$(date +%s.%N)
    hosts_cut h4 && cut=1
  fi
  sleep 0.05
done
wait "$launch_pid"
rc=$?
t_end=$(date +%s.%N)
launch_pid=
sleep 0.3
base=$tmp/fixed_$rep.log
"$psgraph" launch --transport tcp --ps 1 --workers 3 -- "$psgraph" "${train[@]}" --seed "$rep" \
  --sync "${fixed_sync_args[@]}" --data-shards "$fixed_shards" > >(python3 -u -c "$stamp" >"$base") 2>&1
rc_base=$?
sleep 0.3
[ -n "${ELASTIC_LOGS:-}" ] && mkdir -p "$ELASTIC_LOGS" && cp "$out" "$base" "$ELASTIC_LOGS/"
python3 - "$out" "$base" "$rc" "$rc_base" "$t_kill" "$t_end" "$t_cut" "$strategy" "${on_hosts:+1}" "$(uptime | sed 's/.*load average: //')" "$rep" "$fixed_strategy --data-shards $fixed_shards" <<'PY'
import collections, json, re, sys
out, base, rc, rc_base, t_kill, t_end, t_cut, strategy, on_hosts, load, rep, fixed_run = sys.argv[1:]
t_kill, t_end, t_cut = float(t_kill), float(t_end), float(t_cut)
def lines(path):
    return [(float(l.split(" ", 1)[0]), l.split(" ", 1)[1]) for l in open(path)
            if re.match(r"[0-9.]+ ", l)]
L = lines(out)
steps = [(t, int(re.match(r"\[worker0\] step (\d+) ", l).group(1))) for t, l in L
         if re.match(r"\[worker0\] step \d+ ", l)]
def first(pat):
    return next((t for t, l in L if re.search(pat, l)), None)
joins = [t for t, l in L if re.search(r"\[worker0\] membership: worker[23] on .*: joined", l)]
lost = first(r"\[worker0\] membership: worker3 on .*: lost")
cut_lost = first(r"\[worker0\] membership: worker2 on .*: lost") if t_cut else None
def rate(t0, t1):
    s = [(t, n) for t, n in steps if t0 <= t <= t1]
    return round((s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0]), 2) if len(s) > 2 else None
start = steps[0][0] if steps else 0
t200 = next((t for t, n in steps if n >= 200), None)
phases = {"2 workers (start -> step 200)": rate(start, t200 or 0),
          "4 workers (the second join -> the kill)": rate(max(joins) if len(joins) == 2 else 0, t_kill),
          "3 workers (the loss said -> the end)": rate(lost or 0, steps[-1][0] if steps else 0)}
if t_cut:
    phases = dict(list(phases.items())[:2])
    phases["3 workers (the loss said -> the cut)"] = rate(lost or 0, t_cut)
    phases["2 workers (the cut's loss said -> the end)"] = rate(cut_lost or 0, steps[-1][0] if steps else 0)
examples = collections.Counter()
w3_batches = 0  # worker3's steps on its last shard before the kill: the batches seen twice
for t, l in L:
    if l.startswith("[worker3] step "):
        w3_batches += 1
    if l.startswith('[worker3] {"event":"shard_taken"'):
        w3_batches = 0
    m = re.match(r"\[worker\d\] (\{\"event\":\"shard_done\".*)", l)
    if m:
        e = json.loads(m.group(1))
        examples[e["epoch"]] += e["examples"]
after_loss = next((t for t, n in steps if lost and t > lost), None)
after_cut = next((t for t, n in steps if cut_lost and t > cut_lost), None)
def done(path):
    for t, l in lines(path):
        if l.startswith("[worker0] {\"event\":\"done\""):
            return json.loads(l.split(" ", 1)[1])
    return {}
d, b = done(out), done(base)
acc, acc_b = d.get("test_accuracy"), b.get("test_accuracy")
cut = {}
if t_cut:
    cut = {"cut_to_loss_said_s": round(cut_lost - t_cut, 3) if cut_lost else None,
           "cut_to_first_step_without_it_s": round(after_cut - t_cut, 3) if after_cut else None}
print(json.dumps({"bench": "elastic", "repeat": int(rep), "seed": int(rep), "strategy": strategy, "fixed_run": fixed_run, "hosts": bool(on_hosts), "load_average": load, "rc": int(rc), "rc_fixed": int(rc_base),
                  "steps_per_sec": phases, "global_steps": d.get("global_steps"),
                  "workers_joined": d.get("workers_joined"), "workers_lost": d.get("workers_lost"),
                  "joined_at_s_after_step_200": [round(j - t200, 3) for j in joins] if t200 else None,
                  "examples_finished_per_epoch": dict(sorted(examples.items())),
                  "examples_per_epoch": 60000 // 32 * 32,
                  "killed_worker_batches_seen_twice": w3_batches,
                  "kill_to_loss_said_s": round(lost - t_kill, 3) if lost else None,
                  "kill_to_first_step_after_loss_s": round(after_loss - t_kill, 3) if after_loss else None,
                  **cut,
                  "last_step_to_end_s": round(t_end - steps[-1][0], 3) if steps else None,
                  "test_accuracy": acc, "test_accuracy_fixed_3": acc_b,
                  "fixed_3_global_steps": b.get("global_steps"),
                  "difference": round(abs(acc - acc_b), 4) if acc is not None and acc_b is not None else None}))
PY
}

results=$tmp/results.jsonl
: >"$results"
for rep in $(seq 1 "$repeats"); do
  run_pair "$rep" >"$tmp/pair.json" # not in a pipe: launch_pid stays this shell's, for the trap
  cat "$tmp/pair.json"
  cat "$tmp/pair.json" >>"$results"
done
python3 - "$results" <<'PY'
import json, math, statistics as st, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
el = [r["test_accuracy"] for r in runs if r.get("test_accuracy") is not None]
fx = [r["test_accuracy_fixed_3"] for r in runs if r.get("test_accuracy_fixed_3") is not None]
pairs = [r["test_accuracy"] - r["test_accuracy_fixed_3"] for r in runs
         if r.get("test_accuracy") is not None and r.get("test_accuracy_fixed_3") is not None]
T975 = [None, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]
def spread(xs):
    if not xs:
        return None
    return {"mean": round(st.mean(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4),
            "sd": round(st.stdev(xs), 4) if len(xs) > 1 else None, "n": len(xs)}
diff = None
if pairs:
    m = st.mean(pairs)
    diff = {"mean": round(m, 4), "n": len(pairs)}
    if len(pairs) > 1:
        t = T975[min(len(pairs) - 1, 10)] if len(pairs) - 1 <= 10 else 1.96
        h = t * st.stdev(pairs) / math.sqrt(len(pairs))
        diff["interval_95"] = [round(m - h, 4), round(m + h, 4)]
        diff["within_bar"] = abs(m) <= 0.01  # the point estimate
        diff["interval_within_bar"] = -0.01 <= m - h and m + h <= 0.01
print(json.dumps({"bench": "elastic_summary", "strategy": runs[0]["strategy"] if runs else None,
                  "fixed_run": runs[0]["fixed_run"] if runs else None,
                  "repeats": len(runs), "rc": [r["rc"] for r in runs],
                  "rc_fixed": [r["rc_fixed"] for r in runs],
                  "accuracy_elastic": spread(el), "accuracy_fixed_3": spread(fx),
                  "difference_elastic_minus_fixed": diff}))
PY
