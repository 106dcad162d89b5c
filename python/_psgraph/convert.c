/* Conversions between Python values and the C API's: endpoints as (node, index) tuples,
 * shapes as tuples with None for an unknown dim, dtypes as psg_dtype_t codes, and numpy
 * arrays as tensors both ways, without a copy where dtype and layout allow: a C-contiguous
 * aligned array of the dtype goes in as the tensor's buffer, and a tensor psgraph hands
 * over alone comes out as the array's memory. Copies: another dtype or layout going in,
 * a tensor psgraph still shares coming out (a variable's value), bf16 (numpy has none: f32). */
#include "python/_psgraph/ext.h"

PyObject *psg_py_endpoint(psg_endpoint_t e) {
    if (!psg_endpoint_valid(e)) Py_RETURN_NONE;
    return Py_BuildValue("(ii)", e.node, e.index);
}

int psg_py_parse_endpoint(PyObject *o, psg_endpoint_t *e) {
    if (o == Py_None) {
        *e = PSG_NO_ENDPOINT;
        return 0;
    }
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
        PyErr_Format(PyExc_TypeError, "an endpoint is a (node, index) tuple, not %R", o);
        return -1;
    }
    long node = PyLong_AsLong(PyTuple_GET_ITEM(o, 0)),
         index = PyLong_AsLong(PyTuple_GET_ITEM(o, 1));
    if (PyErr_Occurred()) return -1;
    *e = (psg_endpoint_t){(int)node, (int)index};
    return 0;
}

int psg_py_endpoint_conv(PyObject *o, void *e) {
    return psg_py_parse_endpoint(o, e) == 0;
}

int psg_py_name_conv(PyObject *o, void *out) {
    *(const char **)out = o == Py_None ? NULL : PyUnicode_AsUTF8(o);
    return o == Py_None || *(const char **)out != NULL;
}

PyObject *psg_py_ep_or_raise(psg_graph_t *g, psg_endpoint_t e) {
    if (!psg_endpoint_valid(e)) return psg_py_raise_build(g);
    return psg_py_endpoint(e);
}

int psg_py_parse_endpoints(PyObject *seq, psg_endpoint_t **out, int *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of endpoints");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Calloc(len ? (size_t)len : 1, sizeof **out);
    *n = (int)len;
    int rc = *out ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; rc == 0 && i < len; i++)
        rc = psg_py_parse_endpoint(PySequence_Fast_GET_ITEM(fast, i), &(*out)[i]);
    Py_DECREF(fast);
    if (rc < 0) {
        PyMem_Free(*out);
        *out = NULL;
    }
    return rc;
}

int psg_py_parse_ints(PyObject *seq, int **out, int *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Calloc(len ? (size_t)len : 1, sizeof **out);
    *n = (int)len;
    int rc = *out ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; rc == 0 && i < len; i++) {
        (*out)[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (PyErr_Occurred()) rc = -1;
    }
    Py_DECREF(fast);
    if (rc < 0) {
        PyMem_Free(*out);
        *out = NULL;
    }
    return rc;
}

int psg_py_parse_int64s(PyObject *seq, int64_t *out, int max, int *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    if (len > max) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%zd values, at most %d", len, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    *n = (int)len;
    Py_DECREF(fast);
    return 0;
}

int psg_py_parse_shape(PyObject *o, psg_shape_t *s) {
    if (o == Py_None) {
        *s = psg_shape_unknown();
        return 0;
    }
    PyObject *fast = PySequence_Fast(o, "a shape is None or a sequence of ints and None");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    if (len > PSG_MAX_RANK) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "rank %zd is over psgraph's limit %d", len, PSG_MAX_RANK);
        return -1;
    }
    s->rank = (int)len;
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *d = PySequence_Fast_GET_ITEM(fast, i);
        s->dims[i] = d == Py_None ? -1 : PyLong_AsLongLong(d);
        if (PyErr_Occurred() || s->dims[i] < -1) {
            Py_DECREF(fast);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "dim %zd is negative", i);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

int psg_py_shape_conv(PyObject *o, void *s) {
    return psg_py_parse_shape(o, s) == 0;
}

PyObject *psg_py_shape(const psg_shape_t *s) {
    if (s->rank < 0) Py_RETURN_NONE;
    PyObject *t = PyTuple_New(s->rank);
    for (int i = 0; t && i < s->rank; i++)
        PyTuple_SET_ITEM(t, i,
                         s->dims[i] < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(s->dims[i]));
    return t;
}

int psg_py_npy_type(psg_dtype_t dt) {
    switch (dt) {
    case PSG_DT_F32: return NPY_FLOAT32;
    case PSG_DT_F64: return NPY_FLOAT64;
    case PSG_DT_I32: return NPY_INT32;
    case PSG_DT_I64: return NPY_INT64;
    case PSG_DT_U8: return NPY_UINT8;
    case PSG_DT_F16: return NPY_FLOAT16;
    case PSG_DT_BOOL: return NPY_BOOL;
    default: return -1; /* bf16 (numpy has none), resource handles */
    }
}

/* An array of numpy type `typenum` over value: the same object when it fits. */
static PyArrayObject *as_array(PyObject *value, int typenum) {
    if (PyArray_CheckExact(value)) { /* the common case, without numpy's general path */
        PyArrayObject *a = (PyArrayObject *)value;
        if (PyArray_TYPE(a) == typenum && PyArray_ISCARRAY_RO(a) && PyArray_ISNOTSWAPPED(a)) {
            Py_INCREF(a);
            return a;
        }
    }
    int flags = NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST;
    return (PyArrayObject *)PyArray_FROMANY(value, typenum, 0, 0, flags);
}

static int array_shape(PyArrayObject *a, psg_shape_t *s) {
    int nd = PyArray_NDIM(a);
    if (nd > PSG_MAX_RANK) {
        PyErr_Format(PyExc_ValueError, "rank %d is over psgraph's limit %d", nd, PSG_MAX_RANK);
        return -1;
    }
    s->rank = nd;
    for (int i = 0; i < nd; i++) s->dims[i] = PyArray_DIM(a, i);
    return 0;
}

/* bf16: the values as f32 by numpy, then rounded to bf16 by psgraph (half.h). */
static psg_tensor_t *bf16_tensor_from(PyObject *value) {
    PyArrayObject *a = as_array(value, NPY_FLOAT32);
    psg_shape_t s;
    if (!a || array_shape(a, &s) < 0) {
        Py_XDECREF(a);
        return NULL;
    }
    psg_tensor_t *t = psg_tensor_new(PSG_DT_BF16, &s);
    if (t) {
        const float *src = PyArray_DATA(a);
        uint16_t *dst = t->data;
        for (int64_t i = 0, n = psg_tensor_numel(t); i < n; i++) dst[i] = psg_f32_to_bf16(src[i]);
    }
    Py_DECREF(a);
    if (!t) psg_py_raise();
    return t;
}

psg_tensor_t *psg_py_tensor_from(PyObject *value, psg_dtype_t dt) {
    if (dt == PSG_DT_BF16) return bf16_tensor_from(value);
    int typenum = psg_py_npy_type(dt);
    if (typenum < 0) {
        PyErr_Format(PyExc_TypeError, "cannot make a %s tensor from a Python value",
                     psg_dtype_name(dt));
        return NULL;
    }
    PyArrayObject *a = as_array(value, typenum);
    psg_shape_t s;
    if (!a || array_shape(a, &s) < 0) {
        Py_XDECREF(a);
        return NULL;
    }
    size_t nbytes = (size_t)PyArray_NBYTES(a);
    /* the buffer owns the array's reference from here; released by psg_py_release_array */
    psg_buffer_t *buf = psg_buffer_wrap(PyArray_DATA(a), nbytes, psg_py_release_array, a);
    if (!buf) {
        Py_DECREF(a);
        return (psg_tensor_t *)psg_py_raise();
    }
    psg_tensor_t *t = psg_tensor_from_buffer(dt, &s, buf, 0);
    psg_buffer_unref(&buf);
    if (!t) psg_py_raise();
    return t;
}

static void tensor_capsule_free(PyObject *cap) {
    psg_tensor_t *t = PyCapsule_GetPointer(cap, "psg_tensor");
    psg_tensor_destroy(&t);
}

PyObject *psg_py_array_from(psg_tensor_t **tp) {
    psg_tensor_t *t = *tp;
    *tp = NULL;
    if (t->buf && t->buf->device != 0) {
        psg_tensor_destroy(&t);
        return PyErr_Format(PyExc_RuntimeError,
                            "a fetched tensor is on a GPU (copy it to the host first)");
    }
    npy_intp dims[PSG_MAX_RANK];
    for (int i = 0; i < t->shape.rank; i++) dims[i] = (npy_intp)t->shape.dims[i];
    PyObject *out = NULL;
    if (t->dtype == PSG_DT_BF16) {
        out = PyArray_SimpleNew(t->shape.rank, dims, NPY_FLOAT32);
        if (out) {
            const uint16_t *src = t->data;
            float *dst = PyArray_DATA((PyArrayObject *)out);
            for (int64_t i = 0, n = psg_tensor_numel(t); i < n; i++)
                dst[i] = psg_bf16_to_f32(src[i]);
        }
    } else if (psg_py_npy_type(t->dtype) < 0) {
        PyErr_Format(PyExc_TypeError, "a %s tensor cannot be fetched", psg_dtype_name(t->dtype));
    } else if (t->shape.rank == 0) {
        PyArray_Descr *d = PyArray_DescrFromType(psg_py_npy_type(t->dtype));
        out = d ? PyArray_Scalar(t->data, d, NULL) : NULL; /* copies */
        Py_XDECREF(d);
    } else if (atomic_load(&t->refcount) == 1 && t->buf && atomic_load(&t->buf->refcount) == 1) {
        /* psgraph handed it over alone: the array is a view of it, and keeps it */
        PyObject *cap = PyCapsule_New(t, "psg_tensor", tensor_capsule_free);
        if (!cap) {
            psg_tensor_destroy(&t);
            return NULL;
        }
        out = PyArray_SimpleNewFromData(t->shape.rank, dims, psg_py_npy_type(t->dtype), t->data);
        if (!out) {
            Py_DECREF(cap); /* frees t */
            return NULL;
        }
        if (PyArray_SetBaseObject((PyArrayObject *)out, cap) < 0) { /* takes cap, even failing */
            Py_DECREF(out);
            return NULL;
        }
        return out;
    } else {
        out = PyArray_SimpleNew(t->shape.rank, dims, psg_py_npy_type(t->dtype));
        if (out) memcpy(PyArray_DATA((PyArrayObject *)out), t->data, psg_tensor_nbytes(t));
    }
    psg_tensor_destroy(&t);
    return out;
}
