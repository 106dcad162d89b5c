"""Graphs, operations and tensors as TensorFlow 1.x's, over psgraph's C graph (psg_graph_t):
the default graph, name scopes, devices, control dependencies and collections. Every node is
built by the C library's builders (so a shape mistake is found, and named, by the same code
as in C); Python keeps only what a TF 1.x user sees: names, scopes, collections."""
import contextlib
import os
import re
import threading

from . import _dtypes
from . import _psgraph


class Dimension:
    """One dim of a TensorShape, as TF 1.x's (`value` is None when unknown)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = None if value is None else int(value)

    def __int__(self):
        if self.value is None:
            raise ValueError("the dimension is unknown")
        return self.value

    __index__ = __int__

    def __eq__(self, other):
        other = other.value if isinstance(other, Dimension) else other
        if self.value is None or other is None:
            return None
        return self.value == other

    def __ne__(self, other):
        eq = self.__eq__(other)
        return None if eq is None else not eq

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return "Dimension(%s)" % self.value

    def __str__(self):
        return "?" if self.value is None else str(self.value)

    def _arith(self, other, fn):
        other = other.value if isinstance(other, Dimension) else other
        if self.value is None or other is None:
            return Dimension(None)
        return Dimension(fn(self.value, int(other)))

    def __add__(self, o):
        return self._arith(o, lambda a, b: a + b)

    def __mul__(self, o):
        return self._arith(o, lambda a, b: a * b)

    def __floordiv__(self, o):
        return self._arith(o, lambda a, b: a // b)

    __radd__ = __add__
    __rmul__ = __mul__


class TensorShape:
    """A static shape: `dims` None for an unknown rank, else a list of Dimension."""

    def __init__(self, dims):
        if isinstance(dims, TensorShape):
            dims = dims.as_list() if dims.ndims is not None else None
        self._dims = None if dims is None else [d if isinstance(d, Dimension) else Dimension(d)
                                                for d in dims]

    @property
    def dims(self):
        return self._dims

    @property
    def ndims(self):
        return None if self._dims is None else len(self._dims)

    rank = ndims

    def as_list(self):
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape")
        return [d.value for d in self._dims]

    def _as_c(self):
        return None if self._dims is None else tuple(d.value for d in self._dims)

    def is_fully_defined(self):
        return self._dims is not None and all(d.value is not None for d in self._dims)

    def num_elements(self):
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims:
            n *= d.value
        return n

    def is_compatible_with(self, other):
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a.value is None or b.value is None or a.value == b.value
                   for a, b in zip(self._dims, other._dims))

    def __len__(self):
        if self._dims is None:
            raise ValueError("the rank is unknown")
        return len(self._dims)

    def __iter__(self):
        if self._dims is None:
            raise ValueError("the rank is unknown")
        return iter(self._dims)

    def __getitem__(self, key):
        if self._dims is None:
            raise ValueError("the rank is unknown")
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return self._dims[key]

    def __eq__(self, other):
        try:
            other = as_shape(other)
        except TypeError:
            return NotImplemented
        return self._dims == other._dims if self._dims is not None and other._dims is not None \
            else self._dims is other._dims

    def __repr__(self):
        if self._dims is None:
            return "TensorShape(None)"
        return "TensorShape(%s)" % [d.value for d in self._dims]

    def __str__(self):
        if self._dims is None:
            return "<unknown>"
        return "(%s)" % ", ".join(str(d) for d in self._dims) if len(self._dims) != 1 \
            else "(%s,)" % self._dims[0]


def as_shape(shape):
    if isinstance(shape, TensorShape):
        return shape
    if shape is None:
        return TensorShape(None)
    if isinstance(shape, int):
        return TensorShape([shape])
    return TensorShape([None if (d is None or (isinstance(d, int) and d < 0)) else d
                        for d in (s.value if isinstance(s, Dimension) else s for s in shape)])


class Operation:
    """A node of the graph: its outputs are Tensors; fetching it runs it and returns None."""
    __slots__ = ("graph", "_id", "_name", "_type", "_num_outputs", "_outputs", "_device")

    def __init__(self, graph, node_id):
        self.graph = graph
        self._id = node_id
        self._name, self._type, self._num_outputs, self._device = graph._c.node(node_id)
        self._outputs = None

    @property
    def name(self):
        return self._name

    @property
    def type(self):
        return self._type

    @property
    def device(self):
        return self._device

    @property
    def outputs(self):
        if self._outputs is None:
            self._outputs = [Tensor(self, i) for i in range(self._num_outputs)]
        return self._outputs

    @property
    def inputs(self):
        ins, _ = self.graph._c.inputs(self._id)
        return [self.graph._tensor(e) for e in ins]

    @property
    def control_inputs(self):
        _, ctl = self.graph._c.inputs(self._id)
        return [self.graph._op(i) for i in ctl]

    def get_attr(self, name):
        return self.graph._c.attr(self._id, name)

    def run(self, feed_dict=None, session=None):
        _session_for(session, self.graph).run(self, feed_dict=feed_dict)

    def __repr__(self):
        return "<tf.Operation '%s' type=%s>" % (self._name, self._type)


class Tensor:
    """One output of an Operation. Its dtype and static shape are what psgraph inferred
    when the node was built."""
    __slots__ = ("op", "value_index", "_dtype", "_shape", "__weakref__")

    # numpy must defer to the Tensor's operators (np.float32(2) * t builds a node)
    __array_priority__ = 100

    def __init__(self, op, value_index, shape=None):
        self.op = op
        self.value_index = value_index
        code, cshape = op.graph._c.output(op._id, value_index)
        self._dtype = _dtypes.from_code(code)
        self._shape = as_shape(cshape) if shape is None else as_shape(shape)

    @property
    def graph(self):
        return self.op.graph

    @property
    def dtype(self):
        return self._dtype

    @property
    def name(self):
        return "%s:%d" % (self.op.name, self.value_index)

    @property
    def shape(self):
        return self._shape

    @property
    def device(self):
        return self.op.device

    def get_shape(self):
        return self._shape

    def set_shape(self, shape):
        shape = as_shape(shape)
        if not self._shape.is_compatible_with(shape):
            raise ValueError("Shapes %s and %s are incompatible" % (self._shape, shape))
        if shape.ndims is not None:
            self._shape = shape

    @property
    def _ep(self):
        return (self.op._id, self.value_index)

    def eval(self, feed_dict=None, session=None):
        return _session_for(session, self.graph).run(self, feed_dict=feed_dict)

    def consumers(self):
        g = self.graph
        return [g._op(i) for i in range(g._c.num_nodes())
                if self._ep in g._c.inputs(i)[0]]

    def __repr__(self):
        return "<tf.Tensor '%s' shape=%s dtype=%s>" % (self.name, self._shape, self._dtype.name)

    # == and hash are object identity, as TF 1.x's (tf.equal compares values); left to
    # object's, in C: Session.run hashes its fetches and feeds every step

    def __bool__(self):
        raise TypeError("Using a tf.Tensor as a Python bool is not allowed: the value is only "
                        "known when a session runs it")

    def __iter__(self):
        raise TypeError("Tensor objects are not iterable in graph mode")

    def __len__(self):
        raise TypeError("len is not well defined for a symbolic Tensor; use tf.shape")


# ---- the default graph ----

class _DefaultStack(threading.local):
    def __init__(self):
        self.graphs = []
        self.sessions = []


_stack = _DefaultStack()
_global_graph = None


def get_default_graph():
    global _global_graph
    if _stack.graphs:
        return _stack.graphs[-1]
    if _global_graph is None:
        _global_graph = Graph()
    return _global_graph


def reset_default_graph():
    global _global_graph
    if _stack.graphs:
        raise AssertionError("Do not use tf.reset_default_graph() to clear nested graphs")
    _global_graph = None


def get_default_session():
    return _stack.sessions[-1] if _stack.sessions else None


def _session_for(session, graph):
    s = session or get_default_session()
    if s is None:
        raise ValueError("Cannot evaluate tensor using `eval()`: No default session is registered. "
                         "Use `with sess.as_default()` or pass an explicit session to `eval(session=sess)`")
    if s.graph is not graph:
        raise ValueError("Cannot use the given session to evaluate tensor: the tensor's graph is "
                         "different from the session's graph.")
    return s


class GraphKeys:
    GLOBAL_VARIABLES = "variables"
    VARIABLES = "variables"
    LOCAL_VARIABLES = "local_variables"
    MODEL_VARIABLES = "model_variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    TRAINABLE_RESOURCE_VARIABLES = "trainable_resource_variables"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    REGULARIZATION_LOSSES = "regularization_losses"
    LOSSES = "losses"
    UPDATE_OPS = "update_ops"
    SUMMARIES = "summaries"
    GLOBAL_STEP = "global_step"
    TRAIN_OP = "train_op"
    INIT_OP = "init_op"
    LOCAL_INIT_OP = "local_init_op"
    READY_OP = "ready_op"
    SAVERS = "savers"
    QUEUE_RUNNERS = "queue_runners"
    ACTIVATIONS = "activations"
    WEIGHTS = "weights"
    BIASES = "biases"
    COND_CONTEXT = "cond_context"
    WHILE_CONTEXT = "while_context"


_VALID_SCOPE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/]*$")
_DEFAULT_GRAPH_SEED = 87654321


class Graph:
    """A TF 1.x Graph over one psg_graph_t."""

    def __init__(self):
        self._c = _psgraph.Graph()
        self._ops = {}
        self._collections = {}
        self._names_in_use = {}
        self._name_stack = ""
        self._control_stack = []   # lists of Operations, as pushed into the C graph
        self._var_store = {}       # full name -> Variable (get_variable)
        self._var_scope = None     # the current VariableScope (variables.py)
        self._var_scope_counts = {}
        self._variables_by_handle = {}  # handle node id -> Variable
        self._ps_setters = []  # the ps tasks' setters of local-model strategies' scopes
        self._replica_setters = []  # the setter of each tf.device scope (None: a device string)
        self._seed = None
        self._finalized = False
        self._building_function = False
        self._version = 0

    # ---- nodes ----

    def _op(self, node_id):
        op = self._ops.get(node_id)
        if op is None:
            op = self._ops[node_id] = Operation(self, node_id)
        return op

    def _tensor(self, ep):
        if ep is None:
            return None
        return self._op(ep[0]).outputs[ep[1]]

    def _build(self):
        """The C graph, its scope set to the current name scope: before any builder call."""
        if self._finalized:
            raise RuntimeError("Graph is finalized and cannot be modified.")
        self._c.set_scope(self._name_stack)
        return self._c

    def get_operations(self):
        return [self._op(i) for i in range(self._c.num_nodes())]

    def get_operation_by_name(self, name):
        i = self._c.find(name)
        if i < 0:
            raise KeyError("The name '%s' refers to an Operation not in the graph." % name)
        return self._op(i)

    def get_tensor_by_name(self, name):
        if ":" not in name:
            raise ValueError("The name '%s' looks like an (invalid) Operation name, not a Tensor. "
                             "Tensor names must be of the form \"<op_name>:<output_index>\"." % name)
        op_name, index = name.rsplit(":", 1)
        op = self.get_operation_by_name(op_name)
        i = int(index)
        if i >= len(op.outputs):
            raise KeyError("The name '%s' refers to a Tensor which does not exist. The operation, "
                           "'%s', exists but only has %d outputs." % (name, op_name, len(op.outputs)))
        return op.outputs[i]

    def as_graph_element(self, obj, allow_tensor=True, allow_operation=True):
        if isinstance(obj, str):
            return self.get_tensor_by_name(obj) if ":" in obj else self.get_operation_by_name(obj)
        if hasattr(obj, "_as_graph_element"):
            obj = obj._as_graph_element()
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise ValueError("%s is not an element of this graph." % obj)
            return obj
        raise TypeError("Can not convert a %s into a Tensor or Operation." % type(obj).__name__)

    @property
    def seed(self):
        return self._seed

    @seed.setter
    def seed(self, value):
        self._seed = value

    @property
    def version(self):
        return self._c.num_nodes()

    @property
    def finalized(self):
        return self._finalized

    def finalize(self):
        self._finalized = True

    # ---- defaults ----

    @contextlib.contextmanager
    def as_default(self):
        _stack.graphs.append(self)
        try:
            yield self
        finally:
            _stack.graphs.pop()

    # ---- names ----

    def get_name_scope(self):
        return self._name_stack

    def _name_taken(self, name):
        return name in self._names_in_use or self._c.find(name) >= 0

    def unique_name(self, name, mark_as_used=True):
        if self._name_stack:
            name = self._name_stack + "/" + name
        base, candidate, k = name, name, 0
        while self._name_taken(candidate):
            k += 1
            candidate = "%s_%d" % (base, k)
        if mark_as_used:
            self._names_in_use[candidate] = 1
        return candidate

    @contextlib.contextmanager
    def name_scope(self, name):
        old = self._name_stack
        if name is None or name == "":
            new = ""
        elif name.endswith("/"):
            new = name[:-1]
        else:
            if not _VALID_SCOPE.match(name):
                raise ValueError("'%s' is not a valid scope name" % name)
            new = self.unique_name(name)
        self._name_stack = new
        try:
            yield (new + "/") if new else ""
        finally:
            self._name_stack = old

    # ---- devices and control dependencies ----

    @contextlib.contextmanager
    def device(self, device_name_or_function):
        # a local-model strategy's setter: the model on the worker, its ps setter kept
        ps = getattr(device_name_or_function, "_ps_setter", None)
        setter = device_name_or_function._model if ps is not None else device_name_or_function
        if hasattr(setter, "_c") and hasattr(setter, "ps_tasks"):
            # replica_device_setter: kept alive while pushed
            self._c.push_replica_setter(setter._c)
            self._ps_setters.append(ps)
            self._replica_setters.append(setter)
            try:
                yield
            finally:
                self._replica_setters.pop()
                self._ps_setters.pop()
                self._c.pop_device()
            return
        if callable(device_name_or_function):
            raise NotImplementedError("psgraph does not have device functions in tf.device yet "
                                      "(a device string works)")
        spec = device_name_or_function or ""
        self._c.push_device(spec)
        self._replica_setters.append(None)
        try:
            yield
        finally:
            self._replica_setters.pop()
            self._c.pop_device()

    @contextlib.contextmanager
    def _ps_placement(self):
        """Under a local-model strategy's setter, what the cluster shares (the global step,
        the strategy's copies) goes on the ps tasks by the replica setter's rules; else
        where the current device says."""
        ps = self._ps_setters[-1] if self._ps_setters else None
        if ps is None:
            yield
            return
        self._c.push_replica_setter(ps._c)
        try:
            yield
        finally:
            self._c.pop_device()

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        if control_inputs is None:
            self._c.push_control([], True)
            saved, self._control_stack = self._control_stack, []
            try:
                yield
            finally:
                self._control_stack = saved
                self._c.pop_control()
            return
        ops = []
        for c in control_inputs:
            if hasattr(c, "_as_graph_element"):
                c = c._as_graph_element()
            if isinstance(c, Tensor):
                c = c.op
            if not isinstance(c, Operation):
                raise TypeError("Control input must be Operation or Tensor: %r" % (c,))
            ops.append(c)
        self._c.push_control([o._id for o in ops], False)
        self._control_stack.append(ops)
        try:
            yield
        finally:
            self._control_stack.pop()
            self._c.pop_control()

    def _in_control_context(self):
        return any(self._control_stack)

    # ---- collections ----

    def add_to_collection(self, name, value):
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names, value):
        for n in ([names] if isinstance(names, str) else names):
            self.add_to_collection(n, value)

    def get_collection_ref(self, name):
        return self._collections.setdefault(name, [])

    def get_collection(self, name, scope=None):
        items = self._collections.get(name, [])
        if scope is None:
            return list(items)
        pat = re.compile(scope)
        return [it for it in items if hasattr(it, "name") and pat.match(it.name)]

    def get_all_collection_keys(self):
        return list(self._collections)

    def clear_collection(self, name):
        self._collections.pop(name, None)

    # ---- seeds ----

    def _op_seed(self, op_seed):
        """TensorFlow's get_seed: a graph seed and an op seed, mixed into one 64-bit seed for
        the C op (which mixes in the node's name too)."""
        gs = self._seed
        if gs is None and op_seed is None:
            return int.from_bytes(os.urandom(8), "little")
        if gs is None:
            gs = _DEFAULT_GRAPH_SEED
        if op_seed is None:
            op_seed = self._c.num_nodes()
        return (int(gs) * 1000003 + int(op_seed)) & 0xFFFFFFFFFFFFFFFF


def convert_to_tensor(value, dtype=None, name=None, preferred_dtype=None):
    """A Tensor from a Tensor, a Variable, or a Python / numpy value (a constant)."""
    if isinstance(value, Tensor):
        if dtype is not None and _dtypes.as_dtype(dtype) != value.dtype:
            raise ValueError("Tensor conversion requested dtype %s for Tensor with dtype %s: %r"
                             % (_dtypes.as_dtype(dtype).name, value.dtype.name, value))
        return value
    if hasattr(value, "_as_tensor"):
        t = value._as_tensor()
        if dtype is not None and _dtypes.as_dtype(dtype) != t.dtype:
            raise ValueError("Tensor conversion requested dtype %s for variable with dtype %s"
                             % (_dtypes.as_dtype(dtype).name, t.dtype.name))
        return t
    if isinstance(value, Operation):
        raise TypeError("Can't convert Operation '%s' to Tensor (target dtype=%s)"
                        % (value.name, dtype))
    from . import _array_ops
    return _array_ops.constant(value, dtype=dtype or preferred_dtype, name=name)
