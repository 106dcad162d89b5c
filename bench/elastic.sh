#!/usr/bin/env bash
# Issue 31's scenario (docs/distributed.md "Membership"): the mlp on Fashion-MNIST, 1 ps, sync
# with 1 backup worker, 3 epochs, the data's shards handed out by ps0 (--data-shards
# dispatch): `launch --workers 2:4` starts 2 workers, 2 more join at the chief's step 200
# (two SIGUSR1), one of them (worker3) is SIGKILLed at the chief's step 400; the job runs to
# the data's end. Then a fixed 3-worker run of the same flags (the default --data-shards
# fixed) for the accuracy. JSON lines: per phase steps/s (the chief's step lines, each phase
# from its change to the next), the examples finished per epoch (the shard_done lines), the
# kill -> the chief's first step after the loss was said, the chief's last step -> launch's
# exit, both test accuracies and their difference (bar: within 0.01).
#   nice -n 5 bash bench/elastic.sh        (a few minutes)
# PSGRAPH=path: another build's binary.
set -uo pipefail
cd "$(dirname "$0")/.."
psgraph=${PSGRAPH:-build/cli/psgraph}
[ -n "${PSGRAPH:-}" ] || bash tools/build.sh build >/dev/null || exit 1
data_dir=/usr/share/datasets/fashion-mnist
[ -f "$data_dir/t10k-images-idx3-ubyte.gz" ] || { echo '{"skipped":"no Fashion-MNIST (dataset-fashion-mnist)"}'; exit 0; }
tmp=$(mktemp -d /tmp/psg_bench_elastic.XXXXXX)
launch_pid=
trap '[ -n "$launch_pid" ] && kill -TERM "$launch_pid" 2>/dev/null; wait; rm -rf "$tmp"' EXIT
stamp='import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line))
    sys.stdout.flush()'
train=(train --model mlp --epochs 3 --batch 32 --log-every 1 --peer-timeout 2 --step-timeout 60
       --sync sync --backup-workers 1)

out=$tmp/elastic.log
"$psgraph" launch --transport tcp --ps 1 --workers 2:4 -- "$psgraph" "${train[@]}" \
  --data-shards dispatch > >(python3 -u -c "$stamp" >"$out") 2>&1 &
launch_pid=$!
joined= killed= t_kill=0
while kill -0 "$launch_pid" 2>/dev/null; do
  if [ -z "$joined" ] && grep -q '^[0-9.]* \[worker0\] step 200 ' "$out"; then
    kill -USR1 "$launch_pid"; sleep 0.2; kill -USR1 "$launch_pid"; joined=1
  fi
  if [ -n "$joined" ] && [ -z "$killed" ] && grep -q '^[0-9.]* \[worker0\] step 400 ' "$out"; then
    pid=$(sed -n 's/^[0-9.]* \[worker3\] started: pid \([0-9]*\),.*/\1/p' "$out")
    [ -n "$pid" ] && t_kill=$(date +%s.%N) && kill -KILL "$pid" && killed=$pid
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
python3 - "$out" "$base" "$rc" "$rc_base" "$t_kill" "$t_end" "$(uptime | sed 's/.*load average: //')" <<'PY'
import collections, json, re, sys
out, base, rc, rc_base, t_kill, t_end, load = sys.argv[1:]
t_kill, t_end = float(t_kill), float(t_end)
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
def rate(t0, t1):
    s = [(t, n) for t, n in steps if t0 <= t <= t1]
    return round((s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0]), 2) if len(s) > 2 else None
start = steps[0][0] if steps else 0
t200 = next((t for t, n in steps if n >= 200), None)
phases = {"2 workers (start -> step 200)": rate(start, t200 or 0),
          "4 workers (the second join -> the kill)": rate(max(joins) if len(joins) == 2 else 0, t_kill),
          "3 workers (the loss said -> the end)": rate(lost or 0, steps[-1][0] if steps else 0)}
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
def done(path):
    for t, l in lines(path):
        if l.startswith("[worker0] {\"event\":\"done\""):
            return json.loads(l.split(" ", 1)[1])
    return {}
d, b = done(out), done(base)
acc, acc_b = d.get("test_accuracy"), b.get("test_accuracy")
print(json.dumps({"bench": "elastic", "load_average": load, "rc": int(rc), "rc_fixed": int(rc_base),
                  "steps_per_sec": phases, "global_steps": d.get("global_steps"),
                  "workers_joined": d.get("workers_joined"), "workers_lost": d.get("workers_lost"),
                  "joined_at_s_after_step_200": [round(j - t200, 3) for j in joins] if t200 else None,
                  "examples_finished_per_epoch": dict(sorted(examples.items())),
                  "examples_per_epoch": 60000 // 32 * 32,
                  "killed_worker_batches_seen_twice": w3_batches,
                  "kill_to_loss_said_s": round(lost - t_kill, 3) if lost else None,
                  "kill_to_first_step_after_loss_s": round(after_loss - t_kill, 3) if after_loss else None,
                  "last_step_to_end_s": round(t_end - steps[-1][0], 3) if steps else None,
                  "test_accuracy": acc, "test_accuracy_fixed_3": acc_b,
                  "fixed_3_global_steps": b.get("global_steps"),
                  "difference": round(abs(acc - acc_b), 4) if acc is not None and acc_b is not None else None}))
PY
