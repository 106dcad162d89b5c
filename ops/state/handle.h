/* Handles to the ps's resources (accumulators, token queues): a scalar
 * RESOURCE tensor holding the object's address, as a variable's handle, and
 * a magic number first in each object so a kernel can tell a wrong handle.
 * Internal to ps/; never crosses a process (placement keeps users beside). */
#ifndef PSGRAPH_PS_HANDLE_H
#define PSGRAPH_PS_HANDLE_H

#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <stdint.h>
#include <string.h>

/* A new handle to obj; NULL on out of memory. */
static inline psg_tensor_t *psg_ps_handle_new(void *obj) {
    psg_shape_t scalar = psg_shape_scalar();
    psg_tensor_t *h = psg_tensor_new(PSG_DT_RESOURCE, &scalar);
    if (h) memcpy(h->data, &obj, sizeof obj);
    return h;
}

/* The object behind h when its first field is `magic`; else NULL with the
 * error "input is not WHAT handle". */
static inline void *psg_ps_handle_object(const psg_tensor_t *h, uint32_t magic, const char *what) {
    void *p = NULL;
    uint32_t m = 0;
    if (h && h->dtype == PSG_DT_RESOURCE) memcpy(&p, h->data, sizeof p);
    if (p) memcpy(&m, p, sizeof m);
    if (m != magic) {
        psg_error_set("input is not %s handle", what);
        return NULL;
    }
    return p;
}

/* The accessors every ps resource type (a struct with `magic` first and a
 * `name`) has: PREFIX_name, PREFIX_handle and PREFIX_from_handle, WHAT naming
 * the type in the error of a wrong handle ("an accumulator"). */
#define PSG_PS_HANDLE_ACCESSORS(type, prefix, magic, what)                                         \
    const char *prefix##_name(const type *x) {                                                     \
        return x->name;                                                                            \
    }                                                                                              \
    psg_tensor_t *prefix##_handle(type *x) {                                                       \
        return psg_ps_handle_new(x);                                                               \
    }                                                                                              \
    type *prefix##_from_handle(const psg_tensor_t *h) {                                            \
        return psg_ps_handle_object(h, magic, what);                                               \
    }

#endif
