"""TF 1.x's math ops over psgraph's builders, and the Tensor operators (+ - * / @, unary
minus, comparisons, indexing). Arithmetic is float32 (the C library's elementwise ops);
comparisons take float32, int32 and int64."""
import numbers

import numpy as np

from . import _array_ops
from . import _dtypes
from ._array_ops import _graph_of
from ._graph import Tensor, convert_to_tensor


def _pair(a, b):
    """Both operands as Tensors: a Python or numpy value takes the other side's dtype."""
    ta, tb = isinstance(a, Tensor) or hasattr(a, "_as_tensor"), \
        isinstance(b, Tensor) or hasattr(b, "_as_tensor")
    if ta and not tb:
        a = convert_to_tensor(a)
        b = convert_to_tensor(b, dtype=a.dtype)
    elif tb and not ta:
        b = convert_to_tensor(b)
        a = convert_to_tensor(a, dtype=b.dtype)
    else:
        a, b = convert_to_tensor(a), convert_to_tensor(b)
    return a, b


def _binary(op, a, b, name):
    a, b = _pair(a, b)
    g = _graph_of(a, b)
    return g._tensor(g._build().binary(op, name, a._ep, b._ep))


def _unary(op, x, name):
    x = convert_to_tensor(x)
    return x.graph._tensor(x.graph._build().unary(op, name, x._ep))


def _is_number(v):
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


def add(x, y, name=None):
    return _binary("add", x, y, name)


def subtract(x, y, name=None):
    return _binary("sub", x, y, name)


def multiply(x, y, name=None):
    # a tensor times a Python number: one Scale node (the same product as Mul of a scalar)
    if isinstance(x, Tensor) and _is_number(y) and x.dtype == _dtypes.float32:
        return x.graph._tensor(x.graph._build().scale(name, x._ep, float(y)))
    if isinstance(y, Tensor) and _is_number(x) and y.dtype == _dtypes.float32:
        return y.graph._tensor(y.graph._build().scale(name, y._ep, float(x)))
    return _binary("mul", x, y, name)


def divide(x, y, name=None):
    return _binary("div", x, y, name)


truediv = divide
div = divide
realdiv = divide
sub = subtract
mul = multiply


def negative(x, name=None):
    return _unary("neg", x, name)


neg = negative


def square(x, name=None):
    return _unary("square", x, name)


def sqrt(x, name=None):
    return _unary("sqrt", x, name)


def exp(x, name=None):
    return _unary("exp", x, name)


def log(x, name=None):
    return _unary("log", x, name)


def pow(x, y, name=None):
    if _is_number(y):
        x = convert_to_tensor(x)
        return x.graph._tensor(x.graph._build().pow(name, x._ep, float(y)))
    raise NotImplementedError("psgraph does not have tf.pow with a Tensor exponent yet")


def maximum(x, y, name=None):
    return _binary("maximum", x, y, name)


def minimum(x, y, name=None):
    return _binary("minimum", x, y, name)


def abs(x, name=None):  # noqa: A001 - TF's name
    x = convert_to_tensor(x)
    return maximum(x, negative(x), name=name)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    return minimum(maximum(t, clip_value_min), clip_value_max, name=name)


def sigmoid(x, name=None):
    return _unary("sigmoid", x, name)


def tanh(x, name=None):
    return _unary("tanh", x, name)


def _compare(op, x, y, name):
    a, b = _pair(x, y)
    g = _graph_of(a, b)
    return g._tensor(g._build().compare(op, name, a._ep, b._ep))


def greater(x, y, name=None):
    return _compare("Greater", x, y, name)


def greater_equal(x, y, name=None):
    return _compare("GreaterEqual", x, y, name)


def less(x, y, name=None):
    return _compare("Less", x, y, name)


def less_equal(x, y, name=None):
    return _compare("LessEqual", x, y, name)


def not_equal(x, y, name=None):
    return _compare("NotEqual", x, y, name)


def equal(x, y, name=None):
    a, b = _pair(x, y)
    sa, sb = a.shape, b.shape
    same = sa.ndims is not None and sb.ndims is not None and sa.as_list() == sb.as_list() \
        and None not in sa.as_list()
    if same or sb.num_elements() == 1 or (sa.is_compatible_with(sb) and sa.ndims == sb.ndims):
        g = _graph_of(a, b)
        return g._tensor(g._build().binary("equal", name, a._ep, b._ep))
    return _compare("Equal", a, b, name)  # broadcasting: the comparison family


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, name=None):
    a, b = _pair(a, b)
    g = _graph_of(a, b)
    return g._tensor(g._build().matmul(name, a._ep, b._ep, bool(transpose_a or adjoint_a),
                                       bool(transpose_b or adjoint_b)))


def add_n(inputs, name=None):
    xs = [convert_to_tensor(x) for x in inputs]
    if not xs:
        raise ValueError("inputs must be a non-empty list")
    g = _graph_of(*xs)
    return g._tensor(g._build().add_n(name or "AddN", [x._ep for x in xs]))


def _axes(axis, reduction_indices):
    axis = reduction_indices if axis is None else axis
    if axis is None:
        return None
    if isinstance(axis, Tensor):
        raise NotImplementedError("psgraph does not have reduction axes given as a Tensor yet")
    return [int(a) for a in (axis if isinstance(axis, (list, tuple, np.ndarray)) else [axis])]


def _reduce(kind, input_tensor, axis, keepdims, name, reduction_indices, keep_dims):
    x = convert_to_tensor(input_tensor)
    keep = bool(keep_dims if keepdims is None else keepdims)
    axes = _axes(axis, reduction_indices)
    if x.dtype != _dtypes.float32:
        raise NotImplementedError("psgraph reduces float32 tensors only, not %s: cast first"
                                  % x.dtype.name)
    return x.graph._tensor(x.graph._build().reduce(kind, name, x._ep, axes, keep))


def reduce_sum(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
               keep_dims=None):
    return _reduce("sum", input_tensor, axis, keepdims, name or "Sum", reduction_indices, keep_dims)


def reduce_mean(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
                keep_dims=None):
    return _reduce("mean", input_tensor, axis, keepdims, name or "Mean", reduction_indices, keep_dims)


def reduce_max(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
               keep_dims=None):
    return _reduce("max", input_tensor, axis, keepdims, name or "Max", reduction_indices, keep_dims)


def argmax(input, axis=None, name=None, dimension=None, output_type=_dtypes.int64):
    x = convert_to_tensor(input)
    axis = dimension if axis is None else axis
    axis = 0 if axis is None else int(axis)
    r = x.shape.ndims
    if r is None or (axis % r) != r - 1:
        raise NotImplementedError("psgraph does not have tf.argmax on an axis but the last yet "
                                  "(axis %s of rank %s)" % (axis, r))
    y = x.graph._tensor(x.graph._build().unary("argmax", name or "ArgMax", x._ep))
    return y if _dtypes.as_dtype(output_type) == _dtypes.int64 else _array_ops.cast(y, output_type)


# ---- the Tensor operators ----

def _r(fn):
    return lambda self, other: fn(other, self)


def _install_operators(cls):
    cls.__add__ = lambda s, o: add(s, o)
    cls.__radd__ = _r(add)
    cls.__sub__ = lambda s, o: subtract(s, o)
    cls.__rsub__ = _r(subtract)
    cls.__mul__ = lambda s, o: multiply(s, o)
    cls.__rmul__ = _r(multiply)
    cls.__truediv__ = lambda s, o: divide(s, o)
    cls.__rtruediv__ = _r(divide)
    cls.__div__ = cls.__truediv__
    cls.__matmul__ = lambda s, o: matmul(s, o)
    cls.__rmatmul__ = _r(matmul)
    cls.__neg__ = lambda s: negative(s)
    cls.__pow__ = lambda s, o: pow(s, o)
    cls.__abs__ = lambda s: abs(s)
    cls.__lt__ = lambda s, o: less(s, o)
    cls.__le__ = lambda s, o: less_equal(s, o)
    cls.__gt__ = lambda s, o: greater(s, o)
    cls.__ge__ = lambda s, o: greater_equal(s, o)
    cls.__getitem__ = lambda s, key: _array_ops._getitem(convert_to_tensor(s), key)


_install_operators(Tensor)
