/* The shared parts of psgraph's Python extension (_psgraph): the Graph and Session
 * objects, the conversions between Python values and the C API's (endpoints, shapes,
 * dtypes, numpy arrays and tensors), and the error path. The extension binds only the
 * public C API (include/psgraph/); it keeps no numerics of its own. */
#ifndef PSGRAPH_PYTHON_EXT_H
#define PSGRAPH_PYTHON_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define PY_ARRAY_UNIQUE_SYMBOL psg_py_ARRAY_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#ifndef PSG_PY_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "psgraph/psgraph.h"

#include <pthread.h>

/* ---- errors (module.c) ---- */

/* Raises the exception class registered for this thread's C error code (psgraph.errors:
 * one class per psg_err_code_t) with psg_error_message(), and returns NULL. */
PyObject *psg_py_raise(void);
/* A failed graph build: ValueError with the message (where TensorFlow raises it), after
 * clearing g's sticky error so the graph stays usable. Returns NULL. */
PyObject *psg_py_raise_build(psg_graph_t *g);
/* The Python-side decrefs that C threads asked for (a numpy array behind a buffer freed
 * off the GIL): run with the GIL held. */
void psg_py_drain_releases(void);
/* A buffer's free function: drops the reference to the numpy array (hint) now when this
 * thread holds the GIL, else on the next drain. */
void psg_py_release_array(void *data, void *hint);

/* ---- the Graph object (graph.c) ---- */

typedef struct {
    PyObject_HEAD psg_graph_t *g;
} psg_py_graph_t;

extern PyTypeObject psg_py_graph_type;
/* Joins the builders' method tables into the type's and readies it: -1 on failure. */
int psg_py_graph_ready(void);
/* The psg_graph_t of a Graph object, or NULL with TypeError. */
psg_graph_t *psg_py_graph(PyObject *o);

/* ---- conversions (convert.c) ---- */

/* (node, index) <-> psg_endpoint_t; None is PSG_NO_ENDPOINT where allowed. */
PyObject *psg_py_endpoint(psg_endpoint_t e);
int psg_py_parse_endpoint(PyObject *o, psg_endpoint_t *e);
/* A converter for PyArg_ParseTuple's "O&". */
int psg_py_endpoint_conv(PyObject *o, void *e);
/* "O&" of a node name: a str, or None for the op's own name (NULL). */
int psg_py_name_conv(PyObject *o, void *out);
/* e as (node, index), or ValueError with g's build error when e is invalid. */
PyObject *psg_py_ep_or_raise(psg_graph_t *g, psg_endpoint_t e);
/* A sequence of endpoints: *out (PyMem_Free it) of *n. */
int psg_py_parse_endpoints(PyObject *seq, psg_endpoint_t **out, int *n);
/* A sequence of ints: *out (PyMem_Free it) of *n. */
int psg_py_parse_ints(PyObject *seq, int **out, int *n);
int psg_py_parse_int64s(PyObject *seq, int64_t *out, int max, int *n);
/* Shapes: None (unknown rank) or a sequence of int / None (unknown dim). */
int psg_py_parse_shape(PyObject *o, psg_shape_t *s);
int psg_py_shape_conv(PyObject *o, void *s);
PyObject *psg_py_shape(const psg_shape_t *s);
/* The numpy type of a psgraph dtype (-1: none: bf16, resource). */
int psg_py_npy_type(psg_dtype_t dt);
/* A tensor from any array-like value: no copy when it already is an ndarray of dtype
 * `dt`, C-contiguous and aligned (the tensor's buffer then holds a reference to it). */
psg_tensor_t *psg_py_tensor_from(PyObject *value, psg_dtype_t dt);
/* An ndarray of t, taking over the caller's reference: no copy when the caller held the
 * only reference to t and its buffer (the array keeps t alive); a copy when psgraph
 * shares it (a variable's value) or the dtype has no numpy type (bf16: f32). A scalar
 * becomes a numpy scalar. */
PyObject *psg_py_array_from(psg_tensor_t **t);

/* ---- builders (build.c, build_nn.c), sessions (session.c), training (train.c),
 * data and files (io.c): method tables of the Graph and functions of the module ---- */

extern PyMethodDef psg_py_build_methods[];
extern PyMethodDef psg_py_build_nn_methods[];
extern PyMethodDef psg_py_train_methods[];
extern PyMethodDef psg_py_sync_methods[];
extern PyMethodDef psg_py_sync_functions[];
extern PyTypeObject psg_py_sync_worker_type;
extern PyMethodDef psg_py_io_functions[];
extern PyTypeObject psg_py_session_type;
extern PyTypeObject psg_py_callable_type;
int psg_py_io_ready(PyObject *module);

/* make_callable(feeds, fetches, targets[, feed shapes]) of a Session (s) or a DistSession
 * (ds): a Callable keeping owner alive, its runs serialized by lock (session.c). */
PyObject *psg_py_callable_make(PyObject *owner, psg_graph_t *g, pthread_mutex_t *lock,
                               psg_session_t *s, psg_dist_session_t *ds, PyObject *args);

/* Runs Callable o on tensors (the GIL held; released for the run): in[n_in] its feeds,
 * out[n_out] its fetches (new). Returns 0, or -1 with the psgraph error set. */
int psg_py_callable_run_tensors(PyObject *o, int n_in, psg_tensor_t *const *in, int n_out,
                                psg_tensor_t **out);

/* ---- a cluster (dist.c): TaskServer, DistSession, ReplicaSetter ---- */

extern PyTypeObject psg_py_task_server_type;
extern PyTypeObject psg_py_dist_session_type;
extern PyTypeObject psg_py_replica_setter_type;
/* The task server of a TaskServer object, or NULL with TypeError. */
psg_task_server_t *psg_py_task_server(PyObject *o);
/* The setter of a ReplicaSetter object, or NULL with TypeError. */
psg_replica_setter_t *psg_py_replica_setter(PyObject *o);

#endif
