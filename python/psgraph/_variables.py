"""Variables as TF 1.x's: tf.Variable, tf.get_variable with variable scopes (reuse,
AUTO_REUSE), the initializers, and the collections and initializer ops. A variable is a
psgraph variable (a VarHandle node, its initializer in the C graph's "init" collection);
its value as a tensor is one ReadVariable node ("<name>/read"), or a fresh one inside a
control-dependency context so that the read runs after the dependencies, as TF 1.x's."""
import contextlib

import numpy as np

from . import _dtypes
from ._graph import (GraphKeys, Operation, Tensor, as_shape, convert_to_tensor,
                     get_default_graph)

AUTO_REUSE = "AUTO_REUSE"


# ---- initializers ----

class Initializer:
    """An initializer: builds the initial value of a variable of a shape. Those the C library
    draws itself (psg_initializer_t kinds) go to psg_variable in one call."""
    dtype = None

    def _c_kind(self, shape, seed):
        """(kind, scale) for psg_variable, or None to build the value with ops."""
        return None

    def __call__(self, shape, dtype=None, partition_info=None):
        g = get_default_graph()
        shape = [int(d) for d in as_shape(shape).as_list()]
        kind = self._c_kind(shape, g._op_seed(getattr(self, "seed", None)))
        if kind is None:
            raise NotImplementedError("%s builds no value alone" % type(self).__name__)
        from . import _array_ops
        ep = g._build().initializer_value("initial_value", tuple(shape), kind[0], kind[1],
                                          g._op_seed(getattr(self, "seed", None)))
        t = g._tensor(ep)
        dt = _dtypes.as_dtype(dtype or _dtypes.float32)
        return t if dt == _dtypes.float32 else _array_ops.cast(t, dt)

    def get_config(self):
        return dict(vars(self))


class zeros_initializer(Initializer):
    def __init__(self, dtype=_dtypes.float32):
        self.dtype = dtype

    def _c_kind(self, shape, seed):
        return ("zeros", 0.0)


class ones_initializer(Initializer):
    def __init__(self, dtype=_dtypes.float32):
        self.dtype = dtype

    def _c_kind(self, shape, seed):
        return ("ones", 1.0)


class constant_initializer(Initializer):
    def __init__(self, value=0, dtype=_dtypes.float32, verify_shape=False):
        self.value = value
        self.dtype = dtype

    def _c_kind(self, shape, seed):
        v = np.asarray(self.value)
        return ("constant", float(v)) if v.size == 1 else None

    def __call__(self, shape, dtype=None, partition_info=None):
        v = np.asarray(self.value)
        if v.size == 1:
            return Initializer.__call__(self, shape, dtype)
        from . import _array_ops
        return _array_ops.constant(v, dtype=dtype or self.dtype, shape=shape, name="initial_value")


class random_normal_initializer(Initializer):
    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=_dtypes.float32):
        self.mean, self.stddev, self.seed, self.dtype = mean, stddev, seed, dtype

    def _c_kind(self, shape, seed):
        return ("normal", float(self.stddev)) if self.mean == 0 else None

    def __call__(self, shape, dtype=None, partition_info=None):
        from . import _array_ops
        return _array_ops.random_normal(shape, self.mean, self.stddev, seed=self.seed,
                                        name="initial_value")


class truncated_normal_initializer(Initializer):
    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=_dtypes.float32):
        self.mean, self.stddev, self.seed, self.dtype = mean, stddev, seed, dtype

    def _c_kind(self, shape, seed):
        return ("truncated_normal", float(self.stddev)) if self.mean == 0 else None

    def __call__(self, shape, dtype=None, partition_info=None):
        from . import _array_ops
        return _array_ops.truncated_normal(shape, self.mean, self.stddev, seed=self.seed,
                                           name="initial_value")


class random_uniform_initializer(Initializer):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None, dtype=_dtypes.float32):
        self.minval, self.maxval, self.seed, self.dtype = minval, maxval, seed, dtype

    def _c_kind(self, shape, seed):
        return ("uniform", float(self.maxval)) if self.minval == -self.maxval else None

    def __call__(self, shape, dtype=None, partition_info=None):
        from . import _array_ops
        return _array_ops.random_uniform(shape, self.minval, self.maxval, seed=self.seed,
                                         name="initial_value")


class variance_scaling_initializer(Initializer):
    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None,
                 dtype=_dtypes.float32):
        self.scale, self.mode, self.distribution = scale, mode, distribution
        self.seed, self.dtype = seed, dtype

    def _c_kind(self, shape, seed):
        return get_default_graph()._c.variance_scaling(tuple(shape), float(self.scale), self.mode,
                                                       self.distribution, seed)


class glorot_uniform_initializer(Initializer):
    def __init__(self, seed=None, dtype=_dtypes.float32):
        self.seed, self.dtype = seed, dtype

    def _c_kind(self, shape, seed):
        return ("glorot_uniform", 0.0)


class glorot_normal_initializer(variance_scaling_initializer):
    def __init__(self, seed=None, dtype=_dtypes.float32):
        super().__init__(1.0, "fan_avg", "truncated_normal", seed, dtype)


def he_normal(seed=None):
    return variance_scaling_initializer(2.0, "fan_in", "truncated_normal", seed)


def he_uniform(seed=None):
    return variance_scaling_initializer(2.0, "fan_in", "uniform", seed)


def _as_initializer(init, dtype):
    if init is None:
        return glorot_uniform_initializer() if dtype.is_floating else zeros_initializer()
    if isinstance(init, type) and issubclass(init, Initializer):
        return init()
    return init


# ---- variables ----

class Variable:
    """A psgraph variable: `op` is its VarHandle, `initializer` its Assign of the initial value."""

    def __init__(self, initial_value=None, trainable=None, collections=None, validate_shape=True,
                 caching_device=None, name=None, variable_def=None, dtype=None, expected_shape=None,
                 import_scope=None, constraint=None, use_resource=None, synchronization=None,
                 aggregation=None, shape=None):
        if initial_value is None:
            raise ValueError("initial_value must be specified.")
        g = get_default_graph()
        trainable = True if trainable is None else bool(trainable)
        with g.name_scope(name or "Variable") as scope:
            full = scope[:-1]
            self._init_from_value(g, full, initial_value, dtype, trainable)
        self._register(g, collections)

    # creation

    @classmethod
    def _new(cls, g, full, shape, dtype, initializer, trainable, collections):
        """A variable `full` (no scope prefixing): psg_variable when the C library draws the
        initial value itself, else the value built by ops and assigned."""
        self = cls.__new__(cls)
        kind = None
        if isinstance(initializer, Initializer) and dtype == _dtypes.float32:
            kind = initializer._c_kind(shape, g._op_seed(getattr(initializer, "seed", None)))
        if kind is not None:
            c = g._build()
            c.set_scope("")
            h = c.variable(full, dtype._code, tuple(shape), kind[0], kind[1],
                           g._op_seed(getattr(initializer, "seed", None)), trainable)
            self._setup(g, h, dtype, trainable)
        else:
            saved = g._name_stack
            g._name_stack = full
            try:
                with g.control_dependencies(None):
                    if callable(initializer) and not isinstance(initializer, Tensor):
                        value = initializer(shape, dtype=dtype)
                    else:
                        value = initializer
                    self._init_value_built(g, full, value, dtype, trainable)
            finally:
                g._name_stack = saved
        self._register(g, collections)
        return self

    def _init_from_value(self, g, full, initial_value, dtype, trainable):
        saved = g._name_stack
        g._name_stack = full
        try:
            with g.control_dependencies(None):
                if callable(initial_value) and not isinstance(initial_value, Tensor):
                    initial_value = initial_value()
                self._init_value_built(g, full, initial_value, dtype, trainable)
        finally:
            g._name_stack = saved

    def _init_value_built(self, g, full, value, dtype, trainable):
        if isinstance(value, Variable):
            value = value.initialized_value()
        value = convert_to_tensor(value, dtype=dtype)
        if not value.shape.is_fully_defined():
            raise ValueError("initial_value must have a shape specified: %s" % value)
        c = g._build()
        c.set_scope("")
        h = c.var_handle(full, value.dtype._code, tuple(value.shape.as_list()))
        c.set_scope(full)
        init = c.assign("assign", "Assign", h, value._ep)
        c.add_to_collection("variables", h[0])
        if trainable:
            c.add_to_collection("trainable_variables", h[0])
        c.add_to_collection("init", init)
        self._setup(g, h, value.dtype, trainable, init_id=init, initial_value=value)

    @classmethod
    def _from_handle(cls, g, node_id, trainable):
        """The Variable of a handle the C library made (an optimizer's slot, the global step)."""
        self = cls.__new__(cls)
        dt = _dtypes.from_code(g._c.attr(node_id, "dtype"))
        self._setup(g, (node_id, 0), dt, trainable)
        return self

    def _setup(self, g, h, dtype, trainable, init_id=None, initial_value=None):
        self._graph = g
        self._handle = h
        self._dtype = _dtypes.as_dtype(dtype)
        self._trainable = trainable
        self.op = g._op(h[0])
        self._shape = as_shape(g._c.output(h[0], 0)[1])
        name = self.op.name
        if init_id is None:
            init_id = g._c.find(name + "/init")
        self._initializer_op = g._op(init_id) if init_id >= 0 else None
        if initial_value is None:
            iv = g._c.find(name + "/initial_value")
            initial_value = g._op(iv).outputs[0] if iv >= 0 else None
        self._initial_value = initial_value
        c = g._build()
        c.set_scope("")
        with g.control_dependencies(None):
            self._read = g._tensor(c.read_variable(name + "/read", h))
        g._variables_by_handle[h[0]] = self

    def _register(self, g, collections):
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
            if self._trainable:
                collections = collections + [GraphKeys.TRAINABLE_VARIABLES]
        for key in collections:
            g.add_to_collection(key, self)

    # what TF 1.x users read

    @property
    def name(self):
        return self.op.name + ":0"

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return self._shape

    def get_shape(self):
        return self._shape

    @property
    def graph(self):
        return self._graph

    @property
    def device(self):
        return self.op.device

    @property
    def trainable(self):
        return self._trainable

    @property
    def initializer(self):
        return self._initializer_op

    @property
    def initial_value(self):
        return self._initial_value

    def initialized_value(self):
        return self._initial_value

    def value(self):
        return self._as_tensor()

    def read_value(self):
        """A new read of the variable (ordered after the current control dependencies)."""
        c = self._graph._build()
        return self._graph._tensor(c.read_variable("read", self._handle))

    def _as_tensor(self):
        if self._graph._in_control_context():
            return self.read_value()
        return self._read

    def _as_graph_element(self):
        return self._read

    def eval(self, session=None):
        return self._read.eval(session=session)

    def assign(self, value, use_locking=None, name=None, read_value=True):
        return self._assign("assign", value, name or "Assign", read_value)

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        return self._assign("assign_add", delta, name or "AssignAdd", read_value)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        from . import _math_ops
        return self._assign("assign_add", _math_ops.negative(convert_to_tensor(delta, self._dtype)),
                            name or "AssignSub", read_value)

    def _assign(self, kind, value, name, read_value):
        g = self._graph
        v = convert_to_tensor(value, dtype=self._dtype) if not isinstance(value, Tensor) \
            else convert_to_tensor(value)
        op = g._op(g._build().assign(kind, name, self._handle, v._ep))
        if not read_value:
            return op
        # the new value: a read that runs after the assignment, as TF 1.x's ref result
        with g.control_dependencies([op]):
            return self.read_value()

    def load(self, value, session=None):
        from ._graph import get_default_session
        s = session or get_default_session()
        if s is None:
            raise ValueError("Either session argument should be provided or default session "
                             "should be established")
        s._runner.assign_variable(self.op.name, self._dtype._code, value)

    def to_proto(self, export_scope=None):
        raise NotImplementedError("psgraph does not have Variable.to_proto yet")

    def __repr__(self):
        return "<tf.Variable '%s' shape=%s dtype=%s>" % (self.name, self._shape, self._dtype.name)

    def __getitem__(self, key):
        return self._as_tensor()[key]


def _install_variable_operators():
    from ._math_ops import _install_operators
    _install_operators(Variable)
    Variable.__getitem__ = lambda self, key: self._as_tensor()[key]


_install_variable_operators()


# ---- variable scopes ----

class VariableScope:
    def __init__(self, reuse, name="", initializer=None, regularizer=None, dtype=_dtypes.float32,
                 name_scope=""):
        self._name = name
        self._reuse = reuse
        self._initializer = initializer
        self._regularizer = regularizer
        self._dtype = dtype
        self._name_scope = name_scope
        self._partitioner = None

    @property
    def name(self):
        return self._name

    @property
    def partitioner(self):
        return self._partitioner

    def set_partitioner(self, partitioner):
        self._partitioner = partitioner

    @property
    def original_name_scope(self):
        return self._name_scope

    @property
    def reuse(self):
        return self._reuse

    @property
    def initializer(self):
        return self._initializer

    @property
    def regularizer(self):
        return self._regularizer

    @property
    def dtype(self):
        return self._dtype

    def reuse_variables(self):
        self._reuse = True

    def set_initializer(self, initializer):
        self._initializer = initializer

    def set_regularizer(self, regularizer):
        self._regularizer = regularizer

    def get_variable(self, var_store, name, *args, **kw):
        return get_variable(name, *args, **kw)


def get_variable_scope():
    g = get_default_graph()
    if g._var_scope is None:
        g._var_scope = VariableScope(False)
    return g._var_scope


@contextlib.contextmanager
def variable_scope(name_or_scope=None, default_name=None, values=None, initializer=None,
                   regularizer=None, caching_device=None, partitioner=None, custom_getter=None,
                   reuse=None, dtype=None, use_resource=None, constraint=None,
                   auxiliary_name_scope=True):
    if custom_getter is not None:
        raise NotImplementedError("psgraph does not have custom getters yet")
    g = get_default_graph()
    parent = get_variable_scope()
    if isinstance(name_or_scope, VariableScope):
        full = name_or_scope.name
        base_name_scope = name_or_scope.original_name_scope
        src = name_or_scope
    elif name_or_scope is not None:
        full = parent.name + "/" + name_or_scope if parent.name else name_or_scope
        base_name_scope = None
        src = parent
    else:
        if default_name is None:
            raise TypeError("If default_name is None then name_or_scope is required")
        prefix = parent.name + "/" + default_name if parent.name else default_name
        k = g._var_scope_counts.get(prefix, 0)
        g._var_scope_counts[prefix] = k + 1
        full = prefix if k == 0 else "%s_%d" % (prefix, k)
        base_name_scope = None
        src = parent
    if reuse is False:
        new_reuse = False
    elif reuse is None:
        new_reuse = parent.reuse
    else:
        new_reuse = reuse
    if parent.reuse is True and reuse is not AUTO_REUSE:
        new_reuse = True  # reuse is inherited
    scope = VariableScope(new_reuse, full,
                          initializer if initializer is not None else src.initializer,
                          regularizer if regularizer is not None else src.regularizer,
                          dtype or src.dtype)
    scope._partitioner = partitioner if partitioner is not None else getattr(src, "_partitioner",
                                                                             None)
    old = g._var_scope
    g._var_scope = scope
    try:
        if not auxiliary_name_scope:
            scope._name_scope = g.get_name_scope() + "/" if g.get_name_scope() else ""
            yield scope
        elif base_name_scope is not None:
            with g.name_scope(base_name_scope or None) as ns:
                scope._name_scope = ns
                yield scope
        else:
            leaf = full.rsplit("/", 1)[-1]
            with g.name_scope(leaf) as ns:
                scope._name_scope = ns
                yield scope
    finally:
        g._var_scope = old


_NO_PARTITION = object()


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=None,
                 collections=None, caching_device=None, partitioner=None, validate_shape=True,
                 use_resource=None, custom_getter=None, constraint=None, synchronization=None,
                 aggregation=None):
    g = get_default_graph()
    scope = get_variable_scope()
    full = scope.name + "/" + name if scope.name else name
    if partitioner is _NO_PARTITION:  # a shard of a partitioned variable
        partitioner = None
    elif partitioner is None:
        partitioner = scope.partitioner
    if partitioner is not None:
        if full in g._var_store:  # reused: the same shards
            return g._var_store[full]
        from . import _partitioned
        dt = _dtypes.as_dtype(dtype or scope.dtype or _dtypes.float32)
        pv = _partitioned.make(get_variable, full, name, shape, dt, partitioner,
                               initializer=initializer, regularizer=regularizer,
                               trainable=trainable, collections=collections,
                               partitioner=_NO_PARTITION)
        g._var_store[full] = pv
        return pv
    existing = g._var_store.get(full)
    if existing is not None:
        if scope.reuse is False or scope.reuse is None:
            raise ValueError("Variable %s already exists, disallowed. Did you mean to set "
                             "reuse=True or reuse=tf.AUTO_REUSE in VarScope?" % full)
        if shape is not None and not existing.shape.is_compatible_with(shape):
            raise ValueError("Trying to share variable %s, but specified shape %s and found "
                             "shape %s." % (full, as_shape(shape), existing.shape))
        if dtype is not None and _dtypes.as_dtype(dtype) != existing.dtype:
            raise ValueError("Trying to share variable %s, but specified dtype %s and found "
                             "dtype %s." % (full, _dtypes.as_dtype(dtype).name, existing.dtype.name))
        return existing
    if scope.reuse is True:
        raise ValueError("Variable %s does not exist, or was not created with tf.get_variable(). "
                         "Did you mean to set reuse=tf.AUTO_REUSE in VarScope?" % full)
    dt = _dtypes.as_dtype(dtype or scope.dtype or _dtypes.float32)
    init = initializer if initializer is not None else scope.initializer
    if isinstance(init, Tensor) or (init is not None and not callable(init)):
        value = convert_to_tensor(init, dtype=dt) if isinstance(init, Tensor) else np.asarray(init)
        if shape is not None and validate_shape:
            got = value.shape if isinstance(value, Tensor) else as_shape(value.shape)
            if not got.is_compatible_with(shape):
                raise ValueError("the initializer's shape %s is not %s" % (got, as_shape(shape)))
        v = Variable._new(g, full, None, dt, value if isinstance(value, Tensor)
                          else convert_to_tensor(value, dtype=dt), trainable is not False, collections)
    else:
        if shape is None:
            raise ValueError("Shape of a new variable (%s) must be fully defined, but instead was "
                             "None." % full)
        shape = as_shape(shape)
        if not shape.is_fully_defined():
            raise ValueError("Shape of a new variable (%s) must be fully defined, but instead was "
                             "%s." % (full, shape))
        v = Variable._new(g, full, shape.as_list(), dt, _as_initializer(init, dt),
                          trainable is not False, collections)
    g._var_store[full] = v
    reg = regularizer if regularizer is not None else scope.regularizer
    if reg is not None:
        with g.name_scope(full + "/Regularizer/"):
            loss = reg(v)
        if loss is not None:
            g.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
    return v


# ---- collections and initializers ----

def _adopt_c_variables(g):
    """Variables the C library made (optimizer slots, the global step): wrapped once and
    added to the collections."""
    trainable = set(g._c.collection("trainable_variables"))
    for h in g._c.collection("variables"):
        if h not in g._variables_by_handle:
            v = Variable._from_handle(g, h, h in trainable)
            v._register(g, None)


def global_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


all_variables = global_variables


def trainable_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def local_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def model_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.MODEL_VARIABLES, scope)


def moving_average_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)


def variables_initializer(var_list, name="init"):
    g = get_default_graph()
    ids = [v.initializer._id for v in var_list if v.initializer is not None]
    return g._op(g._build().group(name, ids))


def global_variables_initializer():
    return variables_initializer(global_variables())


initialize_all_variables = global_variables_initializer


def local_variables_initializer():
    return variables_initializer(local_variables(), name="init_1")


def is_variable_initialized(variable):
    raise NotImplementedError("psgraph does not have tf.is_variable_initialized yet")


def report_uninitialized_variables(var_list=None, name="report_uninitialized_variables"):
    raise NotImplementedError("psgraph does not have tf.report_uninitialized_variables yet")


Operation  # re-exported for the namespace
