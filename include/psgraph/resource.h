/* The resource manager: state that outlives a step and is shared by name
 * across the graphs that run in one process (variables first; accumulators
 * and queues come with sync replicas). Not thread-safe for one resource's
 * contents: update ops on a variable are ordered by the graph. */
#ifndef PSGRAPH_RESOURCE_H
#define PSGRAPH_RESOURCE_H

#include "psgraph/tensor.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct psg_resource_mgr psg_resource_mgr_t;

/* A variable: a named tensor updated in place. */
typedef struct psg_variable {
    char *name;
    psg_dtype_t dtype;
    psg_shape_t shape;
    psg_tensor_t *value; /* allocated at creation, contents valid once initialized */
    bool initialized;
    pthread_mutex_t lock; /* held by update ops that must not interleave */
} psg_variable_t;

psg_resource_mgr_t *psg_resource_mgr_new(void);
void psg_resource_mgr_destroy(psg_resource_mgr_t **rm);

/* The variable `name`, created (uninitialized) with dtype and shape when
 * absent. Fails if it exists with another dtype or shape. The manager owns it. */
psg_variable_t *psg_resource_variable(psg_resource_mgr_t *rm, const char *name, psg_dtype_t dt,
                                      const psg_shape_t *shape);
/* The variable `name`, or NULL (no error set). */
psg_variable_t *psg_resource_find_variable(psg_resource_mgr_t *rm, const char *name);
/* Number of variables and the i-th one, in creation order (for inspect and checkpoints). */
int psg_resource_num_variables(psg_resource_mgr_t *rm);
psg_variable_t *psg_resource_variable_at(psg_resource_mgr_t *rm, int i);

#endif
