/* The op registry: every op family lists its defs in a NULL-terminated array;
 * this file knows the families. Adding a family adds one line below. */
#include "psgraph/op.h"

#include <string.h>

extern const psg_op_def_t *const psg_array_ops[];
extern const psg_op_def_t *const psg_math_ops[];
extern const psg_op_def_t *const psg_nn_ops[];
extern const psg_op_def_t *const psg_train_ops[];
extern const psg_op_def_t *const psg_sendrecv_ops[];
extern const psg_op_def_t *const psg_sync_ops[];
extern const psg_op_def_t *const psg_compress_ops[];
extern const psg_op_def_t *const psg_sparse_ops[];
extern const psg_op_def_t *const psg_sparse_apply_ops[];

static const psg_op_def_t *const *const families[] = {
    psg_array_ops,
    psg_math_ops,
    psg_nn_ops,
    psg_train_ops,
    psg_sendrecv_ops,
    psg_sync_ops,
    psg_compress_ops,
    psg_sparse_ops,
    psg_sparse_apply_ops,
};

#define NUM_FAMILIES ((int)(sizeof families / sizeof families[0]))

const psg_op_def_t *psg_op_lookup(const char *name) {
    for (int f = 0; f < NUM_FAMILIES; f++)
        for (const psg_op_def_t *const *d = families[f]; *d; d++)
            if (strcmp((*d)->name, name) == 0) return *d;
    return NULL;
}

int psg_op_count(void) {
    int n = 0;
    for (int f = 0; f < NUM_FAMILIES; f++)
        for (const psg_op_def_t *const *d = families[f]; *d; d++) n++;
    return n;
}

const psg_op_def_t *psg_op_at(int i) {
    for (int f = 0; f < NUM_FAMILIES; f++)
        for (const psg_op_def_t *const *d = families[f]; *d; d++)
            if (i-- == 0) return *d;
    return NULL;
}
