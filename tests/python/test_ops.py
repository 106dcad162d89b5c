"""Each array, math and nn function of psgraph.compat.v1 against a numpy reference."""
import numpy as np
import pytest

import psgraph.compat.v1 as tf


def run(t, feed=None):
    with tf.Session(config=tf.ConfigProto(intra_op_parallelism_threads=1)) as s:
        s.run(tf.global_variables_initializer())
        return s.run(t, feed)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol)


def test_constants_and_fills():
    close(run(tf.constant([[1, 2], [3, 4]], tf.float32)), [[1, 2], [3, 4]])
    assert tf.constant([1, 2]).dtype == tf.int32 and tf.constant(1.5).dtype == tf.float32
    close(run(tf.constant(7.0, shape=[2, 3])), np.full((2, 3), 7.0))
    close(run(tf.zeros([2, 3])), np.zeros((2, 3)))
    close(run(tf.ones([4])), np.ones(4))
    z = run(tf.zeros([3], tf.int64))
    assert z.dtype == np.int64 and (z == 0).all()
    close(run(tf.fill([2, 2], 3.5)), np.full((2, 2), 3.5))
    close(run(tf.zeros_like(tf.constant([[1.0, 2.0]]))), [[0, 0]])
    close(run(tf.ones_like(tf.constant([[1.0, 2.0]]))), [[1, 1]])


def test_random_draws():
    tf.set_random_seed(3)
    n = run(tf.random_normal([20000], mean=2.0, stddev=0.5))
    assert abs(n.mean() - 2.0) < 0.02 and abs(n.std() - 0.5) < 0.02
    t = run(tf.truncated_normal([20000], stddev=1.0))
    assert np.abs(t).max() <= 2.0 and 0.8 < t.std() < 0.92  # TF's 2-sigma truncation
    u = run(tf.random_uniform([20000], minval=-3, maxval=5))
    assert u.min() >= -3 and u.max() < 5 and abs(u.mean() - 1.0) < 0.1
    r = tf.random_normal([4])
    with tf.Session() as s:
        assert not np.array_equal(s.run(r), s.run(r))  # new numbers every step


def test_elementwise(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    p = np.abs(a) + 0.5
    ta, tb, tp = tf.constant(a), tf.constant(b), tf.constant(p)
    close(run(ta + tb), a + b)
    close(run(ta - tb), a - b)
    close(run(ta * tb), a * b)
    close(run(ta / (tp)), a / p)
    close(run(2.0 * ta), 2 * a)
    close(run(1.0 - ta), 1 - a)
    close(run(-ta), -a)
    close(run(tf.square(ta)), a ** 2)
    close(run(tf.sqrt(tp)), np.sqrt(p))
    close(run(tf.exp(ta)), np.exp(a))
    close(run(tf.log(tp)), np.log(p))
    close(run(tf.maximum(ta, tb)), np.maximum(a, b))
    close(run(tf.minimum(ta, 0.0)), np.minimum(a, 0))
    close(run(tf.abs(ta)), np.abs(a))
    close(run(tp ** 1.5), p ** 1.5)
    close(run(tf.sigmoid(ta)), 1 / (1 + np.exp(-a)))
    close(run(tf.tanh(ta)), np.tanh(a))
    close(run(tf.add_n([ta, ta, ta])), 3 * a)
    close(run(tf.clip_by_value(ta, -0.5, 0.5)), np.clip(a, -0.5, 0.5))


def test_comparisons(rng):
    a = rng.integers(0, 3, (4, 5)).astype(np.float32)
    b = rng.integers(0, 3, (5,)).astype(np.float32)
    ta, tb = tf.constant(a), tf.constant(b)
    for got, want in [(ta < tb, a < b), (ta <= tb, a <= b), (ta > tb, a > b), (ta >= tb, a >= b),
                      (tf.equal(ta, tb), a == b), (tf.not_equal(ta, tb), a != b),
                      (tf.equal(ta, ta), a == a), (tf.greater(tf.constant([1, 5], tf.int64), 3),
                                                   np.array([False, True]))]:
        r = run(got)
        assert r.dtype == np.bool_
        np.testing.assert_array_equal(r, want)


def test_matmul_and_reductions(rng):
    a = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    ta, tb = tf.constant(a), tf.constant(b)
    close(run(tf.matmul(ta, tb)), a @ b)
    close(run(ta @ tb), a @ b)
    close(run(tf.matmul(tb, ta, transpose_a=True, transpose_b=True)), b.T @ a.T)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    tx = tf.constant(x)
    close(run(tf.reduce_sum(tx)), x.sum())
    close(run(tf.reduce_sum(tx, axis=1)), x.sum(1))
    close(run(tf.reduce_mean(tx, axis=[0, 2], keepdims=True)), x.mean((0, 2), keepdims=True))
    close(run(tf.reduce_mean(tx, reduction_indices=-1)), x.mean(-1))
    close(run(tf.reduce_max(tx)), x.max())
    close(run(tf.reduce_max(tx, axis=[0, 2])), x.max((0, 2)))
    am = run(tf.argmax(tx, axis=2))
    assert am.dtype == np.int64
    np.testing.assert_array_equal(am, x.argmax(2))
    assert run(tf.argmax(tx, 2, output_type=tf.int32)).dtype == np.int32


def test_shapes_and_casts(rng):
    x = rng.standard_normal((2, 1, 3)).astype(np.float32)
    tx = tf.constant(x)
    close(run(tf.reshape(tx, [3, -1])), x.reshape(3, -1))
    close(run(tf.squeeze(tx)), x.squeeze())
    close(run(tf.squeeze(tx, axis=[1])), x.squeeze(1))
    close(run(tf.expand_dims(tx, 0)), x[None])
    close(run(tf.expand_dims(tx, -1)), x[..., None])
    close(run(tf.concat([tx, tx], axis=1)), np.concatenate([x, x], 1))
    np.testing.assert_array_equal(run(tf.shape(tx)), [2, 1, 3])
    c = run(tf.cast(tf.constant([1.7, -2.2]), tf.int32))
    assert c.dtype == np.int32
    np.testing.assert_array_equal(c, [1, -2])
    np.testing.assert_array_equal(run(tf.cast(tf.constant([True, False]), tf.float32)), [1, 0])
    oh = run(tf.one_hot(tf.constant([0, 2, 5]), 4))
    np.testing.assert_array_equal(oh, np.eye(4)[[0, 2]].tolist() + [[0, 0, 0, 0]])
    close(run(tf.one_hot(tf.constant([1]), 3, on_value=5.0, off_value=-1.0)), [[-1, 5, -1]])
    p = tf.placeholder(tf.float32, [None, 4])
    n = tf.cast(tf.shape(p)[0], tf.float32)
    assert run(n, {p: np.zeros((7, 4), np.float32)}) == 7.0
    close(run(tf.gather(tf.constant(x.reshape(2, 3)), tf.constant([1, 0, 1]))), x.reshape(2, 3)[[1, 0, 1]])


def test_half_dtypes():
    h = tf.placeholder(tf.float16, [3])
    b = tf.placeholder(tf.bfloat16, [3])
    v = np.array([1.5, -2.25, 1024.0], np.float32)
    got_h = run(tf.cast(h, tf.float32), {h: v.astype(np.float16)})
    got_b = run(tf.cast(b, tf.float32), {b: v})  # bfloat16 fed as float32, rounded by C
    np.testing.assert_array_equal(got_h, v)
    np.testing.assert_array_equal(got_b, v)
    back = run(tf.cast(tf.constant(v), tf.bfloat16))  # fetched as float32
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, v)


def test_indexing(rng):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    tx = tf.constant(x)
    for key in [1, -1, (slice(1, 3),), (slice(None), 2), (Ellipsis, 0), (slice(None, None), slice(1, None), -2),
                (None, 0), (0, None, slice(2, 4))]:
        close(run(tx[key]), x[key])
    p = tf.placeholder(tf.float32, [None, 6])
    close(run(p[:, 1:3], {p: x[0]}), x[0][:, 1:3])
    close(run(p[:, 2], {p: x[0]}), x[0][:, 2])
    with pytest.raises(NotImplementedError, match="strided"):
        tx[::2]


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_nn_activations_and_losses(rng):
    z = rng.standard_normal((6, 5)).astype(np.float32)
    y = rng.integers(0, 5, 6)
    tz = tf.constant(z)
    close(run(tf.nn.relu(tz)), np.maximum(z, 0))
    close(run(tf.nn.sigmoid(tz)), 1 / (1 + np.exp(-z)))
    close(run(tf.nn.tanh(tz)), np.tanh(z))
    close(run(tf.nn.softmax(tz)), softmax(z))
    close(run(tf.nn.log_softmax(tz)), np.log(softmax(z)))
    xent = -np.log(softmax(z)[np.arange(6), y])
    close(run(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant(y.astype(np.int64)),
                                                             logits=tz)), xent)
    onehot = np.eye(5, dtype=np.float32)[y]
    close(run(tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.constant(onehot), logits=tz)), xent)
    zz = rng.integers(0, 2, (6, 5)).astype(np.float32)
    sig = 1 / (1 + np.exp(-z))
    close(run(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.constant(zz), logits=tz)),
          -zz * np.log(sig) - (1 - zz) * np.log(1 - sig))
    close(run(tf.losses.sparse_softmax_cross_entropy(tf.constant(y.astype(np.int32)), tz)), xent.mean())
    close(run(tf.nn.l2_loss(tz)), (z ** 2).sum() / 2)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    close(run(tf.nn.xw_plus_b(tz, tf.constant(w), tf.constant(b))), z @ w + b, 1e-4)
    close(run(tf.nn.bias_add(tz, tf.constant(np.arange(5, dtype=np.float32)))), z + np.arange(5))
    close(run(tf.losses.mean_squared_error(tf.constant(z), tf.zeros([6, 5]))), (z ** 2).mean())


def conv_ref(x, f, stride, padding):
    n, h, w, c = x.shape
    kh, kw, _, oc = f.shape
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-w // stride)
        ph = max((oh - 1) * stride + kh - h, 0)
        pw = max((ow - 1) * stride + kw - w, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    out = np.zeros((n, oh, ow, oc), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, f, axes=([1, 2, 3], [0, 1, 2]))
    return out


def pool_ref(x, k, stride, fn):
    n, h, w, c = x.shape
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            out[:, i, j, :] = fn(x[:, i * stride:i * stride + k, j * stride:j * stride + k, :], axis=(1, 2))
    return out


def test_conv_and_pool(rng):
    x = rng.standard_normal((2, 7, 7, 3)).astype(np.float32)
    f = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    for stride, pad in [(1, "SAME"), (2, "VALID"), (2, "SAME")]:
        got = run(tf.nn.conv2d(tf.constant(x), tf.constant(f), [1, stride, stride, 1], pad))
        close(got, conv_ref(x, f, stride, pad), 1e-4)
    close(run(tf.nn.max_pool(tf.constant(x), [1, 2, 2, 1], [1, 2, 2, 1], "VALID")),
          pool_ref(x, 2, 2, np.max))
    close(run(tf.nn.avg_pool(tf.constant(x), [1, 3, 3, 1], [1, 2, 2, 1], "VALID")),
          pool_ref(x, 3, 2, np.mean))


def test_dropout():
    tf.set_random_seed(1)
    x = tf.ones([200, 100])
    y = run(tf.nn.dropout(x, rate=0.25))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02
    close(y[kept], np.full(kept.sum(), 1 / 0.75))
    y2 = run(tf.nn.dropout(x, keep_prob=0.5))
    assert abs((y2 != 0).mean() - 0.5) < 0.02
    keep = tf.placeholder(tf.float32, [])  # TF 1.x's tutorials feed keep_prob
    p = tf.placeholder(tf.float32, [None, 100])
    d = tf.nn.dropout(p, keep_prob=keep)
    ones = np.ones((300, 100), np.float32)
    y3 = run(d, {p: ones, keep: 0.8})
    assert abs((y3 != 0).mean() - 0.8) < 0.02
    close(y3[y3 != 0], np.full((y3 != 0).sum(), 1 / 0.8))
    np.testing.assert_array_equal(run(d, {p: ones, keep: 1.0}), ones)


def test_embedding_lookup(rng):
    table = rng.standard_normal((10, 4)).astype(np.float32)
    ids = np.array([[3, 1], [9, 3]], np.int64)
    v = tf.Variable(table)
    close(run(tf.nn.embedding_lookup(v, tf.constant(ids))), table[ids])
    shards = [tf.Variable(table[0::2]), tf.Variable(table[1::2])]  # "mod": id % 2 -> shard
    close(run(tf.nn.embedding_lookup(shards, tf.constant(ids))), table[ids])
