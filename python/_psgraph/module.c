/* psgraph._psgraph: the module, its types, and the one error path from C to Python
 * (XGBoost's _check_call: a failed call's code picks the exception class, registered by
 * psgraph.errors, and psg_error_message() is its message). Not the graph API itself
 * (graph.c, build*.c), not sessions (session.c). */
#define PSG_PY_IMPORT_ARRAY
#include "python/_psgraph/ext.h"
#include "psgraph/device.h"

#include <pthread.h>

/* psgraph.errors' classes by psg_err_code_t; NULL until registered (then RuntimeError) */
static PyObject *error_classes[PSG_ERR_CODE_COUNT];

PyObject *psg_py_raise(void) {
    psg_err_code_t code = psg_error_code();
    PyObject *cls = code >= 0 && code < PSG_ERR_CODE_COUNT ? error_classes[code] : NULL;
    const char *msg = psg_error_message();
    PyErr_SetString(cls ? cls : PyExc_RuntimeError, msg[0] ? msg : "psgraph: unknown error");
    return NULL;
}

PyObject *psg_py_raise_build(psg_graph_t *g) {
    const char *msg = psg_error_message();
    PyErr_SetString(PyExc_ValueError, msg[0] ? msg : "psgraph: the node could not be built");
    if (g) psg_graph_clear_error(g);
    return NULL;
}

/* register_errors({code: class}) */
static PyObject *register_errors(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyDict_Check(arg)) return PyErr_Format(PyExc_TypeError, "register_errors takes a dict");
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(arg, &pos, &key, &value)) {
        long code = PyLong_AsLong(key);
        if (code < 0 || code >= PSG_ERR_CODE_COUNT)
            return PyErr_Format(PyExc_ValueError, "no psgraph error code %ld", code);
        Py_XSETREF(error_classes[code], Py_NewRef(value));
    }
    Py_RETURN_NONE;
}

static PyObject *error_code_names(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    PyObject *d = PyDict_New();
    for (int c = 0; d && c < PSG_ERR_CODE_COUNT; c++) {
        PyObject *k = PyLong_FromLong(c), *v = PyUnicode_FromString(psg_error_code_name(c));
        if (!k || !v || PyDict_SetItem(d, k, v) < 0) Py_CLEAR(d);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return d;
}

/* ---- numpy arrays released off the GIL ---- */

static pthread_mutex_t releases_lock = PTHREAD_MUTEX_INITIALIZER;
static PyObject **releases;
static size_t num_releases, cap_releases;

void psg_py_release_array(void *data, void *hint) {
    (void)data;
    PyObject *array = hint;
    if (PyGILState_Check()) {
        Py_DECREF(array);
        return;
    }
    /* a kernel thread dropped the last reference while the step ran without the GIL:
     * taking the GIL here could wait on the step itself, so the decref waits instead */
    pthread_mutex_lock(&releases_lock);
    if (num_releases == cap_releases) {
        size_t cap = cap_releases ? cap_releases * 2 : 16;
        PyObject **grown = realloc(releases, cap * sizeof *grown);
        PSG_ASSERT(grown); /* out of memory in a free function: nothing better to do */
        releases = grown;
        cap_releases = cap;
    }
    releases[num_releases++] = array;
    pthread_mutex_unlock(&releases_lock);
}

void psg_py_drain_releases(void) {
    if (!num_releases) return; /* a racy peek: a release missed now goes at the next drain */
    pthread_mutex_lock(&releases_lock);
    size_t n = num_releases;
    PyObject **batch = n ? malloc(n * sizeof *batch) : NULL;
    if (batch) {
        memcpy(batch, releases, n * sizeof *batch);
        num_releases = 0;
    }
    pthread_mutex_unlock(&releases_lock);
    for (size_t i = 0; batch && i < n; i++) Py_DECREF(batch[i]);
    free(batch);
}

static PyObject *dtype_info(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    /* {name: (code, size, numpy type or -1)} for the Python dtypes module */
    PyObject *d = PyDict_New();
    for (int dt = 1; d && dt < PSG_DT_COUNT; dt++) {
        PyObject *v =
            Py_BuildValue("(inl)", dt, (Py_ssize_t)psg_dtype_size(dt), (long)psg_py_npy_type(dt));
        if (!v || PyDict_SetItemString(d, psg_dtype_name(dt), v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *gpu_count(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyLong_FromLong(psg_gpu_count());
}

static PyObject *gpu_status(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(psg_gpu_status());
}

static PyMethodDef module_functions[] = {
    {"gpu_count", gpu_count, METH_NOARGS,
     "the GPUs this process can use (0 without the CUDA backend)"},
    {"gpu_status", gpu_status, METH_NOARGS, "one line: the GPUs found, or why there are none"},
    {"register_errors", register_errors, METH_O,
     "register_errors({code: class}): the exception class of each C error code"},
    {"error_code_names", error_code_names, METH_NOARGS, "{code: name} of psgraph's error codes"},
    {"dtype_info", dtype_info, METH_NOARGS, "{name: (code, bytes, numpy type)} of the dtypes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "psgraph._psgraph",
    .m_doc = "psgraph's C library, bound for the Python package (psgraph.compat.v1)",
    .m_size = -1,
    .m_methods = module_functions,
};

/* Adds a NULL-terminated method table to the module as functions. */
static int add_functions(PyObject *m, PyMethodDef *defs) {
    for (PyMethodDef *d = defs; d->ml_name; d++) {
        PyObject *f = PyCFunction_NewEx(d, NULL, PyModule_GetNameObject(m));
        if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC PyInit__psgraph(void) {
    import_array();
    if (psg_fp_mode_from_env() < 0) { /* the kernels' denormals: a bad value is an error */
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    PyTypeObject *types[] = {&psg_py_graph_type,        &psg_py_session_type,
                             &psg_py_callable_type,     &psg_py_task_server_type,
                             &psg_py_dist_session_type, &psg_py_replica_setter_type,
                             &psg_py_sync_worker_type};
    const char *names[] = {"Graph",       "Session",       "Callable",  "TaskServer",
                           "DistSession", "ReplicaSetter", "SyncWorker"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int ready = i == 0 ? psg_py_graph_ready() : PyType_Ready(types[i]);
        if (ready < 0 || PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (add_functions(m, psg_py_io_functions) < 0 || add_functions(m, psg_py_sync_functions) < 0 ||
        psg_py_io_ready(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
