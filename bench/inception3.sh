#!/usr/bin/env bash
# Inception-v3 training throughput on the CPU: psgraph beside PyTorch's
# torchvision Inception-v3 (no aux head, random 299x299 input) in one run,
# one JSON line per batch size with both figures and the ratio.
#   bench/inception3.sh [batches, default 2,8] [steps, default 5]
# The peer needs python3-torch and torchvision (PSG_WITH_PEERS=1 tools/install-deps.sh).
# PSG_BENCH_ROUNDS (default 3) alternating rounds, best against best, peak RSS of both,
# the peer on psgraph's OpenBLAS kernels (PSG_PEER_CORETYPE: see bench/train.sh), psgraph
# on the peer's optimizer (plain SGD at 0.01: no RMSProp, moving average or weight decay).
# Scaling on this host: a local cluster of 1 ps and W = 1, 2 workers, then W = 2 with one
# backup, tiny images (75x75, 10 classes), one JSON line each with the speedup over W = 1:
#   bench/inception3.sh scaling [batch, default 4] [steps, default 4]
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = scaling ]; then
  batch=${2:-4}
  steps=${3:-4}
  bash tools/build.sh build >/dev/null || exit 1
  base=""
  for wb in 1:0 2:0 2:1; do
    w=${wb%:*}
    b=${wb#*:}
    line=$(build/cli/psgraph bench inception3 --ps 1 --workers "$w" --backup-workers "$b" --image-size 75 \
      --classes 10 --batch "$batch" --steps "$steps" --warmup 1 --log-every 1000 | grep '^{"bench"' | tail -1)
    [ -n "$line" ] || { echo "{\"bench\":\"inception3\",\"workers\":$w,\"backup_workers\":$b,\"error\":\"no result\"}"; continue; }
    [ -z "$base" ] && base=$line
    LINE="$line" BASE="$base" python3 - <<'PY'
import json, os
d, base = json.loads(os.environ["LINE"]), json.loads(os.environ["BASE"])
keep = ("ps", "workers", "backup_workers", "sync", "batch", "image_size", "threads", "images_per_sec",
        "per_worker_images_per_sec", "gradients_used", "gradients_dropped", "step_ms_median", "step_ms_p90")
out = {"bench": "inception3", "mode": "scaling", **{k: d.get(k) for k in keep}}
out["speedup_vs_1_worker"] = round(d["images_per_sec"] / base["images_per_sec"], 3)
out["cores"] = os.cpu_count()
print(json.dumps(out))
PY
  done
  exit 0
fi
batches=${1:-2,8}
steps=${2:-5}
bash tools/build.sh build >/dev/null || exit 1
peer=${PSG_PEER:-../shared/peers/torch-peer} # a worktree beside main: PSG_PEER=/work/shared/peers/torch-peer
threads=${PSG_BENCH_THREADS:-2}
rounds=${PSG_BENCH_ROUNDS:-3}
have_torch=0
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null && [ -x "$peer" ] && have_torch=1
[ $have_torch = 1 ] || echo '{"bench":"inception3","note":"python3-torch, torchvision or the peer script is missing: peer skipped"}'
tmp=$(mktemp -d)
. bench/rounds.sh
trap 'rm -rf "$tmp"' EXIT
# As bench/train.sh: rounds alternate the two, the peer on psgraph's OpenBLAS kernels.
run_ours() {
  python3 bench/peak_rss.py "$tmp/ours_rss_$2" build/cli/psgraph bench inception3 --batch "$1" \
    --steps "$steps" --warmup 2 --threads "$threads" --optimizer sgd --lr 0.01 | grep '^{"bench"' | tail -1 >"$tmp/ours_$2"
}
run_peer() {
  [ $have_torch = 1 ] || return 0
  peer_env
  "${penv[@]}" python3 bench/peak_rss.py "$tmp/peer_rss_$2" "$peer" --workloads inception3 --inc-batch "$1" \
    --inc-steps "$steps" --inc-warmup 2 --threads "$threads" 2>/dev/null | tail -1 >"$tmp/peer_$2"
}
for b in ${batches//,/ }; do
  load_start=$(cut -d' ' -f1 /proc/loadavg)
  alternate "$b"
  TMP="$tmp" W="batch$b" ROUNDS="$rounds" LOAD0="$load_start" python3 bench/train_report.py inception3
done
