/* The Graph object of the extension: a psg_graph_t owned by Python, what Python reads of
 * its nodes (names, ops, dtypes, shapes, inputs), its scope, device and control-dependency
 * stacks and its collections. The builders are method tables of their own (build*.c,
 * train.c), joined here into the type's methods. */
#include "python/_psgraph/ext.h"

psg_graph_t *psg_py_graph(PyObject *o) {
    if (!PyObject_TypeCheck(o, &psg_py_graph_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a psgraph._psgraph.Graph");
        return NULL;
    }
    return ((psg_py_graph_t *)o)->g;
}

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)args;
    (void)kw;
    psg_py_graph_t *self = (psg_py_graph_t *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->g = psg_graph_new();
    if (!self->g) {
        Py_DECREF(self);
        return psg_py_raise();
    }
    return (PyObject *)self;
}

static void graph_dealloc(PyObject *o) {
    psg_py_graph_t *self = (psg_py_graph_t *)o;
    psg_graph_destroy(&self->g);
    Py_TYPE(o)->tp_free(o);
}

static const psg_node_t *node_arg(psg_graph_t *g, int id) {
    const psg_node_t *n = psg_graph_node(g, id);
    if (!n)
        PyErr_Format(PyExc_IndexError, "no node %d (the graph has %d)", id, psg_graph_num_nodes(g));
    return n;
}

static PyObject *g_num_nodes(PyObject *self, PyObject *noargs) {
    (void)noargs;
    return PyLong_FromLong(psg_graph_num_nodes(((psg_py_graph_t *)self)->g));
}

/* node(id) -> (name, op, num_outputs, device) */
static PyObject *g_node(PyObject *self, PyObject *args) {
    int id;
    if (!PyArg_ParseTuple(args, "i", &id)) return NULL;
    const psg_node_t *n = node_arg(((psg_py_graph_t *)self)->g, id);
    if (!n) return NULL;
    return Py_BuildValue("(ssis)", psg_node_name(n), psg_node_op(n), psg_node_num_outputs(n),
                         psg_node_device(n));
}

/* output(id, index) -> (dtype, shape) */
static PyObject *g_output(PyObject *self, PyObject *args) {
    int id, i;
    if (!PyArg_ParseTuple(args, "ii", &id, &i)) return NULL;
    const psg_node_t *n = node_arg(((psg_py_graph_t *)self)->g, id);
    if (!n) return NULL;
    if (i < 0 || i >= psg_node_num_outputs(n))
        return PyErr_Format(PyExc_IndexError, "node '%s' has %d outputs, not %d", psg_node_name(n),
                            psg_node_num_outputs(n), i + 1);
    PyObject *shape = psg_py_shape(psg_node_output_shape(n, i));
    if (!shape) return NULL;
    return Py_BuildValue("(iN)", (int)psg_node_output_dtype(n, i), shape);
}

/* inputs(id) -> ([(node, index)...], [control ids]) */
static PyObject *g_inputs(PyObject *self, PyObject *args) {
    int id;
    if (!PyArg_ParseTuple(args, "i", &id)) return NULL;
    const psg_node_t *n = node_arg(((psg_py_graph_t *)self)->g, id);
    if (!n) return NULL;
    PyObject *ins = PyList_New(psg_node_num_inputs(n)), *ctl = PyList_New(psg_node_num_controls(n));
    for (int i = 0; ins && ctl && i < psg_node_num_inputs(n); i++)
        PyList_SET_ITEM(ins, i, psg_py_endpoint(psg_node_input(n, i)));
    for (int i = 0; ins && ctl && i < psg_node_num_controls(n); i++)
        PyList_SET_ITEM(ctl, i, PyLong_FromLong(psg_node_control(n, i)));
    if (!ins || !ctl) {
        Py_XDECREF(ins);
        Py_XDECREF(ctl);
        return NULL;
    }
    return Py_BuildValue("(NN)", ins, ctl);
}

/* attr(id, key) -> the attribute's value, or None */
static PyObject *g_attr(PyObject *self, PyObject *args) {
    int id;
    const char *key;
    if (!PyArg_ParseTuple(args, "is", &id, &key)) return NULL;
    const psg_node_t *n = node_arg(((psg_py_graph_t *)self)->g, id);
    if (!n) return NULL;
    const psg_attr_t *a = psg_node_attr(n, key);
    if (!a) Py_RETURN_NONE;
    switch (a->type) {
    case PSG_ATTR_INT: return PyLong_FromLongLong(a->u.i);
    case PSG_ATTR_FLOAT: return PyFloat_FromDouble(a->u.f);
    case PSG_ATTR_BOOL: return PyBool_FromLong(a->u.b);
    case PSG_ATTR_STR: return PyUnicode_FromString(a->u.s);
    case PSG_ATTR_SHAPE: return psg_py_shape(&a->u.shape);
    case PSG_ATTR_DTYPE: return PyLong_FromLong(a->u.dtype);
    case PSG_ATTR_INTS: {
        PyObject *l = PyList_New(a->u.ints.n);
        for (int i = 0; l && i < a->u.ints.n; i++)
            PyList_SET_ITEM(l, i, PyLong_FromLongLong(a->u.ints.v[i]));
        return l;
    }
    default: Py_RETURN_NONE; /* floats, tensors: not needed by the Python layer */
    }
}

static PyObject *g_find(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    return PyLong_FromLong(psg_graph_find(((psg_py_graph_t *)self)->g, name));
}

/* set_scope("a/b"): the C graph's name scope becomes exactly this ("" for none) */
static PyObject *g_set_scope(PyObject *self, PyObject *args) {
    const char *scope;
    if (!PyArg_ParseTuple(args, "s", &scope)) return NULL;
    psg_graph_t *g = ((psg_py_graph_t *)self)->g;
    if (!strcmp(psg_graph_scope(g), scope)) Py_RETURN_NONE;
    while (psg_graph_scope(g)[0]) psg_graph_pop_scope(g);
    if (scope[0] && psg_graph_push_scope(g, scope) < 0) {
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *g_push_device(PyObject *self, PyObject *args) {
    const char *dev;
    if (!PyArg_ParseTuple(args, "s", &dev)) return NULL;
    psg_graph_push_device(((psg_py_graph_t *)self)->g, dev);
    Py_RETURN_NONE;
}

static PyObject *g_pop_device(PyObject *self, PyObject *noargs) {
    (void)noargs;
    psg_graph_pop_device(((psg_py_graph_t *)self)->g);
    Py_RETURN_NONE;
}

/* push_replica_setter(ReplicaSetter): as tf.device(replica_device_setter(...)); the caller
 * keeps the setter alive until pop_device */
static PyObject *g_push_replica_setter(PyObject *self, PyObject *arg) {
    psg_replica_setter_t *s = psg_py_replica_setter(arg);
    if (!s) return NULL;
    psg_graph_push_replica_setter(((psg_py_graph_t *)self)->g, s);
    Py_RETURN_NONE;
}

/* push_control([ids], clear) */
static PyObject *g_push_control(PyObject *self, PyObject *args) {
    PyObject *seq;
    int clear = 0;
    if (!PyArg_ParseTuple(args, "O|p", &seq, &clear)) return NULL;
    int *ids = NULL, n = 0;
    if (psg_py_parse_ints(seq, &ids, &n) < 0) return NULL;
    int rc = psg_graph_push_control(((psg_py_graph_t *)self)->g, n, ids, clear);
    PyMem_Free(ids);
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *g_pop_control(PyObject *self, PyObject *noargs) {
    (void)noargs;
    psg_graph_pop_control(((psg_py_graph_t *)self)->g);
    Py_RETURN_NONE;
}

static PyObject *g_collection(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    int n = 0;
    const int *ids = psg_graph_collection(((psg_py_graph_t *)self)->g, name, &n);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) PyList_SET_ITEM(l, i, PyLong_FromLong(ids[i]));
    return l;
}

static PyObject *g_add_to_collection(PyObject *self, PyObject *args) {
    const char *name;
    int id;
    if (!PyArg_ParseTuple(args, "si", &name, &id)) return NULL;
    if (psg_graph_add_to_collection(((psg_py_graph_t *)self)->g, name, id) < 0)
        return psg_py_raise();
    Py_RETURN_NONE;
}

static PyMethodDef graph_methods[] = {
    {"num_nodes", g_num_nodes, METH_NOARGS, "the number of nodes"},
    {"node", g_node, METH_VARARGS, "node(id) -> (name, op, num_outputs, device)"},
    {"output", g_output, METH_VARARGS, "output(id, i) -> (dtype, shape)"},
    {"inputs", g_inputs, METH_VARARGS, "inputs(id) -> ([(node, index)], [control ids])"},
    {"attr", g_attr, METH_VARARGS, "attr(id, key) -> value or None"},
    {"find", g_find, METH_VARARGS, "find(name) -> id or -1"},
    {"set_scope", g_set_scope, METH_VARARGS, "set_scope(scope): the name scope of new nodes"},
    {"push_device", g_push_device, METH_VARARGS, "push_device(spec), as tf.device"},
    {"pop_device", g_pop_device, METH_NOARGS, "pops push_device"},
    {"push_replica_setter", g_push_replica_setter, METH_O,
     "push_replica_setter(setter): a replica device setter as the device function"},
    {"push_control", g_push_control, METH_VARARGS,
     "push_control(ids, clear=False), as tf.control_dependencies"},
    {"pop_control", g_pop_control, METH_NOARGS, "pops push_control"},
    {"collection", g_collection, METH_VARARGS, "collection(name) -> [node ids]"},
    {"add_to_collection", g_add_to_collection, METH_VARARGS, "add_to_collection(name, id)"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject psg_py_graph_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "psgraph._psgraph.Graph",
    .tp_basicsize = sizeof(psg_py_graph_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A psgraph graph (psg_graph_t): its nodes, scopes and builders",
    .tp_new = graph_new,
    .tp_dealloc = graph_dealloc,
};

/* The type's methods: graph_methods and the builders' tables, joined once. */
int psg_py_graph_ready(void) {
    PyMethodDef *tables[] = {graph_methods, psg_py_build_methods, psg_py_build_nn_methods,
                             psg_py_train_methods, psg_py_sync_methods};
    size_t n = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (PyMethodDef *d = tables[t]; d->ml_name; d++) n++;
    PyMethodDef *all = PyMem_Calloc(n + 1, sizeof *all); /* lives as long as the type */
    if (!all) return -1;
    size_t k = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (PyMethodDef *d = tables[t]; d->ml_name; d++) all[k++] = *d;
    psg_py_graph_type.tp_methods = all;
    return PyType_Ready(&psg_py_graph_type);
}
