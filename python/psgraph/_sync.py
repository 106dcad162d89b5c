"""tf.train.SyncReplicasOptimizer over psgraph's sync replicas (docs/sync.md): each worker
offers its gradients to per-variable accumulators on the ps tasks and takes a token before
its next step; the chief's runner (a second distributed session of the chief's process)
applies the mean of the first replicas_to_aggregate gradients and releases the next step's
tokens. total_num_replicas - replicas_to_aggregate workers are backups: their gradients,
computed for a step the others already ended, are dropped (counted, and said at the end).
The graph is built by the C library's wrapper (psg_sync_replicas_t); Python only feeds the
local step and reads what each step fetched."""
import logging
import threading

from . import _train
from . import _variables as vs
from ._graph import GraphKeys, Operation, convert_to_tensor
from ._monitored import SessionRunArgs, SessionRunHook

_log = logging.getLogger("tensorflow")

# the longest a take or a token waits (psgraph train's default for sync)
_TIMEOUT_MS = 60000


def _this_worker():
    """(worker index, workers) of this process's worker Server, as psgraph ranks them: the
    chief job first. (0, 1) without one."""
    from . import _dist
    with _dist._servers_lock:
        mine = [s for s in _dist._servers.values() if s._job in ("worker", "chief")]
    if len(mine) != 1:
        return 0, 1
    s = mine[0]
    chiefs = s._cluster.num_tasks("chief") if "chief" in s._cluster.jobs else 0
    rank = 0 if s._job == "chief" else chiefs + s._index
    return rank, _dist._num_workers(s._cluster)


class _Wrapped:
    """An optimizer around another (self._opt): its gradients, slots and variables."""

    def compute_gradients(self, *args, **kwargs):
        return self._opt.compute_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()


class SyncReplicasOptimizer(_Wrapped):
    def __init__(self, opt, replicas_to_aggregate, total_num_replicas=None,
                 variable_averages=None, variables_to_average=None, use_locking=False,
                 name="sync_replicas", timeout_ms=_TIMEOUT_MS):
        if variable_averages is not None:
            raise NotImplementedError("psgraph's SyncReplicasOptimizer has no variable_averages")
        self._opt = opt
        self._n = int(replicas_to_aggregate)
        self._total = int(total_num_replicas) if total_num_replicas is not None else self._n
        if self._n < 1 or self._total < self._n:
            raise ValueError("replicas_to_aggregate (%d) must be >= 1 and <= total_num_replicas "
                             "(%d)" % (self._n, self._total))
        self._name = name
        # psgraph's: the longest a take or a token waits (psgraph train: 3/4 of --step-timeout)
        self._timeout_ms = int(timeout_ms)
        self._sg = None
        self._graph = None
        self._runners = []  # the chief's runners started (_ChiefRunner)

    def _runner_failed(self):
        """The first failed chief's runner of this optimizer, or None."""
        return next((r for r in self._runners if r.error is not None), None)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if global_step is None:
            raise ValueError("Global step is required to check staleness")
        if self._sg is not None:
            raise ValueError("apply_gradients of a SyncReplicasOptimizer runs once")
        pairs = [(gr, v) for gr, v in grads_and_vars if gr is not None]
        if not pairs:
            raise ValueError("No gradients provided for any variable.")
        g = pairs[0][1].graph
        index, workers = _this_worker()
        if workers != self._total:
            _log.warning("SyncReplicasOptimizer: total_num_replicas=%d but the cluster has %d "
                         "workers", self._total, workers)
        workers = max(workers, self._total)
        _train._adopt_global_step(g, global_step)
        cap = g._build().optimizer(self._opt._kind, self._opt._hyper(), self._opt._lr_tensor(g))
        c = g._build()
        c.set_scope("")
        self._sg = c.sync_apply_gradients(
            cap, [convert_to_tensor(gr)._ep for gr, _ in pairs], [v._handle for _, v in pairs],
            workers, self._n, workers - self._n, index, self._timeout_ms)
        vs._adopt_c_variables(g)
        c_step = g._variables_by_handle[g._c.global_step()[0]]
        if c_step not in g.get_collection(GraphKeys.GLOBAL_STEP):
            g.add_to_collection(GraphKeys.GLOBAL_STEP, c_step)
        self._graph = g
        g._sync_timeout_ms = self._timeout_ms  # the session's step deadline is past it
        self._index = index
        sg = self._sg
        # the seed era's ops: psgraph's chief runner releases the first tokens itself when it
        # starts (get_chief_queue_runner, make_session_run_hook), so these run nothing
        from ._ops import no_op
        with g.as_default():
            self.local_step_init_op = no_op(name="sync_rep_local_init")
            self.chief_init_op = no_op(name="sync_rep_chief_init")
            self._init_tokens = no_op(name="sync_rep_init_tokens")
        self.ready_for_local_init_op = None
        # a plain Session.run of the train op (Supervisor's scripts) feeds the local step and
        # takes the token through this hook; MonitoredSession uses make_session_run_hook's
        implicit = _SyncReplicasHook(self, False)
        implicit.begin()
        g._implicit_hooks = getattr(g, "_implicit_hooks", []) + [implicit]
        return g._op(sg["train_op"])

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=1,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None):
        gv = self.compute_gradients(loss, var_list, grad_loss=grad_loss)
        return self.apply_gradients(gv, global_step=global_step, name=name)

    def _tensor(self, key):
        ep = self._sg[key]
        return self._graph._tensor(tuple(ep)) if ep is not None else None

    def get_chief_queue_runner(self):
        """The chief's runner as a queue runner: Supervisor.start_queue_runners starts it."""
        return _ChiefRunner(self)

    def get_init_tokens_op(self, num_tokens=-1):
        """psgraph's chief runner releases the first step's tokens itself."""
        return self._init_tokens

    def make_session_run_hook(self, is_chief, num_tokens=-1):
        if self._sg is None:
            raise ValueError("SyncReplicasOptimizer.apply_gradients should be called before "
                             "using the hook")
        return _SyncReplicasHook(self, is_chief)


class _ChiefRunner:
    """Runs the chief's step (aggregate, apply, release tokens) on a thread, in a second
    distributed session of this process (its own step ids), until training closes."""

    def __init__(self, opt):
        self._opt = opt
        self._thread = None
        self._closing = threading.Event()
        self._failing = threading.Lock()  # held while a failure closes the token queue
        self.error = None
        self.steps = 0

    def create_threads(self, sess, coord=None, daemon=False, start=False):
        from . import _psgraph
        runner = sess._runner
        if not hasattr(runner, "_server"):
            raise ValueError("the sync chief's runner needs a cluster session")
        # its take waits up to the sync timeout for the workers' gradients: its step deadline
        # is past that (it was the 30 s default, so under load a take cut at 30 s ended the
        # runner and no token came again)
        wait = getattr(self._opt._graph, "_sync_timeout_ms", _TIMEOUT_MS)
        deadline = max(runner._timeout_ms, wait * 4 // 3)
        self._ds = _psgraph.DistSession(self._opt._graph._c, runner._server._ts,
                                        step_timeout_ms=deadline, id_stream=1)
        sg = self._opt._sg
        if sg["chief_init_op"] >= 0:  # the first step's tokens
            sess.run(self._opt._graph._op(sg["chief_init_op"]))
        self._call = self._ds.make_callable([], [tuple(sg["chief_global_step"])],
                                            [sg["chief_op"]], None)
        self._abort = self._ds.make_callable([], [], [sg["abort_op"]], None) \
            if sg.get("abort_op", -1) >= 0 else None
        if hasattr(self._opt, "_runners"):  # a strategy's stepper keeps none
            self._opt._runners.append(self)
        self._thread = threading.Thread(target=self._loop, name="sync-chief", daemon=True)
        self._deadline_s = deadline / 1000.0
        from . import _dist
        _dist.close_at_exit(self, 1)
        if start:
            self._thread.start()
        return [self._thread]

    def _loop(self):
        try:
            while not self._closing.is_set():
                self._call.run([])
                self.steps += 1
        except Exception as e:  # closed: the clean end; anything else ends training now
            if type(e).__name__ not in ("CancelledError", "AbortedError", "OutOfRangeError"):
                self._fail(e)

    def _fail(self, e):
        """Keeps e, says it at once and closes the token queue with an error, so that every
        worker's step waiting on a token fails now (the chief's names e), not at its timeout
        (the runner's error was once only raised when the chief's session closed)."""
        with self._failing:
            self.error = e
            _log.error("sync replicas: the chief's runner failed at its step %d (%s): %s; no "
                       "more tokens", self.steps + 1, type(e).__name__, e)
            if self._abort is None:
                return
            try:
                self._abort.run([])
            except Exception as e2:  # a lost ps: the workers' waits end at their timeout
                _log.error("sync replicas: closing the token queue after the runner's failure "
                           "failed too: %s", e2)

    def explain(self, e):
        """The error a step that waited on a token raises once this runner failed: the
        runner's class and message, with the step's own error after them."""
        msg = ("sync replicas: the chief's runner failed at its step %d, so no token came: "
               "%s (this step: %s)" % (self.steps + 1, self.error, e))
        try:
            return type(self.error)(msg)
        except Exception:  # a class that takes other arguments
            return RuntimeError(msg)

    def stop(self):
        """Starts no step from now on (the one running ends when training is closed); a
        failure being said first closes the queue with its error (not the clean close)."""
        self._closing.set()
        with self._failing:
            pass

    def join(self, timeout=None):
        if self._thread is not None:
            self._thread.join(timeout)

    def _close_at_exit(self):
        """The process ends: no step starts from now on, the one running ends within its
        deadline (at once when training was closed), then its session goes."""
        self.stop()
        self.join(self._deadline_s + 10)
        if self._thread is not None and self._thread.is_alive():
            _log.error("sync replicas: the chief's runner did not end within its step deadline "
                       "(%.0f s) at exit", self._deadline_s)
            return
        self._call = self._abort = self._ds = None


class _SyncReplicasHook(SessionRunHook):
    """Feeds each step its local step, reads the token taken (the next local step; -1 once
    training is over: the hook stops the session) and whether every accumulator kept the
    gradient; the chief starts the runner and closes training at the end."""

    def __init__(self, opt, is_chief):
        self._opt, self._is_chief = opt, is_chief
        self._runner = None
        self._step = None
        self._closed = False
        self.used = self.dropped = 0

    def begin(self):
        o = self._opt
        self._local_step = o._tensor("local_step")
        self._fetch = [o._tensor("next_step"), o._tensor("num_accepted")]
        self._train_id = o._sg["train_op"]

    def after_create_session(self, session, coord):
        o = self._opt
        g, sg = o._graph, o._sg
        if self._is_chief:
            self._runner = _ChiefRunner(o)
            self._runner.create_threads(session, start=True)
        if sg["start_op"] >= 0:
            session.run(g._op(sg["start_op"]))
        if sg["local_init_op"] >= 0:
            session.run(g._op(sg["local_init_op"]))
        self._step = int(session.run(o._tensor("global_step")))

    def _trains(self, fetches):
        """Whether the caller's fetches run the train op (a token is taken only then)."""
        if isinstance(fetches, dict):
            return any(self._trains(f) for f in fetches.values())
        if isinstance(fetches, (list, tuple)):
            return any(self._trains(f) for f in fetches)
        op = getattr(fetches, "op", fetches)  # a Tensor's op, or the Operation itself
        return isinstance(op, Operation) and op._id == self._train_id

    def before_run(self, run_context):
        self._ran = self._trains(run_context.original_args.fetches)
        if not self._ran:
            return None
        failed = self._opt._runner_failed()
        if failed is not None:  # no token will come: the step fails now, naming why
            raise failed.explain("not started")
        if self._step is None:  # a plain session's first training step
            self._step = int(run_context.session.run(self._opt._tensor("global_step")))
        return SessionRunArgs(self._fetch, feed_dict={self._local_step: self._step})

    def after_run(self, run_context, run_values):
        if not self._ran:
            return
        nxt, accepted = run_values.results
        if int(accepted) >= self._opt._sg["num_vars"]:
            self.used += 1
        else:
            self.dropped += 1
        self._step = int(nxt)
        if self._step < 0:
            run_context.request_stop()

    def end(self, session):
        self._close(session)
        if self._runner is not None and self._runner.error is not None:
            raise self._runner.error
        self._log()

    def _explain(self, e):
        """The error to raise for a step that failed with e: the runner's when it failed
        (the step waited on a token it never released), else None (e as it is)."""
        failed = self._opt._runner_failed()
        return failed.explain(e) if failed is not None else None

    def _on_error(self, session):
        """The session ends on an error: the chief still closes training, so that its
        runner's take and the other workers' tokens end now instead of at their timeout."""
        try:
            self._close(session)
        except Exception:  # the error being raised says more
            pass

    def _on_stop(self, session):
        """The session stops (a hook asked, StopAtStepHook at its last step): the chief
        trains no more, so it closes training now, not when the session closes after the
        script's own work (an evaluation): its runner has started the step after the last,
        whose take would wait for gradients no worker sends and fail at its timeout."""
        if self._is_chief:
            self._close(session)

    def _close(self, session):
        o = self._opt
        if self._runner is not None:
            self._runner.stop()
        if self._is_chief and o._sg["close_op"] >= 0 and not self._closed:
            self._closed = True
            session.run(o._graph._op(o._sg["close_op"]))
        if self._runner is not None:
            self._runner.join(60)

    def _log(self):
        o = self._opt
        _log.info("sync replicas, worker %d: %d gradients used, %d dropped (stale)",
                  o._index, self.used, self.dropped)
