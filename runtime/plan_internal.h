/* The layout of an executor's plan, shared by runtime/executor.c (building and running it)
 * and runtime/resource_groups.c (which nodes touch which resource). Private to runtime/. */
#ifndef PSGRAPH_RUNTIME_PLAN_INTERNAL_H
#define PSGRAPH_RUNTIME_PLAN_INTERNAL_H

#include "runtime/executor.h"
#include "graph/graph_layout.h"
#include "psgraph/op.h"

#include <stdbool.h>

typedef struct {
    const psg_node_t *node;
    int slot_base;    /* first output slot */
    int *input_slots; /* one per input */
    int *consumers;   /* plan-local ids of nodes that wait on this one (with repeats removed) */
    int num_consumers;
    int num_deps; /* distinct producers + control inputs inside the plan */
    bool fed;     /* not executed: its outputs are fed */
    int device;   /* where its kernel's tensors live: PSG_DEVICE_HOST or PSG_DEVICE_GPU(k) */
    psg_kernel_fn kernel;
    void *params; /* the def's prepare struct, or NULL */
    void *state;  /* the def's kernel state, or NULL */
    int *groups;  /* the resource groups whose state it touches (see psg_run_order_t) */
    int num_groups;
} plan_node_t;

struct psg_plan {
    const psg_graph_t *g;
    plan_node_t *nodes; /* executed and fed nodes, in topological order */
    int num_nodes, num_exec;
    int num_slots;
    int *slot_uses; /* consumers + fetches per slot */
    int n_feeds, n_fetches;
    int *feed_slots, *fetch_slots;
    psg_endpoint_t *feeds; /* what each feed feeds, for the per-step dtype and shape check */
    int *initial_ready;
    int num_initial_ready;
    /* Resource groups: the executed nodes that touch one resource (a variable,
     * an accumulator, a queue), CSR: group g's nodes are
     * group_nodes[group_start[g] .. group_start[g + 1]). */
    int num_groups;
    int *group_start, *group_nodes;
    bool can_overlap; /* every stateful node is a handle, Send, Recv or a user of a group */
    bool host_only;   /* no node on a GPU: any thread may run its kernels */
};

/* Groups p's executed nodes by the resource they touch and sets p->can_overlap.
 * Returns 0, or -1 with the error set (out of memory). */
int psg_plan_find_resource_groups(psg_plan_t *p);

#endif
