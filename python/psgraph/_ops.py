"""The graph-level functions of TF 1.x's namespace that are neither arrays nor math:
name_scope, device, control_dependencies, group, no_op, gradients, assign, seeds."""
import contextlib

from . import _psgraph
from ._graph import Operation, Tensor, convert_to_tensor, get_default_graph


@contextlib.contextmanager
def name_scope(name, default_name=None, values=None):
    g = get_default_graph()
    n = name if name is not None else default_name
    if n is None and name is None and default_name is None:
        with g.name_scope(None) as scope:
            yield scope
        return
    with g.name_scope(n) as scope:
        yield scope


def device(device_name_or_function):
    return get_default_graph().device(device_name_or_function)


def control_dependencies(control_inputs):
    return get_default_graph().control_dependencies(control_inputs)


def _as_op(x):
    if hasattr(x, "_as_graph_element") and not isinstance(x, (Tensor, Operation)):
        x = x._as_graph_element()
    if isinstance(x, Tensor):
        return x.op
    if isinstance(x, Operation):
        return x
    if hasattr(x, "initializer") and hasattr(x, "_handle"):
        return x.op
    raise TypeError("Expected a Tensor or an Operation, got %r" % (x,))


def group(*inputs, **kwargs):
    name = kwargs.pop("name", None)
    if kwargs:
        raise TypeError("Unknown keyword arguments: " + ", ".join(kwargs))
    flat = []
    for x in inputs:
        if isinstance(x, (list, tuple)):
            flat.extend(x)
        elif x is not None:
            flat.append(x)
    g = get_default_graph()
    ops = [_as_op(x) for x in flat]
    return g._op(g._build().group(name or "group_deps", [o._id for o in ops]))


def no_op(name=None):
    g = get_default_graph()
    return g._op(g._build().group(name or "NoOp", []))


def gradients(ys, xs, grad_ys=None, name="gradients", colocate_gradients_with_ops=False,
              gate_gradients=False, aggregation_method=None, stop_gradients=None,
              unconnected_gradients=None):
    if stop_gradients is not None:
        raise NotImplementedError("psgraph does not have gradients' stop_gradients yet "
                                  "(use tf.stop_gradient in the graph)")
    ys = ys if isinstance(ys, (list, tuple)) else [ys]
    xs_list = xs if isinstance(xs, (list, tuple)) else [xs]
    ys = [convert_to_tensor(y) for y in ys]
    g = ys[0].graph
    x_eps = [x._handle if hasattr(x, "_handle") else convert_to_tensor(x)._ep for x in xs_list]
    gys = None
    if grad_ys is not None:
        grad_ys = grad_ys if isinstance(grad_ys, (list, tuple)) else [grad_ys]
        gys = [None if gy is None else convert_to_tensor(gy)._ep for gy in grad_ys]
    out = g._build().gradients([y._ep for y in ys], x_eps, gys)
    return [g._tensor(e) for e in out]


def assign(ref, value, validate_shape=None, use_locking=None, name=None):
    return ref.assign(value, name=name)


def assign_add(ref, value, use_locking=None, name=None):
    return ref.assign_add(value, name=name)


def assign_sub(ref, value, use_locking=None, name=None):
    return ref.assign_sub(value, name=name)


def set_random_seed(seed):
    get_default_graph().seed = seed


def get_collection(key, scope=None):
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key):
    return get_default_graph().get_collection_ref(key)


def add_to_collection(name, value):
    get_default_graph().add_to_collection(name, value)


def add_to_collections(names, value):
    get_default_graph().add_to_collections(names, value)


def disable_v2_behavior():
    """Accepted: psgraph is graph mode only."""


def disable_eager_execution():
    """Accepted: psgraph is graph mode only."""


def enable_eager_execution(*args, **kwargs):
    raise NotImplementedError("psgraph does not have eager execution: it is TF 1.x's graph mode")


def executing_eagerly():
    return False


_psgraph  # the extension is loaded by the time this module is
