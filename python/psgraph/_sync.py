"""The pieces of psgraph's sync replicas (docs/sync.md) that the strategies' steppers share
(psgraph._strategy: tf.train.SyncReplicasOptimizer and psgraph.train.Strategy): the chief's
runner (a second distributed session of the chief's process, on a thread) that applies the
mean of the first N gradients and releases the next step's tokens, this worker's rank, and
the optimizer wrapper's delegation to the wrapped optimizer."""
import logging
import threading

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
            err = type(self.error)(msg)
        except Exception:  # a class that takes other arguments
            err = RuntimeError(msg)
        err.runner_failed = True  # not a lost ps: no recovery retries it
        return err

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
