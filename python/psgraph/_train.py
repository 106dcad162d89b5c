"""tf.train over psgraph: the optimizers (each a psg_optimizer_t: its update ops and slots
are the C library's, TensorFlow's formulas and slot names), the global step, the
learning-rate schedules, ExponentialMovingAverage, and Saver over psgraph's safetensors
checkpoints (the files `psgraph train` writes and `psgraph inspect` reads)."""
import os

from . import _array_ops
from . import _dtypes
from . import _math_ops
from . import _partitioned
from . import _psgraph
from . import _variables as vs
from ._graph import GraphKeys, Operation, Tensor, convert_to_tensor, get_default_graph


# ---- the global step ----

def get_or_create_global_step(graph=None):
    g = graph or get_default_graph()
    found = get_global_step(g)
    if found is not None:
        return found
    with g._ps_placement():  # on a ps, also where the model is each worker's own
        h = g._build().global_step()
    vs._adopt_c_variables(g)
    v = g._variables_by_handle[h[0]]
    if v not in g.get_collection(GraphKeys.GLOBAL_STEP):
        g.add_to_collection(GraphKeys.GLOBAL_STEP, v)
    return v


create_global_step = get_or_create_global_step


def _adopt_global_step(g, global_step):
    """A global step the user made (TF 1.x's `tf.Variable(0, name="global_step",
    trainable=False)`), a scalar int64 variable, becomes the one the C optimizers advance,
    when the graph has none yet: else they would make and advance a second one."""
    h = getattr(global_step, "_handle", None)
    if h is None or g._c.collection("global_step"):
        return
    if global_step.dtype.name == "int64" and global_step.shape.ndims == 0:
        g._c.add_to_collection("global_step", h[0])
        if global_step not in g.get_collection(GraphKeys.GLOBAL_STEP):
            g.add_to_collection(GraphKeys.GLOBAL_STEP, global_step)


def get_global_step(graph=None):
    g = graph or get_default_graph()
    steps = g.get_collection(GraphKeys.GLOBAL_STEP)
    if steps:
        return steps[0]
    for v in g.get_collection(GraphKeys.GLOBAL_VARIABLES):
        if v.op.name == "global_step":
            return v
    return None


def global_step(sess, global_step_tensor):
    return int(sess.run(global_step_tensor))


# ---- schedules ----

def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """learning_rate * decay_rate ^ (global_step / decay_steps): psgraph's ExponentialDecay op."""
    if global_step is None:
        raise ValueError("global_step is required for exponential_decay.")
    step = convert_to_tensor(global_step)
    if isinstance(learning_rate, Tensor) or isinstance(decay_rate, Tensor):
        raise NotImplementedError("psgraph's exponential_decay takes numbers as learning_rate and "
                                  "decay_rate")
    g = step.graph
    return g._tensor(g._build().exponential_decay(name or "ExponentialDecay", float(learning_rate),
                                                  step._ep, int(decay_steps), float(decay_rate),
                                                  bool(staircase)))


def piecewise_constant(x, boundaries, values, name=None):
    """values[0] while x <= boundaries[0], values[i] while boundaries[i-1] < x <= boundaries[i],
    values[-1] after: a sum of each value times the 0/1 mask of its interval (exact)."""
    if len(values) != len(boundaries) + 1:
        raise ValueError("The length of boundaries should be 1 less than the length of values")
    x = convert_to_tensor(x)
    g = x.graph
    with g.name_scope(name or "PiecewiseConstant"):
        out = None
        for i, v in enumerate(values):
            masks = []
            if i > 0:
                masks.append(_math_ops.greater(x, convert_to_tensor(boundaries[i - 1], dtype=x.dtype)))
            if i < len(boundaries):
                masks.append(_math_ops.less_equal(x, convert_to_tensor(boundaries[i], dtype=x.dtype)))
            term = _array_ops.constant(float(v), dtype=_dtypes.float32)
            for m in masks:
                term = _math_ops.multiply(term, _array_ops.cast(m, _dtypes.float32))
            out = term if out is None else _math_ops.add(out, term)
        return out


# ---- optimizers ----

def _is_tensor(v):
    return isinstance(v, Tensor) or hasattr(v, "_as_tensor")


class Optimizer:
    """An optimizer of the C library (psg_optimizer_t): minimize = compute_gradients (the
    graph's autodiff) + apply_gradients (the update ops with their slots)."""
    GATE_NONE, GATE_OP, GATE_GRAPH = 0, 1, 2
    _kind = None
    _slot_suffixes = ()

    def __init__(self, use_locking, name):
        self._name = name
        self._use_locking = use_locking
        self._slots = {}

    def get_name(self):
        return self._name

    def _hyper(self):
        return {}

    def _lr_tensor(self, g):
        lr = self._learning_rate
        if _is_tensor(lr):
            t = convert_to_tensor(lr)
            return _array_ops.cast(t, _dtypes.float32)._ep
        return None

    def compute_gradients(self, loss, var_list=None, gate_gradients=1, aggregation_method=None,
                          colocate_gradients_with_ops=False, grad_loss=None):
        loss = convert_to_tensor(loss)
        g = loss.graph
        if var_list is None:
            var_list = vs.trainable_variables() + g.get_collection(
                GraphKeys.TRAINABLE_RESOURCE_VARIABLES)
        var_list = list(var_list)
        if not var_list:
            raise ValueError("No variables to optimize.")
        gys = None if grad_loss is None else [convert_to_tensor(grad_loss)._ep]
        grads = g._build().gradients([loss._ep], [v._handle for v in var_list], gys)
        return [(g._tensor(e), v) for e, v in zip(grads, var_list)]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        pairs = [(gr, v) for gr, v in grads_and_vars if gr is not None]
        if not pairs:
            raise ValueError("No gradients provided for any variable: %s"
                             % ([v.name for _, v in grads_and_vars],))
        g = pairs[0][1].graph
        _adopt_global_step(g, global_step)
        cap = g._build().optimizer(self._kind, self._hyper(), self._lr_tensor(g))
        c = g._build()
        c.set_scope("")  # the slots are named "<var>/<Name>", as TensorFlow's
        op_id = c.apply_gradients(cap, [convert_to_tensor(gr)._ep for gr, _ in pairs],
                                  [v._handle for _, v in pairs])
        vs._adopt_c_variables(g)
        c_step = g._variables_by_handle[g._c.global_step()[0]]
        if c_step not in g.get_collection(GraphKeys.GLOBAL_STEP):
            g.add_to_collection(GraphKeys.GLOBAL_STEP, c_step)
        train_op = g._op(op_id)
        if global_step is not None and getattr(global_step, "_handle", None) != c_step._handle:
            # a global step of the user's own: advanced after the updates, as TF's
            inc = g._build().increment_variable("increment_global_step", global_step._handle, 1)
            train_op = g._op(g._build().group(name or self._name, [op_id, inc]))
        for _, v in pairs:
            for suffix in self._slot_suffixes:
                i = g._c.find(v.op.name + "/" + suffix)
                if i >= 0:
                    self._slots.setdefault(suffix, {})[v] = g._variables_by_handle.get(i)
        return train_op

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=1,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None):
        gv = self.compute_gradients(loss, var_list, grad_loss=grad_loss)
        return self.apply_gradients(gv, global_step=global_step, name=name)

    def get_slot_names(self):
        return sorted(self._slots)

    def get_slot(self, var, name):
        return self._slots.get(name, {}).get(var)

    def variables(self):
        return [v for d in self._slots.values() for v in d.values()]


class GradientDescentOptimizer(Optimizer):
    _kind = "sgd"

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _hyper(self):
        return {} if _is_tensor(self._learning_rate) else {"learning_rate": self._learning_rate}


class MomentumOptimizer(Optimizer):
    _kind = "momentum"
    _slot_suffixes = ("Momentum",)

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum", use_nesterov=False):
        super().__init__(use_locking, name)
        self._learning_rate, self._momentum, self._nesterov = learning_rate, momentum, use_nesterov

    def _hyper(self):
        h = {"momentum": self._momentum, "use_nesterov": self._nesterov}
        if not _is_tensor(self._learning_rate):
            h["learning_rate"] = self._learning_rate
        return h


class AdamOptimizer(Optimizer):
    _kind = "adam"
    _slot_suffixes = ("Adam", "Adam_1")

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-08, use_locking=False,
                 name="Adam"):
        super().__init__(use_locking, name)
        self._learning_rate, self._b1, self._b2, self._eps = learning_rate, beta1, beta2, epsilon

    def _hyper(self):
        h = {"beta1": self._b1, "beta2": self._b2, "epsilon": self._eps}
        if not _is_tensor(self._learning_rate):
            h["learning_rate"] = self._learning_rate
        return h


class RMSPropOptimizer(Optimizer):
    _kind = "rmsprop"
    _slot_suffixes = ("RMSProp", "RMSProp_1")

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False,
                 centered=False, name="RMSProp"):
        if centered:
            raise NotImplementedError("psgraph does not have centered RMSProp yet")
        super().__init__(use_locking, name)
        self._learning_rate, self._decay, self._momentum, self._eps = learning_rate, decay, momentum, epsilon

    def _hyper(self):
        h = {"rho": self._decay, "momentum": self._momentum, "epsilon": self._eps}
        if not _is_tensor(self._learning_rate):
            h["learning_rate"] = self._learning_rate
        return h


class AdagradOptimizer(Optimizer):
    _kind = "adagrad"
    _slot_suffixes = ("Adagrad",)

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False, name="Adagrad"):
        super().__init__(use_locking, name)
        self._learning_rate, self._init = learning_rate, initial_accumulator_value

    def _hyper(self):
        h = {"initial_accumulator": self._init}
        if not _is_tensor(self._learning_rate):
            h["learning_rate"] = self._learning_rate
        return h


class FtrlOptimizer(Optimizer):
    _kind = "ftrl"
    _slot_suffixes = ("Ftrl", "Ftrl_1")

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0, use_locking=False,
                 name="Ftrl", accum_name=None, linear_name=None, l2_shrinkage_regularization_strength=0.0,
                 beta=None):
        if l2_shrinkage_regularization_strength:
            raise NotImplementedError("psgraph does not have FTRL's l2 shrinkage yet")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._h = {"lr_power": learning_rate_power, "initial_accumulator": initial_accumulator_value,
                   "l1": l1_regularization_strength, "l2": l2_regularization_strength}

    def _hyper(self):
        h = dict(self._h)
        if not _is_tensor(self._learning_rate):
            h["learning_rate"] = self._learning_rate
        return h


# ---- moving averages ----

class ExponentialMovingAverage:
    """Shadow variables "<var>/ExponentialMovingAverage", each updated by apply() as
    shadow -= (1 - decay) * (shadow - var), decay min(decay, (1 + n) / (10 + n)) with
    num_updates n: all by graph ops."""

    def __init__(self, decay, num_updates=None, zero_debias=False, name="ExponentialMovingAverage"):
        if zero_debias:
            raise NotImplementedError("psgraph does not have zero_debias moving averages yet")
        self._decay = decay
        self._num_updates = num_updates
        self._name = name
        self._averages = {}

    @property
    def name(self):
        return self._name

    def _decay_tensor(self):
        decay = _array_ops.constant(float(self._decay), name="decay")
        if self._num_updates is None:
            return decay
        n = _array_ops.cast(convert_to_tensor(self._num_updates), _dtypes.float32)
        ratio = _math_ops.divide(_math_ops.add(n, 1.0), _math_ops.add(n, 10.0))
        return _math_ops.minimum(decay, ratio)

    def apply(self, var_list=None):
        g = get_default_graph()
        if var_list is None:
            var_list = vs.trainable_variables()
        updates = []
        with g.name_scope(self._name):
            decay = self._decay_tensor()
            one_minus = _math_ops.subtract(1.0, decay)
        for v in var_list:
            if v.dtype != _dtypes.float32:
                raise TypeError("The variables must be float32: %s is %s" % (v.name, v.dtype.name))
            avg = self._averages.get(v)
            if avg is None:
                init = v.initialized_value()
                if init is None:
                    init = v._as_tensor()
                avg = vs.Variable._new(g, self.average_name(v), None, v.dtype, init, False,
                                       [GraphKeys.GLOBAL_VARIABLES, GraphKeys.MOVING_AVERAGE_VARIABLES])
                self._averages[v] = avg
            with g.name_scope(self._name):
                delta = _math_ops.multiply(_math_ops.subtract(v._as_tensor(), avg._as_tensor()), one_minus)
                updates.append(g._build().assign("assign_add", "AssignMovingAvg", avg._handle, delta._ep))
        return g._op(g._build().group(self._name, updates))

    def average(self, var):
        return self._averages.get(var)

    def average_name(self, var):
        return var.op.name + "/" + self._name

    def variables_to_restore(self, moving_avg_variables=None):
        out = {}
        for v in vs.global_variables():
            if v in self._averages.values():
                continue
            out[self.average_name(v) if v in self._averages or v.trainable else v.op.name] = v
        return out


# ---- checkpoints ----

_INDEX = ".index.json"


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix ("DIR/model.ckpt-STEP") of the newest checkpoint of DIR that verifies, or None."""
    path = _psgraph.latest_checkpoint(checkpoint_dir)
    if path is None:
        return None
    return path[:-len(_INDEX)] if path.endswith(_INDEX) else path


def _checkpoint_file(path):
    """The file psgraph opens for a TF-style path: a prefix, an index, a shard, or a folder."""
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            from .errors import NotFoundError
            raise NotFoundError("no checkpoint in %s" % path)
        path = latest
    if path.endswith(_INDEX) or path.endswith(".safetensors"):
        return path
    return path + _INDEX


def _checkpoint_names(path):
    """The tensor names of a checkpoint: an index's weight_map (no shard read: in a cluster
    the shards may be on the ps tasks' hosts), or a safetensors file's."""
    if path.endswith(_INDEX):
        import json
        try:
            with open(path) as f:
                return set(json.load(f).get("weight_map", {}))
        except (OSError, ValueError, AttributeError):
            return set()  # the restore itself says what is wrong with it
    return {n for n, _, _ in _psgraph.checkpoint_info(_psgraph.checkpoint_open(path))[1]}


class Saver:
    """Saves and restores variables as psgraph's checkpoints: one safetensors shard and its
    JSON index per save, named "model.ckpt-STEP" in the folder of save_path (psgraph's name,
    whatever save_path's base name), atomic, the last max_to_keep kept. var_list (a list, or a
    dict {name in the checkpoint: variable}) says what restore reads; save writes every
    variable of the session."""

    def __init__(self, var_list=None, reshape=False, sharded=False, max_to_keep=5,
                 keep_checkpoint_every_n_hours=10000.0, name=None, restore_sequentially=False,
                 saver_def=None, builder=None, defer_build=False, allow_empty=False,
                 write_version=2, pad_step_number=False, save_relative_paths=False, filename=None,
                 save_debug_info=False):
        if isinstance(var_list, dict):
            self._map = {k: v.op.name for k, v in var_list.items()}
        elif var_list is not None:
            self._map = {v.op.name: v.op.name for v in var_list}
        else:
            self._map = None
        self._keep = max_to_keep if max_to_keep else 0
        self._last = []

    def save(self, sess, save_path, global_step=None, latest_filename=None, meta_graph_suffix="meta",
             write_meta_graph=True, write_state=True, strip_default_attrs=False, save_debug_info=False):
        directory = os.path.dirname(save_path) or "."
        os.makedirs(directory, exist_ok=True)
        if global_step is None:
            gs = get_global_step(sess.graph)
            step = int(sess.run(gs)) if gs is not None else 0
        elif isinstance(global_step, (Tensor,)) or hasattr(global_step, "_as_tensor"):
            step = int(sess.run(global_step))
        else:
            step = int(global_step)
        sess._runner.save(directory, step, self._keep)
        prefix = os.path.join(directory, "model.ckpt-%d" % step)
        self._last = [p for p in self._last if p != prefix] + [prefix]
        if self._keep:
            self._last = self._last[-self._keep:]
        return prefix

    def restore(self, sess, save_path):
        """Every variable of the checkpoint (or var_list's); a variable that the checkpoint
        holds in another layout of row shards (NAME/part_i: a partitioned variable, e.g. a
        dense kernel a cluster's replica setter cut) is put together from it or cut out of
        it, in one process."""
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        path = _checkpoint_file(save_path)
        moves = {}
        if self._map is None:
            names = _checkpoint_names(path)
            variables = {v.op.name: v for v in sess.graph._variables_by_handle.values()}
            moves = _partitioned.layout_moves(names, {n: v.shape.as_list()
                                                       for n, v in variables.items()})
            if moves and not getattr(sess._runner, "restores_layouts", False):
                name = sorted(moves)[0]
                raise NotImplementedError(
                    "%s holds variable %s as %s: a cluster restores a checkpoint of its own "
                    "layout (restore it in one process, or make the replica setter with "
                    "shard_bytes=0 / PSGRAPH_SHARD_BYTES=0 as the checkpoint's job had it)"
                    % (path, name, "row shards" if moves[name][0] == "concat" else
                       "one variable " + moves[name][1]))
        # the tensors of the graph's variables only: no variable of the other layout made
        step = sess._runner.restore(path, {n: n for n in names if n in variables}
                                    if moves else self._map)
        ck = _psgraph.checkpoint_open(path) if moves else None
        for name, move in sorted(moves.items()):
            v = variables[name]
            value = _partitioned.value_of(move, lambda n: _psgraph.checkpoint_read(ck, n),
                                          v.shape.as_list(), name, path)
            sess._runner.assign_variable(name, v.dtype._code, value)
        return step

    @property
    def last_checkpoints(self):
        return list(self._last)

    def as_saver_def(self):
        raise NotImplementedError("psgraph does not have SaverDef yet")


def list_variables(ckpt_dir_or_file):
    ck = _psgraph.checkpoint_open(_checkpoint_file(ckpt_dir_or_file))
    _, tensors = _psgraph.checkpoint_info(ck)
    return [(name, list(shape)) for name, _, shape in tensors]


def load_variable(ckpt_dir_or_file, name):
    ck = _psgraph.checkpoint_open(_checkpoint_file(ckpt_dir_or_file))
    return _psgraph.checkpoint_read(ck, name)


Operation  # re-exported for the namespace
