#!/usr/bin/env python3
"""PyTorch's side of build/bench/bench_conv: the cnn's two conv layers (batch 64,
5x5, padding 2) forward, input gradient and filter gradient, each through
aten.convolution_backward as autograd calls it (oneDNN on CPU), in PyTorch's
own layout (NCHW), one thread. Times are thread CPU time, the median and the best
of REPS runs, so a busy machine's other processes do not add to them.
One JSON line per pass, the same fields as bench_conv's.

  /usr/bin/python3 bench/conv_torch.py    (needs python3-torch)
"""
import json
import statistics
import time

import torch

REPS = 20
LAYERS = [("conv1", 64, 28, 28, 1, 5, 32), ("conv2", 64, 14, 14, 32, 5, 64)]


def timed(fn):
    for _ in range(3):
        fn()
    t = []
    for _ in range(REPS):
        t0 = time.thread_time()
        fn()
        t.append(time.thread_time() - t0)
    return statistics.median(t), min(t)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(1)
    conv_bwd = torch.ops.aten.convolution_backward
    for name, n, h, w, c, k, oc in LAYERS:
        x = torch.rand(n, c, h, w) - 0.5
        wt = torch.rand(oc, c, k, k) - 0.5
        dy = torch.rand(n, oc, h, w) - 0.5
        pad = k // 2
        flops = 2.0 * n * h * w * oc * k * k * c

        def backward(mask):
            return lambda: conv_bwd(dy, x, wt, [oc], [1, 1], [pad, pad], [1, 1], False, [0, 0], 1, mask)

        passes = [("forward", lambda: torch.nn.functional.conv2d(x, wt, None, 1, pad)),
                  ("backprop_input", backward([True, False, False])),
                  ("backprop_filter", backward([False, True, False]))]
        with torch.no_grad():
            for pname, fn in passes:
                med, best = timed(fn)
                print(json.dumps({"bench": "conv_torch", "layer": name, "pass": pname, "batch": n,
                                  "threads": 1, "input": [n, h, w, c], "filter": [k, k, c, oc],
                                  "ms": round(med * 1e3, 3), "best_ms": round(best * 1e3, 3),
                                  "best_gflops": round(flops / best * 1e-9, 1), "clock": "cpu",
                                  "torch": torch.__version__,
                                  "mkldnn": torch.backends.mkldnn.is_available()}), flush=True)


if __name__ == "__main__":
    main()
