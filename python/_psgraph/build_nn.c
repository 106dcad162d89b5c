/* The Graph's builders of the nn and sparse ops: Conv2D, pooling, FusedBatchNorm and
 * embedding lookups, through include/psgraph/ops_nn.h and ops_sparse.h. Not the array
 * and math ops (build.c). */
#include "python/_psgraph/ext.h"

#define GRAPH(self) (((psg_py_graph_t *)(self))->g)

static int padding_conv(PyObject *o, void *out) {
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return 0;
    if (!strcmp(s, "SAME") || !strcmp(s, "same"))
        *(psg_padding_t *)out = PSG_PADDING_SAME;
    else if (!strcmp(s, "VALID") || !strcmp(s, "valid"))
        *(psg_padding_t *)out = PSG_PADDING_VALID;
    else {
        PyErr_Format(PyExc_ValueError, "padding must be 'SAME' or 'VALID', not '%s'", s);
        return 0;
    }
    return 1;
}

/* conv2d(name, x, filter, stride_h, stride_w, padding) */
static PyObject *b_conv2d(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x, f;
    int sh, sw;
    psg_padding_t pad;
    if (!PyArg_ParseTuple(args, "O&O&O&iiO&", psg_py_name_conv, &name, psg_py_endpoint_conv, &x,
                          psg_py_endpoint_conv, &f, &sh, &sw, padding_conv, &pad))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_conv2d(GRAPH(self), name, x, f, sh, sw, pad));
}

/* pool(kind, name, x, kh, kw, stride_h, stride_w, padding): kind "max" or "avg" */
static PyObject *b_pool(PyObject *self, PyObject *args) {
    const char *kind, *name;
    psg_endpoint_t x;
    int kh, kw, sh, sw;
    psg_padding_t pad;
    if (!PyArg_ParseTuple(args, "sO&O&iiiiO&", &kind, psg_py_name_conv, &name, psg_py_endpoint_conv,
                          &x, &kh, &kw, &sh, &sw, padding_conv, &pad))
        return NULL;
    psg_graph_t *g = GRAPH(self);
    if (!strcmp(kind, "max"))
        return psg_py_ep_or_raise(g, psg_max_pool(g, name, x, kh, kw, sh, sw, pad));
    if (!strcmp(kind, "avg"))
        return psg_py_ep_or_raise(g, psg_avg_pool(g, name, x, kh, kw, sh, sw, pad));
    return PyErr_Format(PyExc_ValueError, "no pooling '%s'", kind);
}

/* fused_batch_norm(name, x, scale, offset, mean, variance, epsilon, training)
 * -> (y, batch_mean, batch_var): mean and variance None when training */
static PyObject *b_fused_batch_norm(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x, scale, offset, mean, var;
    double eps;
    int training;
    if (!PyArg_ParseTuple(args, "O&O&O&O&O&O&dp", psg_py_name_conv, &name, psg_py_endpoint_conv, &x,
                          psg_py_endpoint_conv, &scale, psg_py_endpoint_conv, &offset,
                          psg_py_endpoint_conv, &mean, psg_py_endpoint_conv, &var, &eps, &training))
        return NULL;
    psg_batch_norm_t bn =
        psg_fused_batch_norm(GRAPH(self), name, x, scale, offset, mean, var, (float)eps, training);
    if (!psg_endpoint_valid(bn.y)) return psg_py_raise_build(GRAPH(self));
    return Py_BuildValue("(NNN)", psg_py_endpoint(bn.y), psg_py_endpoint(bn.batch_mean),
                         psg_py_endpoint(bn.batch_var));
}

/* embedding_lookup(name, [shard handles], rows, strategy, ids, unique) */
static PyObject *b_embedding_lookup(PyObject *self, PyObject *args) {
    const char *name, *strategy;
    PyObject *seq;
    long long rows;
    psg_endpoint_t ids;
    int unique = 0;
    if (!PyArg_ParseTuple(args, "O&OLsO&|p", psg_py_name_conv, &name, &seq, &rows, &strategy,
                          psg_py_endpoint_conv, &ids, &unique))
        return NULL;
    psg_endpoint_t *shards;
    int n;
    if (psg_py_parse_endpoints(seq, &shards, &n) < 0) return NULL;
    psg_embedding_table_t t = {.num_shards = n, .shards = shards, .rows = rows, .unique = unique};
    if (psg_partition_strategy_parse(strategy, &t.strategy) < 0) {
        PyMem_Free(shards);
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    psg_endpoint_t y = psg_embedding_lookup(GRAPH(self), name, &t, ids);
    PyMem_Free(shards);
    return psg_py_ep_or_raise(GRAPH(self), y);
}

PyMethodDef psg_py_build_nn_methods[] = {
    {"conv2d", b_conv2d, METH_VARARGS, "conv2d(name, x, filter, stride_h, stride_w, padding)"},
    {"pool", b_pool, METH_VARARGS, "pool(kind, name, x, kh, kw, stride_h, stride_w, padding)"},
    {"fused_batch_norm", b_fused_batch_norm, METH_VARARGS,
     "fused_batch_norm(name, x, scale, offset, mean, variance, epsilon, training) -> (y, mean, "
     "var)"},
    {"embedding_lookup", b_embedding_lookup, METH_VARARGS,
     "embedding_lookup(name, shards, rows, strategy, ids, unique)"},
    {NULL, NULL, 0, NULL},
};
