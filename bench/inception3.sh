#!/usr/bin/env bash
# Inception-v3 training throughput on the CPU: psgraph beside PyTorch's
# torchvision Inception-v3 (no aux head, random 299x299 input) in one run,
# one JSON line per batch size with both figures and the ratio.
#   bench/inception3.sh [batches, default 2,8] [steps, default 5]
# The peer needs python3-torch and torchvision (PSG_WITH_PEERS=1 tools/install-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
batches=${1:-2,8}
steps=${2:-5}
bash tools/build.sh build >/dev/null || exit 1
peer=../shared/peers/torch-peer
threads=${PSG_BENCH_THREADS:-2}
have_torch=0
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null && [ -x "$peer" ] && have_torch=1
[ $have_torch = 1 ] || echo '{"bench":"inception3","note":"python3-torch, torchvision or the peer script is missing: peer skipped"}'
for b in ${batches//,/ }; do
  ours=$(build/cli/psgraph bench inception3 --batch "$b" --steps "$steps" --warmup 2 --threads "$threads" | grep '^{"bench"' | tail -1)
  theirs=""
  if [ $have_torch = 1 ]; then
    theirs=$("$peer" --workloads inception3 --inc-batch "$b" --inc-steps "$steps" --inc-warmup 2 --threads "$threads" 2>/dev/null | tail -1)
  fi
  OURS="$ours" THEIRS="$theirs" B="$b" python3 - <<'PY'
import json, os
ours = json.loads(os.environ["OURS"]) if os.environ["OURS"] else {}
theirs = json.loads(os.environ["THEIRS"]) if os.environ["THEIRS"] else {}
out = {"bench": "inception3", "device": "cpu", "batch": int(os.environ["B"]),
       "psgraph_train_images_per_sec": ours.get("images_per_sec"),
       "psgraph_step_ms_median": ours.get("step_ms_median"),
       "psgraph_final_loss": ours.get("final_loss"), "threads": ours.get("threads")}
if theirs:
    out.update({"torch_train_images_per_sec": theirs.get("train_images_per_sec"),
                "torch_infer_images_per_sec": theirs.get("infer_images_per_sec"),
                "torch_blas": " ".join(theirs.get("blas", [])),
                "torch_other_cpu_avg_cores": theirs.get("other_cpu_avg_cores")})
    if ours.get("images_per_sec") and theirs.get("train_images_per_sec"):
        out["ratio"] = round(ours["images_per_sec"] / theirs["train_images_per_sec"], 3)
print(json.dumps(out))
PY
done
