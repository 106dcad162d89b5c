#!/usr/bin/env bash
# CPU milliseconds per cnn training step (batch 64, one thread) of psgraph and of the
# PyTorch peer, alternating, best of PSG_BENCH_ROUNDS (default 3): the kernels compared
# without the wall-clock noise of a shared machine (other processes add to wall time,
# not to a process's CPU time; they still share its caches).
#   psgraph: (user + sys of `train --steps 130`) - (the same of `--steps 30`), over 100
#     steps: loading the data and the final evaluation cancel out;
#   the peer: bench/cnn_step_torch.py, the mean thread CPU time of 100 steps of
#     torch_ref.CNN (random data), with psgraph's OpenBLAS kernels.
# One JSON line. Needs python3-torch (PSG_WITH_PEERS=1 tools/install-deps.sh);
# PSG_PEER: the peer script (default ../shared/peers/torch-peer).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh build >/dev/null || exit 1
peer=${PSG_PEER:-../shared/peers/torch-peer}
rounds=${PSG_BENCH_ROUNDS:-3}
short=30 long=130
load0=$(cut -d' ' -f1 /proc/loadavg)
cpu_of() { # CPU seconds of the command
  local f; f=$(mktemp)
  /usr/bin/time -f '%U %S' -o "$f" "$@" >/dev/null 2>&1
  awk '{print $1 + $2}' "$f"; rm -f "$f"
}
ours() {
  local a b
  a=$(cpu_of build/cli/psgraph train --model cnn --threads 1 --steps $short --log-every 1000000)
  b=$(cpu_of build/cli/psgraph train --model cnn --threads 1 --steps $long --log-every 1000000)
  python3 -c "print(round(($b - $a) / ($long - $short) * 1e3, 2))"
}
core=$(build/cli/psgraph train --model cnn --threads 1 --steps 1 --log-every 1000000 2>/dev/null |
  python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if "\"done\"" in l][-1].get("blas",""))')
theirs() {
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OPENBLAS_CORETYPE="$core" \
    /usr/bin/python3 bench/cnn_step_torch.py "$(dirname "$(readlink -f "$peer")")" 100 |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["mean_ms"])'
}
o=() p=()
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then o+=("$(ours)"); p+=("$(theirs)"); else p+=("$(theirs)"); o+=("$(ours)"); fi
done
O="${o[*]}" P="${p[*]}" L0="$load0" CORE="$core" python3 - <<'PY'
import json, os
o = [float(v) for v in os.environ["O"].split()]
p = [float(v) for v in os.environ["P"].split()]
print(json.dumps({"bench": "cnn_cpu", "threads": 1, "batch": 64,
                  "psgraph_cpu_ms_per_step": o, "torch_cpu_ms_per_step": p,
                  "psgraph_best": min(o), "torch_best": min(p),
                  "speedup": round(min(p) / min(o), 3), "blas": os.environ["CORE"],
                  "load_start": float(os.environ["L0"]),
                  "load_end": float(open("/proc/loadavg").read().split()[0])}))
PY
