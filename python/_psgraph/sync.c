/* Sync replicas from Python (tf.train.SyncReplicasOptimizer): psgraph's wrapper of an
 * optimizer (psg_sync_replicas_t, include/psgraph/sync_replicas.h) builds into the Graph
 * the worker's step (gradients offered to per-variable accumulators, the next token taken)
 * and the chief's (the mean of the first N gradients applied, N + b tokens released); the
 * Python side feeds and fetches what the returned description names, and reads each
 * step's statistics (used or dropped, and why) here. SyncWorker runs a worker's steps
 * through its strategy's step function (psg_sync_stepper_t: psgraph.train.Strategy), the
 * script's own run as the step's call 0. */
#include "python/_psgraph/ext.h"

#define GRAPH(self) (((psg_py_graph_t *)(self))->g)

static void sync_free(PyObject *cap) {
    psg_sync_replicas_t *sr = PyCapsule_GetPointer(cap, "psg_sync_replicas");
    PyObject *optimizer = PyCapsule_GetContext(cap);
    psg_sync_replicas_destroy(&sr);
    Py_XDECREF(optimizer); /* after the wrapper that borrowed it */
}

static void sync_graph_free(PyObject *cap) {
    PyMem_Free(PyCapsule_GetPointer(cap, "psg_sync_graph"));
}

static PyObject *ep_or_none(psg_endpoint_t e) {
    return psg_endpoint_valid(e) ? psg_py_endpoint(e) : Py_NewRef(Py_None);
}

static PyObject *endpoint_list(int n, const psg_endpoint_t *eps) {
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) PyList_SET_ITEM(l, i, psg_py_endpoint(eps[i]));
    return l;
}

/* [(feeds, fetches, targets)] of the strategy's other calls (sg->calls). */
static PyObject *describe_calls(const psg_sync_graph_t *sg) {
    PyObject *l = PyList_New(sg->num_calls);
    for (int k = 0; l && k < sg->num_calls; k++) {
        PyObject *targets = PyList_New(sg->calls[k].n_targets);
        for (int j = 0; targets && j < sg->calls[k].n_targets; j++)
            PyList_SET_ITEM(targets, j, PyLong_FromLong(sg->calls[k].targets[j]));
        PyObject *c =
            targets
                ? Py_BuildValue("(NNN)", endpoint_list(sg->calls[k].n_feeds, sg->calls[k].feeds),
                                endpoint_list(sg->calls[k].n_fetches, sg->calls[k].fetches),
                                targets)
                : NULL;
        if (!c) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, k, c);
    }
    return l;
}

/* The strategy's own options, [(flag, value)], into *o: each must be an option of the
 * table (sync/strategies.c) with a value in its range. 0, or -1 with ValueError. */
static int parse_options(PyObject *list, psg_sync_options_t *o) {
    PyObject *fast = PySequence_Fast(list, "options: a list of (flag, value) pairs");
    if (!fast) return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(fast); i++) {
        const char *flag, *value;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "ss", &flag, &value)) {
            rc = -1;
            break;
        }
        int took = psg_sync_option_parse(o, flag, value);
        if (took < 0)
            PyErr_SetString(PyExc_ValueError, psg_error_message());
        else if (took == 0)
            PyErr_Format(PyExc_ValueError, "%s is not a strategy's option", flag);
        rc = took == 1 ? 0 : -1;
    }
    Py_DECREF(fast);
    return rc;
}

/* The description of what the strategy built: a dict of endpoints and op ids (-1: none),
 * "fetches" (what each worker step fetches, psg_sync_graph_fetches) and "graph" (a capsule
 * for sync_step_read). */
static PyObject *describe(psg_sync_graph_t *sg, PyObject *sr_cap) {
    psg_endpoint_t fetches[PSG_SYNC_CALL_MAX + 8];
    int n = psg_sync_graph_fetches(sg, fetches);
    PyObject *fl = PyList_New(n);
    for (int i = 0; fl && i < n; i++) PyList_SET_ITEM(fl, i, psg_py_endpoint(fetches[i]));
    PyObject *cap = PyCapsule_New(sg, "psg_sync_graph", sync_graph_free);
    if (!fl || !cap) {
        Py_XDECREF(fl);
        if (!cap) PyMem_Free(sg);
        Py_XDECREF(cap);
        return NULL;
    }
    PyObject *calls = describe_calls(sg);
    if (!calls) {
        Py_DECREF(fl);
        Py_DECREF(cap);
        return NULL;
    }
    return Py_BuildValue("{s:N,s:i,s:N,s:N,s:N,s:i,s:N,s:i,s:i,s:i,s:i,s:i,s:i,s:N,s:N,s:O,s:N}",
                         "local_step", ep_or_none(sg->local_step), "train_op", sg->train_op,
                         "next_step", ep_or_none(sg->next_step), "num_accepted",
                         ep_or_none(sg->num_accepted), "global_step", ep_or_none(sg->global_step),
                         "chief_op", sg->chief_op, "chief_global_step",
                         ep_or_none(sg->chief_global_step), "chief_init_op", sg->chief_init_op,
                         "close_op", sg->close_op, "abort_op", sg->abort_op, "start_op",
                         sg->start_op, "local_init_op", sg->local_init_op, "num_vars", sg->num_vars,
                         "fetches", fl, "graph", cap, "replicas", sr_cap, "calls", calls);
}

/* sync_apply_gradients(optimizer, [grads], [handles], num_workers, replicas_to_aggregate,
 *                      backup_workers, worker_index, timeout_ms, strategy=None,
 *                      options=None) -> dict */
static PyObject *t_sync_apply_gradients(PyObject *self, PyObject *args) {
    PyObject *cap, *gs_o, *vs_o;
    int workers, n, b, index;
    long long timeout;
    const char *strategy = NULL;
    PyObject *options = Py_None;
    if (!PyArg_ParseTuple(args, "O!OOiiiiL|zO", &PyCapsule_Type, &cap, &gs_o, &vs_o, &workers, &n,
                          &b, &index, &timeout, &strategy, &options))
        return NULL;
    psg_optimizer_t *o = PyCapsule_GetPointer(cap, "psg_optimizer");
    if (!o) return NULL;
    psg_sync_config_t cfg;
    psg_sync_config_defaults(&cfg);
    cfg.strategy = strategy;
    cfg.num_workers = workers;
    cfg.replicas_to_aggregate = n;
    cfg.backup_workers = b;
    cfg.worker_index = index;
    cfg.timeout_ms = timeout;
    if (options != Py_None && parse_options(options, &cfg.opt) < 0) return NULL;
    psg_sync_replicas_t *sr = psg_sync_replicas_new(o, &cfg);
    if (!sr) {
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    /* the wrapper borrows the optimizer: the capsule of the replicas keeps it alive */
    PyObject *sr_cap = PyCapsule_New(sr, "psg_sync_replicas", sync_free);
    if (!sr_cap) {
        psg_sync_replicas_destroy(&sr);
        return NULL;
    }
    if (PyCapsule_SetContext(sr_cap, Py_NewRef(cap)) < 0) return NULL;
    psg_endpoint_t *gs = NULL, *vs = NULL;
    int ng = 0, nv = 0;
    PyObject *out = NULL;
    psg_sync_graph_t *sg = PyMem_Calloc(1, sizeof *sg);
    if (!sg) {
        PyErr_NoMemory();
    } else if (psg_py_parse_endpoints(gs_o, &gs, &ng) == 0 &&
               psg_py_parse_endpoints(vs_o, &vs, &nv) == 0) {
        if (ng != nv)
            PyErr_Format(PyExc_ValueError, "%d gradients for %d variables", ng, nv);
        else if (psg_sync_replicas_apply_gradients(sr, GRAPH(self), ng, gs, vs, sg) < 0)
            psg_py_raise_build(GRAPH(self));
        else
            out = describe(sg, sr_cap), sg = NULL;
    }
    PyMem_Free(sg);
    PyMem_Free(gs);
    PyMem_Free(vs);
    Py_DECREF(sr_cap);
    return out;
}

/* ---- SyncWorker: one worker's steps through its strategy's step function ---- */

typedef struct {
    PyObject_HEAD PyObject *graph;   /* the Graph: the fetches' dtypes */
    PyObject *replicas, *sync_graph; /* capsules: psg_sync_replicas_t, psg_sync_graph_t */
    PyObject *calls;                 /* tuple of Callables, sg->calls[k] each */
    PyObject *server;                /* the TaskServer whose bytes a step counts, or None */
    PyObject *step_fn;               /* during step(): the worker's step (call 0) */
    psg_sync_stepper_t *stepper;
    psg_straggler_t *stragglers;
    const psg_sync_graph_t *sg;
    int rank;
    bool with_loss;         /* call 0's fetches start with the loss */
    double start;           /* when it was made: each step's wall_sec counts from there */
    int64_t served, pulled; /* the server's tensor bytes after the last step */
} worker_t;

/* Call k of the strategy's step (psg_sync_call_fn), the GIL held: 0 calls step_fn(local step
 * or None), which runs the worker's step and returns the arrays of the loss (with_loss),
 * then psg_sync_graph_fetches';
 * k >= 1 runs the call's Callable. A Python exception stays raised for step() to return. */
static int worker_call(void *ctx, int k, psg_tensor_t *const *feeds, psg_tensor_t **fetched) {
    worker_t *w = ctx;
    const psg_sync_graph_t *sg = w->sg;
    if (k > 0) {
        if (k > sg->num_calls || k > PyTuple_GET_SIZE(w->calls))
            return psg_error_set("the strategy has no call %d", k);
        return psg_py_callable_run_tensors(PyTuple_GET_ITEM(w->calls, k - 1),
                                           sg->calls[k - 1].n_feeds, feeds,
                                           sg->calls[k - 1].n_fetches, fetched);
    }
    psg_endpoint_t eps[PSG_SYNC_CALL_MAX + 8];
    int n = psg_sync_graph_fetches(sg, eps), skip = w->with_loss ? 1 : 0;
    PyObject *ls = psg_endpoint_valid(sg->local_step) && feeds && feeds[0]
                       ? PyLong_FromLongLong(psg_tensor_i64(feeds[0])[0])
                       : Py_NewRef(Py_None);
    PyObject *res = ls ? PyObject_CallOneArg(w->step_fn, ls) : NULL;
    Py_XDECREF(ls);
    PyObject *fast = res ? PySequence_Fast(res, "the step returns a list of arrays") : NULL;
    Py_XDECREF(res);
    if (!fast) return psg_error_set("the worker's step raised a Python exception");
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(fast) != n + skip) {
        PyErr_Format(PyExc_ValueError, "the worker's step returned %zd values for %d fetches",
                     PySequence_Fast_GET_SIZE(fast), n + skip);
        rc = -1;
    }
    /* fetched[0], the loss (a stand-in without one: the caller's fetches are Python's) */
    if (rc == 0)
        fetched[0] = skip ? psg_py_tensor_from(PySequence_Fast_GET_ITEM(fast, 0), PSG_DT_F32)
                          : psg_tensor_scalar_f32(0);
    if (rc == 0 && !fetched[0]) rc = -1;
    for (int i = 0; rc == 0 && i < n; i++)
        if (!(fetched[1 + i] = psg_py_tensor_from(PySequence_Fast_GET_ITEM(fast, skip + i),
                                                  psg_graph_dtype(psg_py_graph(w->graph), eps[i]))))
            rc = -1;
    Py_DECREF(fast);
    if (rc < 0) {
        for (int i = 0; i <= n; i++) psg_tensor_destroy(&fetched[i]);
        return psg_error_set("the worker's step: its fetches");
    }
    return 0;
}

static void worker_dealloc(PyObject *o) {
    worker_t *w = (worker_t *)o;
    psg_sync_stepper_destroy(&w->stepper);
    psg_straggler_destroy(&w->stragglers);
    Py_CLEAR(w->calls);
    Py_CLEAR(w->server);
    Py_CLEAR(w->sync_graph);
    Py_CLEAR(w->replicas);
    Py_CLEAR(w->graph);
    PyObject_Free(o);
}

/* sync_worker(description, [Callable of each call], local_step, rank, [straggler specs],
 * seed, with_loss, TaskServer or None) -> SyncWorker */
static PyObject *t_sync_worker(PyObject *self, PyObject *args) {
    PyObject *desc, *calls_o, *strag_o, *server = Py_None;
    long long local_step, seed;
    int rank, with_loss = 0;
    if (!PyArg_ParseTuple(args, "O!OLiOL|pO", &PyDict_Type, &desc, &calls_o, &local_step, &rank,
                          &strag_o, &seed, &with_loss, &server))
        return NULL;
    if (server != Py_None && !psg_py_task_server(server)) return NULL;
    PyObject *rcap = PyDict_GetItemString(desc, "replicas"),
             *gcap = PyDict_GetItemString(desc, "graph");
    psg_sync_replicas_t *sr = rcap ? PyCapsule_GetPointer(rcap, "psg_sync_replicas") : NULL;
    psg_sync_graph_t *sg = gcap ? PyCapsule_GetPointer(gcap, "psg_sync_graph") : NULL;
    if (!sr || !sg) {
        PyErr_Clear();
        return PyErr_Format(PyExc_ValueError, "sync_worker: not sync_apply_gradients' result");
    }
    PyObject *calls = PySequence_Tuple(calls_o);
    if (!calls) return NULL;
    if (PyTuple_GET_SIZE(calls) != sg->num_calls) {
        Py_DECREF(calls);
        return PyErr_Format(PyExc_ValueError, "sync_worker: %zd Callables for %d calls",
                            PyTuple_GET_SIZE(calls), sg->num_calls);
    }
    worker_t *w = PyObject_New(worker_t, &psg_py_sync_worker_type);
    if (!w) {
        Py_DECREF(calls);
        return NULL;
    }
    w->graph = Py_NewRef(self);
    w->replicas = Py_NewRef(rcap);
    w->sync_graph = Py_NewRef(gcap);
    w->calls = calls;
    w->step_fn = NULL;
    w->sg = sg;
    w->rank = rank;
    w->with_loss = with_loss;
    w->server = Py_NewRef(server);
    w->served = w->pulled = 0;
    if (server != Py_None)
        psg_task_server_tensor_bytes(psg_py_task_server(server), &w->served, &w->pulled);
    w->start = psg_now_sec();
    w->stepper = NULL;
    w->stragglers = psg_straggler_new((uint64_t)seed);
    if (!w->stragglers) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    PyObject *fast = PySequence_Fast(strag_o, "stragglers: a list of --straggler texts");
    for (Py_ssize_t i = 0; fast && i < PySequence_Fast_GET_SIZE(fast); i++) {
        const char *text = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i));
        if (!text || psg_straggler_add(w->stragglers, text) < 0) {
            if (text) PyErr_SetString(PyExc_ValueError, psg_error_message());
            Py_CLEAR(fast);
        }
    }
    if (!fast) {
        Py_DECREF(w);
        return NULL;
    }
    Py_DECREF(fast);
    w->stepper = psg_sync_stepper_new(sr, sg, worker_call, w, local_step);
    if (!w->stepper) {
        Py_DECREF(w);
        return psg_py_raise();
    }
    return (PyObject *)w;
}

/* step(fn) -> dict: the straggler's delay (without the GIL), then the strategy's step with
 * fn as its call 0 (fn(local step or None) runs the worker's step and returns the arrays of
 * the strategy's fetches); the step's statistics and its metrics.jsonl line */
static PyObject *worker_step(PyObject *o, PyObject *fn) {
    worker_t *w = (worker_t *)o;
    if (w->step_fn) return PyErr_Format(PyExc_RuntimeError, "a SyncWorker runs one step at a time");
    double delay;
    int64_t steps = psg_sync_stepper_steps(w->stepper);
    Py_BEGIN_ALLOW_THREADS delay = psg_straggler_sleep(w->stragglers, w->rank, steps);
    Py_END_ALLOW_THREADS w->step_fn = fn;
    psg_tensor_t *loss = NULL;
    psg_sync_step_t st;
    int rc = psg_sync_stepper_step(w->stepper, &loss, &st);
    w->step_fn = NULL;
    st.has_loss = w->with_loss && loss && loss->dtype == PSG_DT_F32 && psg_tensor_numel(loss) >= 1;
    if (st.has_loss) st.loss = psg_tensor_f32(loss)[0];
    psg_tensor_destroy(&loss);
    psg_py_drain_releases();
    if (PyErr_Occurred()) return NULL; /* the step's own exception (OutOfRangeError, ...) */
    if (rc < 0) return psg_py_raise();
    st.straggler_ms = delay;
    st.wall_sec = psg_now_sec() - w->start;
    st.push_bytes = st.pull_bytes = -1;
    if (w->server != Py_None) { /* this step's bytes: the counts' change since the last */
        int64_t served = 0, pulled = 0;
        psg_task_server_tensor_bytes(psg_py_task_server(w->server), &served, &pulled);
        st.push_bytes = served - w->served, st.pull_bytes = pulled - w->pulled;
        w->served = served, w->pulled = pulled;
    }
    char line[1024];
    psg_sync_step_json(&st, w->rank, line, sizeof line);
    const char *why = psg_sync_step_drop_reason(&st);
    return Py_BuildValue("{s:L,s:L,s:O,s:i,s:i,s:L,s:d,s:d,s:d,s:d,s:z,s:s}", "local_step",
                         (long long)st.local_step, "next_step", (long long)st.next_step, "used",
                         st.used ? Py_True : Py_False, "num_accepted", st.num_accepted, "num_vars",
                         st.num_vars, "staleness", (long long)st.staleness, "step_sec", st.step_sec,
                         "token_wait_sec", st.token_wait_sec, "wait_sec", st.wait_sec,
                         "straggler_ms", st.straggler_ms, "dropped", why, "json", line);
}

static PyMethodDef worker_methods[] = {
    {"step", worker_step, METH_O, "step(fn) -> the step's statistics (dict)"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject psg_py_sync_worker_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "psgraph._psgraph.SyncWorker",
    .tp_basicsize = sizeof(worker_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One worker's steps through its strategy's step function (psg_sync_stepper_t)",
    .tp_dealloc = worker_dealloc,
    .tp_methods = worker_methods,
};

/* sync_spec_check("NAME --flag VALUE ...") -> None, or ValueError naming the bad part */
static PyObject *f_sync_spec_check(PyObject *self, PyObject *arg) {
    (void)self;
    const char *spec = PyUnicode_AsUTF8(arg);
    if (!spec) return NULL;
    if (psg_sync_spec_check(spec) < 0) {
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    Py_RETURN_NONE;
}

/* strategy_names() -> [names], in the table's order */
static PyObject *f_strategy_names(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    PyObject *s = PyUnicode_FromString(psg_sync_strategy_names());
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *l = s && sep ? PyUnicode_Split(s, sep, -1) : NULL;
    Py_XDECREF(s);
    Py_XDECREF(sep);
    return l;
}

/* strategy_local_model(name) -> bool: the model is each worker's own copy */
static PyObject *f_strategy_local_model(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    int local = psg_sync_strategy_local_model(name);
    if (local < 0) {
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    return PyBool_FromLong(local);
}

PyMethodDef psg_py_sync_functions[] = {
    {"sync_spec_check", f_sync_spec_check, METH_O,
     "sync_spec_check('NAME --flag VALUE ...'): checked against the strategies' tables"},
    {"strategy_names", f_strategy_names, METH_NOARGS, "the strategies' names"},
    {"strategy_local_model", f_strategy_local_model, METH_O,
     "strategy_local_model(name): whether the model's variables are each worker's own"},
    {NULL, NULL, 0, NULL},
};

PyMethodDef psg_py_sync_methods[] = {
    {"sync_apply_gradients", t_sync_apply_gradients, METH_VARARGS,
     "sync_apply_gradients(optimizer, grads, handles, workers, N, b, index, timeout_ms, "
     "strategy=None, options=[(flag, value)]) -> the strategy's graph (dict)"},
    {"sync_worker", t_sync_worker, METH_VARARGS,
     "sync_worker(description, [call Callables], local_step, rank, [stragglers], seed, "
     "with_loss, server) -> SyncWorker"},
    {NULL, NULL, 0, NULL},
};
