#!/usr/bin/env python3
"""The PyTorch peer's cnn training step (torch_ref.CNN, SGD with momentum, batch 64)
timed in thread CPU time, one thread: what a busy machine's other processes do not
add to. Prints one JSON line: the mean, median and best ms of STEPS steps after WARMUP.

  python3 bench/cnn_step_torch.py PEER_DIR [STEPS]    (bench/cnn_cpu.sh runs it)
"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

WARMUP = 10


def main():
    sys.path.insert(0, sys.argv[1])
    import torch_ref

    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch_ref.CNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))
    t = []
    for step in range(WARMUP + steps):
        t0 = time.thread_time()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        if step >= WARMUP:
            t.append(time.thread_time() - t0)
    print(json.dumps({"bench": "cnn_step_torch", "steps": steps, "threads": 1,
                      "mean_ms": round(statistics.mean(t) * 1e3, 2),
                      "median_ms": round(statistics.median(t) * 1e3, 2),
                      "best_ms": round(min(t) * 1e3, 2), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
