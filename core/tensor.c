/* Dtypes, shapes and tensors. Buffers and their cache live in buffer.c. */
#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include "core/checked.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[PSG_DT_COUNT] = {
    [PSG_DT_INVALID] = {"invalid", 0}, [PSG_DT_F32] = {"f32", 4},
    [PSG_DT_F64] = {"f64", 8},         [PSG_DT_I32] = {"i32", 4},
    [PSG_DT_I64] = {"i64", 8},         [PSG_DT_U8] = {"u8", 1},
    [PSG_DT_F16] = {"f16", 2},         [PSG_DT_BF16] = {"bf16", 2},
    [PSG_DT_BOOL] = {"bool", 1},       [PSG_DT_RESOURCE] = {"resource", sizeof(void *)},
};

size_t psg_dtype_size(psg_dtype_t dt) {
    return (dt > 0 && dt < PSG_DT_COUNT) ? dtype_info[dt].size : 0;
}

const char *psg_dtype_name(psg_dtype_t dt) {
    return (dt >= 0 && dt < PSG_DT_COUNT) ? dtype_info[dt].name : "invalid";
}

psg_dtype_t psg_dtype_from_name(const char *name) {
    for (int i = 1; i < PSG_DT_COUNT; i++)
        if (strcmp(dtype_info[i].name, name) == 0) return (psg_dtype_t)i;
    return PSG_DT_INVALID;
}

psg_shape_t psg_shape_make(int rank, const int64_t *dims) {
    psg_shape_t s = {.rank = rank};
    PSG_ASSERT(rank >= -1 && rank <= PSG_MAX_RANK);
    for (int i = 0; i < rank; i++) s.dims[i] = dims[i];
    return s;
}

psg_shape_t psg_shape_scalar(void) {
    return (psg_shape_t){.rank = 0};
}
psg_shape_t psg_shape_unknown(void) {
    return (psg_shape_t){.rank = -1};
}
psg_shape_t psg_shape_1d(int64_t d0) {
    return (psg_shape_t){.rank = 1, .dims = {d0}};
}
psg_shape_t psg_shape_2d(int64_t d0, int64_t d1) {
    return (psg_shape_t){.rank = 2, .dims = {d0, d1}};
}
psg_shape_t psg_shape_4d(int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return (psg_shape_t){.rank = 4, .dims = {d0, d1, d2, d3}};
}

int64_t psg_shape_numel(const psg_shape_t *s) {
    int64_t n;
    if (s->rank < 0 || s->rank > PSG_MAX_RANK || psg_ckd_product_i64(&n, s->dims, s->rank))
        return -1;
    return n;
}

bool psg_shape_is_complete(const psg_shape_t *s) {
    return psg_shape_numel(s) >= 0;
}

bool psg_shape_equal(const psg_shape_t *a, const psg_shape_t *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

bool psg_shape_compatible(const psg_shape_t *a, const psg_shape_t *b) {
    if (a->rank < 0 || b->rank < 0) return true;
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i]) return false;
    return true;
}

char *psg_shape_str(const psg_shape_t *s, char *buf, size_t size) {
    if (s->rank < 0) {
        snprintf(buf, size, "<unknown>");
        return buf;
    }
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < s->rank && n < size; i++) {
        if (s->dims[i] < 0)
            n += (size_t)snprintf(buf + n, size - n, "%s?", i ? ", " : "");
        else
            n +=
                (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
    }
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

static int check_shape(psg_dtype_t dt, const psg_shape_t *shape, size_t *nbytes) {
    if (psg_dtype_size(dt) == 0) return psg_error_set("invalid dtype %d", (int)dt);
    if (shape->rank < 0 || shape->rank > PSG_MAX_RANK)
        return psg_error_set("invalid rank %d", shape->rank);
    int64_t n = psg_shape_numel(shape);
    char s[PSG_SHAPE_STR_MAX];
    if (n < 0) {
        for (int i = 0; i < shape->rank; i++)
            if (shape->dims[i] < 0)
                return psg_error_set("shape %s is not complete", psg_shape_str(shape, s, sizeof s));
        return psg_error_set("shape %s: its element count overflows",
                             psg_shape_str(shape, s, sizeof s));
    }
    if ((uint64_t)n > (uint64_t)1 << 40)
        return psg_error_set("tensor too large (shape %s, %lld elements)",
                             psg_shape_str(shape, s, sizeof s), (long long)n);
    *nbytes = (size_t)n * psg_dtype_size(dt);
    return 0;
}

psg_tensor_t *psg_tensor_from_buffer(psg_dtype_t dt, const psg_shape_t *shape, psg_buffer_t *buf,
                                     size_t offset) {
    size_t nbytes = 0;
    if (check_shape(dt, shape, &nbytes) < 0) return NULL;
    if (offset > buf->size || nbytes > buf->size - offset) {
        psg_error_set("tensor of %zu bytes at offset %zu does not fit in a buffer of %zu bytes",
                      nbytes, offset, buf->size);
        return NULL;
    }
    psg_tensor_t *t = malloc(sizeof *t);
    if (!t) {
        psg_error_set("out of memory");
        return NULL;
    }
    t->dtype = dt;
    t->shape = *shape;
    t->buf = psg_buffer_ref(buf);
    t->data = (char *)buf->data + offset;
    atomic_init(&t->refcount, 1);
    return t;
}

psg_tensor_t *psg_tensor_new(psg_dtype_t dt, const psg_shape_t *shape) {
    size_t nbytes = 0;
    if (check_shape(dt, shape, &nbytes) < 0) return NULL;
    psg_buffer_t *buf = psg_buffer_new(nbytes);
    if (!buf) return NULL;
    psg_tensor_t *t = psg_tensor_from_buffer(dt, shape, buf, 0);
    psg_buffer_unref(&buf);
    return t;
}

psg_tensor_t *psg_tensor_zeros(psg_dtype_t dt, const psg_shape_t *shape) {
    psg_tensor_t *t = psg_tensor_new(dt, shape);
    if (t) memset(t->data, 0, psg_tensor_nbytes(t));
    return t;
}

psg_tensor_t *psg_tensor_from_data(psg_dtype_t dt, const psg_shape_t *shape, const void *data,
                                   size_t nbytes) {
    psg_tensor_t *t = psg_tensor_new(dt, shape);
    if (!t) return NULL;
    if (psg_tensor_nbytes(t) != nbytes) {
        psg_error_set("data of %zu bytes given for a tensor of %zu bytes", nbytes,
                      psg_tensor_nbytes(t));
        psg_tensor_destroy(&t);
        return NULL;
    }
    if (nbytes) memcpy(t->data, data, nbytes);
    return t;
}

psg_tensor_t *psg_tensor_scalar_f32(float v) {
    psg_shape_t s = psg_shape_scalar();
    return psg_tensor_from_data(PSG_DT_F32, &s, &v, sizeof v);
}

psg_tensor_t *psg_tensor_scalar_i64(int64_t v) {
    psg_shape_t s = psg_shape_scalar();
    return psg_tensor_from_data(PSG_DT_I64, &s, &v, sizeof v);
}

psg_tensor_t *psg_tensor_reshaped(psg_tensor_t *t, const psg_shape_t *shape) {
    if (psg_shape_numel(shape) != psg_tensor_numel(t)) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        psg_error_set("cannot reshape %s to %s", psg_shape_str(&t->shape, a, sizeof a),
                      psg_shape_str(shape, b, sizeof b));
        return NULL;
    }
    return psg_tensor_from_buffer(t->dtype, shape, t->buf,
                                  (size_t)((char *)t->data - (char *)t->buf->data));
}

psg_tensor_t *psg_tensor_concat_rows(psg_tensor_t *const *parts, int n) {
    psg_shape_t s = parts[0]->shape;
    s.dims[0] = 0;
    for (int k = 0; k < n; k++) s.dims[0] += parts[k]->shape.dims[0];
    psg_tensor_t *t = psg_tensor_new(parts[0]->dtype, &s);
    size_t at = 0;
    for (int k = 0; t && k < n; k++) {
        size_t bytes = psg_tensor_nbytes(parts[k]);
        memcpy((char *)t->data + at, parts[k]->data, bytes);
        at += bytes;
    }
    return t;
}

psg_tensor_t *psg_tensor_copy(const psg_tensor_t *t) {
    return psg_tensor_from_data(t->dtype, &t->shape, t->data, psg_tensor_nbytes(t));
}

psg_tensor_t *psg_tensor_ref(psg_tensor_t *t) {
    atomic_fetch_add(&t->refcount, 1);
    return t;
}

void psg_tensor_destroy(psg_tensor_t **tp) {
    if (!tp || !*tp) return;
    psg_tensor_t *t = *tp;
    *tp = NULL;
    if (atomic_fetch_sub(&t->refcount, 1) != 1) return;
    psg_buffer_unref(&t->buf);
    free(t);
}

int64_t psg_tensor_numel(const psg_tensor_t *t) {
    return psg_shape_numel(&t->shape);
}

size_t psg_tensor_nbytes(const psg_tensor_t *t) {
    return (size_t)psg_tensor_numel(t) * psg_dtype_size(t->dtype);
}
