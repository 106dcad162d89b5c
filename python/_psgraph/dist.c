/* A cluster from Python (issue 39): the TaskServer (a psg_task_server_t with its cluster:
 * what tf.train.Server is), the DistSession (a worker's psg_dist_session_t over a Graph,
 * its local partition run by this process's TaskServer), and the ReplicaSetter
 * (psg_replica_setter_t, what tf.train.replica_device_setter returns). Checkpoints of a
 * cluster are the same files as psgraph train's: every ps task writes its own shard
 * (SaveShard) and the chief commits the index (psg_checkpoint_write_index). Every wait runs
 * without the GIL and has psgraph's deadline. */
#include "python/_psgraph/ext.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- TaskServer ---- */

typedef struct {
    PyObject_HEAD psg_cluster_t *cluster;
    psg_task_server_t *ts;
    psg_trace_t *trace; /* the nodes this task runs, while a traced run records them */
} task_server_t;

psg_task_server_t *psg_py_task_server(PyObject *o) {
    if (!PyObject_TypeCheck(o, &psg_py_task_server_type)) {
        PyErr_SetString(PyExc_TypeError, "not a TaskServer");
        return NULL;
    }
    return ((task_server_t *)o)->ts;
}

/* TaskServer(tf_config_json, job, index, threads=1, logdir=None, expect_workers=0,
 *            recv_timeout_ms=0, peer_timeout_s=0) */
static PyObject *ts_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {
        "tf_config",      "job", "index", "threads", "logdir", "expect_workers", "recv_timeout_ms",
        "peer_timeout_s", NULL};
    const char *json, *job, *logdir = NULL;
    int index, threads = 1, expect = 0;
    long long recv_ms = 0;
    double peer_s = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssi|iziLd", kwlist, &json, &job, &index, &threads,
                                     &logdir, &expect, &recv_ms, &peer_s))
        return NULL;
    task_server_t *self = (task_server_t *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    psg_cluster_t *c = psg_cluster_parse(json, "ClusterSpec");
    int rc = c ? psg_cluster_set_task(c, job, index) : -1;
    if (rc == 0 && peer_s > 0) rc = psg_cluster_set_peer_timeout(c, peer_s);
    if (rc == 0 && logdir && psg_logdir_make(logdir) < 0) rc = -1;
    if (rc < 0) {
        psg_cluster_destroy(&c);
        Py_DECREF(self);
        return psg_py_raise();
    }
    self->cluster = c;
    psg_task_server_options_t o = {.cluster = c,
                                   .num_threads = threads,
                                   .recv_timeout_ms = recv_ms,
                                   .expect_workers = expect,
                                   .logdirs = {logdir}};
    Py_BEGIN_ALLOW_THREADS self->ts = psg_task_server_new(&o);
    Py_END_ALLOW_THREADS if (!self->ts) {
        Py_DECREF(self);
        return psg_py_raise();
    }
    return (PyObject *)self;
}

static void ts_dealloc(PyObject *o) {
    task_server_t *self = (task_server_t *)o;
    Py_BEGIN_ALLOW_THREADS psg_task_server_destroy(&self->ts);
    Py_END_ALLOW_THREADS psg_cluster_destroy(&self->cluster);
    psg_trace_destroy(&self->trace); /* after the server: no runner holds the hook */
    Py_TYPE(o)->tp_free(o);
}

static psg_task_server_t *ts_live(PyObject *o) {
    task_server_t *self = (task_server_t *)o;
    if (!self->ts) PyErr_SetString(PyExc_RuntimeError, "the task server is stopped");
    return self->ts;
}

static PyObject *ts_endpoint(PyObject *o, PyObject *noargs) {
    (void)noargs;
    psg_task_server_t *ts = ts_live(o);
    return ts ? PyUnicode_FromString(psg_task_server_endpoint(ts)) : NULL;
}

static PyObject *ts_task(PyObject *o, PyObject *noargs) {
    (void)noargs;
    psg_task_server_t *ts = ts_live(o);
    return ts ? PyUnicode_FromString(psg_task_server_task(ts)) : NULL;
}

/* wait(timeout_ms) -> whether the server stopped by itself (JobDone of every expected
 * worker, a Shutdown request) within timeout_ms */
static PyObject *ts_wait(PyObject *o, PyObject *args) {
    long long ms;
    if (!PyArg_ParseTuple(args, "L", &ms)) return NULL;
    psg_task_server_t *ts = ts_live(o);
    if (!ts) return NULL;
    int stopped;
    Py_BEGIN_ALLOW_THREADS stopped = psg_task_server_wait(ts, ms);
    Py_END_ALLOW_THREADS return PyBool_FromLong(stopped == 1);
}

static PyObject *ts_stop_reason(PyObject *o, PyObject *noargs) {
    (void)noargs;
    psg_task_server_t *ts = ts_live(o);
    return ts ? PyUnicode_FromString(psg_task_server_stop_reason(ts)) : NULL;
}

static PyObject *ts_inspect(PyObject *o, PyObject *noargs) {
    (void)noargs;
    psg_task_server_t *ts = ts_live(o);
    char *json = ts ? psg_task_server_inspect(ts) : NULL;
    if (!json) return ts ? psg_py_raise() : NULL;
    PyObject *s = PyUnicode_FromString(json);
    free(json);
    return s;
}

/* trace_start(pid, step): every node this task runs from now on (the local partitions of
 * this worker's steps) goes into a Chrome trace as pid `pid`, training step `step`: what a
 * ps task records on a Trace request (psgraph train --trace's worker side) */
static PyObject *ts_trace_start(PyObject *o, PyObject *args) {
    int pid;
    long long step;
    if (!PyArg_ParseTuple(args, "iL", &pid, &step)) return NULL;
    task_server_t *self = (task_server_t *)o;
    if (!ts_live(o)) return NULL;
    if (self->trace) return PyErr_Format(PyExc_RuntimeError, "this task records a trace already");
    if (!(self->trace = psg_trace_new(pid, psg_task_server_task(self->ts), "CPU:0")))
        return PyErr_NoMemory();
    psg_trace_set_step(self->trace, step);
    psg_task_server_set_node_hook(self->ts, psg_trace_node_hook, self->trace);
    Py_RETURN_NONE;
}

/* trace_stop(path) -> events: ends the recording, writes it to path (JSON) */
static PyObject *ts_trace_stop(PyObject *o, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    task_server_t *self = (task_server_t *)o;
    if (!self->trace) return PyErr_Format(PyExc_RuntimeError, "this task records no trace");
    if (self->ts) psg_task_server_set_node_hook(self->ts, NULL, NULL);
    int n = psg_trace_num_events(self->trace), rc;
    Py_BEGIN_ALLOW_THREADS rc = psg_trace_write(self->trace, path);
    Py_END_ALLOW_THREADS psg_trace_destroy(&self->trace);
    if (rc < 0) return psg_py_raise();
    return PyLong_FromLong(n);
}

static PyObject *ts_close(PyObject *o, PyObject *noargs) {
    (void)noargs;
    task_server_t *self = (task_server_t *)o;
    Py_BEGIN_ALLOW_THREADS psg_task_server_destroy(&self->ts);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyMethodDef ts_methods[] = {
    {"endpoint", ts_endpoint, METH_NOARGS, "the bound endpoint (tcp://127.0.0.1:2222)"},
    {"task", ts_task, METH_NOARGS, "the canonical task name (/job:ps/replica:0/task:0)"},
    {"wait", ts_wait, METH_VARARGS, "wait(timeout_ms) -> whether the server stopped"},
    {"stop_reason", ts_stop_reason, METH_NOARGS, "why the server stopped ('' while it serves)"},
    {"inspect", ts_inspect, METH_NOARGS, "the Inspect report (JSON)"},
    {"close", ts_close, METH_NOARGS, "stops the server"},
    {"trace_start", ts_trace_start, METH_VARARGS, "trace_start(pid, step): record the nodes run"},
    {"trace_stop", ts_trace_stop, METH_VARARGS, "trace_stop(path) -> events: writes the trace"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject psg_py_task_server_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "psgraph._psgraph.TaskServer",
    .tp_basicsize = sizeof(task_server_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "psgraph's task server (psg_task_server_t) for one task of a cluster",
    .tp_new = ts_new,
    .tp_dealloc = ts_dealloc,
    .tp_methods = ts_methods,
};

/* ---- ReplicaSetter ---- */

typedef struct {
    PyObject_HEAD psg_replica_setter_t *s;
} setter_t;

/* ReplicaSetter(ps_tasks, ps_device, worker_device, round_robin) */
static PyObject *setter_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"ps_tasks", "ps_device", "worker_device", "round_robin", NULL};
    int ps_tasks, rr = 0;
    const char *ps_device = NULL, *worker_device = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|zzp", kwlist, &ps_tasks, &ps_device,
                                     &worker_device, &rr))
        return NULL;
    setter_t *self = (setter_t *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    psg_replica_setter_options_t o = {.ps_tasks = ps_tasks,
                                      .ps_device = ps_device,
                                      .worker_device = worker_device,
                                      .strategy = rr ? PSG_PS_ROUND_ROBIN : PSG_PS_GREEDY};
    if (!(self->s = psg_replica_setter_new(&o))) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    return (PyObject *)self;
}

static void setter_dealloc(PyObject *o) {
    psg_replica_setter_destroy(&((setter_t *)o)->s);
    Py_TYPE(o)->tp_free(o);
}

psg_replica_setter_t *psg_py_replica_setter(PyObject *o) {
    if (!PyObject_TypeCheck(o, &psg_py_replica_setter_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a psgraph._psgraph.ReplicaSetter");
        return NULL;
    }
    return ((setter_t *)o)->s;
}

static PyObject *setter_ps_bytes(PyObject *o, PyObject *args) {
    int k;
    if (!PyArg_ParseTuple(args, "i", &k)) return NULL;
    return PyLong_FromLongLong(psg_replica_setter_ps_bytes(((setter_t *)o)->s, k));
}

static PyMethodDef setter_methods[] = {
    {"ps_bytes", setter_ps_bytes, METH_VARARGS, "ps_bytes(k): variable bytes put on ps task k"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject psg_py_replica_setter_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "psgraph._psgraph.ReplicaSetter",
    .tp_basicsize = sizeof(setter_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the replica device setter (psg_replica_setter_t), for Graph.push_replica_setter",
    .tp_new = setter_new,
    .tp_dealloc = setter_dealloc,
    .tp_methods = setter_methods,
};

/* ---- DistSession ---- */

typedef struct {
    PyObject_HEAD PyObject *graph; /* the Graph object: the session borrows its psg_graph_t */
    PyObject *server;              /* the TaskServer of this process (its cluster too) */
    psg_dist_session_t *ds;
    pthread_mutex_t lock; /* one request at a time */
} dist_session_t;

/* DistSession(graph, server, step_timeout_ms=0, id_stream=0): id_stream 1 for a second
 * session of the process (the sync chief's runner beside the worker's loop) */
static PyObject *ds_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"graph", "server", "step_timeout_ms", "id_stream", NULL};
    PyObject *graph, *server;
    long long timeout = 0;
    int stream = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|Li", kwlist, &psg_py_graph_type, &graph,
                                     &psg_py_task_server_type, &server, &timeout, &stream))
        return NULL;
    task_server_t *ts = (task_server_t *)server;
    if (!ts_live(server)) return NULL;
    dist_session_t *self = (dist_session_t *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    pthread_mutex_init(&self->lock, NULL);
    self->graph = Py_NewRef(graph);
    self->server = Py_NewRef(server);
    psg_dist_session_options_t o = {
        .cluster = ts->cluster, .server = ts->ts, .step_timeout_ms = timeout, .id_stream = stream};
    self->ds = psg_dist_session_new(psg_py_graph(graph), &o);
    if (!self->ds) {
        Py_DECREF(self);
        return psg_py_raise();
    }
    return (PyObject *)self;
}

static void ds_dealloc(PyObject *o) {
    dist_session_t *self = (dist_session_t *)o;
    Py_BEGIN_ALLOW_THREADS psg_dist_session_destroy(&self->ds);
    Py_END_ALLOW_THREADS pthread_mutex_destroy(&self->lock);
    Py_CLEAR(self->graph);
    Py_CLEAR(self->server);
    psg_py_drain_releases();
    Py_TYPE(o)->tp_free(o);
}

static PyObject *ds_make_callable(PyObject *o, PyObject *args) {
    dist_session_t *self = (dist_session_t *)o;
    return psg_py_callable_make(o, psg_py_graph(self->graph), &self->lock, NULL, self->ds, args);
}

/* The calls below take the session's lock and run without the GIL; each returns None or
 * raises the C error (naming the task). */
#define DS_CALL(self, rc, expr)                                                                    \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&(self)->lock);                                  \
        rc = (expr);                                                                               \
        pthread_mutex_unlock(&(self)->lock);                                                       \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

static PyObject *ds_run_init(PyObject *o, PyObject *noargs) {
    (void)noargs;
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    DS_CALL(self, rc, psg_dist_session_run_init(self->ds));
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

/* wait_init(timeout_ms): until every variable is initialized on the task holding it */
static PyObject *ds_wait_init(PyObject *o, PyObject *args) {
    long long ms;
    if (!PyArg_ParseTuple(args, "L", &ms)) return NULL;
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    DS_CALL(self, rc, psg_dist_session_wait_init(self->ds, ms));
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

static PyObject *ds_job_done(PyObject *o, PyObject *noargs) {
    (void)noargs;
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    DS_CALL(self, rc, psg_dist_session_job_done(self->ds));
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

/* wait_workers(n, timeout_ms): until n workers told ps task 0 they are done */
static PyObject *ds_wait_workers(PyObject *o, PyObject *args) {
    int n;
    long long ms;
    if (!PyArg_ParseTuple(args, "iL", &n, &ms)) return NULL;
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    DS_CALL(self, rc, psg_dist_session_wait_workers(self->ds, n, ms));
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

static PyObject *ds_drain(PyObject *o, PyObject *noargs) {
    (void)noargs;
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    DS_CALL(self, rc, psg_dist_session_drain(self->ds));
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

/* inspect(task, timeout_ms) -> the task's Inspect report (JSON) */
static PyObject *ds_inspect(PyObject *o, PyObject *args) {
    const char *task;
    long long ms;
    if (!PyArg_ParseTuple(args, "sL", &task, &ms)) return NULL;
    dist_session_t *self = (dist_session_t *)o;
    char *json;
    DS_CALL(self, json, psg_dist_session_inspect_within(self->ds, task, ms));
    if (!json) return psg_py_raise();
    PyObject *s = PyUnicode_FromString(json);
    free(json);
    return s;
}

/* One request to a ps task: step, key, body; the reply (caller destroys) or NULL. */
static psg_msg_t *ps_call(psg_dist_session_t *ds, const char *op, int shard, int num_shards,
                          int64_t step, const char *logdir, int64_t timeout_ms) {
    char task[PSG_DEVICE_NAME_MAX], key[32];
    psg_device_name("ps", shard, NULL, task, sizeof task);
    snprintf(key, sizeof key, "%d/%d", shard, num_shards);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, op);
    if (!m || psg_msg_set_key(m, key) < 0 || psg_msg_set_body(m, logdir, strlen(logdir)) < 0) {
        psg_msg_destroy(&m);
        psg_error_set("out of memory");
        return NULL;
    }
    m->step = step;
    psg_msg_t *r = psg_dist_session_call(ds, task, &m, timeout_ms);
    psg_msg_destroy(&m);
    return r;
}

/* The save of a cluster's checkpoint at `step` into logdir: each ps its shard, then the
 * index (the commit), then the prune to `keep`. */
static int save_cluster(psg_dist_session_t *ds, int nps, const char *logdir, int64_t step, int keep,
                        int64_t timeout_ms) {
    if (psg_dist_session_drain(ds) < 0) return -1;
    psg_checkpoint_shard_t *shards = calloc((size_t)nps, sizeof *shards);
    if (!shards) return psg_error_set("out of memory");
    int rc = 0;
    for (int i = 0; rc == 0 && i < nps; i++) {
        psg_msg_t *r = ps_call(ds, PSG_TS_SAVE_SHARD, i, nps, step, logdir, timeout_ms);
        rc = r ? psg_checkpoint_shard_parse(&shards[i], r->key, r->body ? r->body->data : "",
                                            r->body ? r->body->size : 0)
               : -1;
        if (r && rc < 0) psg_error_wrap("ps task %d: SaveShard", i);
        psg_msg_destroy(&r);
    }
    if (rc == 0) rc = psg_checkpoint_write_index(logdir, step, nps, shards);
    if (rc == 0 && keep > 0) rc = psg_checkpoint_prune(logdir, keep);
    for (int i = 0; i < nps; i++) psg_checkpoint_shard_clear(&shards[i]);
    free(shards);
    return rc;
}

/* save(logdir, step, num_ps, keep, timeout_ms): the checkpoint at step, as psgraph train's */
static PyObject *ds_save(PyObject *o, PyObject *args) {
    const char *logdir;
    long long step, ms;
    int nps, keep;
    if (!PyArg_ParseTuple(args, "sLiiL", &logdir, &step, &nps, &keep, &ms)) return NULL;
    if (nps < 1) return PyErr_Format(PyExc_ValueError, "a cluster checkpoint needs a ps task");
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    DS_CALL(self, rc, save_cluster(self->ds, nps, logdir, step, keep, ms));
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

/* restore(logdir, step, num_ps, timeout_ms, shard=-1) -> tensors restored: each ps (or
 * only ps `shard`) loads its shard of the committed checkpoint at step */
static int restore_cluster(psg_dist_session_t *ds, int nps, int only, const char *logdir,
                           int64_t step, int64_t timeout_ms, long *count) {
    *count = 0;
    for (int i = 0; i < nps; i++) {
        if (only >= 0 && i != only) continue;
        psg_msg_t *r = ps_call(ds, PSG_TS_RESTORE_SHARD, i, nps, step, logdir, timeout_ms);
        if (!r) return psg_error_wrap("restoring shard %d of step %" PRId64, i, step);
        *count += r->key ? strtol(r->key, NULL, 10) : 0;
        psg_msg_destroy(&r);
    }
    return 0;
}

static PyObject *ds_restore(PyObject *o, PyObject *args) {
    const char *logdir;
    long long step, ms;
    int nps, only = -1;
    if (!PyArg_ParseTuple(args, "sLiL|i", &logdir, &step, &nps, &ms, &only)) return NULL;
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    long count = 0;
    DS_CALL(self, rc, restore_cluster(self->ds, nps, only, logdir, step, ms, &count));
    if (rc < 0) return psg_py_raise();
    return PyLong_FromLong(count);
}

/* trace_ps(task, pid, step, path, timeout_ms) -> events: a Trace request to a ps task
 * (psgraph train --trace's): path None starts its recording as trace pid `pid` at step
 * `step`; a path (under the task's logdir) stops it and has the task write its events there */
static PyObject *ds_trace_ps(PyObject *o, PyObject *args) {
    const char *task, *path;
    int pid;
    long long step, ms;
    if (!PyArg_ParseTuple(args, "siLzL", &task, &pid, &step, &path, &ms)) return NULL;
    char key[64];
    snprintf(key, sizeof key, "start %d %lld", pid, step);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_TRACE);
    if (!m || psg_msg_set_key(m, path ? "stop" : key) < 0 ||
        (path && psg_msg_set_body(m, path, strlen(path)) < 0)) {
        psg_msg_destroy(&m);
        return PyErr_NoMemory();
    }
    dist_session_t *self = (dist_session_t *)o;
    psg_msg_t *r;
    DS_CALL(self, r, psg_dist_session_call(self->ds, task, &m, ms));
    psg_msg_destroy(&m);
    if (!r) return psg_py_raise();
    long n = r->key ? strtol(r->key, NULL, 10) : 0;
    psg_msg_destroy(&r);
    return PyLong_FromLong(n);
}

/* ---- recovery: a ps task that restarted (docs/checkpoints.md) ---- */

/* incarnation(task) -> the task's incarnation as its last reply gave it (0: none yet) */
static PyObject *ds_incarnation(PyObject *o, PyObject *args) {
    const char *task;
    if (!PyArg_ParseTuple(args, "s", &task)) return NULL;
    dist_session_t *self = (dist_session_t *)o;
    uint64_t inc;
    DS_CALL(self, inc, psg_dist_session_incarnation(self->ds, task));
    return PyLong_FromUnsignedLongLong(inc);
}

/* run_init_on(task): the initializers of the variables that task holds */
static PyObject *ds_run_init_on(PyObject *o, PyObject *args) {
    const char *task;
    if (!PyArg_ParseTuple(args, "s", &task)) return NULL;
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    DS_CALL(self, rc, psg_dist_session_run_init_on(self->ds, task));
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

/* reregister(): every callable's partitions registered again (a task lost its graphs) */
static PyObject *ds_reregister(PyObject *o, PyObject *noargs) {
    (void)noargs;
    dist_session_t *self = (dist_session_t *)o;
    int rc;
    DS_CALL(self, rc, psg_dist_session_reregister(self->ds));
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

static PyMethodDef ds_methods[] = {
    {"make_callable", ds_make_callable, METH_VARARGS,
     "make_callable(feeds, fetches, targets, shapes) -> Callable"},
    {"run_init", ds_run_init, METH_NOARGS, "runs the init collection on the tasks (the chief)"},
    {"wait_init", ds_wait_init, METH_VARARGS, "wait_init(timeout_ms): variables initialized"},
    {"job_done", ds_job_done, METH_NOARGS, "tells every ps task this worker is done"},
    {"wait_workers", ds_wait_workers, METH_VARARGS, "wait_workers(n, timeout_ms)"},
    {"drain", ds_drain, METH_NOARGS, "waits for the open overlapped step"},
    {"inspect", ds_inspect, METH_VARARGS, "inspect(task, timeout_ms) -> JSON"},
    {"save", ds_save, METH_VARARGS, "save(logdir, step, num_ps, keep, timeout_ms)"},
    {"restore", ds_restore, METH_VARARGS,
     "restore(logdir, step, num_ps, timeout_ms, shard=-1) -> count"},
    {"incarnation", ds_incarnation, METH_VARARGS, "incarnation(task) -> int"},
    {"trace_ps", ds_trace_ps, METH_VARARGS,
     "trace_ps(task, pid, step, path, timeout_ms) -> events: start (path None) or stop"},
    {"run_init_on", ds_run_init_on, METH_VARARGS, "run_init_on(task)"},
    {"reregister", ds_reregister, METH_NOARGS, "registers every callable again"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject psg_py_dist_session_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "psgraph._psgraph.DistSession",
    .tp_basicsize = sizeof(dist_session_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a worker's distributed session (psg_dist_session_t) over a Graph",
    .tp_new = ds_new,
    .tp_dealloc = ds_dealloc,
    .tp_methods = ds_methods,
};
