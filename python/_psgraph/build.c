/* The Graph's builders of the array, math and comparison ops: each parses its Python
 * arguments, calls the C builder of include/psgraph/ops_*.h (so shapes are inferred and
 * a mistake is named by the same code as in C) and returns the new endpoint or node id;
 * a failed build raises ValueError with psgraph's message. Not the nn ops (build_nn.c)
 * nor gradients and optimizers (train.c). */
#include "python/_psgraph/ext.h"

#define GRAPH(self) (((psg_py_graph_t *)(self))->g)

static PyObject *id_or_raise(psg_graph_t *g, int id) {
    if (id < 0) return psg_py_raise_build(g);
    return PyLong_FromLong(id);
}

typedef psg_endpoint_t (*unary_fn)(psg_graph_t *, const char *, psg_endpoint_t);
typedef psg_endpoint_t (*binary_fn)(psg_graph_t *, const char *, psg_endpoint_t, psg_endpoint_t);

static const struct {
    const char *name;
    unary_fn fn;
} unary_ops[] = {
    {"neg", psg_neg},
    {"square", psg_square},
    {"sqrt", psg_sqrt},
    {"exp", psg_exp},
    {"log", psg_log},
    {"relu", psg_relu},
    {"sigmoid", psg_sigmoid},
    {"tanh", psg_tanh},
    {"softmax", psg_softmax},
    {"log_softmax", psg_log_softmax},
    {"identity", psg_identity},
    {"stop_gradient", psg_stop_gradient},
    {"l2_loss", psg_l2_loss},
    {"argmax", psg_argmax},
    {"ones_like", psg_ones_like},
    {"zeros_like", psg_zeros_like},
    {"shape", psg_shape_of},
};

static const struct {
    const char *name;
    binary_fn fn;
} binary_ops[] = {
    {"add", psg_add},
    {"sub", psg_sub},
    {"mul", psg_mul},
    {"div", psg_div},
    {"maximum", psg_maximum},
    {"minimum", psg_minimum},
    {"equal", psg_equal},
    {"sum_to_shape_of", psg_sum_to_shape_of},
    {"broadcast_like", psg_broadcast_like},
    {"reshape_like", psg_reshape_like},
    {"gather", psg_gather},
    {"bias_add", psg_bias_add},
};

/* unary(op, name, x) */
static PyObject *b_unary(PyObject *self, PyObject *args) {
    const char *op, *name;
    psg_endpoint_t x;
    if (!PyArg_ParseTuple(args, "sO&O&", &op, psg_py_name_conv, &name, psg_py_endpoint_conv, &x))
        return NULL;
    for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++)
        if (!strcmp(op, unary_ops[i].name))
            return psg_py_ep_or_raise(GRAPH(self), unary_ops[i].fn(GRAPH(self), name, x));
    return PyErr_Format(PyExc_ValueError, "no unary builder '%s'", op);
}

/* binary(op, name, a, b) */
static PyObject *b_binary(PyObject *self, PyObject *args) {
    const char *op, *name;
    psg_endpoint_t a, b;
    if (!PyArg_ParseTuple(args, "sO&O&O&", &op, psg_py_name_conv, &name, psg_py_endpoint_conv, &a,
                          psg_py_endpoint_conv, &b))
        return NULL;
    for (size_t i = 0; i < sizeof binary_ops / sizeof binary_ops[0]; i++)
        if (!strcmp(op, binary_ops[i].name))
            return psg_py_ep_or_raise(GRAPH(self), binary_ops[i].fn(GRAPH(self), name, a, b));
    return PyErr_Format(PyExc_ValueError, "no binary builder '%s'", op);
}

/* compare(op, name, a, b): op "Greater", "GreaterEqual", "Less", "LessEqual", "NotEqual" */
static PyObject *b_compare(PyObject *self, PyObject *args) {
    const char *op, *name;
    psg_endpoint_t a, b;
    if (!PyArg_ParseTuple(args, "sO&O&O&", &op, psg_py_name_conv, &name, psg_py_endpoint_conv, &a,
                          psg_py_endpoint_conv, &b))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_compare(GRAPH(self), name, op, a, b));
}

static PyObject *b_matmul(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t a, b;
    int ta = 0, tb = 0;
    if (!PyArg_ParseTuple(args, "O&O&O&|pp", psg_py_name_conv, &name, psg_py_endpoint_conv, &a,
                          psg_py_endpoint_conv, &b, &ta, &tb))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_matmul(GRAPH(self), name, a, b, ta, tb));
}

/* dense(name, x, w, bias, relu): the fused layer */
static PyObject *b_dense(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x, w, bias;
    int relu = 0;
    if (!PyArg_ParseTuple(args, "O&O&O&O&p", psg_py_name_conv, &name, psg_py_endpoint_conv, &x,
                          psg_py_endpoint_conv, &w, psg_py_endpoint_conv, &bias, &relu))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_dense(GRAPH(self), name, x, w, bias, relu));
}

/* pow(name, x, exponent) / scale(name, x, factor) */
static PyObject *b_pow(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x;
    double v;
    if (!PyArg_ParseTuple(args, "O&O&d", psg_py_name_conv, &name, psg_py_endpoint_conv, &x, &v))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_pow(GRAPH(self), name, x, v));
}

static PyObject *b_scale(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x;
    double v;
    if (!PyArg_ParseTuple(args, "O&O&d", psg_py_name_conv, &name, psg_py_endpoint_conv, &x, &v))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_scale(GRAPH(self), name, x, v));
}

/* reduce(kind, name, x, axes or None, keep_dims): kind "sum", "mean", "max" */
static PyObject *b_reduce(PyObject *self, PyObject *args) {
    const char *kind, *name;
    psg_endpoint_t x;
    PyObject *axes_o;
    int keep = 0, n = 0;
    if (!PyArg_ParseTuple(args, "sO&O&O|p", &kind, psg_py_name_conv, &name, psg_py_endpoint_conv,
                          &x, &axes_o, &keep))
        return NULL;
    int64_t axes[PSG_MAX_RANK];
    if (axes_o != Py_None && psg_py_parse_int64s(axes_o, axes, PSG_MAX_RANK, &n) < 0) return NULL;
    if (axes_o != Py_None && n == 0) /* no axis reduced: TensorFlow's identity */
        return psg_py_ep_or_raise(GRAPH(self), psg_identity(GRAPH(self), name, x));
    psg_graph_t *g = GRAPH(self);
    if (!strcmp(kind, "sum")) return psg_py_ep_or_raise(g, psg_sum(g, name, x, n, axes, keep));
    if (!strcmp(kind, "mean")) return psg_py_ep_or_raise(g, psg_mean(g, name, x, n, axes, keep));
    if (!strcmp(kind, "max"))
        return psg_py_ep_or_raise(g, psg_reduce_max(g, name, x, n, axes, keep));
    return PyErr_Format(PyExc_ValueError, "no reduction '%s'", kind);
}

static PyObject *b_expand_dims(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x;
    PyObject *axes_o;
    int n = 0;
    if (!PyArg_ParseTuple(args, "O&O&O", psg_py_name_conv, &name, psg_py_endpoint_conv, &x,
                          &axes_o))
        return NULL;
    int64_t axes[PSG_MAX_RANK];
    if (psg_py_parse_int64s(axes_o, axes, PSG_MAX_RANK, &n) < 0) return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_expand_dims(GRAPH(self), name, x, n, axes));
}

typedef psg_endpoint_t (*shaped_fn)(psg_graph_t *, const char *, psg_endpoint_t,
                                    const psg_shape_t *);

/* A builder of (name, x, shape): reshape, placeholder_with_default. */
static PyObject *build_shaped(PyObject *self, PyObject *args, shaped_fn fn) {
    const char *name;
    psg_endpoint_t x;
    psg_shape_t s;
    if (!PyArg_ParseTuple(args, "O&O&O&", psg_py_name_conv, &name, psg_py_endpoint_conv, &x,
                          psg_py_shape_conv, &s))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), fn(GRAPH(self), name, x, &s));
}

static PyObject *b_reshape(PyObject *self, PyObject *args) {
    return build_shaped(self, args, psg_reshape);
}

static PyObject *b_placeholder_with_default(PyObject *self, PyObject *args) {
    return build_shaped(self, args, psg_placeholder_with_default);
}

/* concat(name, [xs], axis) / add_n(name, [xs]) */
static PyObject *b_concat(PyObject *self, PyObject *args) {
    const char *name;
    PyObject *seq;
    int axis;
    if (!PyArg_ParseTuple(args, "O&Oi", psg_py_name_conv, &name, &seq, &axis)) return NULL;
    psg_endpoint_t *xs;
    int n;
    if (psg_py_parse_endpoints(seq, &xs, &n) < 0) return NULL;
    psg_endpoint_t y = psg_concat(GRAPH(self), name, n, xs, axis);
    PyMem_Free(xs);
    return psg_py_ep_or_raise(GRAPH(self), y);
}

static PyObject *b_add_n(PyObject *self, PyObject *args) {
    const char *name;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O&O", psg_py_name_conv, &name, &seq)) return NULL;
    psg_endpoint_t *xs;
    int n;
    if (psg_py_parse_endpoints(seq, &xs, &n) < 0) return NULL;
    psg_endpoint_t y = psg_add_n(GRAPH(self), name, n, xs);
    PyMem_Free(xs);
    return psg_py_ep_or_raise(GRAPH(self), y);
}

/* slice(name, x, begin, size) */
static PyObject *b_slice(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x;
    PyObject *bo, *so;
    int nb = 0, ns = 0;
    if (!PyArg_ParseTuple(args, "O&O&OO", psg_py_name_conv, &name, psg_py_endpoint_conv, &x, &bo,
                          &so))
        return NULL;
    int64_t begin[PSG_MAX_RANK], size[PSG_MAX_RANK];
    if (psg_py_parse_int64s(bo, begin, PSG_MAX_RANK, &nb) < 0 ||
        psg_py_parse_int64s(so, size, PSG_MAX_RANK, &ns) < 0)
        return NULL;
    if (nb != ns) return PyErr_Format(PyExc_ValueError, "begin has %d entries, size %d", nb, ns);
    return psg_py_ep_or_raise(GRAPH(self), psg_slice(GRAPH(self), name, x, nb, begin, size));
}

static PyObject *b_dropout(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x;
    double rate;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "O&O&dK", psg_py_name_conv, &name, psg_py_endpoint_conv, &x, &rate,
                          &seed))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_dropout(GRAPH(self), name, x, rate, seed));
}

static PyObject *b_cast(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x;
    int dt;
    if (!PyArg_ParseTuple(args, "O&O&i", psg_py_name_conv, &name, psg_py_endpoint_conv, &x, &dt))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_cast(GRAPH(self), name, x, (psg_dtype_t)dt));
}

static PyObject *b_one_hot(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x;
    long long depth;
    double on, off;
    if (!PyArg_ParseTuple(args, "O&O&Ldd", psg_py_name_conv, &name, psg_py_endpoint_conv, &x,
                          &depth, &on, &off))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_one_hot(GRAPH(self), name, x, depth, on, off));
}

static PyObject *b_fill_like(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t x;
    double v;
    if (!PyArg_ParseTuple(args, "O&O&d", psg_py_name_conv, &name, psg_py_endpoint_conv, &x, &v))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_fill_like(GRAPH(self), name, x, (float)v));
}

/* const(name, value, dtype): a copy of the value (an array, a list, a number) */
static PyObject *b_const(PyObject *self, PyObject *args) {
    const char *name;
    PyObject *value;
    int dt;
    if (!PyArg_ParseTuple(args, "O&Oi", psg_py_name_conv, &name, &value, &dt)) return NULL;
    psg_tensor_t *view = psg_py_tensor_from(value, (psg_dtype_t)dt);
    if (!view) return NULL;
    psg_tensor_t *t = psg_tensor_copy(view); /* the graph keeps its own copy, as TensorFlow */
    psg_tensor_destroy(&view);
    if (!t) return psg_py_raise();
    return psg_py_ep_or_raise(GRAPH(self), psg_const(GRAPH(self), name, &t));
}

static PyObject *b_placeholder(PyObject *self, PyObject *args) {
    const char *name;
    int dt;
    psg_shape_t s;
    if (!PyArg_ParseTuple(args, "O&iO&", psg_py_name_conv, &name, &dt, psg_py_shape_conv, &s))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_placeholder(GRAPH(self), name, (psg_dtype_t)dt, &s));
}

/* initializer_value(name, shape, kind, scale, seed) / random(name, dist, shape, scale, seed) */
static PyObject *b_initializer_value(PyObject *self, PyObject *args) {
    const char *name, *kind;
    psg_shape_t s;
    double scale;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "O&O&sdK", psg_py_name_conv, &name, psg_py_shape_conv, &s, &kind,
                          &scale, &seed))
        return NULL;
    psg_initializer_t init = {kind, scale, seed};
    return psg_py_ep_or_raise(GRAPH(self), psg_initializer_value(GRAPH(self), name, &s, init));
}

static PyObject *b_random(PyObject *self, PyObject *args) {
    const char *name, *dist;
    psg_shape_t s;
    double scale;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "O&sO&dK", psg_py_name_conv, &name, &dist, psg_py_shape_conv, &s,
                          &scale, &seed))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_random(GRAPH(self), name, dist, &s, scale, seed));
}

/* random_like(name, like, dist, scale, seed) */
static PyObject *b_random_like(PyObject *self, PyObject *args) {
    const char *name, *dist;
    psg_endpoint_t like;
    double scale;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "O&O&sdK", psg_py_name_conv, &name, psg_py_endpoint_conv, &like,
                          &dist, &scale, &seed))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self),
                              psg_random_like(GRAPH(self), name, like, dist, scale, seed));
}

/* variance_scaling(shape, scale, mode, distribution, seed) -> (kind, scale) */
static PyObject *b_variance_scaling(PyObject *self, PyObject *args) {
    (void)self;
    psg_shape_t s;
    double scale;
    const char *mode, *dist;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "O&dssK", psg_py_shape_conv, &s, &scale, &mode, &dist, &seed))
        return NULL;
    psg_initializer_t init;
    if (psg_variance_scaling(&s, scale, mode, dist, seed, &init) < 0) {
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    return Py_BuildValue("(sd)", init.kind, init.scale);
}

/* variable(name, dtype, shape, kind, scale, seed, trainable) -> the handle */
static PyObject *b_variable(PyObject *self, PyObject *args) {
    const char *name, *kind;
    int dt, trainable;
    psg_shape_t s;
    double scale;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "siO&sdKp", &name, &dt, psg_py_shape_conv, &s, &kind, &scale, &seed,
                          &trainable))
        return NULL;
    psg_initializer_t init = {kind, scale, seed};
    return psg_py_ep_or_raise(
        GRAPH(self), psg_variable(GRAPH(self), name, (psg_dtype_t)dt, &s, init, trainable));
}

static PyObject *b_var_handle(PyObject *self, PyObject *args) {
    const char *name;
    int dt;
    psg_shape_t s;
    if (!PyArg_ParseTuple(args, "siO&", &name, &dt, psg_py_shape_conv, &s)) return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_var_handle(GRAPH(self), name, (psg_dtype_t)dt, &s));
}

static PyObject *b_read_variable(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t h;
    if (!PyArg_ParseTuple(args, "O&O&", psg_py_name_conv, &name, psg_py_endpoint_conv, &h))
        return NULL;
    return psg_py_ep_or_raise(GRAPH(self), psg_read_variable(GRAPH(self), name, h));
}

/* assign(kind, name, handle, value) -> node id: kind "assign" or "assign_add" */
static PyObject *b_assign(PyObject *self, PyObject *args) {
    const char *kind, *name;
    psg_endpoint_t h, v;
    if (!PyArg_ParseTuple(args, "sO&O&O&", &kind, psg_py_name_conv, &name, psg_py_endpoint_conv, &h,
                          psg_py_endpoint_conv, &v))
        return NULL;
    psg_graph_t *g = GRAPH(self);
    return id_or_raise(g, !strcmp(kind, "assign_add") ? psg_assign_add(g, name, h, v)
                                                      : psg_assign(g, name, h, v));
}

/* group(name, [ids]) -> a NoOp after all of them */
static PyObject *b_group(PyObject *self, PyObject *args) {
    const char *name;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O&O", psg_py_name_conv, &name, &seq)) return NULL;
    int *ids, n;
    if (psg_py_parse_ints(seq, &ids, &n) < 0) return NULL;
    int id = psg_group(GRAPH(self), name, n, ids);
    PyMem_Free(ids);
    return id_or_raise(GRAPH(self), id);
}

static PyObject *b_increment_variable(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t h;
    long long by;
    if (!PyArg_ParseTuple(args, "O&O&L", psg_py_name_conv, &name, psg_py_endpoint_conv, &h, &by))
        return NULL;
    return id_or_raise(GRAPH(self), psg_increment_variable(GRAPH(self), name, h, by));
}

/* xent(name, logits, labels) -> node id: output 0 the loss per example */
static PyObject *b_xent(PyObject *self, PyObject *args) {
    const char *name;
    psg_endpoint_t logits, labels;
    if (!PyArg_ParseTuple(args, "O&O&O&", psg_py_name_conv, &name, psg_py_endpoint_conv, &logits,
                          psg_py_endpoint_conv, &labels))
        return NULL;
    psg_endpoint_t y = psg_sparse_softmax_cross_entropy(GRAPH(self), name, logits, labels);
    if (!psg_endpoint_valid(y)) return psg_py_raise_build(GRAPH(self));
    return PyLong_FromLong(y.node);
}

PyMethodDef psg_py_build_methods[] = {
    {"unary", b_unary, METH_VARARGS, "unary(op, name, x)"},
    {"binary", b_binary, METH_VARARGS, "binary(op, name, a, b)"},
    {"compare", b_compare, METH_VARARGS, "compare(op, name, a, b): Greater, Less, ..."},
    {"matmul", b_matmul, METH_VARARGS, "matmul(name, a, b, transpose_a, transpose_b)"},
    {"dense", b_dense, METH_VARARGS, "dense(name, x, w, bias, relu)"},
    {"pow", b_pow, METH_VARARGS, "pow(name, x, exponent)"},
    {"scale", b_scale, METH_VARARGS, "scale(name, x, factor)"},
    {"reduce", b_reduce, METH_VARARGS, "reduce(kind, name, x, axes, keep_dims)"},
    {"expand_dims", b_expand_dims, METH_VARARGS, "expand_dims(name, x, axes)"},
    {"reshape", b_reshape, METH_VARARGS, "reshape(name, x, shape)"},
    {"concat", b_concat, METH_VARARGS, "concat(name, xs, axis)"},
    {"add_n", b_add_n, METH_VARARGS, "add_n(name, xs)"},
    {"slice", b_slice, METH_VARARGS, "slice(name, x, begin, size)"},
    {"dropout", b_dropout, METH_VARARGS, "dropout(name, x, rate, seed)"},
    {"cast", b_cast, METH_VARARGS, "cast(name, x, dtype)"},
    {"one_hot", b_one_hot, METH_VARARGS, "one_hot(name, x, depth, on, off)"},
    {"fill_like", b_fill_like, METH_VARARGS, "fill_like(name, x, value)"},
    {"const", b_const, METH_VARARGS, "const(name, value, dtype)"},
    {"placeholder", b_placeholder, METH_VARARGS, "placeholder(name, dtype, shape)"},
    {"placeholder_with_default", b_placeholder_with_default, METH_VARARGS,
     "placeholder_with_default(name, input, shape)"},
    {"initializer_value", b_initializer_value, METH_VARARGS,
     "initializer_value(name, shape, kind, scale, seed)"},
    {"random_like", b_random_like, METH_VARARGS,
     "random_like(name, like, distribution, scale, seed)"},
    {"random", b_random, METH_VARARGS, "random(name, distribution, shape, scale, seed)"},
    {"variance_scaling", b_variance_scaling, METH_VARARGS,
     "variance_scaling(shape, scale, mode, distribution, seed) -> (kind, scale)"},
    {"variable", b_variable, METH_VARARGS,
     "variable(name, dtype, shape, kind, scale, seed, trainable)"},
    {"var_handle", b_var_handle, METH_VARARGS, "var_handle(name, dtype, shape)"},
    {"read_variable", b_read_variable, METH_VARARGS, "read_variable(name, handle)"},
    {"assign", b_assign, METH_VARARGS, "assign(kind, name, handle, value) -> id"},
    {"group", b_group, METH_VARARGS, "group(name, ids) -> id"},
    {"increment_variable", b_increment_variable, METH_VARARGS,
     "increment_variable(name, handle, by) -> id"},
    {"xent", b_xent, METH_VARARGS, "xent(name, logits, labels) -> id"},
    {NULL, NULL, 0, NULL},
};
