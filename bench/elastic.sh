#!/usr/bin/env bash
# Issue 31's scenario (docs/distributed.md "Membership"): the mlp on Fashion-MNIST, 1 ps, 3
# epochs, the data's shards handed out by ps0 (--data-shards dispatch): `launch --workers 2:4`
# starts 2 workers, 2 more join at the chief's step 200 (two SIGUSR1), one of them (worker3)
# is SIGKILLed at the chief's step 400; the job runs to the data's end. Then a fixed 3-worker
# run of the same flags (the default --data-shards fixed) for the accuracy. JSON line: per
# phase steps/s (the chief's step lines, each phase from its change to the next), the
# examples finished per epoch (the shard_done lines), the kill -> the loss said and -> the
# chief's first step after it, the chief's last step -> launch's exit, both test accuracies
# and their difference (bar: within 0.01).
#   --strategy 'S'  the strategy, passed as `--sync S` to both runs: 'async', 'ssp
#                   --staleness 2', 'local --local-steps 4' or 'sync --backup-workers 1'
#                   (the default)
#   --hosts         the elastic run on emulated hosts (tools/hosts.sh; root): `launch --ssh`
#                   from a host of its own (ctl), ps0@h1 worker0@h2 worker1@h3 worker2@h4
#                   worker3@h5; worker3's process on h5 SIGKILLed at step 400 and worker2's
#                   link cut for good at the chief's step 600 (as tests/test_membership_hosts.sh
#                   cuts one); the JSON adds the cut -> the loss said and -> the chief's first
#                   step after it. The fixed run stays on this machine (loopback). On the
#                   shared machine: flock /work/notes/netns.lock nice -n 5 bash bench/elastic.sh --hosts
#   nice -n 5 bash bench/elastic.sh [--strategy S] [--hosts]     (a few minutes)
# PSGRAPH=path: another build's binary; ELASTIC_LOGS=dir: both runs' logs copied there;
# ELASTIC_DEADLINE=s: the elastic run stopped after s seconds (default 900).
set -uo pipefail
cd "$(dirname "$0")/.."
strategy='sync --backup-workers 1'
on_hosts=
while [ $# -gt 0 ]; do
  case $1 in
    --strategy) strategy=${2:?--strategy needs a value}; shift 2 ;;
    --hosts) on_hosts=1; shift ;;
    *) echo "bench/elastic.sh: unknown option '$1' (--strategy S, --hosts)" >&2; exit 2 ;;
  esac
done
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
train=(train --model mlp --epochs 3 --batch 32 --log-every 1 --peer-timeout 2 --step-timeout 60
       --sync "${sync_args[@]}")

out=$tmp/elastic.log
"${launch_at[@]}" --ps 1 --workers 2:4 -- "$psgraph" "${train[@]}" \
  --data-shards dispatch > >(python3 -u -c "$stamp" >"$out") 2>&1 &
launch_pid=$!
joined= killed= cut= t_kill=0 t_cut=0
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
base=$tmp/fixed.log
"$psgraph" launch --transport tcp --ps 1 --workers 3 -- "$psgraph" "${train[@]}" \
  > >(python3 -u -c "$stamp" >"$base") 2>&1
rc_base=$?
sleep 0.3
[ -n "${ELASTIC_LOGS:-}" ] && mkdir -p "$ELASTIC_LOGS" && cp "$out" "$base" "$ELASTIC_LOGS/"
python3 - "$out" "$base" "$rc" "$rc_base" "$t_kill" "$t_end" "$t_cut" "$strategy" "${on_hosts:+1}" "$(uptime | sed 's/.*load average: //')" <<'PY'
import collections, json, re, sys
out, base, rc, rc_base, t_kill, t_end, t_cut, strategy, on_hosts, load = sys.argv[1:]
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
print(json.dumps({"bench": "elastic", "strategy": strategy, "hosts": bool(on_hosts), "load_average": load, "rc": int(rc), "rc_fixed": int(rc_base),
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
