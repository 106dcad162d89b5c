"""TF 1.x's timeline (`from tensorflow.python.client import timeline`) over psgraph's Chrome
trace (psgraph/trace.h): a Session.run given tf.RunOptions(trace_level=FULL_TRACE) and a
tf.RunMetadata records every node the step runs (its name, its op type as the category, its
thread, start and duration) into the C library's trace, the one `psgraph train --trace`
writes, and leaves it in run_metadata.step_stats;
Timeline(run_metadata.step_stats).generate_chrome_trace_format() is that trace's JSON, for
chrome://tracing or Perfetto:

    from psgraph import timeline
    opts = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    meta = tf.RunMetadata()
    sess.run(train_op, options=opts, run_metadata=meta)
    open("timeline.json", "w").write(timeline.Timeline(meta.step_stats).generate_chrome_trace_format())

A session over a cluster (Session(server.target)) traces every task of the step, as
`psgraph train --trace` does: this worker's task server (trace pid: ps tasks + its rank) and
each ps task (pid: its index), which writes its part into a folder it may write (the
MonitoredTrainingSession's checkpoint_dir, else $PSGRAPH_LOGDIR: its logdir) on its host,
read back and merged here when that folder is this machine's."""
import logging
import os
import tempfile

_log = logging.getLogger("tensorflow")


class StepStats:
    """What one traced run recorded: `chrome_trace`, the Chrome trace's JSON text."""

    def __init__(self, chrome_trace):
        self.chrome_trace = chrome_trace


class Timeline:
    def __init__(self, step_stats, graph=None):
        if not isinstance(step_stats, StepStats):
            raise TypeError("Timeline takes the step_stats of a tf.RunMetadata that a run with "
                            "RunOptions(trace_level=FULL_TRACE) filled, not %r" % (step_stats,))
        self._stats = step_stats

    def generate_chrome_trace_format(self, show_dataflow=True, show_memory=False):
        return self._stats.chrome_trace


def traced_run(session, run_metadata, run):
    """run() with the session's runs recording a trace, left in run_metadata.step_stats."""
    runner = session._runner
    session._traced_runs = getattr(session, "_traced_runs", 0) + 1
    if hasattr(runner, "traced"):  # a cluster
        logdir = getattr(session, "_trace_dir", None) or os.environ.get("PSGRAPH_LOGDIR")
        out, text = runner.traced(session._traced_runs, run, logdir)
        run_metadata.step_stats = StepStats(text)
        return out
    runner.trace_start(0, "/job:localhost/replica:0/task:0", "CPU:0", session._traced_runs)
    fd, path = tempfile.mkstemp(prefix="psgraph-trace-", suffix=".json")
    os.close(fd)
    try:
        return run()
    finally:
        try:
            runner.trace_stop(path)
            with open(path) as f:
                run_metadata.step_stats = StepStats(f.read())
        finally:
            os.unlink(path)
