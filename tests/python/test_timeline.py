"""psgraph.timeline (docs/python.md, "Traces"): a Session.run with
RunOptions(trace_level=FULL_TRACE) and a RunMetadata records the step into the C library's
Chrome trace (the file psgraph train --trace writes); Timeline(...).generate_chrome_trace_format()
is a JSON document that names the step's ops."""
import json

import numpy as np
import pytest

import psgraph.compat.v1 as tf
from psgraph import timeline


def test_a_traced_step_writes_a_chrome_trace_naming_its_ops(sess, tmp_path):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    w = tf.get_variable("w", [4, 3], initializer=tf.ones_initializer())
    y = tf.matmul(x, w, name="product")
    loss = tf.reduce_sum(tf.nn.relu(y), name="loss")
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    sess.run(tf.global_variables_initializer())
    feed = {x: np.ones([2, 4], np.float32)}
    opts = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    meta = tf.RunMetadata()
    out = sess.run(loss, feed, options=opts, run_metadata=meta)
    assert out == pytest.approx(24.0)  # the traced run computes what an untraced one does
    path = tmp_path / "timeline.json"
    path.write_text(timeline.Timeline(meta.step_stats).generate_chrome_trace_format())
    doc = json.loads(path.read_text())
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in events}
    cats = {e.get("cat") for e in events}
    assert "product" in names and "loss" in names, sorted(names)
    assert "MatMul" in cats, sorted(c for c in cats if c)
    assert all(e["dur"] >= 0 for e in events)
    # a second traced run (the train step) is a trace of its own, with the update's ops
    meta2 = tf.RunMetadata()
    sess.run(train, feed, options=opts, run_metadata=meta2)
    names2 = {e["name"] for e in json.loads(meta2.step_stats.chrome_trace)["traceEvents"]
              if e.get("ph") == "X"}
    assert any("GradientDescent" in n for n in names2), sorted(names2)
    # untraced runs leave the metadata alone and record nothing
    meta3 = tf.RunMetadata()
    sess.run(loss, feed, run_metadata=meta3)
    assert meta3.step_stats is None
    with pytest.raises(TypeError, match="step_stats"):
        timeline.Timeline(None)
