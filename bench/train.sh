#!/usr/bin/env bash
# Training throughput of psgraph beside PyTorch on the same workloads, in one
# run: one JSON line per workload with both figures and the ratio.
#   bench/train.sh [mlp,cnn] [--quick]
# --quick: 1 epoch of the mlp and 300 steps of the cnn (psgraph) against the
# peer's shortest run; the default runs the peer's own epochs (mlp 3, cnn 1).
# The peer needs python3-torch (PSG_WITH_PEERS=1 tools/install-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
workloads=${1:-mlp,cnn}
quick=0
[ "${2:-}" = --quick ] && quick=1
bash tools/build.sh build || exit 1
peer=../shared/peers/torch-peer
threads=${PSG_BENCH_THREADS:-2}
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && [ -x "$peer" ] && have_torch=1
[ $have_torch = 1 ] || echo '{"bench":"train","note":"python3-torch or the peer script is missing: peer skipped (PSG_WITH_PEERS=1 bash tools/install-deps.sh)"}'

for w in ${workloads//,/ }; do
  case $w in
    mlp) args=(--model mlp --epochs $([ $quick = 1 ] && echo 1 || echo 3)) ;;
    cnn) args=(--model cnn $([ $quick = 1 ] && echo --steps 300 || echo --epochs 1)) ;;
    *) echo "{\"bench\":\"train\",\"error\":\"unknown workload $w\"}"; continue ;;
  esac
  ours=$(build/cli/psgraph train "${args[@]}" --threads "$threads" --log-every 1000000 | grep '"event":"done"' | tail -1)
  theirs=""
  if [ $have_torch = 1 ]; then
    theirs=$("$peer" --workloads "$w" --threads "$threads" --mlp-epochs $([ $quick = 1 ] && echo 1 || echo 3) --cnn-epochs 1 2>/dev/null | tail -1)
  fi
  OURS="$ours" THEIRS="$theirs" W="$w" python3 - <<'PY'
import json, os
ours = json.loads(os.environ["OURS"]) if os.environ["OURS"] else {}
theirs = json.loads(os.environ["THEIRS"]) if os.environ["THEIRS"] else {}
out = {"bench": "train", "workload": os.environ["W"],
       "psgraph_examples_per_sec": ours.get("examples_per_sec"),
       "psgraph_test_accuracy": ours.get("test_accuracy"),
       "psgraph_peak_rss_mb": ours.get("peak_rss_mb")}
if theirs:
    blas = " ".join(theirs.get("blas", []))
    out.update({"torch_examples_per_sec": theirs.get("examples_per_sec"),
                "torch_test_accuracy": (theirs.get("test_acc") or [None])[-1],
                "torch_blas": blas,
                "torch_other_cpu_avg_cores": theirs.get("other_cpu_avg_cores"),
                "fair_peer": "openblas-openmp" in blas})
    if ours.get("examples_per_sec") and theirs.get("examples_per_sec"):
        out["ratio"] = round(ours["examples_per_sec"] / theirs["examples_per_sec"], 3)
print(json.dumps(out))
PY
done
