#!/usr/bin/env bash
# Issue 36's time-to-accuracy numbers on the synthetic ImageNet-format set
# (`psgraph data imagenet`: 10 shapes, 400 train + 100 validation images, 75x75, TF's
# shard layout, labels 1..10, boxes), one JSON line per evaluation:
#   keras:   Keras's InceptionV3 (TF 2.21, bench/inception3_keras_peer.py) with TF's recipe
#   one:     psgraph, one process, batch B, the same initial weights (Keras's, --init-from
#            through the slim <-> Keras name map), the same recipe and steps
#   cluster: psgraph, 1 ps (PSG_ACC_PS) + 2 workers + 1 backup (sync, N = 2), batch B/2 a worker: the same
#            effective batch as `one`
# usage: bench/inception3_accuracy.sh [steps, default 200] [eval every, default 50]
#        PSG_TF_VENV: a venv with tensorflow-cpu==2.21.0 and safetensors (else made in build/)
#        PSG_ACC_RUNS: which runs (default "keras one cluster")
#        PSG_ACC_DEVICE=gpu: psgraph's runs on the GPU (tools/gpu_run.sh accuracy)
#        PSG_ACC_INIT=none: psgraph's own initial weights (its seed), no TF venv (a GPU machine
#        has none): `one` and `cluster` still start from the same weights, Keras is not run
#        PSG_ACC_TIMEOUT: seconds each run may take (default none); the evaluations so far
#        are reported either way
#        PSG_ACC_BATCH: B (default 8); PSG_ACC_LR: the initial learning rate (default 0.01);
#        PSG_ACC_BN: the batch-norm moving statistics' decay of every run (default 0.9);
#        PSG_ACC_ONE_VIRTUAL=V: the one process's batch norm over groups of V images
#        (--virtual-batch-size: B / 2 normalizes what each cluster worker does);
#        PSG_ACC_VALIDATION: validation images (default 100); PSG_ACC_SEED: the seed of
#        Keras's initial weights and of both frameworks' data order (default 1; a new
#        seed wants a new PSG_ACC_OUT, which keeps the initial weights)
#        PSG_ACC_PS: the cluster's ps tasks (default 1; a GPU cluster's variables on more
#        than one CPU ps task apply in parallel); PSG_ACC_BACKUPS: its backup workers
#        (default 1; 0: 2 workers, every gradient used)
#        PSG_ACC_PARALLEL=1: psgraph's runs at the same time (a GPU machine has the cores and
#        the memory for both), reported in order when all have ended
set -u
cd "$(dirname "$0")/.."
steps=${1:-200} every=${2:-50}
B=${PSG_ACC_BATCH:-8} lr=${PSG_ACC_LR:-0.01} bn=${PSG_ACC_BN:-0.9} seed=${PSG_ACC_SEED:-1}
runs=${PSG_ACC_RUNS:-keras one cluster}
out=${PSG_ACC_OUT:-$(mktemp -d /tmp/psg_inception3_accuracy.XXXXXX)}
psg=${PSG_BIN:-build/cli/psgraph}
venv=${PSG_TF_VENV:-build/tf-venv}
init=${PSG_ACC_INIT:-keras}
[ "$init" = none ] && runs=${runs//keras/}
limit=()
[ -n "${PSG_ACC_TIMEOUT:-}" ] && limit=(timeout "$PSG_ACC_TIMEOUT")
if [ "$init" != none ] && ! "$venv/bin/python" -c 'import tensorflow, safetensors' 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q tensorflow-cpu==2.21.0 safetensors || exit 1
fi
mkdir -p "$out"
[ -d "$out/inet" ] || "$psg" data imagenet --out "$out/inet" --validation "${PSG_ACC_VALIDATION:-100}" >"$out/data.json" || exit 1
[ "$init" = none ] || [ -f "$out/init.safetensors" ] || "$venv/bin/python" bench/inception3_keras_peer.py --data-dir "$out/inet" \
  --bn-decay $bn --seed "$seed" --init-out "$out/init.safetensors" >/dev/null 2>&1 || exit 1
common=(train --model inception3 --data imagenet --data-dir "$out/inet" --image-size 75
        --classes 10 --steps "$steps" --eval-every "$every" --initial-learning-rate $lr
        --batchnorm-decay $bn --log-every 10 --seed "$seed")
[ "$init" = none ] || common+=(--init-from "$out/init.safetensors")
[ -n "${PSG_ACC_DEVICE:-}" ] && common+=(--device "$PSG_ACC_DEVICE")
report() { # run name, metrics.jsonl
  python3 - "$1" "$2" <<'PY'
import json, sys
for l in open(sys.argv[2]):
    d = json.loads(l)
    if d.get("event") == "eval":
        print(json.dumps({"run": sys.argv[1], "step": d["step"], "top1": d["top1"], "top5": d["top5"],
                          "top1_ema": d["top1_ema"], "top5_ema": d["top5_ema"], "wall_sec": d["wall_sec"]}))
PY
}
# run r: its output to $out/r.log, then its evaluations as JSON lines
one_run() {
  case $1 in
  keras)
    "$venv/bin/python" bench/inception3_keras_peer.py --data-dir "$out/inet" --classes 10 --size 75 \
      --batch $B --steps "$steps" --eval-every "$every" --lr $lr --bn-decay $bn --threads 2 --seed "$seed" \
      2>"$out/keras.err" | sed 's/"peer": "keras"/"run": "keras"/' ;;
  one)
    local virtual=()
    [ -n "${PSG_ACC_ONE_VIRTUAL:-}" ] && virtual=(--virtual-batch-size "$PSG_ACC_ONE_VIRTUAL")
    "${limit[@]}" "$psg" "${common[@]}" --batch $B "${virtual[@]}" --threads 2 --logdir "$out/one" \
      >"$out/one.log" 2>&1
    report one "$out/one/metrics.jsonl" ;;
  cluster)
    local b=${PSG_ACC_BACKUPS:-1}
    "${limit[@]}" "$psg" launch --ps "${PSG_ACC_PS:-1}" --workers $((2 + b)) -- "$psg" "${common[@]}" --batch $((B / 2)) --threads 1 \
      --sync sync --backup-workers "$b" --step-timeout 600 --logdir "$out/cluster" >"$out/cluster.log" 2>&1
    report cluster "$out/cluster/metrics.jsonl" &&
      grep -o '"per_worker":[^]]*]],"per_worker_dropped":[^]]*]' "$out/cluster/metrics.jsonl" | tail -1 ;;
  esac
}
if [ -n "${PSG_ACC_PARALLEL:-}" ]; then
  for r in $runs; do one_run "$r" >"$out/$r.jsonl" & done
  wait
  for r in $runs; do cat "$out/$r.jsonl"; done
else
  for r in $runs; do one_run "$r"; done
fi
