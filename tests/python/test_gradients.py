"""Gradients of graphs built from Python (tf.gradients, so psgraph's autodiff) against
central finite differences of the same graphs."""
import numpy as np

import psgraph.compat.v1 as tf


def fd_check(loss, xs, feed, sess, eps=1e-2, tol=2e-2):
    """xs: placeholders (fed from feed) or variables; each gradient element against
    (f(x + eps) - f(x - eps)) / 2 eps, in float64 sums of float32 runs."""
    grads = tf.gradients(loss, xs)
    got = sess.run(grads, feed)
    for x, g in zip(xs, got):
        assert g is not None, "no gradient for %s" % x.name
        is_var = hasattr(x, "load")
        base = sess.run(x) if is_var else feed[x]
        base = np.array(base, np.float32)
        num = np.zeros(base.shape, np.float64)
        it = np.nditer(base, flags=["multi_index"])
        for _ in it:
            i = it.multi_index
            vals = []
            for sign in (1, -1):
                p = base.copy()
                p[i] += sign * eps
                if is_var:
                    x.load(p, sess)
                    vals.append(float(sess.run(loss, feed)))
                else:
                    f = dict(feed)
                    f[x] = p
                    vals.append(float(sess.run(loss, f)))
            num[i] = (vals[0] - vals[1]) / (2 * eps)
        if is_var:
            x.load(base, sess)
        err = np.abs(np.asarray(g, np.float64) - num).max() / max(1.0, np.abs(num).max())
        assert err < tol, "%s: analytic %s vs numeric %s (error %.3g)" % (x.name, g, num, err)


def session():
    s = tf.Session(config=tf.ConfigProto(intra_op_parallelism_threads=1))
    s.run(tf.global_variables_initializer())
    return s


def test_mlp_loss(rng):
    x = tf.placeholder(tf.float32, [4, 6])
    y = tf.placeholder(tf.int32, [4])
    w = tf.Variable(rng.standard_normal((6, 5)).astype(np.float32) * 0.5)
    b = tf.Variable(rng.standard_normal(5).astype(np.float32) * 0.1)
    h = tf.nn.relu(tf.matmul(x, w) + b)
    logits = tf.layers.dense(h, 3)
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    feed = {x: rng.standard_normal((4, 6)).astype(np.float32), y: rng.integers(0, 3, 4).astype(np.int32)}
    with session() as s:
        fd_check(loss, [x, w, b] + tf.trainable_variables()[2:], feed, s)


def test_elementwise_mixture(rng):
    a = tf.placeholder(tf.float32, [3, 4])
    c = tf.placeholder(tf.float32, [4])
    p = tf.sqrt(tf.square(a) + 1.0)
    y = tf.maximum(a, c) * tf.sigmoid(a) - tf.minimum(a, 0.3) / p + tf.tanh(c) * tf.exp(-a) \
        + tf.log(p) * (p ** 1.5) - tf.abs(c)
    loss = tf.reduce_sum(y * y)
    feed = {a: rng.standard_normal((3, 4)).astype(np.float32),
            c: rng.standard_normal(4).astype(np.float32)}
    with session() as s:
        fd_check(loss, [a, c], feed, s)


def test_reductions_slices_and_shapes(rng):
    a = tf.placeholder(tf.float32, [3, 4, 2])
    m = tf.reduce_max(a, axis=1)
    k = tf.reduce_mean(a, axis=[0, 2], keepdims=True)
    parts = tf.concat([a[:, 1:3, 0], tf.reshape(a[0], [1, 8])[:, :2]], axis=0)
    loss = tf.reduce_sum(m * m) + tf.reduce_sum(tf.square(a - k)) + tf.reduce_sum(tf.exp(parts)) \
        + tf.reduce_sum(tf.squeeze(tf.expand_dims(a, 0)) * 0.5) + tf.nn.l2_loss(a)
    feed = {a: rng.standard_normal((3, 4, 2)).astype(np.float32)}
    with session() as s:
        fd_check(loss, [a], feed, s)


def test_cnn_layers(rng):
    x = tf.placeholder(tf.float32, [2, 6, 6, 2])
    h = tf.layers.conv2d(x, 3, 3, padding="same", activation=tf.nn.relu)
    h = tf.layers.max_pooling2d(h, 2, 2)
    h = tf.layers.conv2d(h, 2, 2, strides=1, padding="valid")
    h = tf.layers.average_pooling2d(h, 2, 1)
    h = tf.layers.flatten(h)
    loss = tf.reduce_sum(tf.square(tf.layers.dense(h, 2)))
    feed = {x: rng.standard_normal((2, 6, 6, 2)).astype(np.float32)}
    with session() as s:
        # a smaller step: fewer ReLU and max-pool kinks crossed
        fd_check(loss, [x] + tf.trainable_variables(), feed, s, eps=2e-3, tol=3e-2)


def test_batch_norm_and_logistic(rng):
    x = tf.placeholder(tf.float32, [8, 3])
    z = tf.placeholder(tf.float32, [8, 2])
    h = tf.layers.batch_normalization(x, training=True)
    logits = tf.layers.dense(h, 2, activation=tf.tanh)
    loss = tf.losses.sigmoid_cross_entropy(z, logits) + \
        tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.nn.softmax(z), logits=logits))
    feed = {x: rng.standard_normal((8, 3)).astype(np.float32),
            z: rng.integers(0, 2, (8, 2)).astype(np.float32)}
    with session() as s:
        fd_check(loss, [x] + tf.trainable_variables(), feed, s, tol=3e-2)


def test_embedding_lookup_gradient(rng):
    table = tf.Variable(rng.standard_normal((7, 3)).astype(np.float32))
    ids = tf.constant(np.array([1, 4, 1, 6], np.int64))
    e = tf.nn.embedding_lookup(table, ids)
    loss = tf.reduce_sum(tf.square(e) * tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3)))
    assert tf.gradients(loss, table)[0].op.type == "IndexedSlices"  # only the touched rows
    with session() as s:
        fd_check(loss, [table], {}, s)


def test_grad_ys_and_unconnected(rng):
    a = tf.placeholder(tf.float32, [3])
    b = tf.placeholder(tf.float32, [3])
    y = a * a
    ga, gb = tf.gradients(y, [a, b], grad_ys=tf.constant([1.0, 2.0, 3.0]))
    assert gb is None
    with tf.Session() as s:
        np.testing.assert_allclose(s.run(ga, {a: [1.0, 1.0, 2.0]}), [2.0, 4.0, 12.0])
