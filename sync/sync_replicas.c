/* The sync-replicas wrapper: config checks, the graph of a worker built by
 * the chosen strategy (the table is sync/strategies.c), per-step statistics
 * and the chief's runner thread. Not the protocol's graph itself
 * (sync/strategy_sync.c) and not the resources (ops/state/). */
#include "psgraph/autodiff.h"
#include "psgraph/clock.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/error.h"
#include "ops/state/sync_resources.h"
#include "sync/strategy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#define DEFAULT_TIMEOUT_MS 60000

struct psg_sync_replicas {
    psg_sync_config_t cfg;
    const psg_sync_strategy_t *strategy;
    psg_optimizer_t *opt;
    int num_required;
};

void psg_sync_config_defaults(psg_sync_config_t *c) {
    memset(c, 0, sizeof *c);
    c->strategy = "sync";
    c->num_workers = 1;
    psg_sync_options_defaults(&c->opt);
}

psg_sync_replicas_t *psg_sync_replicas_new(psg_optimizer_t *opt, const psg_sync_config_t *cfg) {
    const psg_sync_strategy_t *v = psg_sync_strategy_find(cfg->strategy);
    int n = cfg->replicas_to_aggregate > 0 ? cfg->replicas_to_aggregate
                                           : cfg->num_workers - cfg->backup_workers;
    if (!v) {
        psg_error_wrap("sync replicas");
        return NULL;
    }
    if (!opt) {
        psg_error_set("sync replicas: no optimizer to wrap");
        return NULL;
    }
    if (cfg->num_workers < 1 || cfg->backup_workers < 0) {
        psg_error_set(
            "sync replicas: num_workers must be >= 1 and backup_workers >= 0 (got %d, %d)",
            cfg->num_workers, cfg->backup_workers);
        return NULL;
    }
    if (n < 1 || n + cfg->backup_workers > cfg->num_workers) {
        psg_error_set("sync replicas: replicas_to_aggregate %d + backup_workers %d must be at "
                      "least 1 and at most the %d workers",
                      n, cfg->backup_workers, cfg->num_workers);
        return NULL;
    }
    if (cfg->worker_index < 0 || cfg->worker_index >= cfg->num_workers) {
        psg_error_set("sync replicas: worker_index %d is not in [0, %d)", cfg->worker_index,
                      cfg->num_workers);
        return NULL;
    }
    if (cfg->total_steps < 0) {
        psg_error_set("sync replicas: total_steps must be >= 0");
        return NULL;
    }
    if (v->check && v->check(cfg, n) < 0) {
        psg_error_wrap("--sync %s", v->name);
        return NULL;
    }
    psg_sync_replicas_t *sr = calloc(1, sizeof *sr);
    if (!sr) {
        psg_error_set("out of memory");
        return NULL;
    }
    sr->cfg = *cfg;
    sr->cfg.strategy = v->name;
    sr->strategy = v;
    sr->opt = opt;
    sr->num_required = n;
    return sr;
}

void psg_sync_replicas_destroy(psg_sync_replicas_t **sr) {
    if (!sr || !*sr) return;
    free(*sr);
    *sr = NULL;
}

const char *psg_sync_replicas_strategy_name(const psg_sync_replicas_t *sr) {
    return sr->strategy->name;
}

int psg_sync_replicas_num_required(const psg_sync_replicas_t *sr) {
    return sr->num_required;
}

const psg_sync_strategy_t *psg_sync_replicas_strategy(const psg_sync_replicas_t *sr) {
    return sr->strategy;
}

bool psg_sync_push_device_of(psg_graph_t *g, psg_endpoint_t e) {
    const char *dev = psg_node_device(psg_graph_node(g, e.node));
    if (dev[0]) psg_graph_push_device(g, dev);
    return dev[0] != 0;
}

int psg_sync_staleness_pair(psg_graph_t *g, psg_endpoint_t gstep, int train_op,
                            psg_sync_graph_t *out) {
    /* the update's increment of the global step: a control input of the group */
    const psg_node_t *group = psg_graph_node(g, train_op);
    int inc = -1;
    for (int j = 0; group && j < psg_node_num_controls(group); j++) {
        int c = psg_node_control(group, j);
        if (!strcmp(psg_node_op(psg_graph_node(g, c)), "IncrementVariable")) inc = c;
    }
    if (inc < 0) return psg_error_set("staleness: the update increments no global step");
    if (psg_graph_push_scope(g, "sync_replicas") < 0) return -1;
    bool pushed = psg_sync_push_device_of(g, gstep);
    psg_endpoint_t r = psg_sync_read_global_step(g, "read_step/ps", gstep, -1);
    psg_endpoint_t a = psg_sync_read_global_step(g, "applied_step/ps", gstep, inc);
    if (pushed) psg_graph_pop_device(g);
    out->read_step = psg_identity(g, "read_step", r);
    out->applied_step = psg_identity(g, "applied_step", a);
    psg_graph_pop_scope(g);
    return psg_graph_status(g);
}

psg_endpoint_t psg_sync_read_global_step(psg_graph_t *g, const char *name, psg_endpoint_t gstep,
                                         int after) {
    psg_node_builder_t *b = psg_node_begin(g, "ReadVariable", name);
    psg_node_add_input(b, gstep);
    psg_node_attr_dtype(b, "dtype", PSG_DT_I64);
    if (after >= 0) psg_node_add_control(b, after);
    return psg_node_finish_ep(b);
}

/* With the momentum on the worker (--compress-momentum worker*): *out gets the plain SGD
 * of the same rate the ps runs instead; folded, of rate lr / (1 - m) (the caller destroys
 * it); else NULL. */
static int ps_optimizer(const psg_sync_replicas_t *sr, psg_graph_t *g, psg_optimizer_t **out) {
    *out = NULL;
    const psg_sync_options_t *o = &sr->cfg.opt;
    if (o->compress == PSG_SYNC_COMPRESS_NONE ||
        o->compress_momentum == PSG_SYNC_COMPRESS_MOMENTUM_PS)
        return 0;
    const psg_optimizer_config_t *c = psg_optimizer_config(sr->opt);
    if (strcmp(c->kind, "momentum") || c->use_nesterov)
        return psg_error_set(
            "--compress-momentum: the optimizer is %s%s, not momentum (without Nesterov)", c->kind,
            c->use_nesterov ? " with Nesterov" : "");
    psg_optimizer_config_t sgd = *c;
    sgd.kind = "sgd";
    bool folded = o->compress_momentum == PSG_SYNC_COMPRESS_MOMENTUM_FOLDED;
    if (folded && !(c->momentum < 1))
        return psg_error_set("--compress-momentum folded: momentum %g is not below 1", c->momentum);
    double fold = folded ? 1 / (1 - (double)c->momentum) : 1;
    sgd.learning_rate = (float)(c->learning_rate * fold);
    *out = psg_optimizer_new(&sgd);
    if (!*out) return -1;
    psg_endpoint_t rate = psg_optimizer_learning_rate_tensor(sr->opt);
    if (folded && psg_endpoint_valid(rate)) { /* a schedule: folded beside it */
        bool pushed = psg_sync_push_device_of(g, rate);
        rate = psg_scale(g, "compress/folded_rate", rate, fold);
        if (pushed) psg_graph_pop_device(g);
    }
    psg_optimizer_set_learning_rate_tensor(*out, rate);
    return psg_graph_status(g);
}

/* The strategy's build on grads (compressed first when --compress asks), then the
 * compression's residual update with each step. */
static int build_compressed(psg_sync_replicas_t *sr, psg_graph_t *g, int k,
                            const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                            psg_endpoint_t gstep, psg_sync_graph_t *out) {
    const psg_sync_strategy_t *v = sr->strategy;
    if (sr->cfg.opt.compress != PSG_SYNC_COMPRESS_NONE && !v->compress)
        return psg_error_set("--compress: strategy '%s' does not take it (async and sync do)",
                             v->name);
    psg_endpoint_t *dense = malloc(sizeof *dense * (size_t)k);
    psg_sync_compressed_t cz;
    psg_optimizer_t *ps_opt = NULL;
    int rc = dense ? ps_optimizer(sr, g, &ps_opt) : psg_error_set("out of memory");
    if (rc == 0)
        rc = psg_sync_compress(g, &sr->cfg.opt, psg_optimizer_config(sr->opt)->momentum, k, grads,
                               vars, dense, &cz);
    if (rc == 0) {
        psg_sync_build_t b = {&sr->cfg,
                              sr->num_required,
                              sr->cfg.timeout_ms ? sr->cfg.timeout_ms : DEFAULT_TIMEOUT_MS,
                              ps_opt ? ps_opt : sr->opt,
                              g,
                              k,
                              dense,
                              vars,
                              gstep};
        out->num_vars = k;
        rc = v->build(&b, out);
        if (rc < 0) psg_graph_wrap_error(g);
    }
    if (rc == 0 && cz.update_op >= 0) {
        int both[2] = {out->train_op, cz.update_op};
        out->train_op = psg_group(g, "compress/step", 2, both);
        out->local_init_op = cz.init_op;
        out->push_scale = cz.push_scale;
        rc = out->train_op < 0 ? -1 : 0;
    }
    free(dense);
    psg_optimizer_destroy(&ps_opt);
    if (rc < 0) psg_error_wrap("sync replicas (%s)", v->name);
    return rc;
}

int psg_sync_replicas_apply_gradients(psg_sync_replicas_t *sr, psg_graph_t *g, int n,
                                      const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                                      psg_sync_graph_t *out) {
    memset(out, 0, sizeof *out);
    out->local_step = out->num_accepted = out->next_step = out->token_wait = PSG_NO_ENDPOINT;
    out->global_step = out->chief_global_step = out->read_step = out->applied_step =
        PSG_NO_ENDPOINT;
    out->train_op = out->chief_op = out->chief_init_op = out->close_op = out->abort_op = -1;
    out->local_init_op = out->start_op = out->reissue_op = out->set_live_op = -1;
    out->rejoin_token = out->live_required = out->live_mask = PSG_NO_ENDPOINT;
    out->fast_step_op = -1;
    out->fast_key = out->fast_fetch = PSG_NO_ENDPOINT;
    psg_endpoint_t *kept = malloc(sizeof *kept * 2 * (size_t)(n > 0 ? n : 1));
    if (!kept) return psg_error_set("out of memory");
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!psg_endpoint_valid(grads[i])) continue;
        if (vars[i].node < 0 || vars[i].node >= psg_graph_num_nodes(g) ||
            strcmp(psg_node_op(psg_graph_node(g, vars[i].node)), "VarHandle")) {
            free(kept);
            return psg_error_set("sync replicas: vars[%d] is not a variable handle", i);
        }
        kept[k] = grads[i];
        kept[n + k] = vars[i];
        k++;
    }
    int rc = -1;
    psg_endpoint_t gstep = psg_global_step(g);
    if (k == 0) {
        psg_error_set("sync replicas: no gradient for any of %d variables", n);
    } else if (!psg_endpoint_valid(gstep)) {
        psg_error_wrap("sync replicas: global step");
    } else {
        rc = build_compressed(sr, g, k, kept, kept + n, gstep, out);
    }
    free(kept);
    return rc;
}

int psg_sync_replicas_minimize(psg_sync_replicas_t *sr, psg_graph_t *g, psg_endpoint_t loss,
                               psg_sync_graph_t *out) {
    int n;
    psg_endpoint_t *vars;
    if (psg_trainable_gradients(g, loss, &n, &vars) < 0) return psg_error_wrap("sync replicas");
    int rc = psg_sync_replicas_apply_gradients(sr, g, n, vars + n, vars, out);
    free(vars);
    return rc;
}

/* ---- statistics ---- */

int psg_sync_graph_fetches(const psg_sync_graph_t *sg, psg_endpoint_t *out) {
    int k = 0;
    if (psg_endpoint_valid(sg->num_accepted)) out[k++] = sg->num_accepted;
    if (psg_endpoint_valid(sg->next_step)) out[k++] = sg->next_step;
    if (psg_endpoint_valid(sg->token_wait)) out[k++] = sg->token_wait;
    if (psg_endpoint_valid(sg->read_step)) out[k++] = sg->read_step;
    if (psg_endpoint_valid(sg->applied_step)) out[k++] = sg->applied_step;
    for (int i = 0; i < sg->n_step_fetches; i++) out[k++] = sg->step_fetches[i];
    return k;
}

static int fetched_scalar(psg_tensor_t *const *fetched, int i, psg_dtype_t dt, const char *what) {
    const psg_tensor_t *t = fetched[i];
    if (!t || t->dtype != dt || psg_tensor_numel(t) != 1)
        return psg_error_set("sync step: fetch %d (%s) is not a scalar %s", i, what,
                             psg_dtype_name(dt));
    return 0;
}

int psg_sync_step_read(const psg_sync_graph_t *sg, psg_tensor_t *const *fetched, int64_t local_step,
                       double step_sec, psg_sync_step_t *st) {
    memset(st, 0, sizeof *st);
    st->local_step = local_step;
    st->next_step = local_step + 1;
    st->num_vars = sg->num_vars;
    st->num_accepted = sg->num_vars;
    st->step_sec = step_sec;
    st->staleness = -1;
    int k = 0;
    if (psg_endpoint_valid(sg->num_accepted)) {
        if (fetched_scalar(fetched, k, PSG_DT_I32, "num_accepted") < 0) return -1;
        st->num_accepted = psg_tensor_i32(fetched[k++])[0];
    }
    if (psg_endpoint_valid(sg->next_step)) {
        if (fetched_scalar(fetched, k, PSG_DT_I64, "next_step") < 0) return -1;
        st->next_step = psg_tensor_i64(fetched[k++])[0];
    }
    if (psg_endpoint_valid(sg->token_wait)) {
        if (fetched_scalar(fetched, k, PSG_DT_F32, "token_wait") < 0) return -1;
        st->token_wait_sec = psg_tensor_f32(fetched[k++])[0];
    }
    if (psg_endpoint_valid(sg->read_step) && psg_endpoint_valid(sg->applied_step)) {
        if (fetched_scalar(fetched, k, PSG_DT_I64, "read_step") < 0 ||
            fetched_scalar(fetched, k + 1, PSG_DT_I64, "applied_step") < 0)
            return -1;
        int64_t r = psg_tensor_i64(fetched[k])[0], a = psg_tensor_i64(fetched[k + 1])[0];
        st->staleness = a - r - 1 >= 0 ? a - r - 1 : 0;
        k += 2;
    }
    st->used = st->num_accepted == st->num_vars;
    /* the token protocol keeps only gradients computed for the current step */
    if (st->staleness < 0 && psg_endpoint_valid(sg->next_step) && st->used) st->staleness = 0;
    st->compute_sec = step_sec > st->token_wait_sec ? step_sec - st->token_wait_sec : 0;
    return 0;
}

int psg_sync_step_default(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    const psg_sync_graph_t *sg = w->sg;
    double t0 = psg_now_sec();
    psg_tensor_t *ls = NULL, *fetched[1 + 8 + PSG_SYNC_CALL_MAX] = {0};
    if (psg_endpoint_valid(sg->local_step) && !(ls = psg_tensor_scalar_i64(w->local_step)))
        return psg_error_set("out of memory");
    int rc = w->run(w->ctx, 0, &ls, fetched);
    psg_tensor_destroy(&ls);
    if (rc == 0) rc = psg_sync_step_read(sg, fetched + 1, w->local_step, psg_now_sec() - t0, st);
    if (rc == 0) {
        w->local_step = st->next_step;
        *loss = fetched[0];
        fetched[0] = NULL;
    }
    for (int i = 0; i < 1 + 8 + PSG_SYNC_CALL_MAX; i++) psg_tensor_destroy(&fetched[i]);
    return rc;
}

const char *psg_sync_step_drop_reason(const psg_sync_step_t *st) {
    if (st->used) return NULL;
    if (st->next_step < 0) return "closed";
    return st->num_accepted == 0 ? "stale" : "partial";
}

void psg_sync_stats_add(psg_sync_stats_t *s, const psg_sync_step_t *st) {
    s->steps++;
    const char *why = psg_sync_step_drop_reason(st);
    if (!why)
        s->used++;
    else
        s->dropped++;
    if (why && !strcmp(why, "closed")) s->dropped_closed++;
    if (why && !strcmp(why, "stale")) s->dropped_stale++;
    if (why && !strcmp(why, "partial")) s->dropped_partial++;
    s->compute_sec += st->compute_sec;
    s->token_wait_sec += st->token_wait_sec;
    s->wait_sec += st->wait_sec;
    if (st->used && st->staleness >= 0) {
        if (s->stale_n == 0 || st->staleness < s->stale_min) s->stale_min = st->staleness;
        if (s->stale_n == 0 || st->staleness > s->stale_max) s->stale_max = st->staleness;
        s->stale_sum += st->staleness;
        s->stale_n++;
        s->stale_hist[st->staleness < PSG_SYNC_STALE_BINS ? st->staleness
                                                          : PSG_SYNC_STALE_BINS - 1]++;
    }
}

int psg_sync_stats_staleness_json(const psg_sync_stats_t *s, char *buf, size_t size) {
    if (s->stale_n == 0)
        return snprintf(buf, size,
                        "\"staleness\":{\"min\":null,\"mean\":null,\"max\":null,\"n\":0,"
                        "\"hist\":[]}");
    char hist[PSG_SYNC_STALE_BINS * 22 + 16] = "";
    int last = PSG_SYNC_STALE_BINS - 1, len = 0;
    int64_t counted = 0;
    for (int k = 0; k < PSG_SYNC_STALE_BINS; k++) counted += s->stale_hist[k];
    while (last > 0 && s->stale_hist[last] == 0) last--;
    /* only when every one was counted into it (a sum of workers' rows carries none) */
    for (int k = 0; counted == s->stale_n && k <= last; k++)
        len += snprintf(hist + len, sizeof hist - (size_t)len, "%s%lld", k ? "," : ",\"hist\":[",
                        (long long)s->stale_hist[k]);
    if (len) snprintf(hist + len, sizeof hist - (size_t)len, "]");
    return snprintf(buf, size,
                    "\"staleness\":{\"min\":%lld,\"mean\":%.4f,\"max\":%lld,\"n\":%lld%s}",
                    (long long)s->stale_min, (double)s->stale_sum / (double)s->stale_n,
                    (long long)s->stale_max, (long long)s->stale_n, hist);
}

int psg_sync_step_json(const psg_sync_step_t *st, int worker, char *buf, size_t size) {
    char stale[24] = "null", why[32] = "", loss[32] = "null", wall[32] = "null", push[24] = "null",
         pull[24] = "null";
    if (st->staleness >= 0) snprintf(stale, sizeof stale, "%lld", (long long)st->staleness);
    if (!st->used) snprintf(why, sizeof why, ",\"why\":\"%s\"", psg_sync_step_drop_reason(st));
    if (st->has_loss && isfinite(st->loss)) snprintf(loss, sizeof loss, "%.6g", st->loss);
    if (st->wall_sec >= 0) snprintf(wall, sizeof wall, "%.4f", st->wall_sec);
    if (st->push_bytes >= 0) snprintf(push, sizeof push, "%lld", (long long)st->push_bytes);
    if (st->pull_bytes >= 0) snprintf(pull, sizeof pull, "%lld", (long long)st->pull_bytes);
    return snprintf(buf, size,
                    "{\"event\":\"sync_step\",\"worker\":%d,\"local_step\":%lld,\"next_step\":%lld,"
                    "\"gradient\":\"%s\"%s,\"accepted\":%d,\"variables\":%d,\"step_sec\":%.6f,"
                    "\"compute_sec\":%.6f,\"token_wait_sec\":%.6f,\"wait_sec\":%.6f,"
                    "\"staleness\":%s,\"straggler_ms\":%.3f,\"loss\":%s,\"wall_sec\":%s,"
                    "\"push_bytes\":%s,\"pull_bytes\":%s}",
                    worker, (long long)st->local_step, (long long)st->next_step,
                    st->used ? "used" : "dropped", why, st->num_accepted, st->num_vars,
                    st->step_sec, st->compute_sec, st->token_wait_sec, st->wait_sec, stale,
                    st->straggler_ms, loss, wall, push, pull);
}

/* ---- one worker's steps from another loop (psg_sync_stepper_t) ---- */

struct psg_sync_stepper {
    psg_sync_worker_t w;
    const psg_sync_strategy_t *strategy;
};

psg_sync_stepper_t *psg_sync_stepper_new(const psg_sync_replicas_t *sr, const psg_sync_graph_t *sg,
                                         psg_sync_call_fn run, void *ctx, int64_t local_step) {
    psg_sync_stepper_t *p = calloc(1, sizeof *p);
    if (!p) {
        psg_error_set("out of memory");
        return NULL;
    }
    p->w = (psg_sync_worker_t){&sr->cfg, sg, run, ctx, local_step, 0, NULL};
    p->strategy = sr->strategy;
    return p;
}

void psg_sync_stepper_destroy(psg_sync_stepper_t **w) {
    if (!w || !*w) return;
    free((*w)->w.state);
    free(*w);
    *w = NULL;
}

int psg_sync_stepper_step(psg_sync_stepper_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    *loss = NULL;
    memset(st, 0, sizeof *st);
    int rc = (w->strategy->step ? w->strategy->step : psg_sync_step_default)(&w->w, loss, st);
    if (rc < 0)
        return psg_error_wrap("--sync %s: step %lld", w->strategy->name, (long long)w->w.steps);
    w->w.steps++;
    return 0;
}

int64_t psg_sync_stepper_steps(const psg_sync_stepper_t *w) {
    return w->w.steps;
}

int64_t psg_sync_stepper_local_step(const psg_sync_stepper_t *w) {
    return w->w.local_step;
}

/* ---- the chief's runner ---- */

struct psg_sync_chief {
    pthread_t thread;
    psg_sync_run_fn run;
    void *ctx;
    int64_t total_steps, steps;
    int rc;
    char error[1024];
};

static void *chief_main(void *arg) {
    psg_sync_chief_t *c = arg;
    for (;;) {
        int64_t gs = 0;
        if (c->run(c->ctx, &gs) < 0) {
            if (psg_error_code() != PSG_ERR_CLOSED) { /* closed: training is over, a clean end */
                c->rc = -1;
                snprintf(c->error, sizeof c->error, "chief step %lld: %s", (long long)c->steps,
                         psg_error_message());
            }
            break;
        }
        c->steps++;
        if (c->total_steps > 0 && gs >= c->total_steps) break;
    }
    return NULL;
}

psg_sync_chief_t *psg_sync_chief_start(psg_sync_run_fn run, void *ctx, int64_t total_steps) {
    psg_sync_chief_t *c = calloc(1, sizeof *c);
    if (!c) {
        psg_error_set("out of memory");
        return NULL;
    }
    c->run = run;
    c->ctx = ctx;
    c->total_steps = total_steps;
    if (pthread_create(&c->thread, NULL, chief_main, c) != 0) {
        free(c);
        psg_error_set("sync replicas: cannot start the chief's runner thread");
        return NULL;
    }
    return c;
}

int psg_sync_chief_join(psg_sync_chief_t **cp, int64_t *steps) {
    if (!cp || !*cp) return 0;
    psg_sync_chief_t *c = *cp;
    *cp = NULL;
    pthread_join(c->thread, NULL);
    if (steps) *steps = c->steps;
    int rc = c->rc < 0 ? psg_error_set("%s", c->error) : 0;
    free(c);
    return rc;
}
