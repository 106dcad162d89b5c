"""A user's own model for `psgraph compare --script` (tests/python/test_strategy.py): a small
MLP on separable synthetic classes, under the strategy psgraph compare names
(psgraph.train.Strategy.from_env()), the chief evaluating every $PSGRAPH_EVAL_EVERY of its
steps into the run's metrics.jsonl (opt.log_eval).

    psgraph compare --script compare_job.py --strategy async ... -- --steps 40"""
import argparse
import os

import numpy as np

import psgraph
import psgraph.compat.v1 as tf

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
args = p.parse_args()
strategy = psgraph.train.Strategy.from_env()
every = int(os.environ.get("PSGRAPH_EVAL_EVERY", "10"))
seed = int(os.environ.get("PSGRAPH_SEED", "1"))
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.train.Server(r.cluster_spec(), r.task_type, r.task_id)
chief = r.task_id == 0
centers = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32) * 2


def batch(rng, n):
    y = rng.integers(0, 4, n)
    return (centers[y] + rng.standard_normal((n, 8)).astype(np.float32)), y


tf.set_random_seed(seed)
with tf.device(tf.train.replica_device_setter(cluster=r.cluster_spec())):
    x = tf.placeholder(tf.float32, [None, 8], name="x")
    y = tf.placeholder(tf.int64, [None], name="y")
    h = tf.layers.dense(x, 16, activation=tf.nn.relu)
    logits = tf.layers.dense(h, 4)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    gs = tf.train.get_or_create_global_step()
    opt = strategy.optimizer(tf.train.GradientDescentOptimizer(0.1))
    train_op = opt.minimize(loss, global_step=gs)
rng = np.random.default_rng(seed * 100 + r.task_id)
tx, ty = batch(np.random.default_rng(9), 512)
with tf.train.MonitoredTrainingSession(master=server.target, is_chief=chief,
                                       hooks=[opt.make_session_run_hook(chief)]) as sess:
    for step in range(1, args.steps + 1):
        if sess.should_stop():
            break
        bx, by = batch(rng, 16)
        sess.run(train_op, {x: bx, y: by})
        if chief and (step % every == 0 or step == args.steps):
            acc, g = sess.run([accuracy, gs], {x: tx, y: ty})
            opt.log_eval(g, acc)
            print("step %d: global step %d, test accuracy %.4f" % (step, g, acc), flush=True)
