"""The Python mlp, written with tf.layers and started from the C model's initial values
(Saver.restore of a `psgraph train --steps 0` checkpoint), gives the loss of
`psgraph train --model mlp` after 20 steps on the same batches."""
import json
import os
import subprocess

import numpy as np
import pytest

import psgraph.compat.v1 as tf
from psgraph import data

from conftest import fashion_mnist_present

pytestmark = pytest.mark.skipif(not fashion_mnist_present(), reason="no Fashion-MNIST")


def train_c(psgraph_bin, *args):
    out = subprocess.run([psgraph_bin, "train", "--model", "mlp", "--threads", "1", "--log-every", "1000"]
                         + list(args), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    done = [json.loads(l) for l in out.stdout.splitlines() if l.startswith('{"event":"done"')]
    return done[-1]


def test_python_mlp_matches_psgraph_train(psgraph_bin, tmp_path):
    init_dir = str(tmp_path / "init")
    train_c(psgraph_bin, "--steps", "0", "--logdir", init_dir)
    ckpt = tf.train.latest_checkpoint(init_dir)
    assert ckpt == os.path.join(init_dir, "model.ckpt-0")
    want = train_c(psgraph_bin, "--steps", "20")["final_loss"]

    images = tf.placeholder(tf.float32, [None, 28, 28, 1])
    labels = tf.placeholder(tf.int32, [None])
    h = tf.layers.flatten(images)
    h = tf.layers.dense(h, 256, activation=tf.nn.relu)
    h = tf.layers.dense(h, 256, activation=tf.nn.relu)
    logits = tf.layers.dense(h, 10)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    layers = [v for v in tf.trainable_variables()]
    names = ["model/fc1/weights", "model/fc1/biases", "model/fc2/weights", "model/fc2/biases",
             "model/fc3/weights", "model/fc3/biases"]
    saver = tf.train.Saver(dict(zip(names, layers)))
    batches = data.fashion_mnist(train=True).batches(128, seed=1)
    with tf.Session(config=tf.ConfigProto(intra_op_parallelism_threads=1)) as sess:
        sess.run(tf.global_variables_initializer())
        assert saver.restore(sess, ckpt) == 0
        ck = tf.train.load_variable(ckpt, "model/fc1/weights")
        np.testing.assert_array_equal(sess.run(layers[0]), ck)
        for _ in range(20):
            x, y = next(batches)
            got, _ = sess.run([loss, train], {images: x, labels: y})
    assert abs(got - want) / abs(want) <= 1e-5, (got, want)
