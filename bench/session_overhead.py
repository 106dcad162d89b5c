#!/usr/bin/env python3
"""The overhead of one Session.run from Python: a graph of one Add, 3 feeds (float32 [2])
and 2 fetches (the sum and a fed tensor), run N times after a warm-up; prints one JSON line
with the mean and the best of R repetitions, in microseconds.
  session_overhead.py --backend psgraph|tf [--runs 20000] [--reps 5]
(tf: tensorflow.compat.v1 2.21, the peer, from the venv bench/python.sh makes)."""
import argparse
import json
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["psgraph", "tf"], required=True)
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    if a.backend == "tf":
        import tensorflow.compat.v1 as tf
        tf.disable_v2_behavior()
        version = tf.__version__
    else:
        import psgraph.compat.v1 as tf
        version = "psgraph"
    x = tf.placeholder(tf.float32, [2])
    y = tf.placeholder(tf.float32, [2])
    z = tf.placeholder(tf.float32, [2])
    s = tf.add(x, y)
    fetches = [s, z]
    feed = {x: np.ones(2, np.float32), y: np.ones(2, np.float32), z: np.ones(2, np.float32)}
    cfg = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    with tf.Session(config=cfg) as sess:
        out = sess.run(fetches, feed)
        assert out[0].tolist() == [2.0, 2.0] and out[1].tolist() == [1.0, 1.0]
        for _ in range(2000):
            sess.run(fetches, feed)
        means = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            for _ in range(a.runs):
                sess.run(fetches, feed)
            means.append((time.perf_counter() - t0) / a.runs * 1e6)
    print(json.dumps({"backend": a.backend, "version": version, "runs": a.runs, "reps": a.reps,
                      "mean_us": round(sum(means) / len(means), 2), "best_us": round(min(means), 2),
                      "worst_us": round(max(means), 2)}))


if __name__ == "__main__":
    main()
