"""Sessions as TF 1.x's: Session.run with fetches as a tensor, an op, or nested lists,
tuples, dicts and namedtuples of them, and a feed_dict; results put back in the fetches'
shape (TF's session.py: flattened once, rebuilt after). Each signature (fetches, feeds) is
a prepared C plan (psg_callable_t) made on first use and kept; the step runs in C without
the GIL. The runner behind a Session is local (target ''), or psgraph's distributed
session over this process's tf.train.Server (target server.target: _dist._DistRunner)."""
import collections
import os

from . import _graph as ops
from . import _psgraph
from ._graph import Operation, Tensor, get_default_graph


class GPUOptions:
    def __init__(self, allow_growth=False, per_process_gpu_memory_fraction=0.0,
                 visible_device_list="", **kw):
        self.allow_growth = allow_growth
        self.per_process_gpu_memory_fraction = per_process_gpu_memory_fraction
        self.visible_device_list = visible_device_list
        for k, v in kw.items():
            setattr(self, k, v)


class ConfigProto:
    """The session options TF 1.x scripts set. psgraph uses the thread counts (its one pool
    of compute threads: intra_op_parallelism_threads, else inter_op, else every core) and
    keeps the others for the distributed session (device_filters)."""
    _FIELDS = ("device_count", "intra_op_parallelism_threads", "inter_op_parallelism_threads",
               "use_per_session_threads", "allow_soft_placement", "log_device_placement",
               "device_filters", "gpu_options", "operation_timeout_in_ms", "isolate_session_state",
               "graph_options", "rpc_options", "cluster_def", "experimental")

    def __init__(self, **kw):
        for k in kw:
            if k not in self._FIELDS:
                raise ValueError('Protocol message ConfigProto has no "%s" field.' % k)
        self.device_count = dict(kw.get("device_count") or {})
        self.intra_op_parallelism_threads = int(kw.get("intra_op_parallelism_threads", 0))
        self.inter_op_parallelism_threads = int(kw.get("inter_op_parallelism_threads", 0))
        self.use_per_session_threads = bool(kw.get("use_per_session_threads", False))
        self.allow_soft_placement = bool(kw.get("allow_soft_placement", False))
        self.log_device_placement = bool(kw.get("log_device_placement", False))
        self.device_filters = list(kw.get("device_filters") or [])
        self.gpu_options = kw.get("gpu_options") or GPUOptions()
        self.operation_timeout_in_ms = int(kw.get("operation_timeout_in_ms", 0))
        self.isolate_session_state = bool(kw.get("isolate_session_state", False))

    def _threads(self):
        if self.intra_op_parallelism_threads > 0:
            return self.intra_op_parallelism_threads
        if self.inter_op_parallelism_threads > 0:
            return self.inter_op_parallelism_threads
        return os.cpu_count() or 1


class RunOptions:
    FULL_TRACE = 3
    NO_TRACE = 0

    def __init__(self, trace_level=0, **kw):
        self.trace_level = trace_level


class RunMetadata:
    """Filled by a run with RunOptions(trace_level=FULL_TRACE): step_stats (psgraph.timeline)."""

    def __init__(self):
        self.step_stats = None


class _LocalRunner:
    """Runs the graph in this process: a psg_session_t."""
    restores_layouts = True  # Saver.restore assigns a variable put together from shards

    def __init__(self, graph, threads, allow_soft_placement=False):
        self._s = _psgraph.Session(graph._c, threads, allow_soft_placement)

    def make_callable(self, feeds, fetches, targets, feed_shapes):
        return self._s.make_callable(feeds, fetches, targets, feed_shapes)

    def save(self, directory, step, keep):
        return self._s.save(directory, step, keep)

    def restore(self, path, mapping):
        return self._s.restore(path, mapping)

    def read_variable(self, name):
        return self._s.read_variable(name)

    def assign_variable(self, name, dtype_code, value):
        self._s.assign_variable(name, dtype_code, value)

    def variable_names(self):
        return self._s.variable_names()

    def trace_start(self, pid, process_name, device, step):
        self._s.trace_start(pid, process_name, device, step)

    def trace_stop(self, path):
        return self._s.trace_stop(path)

    def close(self):
        self._s = None


# ---- fetches ----

def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(x, "_fields")


class _Plan:
    """One signature: the C callable and how its results become the fetches' structure."""
    __slots__ = ("callable", "rebuild", "n_user", "strategy")


def _element(g, f):
    """A fetch leaf as a Tensor, an Operation, or a summary (which fetches several)."""
    if isinstance(f, (Tensor, Operation)):
        if f.graph is not g:
            raise ValueError("Tensor %s is not an element of this graph." % f)
        return f
    if hasattr(f, "_summary_tensors"):
        return f
    if hasattr(f, "_as_graph_element"):
        return f._as_graph_element()
    if isinstance(f, str):
        return g.as_graph_element(f)
    raise TypeError("Fetch argument %r has invalid type %s, must be a string or Tensor. (Can "
                    "not convert a %s into a Tensor or Operation.)" % (f, type(f), type(f).__name__))


def _flatten(g, fetches, leaves):
    """Collects the leaves of fetches; returns a function rebuilding the structure from an
    iterator of leaf values."""
    if isinstance(fetches, (list, tuple)) and not hasattr(fetches, "_summary_tensors"):
        subs = [_flatten(g, f, leaves) for f in fetches]
        if _is_namedtuple(fetches):
            return lambda it: type(fetches)(*[s(it) for s in subs])
        kind = type(fetches) if isinstance(fetches, tuple) else list
        return lambda it: kind([s(it) for s in subs])
    if isinstance(fetches, dict):
        keys = list(fetches)
        subs = [_flatten(g, fetches[k], leaves) for k in keys]
        kind = type(fetches) if isinstance(fetches, collections.OrderedDict) else dict
        return lambda it: kind((k, s(it)) for k, s in zip(keys, subs))
    if fetches is None:
        raise TypeError("Fetch argument None has invalid type <class 'NoneType'>")
    leaves.append(_element(g, fetches))
    return lambda it: next(it)


def _fetch_key(f):
    """A hashable key of a nested fetch structure: each level's kind (list, tuple, a
    namedtuple, dict, OrderedDict) and keys, and the leaves; TypeError for an unhashable
    leaf. Its plan is made once, not each step (it was: 2.7 ms a step of a MonitoredSession)."""
    t = type(f)
    if isinstance(f, (list, tuple)) and not hasattr(f, "_summary_tensors"):
        return (t, tuple(_fetch_key(x) for x in f))
    if isinstance(f, dict):
        return (t, tuple((k, _fetch_key(v)) for k, v in f.items()))
    hash(f)
    return f


def _feed_key(g, k):
    if isinstance(k, Tensor):
        if k.graph is not g:
            raise ValueError("Cannot interpret feed_dict key as Tensor: Tensor %s is not an element "
                             "of this graph." % k)
        return k
    if hasattr(k, "_as_graph_element") and not isinstance(k, Operation):
        raise TypeError("psgraph does not feed variables: feed a placeholder (%r)" % (k,))
    if isinstance(k, str):
        t = g.as_graph_element(k)
        if isinstance(t, Tensor):
            return t
    raise TypeError("Cannot interpret feed_dict key as Tensor: %r" % (k,))


class BaseSession:
    def __init__(self, target="", graph=None, config=None):
        self._graph = graph or get_default_graph()
        self._config = config or ConfigProto()
        self._target = target or ""
        if target not in ("", None, b""):
            from . import _dist
            self._runner = _dist._DistRunner(self._graph, _dist._server_for(target), config)
            _dist.close_at_exit(self, 2)
        else:
            self._runner = _LocalRunner(self._graph, self._config._threads(),
                                        self._config.allow_soft_placement)
        self._plans = {}
        self._closed = False
        self._default_ctx = None

    @property
    def graph(self):
        return self._graph

    @property
    def graph_def(self):
        raise NotImplementedError("psgraph does not have GraphDef yet")

    @property
    def sess_str(self):
        return self._target

    def _plan(self, fetches, feed_keys):
        g = self._graph
        leaves = []
        rebuild = _flatten(g, fetches, leaves)
        eps, targets, slots = [], [], []
        for leaf in leaves:
            if isinstance(leaf, Operation):
                targets.append(leaf._id)
                slots.append(None)
            elif isinstance(leaf, Tensor):
                slots.append(len(eps))
                eps.append(leaf._ep)
            else:  # a summary: several tensors packed into one value
                first = len(eps)
                ts = leaf._summary_tensors()
                eps.extend(t._ep for t in ts)
                slots.append((leaf, first, len(ts)))
        feeds = [_feed_key(g, k) for k in feed_keys]
        shapes = [f.shape._as_c() if f.op.type != "Placeholder" else None for f in feeds]
        feed_eps = [f._ep for f in feeds]
        plan = _Plan()
        plan.n_user = len(eps)
        # a run of a strategy's train op is its step (psgraph.train.Strategy): the strategy's
        # fetches and its local step's feed go with the caller's
        plan.strategy = getattr(g, "_strategy_step", None)
        if plan.strategy is not None and plan.strategy.train_id in targets:
            eps = eps + plan.strategy.extra_fetches
            if plan.strategy.local_step is not None:
                feed_eps.append(plan.strategy.local_step)
                shapes.append(None)
        else:
            plan.strategy = None
        plan.callable = self._runner.make_callable(feed_eps, eps, targets, shapes)
        single = not isinstance(fetches, (list, tuple, dict)) or hasattr(fetches, "_summary_tensors")
        if single and isinstance(slots[0], int):
            plan.rebuild = lambda out: out[0]
        elif all(isinstance(s, int) for s in slots) and type(fetches) is list:
            plan.rebuild = lambda out: out
        else:
            def rebuild_all(out):
                vals = []
                for s in slots:
                    if s is None:
                        vals.append(None)
                    elif isinstance(s, int):
                        vals.append(out[s])
                    else:
                        leaf, first, n = s
                        vals.append(leaf._pack(out[first:first + n]))
                return rebuild(iter(vals))
            plan.rebuild = rebuild_all
        return plan

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        if feed_dict:
            keys = tuple(feed_dict)
            values = list(feed_dict.values())
        else:
            keys, values = (), []
        t = type(fetches)
        try:
            if t is list or t is tuple:
                key = (t, tuple(fetches), keys)
            elif t is dict:
                key = (t, tuple(fetches.items()), keys)
            else:
                key = (t, fetches, keys)
            plan = self._plans.get(key)
        except TypeError:  # a nested structure (MonitoredSession's {"caller", "hooks"}: each step)
            try:
                key = ("nested", _fetch_key(fetches), keys)
                plan = self._plans.get(key)
            except TypeError:  # an unhashable leaf: prepared each time (the C plan too)
                key, plan = None, None
        if plan is None:
            plan = self._plan(fetches, keys)
            if key is not None:
                self._plans[key] = plan
        if options is not None and getattr(options, "trace_level", 0) and run_metadata is not None:
            from . import timeline
            return timeline.traced_run(self, run_metadata,
                                       lambda: plan.rebuild(self._call(plan, values)))
        return plan.rebuild(self._call(plan, values))

    def _call(self, plan, values):
        if plan.strategy is not None:
            return plan.strategy.run(self, plan, values)
        return plan.callable.run(values)

    def partial_run_setup(self, *a, **kw):
        raise NotImplementedError("psgraph does not have partial runs yet")

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        feed_list = list(feed_list or [])
        plan = self._plan(fetches, feed_list)

        def call(*args, **kw):
            if len(args) != len(feed_list):
                raise ValueError("expected %d feed values, got %d" % (len(feed_list), len(args)))
            return plan.rebuild(self._call(plan, list(args)))
        return call

    def list_devices(self):
        return ["/job:localhost/replica:0/task:0/device:CPU:0"]

    def close(self):
        if not self._closed:
            self._closed = True
            self._plans.clear()
            self._runner.close()

    _close_at_exit = close

    def as_default(self):
        sess = self

        class _Ctx:
            def __enter__(self):
                ops._stack.sessions.append(sess)
                return sess

            def __exit__(self, *exc):
                ops._stack.sessions.pop()
                return False
        return _Ctx()

    def __enter__(self):
        self._default_ctx = self.as_default()
        self._graph_ctx = self._graph.as_default()
        self._graph_ctx.__enter__()
        return self._default_ctx.__enter__()

    def __exit__(self, exc_type, exc, tb):
        self._default_ctx.__exit__(exc_type, exc, tb)
        self._graph_ctx.__exit__(exc_type, exc, tb)
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class Session(BaseSession):
    """tf.Session: runs the graph in this process (target '')."""


class InteractiveSession(BaseSession):
    """A Session that makes itself the default session when made."""

    def __init__(self, target="", graph=None, config=None):
        super().__init__(target, graph, config)
        self._ictx = self.as_default()
        self._ictx.__enter__()

    def close(self):
        if not self._closed and getattr(self, "_ictx", None) is not None:
            try:
                ops._stack.sessions.remove(self)
            except ValueError:
                pass
        super().close()
