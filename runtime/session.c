/* The single-process session: a thread pool, a resource manager and cached
 * plans. The distributed session (worker/) wraps the same plans per task. */
#include "runtime/executor.h"
#include "psgraph/error.h"
#include "psgraph/session.h"

#include <stdlib.h>

struct psg_session {
    psg_graph_t *g;
    psg_threadpool_t *pool;
    psg_resource_mgr_t *rm;
    bool owns_rm;
    int64_t next_step;
    psg_node_timing_fn on_node; /* the timeline's hook, NULL when off */
    void *on_node_ctx;
    bool sync_gpu; /* the hook's GPU nodes wait for their kernels */
};

struct psg_callable {
    psg_session_t *s;
    psg_plan_t *plan;
};

psg_session_t *psg_session_new(psg_graph_t *g, const psg_session_options_t *opt,
                               psg_resource_mgr_t *rm) {
    psg_session_t *s = calloc(1, sizeof *s);
    if (!s) {
        psg_error_set("out of memory");
        return NULL;
    }
    int threads = opt && opt->num_threads > 0 ? opt->num_threads : 1;
    s->g = g;
    s->pool = psg_threadpool_new(threads);
    s->rm = rm ? rm : psg_resource_mgr_new();
    s->owns_rm = !rm;
    if (!s->pool || !s->rm) {
        psg_session_destroy(&s);
        return NULL;
    }
    return s;
}

void psg_session_destroy(psg_session_t **sp) {
    if (!sp || !*sp) return;
    psg_session_t *s = *sp;
    *sp = NULL;
    psg_threadpool_destroy(&s->pool);
    if (s->owns_rm) psg_resource_mgr_destroy(&s->rm);
    free(s);
}

psg_resource_mgr_t *psg_session_resources(psg_session_t *s) {
    return s->rm;
}

psg_callable_t *psg_session_make_callable(psg_session_t *s, int n_feeds,
                                          const psg_endpoint_t *feeds, int n_fetches,
                                          const psg_endpoint_t *fetches, int n_targets,
                                          const int *targets) {
    if (psg_graph_error(s->g)) {
        psg_error_set("the graph has a build error: %s", psg_graph_error(s->g));
        return NULL;
    }
    psg_callable_t *c = calloc(1, sizeof *c);
    if (!c) {
        psg_error_set("out of memory");
        return NULL;
    }
    c->s = s;
    c->plan = psg_plan_new(s->g, n_feeds, feeds, n_fetches, fetches, n_targets, targets);
    if (!c->plan) {
        free(c);
        return NULL;
    }
    return c;
}

void psg_callable_destroy(psg_callable_t **cp) {
    if (!cp || !*cp) return;
    psg_plan_destroy(&(*cp)->plan);
    free(*cp);
    *cp = NULL;
}

int psg_callable_run(psg_callable_t *c, psg_tensor_t *const *feed_values, psg_tensor_t **fetched) {
    psg_session_t *s = c->s;
    psg_run_env_t env = {.pool = s->pool,
                         .rm = s->rm,
                         .step_id = s->next_step++,
                         .on_node = s->on_node,
                         .on_node_ctx = s->on_node_ctx,
                         .sync_gpu = s->sync_gpu};
    return psg_plan_run_with(c->plan, &env, feed_values, fetched);
}

void psg_session_set_node_hook(psg_session_t *s, psg_node_timing_fn fn, void *ctx) {
    s->on_node = fn;
    s->on_node_ctx = fn ? ctx : NULL;
}

void psg_session_set_gpu_sync(psg_session_t *s, bool on) {
    s->sync_gpu = on;
}

void psg_session_set_spin(psg_session_t *s, int us) {
    psg_threadpool_set_spin(s->pool, us);
}

int psg_session_run(psg_session_t *s, int n_feeds, const psg_endpoint_t *feeds,
                    psg_tensor_t *const *feed_values, int n_fetches, const psg_endpoint_t *fetches,
                    psg_tensor_t **fetched, int n_targets, const int *targets) {
    psg_callable_t *c =
        psg_session_make_callable(s, n_feeds, feeds, n_fetches, fetches, n_targets, targets);
    if (!c) return -1;
    int rc = psg_callable_run(c, feed_values, fetched);
    psg_callable_destroy(&c);
    return rc;
}

int psg_session_run_init(psg_session_t *s) {
    int n;
    const int *init = psg_graph_collection(s->g, "init", &n);
    if (n == 0) return 0;
    return psg_session_run(s, 0, NULL, NULL, 0, NULL, NULL, n, init);
}
