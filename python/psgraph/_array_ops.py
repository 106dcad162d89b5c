"""TF 1.x's array ops over psgraph's builders: constant, placeholder(_with_default), zeros,
ones, fill, the random draws, identity, stop_gradient, reshape, squeeze, expand_dims,
concat, shape, cast, one_hot, gather, and tensor indexing with slices."""
import numpy as np

from . import _dtypes
from ._graph import Tensor, TensorShape, as_shape, convert_to_tensor, get_default_graph


def _graph_of(*values):
    """The graph the op goes into: the inputs' (all one), else the default one."""
    g = None
    for v in values:
        vg = getattr(v, "graph", None)
        if vg is None:
            continue
        if g is not None and vg is not g:
            raise ValueError("Tensor %r must be from the same graph as the other inputs" % (v,))
        g = vg
    return g or get_default_graph()


def _t(g, ep, shape=None):
    t = g._tensor(ep)
    if shape is not None:
        t.set_shape(shape)
    return t


def constant(value, dtype=None, shape=None, name="Const", verify_shape=False):
    """A Const node holding a copy of value (cast to dtype), reshaped to shape when given."""
    g = get_default_graph()
    if isinstance(value, Tensor):
        raise TypeError("tf.constant takes a Python or numpy value, not a Tensor")
    if dtype is not None:
        dt = _dtypes.as_dtype(dtype)
    elif isinstance(value, np.ndarray) or isinstance(value, np.generic):
        dt = _dtypes.as_dtype(np.asarray(value).dtype)
    else:
        a = np.asarray(value)
        dt = _dtypes.float32 if a.dtype.kind == "f" else _dtypes.int32 if a.dtype.kind in "iu" \
            else _dtypes.as_dtype(a.dtype)
    arr = np.asarray(value, dtype=dt.as_numpy_dtype)
    if shape is not None:
        shape = [int(d) for d in shape]
        if arr.size == 1 and int(np.prod(shape)) != 1 and not verify_shape:
            arr = np.full(shape, arr.reshape(()), dtype=arr.dtype)  # TF broadcasts a scalar
        else:
            arr = arr.reshape(shape)
    return g._tensor(g._build().const(name, arr, dt._code))


def placeholder(dtype, shape=None, name=None):
    g = get_default_graph()
    dt = _dtypes.as_dtype(dtype)
    return g._tensor(g._build().placeholder(name or "Placeholder", dt._code, as_shape(shape)._as_c()))


def placeholder_with_default(input, shape, name=None):
    """The value of input unless fed; a feed may have any shape compatible with shape."""
    x = convert_to_tensor(input)
    g = x.graph
    return g._tensor(g._build().placeholder_with_default(name or "PlaceholderWithDefault", x._ep,
                                                         as_shape(shape)._as_c()))


def _dims(shape):
    if isinstance(shape, Tensor):
        raise NotImplementedError("psgraph does not have a shape given as a Tensor yet: give a "
                                  "list of ints")
    return [int(d) for d in as_shape(shape).as_list()]


def _filled(kind, shape, value, dtype, name):
    g = get_default_graph()
    dt = _dtypes.as_dtype(dtype)
    c = g._build()
    ep = c.initializer_value(name if dt == _dtypes.float32 else None, tuple(_dims(shape)), kind,
                             float(value), 0)
    if dt != _dtypes.float32:
        ep = c.cast(name, ep, dt._code)
    return g._tensor(ep)


def zeros(shape, dtype=_dtypes.float32, name=None):
    return _filled("zeros", shape, 0.0, dtype, name or "zeros")


def ones(shape, dtype=_dtypes.float32, name=None):
    return _filled("ones", shape, 1.0, dtype, name or "ones")


def fill(dims, value, name=None):
    v = np.asarray(value)
    dt = _dtypes.float32 if v.dtype.kind == "f" else _dtypes.int32 if v.dtype.kind in "iu" \
        else _dtypes.as_dtype(v.dtype)
    return _filled("constant", dims, float(v), dt, name or "Fill")


def zeros_like(tensor, dtype=None, name=None):
    x = convert_to_tensor(tensor)
    g = x.graph
    y = g._tensor(g._build().unary("zeros_like", name, x._ep))
    return cast(y, dtype) if dtype is not None and _dtypes.as_dtype(dtype) != y.dtype else y


def ones_like(tensor, dtype=None, name=None):
    x = convert_to_tensor(tensor)
    g = x.graph
    y = g._tensor(g._build().unary("ones_like", name, x._ep))
    return cast(y, dtype) if dtype is not None and _dtypes.as_dtype(dtype) != y.dtype else y


def _random(dist, shape, scale, shift, dtype, seed, name):
    g = get_default_graph()
    if _dtypes.as_dtype(dtype) != _dtypes.float32:
        raise NotImplementedError("psgraph draws float32 random numbers only, not %s"
                                  % _dtypes.as_dtype(dtype).name)
    c = g._build()
    ep = c.random(None if shift else name, dist, tuple(_dims(shape)), float(scale), g._op_seed(seed))
    y = g._tensor(ep)
    if shift:
        from . import _math_ops
        y = _math_ops.add(y, float(shift), name=name)
    return y


def random_normal(shape, mean=0.0, stddev=1.0, dtype=_dtypes.float32, seed=None, name=None):
    return _random("normal", shape, stddev, mean, dtype, seed, name or "random_normal")


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_dtypes.float32, seed=None, name=None):
    return _random("truncated_normal", shape, stddev, mean, dtype, seed, name or "truncated_normal")


def random_uniform(shape, minval=0, maxval=None, dtype=_dtypes.float32, seed=None, name=None):
    maxval = 1.0 if maxval is None else maxval
    # uniform in [-s, s) shifted: [min, max)
    return _random("uniform", shape, (maxval - minval) / 2.0, (maxval + minval) / 2.0, dtype, seed,
                   name or "random_uniform")


def identity(input, name=None):
    x = convert_to_tensor(input)
    return x.graph._tensor(x.graph._build().unary("identity", name or "Identity", x._ep))


def stop_gradient(input, name=None):
    x = convert_to_tensor(input)
    return x.graph._tensor(x.graph._build().unary("stop_gradient", name or "StopGradient", x._ep))


def reshape(tensor, shape, name=None):
    x = convert_to_tensor(tensor)
    if isinstance(shape, Tensor):
        raise NotImplementedError("psgraph does not have tf.reshape to a shape given as a Tensor "
                                  "yet: give a list of ints (one may be -1)")
    dims = [-1 if d is None else int(d) for d in (shape if isinstance(shape, (list, tuple))
                                                  else as_shape(shape).as_list())]
    c_dims = tuple(None if d == -1 else d for d in dims)
    return x.graph._tensor(x.graph._build().reshape(name or "Reshape", x._ep, c_dims))


def expand_dims(input, axis=None, name=None, dim=None):
    x = convert_to_tensor(input)
    axis = dim if axis is None else axis
    if x.shape.ndims is None:
        raise ValueError("tf.expand_dims needs the input's rank when the graph is built")
    axis = int(axis)
    if axis < 0:
        axis += x.shape.ndims + 1
    return x.graph._tensor(x.graph._build().expand_dims(name or "ExpandDims", x._ep, [axis]))


def squeeze(input, axis=None, name=None, squeeze_dims=None):
    x = convert_to_tensor(input)
    axis = squeeze_dims if axis is None else axis
    dims = x.shape.as_list()
    r = len(dims)
    if axis is None:
        drop = [i for i, d in enumerate(dims) if d == 1]
        if any(d is None for d in dims):
            raise ValueError("tf.squeeze without axis needs every dim known when the graph is "
                             "built (shape %s)" % x.shape)
    else:
        drop = sorted((a + r if a < 0 else a) for a in ([axis] if isinstance(axis, int) else axis))
        for a in drop:
            if dims[a] is not None and dims[a] != 1:
                raise ValueError("Can not squeeze dim[%d], expected a dimension of 1, got %d"
                                 % (a, dims[a]))
    kept = [d for i, d in enumerate(dims) if i not in drop]
    return reshape(x, [-1 if d is None else d for d in kept], name=name or "Squeeze")


def concat(values, axis, name="concat"):
    xs = [convert_to_tensor(v) for v in values]
    if len(xs) == 1:
        return identity(xs[0], name=name)
    g = _graph_of(*xs)
    return g._tensor(g._build().concat(name, [x._ep for x in xs], int(axis)))


def shape(input, name=None, out_type=_dtypes.int32):
    x = convert_to_tensor(input)
    y = x.graph._tensor(x.graph._build().unary("shape", name or "Shape", x._ep))
    return y if _dtypes.as_dtype(out_type) == _dtypes.int32 else cast(y, out_type)


def cast(x, dtype, name=None):
    x = convert_to_tensor(x)
    dt = _dtypes.as_dtype(dtype)
    if dt == x.dtype:
        return x
    return x.graph._tensor(x.graph._build().cast(name or "Cast", x._ep, dt._code))


to_float = lambda x, name="ToFloat": cast(x, _dtypes.float32, name=name)  # noqa: E731
to_int32 = lambda x, name="ToInt32": cast(x, _dtypes.int32, name=name)  # noqa: E731
to_int64 = lambda x, name="ToInt64": cast(x, _dtypes.int64, name=name)  # noqa: E731


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    x = convert_to_tensor(indices)
    if axis not in (None, -1):
        raise NotImplementedError("psgraph does not have tf.one_hot on an axis but the last yet")
    y = x.graph._tensor(x.graph._build().one_hot(name or "one_hot", x._ep, int(depth),
                                                 1.0 if on_value is None else float(on_value),
                                                 0.0 if off_value is None else float(off_value)))
    return y if dtype is None or _dtypes.as_dtype(dtype) == _dtypes.float32 else cast(y, dtype)


def gather(params, indices, validate_indices=None, name=None, axis=None):
    if axis not in (None, 0):
        raise NotImplementedError("psgraph does not have tf.gather on an axis but 0 yet")
    p, i = convert_to_tensor(params), convert_to_tensor(indices)
    g = _graph_of(p, i)
    return g._tensor(g._build().binary("gather", name or "GatherV2", p._ep, i._ep))


def _getitem(x, key):
    """x[key] with ints, slices of step 1, Ellipsis and tf.newaxis (None): a Slice node,
    then a Reshape dropping the int-indexed dims and adding the new axes."""
    if not isinstance(key, tuple):
        key = (key,)
    dims = x.shape.as_list() if x.shape.ndims is not None else None
    if dims is None:
        raise ValueError("indexing needs the tensor's rank when the graph is built")
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (len(dims) - n_real))
        else:
            expanded.append(k)
    if Ellipsis not in key:
        expanded.extend([slice(None)] * (len(dims) - n_real))
    begin, size, out = [], [], []
    axis = 0
    for k in expanded:
        if k is None:
            out.append(1)
            continue
        if axis >= len(dims):
            raise IndexError("too many indices for a tensor of rank %d" % len(dims))
        d = dims[axis]
        if isinstance(k, Tensor):
            raise NotImplementedError("psgraph does not have indexing by a Tensor yet")
        if isinstance(k, slice):
            if k.step not in (None, 1):
                raise NotImplementedError("psgraph does not have strided slices (step %s) yet"
                                          % k.step)
            start, stop = k.start or 0, k.stop
            if (start < 0 or (stop is not None and stop < 0)) and d is None:
                raise ValueError("a negative slice bound needs dim %d known when built" % axis)
            if d is not None:
                start, stop, _ = slice(start, stop).indices(d)
                stop = max(stop, start)
                begin.append(start)
                size.append(stop - start)
                out.append(stop - start)
            else:
                begin.append(start)
                size.append(-1 if stop is None else stop - start)
                out.append(None if stop is None else stop - start)
        else:
            i = int(k)
            if i < 0:
                if d is None:
                    raise ValueError("a negative index needs dim %d known when built" % axis)
                i += d
            if d is not None and not 0 <= i < d:
                raise IndexError("index %d is out of bounds for dim %d of size %d" % (int(k), axis, d))
            begin.append(i)
            size.append(1)
        axis += 1
    g = x.graph
    y = g._tensor(g._build().slice("strided_slice", x._ep, begin, size))
    if len(out) == len(dims) and all(o is None or o == s for o, s in zip(out, y.shape.as_list())):
        return y
    if sum(1 for o in out if o is None) > 1:
        raise NotImplementedError("psgraph cannot index away a dim here: more than one dim of the "
                                  "result is unknown when built")
    return reshape(y, [-1 if o is None else o for o in out])


TensorShape  # re-exported for the namespace
