#!/usr/bin/env bash
# `psgraph launch --slurm` under a real Slurm (tests/hosts_slurm.sh): Debian's slurmctld on an
# emulated host, a slurmd on each of 3 more (network namespaces, tools/hosts.sh), munged.
# In sbatch jobs: docs/hosts.md's sbatch script (1 ps + 2 workers over 3 nodes, the mlp on
# Fashion-MNIST, sync) trains to the accuracy of the same cluster launched on one host (+-0.01), the tasks placed as
# SlurmClusterResolver places them (nodes sorted, ps first, one port a slot: 2 tasks a node
# on 23000 and 23001), each task its share of the node's GPUs (CUDA_VISIBLE_DEVICES), served
# with CURVE from the keys sent over srun; refused with the reason: outside an allocation,
# more tasks than the allocation has, under srun; scancel of a training job leaves no process
# on any node. Skips (77) where namespaces, slurm-wlm or munge are missing.
set -u
psgraph=$(realpath "$1")
asan=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/hosts.sh"
. "$root/tests/hosts_slurm.sh"
hosts_init || exit 77
slurm_setup || exit 77
hosts_up ctl h1 h2 h3 || { echo "FAIL: hosts_up"; exit 1; }
slurm_start ctl h1 h2 h3 || { echo "FAIL: slurm_start"; exit 1; }
tmp=$HOSTS_DIR
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# sbatch a job (script $1, its output $tmp/$2.out) with sbatch's options $3...; prints its id
submit() {
  local script=$1 name=$2
  shift 2
  hosts_exec ctl sbatch --parsable --chdir "$tmp" --job-name "$name" -o "$tmp/$name.out" "$@" "$script"
}
job_script() { # file, then the script's lines
  local f=$1
  shift
  printf '#!/bin/sh\n' >"$f"
  printf '%s\n' "$@" >>"$f"
}
# no process on h1..h3 but their slurmd (waits up to 10 s)
left_on_nodes() {
  local n
  for _ in $(seq 100); do
    n=$(for h in h1 h2 h3; do slurm_task_pids "$h"; done | wc -l)
    [ "$n" = 0 ] && break
    sleep 0.1
  done
  echo "$n"
}
accuracy() { sed -n 's/^\[worker0\] {"event":"done".*"test_accuracy":\([0-9.]*\).*/\1/p' "$1"; }
have_data=0
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "$asan" ] && have_data=1

# 1. refusals: outside an allocation, more tasks than it has, under srun
out=$(env -u SLURM_JOB_ID "$psgraph" launch --slurm --ps 1 --workers 2 -- true 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "runs inside a Slurm allocation (an sbatch script, or salloc's shell): no SLURM_JOB_ID here" <<<"$out"; then
  ok "outside an allocation: $out"
else
  fail "outside an allocation (rc $rc): $out"
fi
job_script "$tmp/refuse.sh" "'$psgraph' launch --slurm --ps 2 --workers 2 -- true; echo \"rc \$?\"" \
  "srun --overlap --ntasks 2 '$psgraph' launch --slurm --ps 1 --workers 1 -- true; echo \"rc \$?\""
id=$(submit "$tmp/refuse.sh" refuse --nodes 3 --ntasks-per-node 1)
state=$(slurm_wait_job "$id" 60)
out=$(cat "$tmp/refuse.out")
if [ "$state" = COMPLETED ] &&
   grep -q "psgraph launch: --slurm in job $id: --ps 2 --workers 2 are 4 tasks, the allocation runs 3 (SLURM_NTASKS 3, SLURM_TASKS_PER_NODE 1(x3) on h\[1-3\]): ask for --ntasks 4" <<<"$out" &&
   [ "$(grep -c "starts the tasks itself (a job step each): run it once, in the batch script or salloc's shell, not under srun" <<<"$out")" = 2 ] &&
   [ "$(grep -c '^rc 2$' <<<"$out")" = 2 ]; then
  ok "more tasks than the allocation, and under srun: $(grep -- '--ps 2' <<<"$out")"
else
  fail "refusals in a job ($state): $out"
fi

# 2. two tasks a node (2 nodes x 2): placement as SlurmClusterResolver, a GPU share each
#    (CUDA_VISIBLE_DEVICES 0,1,2,3 on each node, as Slurm sets it for a job with 4 GPUs)
job_script "$tmp/place.sh" "export CUDA_VISIBLE_DEVICES=0,1,2,3" \
  "exec '$psgraph' launch --slurm --ps 1 --workers 3 -- sh -c 'echo \"visible \$CUDA_VISIBLE_DEVICES on \$(hostname)\"; exec \"\$@\"' sh \\" \
  "  '$psgraph' train --model mlp --data synthetic --steps 20 --log-every 10 --step-timeout 20"
id=$(submit "$tmp/place.sh" place --nodes 2 --ntasks-per-node 2)
state=$(slurm_wait_job "$id" 120)
out=$(cat "$tmp/place.out")
want='cluster {"ps": ["h1:23000"], "worker": ["h1:23001", "h2:23000", "h2:23001"]}'
if [ "$state" = COMPLETED ] && grep -qF "$want" <<<"$out" &&
   grep -q '^\[worker0\] visible 2,3 on h1$' <<<"$out" && grep -q '^\[worker1\] visible 0,1 on h2$' <<<"$out" &&
   grep -q '^\[worker2\] visible 2,3 on h2$' <<<"$out" && grep -q '^\[worker0\] {"event":"done"' <<<"$out" &&
   grep -q '^\[ps0\] psgraph server: .* with CURVE (keys /tmp/psgraph-keys\.' <<<"$out" &&
   grep -q "psgraph launch: worker1 pid [0-9]* (srun on h2)" <<<"$out"; then
  ok "2 nodes x 2 tasks: $want; GPUs 0,1 and 2,3 of each node by slot; CURVE from the keys sent over srun"
else
  fail "placement ($state): $out"
fi
[ "$(left_on_nodes)" = 0 ] || fail "processes left on the nodes after the placement job"

# 3. docs/hosts.md's sbatch script as written (1 ps + 2 workers over 3 nodes, Fashion-MNIST),
#    psgraph on PATH, against the same cluster on one host: the script without --slurm
if [ $have_data = 1 ]; then
  sed -n '/^#!\/bin\/sh$/,/^```$/p' "$root/docs/hosts.md" | sed '$d' >"$tmp/doc.sh"
  sed 's/ --slurm / /' "$tmp/doc.sh" >"$tmp/doc-local.sh"
  path=$(dirname "$psgraph"):$PATH
  id=$(hosts_exec ctl env PATH="$path" sbatch --parsable --chdir "$tmp" "$tmp/doc.sh")
  hosts_exec ctl env PATH="$path" sh "$tmp/doc-local.sh" >"$tmp/local.out" 2>&1
  state=$(slurm_wait_job "$id" 400)
  a=$(accuracy "$tmp/psgraph-$id.out")
  b=$(accuracy "$tmp/local.out")
  if [ "$state" = COMPLETED ] && [ -n "$a" ] && [ -n "$b" ] && grep -q '^#SBATCH --nodes=3$' "$tmp/doc.sh" &&
     grep -qF 'cluster {"ps": ["h1:23000"], "worker": ["h2:23000", "h3:23000"]}' "$tmp/psgraph-$id.out" &&
     python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 0.01)' "$a" "$b"; then
    ok "docs/hosts.md's sbatch script: 1 ps + 2 workers on h1, h2, h3 under slurmd, test accuracy $a; the same cluster on one host $b (+-0.01)"
  else
    fail "the sbatch script ($state, accuracy '$a', local '$b'): $(cat "$tmp/doc.sh"; tail -15 "$tmp/psgraph-$id.out")"
  fi
  [ "$(left_on_nodes)" = 0 ] || fail "processes left on the nodes after the training job"
else
  echo "skip the Fashion-MNIST run: no data set (or a sanitizer build)"
fi

# 4. scancel of a job that trains: every task, step and shell gone from every node
job_script "$tmp/cancel.sh" "exec '$psgraph' launch --slurm --ps 1 --workers 2 -- '$psgraph' train --model mlp --data synthetic --steps 100000 --log-every 20 --step-timeout 20"
id=$(submit "$tmp/cancel.sh" cancel --nodes 3 --ntasks-per-node 1)
for _ in $(seq 300); do grep -q '^\[worker1\] .*step' "$tmp/cancel.out" 2>/dev/null && break; sleep 0.2; done
running=$(for h in h1 h2 h3; do slurm_task_pids "$h"; done | wc -l)
hosts_exec ctl scancel "$id"
state=$(slurm_wait_job "$id" 60)
n=$(left_on_nodes)
if [ "$running" -gt 3 ] && [ "$state" = CANCELLED ] && [ "$n" = 0 ]; then
  ok "scancel while training ($running processes on the nodes): $state, 0 left"
else
  fail "scancel: $running processes before, state $state, $n left: $(for h in h1 h2 h3; do slurm_task_pids "$h" | xargs -r ps -o pid,args -p; done) $(tail -5 "$tmp/cancel.out")"
fi

# 5. --workers 2:3 in an allocation of 4 tasks: worker2 not started, then started by a SIGUSR1
#    to the launcher (srun on its node, with --join): it joins the running job, the data's
#    shards handed out by ps0 (--data-shards dispatch), each finished once, exit 0
cat >"$tmp/elastic.sh" <<EOF
#!/bin/sh
'$psgraph' launch --slurm --ps 1 --workers 2:3 -- '$psgraph' train --model mlp --data synthetic \
  --epochs 3 --batch 128 --data-shards dispatch --shard-batches 12 --log-every 1 \
  --peer-timeout 2 --step-timeout 60 --sync async >'$tmp/elastic.log' 2>&1 &
pid=\$!
while kill -0 \$pid 2>/dev/null; do
  if grep -q '^\[worker0\] step 20 ' '$tmp/elastic.log' &&
     grep -q 'membership: worker2 .*: not started' '$tmp/elastic.log'; then
    kill -USR1 \$pid
    break
  fi
  sleep 0.1
done
wait \$pid
echo "rc \$?"
EOF
id=$(submit "$tmp/elastic.sh" elastic --nodes 2 --ntasks-per-node 2)
state=$(slurm_wait_job "$id" 240)
if [ "$state" = COMPLETED ] && grep -q '^rc 0$' "$tmp/elastic.out" &&
   grep -q '^\[worker2\] started: pid [0-9]*, joining the running job (SIGUSR1)' "$tmp/elastic.log" &&
   [ "$(grep -c '^\[worker0\] membership: worker2 on h2: joined at step [0-9]*$' "$tmp/elastic.log")" = 1 ] &&
   python3 - "$tmp/elastic.log" <<'PY'
import collections, json, re, sys
done = collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r"\[worker\d\] (\{\"event\":\"shard_done\".*)", line)
    if m:
        done[json.loads(m.group(1))["shard"]] += 1
assert sorted(done) == list(range(117)) and set(done.values()) == {1}, done  # 3 x 468 / 12
PY
then
  ok "--workers 2:3: worker2 started by a SIGUSR1 over srun on h2 with --join, joined (said once); each of the 3 x 39 shards finished once; exit 0"
else
  fail "--workers 2:3 ($state): $(cat "$tmp/elastic.out") $(grep -v '\] step \|shard_' "$tmp/elastic.log" 2>/dev/null | tail -30)"
fi
[ "$(left_on_nodes)" = 0 ] || fail "processes left on the nodes after the elastic job"
[ $fails = 0 ]
