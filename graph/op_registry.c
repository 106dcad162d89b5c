/* The op registry: the table of op families that psg_op_lookup searches.
 * A family is a NULL-terminated array of defs; ops/families.c registers the
 * built-in ones when the library loads, a program may add its own. Not the
 * ops themselves (ops/). */
#include "psgraph/error.h"
#include "psgraph/op.h"

#include <stdatomic.h>
#include <string.h>

#define MAX_FAMILIES 32

static const psg_op_def_t *const *families[MAX_FAMILIES];
static atomic_int num_families; /* published after families[k] is written */

const psg_op_def_t *psg_op_lookup(const char *name) {
    int n = atomic_load_explicit(&num_families, memory_order_acquire);
    for (int f = 0; f < n; f++)
        for (const psg_op_def_t *const *d = families[f]; *d; d++)
            if (strcmp((*d)->name, name) == 0) return *d;
    return NULL;
}

int psg_op_count(void) {
    int n = atomic_load_explicit(&num_families, memory_order_acquire), count = 0;
    for (int f = 0; f < n; f++)
        for (const psg_op_def_t *const *d = families[f]; *d; d++) count++;
    return count;
}

const psg_op_def_t *psg_op_at(int i) {
    int n = atomic_load_explicit(&num_families, memory_order_acquire);
    for (int f = 0; f < n; f++)
        for (const psg_op_def_t *const *d = families[f]; *d; d++)
            if (i-- == 0) return *d;
    return NULL;
}

int psg_op_register_family(const psg_op_def_t *const *defs) {
    static atomic_flag busy = ATOMIC_FLAG_INIT;
    while (atomic_flag_test_and_set(&busy)) {
    }
    int rc = 0, n = atomic_load(&num_families);
    for (const psg_op_def_t *const *d = defs; *d && rc == 0; d++) {
        if (!(*d)->name || !(*d)->infer)
            rc = psg_error_set("op family: a def without a name or an infer function");
        else if (psg_op_lookup((*d)->name))
            rc = psg_error_set("op '%s' is registered already", (*d)->name);
    }
    if (rc == 0 && n == MAX_FAMILIES)
        rc = psg_error_set("op registry: more than %d families", MAX_FAMILIES);
    if (rc == 0) {
        families[n] = defs;
        atomic_store_explicit(&num_families, n + 1, memory_order_release);
    }
    atomic_flag_clear(&busy);
    return rc;
}
