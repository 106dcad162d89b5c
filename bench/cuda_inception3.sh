#!/usr/bin/env bash
# Inception-v3 on one GPU, issue 19's numbers, one JSON line each:
#  - psgraph at batch B (default 128), f32 and mixed (bf16 products), beside torchvision's
#    Inception-v3 in PyTorch in the same run (cuDNN benchmark mode, TF32 off; autocast to
#    bf16), both on plain SGD at lr 0.01 and random 299x299 input, with the ratio;
#  - a cluster of 1 ps + 1 GPU worker on this machine beside one process (f32), and of
#    1 ps + 2 GPU workers sharing the GPU (their images/s summed; not yet run on a GPU);
#  - where an f32 step's time goes (`--op-profile`: a line an op type, then the total), first.
#   bench/cuda_inception3.sh [batch] [steps]
# Without a GPU it prints one "skipped" line and exits 0; without torch with CUDA the peer
# is skipped with a note.
set -uo pipefail
cd "$(dirname "$0")/.."
batch=${1:-128}
steps=${2:-20}
[ -n "${PSG_NO_BUILD:-}" ] || bash tools/build.sh build || exit 1
if build/bench/bench_cuda_gemm 1 | grep -q skipped; then
  build/bench/bench_cuda_gemm 1 | sed 's/"cuda_gemm"/"cuda_inception3"/'
  exit 0
fi
py=${PSG_PEER_PYTHON:-python3}
have_torch=0
$py -c 'import torch, torchvision, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && have_torch=1
[ $have_torch = 1 ] || echo '{"bench":"cuda_inception3","note":"torch and torchvision with CUDA are missing: peer skipped"}'

torch_peer() { # batch steps precision -> images/sec
  $py bench/torch_cuda_peer.py inception3 "$@"
}

ours() { # extra options... -> the bench's final JSON line (on failure, the run's end on stderr)
  local log
  log=$(mktemp)
  build/cli/psgraph bench inception3 --device gpu --batch "$batch" --warmup 3 --steps "$steps" \
    --optimizer sgd --log-every 1000000 "$@" >"$log" 2>&1
  grep '^{"bench":"inception3"' "$log" | tail -1 || tail -15 "$log" >&2
  rm -f "$log"
}

report() { # name ours-line theirs-images/sec
  NAME="$1" OURS="$2" THEIRS="$3" python3 - <<'PY'
import json, os
o = json.loads(os.environ["OURS"]) if os.environ["OURS"] else {}
out = {"bench": "cuda_inception3", "what": os.environ["NAME"], "batch": o.get("batch"),
       "precision": o.get("precision"), "psgraph_images_per_sec": o.get("images_per_sec"),
       "step_ms_median": o.get("step_ms_median")}
if os.environ["THEIRS"]:
    out["other_images_per_sec"] = float(os.environ["THEIRS"])
    if o.get("images_per_sec"):
        out["ratio"] = round(o["images_per_sec"] / out["other_images_per_sec"], 3)
print(json.dumps(out))
PY
}

# where an f32 step's time goes (first: it says what to fix); one executor thread, so that each
# node's time is its own (with more, a node's wait for its kernels takes in its neighbours')
for precision in f32 mixed; do
  build/cli/psgraph bench inception3 --device gpu --batch "$batch" --warmup 3 --steps 3 --threads 1 \
    --optimizer sgd --precision $precision --log-every 1000000 --op-profile 2>&1 |
    grep '^{"op_profile"' | sed "s/^{/{\"precision\":\"$precision\",/"
done

single=""
for precision in f32 mixed; do
  line=$(ours --precision "$precision")
  [ "$precision" = f32 ] && single=$line
  theirs=""
  [ $have_torch = 1 ] && theirs=$(torch_peer "$batch" "$steps" "$precision" 2>/dev/null | tail -1)
  report "one process vs torch ($precision)" "$line" "$theirs"
done

# the cluster path on a real GPU: 1 ps + 1 GPU worker beside one process (target >= 0.9)
cluster=$(ours --precision f32 --ps 1 --workers 1)
report "1 ps + 1 GPU worker vs one process" "$cluster" \
  "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["images_per_sec"])' "$single" 2>/dev/null)"

# 1 ps + 2 GPU workers sharing this machine's GPU (issue 38's case when one GPU is lent):
# the workers' images/s summed, beside one process on the same GPU
two=$(ours --precision f32 --ps 1 --workers 2)
ONE="$single" TWO="$two" python3 - <<'PY'
import json, os
one = json.loads(os.environ["ONE"]) if os.environ["ONE"] else {}
two = json.loads(os.environ["TWO"]) if os.environ["TWO"] else {}
rates = [r for r in two.get("per_worker_images_per_sec") or [] if r is not None]
out = {"bench": "cuda_inception3", "what": "1 ps + 2 GPU workers on one GPU vs one process",
       "batch": two.get("batch"), "precision": "f32", "per_worker_images_per_sec": rates,
       "psgraph_images_per_sec": round(sum(rates), 3) if rates else None,
       "other_images_per_sec": one.get("images_per_sec")}
if rates and one.get("images_per_sec"):
    out["ratio"] = round(sum(rates) / one["images_per_sec"], 3)
print(json.dumps(out))
PY
