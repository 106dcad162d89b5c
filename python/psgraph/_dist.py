"""TF 1.x's cluster surface over psgraph's runtime: ClusterSpec, Server (a psgraph task
server: a ps task started here serves workers written in C or Python alike), TF_CONFIG read
as TensorFlow reads it, replica_device_setter (psgraph's replica device setter, round robin
or greedy by bytes) and the distributed runner behind Session(server.target): psgraph's
distributed session (docs/distributed.md), which places the graph on the cluster, cuts it
per task and runs each step as RunGraph on every task involved."""
import atexit
import json
import logging
import os
import threading
import time
import weakref

from . import _psgraph

_log = logging.getLogger("tensorflow")

# the failures of a step that a lost ps task causes (psgraph.errors' classes), after which a
# monitored session recovers (docs/checkpoints.md), and how long a lost ps is waited for
RECOVERABLE = ("UnavailableError", "DeadlineExceededError", "AbortedError")
RECOVERY_S = 60
# how long a worker's Recv waits for the ps: past a sync step's wait for its token or its
# gradients (60 s), so that the ps's own error ends a slow step, not a Recv racing it (as
# psgraph train gives its Recvs the whole step deadline); `psgraph server`'s 60 s elsewhere
WORKER_RECV_MS = 80000

# Servers of this process by target: Session(target) runs through the one named.
_servers = {}
_servers_lock = threading.Lock()

# What is still open when the process ends (a script that raised, a session never closed), by
# rank: 0 monitored sessions, 1 the sync chief's runners, 2 cluster sessions, 3 servers.
_open = [weakref.WeakSet() for _ in range(4)]


def close_at_exit(obj, rank):
    """obj._close_at_exit() runs when the process ends with obj still open, after every object
    of a lower rank."""
    _open[rank].add(obj)


@atexit.register
def _at_exit():
    """Closes what is open, before the interpreter ends and czmq's own exit handler closes
    every socket left: a C call still running on a thread then aborted the process
    (zsock_set_sndtimeo's assertion) after a failed session start."""
    for rank in _open:
        for obj in list(rank):
            try:
                obj._close_at_exit()
            except Exception as e:  # the process ends anyway; the first error was said
                _log.debug("closing %r at exit: %s", obj, e)


class ClusterSpec:
    """tf.train.ClusterSpec: {job: [address, ...]} or {job: {index: address}}."""

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            self._jobs = {j: dict(t) for j, t in cluster._jobs.items()}
            return
        if not isinstance(cluster, dict):
            raise TypeError("`cluster` must be a dictionary mapping one or more job names to "
                            "(i) a list of network addresses, or (ii) a dictionary mapping "
                            "integer task indices to network addresses")
        self._jobs = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str):
                raise TypeError("Job name %r must be a string" % (job,))
            if isinstance(tasks, (list, tuple)):
                self._jobs[job] = {i: str(a) for i, a in enumerate(tasks)}
            elif isinstance(tasks, dict):
                for i in tasks:
                    if not isinstance(i, int):
                        raise TypeError("Task index %r of job '%s' must be an integer" % (i, job))
                self._jobs[job] = {i: str(a) for i, a in tasks.items()}
            else:
                raise TypeError("The tasks for job %r must be a list or a dictionary from "
                                "integers to strings." % job)

    @property
    def jobs(self):
        return sorted(self._jobs)

    def __bool__(self):
        return bool(self._jobs)

    __nonzero__ = __bool__

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        return "ClusterSpec(%r)" % self.as_dict()

    def _job(self, job_name):
        try:
            return self._jobs[job_name]
        except KeyError:
            raise ValueError("No such job in cluster: %r" % job_name)

    def num_tasks(self, job_name):
        return len(self._job(job_name))

    def task_indices(self, job_name):
        return sorted(self._job(job_name))

    def task_address(self, job_name, task_index):
        job = self._job(job_name)
        if task_index not in job:
            raise ValueError("No task with index %r in job %r" % (task_index, job_name))
        return job[task_index]

    def job_tasks(self, job_name):
        job = self._job(job_name)
        out = [None] * (max(job) + 1 if job else 0)
        for i, a in job.items():
            out[i] = a
        return out

    def as_dict(self):
        out = {}
        for job, tasks in self._jobs.items():
            if sorted(tasks) == list(range(len(tasks))):
                out[job] = [tasks[i] for i in range(len(tasks))]
            else:
                out[job] = dict(tasks)
        return out

    def as_cluster_def(self):
        raise NotImplementedError("psgraph has no ClusterDef protocol buffer: as_dict() gives "
                                  "the cluster")

    def _tf_config(self, job, index, extra=None):
        """This cluster as the TF_CONFIG document psgraph's C library parses."""
        cluster = {}
        for name, tasks in self._jobs.items():
            if sorted(tasks) != list(range(len(tasks))):
                raise ValueError("job '%s' lists tasks %s: psgraph's cluster needs every task of "
                                 "a job, 0 to N-1" % (name, sorted(tasks)))
            cluster[name] = [tasks[i] for i in range(len(tasks))]
        doc = dict(extra or {})
        doc["cluster"] = cluster
        doc["task"] = {"type": job, "index": index}
        return json.dumps(doc)


def _env_tf_config():
    raw = os.environ.get("TF_CONFIG", "")
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise ValueError("TF_CONFIG is not JSON: %s" % e)
    if not isinstance(doc, dict):
        raise ValueError("TF_CONFIG is not a JSON object")
    return doc


def _env_extra():
    """The fields of TF_CONFIG that psgraph adds to TensorFlow's (keys, peer_timeout); without
    "keys", the key folder of $PSGRAPH_KEYS when set, as psgraph's tasks take it
    (psg_cluster_from_env: `psgraph launch --ssh` gives a remote task its private copy so)."""
    doc = _env_tf_config()
    extra = {k: doc[k] for k in ("keys", "peer_timeout") if k in doc}
    if "keys" not in extra and os.environ.get("PSGRAPH_KEYS"):
        extra["keys"] = os.environ["PSGRAPH_KEYS"]
    return extra


class TFConfigClusterResolver:
    """tf.distribute.cluster_resolver.TFConfigClusterResolver: the cluster and this task of
    TF_CONFIG (cluster, task: chief / worker / ps / evaluator)."""

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None):
        doc = _env_tf_config()
        task = doc.get("task") or {}
        self.task_type = task_type if task_type is not None else task.get("type")
        self.task_id = task_id if task_id is not None else int(task.get("index", 0))
        self.rpc_layer = rpc_layer or doc.get("rpc_layer")
        self.environment = environment or doc.get("environment", "")
        self._cluster = doc.get("cluster") or {}

    def cluster_spec(self):
        return ClusterSpec(self._cluster)

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        if task_type is None or not self._cluster:
            return ""
        return "grpc://" + self.cluster_spec().task_address(task_type, task_id)

    def num_accelerators(self, *a, **kw):
        return {}


def _num_workers(cluster):
    return sum(cluster.num_tasks(j) for j in ("chief", "worker") if j in cluster.jobs)


class Server:
    """tf.train.Server: this process's task of the cluster, a psgraph task server (ZeroMQ),
    serving from construction. A ps task's join() returns once every worker of the cluster
    said it is done (psgraph's JobDone); a worker's server also runs its partition of each
    step for Session(server.target). config (a ConfigProto) is accepted: device_filters
    change nothing here, since a psgraph worker never waits for another worker."""

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None,
                 config=None, start=True):
        if isinstance(server_or_cluster_def, Server):
            server_or_cluster_def = server_or_cluster_def._cluster
        cluster = ClusterSpec(server_or_cluster_def)
        if job_name is None:
            if len(cluster.jobs) != 1:
                raise ValueError("Must specify an explicit `job_name`.")
            job_name = cluster.jobs[0]
        if task_index is None:
            if cluster.num_tasks(job_name) != 1:
                raise ValueError("Must specify an explicit `task_index`.")
            task_index = cluster.task_indices(job_name)[0]
        self._cluster = cluster
        self._job = job_name
        self._index = int(task_index)
        self._config = config
        threads = 1
        if config is not None and hasattr(config, "_threads"):
            threads = config._threads()
        expect = _num_workers(cluster) if job_name == "ps" else 0
        recv_ms = 0
        if job_name in ("worker", "chief"):
            recv_ms = max(WORKER_RECV_MS, getattr(config, "operation_timeout_in_ms", 0) or 0)
        doc = cluster._tf_config(job_name, self._index, _env_extra())
        self._ts = _psgraph.TaskServer(doc, job_name, self._index, threads=threads,
                                       logdir=os.environ.get("PSGRAPH_LOGDIR") or None,
                                       expect_workers=expect, recv_timeout_ms=recv_ms)
        self._target = "grpc://" + cluster.task_address(job_name, self._index)
        with _servers_lock:
            _servers[self._target] = self
        close_at_exit(self, 3)

    @staticmethod
    def create_local_server(config=None, start=True):
        raise NotImplementedError("psgraph's Server is a task of a cluster: give it a ClusterSpec "
                                  "(a local Session needs no server)")

    @property
    def target(self):
        return self._target

    @property
    def server_def(self):
        return {"cluster": self._cluster.as_dict(), "job_name": self._job,
                "task_index": self._index, "protocol": "psgraph"}

    @property
    def _task(self):
        return self._ts.task()

    def start(self):
        """The server serves from construction; kept for TF's scripts."""

    def join(self):
        """Blocks until the server stops: for a ps task, once every worker is done."""
        while not self._ts.wait(200):
            pass  # a short wait at a time lets Ctrl-C through
        return self._ts.stop_reason()

    def _close(self):
        with _servers_lock:
            if _servers.get(self._target) is self:
                del _servers[self._target]
        self._ts.close()

    def _close_at_exit(self):
        """Stops the server once nothing holds it but this object: a session of it still
        alive (held elsewhere) would use it after (its C session borrows the server)."""
        import gc
        import sys
        gc.collect()  # sessions closed at exit, in reference cycles
        if sys.getrefcount(self._ts) <= 2:  # this object's and the call's
            self._close()


def _server_for(target):
    t = target.decode() if isinstance(target, bytes) else str(target)
    with _servers_lock:
        s = _servers.get(t)
    if s is None:
        known = ", ".join(sorted(_servers)) or "none"
        raise ValueError("psgraph runs a worker's part of each step in its own process: "
                         "Session(%r) needs this process's tf.train.Server of that target "
                         "(servers here: %s)" % (t, known))
    if s._job == "ps":
        raise ValueError("Session(%r): %s is a ps task; a session runs on a worker's "
                         "server" % (t, s._task))
    return s


# ---- the replica device setter ----

class GreedyLoadBalancingStrategy:
    """Places each variable on the ps task with the fewest variable bytes so far (psgraph's
    greedy setter: bytes = elements x dtype size, TF's byte_size_load_fn)."""

    def __init__(self, num_tasks, load_fn=None):
        if load_fn is not None and getattr(load_fn, "__name__", "") != "byte_size_load_fn":
            raise NotImplementedError("psgraph's greedy strategy weighs variables by bytes "
                                      "(byte_size_load_fn); a custom load_fn is not run")
        self._num_tasks = num_tasks
        self._round_robin = False


class _RoundRobinStrategy:
    def __init__(self, num_tasks):
        self._num_tasks = num_tasks
        self._round_robin = True


def byte_size_load_fn(op):
    raise NotImplementedError("psgraph weighs variables by bytes inside its replica setter")


class _ReplicaSetter:
    """What replica_device_setter returns: a device function for `with tf.device(...)`,
    psgraph's psg_replica_setter_t underneath."""

    def __init__(self, ps_tasks, ps_device, worker_device, round_robin, shard_bytes=0):
        self._c = _psgraph.ReplicaSetter(ps_tasks, ps_device, worker_device, round_robin)
        self.ps_tasks = ps_tasks
        self.ps_device = ps_device
        self.worker_device = worker_device
        self.shard_bytes = shard_bytes if ps_tasks else 0

    def ps_bytes(self, k):
        return self._c.ps_bytes(k)

    def __call__(self, op):
        raise NotImplementedError("psgraph's replica setter places ops as they are built: use it "
                                  "in `with tf.device(setter)`")


# a dense layer's kernel above this many bytes is cut into row shards under the setter, as
# psgraph train cuts its fully connected weights in a cluster (PSG_TRAIN_CLUSTER_SHARD_BYTES)
DEFAULT_SHARD_BYTES = 512 << 10


def _shard_bytes(shard_bytes):
    if shard_bytes is None:
        env = os.environ.get("PSGRAPH_SHARD_BYTES", "")
        try:
            shard_bytes = int(env) if env else DEFAULT_SHARD_BYTES
        except ValueError:
            raise ValueError("PSGRAPH_SHARD_BYTES=%r: a number of bytes (0: off)" % env)
    if shard_bytes < 0:
        raise ValueError("shard_bytes %d: a number of bytes (0: off)" % shard_bytes)
    return int(shard_bytes)


def replica_device_setter(ps_tasks=0, ps_device="/job:ps", worker_device="/job:worker",
                          merge_devices=True, cluster=None, ps_ops=None, ps_strategy=None,
                          shard_bytes=None):
    """tf.train.replica_device_setter: variables (and their slots) on the ps tasks, round
    robin (TF's default) or with GreedyLoadBalancingStrategy, everything else on
    worker_device. None when there is no ps task (as TF). psgraph's own shard_bytes (None:
    $PSGRAPH_SHARD_BYTES, else 512 KiB; 0: off): a tf.layers.dense kernel bigger than that,
    made under the setter with no partitioner of the user's, is a partitioned variable of
    row shards (NAME/part_i), as psgraph train --shard-bytes cuts its fully connected
    weights, so that their transfers and updates overlap."""
    if cluster is not None:
        cluster = ClusterSpec(cluster)
        ps_tasks = cluster.num_tasks("ps") if "ps" in cluster.jobs else 0
    if ps_tasks == 0:
        return None
    if ps_ops is not None and set(ps_ops) - {"Variable", "VariableV2", "AutoReloadVariable",
                                             "MutableHashTable", "MutableHashTableV2",
                                             "MutableHashTableOfTensors", "VarHandleOp",
                                             "MutableDenseHashTable"}:
        raise NotImplementedError("psgraph's replica setter puts variables on the ps tasks; "
                                  "ps_ops=%r is not supported" % (ps_ops,))
    round_robin = True
    if ps_strategy is not None:
        if not hasattr(ps_strategy, "_round_robin"):
            raise NotImplementedError("psgraph's replica setter takes round robin or "
                                      "GreedyLoadBalancingStrategy, not %r" % (ps_strategy,))
        round_robin = ps_strategy._round_robin
    return _ReplicaSetter(ps_tasks, ps_device or "/job:ps", worker_device or "/job:worker",
                          round_robin, _shard_bytes(shard_bytes))


# ---- the runner behind Session(server.target) ----

def _num_ps(server):
    c = server._cluster
    return c.num_tasks("ps") if "ps" in c.jobs else 0


class _DistRunner:
    """Runs the graph across the cluster: psgraph's distributed session over this process's
    task server. With PSGRAPH_OVERLAP=1 the training steps (a run with a target op) overlap
    the next step's variable reads with the ps applying the last step's gradients, as
    psgraph train does (any other request waits for the open step first); off by default,
    since a step whose worker part waits on the ps's (a group of updates placed on the
    worker) stalls with it today."""

    def __init__(self, graph, server, config):
        timeout = getattr(config, "operation_timeout_in_ms", 0) if config is not None else 0
        if not timeout:  # a sync step waits for its token up to the sync timeout: past it
            # (psgraph train's tokens wait 3/4 of its step timeout)
            timeout = max(30000, getattr(graph, "_sync_timeout_ms", 0) * 4 // 3)
        self._server = server
        self._ds = _psgraph.DistSession(graph._c, server._ts, step_timeout_ms=int(timeout))
        self._timeout_ms = int(timeout)

    @property
    def is_chief(self):
        s = self._server
        if "chief" in s._cluster.jobs:
            return s._job == "chief"
        return s._job == "worker" and s._index == 0

    def make_callable(self, feeds, fetches, targets, feed_shapes):
        c = self._ds.make_callable(feeds, fetches, targets, feed_shapes)
        if targets and os.environ.get("PSGRAPH_OVERLAP", "0") not in ("", "0"):
            c.set_overlap(True)
        return c

    def run_init(self):
        self._ds.run_init()

    def wait_init(self, timeout_ms):
        self._ds.wait_init(int(timeout_ms))

    def job_done(self):
        self._ds.job_done()

    def wait_workers(self, n, timeout_ms):
        self._ds.wait_workers(int(n), int(timeout_ms))

    def inspect(self, task):
        return json.loads(self._ds.inspect(task, self._timeout_ms))

    def save(self, directory, step, keep):
        self._ds.save(os.path.abspath(directory), int(step), _num_ps(self._server), int(keep),
                      self._timeout_ms)

    def restore(self, path, mapping):
        if mapping is not None:
            raise NotImplementedError("a distributed Saver restores every variable (var_list "
                                      "of a cluster session is not supported)")
        import re
        m = re.match(r"(.*)/model\.ckpt-(\d+)\.index\.json$", os.path.abspath(path))
        if not m:
            raise ValueError("%s: a cluster restores a checkpoint's index "
                             "(DIR/model.ckpt-STEP.index.json)" % path)
        self._ds.restore(m.group(1), int(m.group(2)), _num_ps(self._server), self._timeout_ms)
        return int(m.group(2))

    def read_variable(self, name):
        raise NotImplementedError("a variable of a cluster is read by running it: sess.run(v)")

    def assign_variable(self, name, dtype_code, value):
        raise NotImplementedError("Variable.load in a cluster session: assign with an op")

    def variable_names(self):
        names = []
        for i in range(_num_ps(self._server)):
            names += [v["name"] for v in self.inspect("/job:ps/task:%d" % i)["variables"]]
        return names

    def drain(self):
        self._ds.drain()

    def close(self):
        if self._ds is not None:
            try:
                self._ds.drain()
            finally:
                self._ds = None

    def traced(self, step, run, logdir):
        """run() with every task of the step recording the nodes it runs (psgraph train
        --trace's Trace requests): this worker's task server, and each ps task when a folder
        it may write is known (logdir); returns (run's value, the Chrome trace of them all).
        A ps task's part is read from logdir/trace.PID.psI.json, when that is on this host."""
        from ._sync import _this_worker
        tasks = self._ps_tasks()
        traced = []
        if not logdir:
            _log.warning("a traced run: the ps tasks are not traced (no checkpoint_dir and no "
                         "$PSGRAPH_LOGDIR: no folder they may write their part into)")
        for i, task in enumerate(tasks if logdir else []):
            try:
                self._ds.trace_ps(task, i, step, None, self._timeout_ms)
                traced.append(i)
            except Exception as e:  # the run goes on, traced on the other tasks
                _log.warning("a traced run: %s is not traced: %s", task, e)
        ts = self._server._ts
        ts.trace_start(len(tasks) + _this_worker()[0], step)
        events = []
        try:
            out = run()
            self._ds.drain()  # an overlapped step ends before its trace
        finally:
            events += _trace_events(ts.trace_stop, None)
            for i in traced:
                part = os.path.join(os.path.abspath(logdir), "trace.%d.ps%d.json" % (os.getpid(), i))
                try:
                    events += _trace_events(
                        lambda p: self._ds.trace_ps(tasks[i], i, step, p, self._timeout_ms), part)
                except Exception as e:  # the run's own error, if any, says more
                    _log.warning("a traced run: the trace of %s: %s", tasks[i], e)
        return out, json.dumps({"traceEvents": events})

    def _ps_tasks(self):
        return ["/job:ps/task:%d" % i for i in range(_num_ps(self._server))]

    def note_incarnations(self):
        """Remembers each ps task's process, so that a restart is told from a slow reply."""
        self._inc = {t: self._ds.incarnation(t) for t in self._ps_tasks()}

    def _wait_ps(self, task, deadline):
        while True:
            left = deadline - time.time()
            try:
                ms = int(max(1000, min(left * 1000, self._timeout_ms)))
                return json.loads(self._ds.inspect(task, ms))
            except Exception as e:  # not back yet: try again until the deadline
                if time.time() > deadline:
                    raise type(e)("recovery: %s did not come back within %d s: %s"
                                  % (task, RECOVERY_S, e)) from e

    def recover(self, is_chief, checkpoint_dir, error):
        """After a step failed on a lost ps task: waits for every ps task; the chief gives a
        ps that restarted its shard of the newest checkpoint (or its initializers), the
        others wait for the variables; the graphs are registered again. The other shards
        keep their values (psgraph train's recovery, docs/checkpoints.md). Returns whether the
        step is to be retried: not after a deadline when every ps task answers as the same
        incarnation (the step was slow or stuck there, not lost: a retry would wait behind
        it in its graph's line, and a sync step would offer its gradient twice)."""
        _log.warning("recovery: the step failed (%s); waiting for every ps task", error)
        t0 = time.time()
        deadline = t0 + RECOVERY_S
        nps = _num_ps(self._server)
        known = getattr(self, "_inc", {})
        lost = False
        for i, task in enumerate(self._ps_tasks()):
            report = self._wait_ps(task, deadline)
            inc = self._ds.incarnation(task)
            holds = any(v["initialized"] for v in report["variables"])
            restarted = inc != known[task] if known.get(task) else not holds
            known[task] = inc
            lost = lost or restarted
            if not restarted or not is_chief:
                continue
            latest = _latest(checkpoint_dir)
            if latest is None:
                self._ds.run_init_on(task)
                _log.warning("recovery: ps%d restarted before any checkpoint; re-initialized "
                             "its variables", i)
            else:
                d, step = latest
                n = self._ds.restore(d, step, nps, self._timeout_ms, i)
                _log.warning("recovery: ps%d restarted; restored its shard %d from "
                             "%s/model.ckpt-%d.index.json (%d tensors); the other shards keep "
                             "their values", i, i, d, step, n)
        self._inc = known
        if not lost and type(error).__name__ == "DeadlineExceededError":
            _log.warning("recovery: every ps task answers as the same incarnation (%.2f s): the "
                         "step was stuck, not lost; not retried", time.time() - t0)
            return False
        if not is_chief:
            self._ds.wait_init(int(max(1.0, deadline - time.time()) * 1000) + self._timeout_ms)
        self._ds.reregister()
        _log.warning("recovery: every ps task answers (%.2f s); retrying the step",
                     time.time() - t0)
        return True


def _trace_events(write, path):
    """The events of the Chrome trace that write(path) writes (a temporary file when path is
    None), the file removed; [] when it is not on this host (a ps task's, on its own)."""
    import tempfile
    if path is None:
        fd, path = tempfile.mkstemp(prefix="psgraph-trace-", suffix=".json")
        os.close(fd)
    try:
        write(path)
        with open(path) as f:
            return json.load(f)["traceEvents"]
    except FileNotFoundError:
        _log.warning("a traced run: %s is not on this host: left where its task wrote it", path)
        return []
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _latest(checkpoint_dir):
    """(folder, step) of the newest checkpoint of checkpoint_dir, or None."""
    if not checkpoint_dir:
        return None
    from . import _train
    prefix = _train.latest_checkpoint(checkpoint_dir)
    if prefix is None:
        return None
    return os.path.abspath(os.path.dirname(prefix)), int(prefix.rsplit("-", 1)[1])
