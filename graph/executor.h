/* The executor: a plan is one pruned subgraph (for given feeds, fetches and
 * targets) prepared once and run many times. Internal to the library; the
 * session (session.h) and the task server build on it. */
#ifndef PSGRAPH_GRAPH_EXECUTOR_H
#define PSGRAPH_GRAPH_EXECUTOR_H

#include "psgraph/graph.h"
#include "psgraph/resource.h"
#include "psgraph/session.h"
#include "psgraph/threadpool.h"

typedef struct psg_plan psg_plan_t;

/* Prunes g to what the fetches and targets need, cut at the fed endpoints.
 * Fails naming the node if a needed placeholder is not fed, a needed op has
 * no CPU kernel, or the needed part has a cycle. The graph must outlive the
 * plan; nodes added to it later are not seen by the plan. */
psg_plan_t *psg_plan_new(const psg_graph_t *g, int n_feeds, const psg_endpoint_t *feeds,
                         int n_fetches, const psg_endpoint_t *fetches, int n_targets,
                         const int *targets);
void psg_plan_destroy(psg_plan_t **p);

/* Number of nodes the plan executes (fed nodes excluded). */
int psg_plan_num_nodes(const psg_plan_t *p);

/* Runs the plan once. Not reentrant: one run of a plan at a time. fetched[i]
 * gets a new reference (the caller owns it). On failure returns -1 with the
 * error "node 'name' (Op): why", no fetched tensors, and no leaked buffers. */
int psg_plan_run(psg_plan_t *p, psg_threadpool_t *pool, psg_resource_mgr_t *rm, int64_t step_id,
                 psg_tensor_t *const *feed_values, psg_tensor_t **fetched);

struct psg_rendezvous;

/* Where a run happens: what psg_plan_run takes, and the rendezvous that
 * the Send/Recv kernels of a partition use (NULL: none; they then fail). */
typedef struct {
    psg_threadpool_t *pool;
    psg_resource_mgr_t *rm;
    int64_t step_id;
    struct psg_rendezvous *rendezvous;
    /* Optional, NULL: off (the default; no clock is read then). Called once per
     * executed node, after it finished, with its start and end times. */
    psg_node_timing_fn on_node;
    void *on_node_ctx;
} psg_run_env_t;

/* As psg_plan_run, in env. When a node fails and env->rendezvous is set,
 * the step is aborted there (psg_rendezvous_abort_step) so that the Recvs
 * of this and the other partitions of the step fail at once, not by timeout. */
int psg_plan_run_with(psg_plan_t *p, const psg_run_env_t *env, psg_tensor_t *const *feed_values,
                      psg_tensor_t **fetched);

#endif
