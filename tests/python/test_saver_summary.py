"""Saver over psgraph's checkpoints (read back by `psgraph inspect`), summaries written by
FileWriter and read back by TensorBoard's own reader (from PyPI, in a venv the test makes),
and app.flags / app.run."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import psgraph.compat.v1 as tf
from psgraph import errors


def test_save_restore_round_trip(tmp_path, psgraph_bin):
    w = tf.Variable([[1.0, 2.0], [3.0, 4.0]], name="w")
    b = tf.get_variable("b", [2], initializer=tf.zeros_initializer())
    gs = tf.train.get_or_create_global_step()
    train = tf.train.AdamOptimizer(0.1).minimize(tf.reduce_sum(tf.matmul(w, tf.expand_dims(b + 1.0, 1))),
                                                 global_step=gs)
    saver = tf.train.Saver(max_to_keep=2)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        paths = []
        for _ in range(3):
            s.run(train)
            paths.append(saver.save(s, str(tmp_path / "ck" / "model.ckpt"), global_step=gs))
        want = s.run([w, b])
        assert paths[-1] == str(tmp_path / "ck" / "model.ckpt-3")
        assert saver.last_checkpoints == paths[1:]
    assert tf.train.latest_checkpoint(str(tmp_path / "ck")) == paths[-1]
    assert not os.path.exists(paths[0] + ".index.json")  # max_to_keep
    names = dict(tf.train.list_variables(paths[-1]))
    assert names["w"] == [2, 2] and names["w/Adam"] == [2, 2] and names["global_step"] == []
    out = subprocess.run([psgraph_bin, "inspect", paths[-1] + ".index.json"], capture_output=True, text=True)
    assert out.returncode == 0 and "global step 3" in out.stdout and "w/Adam_1" in out.stdout
    with tf.Session() as s:  # a new session: restore instead of init
        saver.restore(s, tf.train.latest_checkpoint(str(tmp_path / "ck")))
        got = s.run([w, b, gs])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == 3
    with tf.Session() as s:
        with pytest.raises(errors.OpError, match="nope"):
            saver.restore(s, str(tmp_path / "nope" / "model.ckpt-1"))


def test_restore_with_a_name_map(tmp_path):
    a = tf.Variable([5.0, 6.0], name="a")
    with tf.Session() as s:
        s.run(a.initializer)
        path = tf.train.Saver().save(s, str(tmp_path / "model.ckpt"), global_step=7)
    with tf.Graph().as_default():
        renamed = tf.Variable([0.0, 0.0], name="renamed")
        with tf.Session() as s:
            tf.train.Saver({"a": renamed}).restore(s, path)
            np.testing.assert_array_equal(s.run(renamed), [5.0, 6.0])


def tensorboard_python():
    """A Python with TensorBoard: a venv under the build folder, made once (skip without PyPI)."""
    build = os.environ.get("PSG_BUILD")
    if not build:
        pytest.skip("PSG_BUILD is not set: run through meson test")
    for name in ("tf-venv", "tb-venv"):
        py = os.path.join(build, name, "bin", "python")
        if os.path.exists(py) and subprocess.run([py, "-c", "import tensorboard"],
                                                 capture_output=True).returncode == 0:
            return py
    venv = os.path.join(build, "tb-venv")
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=120)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "tensorboard"], check=True,
                       capture_output=True, timeout=300)
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip("cannot install tensorboard from PyPI into %s: %s" % (venv, e))
    return os.path.join(venv, "bin", "python")


READER = r"""
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
acc.Reload()
out = {"scalars": {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]},
       "histograms": {t: [(e.step, e.histogram_value.min, e.histogram_value.max, e.histogram_value.num,
                            e.histogram_value.sum, e.histogram_value.sum_squares,
                            list(e.histogram_value.bucket_limit), list(e.histogram_value.bucket))
                           for e in acc.Histograms(t)] for t in acc.Tags()["histograms"]}}
print(json.dumps(out))
"""


def test_summaries_read_by_tensorboard(tmp_path, rng):
    x = tf.placeholder(tf.float32, [None])
    with tf.name_scope("train"):
        tf.summary.scalar("loss", tf.reduce_mean(x))
        tf.summary.histogram("x", x)
    merged = tf.summary.merge_all()
    values = [rng.standard_normal(50).astype(np.float32) for _ in range(3)]
    logdir = str(tmp_path / "logs")
    writer = tf.summary.FileWriter(logdir, tf.get_default_graph())
    with tf.Session() as s:
        for step, v in enumerate(values):
            writer.add_summary(s.run(merged, {x: v}), step * 10)
    writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag="custom", simple_value=2.5)]), 5)
    writer.close()
    py = tensorboard_python()
    out = subprocess.run([py, "-c", READER, logdir], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    loss = got["scalars"]["train/loss"]
    assert [s for s, _ in loss] == [0, 10, 20]
    np.testing.assert_allclose([v for _, v in loss], [v.mean() for v in values], rtol=1e-5)
    assert got["scalars"]["custom"] == [[5, 2.5]]
    hist = got["histograms"]["train/x"]
    for (step, mn, mx, num, sm, sq, limits, counts), v in zip(hist, values):
        assert (mn, mx, num) == (pytest.approx(v.min()), pytest.approx(v.max()), 50)
        assert sm == pytest.approx(v.astype(np.float64).sum(), rel=1e-5)
        assert sq == pytest.approx((v.astype(np.float64) ** 2).sum(), rel=1e-5)
        assert sum(counts) == 50 and len(limits) == len(counts)
        # each value in the bucket of the first limit above it
        edges = np.array(limits)
        want = np.bincount(np.searchsorted(edges, v, side="right"), minlength=len(edges))
        assert list(want[:len(counts)]) == counts


FLAGS_SCRIPT = r"""
import psgraph.compat.v1 as tf
flags = tf.app.flags
flags.DEFINE_string("job_name", "worker", "job")
flags.DEFINE_integer("task_index", 0, "task")
flags.DEFINE_float("lr", 0.1, "rate")
flags.DEFINE_boolean("sync", False, "sync replicas")
FLAGS = flags.FLAGS

def main(argv):
    print(FLAGS.job_name, FLAGS.task_index, FLAGS.lr, FLAGS.sync, argv[1:])
    return 3

if __name__ == "__main__":
    tf.app.run()
"""


def test_app_flags_and_run(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(FLAGS_SCRIPT)
    r = subprocess.run([sys.executable, str(script), "--job_name=ps", "--task_index", "2", "--lr=0.5",
                        "--sync", "extra"], capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert r.stdout.split() == ["ps", "2", "0.5", "True", "['extra']"]
    r = subprocess.run([sys.executable, str(script), "--nosync", "--task_index=x"], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "task_index" in r.stderr
