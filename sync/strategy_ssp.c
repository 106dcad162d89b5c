/* The "ssp" strategy: stale-synchronous parallel (Ho et al., 2013). Each
 * worker applies its own gradient, divided by the number of live workers W
 * (ssp/share = 1 / W, set by the chief as workers are lost or join; so that
 * the W gradients of a clock add up to sync's mean), and counts its
 * steps read and applied on the ps's clock (SspClock, ops/state/ssp_clock.c).
 * A worker starts step k only when every worker has applied step k - s - 1
 * (it is at most s steps ahead of the slowest); with s = 0 it also applies
 * step k only when every worker has read it, which is bulk-synchronous SGD:
 * the same parameters as sync with b = 0. A wait is one call that the ps
 * answers when the slowest clock gets there (SspClockWait: no polling, no
 * thread held, the strategy's timeout as its deadline). */
#include "psgraph/clock.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "ops/state/sync_resources.h"
#include "sync/strategy.h"

#include <stdlib.h>
#include <string.h>

#define DONE_CLOCK ((int64_t)1 << 40) /* a worker that ended: never the slowest */

enum { HALF_READ, HALF_APPLIED };

/* The clock's reset, ordered before the initializer of a variable (ssp/clock_started), so
 * no worker ticks before it: a worker starts once every variable is initialized. */
static int reset_with_init(psg_graph_t *g, psg_endpoint_t clock) {
    psg_shape_t scalar = psg_shape_scalar();
    psg_endpoint_t h = psg_var_handle(g, "ssp/clock_started", PSG_DT_F32, &scalar);
    int reset = psg_ssp_clock_reset_op(g, "ssp/clock_reset", clock);
    psg_node_builder_t *nb = psg_node_begin(g, "Assign", "ssp/clock_started/init");
    psg_node_add_input(nb, h);
    psg_node_add_input(nb, psg_const_scalar(g, "ssp/clock_started/one", 1));
    psg_node_add_control(nb, reset);
    int assign = psg_node_finish(nb);
    if (assign < 0) return -1;
    psg_graph_add_to_collection(g, "variables", h.node);
    psg_graph_add_to_collection(g, "init", assign);
    return psg_graph_status(g);
}

/* ssp/share, beside the clock: each gradient's share of a clock's update, 1 / W (W the
 * live workers: the chief's set_live_op sets it), initialized to 1 / the cluster's workers. */
static psg_endpoint_t share_var(psg_graph_t *g, int W, psg_endpoint_t clock) {
    psg_shape_t scalar = psg_shape_scalar();
    bool pushed = psg_sync_push_device_of(g, clock);
    psg_endpoint_t h = psg_var_handle(g, "ssp/share", PSG_DT_F32, &scalar);
    int init = psg_assign(g, "ssp/share/init", h, psg_const_scalar(g, "ssp/share/all", 1.0f / W));
    if (pushed) psg_graph_pop_device(g);
    if (init < 0) return h;
    psg_graph_add_to_collection(g, "variables", h.node);
    psg_graph_add_to_collection(g, "init", init);
    return h;
}

/* The chief's: the live workers (mask, i32 [W]) are never the slowest, and their share. */
static int set_live(psg_graph_t *g, psg_sync_graph_t *out, psg_endpoint_t clock,
                    psg_endpoint_t share, int W) {
    psg_shape_t ws = psg_shape_1d(W);
    out->live_mask = psg_placeholder(g, "ssp/live", PSG_DT_I32, &ws);
    bool pushed = psg_sync_push_device_of(g, clock);
    int ops[2];
    ops[0] = psg_ssp_clock_set_live_op(g, "ssp/set_live", clock, out->live_mask);
    /* the chief is one of them: never 0 */
    psg_endpoint_t live =
        psg_sum(g, "ssp/set_live/count",
                psg_cast(g, "ssp/set_live/mask", out->live_mask, PSG_DT_F32), 0, NULL, false);
    ops[1] = psg_assign(g, "ssp/set_live/share", share,
                        psg_div(g, "ssp/set_live/one_of", psg_const_scalar(g, "ssp/one", 1), live));
    out->set_live_op = psg_group(g, "ssp/set_live_all", 2, ops);
    if (pushed) psg_graph_pop_device(g);
    return psg_graph_status(g);
}

/* call 1: the update from the gradients fed back, times ssp/share, then the apply tick */
static int build_apply(const psg_sync_build_t *b, psg_sync_graph_t *out, psg_endpoint_t clock,
                       psg_endpoint_t share) {
    psg_graph_t *g = b->g;
    psg_endpoint_t *scaled = malloc(sizeof *scaled * (size_t)b->n);
    if (!scaled) return psg_error_set("out of memory");
    bool pushed = psg_sync_push_device_of(g, clock);
    psg_endpoint_t each = psg_read_variable(g, "ssp/share/read", share);
    if (pushed) psg_graph_pop_device(g);
    char name[256];
    for (int i = 0; i < b->n; i++) {
        snprintf(name, sizeof name, "ssp/gradient_%d", i);
        out->calls[0].feeds[i] =
            psg_placeholder(g, name, PSG_DT_F32, psg_graph_shape(g, b->grads[i]));
        snprintf(name, sizeof name, "ssp/gradient_%d/share", i);
        scaled[i] = psg_mul(g, name, out->calls[0].feeds[i], each);
    }
    int update = -1, rc = psg_graph_status(g);
    if (rc == 0) rc = psg_optimizer_apply_gradients(b->opt, g, b->n, scaled, b->vars, &update);
    free(scaled);
    if (rc < 0) return -1;
    const psg_node_t *grp = psg_graph_node(g, update);
    int nc = psg_node_num_controls(grp), *ctl = malloc(sizeof *ctl * (size_t)(nc + 1));
    if (!ctl) return psg_error_set("out of memory");
    for (int j = 0; j < nc; j++) ctl[j] = psg_node_control(grp, j);
    pushed = psg_sync_push_device_of(g, clock);
    int t = psg_ssp_clock_tick_op(g, "ssp/apply_tick", clock, b->cfg->worker_index, HALF_APPLIED, 1,
                                  nc, ctl);
    if (pushed) psg_graph_pop_device(g);
    free(ctl);
    out->calls[0].n_feeds = b->n;
    out->calls[0].targets[0] = t;
    out->calls[0].n_targets = 1;
    return t < 0 ? -1 : 0;
}

/* call k (2: applied, 3: read): feed the step every worker's clock `half` must reach;
 * fetches the least clock and the seconds waited, on the worker. */
static void build_wait(const psg_sync_build_t *b, psg_sync_graph_t *out, psg_endpoint_t clock,
                       int half) {
    psg_graph_t *g = b->g;
    const char *what = half == HALF_APPLIED ? "applied" : "read";
    char name[128];
    psg_shape_t scalar = psg_shape_scalar();
    int k = half == HALF_APPLIED ? 1 : 2;
    snprintf(name, sizeof name, "ssp/wait_%s/want", what);
    psg_endpoint_t want = psg_placeholder(g, name, PSG_DT_I64, &scalar);
    bool pushed = psg_sync_push_device_of(g, clock);
    snprintf(name, sizeof name, "ssp/wait_%s", what);
    psg_endpoint_t least =
        psg_ssp_clock_wait_op(g, name, clock, want, b->cfg->worker_index, half, b->timeout_ms);
    if (pushed) psg_graph_pop_device(g);
    out->calls[k].feeds[0] = want;
    out->calls[k].n_feeds = 1;
    snprintf(name, sizeof name, "ssp/wait_%s/least", what);
    out->calls[k].fetches[0] = psg_identity(g, name, least);
    snprintf(name, sizeof name, "ssp/wait_%s/seconds", what);
    out->calls[k].fetches[1] = psg_identity(g, name, (psg_endpoint_t){least.node, 1});
    out->calls[k].n_fetches = 2;
}

static int build_ssp(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_graph_t *g = b->g;
    int W = b->cfg->num_workers, r = b->cfg->worker_index;
    if (b->n > PSG_SYNC_CALL_MAX)
        return psg_error_set("%d variables: at most %d", b->n, PSG_SYNC_CALL_MAX);
    bool pushed = psg_sync_push_device_of(g, b->global_step); /* the clock beside the global step */
    psg_endpoint_t clock = psg_ssp_clock_op(g, "ssp/clock", W);
    int rc = psg_endpoint_valid(clock) ? reset_with_init(g, clock) : -1;
    /* call 0, the step: the gradients (fetched), then the read tick after them */
    int *ctl = malloc(sizeof *ctl * (size_t)b->n);
    if (rc == 0 && !ctl) rc = psg_error_set("out of memory");
    for (int i = 0; rc == 0 && i < b->n; i++) {
        ctl[i] = b->grads[i].node;
        out->step_fetches[i] = b->grads[i];
    }
    if (rc == 0) {
        out->n_step_fetches = b->n;
        out->train_op =
            psg_ssp_clock_tick_op(g, "ssp/read_tick", clock, r, HALF_READ, 1, b->n, ctl);
        int ends[2] = {
            psg_ssp_clock_tick_op(g, "ssp/end_read", clock, r, HALF_READ, DONE_CLOCK, 0, NULL),
            psg_ssp_clock_tick_op(g, "ssp/end_applied", clock, r, HALF_APPLIED, DONE_CLOCK, 0,
                                  NULL)};
        out->close_op = psg_group(g, "ssp/end", 2, ends);
    }
    if (pushed) psg_graph_pop_device(g);
    free(ctl);
    psg_endpoint_t share = rc == 0 ? share_var(g, W, clock) : PSG_NO_ENDPOINT;
    if (rc == 0) rc = psg_graph_status(g);
    if (rc == 0 && r == 0) rc = set_live(g, out, clock, share, W); /* the chief */
    if (rc < 0 || build_apply(b, out, clock, share) < 0) return -1;
    build_wait(b, out, clock, HALF_APPLIED);
    build_wait(b, out, clock, HALF_READ);
    out->num_calls = 3;
    out->global_step = psg_sync_read_global_step(g, "ssp/global_step", b->global_step, -1);
    return psg_graph_status(g);
}

/* Waits on the ps until every worker's clock `half` is at least want (call 2 or 3);
 * *least gets the least clock, *waited the seconds added. */
static int wait_clocks(psg_sync_worker_t *w, int half, int64_t want, int64_t *least,
                       double *waited) {
    psg_tensor_t *feed = psg_tensor_scalar_i64(want), *got[2] = {0};
    if (!feed) return psg_error_set("out of memory");
    int rc = w->run(w->ctx, half == HALF_APPLIED ? 2 : 3, &feed, got);
    psg_tensor_destroy(&feed);
    if (rc == 0) {
        *least = psg_tensor_i64(got[0])[0];
        *waited += psg_tensor_f32(got[1])[0];
    }
    psg_tensor_destroy(&got[0]);
    psg_tensor_destroy(&got[1]);
    return rc;
}

static int step_ssp(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    const psg_sync_graph_t *sg = w->sg;
    int64_t k = w->steps, s = w->cfg->opt.staleness, least = 0, read_least = 0;
    double t0 = psg_now_sec(), waited = 0;
    memset(st, 0, sizeof *st);
    /* at most s steps ahead of the slowest: every worker applied step k - s - 1 */
    if (wait_clocks(w, HALF_APPLIED, k - s, &least, &waited) < 0) return -1;
    psg_tensor_t *fetched[1 + PSG_SYNC_CALL_MAX] = {0};
    int rc = w->run(w->ctx, 0, NULL, fetched);
    /* s = 0: no update of step k before every worker read it */
    if (rc == 0 && s == 0) rc = wait_clocks(w, HALF_READ, k + 1, &read_least, &waited);
    if (rc == 0) rc = w->run(w->ctx, 1, fetched + 1, NULL);
    for (int i = 1; i < 1 + PSG_SYNC_CALL_MAX; i++) psg_tensor_destroy(&fetched[i]);
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
    .summary = "stale-synchronous: each worker applies its gradient / W (the live workers) at "
               "once, and waits when more than S steps ahead of the slowest",
    .options = ssp_options,
    .lost_workers = psg_sync_lost_any,
    .build = build_ssp,
    .step = step_ssp,
};
