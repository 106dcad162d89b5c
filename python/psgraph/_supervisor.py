"""tf.train.Supervisor, the seed-era session manager that TF's own mnist_replica.py and the
distributed Inception trainer use, over psgraph: prepare_or_wait_for_session (the chief
restores the newest checkpoint of logdir or runs init_op; the others wait for the
variables with psgraph's deadline, naming the ps task), managed_session, the standard
services (a checkpoint every save_model_secs, summaries every save_summaries_secs, on
threads of the chief), start_queue_runners (the SyncReplicasOptimizer's chief runner),
should_stop / request_stop / stop. The checkpoints are psgraph's files."""
import contextlib
import logging
import os
import threading

from . import _summary
from . import _train
from ._graph import get_default_graph
from ._session import Session

_log = logging.getLogger("tensorflow")


class Coordinator:
    """tf.train.Coordinator: a stop flag the threads of a job share."""

    def __init__(self, clean_stop_exception_types=None):
        self._stop = threading.Event()
        self._exc = None

    def should_stop(self):
        return self._stop.is_set()

    def request_stop(self, ex=None):
        if ex is not None and self._exc is None:
            self._exc = ex
        self._stop.set()

    def clear_stop(self):
        self._stop.clear()

    def wait_for_stop(self, timeout=None):
        return self._stop.wait(timeout)

    def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False):
        for t in threads or []:
            t.join(stop_grace_period_secs)
        if self._exc is not None:
            raise self._exc

    @contextlib.contextmanager
    def stop_on_exception(self):
        try:
            yield
        except Exception as e:  # the coordinator carries it to join()
            self.request_stop(e)


class _Looper(threading.Thread):
    def __init__(self, coord, every_secs, fn, name):
        super().__init__(name=name, daemon=True)
        self._coord, self._every, self._fn = coord, every_secs, fn

    def run(self):
        while not self._coord.wait_for_stop(self._every):
            try:
                self._fn()
            except Exception as e:  # a failed save or summary ends the job as TF's does
                self._coord.request_stop(e)
                return


class Supervisor:
    USE_DEFAULT = 0

    def __init__(self, graph=None, ready_op=USE_DEFAULT, ready_for_local_init_op=USE_DEFAULT,
                 is_chief=True, init_op=USE_DEFAULT, init_feed_dict=None,
                 local_init_op=USE_DEFAULT, logdir=None, summary_op=USE_DEFAULT,
                 saver=USE_DEFAULT, global_step=USE_DEFAULT, save_summaries_secs=120,
                 save_model_secs=600, recovery_wait_secs=30, stop_grace_secs=120,
                 checkpoint_basename="model.ckpt", session_manager=None, summary_writer=USE_DEFAULT,
                 init_fn=None, local_init_run_options=None):
        from . import _variables
        self._graph = graph or get_default_graph()
        with self._graph.as_default():
            self._init_op = (_variables.global_variables_initializer()
                             if init_op is Supervisor.USE_DEFAULT else init_op)
            if local_init_op is Supervisor.USE_DEFAULT:
                local_init_op = (_variables.local_variables_initializer()
                                 if _variables.local_variables() else None)
            self._local_init_op = local_init_op
            self._summary_op = (_summary.merge_all() if summary_op is Supervisor.USE_DEFAULT
                                else summary_op)
            self._saver = (_train.Saver() if saver is Supervisor.USE_DEFAULT and logdir else
                           (None if saver is Supervisor.USE_DEFAULT else saver))
            self._global_step = (_train.get_global_step(self._graph)
                                 if global_step is Supervisor.USE_DEFAULT else global_step)
        self._init_feed_dict, self._init_fn = init_feed_dict, init_fn
        self._is_chief, self._logdir = is_chief, logdir
        self._save_summaries_secs, self._save_model_secs = save_summaries_secs, save_model_secs
        self._recovery_wait_secs, self._stop_grace_secs = recovery_wait_secs, stop_grace_secs
        self._coord = Coordinator()
        self._threads = []
        self._sess = None
        self._writer = None
        if is_chief and logdir and summary_writer is Supervisor.USE_DEFAULT:
            self._writer = _summary.FileWriter(logdir)
        elif summary_writer is not Supervisor.USE_DEFAULT:
            self._writer = summary_writer

    is_chief = property(lambda self: self._is_chief)
    coord = property(lambda self: self._coord)
    saver = property(lambda self: self._saver)
    global_step = property(lambda self: self._global_step)
    summary_writer = property(lambda self: self._writer)
    summary_op = property(lambda self: self._summary_op)
    init_op = property(lambda self: self._init_op)
    save_path = property(lambda self: os.path.join(self._logdir or ".", "model.ckpt"))

    def prepare_or_wait_for_session(self, master="", config=None, wait_for_checkpoint=False,
                                    max_wait_secs=7200, start_standard_services=True):
        from ._monitored import _WAIT_INIT_CAP_S
        sess = Session(master, graph=self._graph, config=config)
        try:
            if self._is_chief:
                latest = _train.latest_checkpoint(self._logdir) if self._logdir else None
                if latest and self._saver is not None:
                    self._saver.restore(sess, latest)
                    _log.info("Restored from %s.", latest)
                else:
                    if self._init_op is not None:
                        sess.run(self._init_op, feed_dict=self._init_feed_dict)
                    if self._init_fn is not None:
                        self._init_fn(sess)
            elif master:
                sess._runner.wait_init(int(min(float(max_wait_secs), _WAIT_INIT_CAP_S) * 1000))
            if self._local_init_op is not None:
                sess.run(self._local_init_op)
        except BaseException:
            sess.close()
            raise
        self._sess = sess
        if self._is_chief and start_standard_services:
            self.start_standard_services(sess)
        return sess

    def start_standard_services(self, sess):
        if self._saver is not None and self._logdir and self._save_model_secs:
            self._threads.append(_Looper(self._coord, self._save_model_secs,
                                         lambda: self._save(sess), "sv-checkpoint"))
        if self._writer is not None and self._summary_op is not None and self._save_summaries_secs:
            self._threads.append(_Looper(self._coord, self._save_summaries_secs,
                                         lambda: self._summarize(sess), "sv-summaries"))
        for t in self._threads:
            if not t.is_alive():
                t.start()
        return self._threads

    def _step(self, sess):
        return int(sess.run(self._global_step)) if self._global_step is not None else 0

    def _save(self, sess):
        self._saver.save(sess, self.save_path, global_step=self._step(sess))

    def _summarize(self, sess):
        summary, step = sess.run([self._summary_op, self._global_step])
        self._writer.add_summary(summary, int(step))

    def summary_computed(self, sess, summary, global_step=None):
        if self._writer is None:
            raise RuntimeError("Writing a summary requires a summary writer.")
        step = self._step(sess) if global_step is None else int(global_step)
        self._writer.add_summary(summary, step)

    def start_queue_runners(self, sess, queue_runners=None):
        threads = []
        for qr in queue_runners or []:
            threads += qr.create_threads(sess, coord=self._coord, daemon=True, start=True)
        self._queue_runners = getattr(self, "_queue_runners", []) + list(queue_runners or [])
        return threads

    def should_stop(self):
        stepper = getattr(self._graph, "_strategy_step", None)  # its training ended
        return self._coord.should_stop() or bool(stepper is not None and stepper.over)

    def request_stop(self, ex=None):
        self._coord.request_stop(ex)

    def stop(self, threads=None, close_summary_writer=True, ignore_live_threads=False):
        self._coord.request_stop()
        sess = self._sess
        try:
            stepper = getattr(self._graph, "_strategy_step", None)
            if stepper is not None and sess is not None:
                stepper.finish(sess)  # the chief closes sync training: its runner ends
            self._coord.join(self._threads + list(threads or []), self._stop_grace_secs)
        finally:
            if close_summary_writer and self._writer is not None:
                self._writer.close()
                self._writer = None
            if sess is not None and hasattr(sess._runner, "job_done"):
                sess._runner.job_done()

    def loop(self, timer_interval_secs, target, args=None, kwargs=None):
        t = _Looper(self._coord, timer_interval_secs,
                    lambda: target(*(args or ()), **(kwargs or {})), "sv-loop")
        t.start()
        self._threads.append(t)
        return t

    @contextlib.contextmanager
    def managed_session(self, master="", config=None, start_standard_services=True,
                        close_summary_writer=True):
        sess = self.prepare_or_wait_for_session(master, config,
                                                start_standard_services=start_standard_services)
        try:
            yield sess
        except Exception as e:
            if type(e).__name__ not in ("OutOfRangeError",):
                self.request_stop()
                raise
        finally:
            try:
                self.stop(close_summary_writer=close_summary_writer)
            finally:
                sess.close()
