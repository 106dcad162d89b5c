"""tf.layers (TF 1.x's functional layers) and tf.losses over psgraph's builders, with TF's
variable names (dense/kernel, dense/bias, conv2d/kernel, batch_normalization/gamma, ...).
A dense layer with a ReLU (or no activation) is psgraph's fused Dense op, as the C models
build it; batch normalization is FusedBatchNorm with its moving statistics updated by ops
in UPDATE_OPS."""
import numbers

import numpy as np

from . import _array_ops
from . import _dtypes
from . import _math_ops
from . import _nn
from . import _partitioned
from . import _variables as vs
from ._graph import GraphKeys, Tensor, convert_to_tensor, get_default_graph


def _activate(y, activation):
    return y if activation is None else activation(y)


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=vs.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
          name=None, reuse=None):
    if activity_regularizer is not None or kernel_constraint is not None or bias_constraint is not None:
        raise NotImplementedError("psgraph does not have activity regularizers or constraints yet")
    x = convert_to_tensor(inputs)
    if x.shape.ndims is None or x.shape[-1].value is None:
        raise ValueError("The last dimension of the inputs to `Dense` should be defined. Found `None`.")
    in_dim = x.shape[-1].value
    with vs.variable_scope(name, default_name="dense", reuse=reuse):
        kernel = vs.get_variable("kernel", [in_dim, units], x.dtype, kernel_initializer,
                                 kernel_regularizer, trainable, partitioner=_partitioned.
                                 dense_kernel_partitioner(x.graph, [in_dim, units], x.dtype))
        bias = vs.get_variable("bias", [units], x.dtype, bias_initializer, bias_regularizer,
                               trainable) if use_bias else None
        rank = x.shape.ndims
        flat = x if rank == 2 else _array_ops.reshape(x, [-1, in_dim])
        fused_relu = activation is _nn.relu
        g = flat.graph
        if bias is not None and (activation is None or fused_relu) and x.dtype == _dtypes.float32:
            y = g._tensor(g._build().dense("Dense", flat._ep, kernel._as_tensor()._ep,
                                           bias._as_tensor()._ep, fused_relu))
        else:
            y = _math_ops.matmul(flat, kernel)
            if bias is not None:
                y = _nn.bias_add(y, bias)
            y = _activate(y, activation)
        if rank != 2:
            dims = x.shape.as_list()[:-1] + [units]
            y = _array_ops.reshape(y, [-1 if d is None else d for d in dims])
        return y


def _two(v, what):
    if isinstance(v, numbers.Integral):
        return [int(v), int(v)]
    v = [int(a) for a in v]
    if len(v) != 2:
        raise ValueError("%s must be an int or 2 ints, got %r" % (what, v))
    return v


def _channels_last(data_format):
    if data_format not in (None, "channels_last"):
        raise NotImplementedError("psgraph does not have %s yet (channels_last only)" % data_format)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=vs.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
           name=None, reuse=None):
    _channels_last(data_format)
    if _two(dilation_rate, "dilation_rate") != [1, 1]:
        raise NotImplementedError("psgraph does not have dilated convolutions yet")
    if activity_regularizer is not None or kernel_constraint is not None or bias_constraint is not None:
        raise NotImplementedError("psgraph does not have activity regularizers or constraints yet")
    x = convert_to_tensor(inputs)
    if x.shape.ndims != 4 or x.shape[-1].value is None:
        raise ValueError("conv2d needs inputs of rank 4 with known channels, got %s" % x.shape)
    kh, kw = _two(kernel_size, "kernel_size")
    with vs.variable_scope(name, default_name="conv2d", reuse=reuse):
        kernel = vs.get_variable("kernel", [kh, kw, x.shape[-1].value, filters], x.dtype,
                                 kernel_initializer, kernel_regularizer, trainable)
        y = _nn.conv2d(x, kernel, [1] + _two(strides, "strides") + [1], padding.upper())
        if use_bias:
            bias = vs.get_variable("bias", [filters], x.dtype, bias_initializer, bias_regularizer,
                                   trainable)
            y = _nn.bias_add(y, bias)
        return _activate(y, activation)


def _pooling(kind, inputs, pool_size, strides, padding, data_format, name, default):
    _channels_last(data_format)
    g = get_default_graph()
    with g.name_scope(name or default):
        return _nn._pool(kind, inputs, _two(pool_size, "pool_size"), _two(strides, "strides"),
                         padding.upper(), None, "MaxPool" if kind == "max" else "AvgPool")


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    return _pooling("max", inputs, pool_size, strides, padding, data_format, name, "max_pooling2d")


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None):
    return _pooling("avg", inputs, pool_size, strides, padding, data_format, name,
                    "average_pooling2d")


def flatten(inputs, name=None, data_format="channels_last"):
    _channels_last(data_format)
    x = convert_to_tensor(inputs)
    rest = x.shape.as_list()[1:]
    if any(d is None for d in rest):
        raise ValueError("flatten needs every dim but the first known when built, got %s" % x.shape)
    n = 1
    for d in rest:
        n *= d
    with x.graph.name_scope(name or "flatten"):
        return _array_ops.reshape(x, [-1, n])


def _mix(on, off, training):
    """training (a bool tensor) ? on : off, as t * on + (1 - t) * off: exact for t in {0, 1}."""
    t = _array_ops.cast(training, _dtypes.float32)
    return _math_ops.add(_math_ops.multiply(on, t), _math_ops.multiply(off, _math_ops.subtract(1.0, t)))


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    x = convert_to_tensor(inputs)
    with x.graph.name_scope(name or "dropout"):
        if isinstance(training, Tensor):
            return _mix(_nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed), x, training)
        if not training:
            return _array_ops.identity(x)
        return _nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)


def _fused_train(x, gamma, beta, epsilon):
    """FusedBatchNorm in training: y, the batch mean and the batch's unbiased variance."""
    g = x.graph
    y, bm, bv = g._build().fused_batch_norm("FusedBatchNorm", x._ep, gamma._ep, beta._ep, None, None,
                                            epsilon, True)
    return g._tensor(y), g._tensor(bm), g._tensor(bv)


def _virtual_batches(x, gamma, beta, epsilon, v):
    """TF's virtual batches: the batch seen as [v, B / v, ...], each of its B / v groups (every
    (B / v)-th row) normalized by its own moments; the batch's statistics for the moving
    averages are the groups' means and biased variances averaged (TF's layer takes its
    unfused path under virtual batches, whose variance is the biased one)."""
    dims = x.shape.as_list()
    if dims[0] is None or dims[0] % v or any(d is None for d in dims[1:]):
        raise ValueError("batch_normalization: virtual_batch_size=%d needs a static batch it "
                         "divides and static other dimensions, not %s" % (v, dims))
    groups = dims[0] // v
    per_group = v * int(np.prod(dims[1:-1], dtype=np.int64))
    order = np.arange(dims[0], dtype=np.int32).reshape(v, groups).T.ravel()  # group k's rows together
    xs = _array_ops.gather(x, _array_ops.constant(order)) if groups > 1 else x
    ys, means, variances = [], [], []
    for k in range(groups):
        y, bm, bv = _fused_train(xs[k * v:(k + 1) * v], gamma, beta, epsilon)
        ys.append(y)
        means.append(bm)
        # FusedBatchNorm's batch variance is the unbiased one: back to the moments' biased
        variances.append(_math_ops.multiply(bv, (per_group - 1) / per_group))
    y = ys[0]
    if groups > 1:
        back = np.argsort(order).astype(np.int32)
        y = _array_ops.gather(_array_ops.concat(ys, 0), _array_ops.constant(back))
    return (y, _math_ops.multiply(_math_ops.add_n(means), 1.0 / groups),
            _math_ops.multiply(_math_ops.add_n(variances), 1.0 / groups))


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=vs.zeros_initializer(), gamma_initializer=vs.ones_initializer(),
                        moving_mean_initializer=vs.zeros_initializer(),
                        moving_variance_initializer=vs.ones_initializer(), beta_regularizer=None,
                        gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                        training=False, trainable=True, name=None, reuse=None, renorm=False,
                        renorm_clipping=None, renorm_momentum=0.99, fused=None, virtual_batch_size=None,
                        adjustment=None):
    if renorm or adjustment is not None:
        raise NotImplementedError("psgraph does not have batch renormalization yet")
    x = convert_to_tensor(inputs)
    r = x.shape.ndims
    if r is None or (axis if isinstance(axis, int) else axis[0]) % r != r - 1:
        raise NotImplementedError("psgraph normalizes over the last axis only (channels_last), "
                                  "not axis %s of rank %s" % (axis, r))
    ch = x.shape[-1].value
    g = x.graph
    with vs.variable_scope(name, default_name="batch_normalization", reuse=reuse):
        gamma = vs.get_variable("gamma", [ch], x.dtype, gamma_initializer, gamma_regularizer,
                                trainable) if scale else None
        beta = vs.get_variable("beta", [ch], x.dtype, beta_initializer, beta_regularizer,
                               trainable) if center else None
        mm = vs.get_variable("moving_mean", [ch], x.dtype, moving_mean_initializer, trainable=False)
        mv = vs.get_variable("moving_variance", [ch], x.dtype, moving_variance_initializer,
                             trainable=False)
        ge = gamma._as_tensor() if scale else _array_ops.ones([ch])
        be = beta._as_tensor() if center else _array_ops.zeros([ch])
        c = g._build()

        def train_branch():
            if virtual_batch_size:
                return _virtual_batches(x, ge, be, float(epsilon), int(virtual_batch_size))
            return _fused_train(x, ge, be, float(epsilon))

        def infer_branch():
            y, _, _ = g._build().fused_batch_norm("FusedBatchNorm", x._ep, ge._ep, be._ep,
                                                  mm._as_tensor()._ep, mv._as_tensor()._ep,
                                                  float(epsilon), False)
            return g._tensor(y)

        def updates(bm, bv, t):
            for var, stat, nm in ((mm, bm, "AssignMovingAvg"), (mv, bv, "AssignMovingAvg_1")):
                delta = _math_ops.multiply(_math_ops.subtract(stat, var._as_tensor()), 1.0 - momentum)
                if t is not None:
                    delta = _math_ops.multiply(delta, t)
                op = g._op(g._build().assign("assign_add", nm, var._handle, delta._ep))
                g.add_to_collection(GraphKeys.UPDATE_OPS, op)

        if isinstance(training, Tensor):
            y_train, bm, bv = train_branch()
            y = _mix(y_train, infer_branch(), training)
            updates(bm, bv, _array_ops.cast(training, _dtypes.float32))
        elif training:
            y, bm, bv = train_branch()
            updates(bm, bv, None)
        else:
            y = infer_branch()
        del c
        return y


# ---- tf.losses ----

class Reduction:
    NONE = "none"
    SUM = "weighted_sum"
    MEAN = "weighted_mean"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"


def _reduced(per_example, weights, reduction, loss_collection, scope_name):
    if isinstance(weights, Tensor) or (not isinstance(weights, numbers.Number)):
        raise NotImplementedError("psgraph's tf.losses take a scalar number as weights")
    if reduction == Reduction.NONE:
        loss = per_example if weights == 1 else _math_ops.multiply(per_example, float(weights))
    elif reduction == Reduction.SUM:
        loss = _math_ops.reduce_sum(per_example)
        loss = loss if weights == 1 else _math_ops.multiply(loss, float(weights))
    else:
        loss = _math_ops.reduce_mean(per_example, name="value" if weights == 1 else None)
        loss = loss if weights == 1 else _math_ops.multiply(loss, float(weights), name="value")
    if loss_collection:
        get_default_graph().add_to_collection(loss_collection, loss)
    return loss


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None,
                                 loss_collection=GraphKeys.LOSSES,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    with get_default_graph().name_scope(scope or "sparse_softmax_cross_entropy_loss"):
        xent = _nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits,
                                                             name="xentropy")
        return _reduced(xent, weights, reduction, loss_collection, scope)


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    if label_smoothing:
        raise NotImplementedError("psgraph does not have label smoothing yet")
    with get_default_graph().name_scope(scope or "softmax_cross_entropy_loss"):
        xent = _nn.softmax_cross_entropy_with_logits_v2(labels=onehot_labels, logits=logits)
        return _reduced(xent, weights, reduction, loss_collection, scope)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    if label_smoothing:
        raise NotImplementedError("psgraph does not have label smoothing yet")
    with get_default_graph().name_scope(scope or "sigmoid_cross_entropy_loss"):
        x = convert_to_tensor(logits)
        xent = _nn.sigmoid_cross_entropy_with_logits(labels=_array_ops.cast(multi_class_labels, x.dtype),
                                                     logits=x)
        return _reduced(xent, weights, reduction, loss_collection, scope)


def mean_squared_error(labels, predictions, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    with get_default_graph().name_scope(scope or "mean_squared_error"):
        d = _math_ops.square(_math_ops.subtract(predictions, labels))
        return _reduced(d, weights, reduction, loss_collection, scope)


def add_loss(loss, loss_collection=GraphKeys.LOSSES):
    if loss_collection:
        get_default_graph().add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=GraphKeys.LOSSES):
    return get_default_graph().get_collection(loss_collection, scope)


def get_regularization_losses(scope=None):
    return get_default_graph().get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss"):
    losses = get_regularization_losses(scope)
    if losses:
        return _math_ops.add_n(losses, name=name)
    return _array_ops.constant(0.0, name=name)


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None):
    losses = get_losses(scope)
    if add_regularization_losses:
        losses = losses + get_regularization_losses(scope)
    return _math_ops.add_n(losses, name=name)
