"""tf.train.MonitoredTrainingSession and its hooks over psgraph: the chief initializes the
variables (or restores the newest checkpoint of checkpoint_dir: psgraph's files, each ps
task writing its own shard), the other workers wait for it with psgraph's deadline and its
error naming the task; the hooks (StopAtStepHook, LoggingTensorHook, CheckpointSaverHook,
SummarySaverHook, StepCounterHook and the user's SessionRunHook subclasses) run around
every step as in TF 1.x (before_run's fetches joined to the caller's, one step)."""
import collections
import logging
import os
import time

from . import _summary
from . import _train
from ._graph import get_default_graph
from ._session import Session

_log = logging.getLogger("tensorflow")

# how long a worker that is not the chief waits for the chief's initialization at most,
# whatever max_wait_secs says (psgraph train's wait: cluster_ckpt's 10 minutes)
_WAIT_INIT_CAP_S = 600
# recoveries in a row before a step's failure is the job's
_MAX_RECOVERIES = 3


class SessionRunArgs(collections.namedtuple("SessionRunArgs", ["fetches", "feed_dict", "options"])):
    def __new__(cls, fetches, feed_dict=None, options=None):
        return super().__new__(cls, fetches, feed_dict, options)


SessionRunValues = collections.namedtuple("SessionRunValues",
                                          ["results", "options", "run_metadata"])


class SessionRunContext:
    def __init__(self, original_args, session):
        self._original_args = original_args
        self._session = session
        self._stop_requested = False

    @property
    def original_args(self):
        return self._original_args

    @property
    def session(self):
        return self._session

    @property
    def stop_requested(self):
        return self._stop_requested

    def request_stop(self):
        self._stop_requested = True


class SessionRunHook:
    """tf.train.SessionRunHook: subclass and override any of these."""

    def begin(self):
        pass

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        pass

    def end(self, session):
        pass


class _Timer:
    """Every n steps or every s seconds (TF's SecondOrStepTimer)."""

    def __init__(self, every_secs=None, every_steps=None):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("exactly one of every_secs and every_steps must be provided")
        self._secs, self._steps = every_secs, every_steps
        self._last_step, self._last_time = None, None

    def should_trigger_for_step(self, step):
        if self._last_step is None:
            return True
        if self._last_step == step:
            return False
        if self._steps is not None:
            return step >= self._last_step + self._steps
        return time.time() >= self._last_time + self._secs

    def update_last_triggered_step(self, step):
        now = time.time()
        elapsed = None if self._last_time is None else now - self._last_time
        steps = None if self._last_step is None else step - self._last_step
        self._last_step, self._last_time = step, now
        return elapsed, steps


def _global_step_tensor():
    gs = _train.get_global_step()
    if gs is None:
        raise RuntimeError("Global step should be created to use this hook "
                           "(tf.train.get_or_create_global_step()).")
    return gs


class StopAtStepHook(SessionRunHook):
    def __init__(self, num_steps=None, last_step=None):
        if num_steps is None and last_step is None:
            raise ValueError("One of num_steps or last_step must be specified.")
        if num_steps is not None and last_step is not None:
            raise ValueError("Only one of num_steps or last_step can be specified.")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self):
        self._gs = _global_step_tensor()

    def after_create_session(self, session, coord):
        if self._last_step is None:
            self._last_step = int(session.run(self._gs)) + self._num_steps

    def before_run(self, run_context):
        return SessionRunArgs(self._gs)

    def after_run(self, run_context, run_values):
        # The step read with this run may come before or after its own update (and another
        # worker's): near the end, read the global step again, as TensorFlow does, so no worker
        # stops one step short.
        if int(run_values.results) + 1 >= self._last_step:
            if int(run_context.session.run(self._gs)) >= self._last_step:
                run_context.request_stop()


class LoggingTensorHook(SessionRunHook):
    """Logs the values of tensors every N steps or seconds (and at the end): "name = value,
    ..." through the tensorflow logger (INFO), or formatter(dict) when given."""

    def __init__(self, tensors, every_n_iter=None, every_n_secs=None, at_end=False, formatter=None):
        if not at_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError("either at_end and/or exactly one of every_n_iter and every_n_secs "
                             "must be provided.")
        if isinstance(tensors, dict):
            self._tags, items = list(tensors), list(tensors.values())
        else:
            items = list(tensors)
            self._tags = [t if isinstance(t, str) else t.name for t in items]
        self._tensors = items
        self._timer = _Timer(every_n_secs, every_n_iter) if not (
            every_n_iter is None and every_n_secs is None) else None
        self._at_end, self._formatter = at_end, formatter
        self._iter = 0

    def begin(self):
        g = get_default_graph()
        self._fetch = [g.as_graph_element(t) if isinstance(t, str) else t for t in self._tensors]

    def before_run(self, run_context):
        self._due = self._timer is not None and self._timer.should_trigger_for_step(self._iter)
        return SessionRunArgs(self._fetch) if self._due else None

    def _emit(self, values):
        d = dict(zip(self._tags, values))
        if self._formatter:
            _log.info(self._formatter(d))
        else:
            _log.info(", ".join("%s = %s" % (t, d[t]) for t in self._tags))

    def after_run(self, run_context, run_values):
        if self._due:
            self._timer.update_last_triggered_step(self._iter)
            self._emit(run_values.results)
        self._iter += 1

    def end(self, session):
        if self._at_end:
            self._emit(session.run(self._fetch))


class StepCounterHook(SessionRunHook):
    """Logs global_step/sec every N steps (MonitoredTrainingSession's log_step_count_steps)."""

    def __init__(self, every_n_steps=100, every_n_secs=None, output_dir=None, summary_writer=None):
        self._timer = _Timer(every_n_secs, None if every_n_secs else every_n_steps)

    def begin(self):
        self._gs = _global_step_tensor()

    def before_run(self, run_context):
        return SessionRunArgs(self._gs)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        if self._timer.should_trigger_for_step(step):
            elapsed, steps = self._timer.update_last_triggered_step(step)
            if elapsed:
                _log.info("global_step/sec: %g", steps / elapsed)


class CheckpointSaverHook(SessionRunHook):
    """Saves a checkpoint (psgraph's files: model.ckpt-STEP.index.json and one safetensors
    shard per ps task) every N steps or seconds, after the session is made and at the end."""

    def __init__(self, checkpoint_dir, save_secs=None, save_steps=None, saver=None,
                 checkpoint_basename="model.ckpt", scaffold=None, listeners=None):
        self._dir = checkpoint_dir
        self._timer = _Timer(save_secs, save_steps)
        self._saver = saver
        self._listeners = list(listeners or [])

    def begin(self):
        self._gs = _global_step_tensor()
        if self._saver is None:
            self._saver = _train.Saver()
        for listener in self._listeners:
            listener.begin()

    def _save(self, session, step):
        for listener in self._listeners:
            listener.before_save(session, step)
        _log.info("Saving checkpoints for %d into %s.", step, os.path.join(self._dir, "model.ckpt"))
        self._saver.save(session, os.path.join(self._dir, "model.ckpt"), global_step=step)
        for listener in self._listeners:
            listener.after_save(session, step)

    def after_create_session(self, session, coord):
        step = int(session.run(self._gs))
        self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def before_run(self, run_context):
        return SessionRunArgs(self._gs)

    def after_run(self, run_context, run_values):
        if self._timer.should_trigger_for_step(int(run_values.results) + 1):
            # the step as it is now (TF's: another worker may have moved it), the name of
            # the checkpoint, not the value fetched before this step's update
            step = int(run_context.session.run(self._gs))
            if self._timer.should_trigger_for_step(step):
                self._save(run_context.session, step)  # failed (a lost ps): tried again
                self._timer.update_last_triggered_step(step)

    def end(self, session):
        step = int(session.run(self._gs))
        if step != self._timer._last_step:
            self._save(session, step)
        for listener in self._listeners:
            listener.end(session, step)


class CheckpointSaverListener:
    def begin(self):
        pass

    def before_save(self, session, global_step_value):
        pass

    def after_save(self, session, global_step_value):
        pass

    def end(self, session, global_step_value):
        pass


class SummarySaverHook(SessionRunHook):
    """Writes the summaries (summary_op, else every summary of the graph) every N steps or
    seconds into output_dir's event file (TensorBoard's format, psgraph's writer)."""

    def __init__(self, save_steps=None, save_secs=None, output_dir=None, summary_writer=None,
                 scaffold=None, summary_op=None):
        if (summary_writer is None) == (output_dir is None) and summary_writer is None:
            raise ValueError("Exactly one of scaffold or summary_op should be set." if
                             scaffold is not None and summary_op is not None else
                             "output_dir or summary_writer is required")
        self._timer = _Timer(save_secs, save_steps)
        self._writer, self._dir, self._op = summary_writer, output_dir, summary_op

    def begin(self):
        if self._writer is None:
            self._writer = _summary.FileWriter(self._dir)
            self._own = True
        else:
            self._own = False
        if self._op is None:
            self._op = _summary.merge_all()
        self._gs = _global_step_tensor()

    def before_run(self, run_context):
        # due by the step after the last one seen (TF's _next_step): the step the last
        # triggered one was, plus one, never came due with every N > 1 steps
        nxt = getattr(self, "_next", None)
        self._due = self._op is not None and (nxt is None or
                                              self._timer.should_trigger_for_step(nxt))
        return SessionRunArgs({"step": self._gs, "summary": self._op} if self._due else
                              {"step": self._gs})

    def after_run(self, run_context, run_values):
        step = int(run_values.results["step"])
        if self._due:
            self._timer.update_last_triggered_step(step)
            self._writer.add_summary(run_values.results["summary"], step)
        self._next = step + 1

    def end(self, session):
        if self._own:
            self._writer.close()


class Scaffold:
    """tf.train.Scaffold: the ops that make a session ready (psgraph runs the graph's
    initializers; init_op / init_fn are run by the chief when given)."""

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None,
                 ready_for_local_init_op=None, local_init_op=None, summary_op=None, saver=None,
                 copy_from_scaffold=None):
        self.init_op, self.init_feed_dict, self.init_fn = init_op, init_feed_dict, init_fn
        self.local_init_op, self.summary_op, self.saver = local_init_op, summary_op, saver
        self.ready_op, self.ready_for_local_init_op = ready_op, ready_for_local_init_op

    def finalize(self):
        return self


class _Default:
    pass


USE_DEFAULT = _Default()


class MonitoredSession:
    """A session that makes itself ready (the chief initializes or restores, the others
    wait for it), runs the hooks around each step, and stops when a hook asks or the input
    ends (OutOfRangeError). Over a cluster (master = server.target), closing it tells the ps
    tasks this worker is done: a ps task's Server.join() returns when every worker is."""

    def __init__(self, master="", is_chief=True, checkpoint_dir=None, scaffold=None, hooks=None,
                 config=None, max_wait_secs=7200, graph=None):
        self._graph = graph or get_default_graph()
        self._hooks = list(hooks or [])
        self._scaffold = scaffold or Scaffold()
        self._is_chief = is_chief
        self._checkpoint_dir = checkpoint_dir
        from . import _variables
        sc = self._scaffold
        if sc.init_op is None:
            with self._graph.as_default():
                sc.init_op = _variables.global_variables_initializer()
        if sc.local_init_op is None and _variables.local_variables():
            with self._graph.as_default():
                sc.local_init_op = _variables.local_variables_initializer()
        with self._graph.as_default():
            for h in self._hooks:
                h.begin()
        self._sess = Session(master, graph=self._graph, config=config)
        self._sess._trace_dir = checkpoint_dir  # where a traced run's ps tasks write theirs
        self._dist = bool(master)
        self._should_stop = False
        self._closed = False
        started = 0
        try:
            self._prepare(max_wait_secs)
            for h in self._hooks:
                started += 1
                h.after_create_session(self._sess, None)
        except BaseException:
            try:  # what the started hooks run ends now (the sync chief's runner)
                self._on_error(self._hooks[:started])
            finally:
                self._sess.close()
            raise
        from . import _dist
        _dist.close_at_exit(self, 0)

    def _ps_ready(self):
        """Whether every ps task holds its variables already (the chief restarted while the
        job went on): then the chief neither initializes nor restores."""
        runner = self._sess._runner
        server = runner._server
        n = server._cluster.num_tasks("ps") if "ps" in server._cluster.jobs else 0
        for i in range(n):
            vs = runner.inspect("/job:ps/task:%d" % i)["variables"]
            if not vs or not all(v["initialized"] for v in vs):
                return False
        return n > 0

    def _prepare(self, max_wait_secs):
        sess, sc = self._sess, self._scaffold
        if not self._is_chief:
            if self._dist:
                wait = min(float(max_wait_secs), _WAIT_INIT_CAP_S)
                self._sess._runner.wait_init(int(wait * 1000))
            if sc.local_init_op is not None:
                sess.run(sc.local_init_op)
            if self._dist:
                sess._runner.note_incarnations()
            return
        latest = _train.latest_checkpoint(self._checkpoint_dir) if self._checkpoint_dir else None
        if self._dist and self._ps_ready():
            _log.info("The variables are on the ps tasks already: going on from there.")
        elif latest:
            saver = sc.saver or _train.Saver()
            saver.restore(sess, latest)
            _log.info("Restored from %s.", latest)
        else:
            sess.run(sc.init_op, feed_dict=sc.init_feed_dict)
            if sc.init_fn is not None:
                sc.init_fn(sc, sess)
        if sc.local_init_op is not None:
            sess.run(sc.local_init_op)
        if self._dist:
            sess._runner.note_incarnations()

    @property
    def graph(self):
        return self._graph

    def should_stop(self):
        return self._should_stop or self._closed

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if self._closed:
            raise RuntimeError("Run called on a closed MonitoredSession.")
        if not self._hooks:  # the caller's run as it is: no {"caller", "hooks"} to plan around
            return self._run_recovering(fetches, feed_dict, options, run_metadata)
        ctx = SessionRunContext(SessionRunArgs(fetches, feed_dict, options), self._sess)
        extra, feeds = {}, dict(feed_dict or {})
        for i, h in enumerate(self._hooks):
            args = h.before_run(ctx)
            if args is None:
                continue
            if args.fetches is not None:
                extra[i] = args.fetches
            for k, v in (args.feed_dict or {}).items():
                if k in feeds:
                    raise RuntimeError("Same tensor is fed by a SessionRunHook and user.")
                feeds[k] = v
        out = self._run_recovering({"caller": fetches, "hooks": extra}, feeds or None, options,
                                   run_metadata)
        for i, h in enumerate(self._hooks):
            values = SessionRunValues(out["hooks"].get(i), options, run_metadata)
            # a hook's own calls (the chief's checkpoint) meet a lost ps as a step does
            self._recovering(lambda: h.after_run(ctx, values))
        if ctx.stop_requested and not self._should_stop:
            self._should_stop = True
            for h in self._hooks:  # the training ends here (sync replicas close it)
                if hasattr(h, "_on_stop"):
                    h._on_stop(self._sess)
        return out["caller"]

    def _run_recovering(self, fetches, feeds, options=None, run_metadata=None):
        """A step; over a cluster, a step failed by a lost ps task is retried after the
        recovery (at most _MAX_RECOVERIES in a row)."""
        return self._recovering(lambda: self._sess.run(fetches, feed_dict=feeds, options=options,
                                                       run_metadata=run_metadata))

    def _recovering(self, call):
        """call(), retried after the recovery when a lost ps task fails it (over a cluster)."""
        from . import _dist
        tries = 0
        while True:
            try:
                return call()
            except Exception as e:
                if type(e).__name__ == "OutOfRangeError":
                    self._should_stop = True
                if (not self._dist or type(e).__name__ not in _dist.RECOVERABLE or
                        tries >= _MAX_RECOVERIES or getattr(e, "runner_failed", False)):
                    raise
                tries += 1
                if not self._sess._runner.recover(self._is_chief, self._checkpoint_dir, e):
                    raise

    def run_step_fn(self, step_fn):
        class _StepContext:
            def __init__(ctx):
                ctx.session = self._sess

            def run_with_hooks(ctx, *a, **kw):
                return self.run(*a, **kw)

            def request_stop(ctx):
                self._should_stop = True
        return step_fn(_StepContext())

    def close(self, _ending=True):
        if self._closed:
            return
        self._closed = True
        try:
            if _ending:
                for h in self._hooks:
                    h.end(self._sess)
            else:
                self._on_error(self._hooks)
        finally:
            try:
                # a script that failed says nothing: restarted (launch --restart), it goes on
                # in the job, which the ps tasks must not count as done
                if self._dist and _ending:
                    self._sess._runner.job_done()
            finally:
                self._sess.close()

    def _on_error(self, hooks):
        for h in hooks:
            if hasattr(h, "_on_error"):
                h._on_error(self._sess)

    def _close_at_exit(self):
        """The process ends with this session open (a script that raised, or never closed
        it): it ends as on an error, with no hook's end (as TF 1.x: no last checkpoint)."""
        self.close(_ending=False)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        stop = exc_type is not None and exc_type.__name__ in ("OutOfRangeError", "StopIteration")
        self.close(_ending=exc_type is None or stop)
        return stop


def MonitoredTrainingSession(master="", is_chief=True, checkpoint_dir=None, scaffold=None,
                             hooks=None, chief_only_hooks=None,
                             save_checkpoint_secs=USE_DEFAULT, save_summaries_steps=USE_DEFAULT,
                             save_summaries_secs=USE_DEFAULT, config=None,
                             stop_grace_period_secs=120, log_step_count_steps=100,
                             max_wait_secs=7200, save_checkpoint_steps=USE_DEFAULT,
                             summary_dir=None):
    """tf.train.MonitoredTrainingSession: the chief adds the step counter, summary and
    checkpoint hooks (TF's defaults: a checkpoint every 600 s, summaries every 100 steps)."""
    if save_summaries_steps is USE_DEFAULT and save_summaries_secs is USE_DEFAULT:
        save_summaries_steps, save_summaries_secs = 100, None
    elif save_summaries_steps is USE_DEFAULT:
        save_summaries_steps = None
    elif save_summaries_secs is USE_DEFAULT:
        save_summaries_secs = None
    if save_checkpoint_steps is USE_DEFAULT and save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_steps, save_checkpoint_secs = None, 600
    elif save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_secs = None
    elif save_checkpoint_steps is USE_DEFAULT:
        save_checkpoint_steps = None
    all_hooks = list(hooks or [])
    if is_chief:
        all_hooks = list(chief_only_hooks or []) + all_hooks
        summary_dir = summary_dir or checkpoint_dir
        if log_step_count_steps and log_step_count_steps > 0:
            all_hooks.append(StepCounterHook(every_n_steps=log_step_count_steps))
        if summary_dir and ((save_summaries_steps and save_summaries_steps > 0) or
                            (save_summaries_secs and save_summaries_secs > 0)):
            all_hooks.append(SummarySaverHook(
                save_steps=save_summaries_steps if save_summaries_steps else None,
                save_secs=None if save_summaries_steps else save_summaries_secs,
                output_dir=summary_dir))
        if checkpoint_dir and ((save_checkpoint_secs and save_checkpoint_secs > 0) or
                               (save_checkpoint_steps and save_checkpoint_steps > 0)):
            all_hooks.append(CheckpointSaverHook(
                checkpoint_dir,
                save_steps=save_checkpoint_steps if save_checkpoint_steps else None,
                save_secs=None if save_checkpoint_steps else save_checkpoint_secs,
                scaffold=scaffold))
    return MonitoredSession(master, is_chief, checkpoint_dir, scaffold, all_hooks, config,
                            max_wait_secs)
