/* Running a graph in this process: a session holds the runtime (thread pool,
 * resource manager) and runs (sub)graphs for fetches, feeds and targets.
 * A callable is a pruned, prepared plan for one signature, run many times:
 * the training loop's fast path. The distributed session comes later. */
#ifndef PSGRAPH_SESSION_H
#define PSGRAPH_SESSION_H

#include "psgraph/graph.h"
#include "psgraph/resource.h"

typedef struct psg_session psg_session_t;
typedef struct psg_callable psg_callable_t;

typedef struct {
    int num_threads; /* all of psgraph's compute threads, inter- and intra-op; <= 0: 1 */
} psg_session_options_t;

/* A session over g (borrowed: it must outlive the session; nodes may be added
 * between runs). rm: a resource manager to share (borrowed), or NULL for one
 * of its own. NULL on failure. */
psg_session_t *psg_session_new(psg_graph_t *g, const psg_session_options_t *opt,
                               psg_resource_mgr_t *rm);
void psg_session_destroy(psg_session_t **s);
psg_resource_mgr_t *psg_session_resources(psg_session_t *s);

/* Prepares a plan: the nodes needed by the fetches and targets, cut at the
 * fed endpoints. Fails (naming the node) if a needed placeholder is not fed,
 * a needed op has no CPU kernel, or the graph has a cycle. */
psg_callable_t *psg_session_make_callable(psg_session_t *s, int n_feeds,
                                          const psg_endpoint_t *feeds, int n_fetches,
                                          const psg_endpoint_t *fetches, int n_targets,
                                          const int *targets);
void psg_callable_destroy(psg_callable_t **c);

/* Runs one step. feed_values[i] feeds feeds[i] (borrowed). fetched[i] receives
 * a new reference the caller owns (NULL on failure). Returns 0, or -1 with the
 * error "node 'name' (Op): why". On failure no fetched tensor is returned. */
int psg_callable_run(psg_callable_t *c, psg_tensor_t *const *feed_values, psg_tensor_t **fetched);

/* One-shot run (makes and caches nothing; for tests and init). */
int psg_session_run(psg_session_t *s, int n_feeds, const psg_endpoint_t *feeds,
                    psg_tensor_t *const *feed_values, int n_fetches, const psg_endpoint_t *fetches,
                    psg_tensor_t **fetched, int n_targets, const int *targets);

/* A timing hook (the timeline): called once per executed node, after it
 * finished, on the thread that finished it, with the node's name, op type,
 * the run's step id, its start and end times (CLOCK_MONOTONIC, ns) and, for a
 * Send or a Recv, the tensor bytes it sent or received (0 for other nodes).
 * Must be thread-safe: nodes of one step finish on several threads. */
typedef void (*psg_node_timing_fn)(void *ctx, const char *node, const char *op, int64_t step_id,
                                   int64_t start_ns, int64_t end_ns, int64_t bytes);

/* Sets (fn != NULL) or clears the timing hook of the callables of s for the
 * runs that start after this call. Off by default, and free when off. */
void psg_session_set_node_hook(psg_session_t *s, psg_node_timing_fn fn, void *ctx);
/* With a hook: each node on a GPU waits for its kernels before its end time is
 * read, so the hook sees device times (a per-op profile; the steps are slower,
 * by a synchronisation a GPU node). Off by default. */
void psg_session_set_gpu_sync(psg_session_t *s, bool on);
/* How long s's idle compute threads poll for work before they sleep
 * (psg_threadpool_set_spin); 0, the default: they sleep at once. */
void psg_session_set_spin(psg_session_t *s, int us);

/* Runs every node of the graph's "init" collection. */
int psg_session_run_init(psg_session_t *s);

#endif
