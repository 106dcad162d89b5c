"""Wide-and-deep on Criteo-format click logs in TF 1.x's graph API on psgraph, the model of
`psgraph train --model wide-deep` (docs/sparse.md): one embedding table of 26 x buckets rows
(16 deep columns and 1 wide weight a row) looked up with tf.nn.embedding_lookup, whose
gradient is sparse (only the touched rows are updated, by the C library's lazy Adam);
the deep MLP 13 + 26*16 -> 256 -> 128 -> 1 and the wide sum plus a linear 13 -> 1. The
first 90% of the rows train, the last 10% give AUC and log-loss.

  psgraph data ctr --rows 200000 --out ctr.tsv
  /usr/bin/python3 examples/python/wide_deep.py --data ctr.tsv [--buckets 10000] [--epochs 1]
"""
import gzip
import json
import math
import time

import numpy as np

import psgraph.compat.v1 as tf

flags = tf.app.flags
flags.DEFINE_string("data", "", "a Criteo-format file (label, 13 ints, 26 hex categoricals; plain or .gz)")
flags.DEFINE_integer("buckets", 10000, "hash buckets of each categorical field")
flags.DEFINE_integer("epochs", 1, "passes over the training rows")
flags.DEFINE_integer("batch", 512, "batch size")
flags.DEFINE_float("lr", 0.001, "Adam's learning rate")
flags.DEFINE_integer("threads", 1, "compute threads")
flags.DEFINE_integer("seed", 1, "initial values")
FLAGS = flags.FLAGS

FIELDS = 26


def read_criteo(path, buckets):
    """(labels float32 [n], ints float32 [n, 13] as log(1 + max(x, 0)), ids int64 [n, 26] as
    field * buckets + int(hex, 16) % buckets, empty 0): data loading, as the C reader."""
    opener = gzip.open if path.endswith(".gz") else open
    labels, ints, ids = [], [], []
    with opener(path, "rt") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 40:
                raise ValueError("%s: a row of %d fields, not 40" % (path, len(cols)))
            labels.append(float(cols[0]))
            ints.append([math.log1p(max(int(c), 0)) if c else 0.0 for c in cols[1:14]])
            ids.append([f * buckets + (int(c, 16) % buckets if c else 0) for f, c in enumerate(cols[14:])])
    return (np.array(labels, np.float32), np.array(ints, np.float32), np.array(ids, np.int64))


def dense_init(fan_in):
    b = 1.0 / math.sqrt(fan_in)
    return tf.random_uniform_initializer(-b, b)


def build(ints, ids, buckets):
    with tf.variable_scope("wide_deep"):
        table = tf.get_variable("embeddings", [FIELDS * buckets, 17],
                                initializer=tf.random_uniform_initializer(-0.05, 0.05))
        rows = tf.nn.embedding_lookup(table, ids)              # [B, 26, 17]
        deep = tf.reshape(rows[:, :, :16], [-1, FIELDS * 16])  # the deep embeddings
        wide = tf.reduce_sum(rows[:, :, 16], axis=1)           # the wide weights' sum
        h = tf.concat([ints, deep], axis=1)
        for units, fan_in in ((256, 13 + FIELDS * 16), (128, 256)):
            h = tf.layers.dense(h, units, tf.nn.relu, kernel_initializer=dense_init(fan_in),
                                bias_initializer=dense_init(fan_in))
        deep_logit = tf.layers.dense(h, 1, kernel_initializer=dense_init(128),
                                     bias_initializer=dense_init(128))
        wide_logit = tf.layers.dense(ints, 1, kernel_initializer=dense_init(13),
                                     bias_initializer=dense_init(13), name="wide_linear")
        return tf.reshape(deep_logit + wide_logit, [-1]) + wide


def auc(labels, scores):
    """The rank statistic (Mann-Whitney), ties averaged."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    s = scores[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return None
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main(_):
    if not FLAGS.data:
        raise SystemExit("wide_deep.py: --data FILE (psgraph data ctr --rows N --out FILE makes one)")
    tf.set_random_seed(FLAGS.seed)
    y, x_int, x_ids = read_criteo(FLAGS.data, FLAGS.buckets)
    n_train = int(len(y) * 0.9)
    labels = tf.placeholder(tf.float32, [None])
    ints = tf.placeholder(tf.float32, [None, 13])
    ids = tf.placeholder(tf.int64, [None, FIELDS])
    logits = build(ints, ids, FLAGS.buckets)
    loss = tf.losses.sigmoid_cross_entropy(labels, logits)
    prob = tf.sigmoid(logits)
    train_op = tf.train.AdamOptimizer(FLAGS.lr).minimize(loss)
    config = tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads)
    steps, t_train = 0, 0.0
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        for epoch in range(FLAGS.epochs):
            for i in range(0, n_train - FLAGS.batch + 1, FLAGS.batch):
                feed = {labels: y[i:i + FLAGS.batch], ints: x_int[i:i + FLAGS.batch],
                        ids: x_ids[i:i + FLAGS.batch]}
                t0 = time.perf_counter()
                last, _ = sess.run([loss, train_op], feed)
                t_train += time.perf_counter() - t0
                steps += 1
                if steps % 100 == 0:
                    print("step %d  loss %.4f" % (steps, last), flush=True)
        held = slice(n_train, len(y))
        p, held_loss = sess.run([prob, loss], {labels: y[held], ints: x_int[held], ids: x_ids[held]})
    a = auc(y[held], p)
    print(json.dumps({"event": "done", "model": "wide-deep", "steps": steps, "batch": FLAGS.batch,
                      "final_loss": round(float(last), 6), "held_out_rows": len(y) - n_train,
                      "auc": None if a is None else round(a, 4),
                      "logloss": round(float(held_loss), 4),
                      "examples_per_sec": round(steps * FLAGS.batch / t_train, 1) if t_train else 0}),
          flush=True)


if __name__ == "__main__":
    tf.app.run()
