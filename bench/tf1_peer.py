#!/usr/bin/env python3
"""One TF 1.x single-process script, run on TensorFlow 2.21 (tensorflow.compat.v1, the
peer) and on psgraph (psgraph.compat.v1): the only difference is the import. The mlp or
the cnn of the model table written with tf.layers (default initializers), momentum,
feed_dict every step from numpy batches (Fashion-MNIST's IDX files read with gzip and
numpy, shuffled by numpy per epoch); prints one JSON line: examples/s of the training loop
(after its first 20 steps, evaluation excluded) and the test accuracy.
  tf1_peer.py --backend tf|psgraph --model mlp|cnn [--epochs 3] [--threads 1]"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    raw = gzip.open(path, "rb").read()
    nd = raw[3]
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


def load():
    f = lambda n: os.path.join(DATA, n)  # noqa: E731
    xtr = (read_idx(f("train-images-idx3-ubyte.gz")).astype(np.float32) / 255)[..., None]
    ytr = read_idx(f("train-labels-idx1-ubyte.gz")).astype(np.int32)
    xte = (read_idx(f("t10k-images-idx3-ubyte.gz")).astype(np.float32) / 255)[..., None]
    yte = read_idx(f("t10k-labels-idx1-ubyte.gz")).astype(np.int32)
    return xtr, ytr, xte, yte


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["tf", "psgraph"], required=True)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.backend == "tf":
        import tensorflow.compat.v1 as tf
        tf.disable_v2_behavior()
    else:
        import psgraph.compat.v1 as tf
        tf.disable_v2_behavior()

    # ---- the TF 1.x script ----
    tf.set_random_seed(a.seed)
    batch, lr = (128, 0.05) if a.model == "mlp" else (64, 0.01)
    images = tf.placeholder(tf.float32, [None, 28, 28, 1])
    labels = tf.placeholder(tf.int32, [None])
    if a.model == "mlp":
        h = tf.layers.flatten(images)
        h = tf.layers.dense(h, 256, activation=tf.nn.relu)
        h = tf.layers.dense(h, 256, activation=tf.nn.relu)
    else:
        h = tf.layers.conv2d(images, 32, 5, padding="same", activation=tf.nn.relu)
        h = tf.layers.max_pooling2d(h, 2, 2)
        h = tf.layers.conv2d(h, 64, 5, padding="same", activation=tf.nn.relu)
        h = tf.layers.max_pooling2d(h, 2, 2)
        h = tf.layers.dense(tf.layers.flatten(h), 512, activation=tf.nn.relu)
    logits = tf.layers.dense(h, 10)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), labels), tf.float32))
    train_op = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss, global_step=tf.train.get_or_create_global_step())
    xtr, ytr, xte, yte = load()
    rng = np.random.default_rng(a.seed)
    per_epoch = len(ytr) // batch
    total = a.steps or per_epoch * a.epochs
    cfg = tf.ConfigProto(intra_op_parallelism_threads=a.threads, inter_op_parallelism_threads=1)
    with tf.Session(config=cfg) as sess:
        sess.run(tf.global_variables_initializer())
        step, t_loop, n_timed = 0, 0.0, 0
        while step < total:
            order = rng.permutation(len(ytr))
            for b in range(per_epoch):
                if step == total:
                    break
                t0 = time.perf_counter()
                idx = order[b * batch:(b + 1) * batch]
                last, _ = sess.run([loss, train_op], {images: xtr[idx], labels: ytr[idx]})
                if step >= 20:
                    t_loop += time.perf_counter() - t0
                    n_timed += 1
                step += 1
        hits = sum(sess.run(correct, {images: xte[i:i + 1000], labels: yte[i:i + 1000]})
                   for i in range(0, len(yte), 1000))
    print(json.dumps({"backend": a.backend, "version": getattr(tf, "__version__", "?"), "model": a.model,
                      "steps": total, "batch": batch, "threads": a.threads, "final_loss": round(float(last), 4),
                      "test_accuracy": round(float(hits) / len(yte), 4),
                      "examples_per_sec": round(n_timed * batch / t_loop, 1)}))


if __name__ == "__main__":
    main()
