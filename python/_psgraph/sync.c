/* Sync replicas from Python (tf.train.SyncReplicasOptimizer): psgraph's wrapper of an
 * optimizer (psg_sync_replicas_t, include/psgraph/sync_replicas.h) builds into the Graph
 * the worker's step (gradients offered to per-variable accumulators, the next token taken)
 * and the chief's (the mean of the first N gradients applied, N + b tokens released); the
 * Python side feeds and fetches what the returned description names, and reads each
 * step's statistics (used or dropped, and why) here. */
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
    return Py_BuildValue(
        "{s:N,s:i,s:N,s:N,s:N,s:i,s:N,s:i,s:i,s:i,s:i,s:i,s:N,s:N,s:O}", "local_step",
        ep_or_none(sg->local_step), "train_op", sg->train_op, "next_step",
        ep_or_none(sg->next_step), "num_accepted", ep_or_none(sg->num_accepted), "global_step",
        ep_or_none(sg->global_step), "chief_op", sg->chief_op, "chief_global_step",
        ep_or_none(sg->chief_global_step), "chief_init_op", sg->chief_init_op, "close_op",
        sg->close_op, "start_op", sg->start_op, "local_init_op", sg->local_init_op, "num_vars",
        sg->num_vars, "fetches", fl, "graph", cap, "replicas", sr_cap);
}

/* sync_apply_gradients(optimizer, [grads], [handles], num_workers, replicas_to_aggregate,
 *                      backup_workers, worker_index, timeout_ms, strategy=None) -> dict */
static PyObject *t_sync_apply_gradients(PyObject *self, PyObject *args) {
    PyObject *cap, *gs_o, *vs_o;
    int workers, n, b, index;
    long long timeout;
    const char *strategy = NULL;
    if (!PyArg_ParseTuple(args, "O!OOiiiiL|z", &PyCapsule_Type, &cap, &gs_o, &vs_o, &workers, &n,
                          &b, &index, &timeout, &strategy))
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

PyMethodDef psg_py_sync_methods[] = {
    {"sync_apply_gradients", t_sync_apply_gradients, METH_VARARGS,
     "sync_apply_gradients(optimizer, grads, handles, workers, N, b, index, timeout_ms, "
     "strategy=None) -> the strategy's graph (dict)"},
    {NULL, NULL, 0, NULL},
};
