"""Graphs, sessions, fetches, feeds, scopes, collections, errors: psgraph.compat.v1's core
behaves as TF 1.x's."""
import collections
import subprocess
import sys
import threading

import numpy as np
import pytest

import psgraph.compat.v1 as tf
from psgraph import errors


def test_run_nested_fetches(sess):
    a = tf.constant(2.0)
    b = tf.constant([1.0, 2.0])
    noop = tf.no_op()
    Pair = collections.namedtuple("Pair", "x y")
    out = sess.run({"a": a, "list": [a, (b, noop)], "nt": Pair(a, b)})
    assert out["a"] == 2.0 and isinstance(out["a"], np.float32)
    assert out["list"][0] == 2.0
    assert isinstance(out["list"][1], tuple) and out["list"][1][1] is None
    np.testing.assert_array_equal(out["list"][1][0], [1.0, 2.0])
    assert isinstance(out["nt"], Pair) and out["nt"].x == 2.0
    assert sess.run(noop) is None
    assert sess.run([]) == []


def test_a_nested_fetch_is_planned_once(sess):
    """A nested structure (MonitoredSession runs {"caller": ..., "hooks": {...}} each step)
    is prepared once, as a flat one: its second run makes no new callable; its kinds
    (list, tuple, namedtuple, dict) rebuild each time, and another structure of the same
    leaves is a plan of its own."""
    a = tf.constant(2.0)
    b = tf.constant([1.0, 2.0])
    Pair = collections.namedtuple("Pair", "x y")
    made = []
    real = sess._runner.make_callable

    def counting(*args):
        made.append(1)
        return real(*args)
    sess._runner.make_callable = counting
    fetch = {"caller": [a, (b,)], "hooks": {0: Pair(a, b), 1: []}}
    for _ in range(3):
        out = sess.run(fetch)
        assert isinstance(out["caller"][1], tuple) and isinstance(out["hooks"][0], Pair)
        assert out["hooks"][1] == [] and out["hooks"][0].x == 2.0
    assert len(made) == 1
    out = sess.run({"caller": [a, [b]], "hooks": {0: (a, b), 1: []}})
    assert isinstance(out["caller"][1], list) and type(out["hooks"][0]) is tuple
    assert len(made) == 2


def test_every_op_s_inputs_are_tensors_a_handle_a_resource(fresh_graph):
    """op.inputs of every op of a training graph, as a walk of the graph (a FLOP count:
    bench/tf1_dist_peer.py flops) reads them: an update takes its variable's handle, a
    tf.resource Tensor (its dtype code raised KeyError before)."""
    x = tf.placeholder(tf.float32, [4, 3])
    w = tf.get_variable("w", [3, 2])
    loss = tf.reduce_sum(tf.matmul(x, w))
    tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    kinds = {t.dtype for op in fresh_graph.get_operations() for t in op.inputs}
    assert tf.resource in kinds and tf.float32 in kinds
    assert tf.resource != tf.float32 and tf.as_dtype("float32") is tf.float32


def test_a_monitored_session_without_hooks_runs_the_caller_s_fetches(fresh_graph):
    """Without hooks a MonitoredSession's step is the caller's run as it is (no
    {"caller", "hooks"} around it): the same values, nested fetches rebuilt, one plan."""
    v = tf.Variable(0.0)
    inc = tf.assign_add(v, 1.0)
    with tf.train.MonitoredTrainingSession(save_checkpoint_secs=None, save_summaries_steps=None,
                                           log_step_count_steps=None) as m:
        made = []
        real = m._sess._runner.make_callable

        def counting(*args):
            made.append(1)
            return real(*args)
        m._sess._runner.make_callable = counting
        assert m.run(inc) == 1
        for step in (2, 3):
            out = m.run({"step": inc, "read": [v]})
            assert out["step"] == step and isinstance(out["read"], list)
        assert len(made) == 2 and not m.should_stop()


def test_feed_dict_and_names(sess):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    y = tf.placeholder(tf.float32, [3], name="y")
    z = tf.placeholder(tf.float32, [], name="z")
    s = x + y * z
    assert x.name == "x:0" and s.shape.as_list() == [None, 3]
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = sess.run(s, feed_dict={x: xv, y: [1.0, 2.0, 3.0], z: 2.0})
    np.testing.assert_allclose(got, xv + np.array([1, 2, 3], np.float32) * 2)
    # by name, and feeding a float64 array (converted as TF converts it)
    got = sess.run("add:0" if False else s.name, feed_dict={"x:0": xv.astype(np.float64), y: [0, 0, 0], z: 1})
    np.testing.assert_allclose(got, xv)


def test_feed_of_wrong_shape_names_the_tensor(sess):
    x = tf.placeholder(tf.float32, [None, 3], name="inp")
    with pytest.raises(ValueError, match=r"Cannot feed value of shape \[2, 4\] for Tensor 'inp:0'"):
        sess.run(x * 2.0, {x: np.zeros((2, 4), np.float32)})


def test_unfed_placeholder_is_an_error_naming_it(sess):
    x = tf.placeholder(tf.float32, [2], name="needed")
    with pytest.raises(errors.OpError, match="needed"):
        sess.run(x + 1.0)


def test_error_classes_are_tfs():
    """tf.errors as TF 1.x's API documents it: each class made as `XError(node_def, op,
    message)`, an OpError with TF's integer `error_code` (error_codes.proto's numbers), the
    code constants, exception_type_from_error_code / error_code_from_exception_type; psgraph
    also makes them from a message alone (its C errors)."""
    want = {"CancelledError": 1, "UnknownError": 2, "InvalidArgumentError": 3,
            "DeadlineExceededError": 4, "NotFoundError": 5, "AlreadyExistsError": 6,
            "PermissionDeniedError": 7, "ResourceExhaustedError": 8,
            "FailedPreconditionError": 9, "AbortedError": 10, "OutOfRangeError": 11,
            "UnimplementedError": 12, "InternalError": 13, "UnavailableError": 14,
            "DataLossError": 15, "UnauthenticatedError": 16}
    for name, code in want.items():
        cls = getattr(tf.errors, name)
        const = name[:-len("Error")]
        const = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(const)).upper()
        assert getattr(tf.errors, const) == code, name
        e = cls(None, None, "the message")
        assert isinstance(e, tf.errors.OpError) and issubclass(cls, tf.errors.OpError)
        assert (e.error_code, e.message, e.node_def, e.op) == (code, "the message", None, None)
        assert str(e) == "the message"
        assert tf.errors.exception_type_from_error_code(code) is cls
        assert tf.errors.error_code_from_exception_type(cls) == code
        with pytest.raises(TypeError):
            cls(None, None, "m", code)  # a subclass takes no error_code, as TF's
    e = tf.errors.OpError(None, None, "m", tf.errors.UNAVAILABLE)
    assert e.error_code == 14 and e.message == "m"
    assert tf.errors.UnavailableError("psgraph's form").error_code == tf.errors.UNAVAILABLE
    assert issubclass(tf.errors.OutOfMemoryError, tf.errors.ResourceExhaustedError)
    assert tf.errors.OK == 0


def test_build_error_is_a_value_error_naming_the_node(fresh_graph):
    a = tf.placeholder(tf.float32, [None, 3136])
    w = tf.Variable(tf.zeros([3137, 256]))
    with tf.variable_scope("cnn"), tf.variable_scope("fc1"):
        with pytest.raises(ValueError, match=r"node 'cnn/fc1/MatMul' \(MatMul\): .*3136.*3137"):
            tf.matmul(a, w)
    # the graph stays usable after the caught error
    with tf.Session() as s:
        assert s.run(tf.constant(1.0) + 1.0) == 2.0


def test_zero_copy_fetch_and_feed(sess):
    x = tf.placeholder(tf.float32, [4])
    y = x * 3.0
    a = np.ones(4, np.float32)
    out = sess.run(y, {x: a})
    assert out.flags["OWNDATA"] is False  # a view of psgraph's tensor, not a copy
    v = tf.Variable(tf.ones([3]))
    sess.run(v.initializer)
    first = sess.run(v)
    sess.run(v.assign([5.0, 5.0, 5.0]))
    np.testing.assert_array_equal(first, [1, 1, 1])  # a variable's value comes out as a copy


def test_session_runs_without_the_gil(sess):
    x = tf.placeholder(tf.float32, [None, 512])
    w = tf.constant(np.ones((512, 512), np.float32) / 512)
    y = x
    for _ in range(20):
        y = tf.matmul(y, w)
    feed = {x: np.ones((256, 512), np.float32)}
    sess.run(y, feed)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
    t = threading.Thread(target=ticker)
    t.start()
    try:
        for _ in range(5):
            sess.run(y, feed)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 100  # the other thread ran while the steps did


def test_scopes_and_names(fresh_graph):
    with tf.name_scope("outer"):
        a = tf.constant(1.0, name="c")
        with tf.name_scope("inner"):
            b = tf.add(a, a, name="sum")
    with tf.name_scope("outer"):
        c = tf.constant(2.0, name="c")
    assert a.op.name == "outer/c" and b.op.name == "outer/inner/sum"
    assert c.op.name == "outer_1/c"
    assert tf.constant(3.0, name="c").op.name == "c"
    assert tf.constant(3.0, name="c").op.name == "c_1"
    with tf.variable_scope("vs"):
        v = tf.get_variable("w", [2, 3])
        t = tf.identity(v, name="id")
    assert v.name == "vs/w:0" and t.op.name == "vs/id"
    with tf.variable_scope("vs", reuse=True):
        assert tf.get_variable("w", [2, 3]) is v
    with tf.variable_scope("vs", reuse=tf.AUTO_REUSE):
        assert tf.get_variable("w") is v
        u = tf.get_variable("u", [1])
    assert u.name == "vs/u:0"
    with pytest.raises(ValueError, match="Variable vs/w already exists"):
        with tf.variable_scope("vs"):
            tf.get_variable("w", [2, 3])
    with pytest.raises(ValueError, match="Variable vs/nope does not exist"):
        with tf.variable_scope("vs", reuse=True):
            tf.get_variable("nope", [1])
    assert fresh_graph.get_tensor_by_name("vs/id:0") is t


def test_collections_and_initializers(sess):
    v = tf.Variable(tf.ones([2]), name="v")
    w = tf.get_variable("w", [3], initializer=tf.constant_initializer(2.5), trainable=False)
    assert tf.global_variables() == [v, w]
    assert tf.trainable_variables() == [v]
    tf.add_to_collection("mine", v)
    assert tf.get_collection("mine") == [v]
    assert tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="w") == [w]
    sess.run(tf.global_variables_initializer())
    np.testing.assert_array_equal(sess.run(w), [2.5, 2.5, 2.5])
    np.testing.assert_array_equal(v.eval(session=sess), [1, 1])


def test_control_dependencies_order_the_read(sess):
    v = tf.Variable(0.0)
    inc = tf.assign_add(v, 1.0)
    with tf.control_dependencies([inc]):
        after = v.read_value() + 0.0
    sess.run(v.initializer)
    assert sess.run(after) == 1.0
    assert sess.run(after) == 2.0
    grouped = tf.group(inc, tf.no_op())
    sess.run(grouped)
    assert sess.run(v) == 3.0


def test_placeholder_with_default(sess):
    d = tf.placeholder_with_default(tf.constant([1.0, 2.0]), shape=[None])
    y = d * 2.0
    np.testing.assert_array_equal(sess.run(y), [2, 4])
    np.testing.assert_array_equal(sess.run(y, {d: [1.0, 1.0, 1.0]}), [2, 2, 2])


def test_device_and_config(fresh_graph):
    with tf.device("/cpu:0"):
        a = tf.constant(1.0)
    assert "cpu" in a.device.lower()
    cfg = tf.ConfigProto(device_filters=["/job:ps"], intra_op_parallelism_threads=2,
                         inter_op_parallelism_threads=1, allow_soft_placement=True)
    with tf.Session(config=cfg) as s:
        assert s.run(a) == 1.0
    with pytest.raises(ValueError, match='no "bogus" field'):
        tf.ConfigProto(bogus=1)
    tf.disable_v2_behavior()
    tf.disable_eager_execution()


def test_seeds_make_draws_repeatable():
    def draw():
        with tf.Graph().as_default():
            tf.set_random_seed(7)
            r = tf.random_normal([5])
            with tf.Session() as s:
                return s.run(r)
    np.testing.assert_array_equal(draw(), draw())


def test_unsupported_name_raises_attribute_error():
    with pytest.raises(AttributeError, match=r"psgraph does not have tf\.while_loop yet"):
        tf.while_loop
    with pytest.raises(AttributeError, match=r"psgraph does not have tf\.nn\.ctc_loss yet"):
        tf.nn.ctc_loss
    with pytest.raises(AttributeError, match=r"psgraph does not have tf\.train\.string_input_producer yet"):
        tf.train.string_input_producer
    with pytest.raises(AttributeError, match=r"psgraph does not have tf\.math\.cumsum yet"):
        tf.math.cumsum
    assert tf.math.log is tf.log and tf.random.normal is tf.random_normal
    assert tf.compat.v1 is tf


def test_a_script_with_an_unsupported_name_fails_naming_it(tmp_path):
    script = tmp_path / "tf1_script.py"
    script.write_text("import psgraph.compat.v1 as tf\n"
                      "x = tf.placeholder(tf.float32, [None, 4])\n"
                      "y = tf.contrib.layers.fully_connected(x, 3)\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "AttributeError: psgraph does not have tf.contrib yet" in r.stderr


def test_closed_session_and_eval_without_session(fresh_graph):
    a = tf.constant(1.0)
    with pytest.raises(ValueError, match="No default session"):
        a.eval()
    s = tf.Session()
    s.close()
    with pytest.raises(RuntimeError, match="closed Session"):
        s.run(a)
    with tf.Session() as s2:
        assert a.eval() == 1.0 and s2 is tf.get_default_session()


def test_make_callable(sess):
    x = tf.placeholder(tf.float32, [2])
    f = sess.make_callable([x * 2.0, x + 1.0], feed_list=[x])
    a, b = f(np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(a, [2, 4])
    np.testing.assert_array_equal(b, [2, 3])



_DENORMALS = """
import numpy as np
import psgraph.compat.v1 as tf
x = np.full([4], 2e-38, np.float32)          # normal; a quarter of it is a denormal
with tf.Session() as s:
    print(s.run(tf.constant(x) * tf.constant(np.float32(0.25))).tolist())
print((x * np.float32(0.25)).tolist())
"""


@pytest.mark.parametrize("mode", [None, "flush", "keep", "bad"])
def test_denormals(mode):
    """psgraph's kernels flush denormal floats to zero, as TensorFlow's CPU kernels do
    (PSGRAPH_DENORMALS=keep keeps them, as numpy does); numpy in the same process, after a
    psgraph run, still computes them: the caller's thread keeps its own mode."""
    import ast
    import os
    env = {k: v for k, v in os.environ.items() if k != "PSGRAPH_DENORMALS"}
    if mode:
        env["PSGRAPH_DENORMALS"] = mode
    r = subprocess.run([sys.executable, "-c", _DENORMALS], capture_output=True, text=True,
                       env=env)
    if mode == "bad":
        assert r.returncode != 0
        assert "PSGRAPH_DENORMALS='bad': expected flush or keep" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    ours, numpy_after = (ast.literal_eval(line) for line in r.stdout.splitlines())
    assert numpy_after == [float(np.float32(5e-39))] * 4
    assert ours == ([0.0] * 4 if mode != "keep" else numpy_after)
