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

#endif
