"""The Python library on a GPU (issue 38): ops placed with tf.device('/gpu:0'), as TF 1.x users
place them, run there and train as they do on the CPU. Without a GPU the GPU tests skip, naming
why, and the device queries and soft placement are checked against that."""
import numpy as np
import pytest

import psgraph
import psgraph.compat.v1 as tf
from psgraph import _devices

HAVE_GPU = tf.test.is_gpu_available()
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no GPU: " + _devices.gpu_status())
SOFT = tf.ConfigProto(allow_soft_placement=True, intra_op_parallelism_threads=1)


def test_device_queries_agree():
    gpus = tf.config.list_physical_devices("GPU")
    assert HAVE_GPU == (len(gpus) > 0)
    assert tf.test.gpu_device_name() == ("/device:GPU:0" if HAVE_GPU else "")
    assert [d.device_type for d in tf.config.list_physical_devices("CPU")] == ["CPU"]
    assert all(d.name.startswith("/physical_device:GPU:") for d in gpus)


def conv_net(device):
    """A small conv net (conv, pool, dense, softmax loss, SGD) with its ops on `device`, in a
    graph of its own with fixed initial values."""
    g = tf.Graph()
    g.seed = 7
    with g.as_default(), tf.device(device):
        x = tf.placeholder(tf.float32, [16, 12, 12, 3])
        y = tf.placeholder(tf.int32, [16])
        h = tf.layers.conv2d(x, 8, 3, padding="same", activation=tf.nn.relu)
        h = tf.layers.max_pooling2d(h, 2, 2)
        logits = tf.layers.dense(tf.layers.flatten(h), 5)
        loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    return g, x, y, loss, train, init


def train_steps(device, batches):
    g, x, y, loss, train, init = conv_net(device)
    with tf.Session(graph=g, config=SOFT) as s:
        s.run(init)
        losses = [s.run([loss, train], {x: bx, y: by})[0] for bx, by in batches]
        weights = {v.op.name: s.run(v) for v in g.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)}
    return losses, weights, loss


def batches(n):
    """One batch n times: its loss must go down, on either device."""
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((16, 12, 12, 3)).astype(np.float32), rng.integers(0, 5, 16).astype(np.int32)
    return [(x, y)] * n


@needs_gpu
def test_a_conv_net_trains_on_the_gpu_as_on_the_cpu():
    data = batches(5)
    gpu_losses, gpu_w, gpu_loss = train_steps("/gpu:0", data)
    cpu_losses, cpu_w, _ = train_steps("/cpu:0", data)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-4)
    assert gpu_losses[-1] < gpu_losses[0]
    for name, w in cpu_w.items():
        np.testing.assert_allclose(gpu_w[name], w, rtol=1e-4, atol=1e-5, err_msg=name)
    assert gpu_loss.device.lower().replace("device:", "") == "/gpu:0"


@needs_gpu
def test_a_matmul_on_the_gpu_matches_numpy():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 128)).astype(np.float32), rng.standard_normal((128, 32)).astype(np.float32)
    with tf.device("/gpu:0"):
        p = tf.placeholder(tf.float32, [64, 128])
        out = tf.nn.relu(tf.matmul(p, tf.constant(b)))
    with tf.Session() as s:
        got = s.run(out, {p: a})
    np.testing.assert_allclose(got, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


@needs_gpu
def test_a_gpu_this_machine_lacks_is_an_error_naming_the_node():
    with tf.device("/gpu:%d" % len(tf.config.list_physical_devices("GPU"))):
        out = tf.nn.relu(tf.constant([1.0, -1.0]), name="act")
    with tf.Session() as s, pytest.raises(psgraph.errors.OpError, match="has no GPU 1"):
        s.run(out)


def test_soft_placement_runs_a_missing_gpu_on_the_cpu():
    with tf.device("/gpu:%d" % len(tf.config.list_physical_devices("GPU"))):
        out = tf.nn.relu(tf.constant([1.0, -2.0, 3.0]))
    with tf.Session(config=SOFT) as s:
        np.testing.assert_array_equal(s.run(out), [1.0, 0.0, 3.0])
