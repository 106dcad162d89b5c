/* The "ssp" strategy: stale-synchronous parallel (Ho et al., 2013). Each
 * worker applies its own gradient, divided by the number of workers W (so
 * that the W gradients of a clock add up to sync's mean), and counts its
 * clock in a variable on the ps: a [2W] vector of the steps each worker has
 * read and has applied. A worker starts step k only when every worker has
 * applied step k - s - 1 (it is at most s steps ahead of the slowest); with
 * s = 0 it also applies step k only when every worker has read it, which is
 * bulk-synchronous SGD: the same parameters as sync with b = 0. The waits
 * poll the clock vector (a 0.2 ms pause between reads), not a ps-side
 * blocking op. */
#include "psgraph/clock.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "sync/strategy.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_SEC 0.0002
#define DONE_CLOCK 1e9f /* a worker that ended: never the slowest */

/* A [2W] f32 constant with v at i and j (j < 0: only i). */
static psg_endpoint_t one_hot(psg_graph_t *g, const char *name, int w2, int i, int j, float v) {
    psg_shape_t s = psg_shape_1d(w2);
    psg_tensor_t *t = psg_tensor_zeros(PSG_DT_F32, &s);
    if (!t) return PSG_NO_ENDPOINT;
    psg_tensor_f32(t)[i] = v;
    if (j >= 0) psg_tensor_f32(t)[j] = v;
    return psg_const(g, name, &t);
}

/* AssignAdd(clocks, delta) after the nodes ctl[n]. */
static int tick(psg_graph_t *g, const char *name, psg_endpoint_t clocks, psg_endpoint_t delta, int n,
                const int *ctl) {
    psg_node_builder_t *nb = psg_node_begin(g, "AssignAdd", name);
    psg_node_add_input(nb, clocks);
    psg_node_add_input(nb, delta);
    for (int i = 0; i < n; i++)
        psg_node_add_control(nb, ctl[i]);
    return psg_node_finish(nb);
}

/* call 1: the update from the gradients fed back, divided by W, then the apply tick */
static int build_apply(const psg_sync_build_t *b, psg_sync_graph_t *out, psg_endpoint_t clocks,
                       psg_endpoint_t apply_one) {
    psg_graph_t *g = b->g;
    int W = b->cfg->num_workers;
    psg_endpoint_t *scaled = malloc(sizeof *scaled * (size_t)b->n);
    if (!scaled) return psg_error_set("out of memory");
    char name[256];
    for (int i = 0; i < b->n; i++) {
        snprintf(name, sizeof name, "ssp/gradient_%d", i);
        out->calls[0].feeds[i] = psg_placeholder(g, name, PSG_DT_F32, psg_graph_shape(g, b->grads[i]));
        snprintf(name, sizeof name, "ssp/gradient_%d/share", i);
        scaled[i] = psg_scale(g, name, out->calls[0].feeds[i], 1.0 / W);
    }
    int update = -1, rc = psg_graph_status(g);
    if (rc == 0) rc = psg_optimizer_apply_gradients(b->opt, g, b->n, scaled, b->vars, &update);
    free(scaled);
    if (rc < 0) return -1;
    const psg_node_t *grp = psg_graph_node(g, update);
    int nc = psg_node_num_controls(grp), *ctl = malloc(sizeof *ctl * (size_t)(nc + 1));
    if (!ctl) return psg_error_set("out of memory");
    for (int j = 0; j < nc; j++)
        ctl[j] = psg_node_control(grp, j);
    bool pushed = psg_sync_push_device_of(g, clocks);
    int t = tick(g, "ssp/apply_tick", clocks, apply_one, nc, ctl);
    if (pushed) psg_graph_pop_device(g);
    free(ctl);
    out->calls[0].n_feeds = b->n;
    out->calls[0].targets[0] = t;
    out->calls[0].n_targets = 1;
    return t < 0 ? -1 : 0;
}

static int build_ssp(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_graph_t *g = b->g;
    int W = b->cfg->num_workers, r = b->cfg->worker_index;
    if (b->n > PSG_SYNC_CALL_MAX)
        return psg_error_set("%d variables: at most %d", b->n, PSG_SYNC_CALL_MAX);
    psg_shape_t cs = psg_shape_1d(2 * W);
    psg_endpoint_t clocks = psg_variable(g, "ssp/clocks", PSG_DT_F32, &cs,
                                         (psg_initializer_t){"zeros", 0, 0}, false);
    psg_endpoint_t read_one = one_hot(g, "ssp/read_one", 2 * W, r, -1, 1);
    psg_endpoint_t apply_one = one_hot(g, "ssp/apply_one", 2 * W, W + r, -1, 1);
    psg_endpoint_t done = one_hot(g, "ssp/done", 2 * W, r, W + r, DONE_CLOCK);
    if (psg_graph_status(g) < 0) return -1;
    /* call 0, the step: the gradients (fetched), then the read tick after them */
    int *ctl = malloc(sizeof *ctl * (size_t)b->n);
    if (!ctl) return psg_error_set("out of memory");
    for (int i = 0; i < b->n; i++) {
        ctl[i] = b->grads[i].node;
        out->step_fetches[i] = b->grads[i];
    }
    out->n_step_fetches = b->n;
    bool pushed = psg_sync_push_device_of(g, clocks);
    out->train_op = tick(g, "ssp/read_tick", clocks, read_one, b->n, ctl);
    out->close_op = tick(g, "ssp/end", clocks, done, 0, NULL);
    if (pushed) psg_graph_pop_device(g);
    free(ctl);
    if (build_apply(b, out, clocks, apply_one) < 0) return -1;
    /* call 2: the clocks, read on the worker */
    out->calls[1].fetches[0] =
        psg_identity(g, "ssp/clocks/now", psg_read_variable(g, "ssp/clocks/read", clocks));
    out->calls[1].n_fetches = 1;
    out->num_calls = 2;
    out->global_step = psg_sync_read_global_step(g, "ssp/global_step", b->global_step, -1);
    return psg_graph_status(g);
}

/* Polls the clocks until the least of half h (0: read, 1: applied) is at least want;
 * *least gets it, *waited the seconds it took. */
static int wait_clocks(psg_sync_worker_t *w, int h, int64_t want, int64_t *least, double *waited) {
    int W = w->cfg->num_workers;
    double t0 = psg_now_sec(), limit = w->cfg->timeout_ms > 0 ? w->cfg->timeout_ms / 1e3 : 1e18;
    for (;;) {
        psg_tensor_t *c = NULL;
        if (w->run(w->ctx, 2, NULL, &c) < 0) return -1;
        const float *v = psg_tensor_f32(c) + h * W;
        float m = v[0];
        for (int i = 1; i < W; i++)
            m = v[i] < m ? v[i] : m;
        psg_tensor_destroy(&c);
        *least = (int64_t)m;
        double now = psg_now_sec();
        if (*least >= want) {
            *waited += now - t0;
            return 0;
        }
        if (now - t0 > limit)
            return psg_error_set("ssp: worker %d waited %.1f s for every worker to have %s step "
                                 "%lld (the slowest is at %lld)",
                                 w->cfg->worker_index, limit, h ? "applied" : "read",
                                 (long long)want - 1, (long long)*least);
        nanosleep(&(struct timespec){0, (long)(POLL_SEC * 1e9)}, NULL);
    }
}

static int step_ssp(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    const psg_sync_graph_t *sg = w->sg;
    int64_t k = w->steps, s = w->cfg->opt.staleness, least = 0, read_least = 0;
    double t0 = psg_now_sec(), waited = 0;
    memset(st, 0, sizeof *st);
    /* at most s steps ahead of the slowest: every worker applied step k - s - 1 */
    if (wait_clocks(w, 1, k - s, &least, &waited) < 0) return -1;
    psg_tensor_t *fetched[1 + PSG_SYNC_CALL_MAX] = {0};
    int rc = w->run(w->ctx, 0, NULL, fetched);
    /* s = 0: no update of step k before every worker read it */
    if (rc == 0 && s == 0) rc = wait_clocks(w, 0, k + 1, &read_least, &waited);
    if (rc == 0) rc = w->run(w->ctx, 1, fetched + 1, NULL);
    for (int i = 1; i < 1 + PSG_SYNC_CALL_MAX; i++)
        psg_tensor_destroy(&fetched[i]);
    if (rc < 0) {
        psg_tensor_destroy(&fetched[0]);
        return -1;
    }
    *loss = fetched[0];
    st->local_step = k;
    st->next_step = k + 1;
    st->used = true;
    st->num_accepted = st->num_vars = sg->num_vars;
    st->step_sec = psg_now_sec() - t0;
    st->wait_sec = waited;
    st->compute_sec = st->step_sec - waited;
    st->staleness = k - least > 0 ? k - least : 0; /* the slowest's steps this read missed */
    w->local_step = k + 1;
    return 0;
}

static const char *const ssp_options[] = {"--staleness", NULL};

const psg_sync_strategy_t psg_sync_strategy_ssp = {
    .name = "ssp",
    .summary = "stale-synchronous: each worker applies its gradient / W at once, and waits "
               "when more than S steps ahead of the slowest",
    .options = ssp_options,
    .build = build_ssp,
    .step = step_ssp,
};
