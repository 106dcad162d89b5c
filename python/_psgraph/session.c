/* The Session and Callable objects: a psg_session_t over a Graph, and the prepared plans
 * (psg_callable_t) that Python's Session.run keeps per signature. A run converts the feeds
 * (numpy arrays, without a copy where they fit), releases the GIL while the C library
 * runs the step, and hands the fetches back as numpy arrays. Runs of one session take
 * turns (the executor runs a plan once at a time). The session's variables are also read,
 * written, saved and restored here (Saver, Variable.load). */
#include "python/_psgraph/ext.h"

#include <pthread.h>

typedef struct {
    PyObject_HEAD PyObject *graph; /* the Graph object: the session borrows its psg_graph_t */
    psg_session_t *s;
    pthread_mutex_t lock;      /* one run at a time */
    bool allow_soft_placement; /* ConfigProto's */
    int placed_nodes;          /* the graph's node count when it was last placed */
    psg_trace_t *trace;        /* the runs' Chrome trace while one is recorded, else NULL */
} session_t;

typedef struct {
    PyObject_HEAD PyObject *owner; /* the Session or DistSession: kept alive */
    pthread_mutex_t *lock;         /* the owner's: one run at a time */
    psg_graph_t *g;                /* the owner's graph */
    psg_callable_t *c;             /* a local plan, or */
    psg_dist_callable_t *dc;       /* a distributed one (the owner's) */
    int n_feeds, n_fetches;
    psg_endpoint_t *feeds;
    psg_dtype_t *feed_dtypes;
    psg_shape_t *feed_shapes;
} callable_t;

/* Session(graph, num_threads, allow_soft_placement) */
static PyObject *session_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"graph", "num_threads", "allow_soft_placement", NULL};
    PyObject *graph;
    int threads = 1, soft = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|ip", kwlist, &psg_py_graph_type, &graph,
                                     &threads, &soft))
        return NULL;
    session_t *self = (session_t *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    pthread_mutex_init(&self->lock, NULL);
    self->allow_soft_placement = soft;
    self->graph = Py_NewRef(graph);
    psg_session_options_t o = {.num_threads = threads};
    self->s = psg_session_new(psg_py_graph(graph), &o, NULL);
    if (!self->s) {
        Py_DECREF(self);
        return psg_py_raise();
    }
    return (PyObject *)self;
}

static void session_dealloc(PyObject *o) {
    session_t *self = (session_t *)o;
    Py_BEGIN_ALLOW_THREADS psg_session_destroy(&self->s); /* joins the pool's threads */
    Py_END_ALLOW_THREADS pthread_mutex_destroy(&self->lock);
    psg_trace_destroy(&self->trace);
    Py_CLEAR(self->graph);
    psg_py_drain_releases();
    Py_TYPE(o)->tp_free(o);
}

static psg_graph_t *session_graph(session_t *s) {
    return psg_py_graph(s->graph);
}

PyObject *psg_py_callable_make(PyObject *owner, psg_graph_t *g, pthread_mutex_t *lock,
                               psg_session_t *s, psg_dist_session_t *ds, PyObject *args) {
    PyObject *feeds_o, *fetches_o, *targets_o, *shapes_o = Py_None;
    if (!PyArg_ParseTuple(args, "OOO|O", &feeds_o, &fetches_o, &targets_o, &shapes_o)) return NULL;
    psg_endpoint_t *feeds = NULL, *fetches = NULL;
    int *targets = NULL, nf = 0, nt = 0, nq = 0;
    callable_t *c = NULL;
    if (psg_py_parse_endpoints(feeds_o, &feeds, &nf) < 0 ||
        psg_py_parse_endpoints(fetches_o, &fetches, &nt) < 0 ||
        psg_py_parse_ints(targets_o, &targets, &nq) < 0)
        goto fail;
    c = PyObject_New(callable_t, &psg_py_callable_type);
    if (!c) goto fail;
    c->owner = Py_NewRef(owner);
    c->lock = lock;
    c->g = g;
    c->c = NULL;
    c->dc = NULL;
    c->n_feeds = nf;
    c->n_fetches = nt;
    c->feeds = feeds;
    feeds = NULL;
    c->feed_dtypes = PyMem_Calloc((size_t)nf + 1, sizeof *c->feed_dtypes);
    c->feed_shapes = PyMem_Calloc((size_t)nf + 1, sizeof *c->feed_shapes);
    if (!c->feed_dtypes || !c->feed_shapes) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int i = 0; i < nf; i++) {
        if (!psg_graph_node(g, c->feeds[i].node)) {
            PyErr_Format(PyExc_ValueError, "feed %d names no node", i);
            goto fail;
        }
        c->feed_dtypes[i] = psg_graph_dtype(g, c->feeds[i]);
        c->feed_shapes[i] = *psg_graph_shape(g, c->feeds[i]);
        PyObject *given = shapes_o != Py_None ? PySequence_GetItem(shapes_o, i) : NULL;
        if (shapes_o != Py_None && !given) goto fail;
        int rc = given && given != Py_None ? psg_py_parse_shape(given, &c->feed_shapes[i]) : 0;
        Py_XDECREF(given);
        if (rc < 0) goto fail;
    }
    if (s) {
        c->c = psg_session_make_callable(s, nf, c->feeds, nt, fetches, nq, targets);
    } else {
        /* placing, partitioning and registering talk to the tasks: without the GIL */
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(lock);
        c->dc = psg_dist_session_make_callable(ds, nf, c->feeds, nt, fetches, nq, targets);
        pthread_mutex_unlock(lock);
        Py_END_ALLOW_THREADS
    }
    if (!c->c && !c->dc) {
        psg_py_raise();
        goto fail;
    }
    PyMem_Free(fetches);
    PyMem_Free(targets);
    return (PyObject *)c;
fail:
    Py_XDECREF(c);
    PyMem_Free(feeds);
    PyMem_Free(fetches);
    PyMem_Free(targets);
    return NULL;
}

/* make_callable([feeds], [fetches], [target ids], [feed shapes] or None) -> Callable: a
 * feed's shape None (or no list) is its node's inferred shape, which a fed value must fit */
static PyObject *session_make_callable(PyObject *o, PyObject *args) {
    session_t *self = (session_t *)o;
    psg_graph_t *g = session_graph(self);
    /* the devices tf.device asked for (a GPU's ops run there), placed again when the graph grew */
    if (psg_graph_num_nodes(g) != self->placed_nodes) {
        psg_placement_options_t po = {.allow_soft_placement = self->allow_soft_placement,
                                      .soft_missing_gpus = true};
        if (psg_place(g, &po) < 0) return psg_py_raise();
        self->placed_nodes = psg_graph_num_nodes(g);
    }
    return psg_py_callable_make(o, g, &self->lock, self->s, NULL, args);
}

static void callable_dealloc(PyObject *o) {
    callable_t *c = (callable_t *)o;
    psg_callable_destroy(&c->c); /* a distributed one is its session's */
    PyMem_Free(c->feeds);
    PyMem_Free(c->feed_dtypes);
    PyMem_Free(c->feed_shapes);
    Py_XDECREF(c->owner);
    PyObject_Free(o);
}

/* TensorFlow's message for a feed whose shape the placeholder does not take. */
static void feed_shape_error(callable_t *c, int i, const psg_tensor_t *t) {
    const psg_node_t *n = psg_graph_node(c->g, c->feeds[i].node);
    char got[PSG_SHAPE_STR_MAX], want[PSG_SHAPE_STR_MAX];
    PyErr_Format(PyExc_ValueError,
                 "Cannot feed value of shape %s for Tensor '%s:%d', which has shape %s",
                 psg_shape_str(&t->shape, got, sizeof got), psg_node_name(n), c->feeds[i].index,
                 psg_shape_str(&c->feed_shapes[i], want, sizeof want));
}

/* run([feed values]) -> [fetched arrays] */
static PyObject *callable_run(PyObject *o, PyObject *arg) {
    callable_t *c = (callable_t *)o;
    psg_py_drain_releases();
    PyObject *fast = PySequence_Fast(arg, "run takes a sequence of feed values");
    if (!fast) return NULL;
    if (PySequence_Fast_GET_SIZE(fast) != c->n_feeds) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "%zd feed values for %d feeds",
                            PySequence_Fast_GET_SIZE(fast), c->n_feeds);
    }
    enum { SMALL = 16 };
    psg_tensor_t *small_in[SMALL], *small_out[SMALL];
    psg_tensor_t **in =
        c->n_feeds <= SMALL ? small_in : PyMem_Calloc((size_t)c->n_feeds, sizeof *in);
    psg_tensor_t **out =
        c->n_fetches <= SMALL ? small_out : PyMem_Calloc((size_t)c->n_fetches, sizeof *out);
    PyObject *result = NULL;
    int made = 0, rc = -1;
    if (!in || !out) {
        PyErr_NoMemory();
        goto done;
    }
    for (; made < c->n_feeds; made++) {
        in[made] = psg_py_tensor_from(PySequence_Fast_GET_ITEM(fast, made), c->feed_dtypes[made]);
        if (!in[made]) goto done;
        if (!psg_shape_compatible(&c->feed_shapes[made], &in[made]->shape)) {
            feed_shape_error(c, made, in[made]);
            made++;
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(c->lock);
    rc = c->c ? psg_callable_run(c->c, in, out) : psg_dist_callable_run(c->dc, in, out);
    pthread_mutex_unlock(c->lock);
    Py_END_ALLOW_THREADS if (rc < 0) {
        psg_py_raise();
        goto done;
    }
    result = PyList_New(c->n_fetches);
    for (int i = 0; i < c->n_fetches; i++) {
        PyObject *a = result ? psg_py_array_from(&out[i]) : NULL;
        if (!a) {
            for (int k = i; k < c->n_fetches; k++) psg_tensor_destroy(&out[k]);
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, a);
    }
done:
    /* our references to the feeds go with the GIL held, so a wrapped array is released here */
    for (int i = 0; i < made; i++) psg_tensor_destroy(&in[i]);
    if (in != small_in) PyMem_Free(in);
    if (out != small_out) PyMem_Free(out);
    Py_DECREF(fast);
    psg_py_drain_releases();
    return result;
}

int psg_py_callable_run_tensors(PyObject *o, int n_in, psg_tensor_t *const *in, int n_out,
                                psg_tensor_t **out) {
    if (!PyObject_TypeCheck(o, &psg_py_callable_type)) return psg_error_set("not a Callable");
    callable_t *c = (callable_t *)o;
    if (n_in != c->n_feeds || n_out != c->n_fetches)
        return psg_error_set("a Callable of %d feeds and %d fetches run with %d and %d", c->n_feeds,
                             c->n_fetches, n_in, n_out);
    int rc;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(c->lock);
    rc = c->c ? psg_callable_run(c->c, in, out) : psg_dist_callable_run(c->dc, in, out);
    pthread_mutex_unlock(c->lock);
    Py_END_ALLOW_THREADS return rc;
}

/* ---- the session's variables ---- */

static psg_variable_t *find_var(session_t *s, const char *name) {
    psg_variable_t *v = psg_resource_find_variable(psg_session_resources(s->s), name);
    if (!v) PyErr_Format(PyExc_KeyError, "the session has no variable '%s'", name);
    return v;
}

/* read_variable(name) -> a copy of its value */
static PyObject *session_read_variable(PyObject *o, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    psg_variable_t *v = find_var((session_t *)o, name);
    if (!v) return NULL;
    if (!v->initialized)
        return PyErr_Format(PyExc_RuntimeError,
                            "variable '%s' is not initialized (run the init op first)", name);
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    psg_tensor_t *t = psg_tensor_copy(v->value);
    pthread_mutex_unlock(&guard->lock);
    if (!t) return psg_py_raise();
    return psg_py_array_from(&t);
}

/* Writes t into the variable `name` of rm (created when absent): 0, or -1 with the error. */
static int write_variable(psg_resource_mgr_t *rm, const char *name, const psg_tensor_t *t) {
    psg_variable_t *v = psg_resource_variable(rm, name, t->dtype, &t->shape);
    if (!v) return -1;
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    memcpy(v->value->data, t->data, psg_tensor_nbytes(t));
    v->initialized = true;
    pthread_mutex_unlock(&guard->lock);
    return 0;
}

/* assign_variable(name, dtype, value): Variable.load */
static PyObject *session_assign_variable(PyObject *o, PyObject *args) {
    const char *name;
    int dt;
    PyObject *value;
    if (!PyArg_ParseTuple(args, "siO", &name, &dt, &value)) return NULL;
    psg_tensor_t *t = psg_py_tensor_from(value, (psg_dtype_t)dt);
    if (!t) return NULL;
    int rc = write_variable(psg_session_resources(((session_t *)o)->s), name, t);
    psg_tensor_destroy(&t);
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *session_variable_names(PyObject *o, PyObject *noargs) {
    (void)noargs;
    psg_resource_mgr_t *rm = psg_session_resources(((session_t *)o)->s);
    int n = psg_resource_num_variables(rm);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++)
        PyList_SET_ITEM(l, i, PyUnicode_FromString(psg_resource_variable_at(rm, i)->name));
    return l;
}

/* save(dir, step, keep) -> seconds: every initialized variable, one safetensors shard */
static PyObject *session_save(PyObject *o, PyObject *args) {
    const char *dir;
    long long step;
    int keep;
    if (!PyArg_ParseTuple(args, "sLi", &dir, &step, &keep)) return NULL;
    psg_resource_mgr_t *rm = psg_session_resources(((session_t *)o)->s);
    double secs = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = psg_checkpoint_save(dir, step, 1, &rm, keep, &secs);
    Py_END_ALLOW_THREADS if (rc < 0) return psg_py_raise();
    return PyFloat_FromDouble(secs);
}

/* restore(path, {checkpoint name: variable name} or None) -> the checkpoint's step: all
 * its tensors into the variables of the same names, or only the mapped ones */
static PyObject *session_restore(PyObject *o, PyObject *args) {
    const char *path;
    PyObject *map;
    if (!PyArg_ParseTuple(args, "sO", &path, &map)) return NULL;
    psg_resource_mgr_t *rm = psg_session_resources(((session_t *)o)->s);
    psg_checkpoint_t *ck;
    Py_BEGIN_ALLOW_THREADS ck = psg_checkpoint_open(path, -1);
    Py_END_ALLOW_THREADS if (!ck) return psg_py_raise();
    int rc = 0;
    if (map == Py_None) {
        rc = psg_checkpoint_restore(ck, rm, false);
    } else {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (rc == 0 && PyDict_Next(map, &pos, &key, &value)) {
            const char *from = PyUnicode_AsUTF8(key), *to = PyUnicode_AsUTF8(value);
            if (!from || !to) {
                psg_checkpoint_destroy(&ck);
                return NULL;
            }
            psg_tensor_t *t = psg_checkpoint_read(ck, from);
            rc = t ? write_variable(rm, to, t) : -1;
            if (rc < 0) psg_error_wrap("%s: restoring '%s' into variable '%s'", path, from, to);
            psg_tensor_destroy(&t);
        }
    }
    int64_t step = psg_checkpoint_step(ck);
    psg_checkpoint_destroy(&ck);
    if (rc < 0) return psg_py_raise();
    return PyLong_FromLongLong(step);
}

/* Parses [(name, endpoint), ...] into ios (PyMem_Free it) of *n; the names stay borrowed
 * from the list, which the caller keeps alive. */
static int parse_onnx_ios(PyObject *list, const char *what, psg_onnx_io_t **ios, int *n) {
    PyObject *fast = PySequence_Fast(list, "export_onnx: inputs and outputs are lists");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *ios = PyMem_Calloc(len ? (size_t)len : 1, sizeof **ios);
    if (!*ios) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyArg_ParseTuple(item, "sO&", &(*ios)[i].name, psg_py_endpoint_conv,
                              &(*ios)[i].endpoint)) {
            PyErr_Format(PyExc_TypeError, "export_onnx: %s %zd is not a (name, tensor) pair", what,
                         i);
            Py_DECREF(fast);
            PyMem_Free(*ios);
            *ios = NULL;
            return -1;
        }
    }
    *n = (int)len;
    Py_DECREF(fast); /* the items (and their names) stay alive in the caller's list */
    return 0;
}

/* export_onnx(path, [(name, endpoint)], [(name, endpoint)], doc, version): the subgraph
 * that computes the outputs from the inputs, with the session's variables as initializers
 * (psg_onnx_export) */
static PyObject *session_export_onnx(PyObject *o, PyObject *args) {
    session_t *self = (session_t *)o;
    const char *path, *doc = NULL;
    PyObject *inputs, *outputs;
    long long version = 0;
    if (!PyArg_ParseTuple(args, "sO!O!|zL", &path, &PyList_Type, &inputs, &PyList_Type, &outputs,
                          &doc, &version))
        return NULL;
    psg_onnx_spec_t spec = {
        .values = psg_session_resources(self->s), .doc = doc, .model_version = version};
    psg_onnx_io_t *in = NULL, *out = NULL;
    if (parse_onnx_ios(inputs, "input", &in, &spec.num_inputs) < 0) return NULL;
    if (parse_onnx_ios(outputs, "output", &out, &spec.num_outputs) < 0) {
        PyMem_Free(in);
        return NULL;
    }
    spec.inputs = in;
    spec.outputs = out;
    psg_graph_t *g = session_graph(self);
    int rc;
    /* the session's lock: no step writes the variables while they are copied out */
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock);
    rc = psg_onnx_export(g, &spec, path);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS PyMem_Free(in);
    PyMem_Free(out);
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

/* trace_start(pid, process_name, device, step): the runs from now on record each node
 * they run (name, op type, thread, start, end) into a Chrome trace (psgraph/trace.h), the
 * timeline psgraph train --trace writes; step goes into the events' args */
static PyObject *session_trace_start(PyObject *o, PyObject *args) {
    session_t *self = (session_t *)o;
    int pid;
    const char *process, *device;
    long long step;
    if (!PyArg_ParseTuple(args, "issL", &pid, &process, &device, &step)) return NULL;
    if (self->trace) {
        PyErr_SetString(PyExc_RuntimeError, "this session records a trace already");
        return NULL;
    }
    psg_trace_t *t = psg_trace_new(pid, process, device);
    if (!t) return PyErr_NoMemory();
    psg_trace_set_step(t, step);
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock); /* between two runs */
    self->trace = t;
    psg_session_set_node_hook(self->s, psg_trace_node_hook, t);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* trace_stop(path) -> events: ends the recording and writes its trace to path (JSON) */
static PyObject *session_trace_stop(PyObject *o, PyObject *args) {
    session_t *self = (session_t *)o;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (!self->trace) {
        PyErr_SetString(PyExc_RuntimeError, "this session records no trace");
        return NULL;
    }
    int rc, n;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock); /* no run holds the hook */
    psg_session_set_node_hook(self->s, NULL, NULL);
    pthread_mutex_unlock(&self->lock);
    n = psg_trace_num_events(self->trace);
    rc = psg_trace_write(self->trace, path);
    psg_trace_destroy(&self->trace);
    Py_END_ALLOW_THREADS if (rc < 0) return psg_py_raise();
    return PyLong_FromLong(n);
}

static PyMethodDef session_methods[] = {
    {"make_callable", session_make_callable, METH_VARARGS,
     "make_callable(feeds, fetches, targets) -> Callable"},
    {"read_variable", session_read_variable, METH_VARARGS, "read_variable(name) -> array (a copy)"},
    {"assign_variable", session_assign_variable, METH_VARARGS,
     "assign_variable(name, dtype, value)"},
    {"variable_names", session_variable_names, METH_NOARGS, "the session's variables"},
    {"save", session_save, METH_VARARGS, "save(dir, step, keep) -> seconds"},
    {"restore", session_restore, METH_VARARGS, "restore(path, mapping) -> step"},
    {"export_onnx", session_export_onnx, METH_VARARGS,
     "export_onnx(path, [(name, endpoint)], [(name, endpoint)], doc, version): an ONNX file"},
    {"trace_start", session_trace_start, METH_VARARGS,
     "trace_start(pid, process_name, device, step): the next runs record a Chrome trace"},
    {"trace_stop", session_trace_stop, METH_VARARGS, "trace_stop(path) -> events: writes it"},
    {NULL, NULL, 0, NULL},
};

/* set_overlap(on): a distributed step returns once this worker's part is done
 * (psg_dist_callable_set_overlap); no effect on a local plan */
static PyObject *callable_set_overlap(PyObject *o, PyObject *arg) {
    callable_t *c = (callable_t *)o;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    if (c->dc) psg_dist_callable_set_overlap(c->dc, on);
    return PyBool_FromLong(c->dc && psg_dist_callable_overlaps(c->dc));
}

static PyMethodDef callable_methods[] = {
    {"run", callable_run, METH_O, "run([feed values]) -> [fetched arrays]"},
    {"set_overlap", callable_set_overlap, METH_O, "set_overlap(on) -> whether it overlaps"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject psg_py_session_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "psgraph._psgraph.Session",
    .tp_basicsize = sizeof(session_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A psgraph session (psg_session_t) over a Graph",
    .tp_new = session_new,
    .tp_dealloc = session_dealloc,
    .tp_methods = session_methods,
};

PyTypeObject psg_py_callable_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "psgraph._psgraph.Callable",
    .tp_basicsize = sizeof(callable_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A prepared plan of a Session for one signature of feeds, fetches and targets",
    .tp_dealloc = callable_dealloc,
    .tp_methods = callable_methods,
};
