/* The Graph's training builders: gradients (runtime/autodiff), the global step, the
 * learning-rate decay op, and optimizers (psg_optimizer_t, whose update ops are the C
 * library's: SGD, momentum, RMSProp, Adam, Adagrad, FTRL). Not the session. */
#include "python/_psgraph/ext.h"

#define GRAPH(self) (((psg_py_graph_t *)(self))->g)

/* gradients([ys], [xs], [grad_ys] or None) -> [endpoint or None] */
static PyObject *t_gradients(PyObject *self, PyObject *args) {
    PyObject *ys_o, *xs_o, *gys_o = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &ys_o, &xs_o, &gys_o)) return NULL;
    psg_endpoint_t *ys = NULL, *xs = NULL, *gys = NULL;
    int ny = 0, nx = 0, ng = 0;
    PyObject *out = NULL;
    if (psg_py_parse_endpoints(ys_o, &ys, &ny) < 0 || psg_py_parse_endpoints(xs_o, &xs, &nx) < 0 ||
        (gys_o != Py_None && psg_py_parse_endpoints(gys_o, &gys, &ng) < 0))
        goto done;
    if (gys && ng != ny) {
        PyErr_Format(PyExc_ValueError, "%d grad_ys for %d ys", ng, ny);
        goto done;
    }
    psg_endpoint_t *grads = PyMem_Calloc(nx ? (size_t)nx : 1, sizeof *grads);
    if (!grads) {
        PyErr_NoMemory();
        goto done;
    }
    if (psg_gradients(GRAPH(self), ny, ys, gys, nx, xs, grads) < 0) {
        psg_py_raise_build(GRAPH(self));
    } else {
        out = PyList_New(nx);
        for (int i = 0; out && i < nx; i++) PyList_SET_ITEM(out, i, psg_py_endpoint(grads[i]));
    }
    PyMem_Free(grads);
done:
    PyMem_Free(ys);
    PyMem_Free(xs);
    PyMem_Free(gys);
    return out;
}

static PyObject *t_global_step(PyObject *self, PyObject *noargs) {
    (void)noargs;
    psg_endpoint_t e = psg_global_step(GRAPH(self));
    if (!psg_endpoint_valid(e)) return psg_py_raise_build(GRAPH(self));
    return psg_py_endpoint(e);
}

/* exponential_decay(name, lr, step, decay_steps, rate, staircase) */
static PyObject *t_exponential_decay(PyObject *self, PyObject *args) {
    const char *name;
    double lr, rate;
    psg_endpoint_t step;
    long long decay_steps;
    int staircase = 0;
    if (!PyArg_ParseTuple(args, "sdO&Ld|p", &name, &lr, psg_py_endpoint_conv, &step, &decay_steps,
                          &rate, &staircase))
        return NULL;
    psg_endpoint_t e = psg_exponential_decay(GRAPH(self), name, (float)lr, step, decay_steps,
                                             (float)rate, staircase);
    if (!psg_endpoint_valid(e)) return psg_py_raise_build(GRAPH(self));
    return psg_py_endpoint(e);
}

static PyObject *t_variable_name(PyObject *self, PyObject *args) {
    psg_endpoint_t h;
    if (!PyArg_ParseTuple(args, "O&", psg_py_endpoint_conv, &h)) return NULL;
    return PyUnicode_FromString(psg_variable_name(GRAPH(self), h));
}

/* ---- optimizers ---- */

static void optimizer_free(PyObject *cap) {
    psg_optimizer_t *o = PyCapsule_GetPointer(cap, "psg_optimizer");
    psg_optimizer_destroy(&o);
}

/* optimizer(kind, {hyper-parameters}, lr_tensor or None) -> an optimizer (a capsule): the
 * keys of the dict are psg_optimizer_config_t's fields; the others keep TensorFlow's
 * defaults (psg_optimizer_defaults). */
static PyObject *t_optimizer(PyObject *self, PyObject *args) {
    const char *kind;
    PyObject *hp, *lr_o = Py_None;
    if (!PyArg_ParseTuple(args, "sO!|O", &kind, &PyDict_Type, &hp, &lr_o)) return NULL;
    psg_optimizer_config_t c = psg_optimizer_defaults(kind);
    static const char *const keys[] = {
        "learning_rate",       "momentum", "rho", "epsilon", "beta1", "beta2",
        "initial_accumulator", "l1",       "l2",  "lr_power"};
    float *fields[] = {&c.learning_rate,       &c.momentum, &c.rho, &c.epsilon, &c.beta1, &c.beta2,
                       &c.initial_accumulator, &c.l1,       &c.l2,  &c.lr_power};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        PyObject *v = PyDict_GetItemString(hp, keys[i]);
        if (!v) continue;
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return NULL;
        *fields[i] = (float)d;
    }
    PyObject *nest = PyDict_GetItemString(hp, "use_nesterov");
    if (nest) c.use_nesterov = PyObject_IsTrue(nest);
    PyObject *check = PyDict_GetItemString(hp, "check_numerics");
    if (check) c.check_numerics = PyObject_IsTrue(check);
    psg_endpoint_t lr = PSG_NO_ENDPOINT;
    if (psg_py_parse_endpoint(lr_o, &lr) < 0) return NULL;
    psg_optimizer_t *o = psg_optimizer_new(&c);
    if (!o) {
        PyErr_SetString(PyExc_ValueError, psg_error_message());
        return NULL;
    }
    if (psg_endpoint_valid(lr)) {
        const psg_shape_t *s = psg_graph_shape(GRAPH(self), lr);
        if (psg_graph_dtype(GRAPH(self), lr) != PSG_DT_F32 || s->rank != 0) {
            psg_optimizer_destroy(&o);
            return PyErr_Format(PyExc_ValueError,
                                "the learning rate must be a scalar float32 tensor");
        }
        psg_optimizer_set_learning_rate_tensor(o, lr);
    }
    PyObject *cap = PyCapsule_New(o, "psg_optimizer", optimizer_free);
    if (!cap) psg_optimizer_destroy(&o);
    return cap;
}

/* apply_gradients(optimizer, [grads], [variable handles]) -> the train op's id */
static PyObject *t_apply_gradients(PyObject *self, PyObject *args) {
    PyObject *cap, *gs_o, *vs_o;
    if (!PyArg_ParseTuple(args, "O!OO", &PyCapsule_Type, &cap, &gs_o, &vs_o)) return NULL;
    psg_optimizer_t *o = PyCapsule_GetPointer(cap, "psg_optimizer");
    if (!o) return NULL;
    psg_endpoint_t *gs = NULL, *vs = NULL;
    int ng = 0, nv = 0;
    PyObject *out = NULL;
    if (psg_py_parse_endpoints(gs_o, &gs, &ng) == 0 &&
        psg_py_parse_endpoints(vs_o, &vs, &nv) == 0) {
        int op = -1;
        if (ng != nv)
            PyErr_Format(PyExc_ValueError, "%d gradients for %d variables", ng, nv);
        else if (psg_optimizer_apply_gradients(o, GRAPH(self), ng, gs, vs, &op) < 0)
            psg_py_raise_build(GRAPH(self));
        else
            out = PyLong_FromLong(op);
    }
    PyMem_Free(gs);
    PyMem_Free(vs);
    return out;
}

/* optimizer_name(optimizer) -> "Momentum", ...: its slots' suffix */
static PyObject *t_optimizer_name(PyObject *self, PyObject *cap) {
    (void)self;
    psg_optimizer_t *o = PyCapsule_GetPointer(cap, "psg_optimizer");
    if (!o) return NULL;
    return PyUnicode_FromString(psg_optimizer_name(o));
}

PyMethodDef psg_py_train_methods[] = {
    {"gradients", t_gradients, METH_VARARGS,
     "gradients(ys, xs, grad_ys=None) -> [endpoint or None]"},
    {"global_step", t_global_step, METH_NOARGS, "the handle of the graph's global_step variable"},
    {"exponential_decay", t_exponential_decay, METH_VARARGS,
     "exponential_decay(name, lr, step, decay_steps, rate, staircase)"},
    {"variable_name", t_variable_name, METH_VARARGS, "variable_name(handle)"},
    {"optimizer", t_optimizer, METH_VARARGS, "optimizer(kind, {hyper-parameters}, lr_tensor=None)"},
    {"apply_gradients", t_apply_gradients, METH_VARARGS,
     "apply_gradients(optimizer, grads, handles) -> id"},
    {"optimizer_name", t_optimizer_name, METH_O, "optimizer_name(optimizer)"},
    {NULL, NULL, 0, NULL},
};
