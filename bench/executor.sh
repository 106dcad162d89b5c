#!/usr/bin/env bash
# The executor's per-node overhead beside PyTorch's per-op eager overhead
# (the same tiny add, 16 floats) in the same run; one JSON line each and
# the ratio (psgraph's chain on 1 thread against torch on 1 thread).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh build || exit 1
ours=$(build/bench/bench_executor) || exit 1
echo "$ours"
chain=$(grep '"graph":"chain","nodes":1000,"threads":1' <<<"$ours")
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  CHAIN="$chain" /usr/bin/python3 - <<'PY'
import json, os, time, torch
torch.set_num_threads(1)
x = torch.zeros(16)
best = 1e30
for rep in range(5):
    t0 = time.perf_counter()
    with torch.no_grad():
        for step in range(200):
            y = x
            for i in range(1000):
                y = y + x
    best = min(best, (time.perf_counter() - t0) / 200)
ours = json.loads(os.environ["CHAIN"])
torch_us = best * 1e6 / 1000
print(json.dumps({"bench": "executor", "peer": "torch eager, 1 thread", "torch": torch.__version__,
                  "torch_us_per_op": round(torch_us, 3), "psgraph_us_per_node": ours["us_per_node"],
                  "ratio_psgraph_over_torch_time": round(ours["us_per_node"] / torch_us, 3)}))
PY
else
  echo '{"bench":"executor","note":"python3-torch missing: peer skipped"}'
fi
