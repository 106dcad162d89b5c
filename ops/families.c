/* The built-in op families, registered into the op registry (graph/op_registry.c)
 * when the library loads. Adding a family adds one line below. */
#include "psgraph/error.h"
#include "psgraph/op.h"

#include <stddef.h>

extern const psg_op_def_t *const psg_array_ops[];
extern const psg_op_def_t *const psg_math_ops[];
extern const psg_op_def_t *const psg_nn_ops[];
extern const psg_op_def_t *const psg_train_ops[];
extern const psg_op_def_t *const psg_sendrecv_ops[];
extern const psg_op_def_t *const psg_sync_ops[];
extern const psg_op_def_t *const psg_compress_ops[];
extern const psg_op_def_t *const psg_sparse_ops[];
extern const psg_op_def_t *const psg_sparse_apply_ops[];
extern const psg_op_def_t *const psg_compare_ops[];

__attribute__((constructor)) static void register_families(void) {
    const psg_op_def_t *const *const families[] = {
        psg_array_ops, psg_math_ops,     psg_nn_ops,     psg_train_ops,        psg_sendrecv_ops,
        psg_sync_ops,  psg_compress_ops, psg_sparse_ops, psg_sparse_apply_ops, psg_compare_ops,
    };
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        PSG_ASSERT(psg_op_register_family(families[f]) == 0); /* a name twice: a broken build */
}
