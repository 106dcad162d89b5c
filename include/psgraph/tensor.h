/* Tensors: a dtype, a shape and a reference-counted buffer.
 * A buffer may belong to someone else (a ZeroMQ message, a variable): it carries
 * its own free function, so a tensor received from the wire is used in place. */
#ifndef PSGRAPH_TENSOR_H
#define PSGRAPH_TENSOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    PSG_DT_INVALID = 0,
    PSG_DT_F32 = 1,
    PSG_DT_F64 = 2,
    PSG_DT_I32 = 3,
    PSG_DT_I64 = 4,
    PSG_DT_U8 = 5,
    PSG_DT_F16 = 6,
    PSG_DT_BF16 = 7,
    PSG_DT_BOOL = 8,
    PSG_DT_RESOURCE = 9, /* a handle to a resource (a variable); never crosses a process */
    PSG_DT_COUNT
} psg_dtype_t;

/* Bytes per element; 0 for PSG_DT_INVALID or an out-of-range value. */
size_t psg_dtype_size(psg_dtype_t dt);
/* "f32", "i64", ...; "invalid" for an unknown value. */
const char *psg_dtype_name(psg_dtype_t dt);
/* Parses a name from psg_dtype_name; PSG_DT_INVALID if unknown. */
psg_dtype_t psg_dtype_from_name(const char *name);

#define PSG_MAX_RANK 8

/* A shape. At graph-build time a dim may be -1 (unknown, e.g. the batch) and
 * rank may be -1 (unknown rank). At run time every shape is complete. */
typedef struct {
    int rank;
    int64_t dims[PSG_MAX_RANK];
} psg_shape_t;

psg_shape_t psg_shape_make(int rank, const int64_t *dims);
psg_shape_t psg_shape_scalar(void);
psg_shape_t psg_shape_unknown(void);
psg_shape_t psg_shape_1d(int64_t d0);
psg_shape_t psg_shape_2d(int64_t d0, int64_t d1);
psg_shape_t psg_shape_4d(int64_t d0, int64_t d1, int64_t d2, int64_t d3);
/* Number of elements; -1 if any dim or the rank is unknown, or if the count does not fit
 * in an int64 (a shape from bytes may claim anything). 1 for a scalar. */
int64_t psg_shape_numel(const psg_shape_t *s);
bool psg_shape_is_complete(const psg_shape_t *s);
bool psg_shape_equal(const psg_shape_t *a, const psg_shape_t *b);
/* True when a and b can describe the same tensor (unknown dims match anything). */
bool psg_shape_compatible(const psg_shape_t *a, const psg_shape_t *b);
/* Writes "[64, 28, 28, 1]" ("?" for unknown dims, "<unknown>" for unknown rank)
 * into buf; returns buf. */
char *psg_shape_str(const psg_shape_t *s, char *buf, size_t size);
#define PSG_SHAPE_STR_MAX 160

typedef void (*psg_free_fn)(void *data, void *hint);

/* A reference-counted block of bytes, 64-byte aligned when psgraph allocated it. */
typedef struct psg_buffer {
    void *data;
    size_t size;
    atomic_int refcount;
    psg_free_fn free_fn; /* NULL: psgraph's own allocator */
    void *hint;
    int device; /* 0: host memory (every buffer made here); GPU k: k + 1 (device.h) */
} psg_buffer_t;

/* A new buffer of `size` bytes, uninitialized, refcount 1. NULL on out of memory
 * (with the error set). Freed blocks are cached by size, so a training step
 * allocates without touching fresh pages once warm. */
psg_buffer_t *psg_buffer_new(size_t size);
/* Wraps memory owned elsewhere; free_fn(data, hint) runs when the last reference
 * goes. On failure NULL is returned and free_fn is NOT called. */
psg_buffer_t *psg_buffer_wrap(void *data, size_t size, psg_free_fn free_fn, void *hint);
psg_buffer_t *psg_buffer_ref(psg_buffer_t *b);
/* Drops one reference and sets *b to NULL. NULL-safe. */
void psg_buffer_unref(psg_buffer_t **b);
/* Bytes currently held by the buffer cache (for memory tests and benches). */
size_t psg_buffer_cached_bytes(void);
/* Bytes currently handed out by psg_buffer_new and not yet freed. */
size_t psg_buffer_live_bytes(void);
/* Returns the cached blocks to the system. */
void psg_buffer_cache_trim(void);

/* A tensor: plain data with a reference count. `data` points into `buf`.
 * Kernels read and write data directly; ownership is by psg_tensor_ref /
 * psg_tensor_destroy. A tensor shared between two owners is read-only by
 * convention, except a variable's, which update ops change in place. */
typedef struct psg_tensor {
    psg_dtype_t dtype;
    psg_shape_t shape;
    psg_buffer_t *buf;
    void *data;
    atomic_int refcount;
} psg_tensor_t;

/* A new tensor with uninitialized contents; shape must be complete.
 * NULL with the error set on a bad shape or out of memory. Caller owns it. */
psg_tensor_t *psg_tensor_new(psg_dtype_t dt, const psg_shape_t *shape);
/* As psg_tensor_new, filled with zeros. */
psg_tensor_t *psg_tensor_zeros(psg_dtype_t dt, const psg_shape_t *shape);
/* A tensor over `buf` starting at byte `offset`; takes a new reference to buf.
 * Fails if the tensor does not fit in the buffer. */
psg_tensor_t *psg_tensor_from_buffer(psg_dtype_t dt, const psg_shape_t *shape, psg_buffer_t *buf,
                                     size_t offset);
/* A new tensor holding a copy of `data` (nbytes must match dtype and shape). */
psg_tensor_t *psg_tensor_from_data(psg_dtype_t dt, const psg_shape_t *shape, const void *data,
                                   size_t nbytes);
/* A scalar f32 / i64 tensor. */
psg_tensor_t *psg_tensor_scalar_f32(float v);
psg_tensor_t *psg_tensor_scalar_i64(int64_t v);
/* A tensor sharing t's buffer with another shape of the same element count. */
psg_tensor_t *psg_tensor_reshaped(psg_tensor_t *t, const psg_shape_t *shape);
/* A new host tensor of parts[0..n) joined along dim 0 (their other dims and dtype alike). */
psg_tensor_t *psg_tensor_concat_rows(psg_tensor_t *const *parts, int n);
/* A deep copy (new buffer) of a host tensor (device.h copies GPU tensors). */
psg_tensor_t *psg_tensor_copy(const psg_tensor_t *t);
psg_tensor_t *psg_tensor_ref(psg_tensor_t *t);
/* Drops one reference, frees on the last, sets *t to NULL. NULL-safe. */
void psg_tensor_destroy(psg_tensor_t **t);

int64_t psg_tensor_numel(const psg_tensor_t *t);
size_t psg_tensor_nbytes(const psg_tensor_t *t);
static inline float *psg_tensor_f32(const psg_tensor_t *t) {
    return (float *)t->data;
}
static inline int32_t *psg_tensor_i32(const psg_tensor_t *t) {
    return (int32_t *)t->data;
}
static inline int64_t *psg_tensor_i64(const psg_tensor_t *t) {
    return (int64_t *)t->data;
}

#endif
