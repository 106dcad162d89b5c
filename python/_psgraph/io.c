/* The module's functions over files and data: checkpoints read back (their tensors, the
 * newest one of a folder), TensorBoard event files (psgraph/summary.h), the metrics files
 * of a training job (psg_train_metrics_open), and the data sets
 * and batch iterators of psgraph/data.h (Fashion-MNIST's IDX files, shuffled by seed as
 * `psgraph train` reads them). Objects are capsules owned by the Python wrappers. */
#include "python/_psgraph/ext.h"

/* ---- checkpoints ---- */

static void checkpoint_free(PyObject *cap) {
    psg_checkpoint_t *ck = PyCapsule_GetPointer(cap, "psg_checkpoint");
    psg_checkpoint_destroy(&ck);
}

/* checkpoint_open(path) -> a verified checkpoint (a capsule) */
static PyObject *f_checkpoint_open(PyObject *self, PyObject *args) {
    (void)self;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    psg_checkpoint_t *ck;
    Py_BEGIN_ALLOW_THREADS ck = psg_checkpoint_open(path, -1);
    Py_END_ALLOW_THREADS if (!ck) return psg_py_raise();
    PyObject *cap = PyCapsule_New(ck, "psg_checkpoint", checkpoint_free);
    if (!cap) psg_checkpoint_destroy(&ck);
    return cap;
}

/* checkpoint_info(ck) -> (step, [(name, dtype, shape)]) */
static PyObject *f_checkpoint_info(PyObject *self, PyObject *cap) {
    (void)self;
    psg_checkpoint_t *ck = PyCapsule_GetPointer(cap, "psg_checkpoint");
    if (!ck) return NULL;
    int n = psg_checkpoint_num_tensors(ck);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        PyObject *item = Py_BuildValue("(siN)", e.name, (int)e.dtype, psg_py_shape(&e.shape));
        if (!item)
            Py_CLEAR(l);
        else
            PyList_SET_ITEM(l, i, item);
    }
    if (!l) return NULL;
    return Py_BuildValue("(LN)", (long long)psg_checkpoint_step(ck), l);
}

/* checkpoint_read(ck, name) -> an array (a copy) */
static PyObject *f_checkpoint_read(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    const char *name;
    if (!PyArg_ParseTuple(args, "O!s", &PyCapsule_Type, &cap, &name)) return NULL;
    psg_checkpoint_t *ck = PyCapsule_GetPointer(cap, "psg_checkpoint");
    if (!ck) return NULL;
    psg_tensor_t *t = psg_checkpoint_read(ck, name);
    if (!t) return psg_py_raise();
    return psg_py_array_from(&t);
}

/* latest_checkpoint(dir) -> the index path of the newest checkpoint that verifies, or None */
static PyObject *f_latest_checkpoint(PyObject *self, PyObject *args) {
    (void)self;
    const char *dir;
    if (!PyArg_ParseTuple(args, "s", &dir)) return NULL;
    psg_checkpoint_t *ck = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = psg_checkpoint_open_latest(dir, -1, NULL, NULL, &ck);
    Py_END_ALLOW_THREADS if (rc < 0) return psg_py_raise();
    if (rc == 0) Py_RETURN_NONE;
    PyObject *path = PyUnicode_FromString(psg_checkpoint_path(ck));
    psg_checkpoint_destroy(&ck);
    return path;
}

/* ---- TensorBoard ---- */

static void writer_free(PyObject *cap) {
    psg_summary_writer_t *w = PyCapsule_GetPointer(cap, "psg_summary_writer");
    psg_summary_writer_destroy(&w);
}

static psg_summary_writer_t *writer_arg(PyObject *cap) {
    if (!PyCapsule_IsValid(cap, "psg_summary_writer")) {
        PyErr_SetString(PyExc_ValueError, "the FileWriter is closed");
        return NULL;
    }
    return PyCapsule_GetPointer(cap, "psg_summary_writer");
}

static PyObject *f_summary_writer(PyObject *self, PyObject *args) {
    (void)self;
    const char *logdir;
    if (!PyArg_ParseTuple(args, "s", &logdir)) return NULL;
    psg_summary_writer_t *w = psg_summary_writer_new(logdir);
    if (!w) return psg_py_raise();
    PyObject *cap = PyCapsule_New(w, "psg_summary_writer", writer_free);
    if (!cap) psg_summary_writer_destroy(&w);
    return cap;
}

static PyObject *f_summary_path(PyObject *self, PyObject *cap) {
    (void)self;
    psg_summary_writer_t *w = writer_arg(cap);
    return w ? PyUnicode_FromString(psg_summary_writer_path(w)) : NULL;
}

/* summary_scalar(writer, step, tag, value) */
static PyObject *f_summary_scalar(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    long long step;
    const char *tag;
    double value;
    if (!PyArg_ParseTuple(args, "OLsd", &cap, &step, &tag, &value)) return NULL;
    psg_summary_writer_t *w = writer_arg(cap);
    if (!w) return NULL;
    if (psg_summary_scalar(w, step, tag, (float)value) < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

/* summary_histogram(writer, step, tag, values) */
static PyObject *f_summary_histogram(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *values;
    long long step;
    const char *tag;
    if (!PyArg_ParseTuple(args, "OLsO", &cap, &step, &tag, &values)) return NULL;
    psg_summary_writer_t *w = writer_arg(cap);
    if (!w) return NULL;
    psg_tensor_t *t = psg_py_tensor_from(values, PSG_DT_F32);
    if (!t) return NULL;
    int rc = psg_summary_histogram(w, step, tag, psg_tensor_f32(t), psg_tensor_numel(t));
    psg_tensor_destroy(&t);
    if (rc < 0) return psg_py_raise();
    Py_RETURN_NONE;
}

/* summary_close(writer): flushes and closes; later writes raise */
static PyObject *f_summary_close(PyObject *self, PyObject *cap) {
    (void)self;
    if (!PyCapsule_IsValid(cap, "psg_summary_writer")) Py_RETURN_NONE; /* closed already */
    psg_summary_writer_t *w = PyCapsule_GetPointer(cap, "psg_summary_writer");
    psg_summary_writer_destroy(&w);
    if (PyCapsule_SetPointer(cap, (void *)&psg_py_io_functions) < 0)
        return NULL; /* a non-NULL marker */
    if (PyCapsule_SetName(cap, "psg_summary_writer (closed)") < 0 ||
        PyCapsule_SetDestructor(cap, NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- metrics.jsonl (psg_train_metrics_open) ---- */

static void metrics_free(PyObject *cap) {
    FILE *f = PyCapsule_GetPointer(cap, "psg_metrics");
    if (f) fclose(f);
}

/* metrics_open(logdir, tag or None, task) -> the metrics file (a capsule; closed with it) */
static PyObject *f_metrics_open(PyObject *self, PyObject *args) {
    (void)self;
    const char *logdir, *tag, *task;
    if (!PyArg_ParseTuple(args, "szs", &logdir, &tag, &task)) return NULL;
    FILE *f = psg_train_metrics_open(logdir, tag, task);
    if (!f) return psg_py_raise();
    PyObject *cap = PyCapsule_New(f, "psg_metrics", metrics_free);
    if (!cap) fclose(f);
    return cap;
}

/* metrics_write(file, line): one JSON record, written whole */
static PyObject *f_metrics_write(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    const char *line;
    if (!PyArg_ParseTuple(args, "Os", &cap, &line)) return NULL;
    FILE *f = PyCapsule_GetPointer(cap, "psg_metrics");
    if (!f) return NULL;
    if (fprintf(f, "%s\n", line) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* ---- data ---- */

static void dataset_free(PyObject *cap) {
    psg_dataset_t *d = PyCapsule_GetPointer(cap, "psg_dataset");
    psg_dataset_destroy(&d);
}

static void iter_free(PyObject *cap) {
    psg_batch_iter_t *it = PyCapsule_GetPointer(cap, "psg_batch_iter");
    /* the iterator holds a reference to its dataset capsule (the context) */
    PyObject *ds = PyCapsule_GetContext(cap);
    Py_BEGIN_ALLOW_THREADS psg_batch_iter_destroy(&it);
    Py_END_ALLOW_THREADS Py_XDECREF(ds);
}

/* fashion_mnist(dir or None, train) -> a dataset (capsule) */
static PyObject *f_fashion_mnist(PyObject *self, PyObject *args) {
    (void)self;
    const char *dir = NULL;
    int train;
    if (!PyArg_ParseTuple(args, "zp", &dir, &train)) return NULL;
    psg_dataset_t *d;
    Py_BEGIN_ALLOW_THREADS d = psg_dataset_fashion_mnist(dir, train);
    Py_END_ALLOW_THREADS if (!d) return psg_py_raise();
    PyObject *cap = PyCapsule_New(d, "psg_dataset", dataset_free);
    if (!cap) psg_dataset_destroy(&d);
    return cap;
}

static psg_dataset_t *dataset_arg(PyObject *cap) {
    return PyCapsule_GetPointer(cap, "psg_dataset");
}

/* dataset_info(ds) -> (size, example shape, classes) */
static PyObject *f_dataset_info(PyObject *self, PyObject *cap) {
    (void)self;
    psg_dataset_t *d = dataset_arg(cap);
    if (!d) return NULL;
    psg_shape_t s = psg_dataset_example_shape(d);
    return Py_BuildValue("(LNi)", (long long)psg_dataset_size(d), psg_py_shape(&s),
                         psg_dataset_num_classes(d));
}

static PyObject *pair(psg_tensor_t **images, psg_tensor_t **labels) {
    PyObject *x = psg_py_array_from(images), *y = x ? psg_py_array_from(labels) : NULL;
    psg_tensor_destroy(labels);
    if (!y) {
        Py_XDECREF(x);
        return NULL;
    }
    return Py_BuildValue("(NN)", x, y);
}

/* dataset_slice(ds, start, count) -> (images f32, labels i32) in order */
static PyObject *f_dataset_slice(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    long long start, count;
    if (!PyArg_ParseTuple(args, "O!LL", &PyCapsule_Type, &cap, &start, &count)) return NULL;
    psg_dataset_t *d = dataset_arg(cap);
    if (!d) return NULL;
    psg_tensor_t *images = NULL, *labels = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = psg_dataset_slice(d, start, count, &images, &labels);
    Py_END_ALLOW_THREADS if (rc < 0) return psg_py_raise();
    return pair(&images, &labels);
}

/* batch_iter(ds, batch, shuffle, seed, drop_remainder, num_epochs, prefetch, start_batch) */
static PyObject *f_batch_iter(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    psg_batch_iter_options_t o = {0};
    int shuffle, drop;
    unsigned long long seed;
    long long epochs, start;
    if (!PyArg_ParseTuple(args, "O!ipKpLiL", &PyCapsule_Type, &cap, &o.batch_size, &shuffle, &seed,
                          &drop, &epochs, &o.prefetch, &start))
        return NULL;
    psg_dataset_t *d = dataset_arg(cap);
    if (!d) return NULL;
    o.shuffle = shuffle;
    o.seed = seed;
    o.drop_remainder = drop;
    o.num_epochs = epochs;
    o.start_batch = start;
    psg_batch_iter_t *it = psg_batch_iter_new(d, &o);
    if (!it) return psg_py_raise();
    PyObject *icap = PyCapsule_New(it, "psg_batch_iter", iter_free);
    if (!icap) {
        psg_batch_iter_destroy(&it);
        return NULL;
    }
    if (PyCapsule_SetContext(icap, Py_NewRef(cap)) < 0) { /* cannot fail on a valid capsule */
        Py_DECREF(cap);
        Py_DECREF(icap);
        return NULL;
    }
    return icap;
}

/* batch_next(it) -> (images, labels), or None at the end */
static PyObject *f_batch_next(PyObject *self, PyObject *cap) {
    (void)self;
    psg_batch_iter_t *it = PyCapsule_GetPointer(cap, "psg_batch_iter");
    if (!it) return NULL;
    psg_tensor_t *images = NULL, *labels = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = psg_batch_iter_next(it, &images, &labels);
    Py_END_ALLOW_THREADS if (rc < 0) return psg_py_raise();
    if (rc == 0) Py_RETURN_NONE;
    return pair(&images, &labels);
}

/* batch_info(it) -> (batches per epoch, epoch of the last batch) */
static PyObject *f_batch_info(PyObject *self, PyObject *cap) {
    (void)self;
    psg_batch_iter_t *it = PyCapsule_GetPointer(cap, "psg_batch_iter");
    if (!it) return NULL;
    return Py_BuildValue("(LL)", (long long)psg_batch_iter_batches_per_epoch(it),
                         (long long)psg_batch_iter_epoch(it));
}

PyMethodDef psg_py_io_functions[] = {
    {"checkpoint_open", f_checkpoint_open, METH_VARARGS, "checkpoint_open(path) -> checkpoint"},
    {"checkpoint_info", f_checkpoint_info, METH_O,
     "checkpoint_info(ck) -> (step, [(name, dtype, shape)])"},
    {"checkpoint_read", f_checkpoint_read, METH_VARARGS, "checkpoint_read(ck, name) -> array"},
    {"latest_checkpoint", f_latest_checkpoint, METH_VARARGS,
     "latest_checkpoint(dir) -> index path or None"},
    {"summary_writer", f_summary_writer, METH_VARARGS, "summary_writer(logdir) -> writer"},
    {"summary_path", f_summary_path, METH_O, "summary_path(writer) -> the event file"},
    {"summary_scalar", f_summary_scalar, METH_VARARGS, "summary_scalar(writer, step, tag, value)"},
    {"summary_histogram", f_summary_histogram, METH_VARARGS,
     "summary_histogram(writer, step, tag, values)"},
    {"summary_close", f_summary_close, METH_O, "summary_close(writer)"},
    {"metrics_open", f_metrics_open, METH_VARARGS,
     "metrics_open(logdir, tag, task) -> metrics.jsonl (or metrics.TAG.jsonl)"},
    {"metrics_write", f_metrics_write, METH_VARARGS, "metrics_write(file, line)"},
    {"fashion_mnist", f_fashion_mnist, METH_VARARGS, "fashion_mnist(dir, train) -> dataset"},
    {"dataset_info", f_dataset_info, METH_O, "dataset_info(ds) -> (size, example shape, classes)"},
    {"dataset_slice", f_dataset_slice, METH_VARARGS,
     "dataset_slice(ds, start, count) -> (images, labels)"},
    {"batch_iter", f_batch_iter, METH_VARARGS,
     "batch_iter(ds, batch, shuffle, seed, drop_remainder, num_epochs, prefetch, start_batch)"},
    {"batch_next", f_batch_next, METH_O, "batch_next(it) -> (images, labels) or None"},
    {"batch_info", f_batch_info, METH_O, "batch_info(it) -> (batches per epoch, epoch)"},
    {NULL, NULL, 0, NULL},
};

int psg_py_io_ready(PyObject *module) {
    return PyModule_AddIntConstant(module, "MAX_RANK", PSG_MAX_RANK);
}
