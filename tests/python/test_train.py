"""tf.train and tf.layers against numpy: each optimizer's steps (the C library's update ops)
against TensorFlow's formulas, the global step, the schedules, moving averages, layers'
variable names and batch normalization's moving statistics, the initializers."""
import numpy as np
import pytest

import psgraph.compat.v1 as tf

W0 = np.array([0.5, -1.0, 2.0, 0.1], np.float32)
C = np.array([1.0, -0.5, 0.25, 3.0], np.float32)


def grad(w):
    return C + w  # of sum(w * C) + sum(w^2) / 2


def run_steps(opt, steps=3):
    w = tf.Variable(W0, name="w")
    loss = tf.reduce_sum(w * tf.constant(C)) + 0.5 * tf.reduce_sum(tf.square(w))
    gs = tf.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=gs)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        for _ in range(steps):
            s.run(train)
        return s.run(w), s.run(gs), opt


def ref(update, state, steps=3):
    w = W0.astype(np.float64)
    for t in range(1, steps + 1):
        w = update(w, grad(w), state, t)
    return w


def test_sgd_and_momentum():
    got, step, _ = run_steps(tf.train.GradientDescentOptimizer(0.1))
    np.testing.assert_allclose(got, ref(lambda w, g, s, t: w - 0.1 * g, {}), rtol=1e-5)
    assert step == 3

    def mom(w, g, s, t, nesterov=False):
        s["a"] = 0.9 * s.get("a", 0) + g
        return w - 0.1 * g - 0.1 * 0.9 * s["a"] if nesterov else w - 0.1 * s["a"]
    got, _, opt = run_steps(tf.train.MomentumOptimizer(0.1, 0.9))
    np.testing.assert_allclose(got, ref(mom, {}), rtol=1e-5)
    assert opt.get_slot_names() == ["Momentum"]
    slot = opt.get_slot(tf.trainable_variables()[-1], "Momentum")
    assert slot.name == "w_1/Momentum:0"


def test_nesterov():
    def nest(w, g, s, t):
        s["a"] = 0.9 * s.get("a", 0) + g
        return w - 0.1 * g - 0.1 * 0.9 * s["a"]
    got, _, _ = run_steps(tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True))
    np.testing.assert_allclose(got, ref(nest, {}), rtol=1e-5)


def test_adam():
    def adam(w, g, s, t, lr=0.01, b1=0.9, b2=0.999, eps=1e-8):
        s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        return w - lr_t * s["m"] / (np.sqrt(s["v"]) + eps)
    got, _, _ = run_steps(tf.train.AdamOptimizer(0.01))
    np.testing.assert_allclose(got, ref(adam, {}), rtol=1e-5)
    names = sorted(v.op.name for v in tf.global_variables())
    assert {"w/Adam", "w/Adam_1", "beta1_power", "beta2_power"} <= set(names)


def test_rmsprop():
    def rms(w, g, s, t, lr=0.01, rho=0.9, mom=0.5, eps=1e-10):
        s["ms"] = rho * s.get("ms", 1.0) + (1 - rho) * g * g
        s["mom"] = mom * s.get("mom", 0) + lr * g / np.sqrt(s["ms"] + eps)
        return w - s["mom"]
    got, _, _ = run_steps(tf.train.RMSPropOptimizer(0.01, decay=0.9, momentum=0.5))
    np.testing.assert_allclose(got, ref(rms, {}), rtol=1e-5)


def test_adagrad():
    def ada(w, g, s, t):
        s["acc"] = s.get("acc", 0.1) + g * g
        return w - 0.1 * g / np.sqrt(s["acc"])
    got, _, _ = run_steps(tf.train.AdagradOptimizer(0.1))
    np.testing.assert_allclose(got, ref(ada, {}), rtol=1e-5)


def test_ftrl():
    def ftrl(w, g, s, t, lr=0.1, l1=0.01, l2=0.02):
        acc = s.get("acc", 0.1)
        new = acc + g * g
        sigma = (np.sqrt(new) - np.sqrt(acc)) / lr
        s["lin"] = s.get("lin", 0) + g - sigma * w
        s["acc"] = new
        quad = np.sqrt(new) / lr + 2 * l2
        return np.where(np.abs(s["lin"]) > l1, (np.sign(s["lin"]) * l1 - s["lin"]) / quad, 0.0)
    got, _, _ = run_steps(tf.train.FtrlOptimizer(0.1, l1_regularization_strength=0.01,
                                                 l2_regularization_strength=0.02))
    np.testing.assert_allclose(got, ref(ftrl, {}), rtol=1e-4, atol=1e-6)


def test_compute_and_apply_gradients_with_var_list():
    a = tf.Variable([1.0, 2.0])
    b = tf.Variable([3.0])
    loss = tf.reduce_sum(tf.square(a)) + tf.reduce_sum(b)
    opt = tf.train.GradientDescentOptimizer(0.5)
    gv = opt.compute_gradients(loss, var_list=[a])
    assert [v for _, v in gv] == [a]
    train = opt.apply_gradients(gv)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        np.testing.assert_allclose(s.run(gv[0][0]), [2.0, 4.0])
        s.run(train)
        np.testing.assert_allclose(s.run(a), [0.0, 0.0])
        np.testing.assert_allclose(s.run(b), [3.0])  # not in var_list


def test_learning_rate_schedules():
    gs = tf.train.get_or_create_global_step()
    lr = tf.train.exponential_decay(0.1, gs, decay_steps=10, decay_rate=0.5)
    lr_stair = tf.train.exponential_decay(0.1, gs, 10, 0.5, staircase=True)
    pw = tf.train.piecewise_constant(gs, [5, 10], [1.0, 0.5, 0.1])
    w = tf.Variable([1.0])
    train = tf.train.GradientDescentOptimizer(lr).minimize(tf.reduce_sum(w), global_step=gs)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        for step in range(13):
            got = s.run([lr, lr_stair, pw])
            np.testing.assert_allclose(got[0], 0.1 * 0.5 ** (step / 10), rtol=1e-6)
            np.testing.assert_allclose(got[1], 0.1 * 0.5 ** (step // 10), rtol=1e-6)
            assert got[2] == np.float32(1.0 if step <= 5 else 0.5 if step <= 10 else 0.1)
            s.run(train)
        assert s.run(gs) == 13


def test_exponential_moving_average():
    v = tf.Variable([1.0, 2.0], name="v")
    step = tf.Variable(0, name="n", trainable=False)
    ema = tf.train.ExponentialMovingAverage(0.9, num_updates=step)
    upd = ema.apply([v])
    shadow = ema.average(v)
    assert shadow.name == "v/ExponentialMovingAverage:0"
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        want = np.array([1.0, 2.0])
        for k, val in enumerate([[3.0, 3.0], [5.0, -1.0]]):
            v.load(np.array(val, np.float32), s)
            step.load(np.int32(k), s)
            decay = min(0.9, (1 + k) / (10 + k))
            want = want - (1 - decay) * (want - np.array(val))
            s.run(upd)
            np.testing.assert_allclose(s.run(shadow), want, rtol=1e-5)
    assert ema.variables_to_restore()["v/ExponentialMovingAverage"] is v


def test_layer_variable_names():
    x = tf.placeholder(tf.float32, [None, 8, 8, 3])
    h = tf.layers.conv2d(x, 4, 3)
    h = tf.layers.batch_normalization(h, training=True)
    h = tf.layers.dense(tf.layers.flatten(h), 5)
    tf.layers.dense(h, 2, name="out")
    names = [v.op.name for v in tf.global_variables()]
    assert names == ["conv2d/kernel", "conv2d/bias", "batch_normalization/gamma",
                     "batch_normalization/beta", "batch_normalization/moving_mean",
                     "batch_normalization/moving_variance", "dense/kernel", "dense/bias",
                     "out/kernel", "out/bias"]
    assert [v.op.name for v in tf.trainable_variables()] == [n for n in names if "moving" not in n]
    assert tf.global_variables()[0].shape.as_list() == [3, 3, 3, 4]
    tf.layers.dense(h, 2)
    assert tf.global_variables()[-2].op.name == "dense_1/kernel"


def test_batch_norm_training_and_inference(rng):
    xv = rng.standard_normal((16, 3)).astype(np.float32) * 2 + 1
    x = tf.placeholder(tf.float32, [None, 3])
    training = tf.placeholder(tf.bool, [])
    y = tf.layers.batch_normalization(x, momentum=0.9, epsilon=1e-3, training=training)
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    assert len(updates) == 2
    mm, mv = tf.global_variables()[2:4]
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        got, _ = s.run([y, updates], {x: xv, training: True})
        mean, var = xv.mean(0), xv.var(0)
        np.testing.assert_allclose(got, (xv - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(s.run(mm), 0.1 * mean, rtol=1e-5)
        np.testing.assert_allclose(s.run(mv), 0.9 + 0.1 * xv.var(0, ddof=1), rtol=1e-5)
        inf = s.run(y, {x: xv, training: False})
        np.testing.assert_allclose(inf, (xv - s.run(mm)) / np.sqrt(s.run(mv) + 1e-3), rtol=1e-4, atol=1e-4)
        before = s.run(mm)
        s.run(updates, {x: xv, training: False})  # inference: the statistics stay
        np.testing.assert_allclose(s.run(mm), before)


def test_batch_norm_virtual_batches(rng):
    # TF's virtual_batch_size: the batch as [V, B / V, ...], each of the B / V groups (every
    # (B / V)-th row) normalized alone, the moving statistics toward the groups' mean and biased
    # variance averaged (TF 2.21's layer gives the same to float rounding, gradients too)
    xv = (rng.standard_normal((8, 2, 2, 3)) * 2 + 1).astype(np.float32)
    x = tf.placeholder(tf.float32, [8, 2, 2, 3])
    y = tf.layers.batch_normalization(x, momentum=0.9, epsilon=1e-3, training=True, virtual_batch_size=4)
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    mm, mv = tf.global_variables()[2:4]
    groups = xv.reshape(4, 2, 2, 2, 3)  # [V, B / V, ...]: group k is groups[:, k]
    mean, var = groups.mean((0, 2, 3), keepdims=True), groups.var((0, 2, 3), keepdims=True)
    want = ((groups - mean) / np.sqrt(var + 1e-3)).reshape(8, 2, 2, 3)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        got, _ = s.run([y, updates], {x: xv})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(s.run(mm), 0.1 * mean.mean((0, 1, 2, 3)).ravel(), rtol=1e-5)
        np.testing.assert_allclose(s.run(mv), 0.9 + 0.1 * var.mean((0, 1, 2, 3)).ravel(), rtol=1e-5)
        whole = (xv - xv.mean((0, 1, 2))) / np.sqrt(xv.var((0, 1, 2)) + 1e-3)
        assert np.abs(got - whole).max() > 1e-2  # not the whole batch's moments
    with pytest.raises(ValueError, match="virtual_batch_size=3"):
        tf.layers.batch_normalization(x, training=True, virtual_batch_size=3)


def test_layers_dense_and_dropout(rng):
    xv = rng.standard_normal((4, 3)).astype(np.float32)
    x = tf.constant(xv)
    y = tf.layers.dense(x, 2, activation=tf.nn.relu, kernel_initializer=tf.constant_initializer(0.5),
                        bias_initializer=tf.constant_initializer(-0.25))
    z = tf.layers.dense(x, 2, activation=tf.sigmoid, use_bias=False,
                        kernel_initializer=tf.ones_initializer())
    t = tf.placeholder(tf.bool, [])
    d = tf.layers.dropout(tf.ones([100, 100]), rate=0.5, training=t)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        np.testing.assert_allclose(s.run(y), np.maximum(xv @ np.full((3, 2), 0.5) - 0.25, 0), rtol=1e-5)
        np.testing.assert_allclose(s.run(z), 1 / (1 + np.exp(-(xv @ np.ones((3, 2))))), rtol=1e-5)
        off = s.run(d, {t: False})
        assert (off == 1).all()
        on = s.run(d, {t: True})
        assert abs((on == 0).mean() - 0.5) < 0.03 and set(np.unique(on)) == {0.0, 2.0}


def test_initializers():
    tf.set_random_seed(5)
    shapes = [400, 300]
    vs = {
        "glorot": tf.get_variable("g", shapes, initializer=tf.glorot_uniform_initializer()),
        "vs_uniform": tf.get_variable("u", shapes, initializer=tf.variance_scaling_initializer(
            2.0, "fan_in", "uniform")),
        "vs_normal": tf.get_variable("n", shapes, initializer=tf.variance_scaling_initializer(1.0, "fan_out")),
        "normal": tf.get_variable("rn", shapes, initializer=tf.random_normal_initializer(1.0, 0.5)),
        "trunc": tf.get_variable("tn", shapes, initializer=tf.truncated_normal_initializer(0.0, 0.1)),
        "uniform": tf.get_variable("ru", shapes, initializer=tf.random_uniform_initializer(0, 2)),
        "zeros": tf.get_variable("z", [3], initializer=tf.zeros_initializer()),
        "ones": tf.get_variable("o", [3], initializer=tf.ones_initializer()),
        "const": tf.get_variable("c", [2, 2], initializer=tf.constant_initializer([[1, 2], [3, 4]])),
        "default": tf.get_variable("d", shapes),
    }
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        v = {k: s.run(t) for k, t in vs.items()}
    lim = np.sqrt(6 / 700)
    assert np.abs(v["glorot"]).max() <= lim and np.abs(v["glorot"]).max() > 0.95 * lim
    assert np.abs(v["default"]).max() <= lim
    assert np.abs(v["vs_uniform"]).max() <= np.sqrt(3 * 2 / 400)
    assert abs(v["vs_normal"].std() - np.sqrt(1 / 300)) < 0.05 * np.sqrt(1 / 300)
    assert abs(v["normal"].mean() - 1.0) < 0.01 and abs(v["normal"].std() - 0.5) < 0.01
    assert np.abs(v["trunc"]).max() <= 0.2
    assert v["uniform"].min() >= 0 and v["uniform"].max() < 2 and abs(v["uniform"].mean() - 1) < 0.02
    np.testing.assert_array_equal(v["zeros"], [0, 0, 0])
    np.testing.assert_array_equal(v["ones"], [1, 1, 1])
    np.testing.assert_array_equal(v["const"], [[1, 2], [3, 4]])


def test_regularization_loss():
    w = tf.get_variable("w", [2], initializer=tf.constant_initializer(3.0),
                        regularizer=lambda v: 0.5 * tf.nn.l2_loss(v))
    assert tf.losses.get_regularization_loss() is not None
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        assert s.run(tf.losses.get_regularization_loss()) == pytest.approx(0.5 * 9.0)
    with tf.Graph().as_default():
        with tf.Session() as s:
            assert s.run(tf.losses.get_regularization_loss()) == 0.0
    del w


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_a_global_step_of_the_users_own(fresh_graph, dtype):
    """TF 1.x's `tf.Variable(0, name="global_step", trainable=False)` passed to minimize is
    advanced once a step, and every variable the optimizer made is initialized."""
    gs = tf.Variable(0, name="global_step", trainable=False, dtype=getattr(tf, dtype))
    w = tf.Variable(tf.zeros([3]), name="w")
    op = tf.train.AdamOptimizer(0.01).minimize(tf.reduce_sum((w - 1.0) * (w - 1.0)),
                                               global_step=gs)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        for _ in range(3):
            s.run(op)
        assert s.run(gs) == 3
