"""A model built in Python leaves as ONNX (`psgraph.export_onnx`, issue 29): ONNX's own
checker passes and ONNX Runtime gives the session's outputs on the same inputs. ONNX Runtime
is a peer, not a dependency: it lives in the venv `<build>/onnx-venv` (shared with
tests/test_serving.sh), made here when it is missing."""
import fcntl
import os
import subprocess
import sys

import numpy as np
import pytest

import psgraph
import psgraph.compat.v1 as tf

CHECK = r"""
import sys, numpy as np, onnx, onnxruntime as ort
path, feeds = sys.argv[1], np.load(sys.argv[2])
onnx.checker.check_model(onnx.load(path), full_check=True)
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
outs = s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()})
np.savez(sys.argv[3], **{o.name: v for o, v in zip(s.get_outputs(), outs)})
"""


@pytest.fixture(scope="module")
def ort_python():
    build = os.environ.get("PSG_BUILD")
    if not build:
        pytest.skip("PSG_BUILD is not set: run through meson test")
    venv = os.path.join(build, "onnx-venv")
    exe = os.path.join(venv, "bin", "python")
    probe = [exe, "-c", "import onnx, onnxruntime, numpy"]
    with open(os.path.join(build, "onnx-venv.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test_serving.sh may be making the same venv
        if not os.path.exists(exe) or subprocess.run(probe, capture_output=True).returncode:
            made = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
            pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "onnx", "onnxruntime",
                                  "numpy"], capture_output=True, text=True, timeout=900) if not made.returncode else made
            if pip.returncode:
                pytest.skip("cannot install onnx and onnxruntime from PyPI into %s: %s" % (venv, pip.stderr[-300:]))
    return exe


def run_ort(exe, path, feeds, tmp_path):
    np.savez(tmp_path / "feeds.npz", **feeds)
    out = subprocess.run([exe, "-c", CHECK, str(path), str(tmp_path / "feeds.npz"), str(tmp_path / "outs.npz")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return dict(np.load(tmp_path / "outs.npz"))


def max_rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def train(sess, loss, feeds, steps=15):
    step = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
    sess.run(tf.global_variables_initializer())
    for _ in range(steps):
        sess.run(step, feed_dict=feeds)


def test_mlp_exports_and_onnx_runtime_agrees(sess, rng, ort_python, tmp_path):
    x = tf.placeholder(tf.float32, [None, 784], name="images")
    y = tf.placeholder(tf.int32, [None], name="labels")
    h = tf.layers.dense(x, 64, activation=tf.nn.relu, name="hidden")
    logits = tf.layers.dense(h, 10, name="logits")
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    batch = rng.random((32, 784), dtype=np.float32)
    train(sess, loss, {x: batch, y: rng.integers(0, 10, 32)})
    path = tmp_path / "mlp.onnx"
    psgraph.export_onnx(sess, {"images": x}, {"logits": logits}, path)
    test = rng.random((6, 784), dtype=np.float32)
    want = sess.run(logits, feed_dict={x: test})
    got = run_ort(ort_python, path, {"images": test}, tmp_path)["logits"]
    assert got.shape == want.shape and max_rel(got, want) <= 1e-5


def test_cnn_exports_nhwc_and_onnx_runtime_agrees(sess, rng, ort_python, tmp_path):
    x = tf.placeholder(tf.float32, [None, 28, 28, 1], name="images")
    y = tf.placeholder(tf.int32, [None])
    c = tf.layers.conv2d(x, 8, 5, padding="same", activation=tf.nn.relu)
    p = tf.layers.max_pooling2d(c, 2, 2)
    logits = tf.layers.dense(tf.reshape(p, [-1, 14 * 14 * 8]), 10)
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    train(sess, loss, {x: rng.random((8, 28, 28, 1), dtype=np.float32), y: rng.integers(0, 10, 8)}, steps=5)
    path = tmp_path / "cnn.onnx"
    psgraph.export_onnx(sess, [x], [logits], path)  # named after their ops
    test = rng.random((3, 28, 28, 1), dtype=np.float32)
    want = sess.run(logits, feed_dict={x: test})
    outs = run_ort(ort_python, path, {"images": test}, tmp_path)
    assert list(outs) == [logits.op.name]
    assert max_rel(outs[logits.op.name], want) <= 1e-5


def test_an_op_without_an_onnx_form_is_refused_naming_it(sess, tmp_path):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    out = tf.maximum(x, 0.5, name="clip")
    with pytest.raises(psgraph.errors.OpError, match="clip"):
        psgraph.export_onnx(sess, [x], [out], tmp_path / "x.onnx")
    assert not os.path.exists(tmp_path / "x.onnx")


def test_an_uninitialized_variable_is_refused_naming_it(sess, tmp_path):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    out = tf.layers.dense(x, 2, name="never_initialized")
    with pytest.raises(psgraph.errors.OpError, match="never_initialized"):
        psgraph.export_onnx(sess, [x], [out], tmp_path / "x.onnx")
    with pytest.raises(TypeError, match="not a Tensor"):
        psgraph.export_onnx(sess, {"x": "x:0"}, [out], tmp_path / "x.onnx")
