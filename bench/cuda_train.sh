#!/usr/bin/env bash
# Training throughput of the cnn (and mlp) on one GPU, psgraph beside the
# same model in PyTorch on the same GPU when torch with CUDA is installed:
# one JSON line per workload with images/sec of each and the ratio; then
# psgraph's --towers scaling over every GPU of the machine.
#   bench/cuda_train.sh [steps] [--precision f32|mixed|mixed-f16]
# --precision mixed: psgraph's bf16 products with f32 master weights
# (docs/mixed_precision.md) beside PyTorch's autocast to bf16 (f16 with a
# GradScaler for mixed-f16).
# Without a GPU it prints one "skipped" line and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
steps=300
precision=f32
while [ $# -gt 0 ]; do
  case $1 in
    --precision) precision=$2; shift 2 ;;
    *) steps=$1; shift ;;
  esac
done
bash tools/build.sh build || exit 1
gpus=$(build/bench/bench_cuda_gemm 0 | grep -c skipped)
if [ "$gpus" != 0 ]; then
  build/bench/bench_cuda_gemm 0 | sed 's/"cuda_gemm"/"cuda_train"/'
  exit 0
fi
have_torch=0
/usr/bin/python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && have_torch=1
[ $have_torch = 1 ] || echo '{"bench":"cuda_train","note":"python3-torch with CUDA is missing: peer skipped"}'

torch_peer() { # model batch steps precision -> images/sec
  /usr/bin/python3 bench/torch_cuda_peer.py "$@"
}

for w in cnn mlp; do
  batch=$([ $w = cnn ] && echo 64 || echo 128)
  ours=$(build/cli/psgraph train --model $w --data synthetic --device gpu --steps "$steps" \
         --precision "$precision" --log-every 1000000 | grep '"event":"done"' | tail -1)
  theirs=""
  [ $have_torch = 1 ] && theirs=$(torch_peer $w $batch "$steps" "$precision" 2>/dev/null | tail -1)
  OURS="$ours" THEIRS="$theirs" W="$w" P="$precision" python3 - <<'PY'
import json, os
ours = json.loads(os.environ["OURS"]) if os.environ["OURS"] else {}
out = {"bench": "cuda_train", "workload": os.environ["W"], "device": "gpu:0",
       "precision": os.environ["P"], "psgraph_images_per_sec": ours.get("examples_per_sec")}
if os.environ["THEIRS"]:
    out["torch_images_per_sec"] = float(os.environ["THEIRS"])
    if ours.get("examples_per_sec"):
        out["ratio"] = round(ours["examples_per_sec"] / out["torch_images_per_sec"], 3)
print(json.dumps(out))
PY
done

# towers: 1, 2, ... GPUs, batch 64 per tower
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
base=""
for k in $(seq 1 "${n:-1}"); do
  r=$(build/cli/psgraph train --model cnn --data synthetic --device gpu --towers "$k" \
      --batch $((64 * k)) --steps "$steps" --precision "$precision" --log-every 1000000 | grep '"event":"done"' | tail -1)
  eps=$(echo "$r" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("examples_per_sec", 0))' 2>/dev/null || echo 0)
  [ -z "$base" ] && base=$eps
  python3 -c "import json; print(json.dumps({'bench': 'cuda_train_towers', 'towers': $k, 'precision': '$precision', 'images_per_sec': $eps, 'scaling': round($eps / $base, 3) if $base else None}))"
done
