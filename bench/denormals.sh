#!/usr/bin/env bash
# Denormal floats (docs/engine.md, "Denormal floats"): the mlp on Fashion-MNIST for E epochs,
# each optimizer keeping denormals (PSGRAPH_DENORMALS=keep: IEEE, as before and as numpy and
# PyTorch by default) and flushing them (the default: TensorFlow's), runs alternating. One JSON
# line a run (examples/s over the run and over its last 200 steps, test accuracy, final loss),
# then one per optimizer: the ratio of the bests flush / keep and the accuracy of each, and
# which tensors of the final checkpoints differ: "weights_bitwise" says every variable other
# than the optimizer's slots is the same byte for byte; "differing_max_abs" is the largest
# magnitude, in either run, of an element that differs (a slot at 1e-37 stays there when
# flushed: Adam's m += (g - m)(1 - beta1) with g = 0 adds a denormal, flushed to 0).
#   bench/denormals.sh [ROUNDS (2)] [EPOCHS (2)] [OPTIMIZERS (adam,momentum)]
set -uo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in -h | --help) echo "usage: bench/denormals.sh [ROUNDS (2)] [EPOCHS (2)] [OPTIMIZERS (adam,momentum)]"; exit 0 ;; esac
rounds=${1:-2} epochs=${2:-2} optimizers=${3:-adam,momentum}
bash tools/build.sh build >/dev/null || exit 1
psgraph=build/cli/psgraph
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/psg_bench_denormals.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for opt in ${optimizers//,/ }; do
  case $opt in adam) lr=0.001 ;; momentum) lr=0.05 ;; *) lr=0.01 ;; esac
  for r in $(seq "$rounds"); do
    for mode in keep flush; do
      dir=$tmp/$opt-$mode-$r
      PSGRAPH_DENORMALS=$mode "$psgraph" train --model mlp --data fashion-mnist --optimizer "$opt" \
        --lr $lr --batch 64 --epochs "$epochs" --seed 1 --threads 1 --log-every 200 \
        --logdir "$dir" >"$dir.log" 2>&1 || { echo "{\"bench\":\"denormals\",\"error\":\"$opt $mode: $(tail -1 "$dir.log")\"}"; continue; }
      OPT=$opt MODE=$mode ROUND=$r LOG=$dir.log LOAD=$(cut -d' ' -f1 /proc/loadavg) $py - <<'PY'
import json, os, re
log = open(os.environ["LOG"]).read()
done = json.loads(next(l for l in log.splitlines() if '"event":"done"' in l))
last = [float(x) for x in re.findall(r"examples/sec (\d+)", log)][-1:]
print(json.dumps({"bench": "denormals", "optimizer": os.environ["OPT"],
                  "mode": os.environ["MODE"], "round": int(os.environ["ROUND"]),
                  "examples_per_sec": done["examples_per_sec"],
                  "last_examples_per_sec": last[0] if last else None,
                  "test_accuracy": done["test_accuracy"], "final_loss": done["final_loss"],
                  "steps": done["steps"], "load": float(os.environ["LOAD"])}))
PY
    done
  done
done | tee "$tmp/lines.jsonl"
TMP=$tmp $py - <<'PY'
import glob, json, os, struct
import numpy as np

tmp = os.environ["TMP"]
lines = [json.loads(l) for l in open(f"{tmp}/lines.jsonl") if '"mode"' in l]


def tensors(logdir):
    out = {}
    for path in glob.glob(f"{logdir}/model.ckpt-*.safetensors"):
        b = open(path, "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        head = json.loads(b[8:8 + n])
        for name, v in head.items():
            if name != "__metadata__" and v["dtype"] == "F32":
                s, e = v["data_offsets"]
                out[name] = np.frombuffer(b[8 + n + s:8 + n + e], np.float32)
    return out


for opt in dict.fromkeys(l["optimizer"] for l in lines):
    runs = {m: [l for l in lines if l["optimizer"] == opt and l["mode"] == m]
            for m in ("keep", "flush")}
    if not runs["keep"] or not runs["flush"]:
        continue
    best = {m: max(l["examples_per_sec"] for l in runs[m]) for m in runs}
    keep, flush = tensors(f"{tmp}/{opt}-keep-1"), tensors(f"{tmp}/{opt}-flush-1")
    differ = sorted(k for k in keep if k in flush and not np.array_equal(keep[k], flush[k]))
    biggest = max((float(np.abs(np.concatenate([keep[k], flush[k]])[
        np.concatenate([keep[k] != flush[k]] * 2)]).max()) for k in differ), default=0.0)
    slots = ("/Adam", "/Momentum", "_power")
    print(json.dumps({
        "bench": "denormals_summary", "optimizer": opt, "rounds": len(runs["keep"]),
        "keep_best_examples_per_sec": best["keep"], "flush_best_examples_per_sec": best["flush"],
        "ratio_flush_to_keep": round(best["flush"] / best["keep"], 3),
        "keep_test_accuracy": sorted({l["test_accuracy"] for l in runs["keep"]}),
        "flush_test_accuracy": sorted({l["test_accuracy"] for l in runs["flush"]}),
        "tensors_differing": differ,
        "weights_bitwise": not [k for k in differ if not any(s in k for s in slots)],
        "differing_max_abs": biggest}))
PY
