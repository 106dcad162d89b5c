"""psgraph's strategies for a model written in Python (docs/python.md, "Strategies"): the
one table of `psgraph train --sync NAME` (sync/strategies.c) wraps a tf.train optimizer,
and each training step of the script runs the strategy's step function in C (the one
`psgraph train` runs: SSP's clock waits and its apply call, local SGD's averages, ...),
with the script's own fetches and feeds as its call 0. Python only names the options,
feeds the local step, and hands the step's fetches to C; no numbers are made here."""
import contextlib
import json
import logging
import os
import shlex
import threading
import time

from . import _psgraph
from . import _train
from . import _variables as vs
from ._graph import GraphKeys, convert_to_tensor
from ._monitored import SessionRunHook
from ._sync import _ChiefRunner, _this_worker, _Wrapped

_log = logging.getLogger("tensorflow")

# the longest a take, a token or a clock wait waits (psgraph train's default)
_TIMEOUT_MS = 60000
# the options the command takes itself (not in psg_sync_options_t)
_COMMAND = ("--replicas-to-aggregate", "--backup-workers")


def _text(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    return repr(v) if isinstance(v, float) else str(v)


def _task():
    """(job, index) of this process's worker Server."""
    from . import _dist
    with _dist._servers_lock:
        mine = [s for s in _dist._servers.values() if s._job in ("worker", "chief")]
    return (mine[0]._job, mine[0]._index) if len(mine) == 1 else ("worker", 0)


class Strategy:
    """A strategy of psgraph's table by name, with its options as keywords:
    Strategy("ssp", staleness=1), Strategy("local", local_steps=4), Strategy("sync",
    backup_workers=1), Strategy("async", compress="topk", compress_ratio=0.01). Each keyword
    is the --flag of `psgraph train` (underscores for dashes), checked against the table
    here; stragglers takes --straggler texts ("worker=1,delay_ms=50"). strategy.optimizer(opt)
    wraps a tf.train optimizer."""

    def __init__(self, name="sync", stragglers=(), seed=0, timeout_ms=_TIMEOUT_MS, logdir=None,
                 **options):
        self.name = str(name)
        self.logdir = logdir
        self.options = [("--" + k.replace("_", "-"), _text(v)) for k, v in options.items()]
        self.stragglers = [str(s) for s in stragglers]
        self.seed = int(seed)
        self.timeout_ms = int(timeout_ms)
        _psgraph.sync_spec_check(" ".join([self.name] + ["%s %s" % f for f in self.options]))

    @classmethod
    def from_flags(cls, text, **kw):
        """A strategy as `psgraph compare --strategy` writes it: "ssp --staleness 1"."""
        words = shlex.split(text)
        if not words or len(words) % 2 == 0:
            raise ValueError("strategy '%s': NAME then --flag VALUE pairs" % text)
        opts = {words[i][2:].replace("-", "_"): words[i + 1] for i in range(1, len(words), 2)
                if words[i].startswith("--")}
        if len(opts) * 2 + 1 != len(words):
            raise ValueError("strategy '%s': each option is --flag VALUE" % text)
        return cls(words[0], **dict(kw, **opts))

    @classmethod
    def from_env(cls, default="async"):
        """The strategy $PSGRAPH_STRATEGY names (psgraph compare --script sets it), else
        Strategy(default); stragglers from $PSGRAPH_STRAGGLERS (';'-separated), the seed
        from $PSGRAPH_SEED, the metrics' logdir from $PSGRAPH_LOGDIR."""
        env = os.environ
        strag = [s for s in env.get("PSGRAPH_STRAGGLERS", "").split(";") if s]
        return cls.from_flags(env.get("PSGRAPH_STRATEGY") or default, stragglers=strag,
                              seed=int(env.get("PSGRAPH_SEED", "0")),
                              logdir=env.get("PSGRAPH_LOGDIR") or None)

    def flags(self):
        """The same strategy as `psgraph train` flags."""
        out = ["--sync", self.name]
        for f, v in self.options:
            out += [f, v]
        for s in self.stragglers:
            out += ["--straggler", s]
        return out

    def __repr__(self):
        return "Strategy(%r)" % " ".join(self.flags()[1:])

    def optimizer(self, opt):
        return StrategyOptimizer(opt, self)

    @property
    def local_model(self):
        """Whether each worker trains its own copy of the model (local, easgd, diloco)."""
        return _psgraph.strategy_local_model(self.name)

    def replica_device_setter(self, cluster=None, worker_device=None, ps_tasks=0,
                              ps_device="/job:ps", ps_strategy=None, shard_bytes=None):
        """tf.train.replica_device_setter for a model under this strategy. A local-model
        strategy's model is each worker's own, as `psgraph train --sync local` builds it: its
        variables and ops on worker_device (this process's worker task when not given), the
        global step and the strategy's global or center copies on the ps tasks. Otherwise
        tf.train.replica_device_setter's own."""
        from . import _dist
        if not self.local_model:
            return _dist.replica_device_setter(ps_tasks, ps_device, worker_device or "/job:worker",
                                               cluster=cluster, ps_strategy=ps_strategy,
                                               shard_bytes=shard_bytes)
        if worker_device is None or "/task:" not in worker_device:
            worker_device = "/job:%s/task:%d" % _task()
        ps = _dist.replica_device_setter(ps_tasks, ps_device, worker_device, cluster=cluster,
                                         ps_strategy=ps_strategy)
        return _LocalModel(ps, worker_device) if ps is not None else None


class _LocalModel:
    """In tf.device: the model on worker_device (a setter without ps tasks: an op on a
    variable still goes beside it, as the global step's read), the shared state by the ps
    setter."""

    def __init__(self, ps_setter, worker_device):
        from . import _dist
        self._ps_setter, self.worker_device = ps_setter, worker_device
        self._model = _dist._ReplicaSetter(0, "/job:ps", worker_device, True)

    def __call__(self, op):
        raise NotImplementedError("a strategy's setter places ops as they are built: use it in "
                                  "`with tf.device(setter)`")


def _ps_setter(g):
    """The ps tasks' setter of the strategy's scope, else one for this process's cluster."""
    if g._ps_setters and g._ps_setters[-1] is not None:
        return g._ps_setters[-1]
    from . import _dist
    with _dist._servers_lock:
        mine = [s for s in _dist._servers.values() if s._job in ("worker", "chief")]
    return _dist.replica_device_setter(cluster=mine[0]._cluster) if len(mine) == 1 else None


def _check_local(strategy, variables, global_step):
    """A local-model strategy's variables on the worker, its global step on a ps task."""
    on_ps = [v for v in variables if "/job:ps" in v.device]
    if on_ps:
        raise ValueError("Strategy(%r) trains each worker's own copy of the model, but variable "
                         "'%s' is on %s: build the model under tf.device(strategy."
                         "replica_device_setter(cluster=...))"
                         % (strategy.name, on_ps[0].op.name, on_ps[0].device))
    if "/job:ps" not in (getattr(global_step, "device", "") or ""):
        raise ValueError("Strategy(%r): the global step '%s' counts the averages of every "
                         "worker and belongs on a ps task: make it with "
                         "tf.train.get_or_create_global_step() under the strategy's setter"
                         % (strategy.name, global_step.op.name))


class StrategyOptimizer(_Wrapped):
    """A tf.train optimizer under a strategy: apply_gradients builds the strategy's graph
    (psg_sync_replicas_apply_gradients) and returns its train op; a session run that runs
    that op is one step of the strategy (its C step function). make_session_run_hook ends
    the worker's training cleanly and stops the session when the strategy ends it."""

    def __init__(self, opt, strategy):
        self._opt = opt
        self._strategy = strategy if isinstance(strategy, Strategy) else Strategy(strategy)
        self._stepper = None
        self._num_workers = None  # the cluster's workers, unless told more

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if self._stepper is not None:
            raise ValueError("apply_gradients of a strategy's optimizer runs once")
        pairs = [(gr, v) for gr, v in grads_and_vars if gr is not None]
        if not pairs:
            raise ValueError("No gradients provided for any variable.")
        g = pairs[0][1].graph
        index, workers = _this_worker()
        workers = max(workers, self._num_workers or 0)
        st = self._strategy
        local = st.local_model
        setter = _ps_setter(g) if local else None  # a local model's shared state on the ps

        def on_ps():
            return g.device(setter) if setter is not None else contextlib.nullcontext()
        if global_step is None:
            with on_ps():
                global_step = _train.get_or_create_global_step(g)
        if local:
            _check_local(st, [v for _, v in pairs], global_step)
        _train._adopt_global_step(g, global_step)
        n = b = 0
        opts = []
        for f, v in st.options:
            if f == "--replicas-to-aggregate":
                n = int(v)
            elif f == "--backup-workers":
                b = int(v)
            else:
                opts.append((f, v))
        cap = g._build().optimizer(self._opt._kind, self._opt._hyper(), self._opt._lr_tensor(g))
        c = g._build()
        c.set_scope("")
        with on_ps():
            desc = c.sync_apply_gradients(
                cap, [convert_to_tensor(gr)._ep for gr, _ in pairs],
                [v._handle for _, v in pairs], workers, n, b, index, st.timeout_ms, st.name, opts)
        vs._adopt_c_variables(g)
        g._sync_timeout_ms = st.timeout_ms  # the session's step deadline is past it
        c_step = g._variables_by_handle[g._c.global_step()[0]]
        if c_step not in g.get_collection(GraphKeys.GLOBAL_STEP):
            g.add_to_collection(GraphKeys.GLOBAL_STEP, c_step)
        self._stepper = _Stepper(g, desc, st, index, getattr(self, "_loss", None))
        g._strategy_step = self._stepper
        return g._op(desc["train_op"])

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=1,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None):
        gv = self.compute_gradients(loss, var_list, grad_loss=grad_loss)
        self._loss = loss  # fetched with each step: the metrics' loss
        return self.apply_gradients(gv, global_step=global_step, name=name)

    @property
    def stats(self):
        """{"steps", "used", "dropped", "staleness_max"} of this worker so far."""
        return dict(self._stepper.stats) if self._stepper else {}

    def finish(self, session):
        """Ends this worker's training (a plain Session's script calls it; the hook does)."""
        if self._stepper is not None:
            self._stepper.finish(session)

    def log_eval(self, step, test_accuracy):
        """The chief's evaluation at global step `step`: an "eval" record of the logdir's
        metrics.jsonl (the points of psgraph compare's curves), as psgraph train writes."""
        if self._stepper is not None:
            self._stepper.log_eval(step, test_accuracy)

    def make_session_run_hook(self, is_chief=None):
        if self._stepper is None:
            raise ValueError("apply_gradients should be called before using the hook")
        return _StrategyHook(self._stepper)


class _StrategyHook(SessionRunHook):
    """Stops the session when the strategy ends training; the chief ends its runner when it
    trains no more (its step after the last would wait for gradients no worker sends);
    `used` and `dropped` count this worker's gradients."""

    def __init__(self, stepper):
        self._stepper = stepper

    used = property(lambda self: self._stepper.stats["used"])
    dropped = property(lambda self: self._stepper.stats["dropped"])

    def after_run(self, run_context, run_values):
        if self._stepper.over:
            run_context.request_stop()

    def end(self, session):
        self._stepper.finish(session)

    def _on_stop(self, session):
        if self._stepper._runner is not None:
            self._stepper.close(session)

    def _on_error(self, session):
        try:
            self._stepper.close(session)
        except Exception:  # the error being raised says more
            pass


class SyncReplicasOptimizer(StrategyOptimizer):
    """tf.train.SyncReplicasOptimizer: psgraph's sync strategy (Strategy("sync",
    replicas_to_aggregate=N, backup_workers=total - N)), stepped by the C step function that
    `psgraph train --sync sync` runs (psg_sync_stepper_t). Each worker offers its gradients
    to per-variable accumulators on the ps tasks and takes a token before its next step; the
    chief's runner applies the mean of the first N and releases the next step's tokens; the
    backups' stale gradients are dropped and counted. A plain Session.run of the train op
    (Supervisor's scripts) is a step too; the seed era's init ops are no-ops (the chief's
    runner releases the first tokens when it starts, at the chief's first step)."""

    def __init__(self, opt, replicas_to_aggregate, total_num_replicas=None,
                 variable_averages=None, variables_to_average=None, use_locking=False,
                 name="sync_replicas", timeout_ms=_TIMEOUT_MS):
        if variable_averages is not None:
            raise NotImplementedError("psgraph's SyncReplicasOptimizer has no variable_averages")
        n = int(replicas_to_aggregate)
        total = int(total_num_replicas) if total_num_replicas is not None else n
        if n < 1 or total < n:
            raise ValueError("replicas_to_aggregate (%d) must be >= 1 and <= total_num_replicas "
                             "(%d)" % (n, total))
        super().__init__(opt, Strategy("sync", timeout_ms=timeout_ms))
        self._n, self._total, self._name = n, total, name

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if global_step is None:
            raise ValueError("Global step is required to check staleness")
        if self._stepper is not None:
            raise ValueError("apply_gradients of a SyncReplicasOptimizer runs once")
        index, workers = _this_worker()
        if workers != self._total:
            _log.warning("SyncReplicasOptimizer: total_num_replicas=%d but the cluster has %d "
                         "workers", self._total, workers)
        workers = self._num_workers = max(workers, self._total)
        st = self._strategy
        self._strategy = Strategy("sync", timeout_ms=st.timeout_ms, replicas_to_aggregate=self._n,
                                  backup_workers=workers - self._n)
        op = super().apply_gradients(grads_and_vars, global_step=global_step, name=name)
        self._index = index
        g = op.graph
        from ._ops import no_op
        with g.as_default():
            self.local_step_init_op = no_op(name="sync_rep_local_init")
            self.chief_init_op = no_op(name="sync_rep_chief_init")
            self._init_tokens = no_op(name="sync_rep_init_tokens")
        self.ready_for_local_init_op = None
        return op

    def get_chief_queue_runner(self):
        """A queue runner for Supervisor.start_queue_runners: the chief's runner itself starts
        with the chief's first step (the stepper's), so this one starts nothing."""
        return _StartedByTheStep()

    def get_init_tokens_op(self, num_tokens=-1):
        """psgraph's chief runner releases the first step's tokens itself."""
        return self._init_tokens

    def make_session_run_hook(self, is_chief, num_tokens=-1):
        if self._stepper is None:
            raise ValueError("SyncReplicasOptimizer.apply_gradients should be called before "
                             "using the hook")
        return super().make_session_run_hook(is_chief)


class _StartedByTheStep:
    def create_threads(self, sess, coord=None, daemon=False, start=False):
        return []


class _Stepper:
    """The strategy's step in one graph: a session run that runs the train op goes through
    run(), which makes (once a session) the worker's SyncWorker, the strategy's other calls
    and the chief's runner, then steps with the caller's run as call 0."""

    def __init__(self, graph, desc, strategy, rank, loss=None):
        self._graph, self._sg, self._strategy, self._rank = graph, desc, strategy, rank
        self.train_id = desc["train_op"]
        self._with_loss = loss is not None
        self.extra_fetches = ([loss._ep] if loss is not None else []) + \
            [tuple(e) for e in desc["fetches"]]
        self.local_step = tuple(desc["local_step"]) if desc["local_step"] is not None else None
        self._sess = self._worker = self._runner = self._metrics = None
        self._t0 = None
        self._accuracy = None
        self.over = self._closed = False
        self.stats = {"steps": 0, "used": 0, "dropped": 0, "staleness_max": -1}
        self._lock = threading.Lock()

    def _op(self, key):
        return self._graph._op(self._sg[key]) if self._sg[key] >= 0 else None

    def _start(self, sess):
        runner = sess._runner
        if not hasattr(runner, "_server"):
            raise ValueError("psgraph.train.Strategy %r needs a cluster session "
                             "(Session(server.target))" % self._strategy.name)
        sg = self._sg
        chief = self._rank == 0
        calls = [runner.make_callable([tuple(e) for e in f], [tuple(e) for e in t], list(tg), None)
                 for f, t, tg in sg["calls"]]
        if sg["local_init_op"] >= 0:
            sess.run(self._op("local_init_op"))
        if chief and sg["chief_op"] >= 0:  # the runner runs the chief's init first
            self._runner = _ChiefRunner(self)
            self._runner.create_threads(sess, start=True)
        elif chief and sg["chief_init_op"] >= 0:
            sess.run(self._op("chief_init_op"))
        if sg["start_op"] >= 0:
            sess.run(self._op("start_op"))
        first = int(sess.run(self._graph._tensor(tuple(sg["global_step"]))))
        st = self._strategy
        self._worker = self._graph._c.sync_worker(sg, calls, first, self._rank, st.stragglers,
                                                  st.seed, self._with_loss, runner._server._ts)
        if st.logdir and self._metrics is None:
            job, index = _task()
            tag = None if chief else "%s%d" % (job, index)
            self._metrics = _psgraph.metrics_open(st.logdir, tag, "/job:%s/task:%d" % (job, index))
        self._t0 = time.time()
        self._sess = sess

    def run(self, sess, plan, values):
        """One step: the caller's plan (its fetches, then the strategy's; its feeds, then the
        local step's) as call 0 of the strategy's step. Returns the caller's fetched."""
        with self._lock:
            failed = self._failed()
            if failed is not None:  # no token will come: the step fails now, naming why
                raise failed.explain("not started")
            if self._sess is not sess:
                self._start(sess)
            n = plan.n_user
            got = []

            def call0(local_step):
                vals = list(values)
                if self.local_step is not None:
                    vals.append(local_step)
                out = plan.callable.run(vals)
                got.append(out[:n])
                return out[n:]
            try:
                s = self._worker.step(call0)
            except Exception as e:  # it waited on a token the failed runner never released
                failed = self._failed()
                if failed is None:
                    raise
                raise failed.explain(e) from e
        self._count(s)
        return got[-1]

    def _failed(self):
        """The chief's runner when it failed, else None."""
        r = self._runner
        return r if r is not None and r.error is not None else None

    def _count(self, s):
        c = self.stats
        c["steps"] += 1
        c["used" if s["used"] else "dropped"] += 1
        c["staleness_max"] = max(c["staleness_max"], s["staleness"])
        if s["next_step"] < 0:
            self.over = True
        self.last = s
        if self._metrics is not None:
            _psgraph.metrics_write(self._metrics, s["json"])

    def _record(self, fields):
        if self._metrics is not None:
            _psgraph.metrics_write(self._metrics, json.dumps(fields, separators=(",", ":")))

    def log_eval(self, step, accuracy):
        if self._rank != 0:
            return
        self._accuracy = float(accuracy)
        wall = time.time() - self._t0 if self._t0 else 0.0
        self._record({"event": "eval", "step": int(step), "test_accuracy": self._accuracy,
                      "wall_sec": round(wall, 3)})

    def close(self, session):
        """Ends this worker's part: a worker whose steps did not end by the strategy closes
        its queues and clocks (the chief, for a strategy with a chief's runner, which closes
        everyone's), so no other worker waits for it; the chief's runner is joined."""
        if self._sess is None:
            return
        if self._runner is not None:
            self._runner.stop()
        chief_runner = self._sg["chief_op"] >= 0
        if not self.over and not self._closed and self._sg["close_op"] >= 0 and (
                self._rank == 0 or not chief_runner):
            self._closed = True
            session.run(self._op("close_op"))
        if self._runner is not None:
            self._runner.join(60)

    def finish(self, session):
        if self._sess is None:
            return
        self.close(session)
        if self._runner is not None and self._runner.error is not None:
            raise self._runner.error
        c = self.stats
        if self._rank == 0 and self._metrics is not None:
            gsteps = int(session.run(self._graph._tensor(tuple(self._sg["global_step"]))))
            wall = time.time() - self._t0
            done = {"event": "done", "sync": self._strategy.name, "steps": c["steps"],
                    "global_steps": gsteps, "steps_per_sec": round(gsteps / wall, 3) if wall else 0,
                    "gradients_used": c["used"], "gradients_dropped": c["dropped"],
                    "wall_sec": round(wall, 3)}
            if self._accuracy is not None:
                done["test_accuracy"] = self._accuracy
            self._record(done)
        self._metrics = None  # closed with its capsule
        _log.info("strategy %s, worker %d: %d steps, %d gradients used, %d dropped",
                  self._strategy.name, self._rank, c["steps"], c["used"], c["dropped"])
        self._sess = None
