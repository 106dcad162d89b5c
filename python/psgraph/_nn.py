"""tf.nn over psgraph's builders: activations, softmax and the cross-entropy losses,
conv2d, pooling, bias_add, dropout, embedding_lookup (its gradient sparse: an
IndexedSlices the optimizers apply as a sparse update), l2_loss, xw_plus_b."""
import numbers

from . import _array_ops
from . import _dtypes
from . import _math_ops
from ._array_ops import _graph_of
from ._graph import Tensor, convert_to_tensor


def _unary(op, x, name):
    x = convert_to_tensor(x)
    return x.graph._tensor(x.graph._build().unary(op, name, x._ep))


def relu(features, name=None):
    return _unary("relu", features, name or "Relu")


def sigmoid(x, name=None):
    return _unary("sigmoid", x, name or "Sigmoid")


def tanh(x, name=None):
    return _unary("tanh", x, name or "Tanh")


def leaky_relu(features, alpha=0.2, name=None):
    x = convert_to_tensor(features)
    return _math_ops.maximum(x, _math_ops.multiply(x, float(alpha)), name=name)


def _last_axis(x, axis, what):
    r = x.shape.ndims
    if axis is not None and (r is None or int(axis) % r != r - 1):
        raise NotImplementedError("psgraph does not have tf.nn.%s on an axis but the last yet" % what)


def softmax(logits, axis=None, name=None, dim=None):
    x = convert_to_tensor(logits)
    _last_axis(x, dim if axis is None else axis, "softmax")
    return _unary("softmax", x, name or "Softmax")


def log_softmax(logits, axis=None, name=None, dim=None):
    x = convert_to_tensor(logits)
    _last_axis(x, dim if axis is None else axis, "log_softmax")
    return _unary("log_softmax", x, name or "LogSoftmax")


def sparse_softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None):
    if _sentinel is not None:
        raise ValueError("Only call `sparse_softmax_cross_entropy_with_logits` with named "
                         "arguments (labels=..., logits=..., ...)")
    x, y = convert_to_tensor(logits), convert_to_tensor(labels)
    g = _graph_of(x, y)
    node = g._build().xent(name or "SparseSoftmaxCrossEntropyWithLogits", x._ep, y._ep)
    return g._op(node).outputs[0]


def softmax_cross_entropy_with_logits_v2(_sentinel=None, labels=None, logits=None, axis=-1,
                                         name=None, dim=None):
    """-sum(labels * log_softmax(logits)) over the last axis."""
    if _sentinel is not None:
        raise ValueError("Only call `softmax_cross_entropy_with_logits_v2` with named arguments")
    x = convert_to_tensor(logits)
    _last_axis(x, dim if dim is not None else axis, "softmax_cross_entropy_with_logits_v2")
    g = x.graph
    with g.name_scope(name or "softmax_cross_entropy_with_logits"):
        z = convert_to_tensor(labels, dtype=x.dtype)
        prod = _math_ops.multiply(z, log_softmax(x))
        return _math_ops.negative(_math_ops.reduce_sum(prod, axis=-1))


def softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, dim=-1, name=None,
                                      axis=None):
    """TF 1.x's deprecated form: no gradient into the labels."""
    labels = _array_ops.stop_gradient(convert_to_tensor(labels))
    return softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits,
                                                axis=dim if axis is None else axis, name=name)


def sigmoid_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None):
    """max(x, 0) - x * z + log(1 + exp(-|x|)), TensorFlow's stable form."""
    if _sentinel is not None:
        raise ValueError("Only call `sigmoid_cross_entropy_with_logits` with named arguments")
    x = convert_to_tensor(logits)
    g = x.graph
    with g.name_scope(name or "logistic_loss"):
        z = convert_to_tensor(labels, dtype=x.dtype)
        pos = relu(x)
        neg_abs = _math_ops.negative(_math_ops.abs(x))
        softplus = _math_ops.log(_math_ops.add(_math_ops.exp(neg_abs), 1.0))
        return _math_ops.add(_math_ops.subtract(pos, _math_ops.multiply(x, z)), softplus)


def l2_loss(t, name=None):
    return _unary("l2_loss", t, name or "L2Loss")


def bias_add(value, bias, data_format=None, name=None):
    if data_format not in (None, "NHWC", "N...C"):
        raise NotImplementedError("psgraph does not have bias_add in %s yet (NHWC only)" % data_format)
    x, b = convert_to_tensor(value), convert_to_tensor(bias)
    g = _graph_of(x, b)
    return g._tensor(g._build().binary("bias_add", name or "BiasAdd", x._ep, b._ep))


def xw_plus_b(x, weights, biases, name=None):
    x, w, b = convert_to_tensor(x), convert_to_tensor(weights), convert_to_tensor(biases)
    g = _graph_of(x, w, b)
    return g._tensor(g._build().dense(name or "xw_plus_b", x._ep, w._ep, b._ep, False))


def _pair(v, what):
    if isinstance(v, numbers.Integral):
        return int(v), int(v)
    v = list(v)
    if len(v) == 4:
        if v[0] != 1 or v[3] != 1:
            raise NotImplementedError("psgraph does not have %s across the batch or channels" % what)
        return int(v[1]), int(v[2])
    if len(v) == 2:
        return int(v[0]), int(v[1])
    if len(v) == 1:
        return int(v[0]), int(v[0])
    raise ValueError("%s must have 1, 2 or 4 entries, got %r" % (what, v))


def _nhwc(data_format):
    if data_format not in (None, "NHWC"):
        raise NotImplementedError("psgraph does not have %s yet (NHWC only)" % data_format)


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,
           data_format="NHWC", dilations=None, name=None, filters=None):
    _nhwc(data_format)
    if dilations is not None and _pair(dilations, "dilations") != (1, 1):
        raise NotImplementedError("psgraph does not have dilated convolutions yet")
    x, f = convert_to_tensor(input), convert_to_tensor(filter if filter is not None else filters)
    sh, sw = _pair(strides, "strides")
    g = _graph_of(x, f)
    return g._tensor(g._build().conv2d(name or "Conv2D", x._ep, f._ep, sh, sw, padding))


def _pool(kind, value, ksize, strides, padding, data_format, name):
    _nhwc(data_format)
    x = convert_to_tensor(value)
    kh, kw = _pair(ksize, "ksize")
    sh, sw = _pair(strides, "strides")
    return x.graph._tensor(x.graph._build().pool(kind, name, x._ep, kh, kw, sh, sw, padding))


def max_pool(value, ksize, strides, padding, data_format="NHWC", name=None, input=None):
    return _pool("max", value if input is None else input, ksize, strides, padding, data_format,
                 name or "MaxPool")


def avg_pool(value, ksize, strides, padding, data_format="NHWC", name=None, input=None):
    return _pool("avg", value if input is None else input, ksize, strides, padding, data_format,
                 name or "AvgPool")


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None):
    """Inverted dropout: kept with probability 1 - rate, scaled by 1 / (1 - rate). A number
    as the rate is psgraph's Dropout op; a Tensor (a fed keep_prob, as TF 1.x's tutorials)
    draws uniforms of x's shape each step and keeps those >= rate, by graph ops."""
    if noise_shape is not None:
        raise NotImplementedError("psgraph does not have dropout's noise_shape yet")
    if rate is None and keep_prob is None:
        raise ValueError("dropout needs rate (or keep_prob)")
    x = convert_to_tensor(x)
    g = x.graph
    if isinstance(rate, Tensor) or isinstance(keep_prob, Tensor):
        with g.name_scope(name or "dropout"):
            r = _math_ops.subtract(1.0, keep_prob) if rate is None else convert_to_tensor(rate)
            u = g._tensor(g._build().random_like("random_uniform", x._ep, "uniform", 0.5, g._op_seed(seed)))
            keep = _array_ops.cast(_math_ops.greater_equal(_math_ops.add(u, 0.5), r), _dtypes.float32)
            return _math_ops.divide(_math_ops.multiply(x, keep), _math_ops.subtract(1.0, r))
    rate = 1.0 - float(keep_prob) if rate is None else float(rate)
    if rate == 0.0:
        return x
    return g._tensor(g._build().dropout(name or "dropout", x._ep, rate, g._op_seed(seed)))


def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True,
                     max_norm=None):
    """The rows ids of params: a Variable (or a list of Variables: its shards, split by
    partition_strategy), read beside the variable; the gradient is sparse."""
    if max_norm is not None:
        raise NotImplementedError("psgraph does not have embedding_lookup's max_norm yet")
    if hasattr(params, "_get_variable_list"):  # a PartitionedVariable: its shards
        params = params._get_variable_list()
    shards = list(params) if isinstance(params, (list, tuple)) else [params]
    i = convert_to_tensor(ids)
    if not all(hasattr(s, "_handle") for s in shards):
        if len(shards) != 1:
            raise NotImplementedError("psgraph looks up a list of shards only when they are "
                                      "variables")
        return _array_ops.gather(shards[0], i, name=name)
    rows = sum(int(s.shape[0]) for s in shards)
    g = _graph_of(i, *[s._read for s in shards])
    return g._tensor(g._build().embedding_lookup(name or "embedding_lookup", [s._handle for s in shards],
                                                 rows, partition_strategy, i._ep))


def moments(x, axes, shift=None, name=None, keep_dims=None, keepdims=None):
    keep = bool(keepdims if keepdims is not None else keep_dims)
    x = convert_to_tensor(x)
    with x.graph.name_scope(name or "moments"):
        mean = _math_ops.reduce_mean(x, axes, keepdims=True)
        var = _math_ops.reduce_mean(_math_ops.square(_math_ops.subtract(x, mean)), axes, keepdims=keep)
        if not keep:
            mean = _math_ops.reduce_mean(x, axes)
        return mean, var


_dtypes  # noqa: B018 (the namespace reads dtypes through here too)
