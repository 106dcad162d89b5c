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
 * A node assigned to GPU k runs its CUDA kernel there (its CPU kernel on the
 * host when the op has none). Fails naming the node if a needed placeholder
 * is not fed, a needed op has no CPU kernel, a node is assigned to a GPU
 * this process lacks, or the needed part has a cycle. The graph must outlive the
 * plan; nodes added to it later are not seen by the plan. */
psg_plan_t *psg_plan_new(const psg_graph_t *g, int n_feeds, const psg_endpoint_t *feeds,
                         int n_fetches, const psg_endpoint_t *fetches, int n_targets,
                         const int *targets);
void psg_plan_destroy(psg_plan_t **p);

/* Number of nodes the plan executes (fed nodes excluded). */
int psg_plan_num_nodes(const psg_plan_t *p);
/* The bytes the plan holds (its node table, slots, consumer lists, kernel parameters). */
size_t psg_plan_footprint(const psg_plan_t *p);

/* Runs the plan once. Runs of one plan may overlap only with tickets
 * (psg_run_env_t.ticket); without, one at a time. fetched[i]
 * gets a new reference (the caller owns it). On failure returns -1 with the
 * error "node 'name' (Op): why", no fetched tensors, and no leaked buffers. */
int psg_plan_run(psg_plan_t *p, psg_threadpool_t *pool, psg_resource_mgr_t *rm, int64_t step_id,
                 psg_tensor_t *const *feed_values, psg_tensor_t **fetched);

struct psg_rendezvous;

/* Overlapping runs of one plan, ordered per resource. A run of a plan whose
 * state lives only in resources (variables, accumulators, queues: every
 * stateful node a handle op, a Send or Recv, or a synchronous user of
 * handles) may start before the run before it ended: each of its nodes that
 * touches a resource waits until every node of the run before that touches
 * the same resource is done. So each resource sees the runs one after the
 * other, in the order their tickets were taken, while a run's first reads
 * need not wait for the last run's every update (docs/engine.md). */
typedef struct psg_run_order psg_run_order_t;
typedef struct psg_run_ticket psg_run_ticket_t;

/* Whether the plan's runs can overlap (see above). */
bool psg_plan_can_overlap(const psg_plan_t *p);

/* The order of p's runs; fails when p cannot overlap. p must outlive it,
 * and every ticket must be released before it is destroyed. */
psg_run_order_t *psg_run_order_new(const psg_plan_t *p);
void psg_run_order_destroy(psg_run_order_t **o);

/* A place in the order, taken when a run is asked for (the order of the
 * tickets is the order in which each resource sees the runs). NULL with the
 * error when out of memory. */
psg_run_ticket_t *psg_run_order_take(psg_run_order_t *o);

/* After the run with the ticket ended, or instead of it: the runs after it
 * wait no more for it. */
void psg_run_ticket_release(psg_run_ticket_t **t);

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
    /* With on_node: a node on a GPU waits for its kernels before its end time is read,
     * so its time is the device's (a profile; the step is slower). */
    bool sync_gpu;
    /* Optional, NULL: the caller runs the plan once at a time. Else a ticket
     * of the plan's order, which the caller releases after the run. */
    psg_run_ticket_t *ticket;
    /* Optional, NULL: none. The budget (core/membudget.h) that every buffer the run's
     * kernels make is charged to: a node that would pass it fails, naming it. */
    struct psg_membudget *budget;
} psg_run_env_t;

/* As psg_plan_run, in env. When a node fails and env->rendezvous is set,
 * the step is aborted there (psg_rendezvous_abort_step) so that the Recvs
 * of this and the other partitions of the step fail at once, not by timeout. */
int psg_plan_run_with(psg_plan_t *p, const psg_run_env_t *env, psg_tensor_t *const *feed_values,
                      psg_tensor_t **fetched);

/* A run that holds no thread while it waits (a Recv, an accumulator take, a token
 * dequeue): a server's runner drives it while it has nodes to run, and is free meanwhile.
 * psg_plan_run_with is these three on one thread, which it blocks. */
typedef struct psg_run psg_run_t;
/* Called once (from any thread, holding none of the run's locks) after psg_run_continue
 * returned 0, when the run has nodes to run again or is over: call psg_run_continue. */
typedef void (*psg_run_wake_fn)(void *ctx);
/* Starts a run of p in env (NULL with the error set on a bad feed, or out of memory);
 * nothing runs yet. wake NULL: psg_run_continue blocks until the run is over. */
psg_run_t *psg_run_start(psg_plan_t *p, const psg_run_env_t *env, psg_tensor_t *const *feed_values,
                         psg_run_wake_fn wake, void *wake_ctx);
/* Runs what is ready on the calling thread: 1 when the run is over (psg_run_finish), 0 when
 * it waits (the wake will come; the run may be driven by another thread from then on). */
int psg_run_continue(psg_run_t *r);
/* The run's result as psg_plan_run's (fetched[n_fetches]; NULL: dropped), and frees it;
 * *r becomes NULL. */
int psg_run_finish(psg_run_t **r, psg_tensor_t **fetched);

#endif
