/* The task server's admin requests: Inspect, SaveShard, RestoreShard, Trace, JobDone and
 * the waits (WaitInit, WaitDone). Files are written only under the task's own logdirs.
 * A waiter keeps what its reply needs and its parsed names, not the request's bytes. Not
 * the dispatch (task_server.c) nor the registered graphs (task_graphs.c). */
#include "core/membudget.h"
#include "core/strbuf.h"
#include "ps/checkpoint_internal.h"
#include "ps/replicate.h"
#include "ps/task_server_internal.h"
#include "psgraph/checkpoint.h"
#include "psgraph/device.h"
#include "psgraph/error.h"
#include "ops/state/sync_resources.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- Inspect ---- */

/* zlib's crc32 of a variable's bytes (0 for one off the host), under its update lock: a backup
 * copy and its primary hold the same bytes when theirs are equal. */
static uint32_t variable_crc32(psg_variable_t *v) {
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    uint32_t crc = 0;
    if (psg_tensor_on_host(v->value))
        crc =
            psg_ckpt_crc32(psg_ckpt_crc32(0, NULL, 0), v->value->data, psg_tensor_nbytes(v->value));
    pthread_mutex_unlock(&guard->lock);
    return crc;
}

static void inspect_variables(psg_task_server_t *ts, psg_strbuf_t *b) {
    int nv = psg_resource_num_variables(ts->rm);
    for (int i = 0; i < nv; i++) {
        psg_variable_t *v = psg_resource_variable_at(ts->rm, i);
        psg_strbuf_printf(b, "%s{\"name\":", i ? "," : "");
        psg_strbuf_json_str(b, v->name);
        psg_strbuf_printf(b, ",\"dtype\":\"%s\",\"shape\":[", psg_dtype_name(v->dtype));
        for (int d = 0; d < v->shape.rank; d++)
            psg_strbuf_printf(b, "%s%" PRId64, d ? "," : "", v->shape.dims[d]);
        int64_t numel = psg_shape_numel(&v->shape);
        psg_strbuf_printf(b, "],\"bytes\":%" PRId64 ",\"initialized\":%s",
                          numel < 0 ? 0 : numel * (int64_t)psg_dtype_size(v->dtype),
                          v->initialized ? "true" : "false");
        /* a string: JSON readers keep 53 bits of a number; a backup copy and its primary
         * hold the same bytes when their crc32 are equal */
        if (v->initialized) psg_strbuf_printf(b, ",\"crc32\":\"%08x\"", variable_crc32(v));
        psg_strbuf_printf(b, "%s}", v->backup ? ",\"backup\":true" : "");
    }
}

/* the sync accumulators' counts (docs/sync.md): gradients used and dropped */
static void inspect_accumulators(psg_task_server_t *ts, psg_strbuf_t *b) {
    int na = psg_resource_count(ts->rm, "accumulator");
    for (int i = 0; i < na; i++) {
        const char *name = NULL;
        psg_accumulator_t *a = psg_resource_at(ts->rm, "accumulator", i, &name);
        psg_accumulator_counts_t c = {0};
        if (a) psg_accumulator_counts(a, &c);
        psg_strbuf_printf(b, "%s{\"name\":", i ? "," : "");
        psg_strbuf_json_str(b, name ? name : "");
        psg_strbuf_printf(b,
                          ",\"accepted\":%" PRId64 ",\"stale\":%" PRId64 ",\"late\":%" PRId64
                          ",\"closed\":%" PRId64 ",\"takes\":%" PRId64 "}",
                          c.accepted, c.stale, c.late, c.closed, c.takes);
    }
}

/* The report; brief: a liveness answer (the chief's membership asks every 250 ms) without
 * the variables and the accumulators, so that a backup does not apply its log for it. */
static char *report(psg_task_server_t *ts, bool brief) {
    psg_strbuf_t b = {0};
    psg_strbuf_str(&b, "{\"task\":");
    psg_strbuf_json_str(&b, ts->task);
    if (brief)
        psg_strbuf_str(&b, ",\"brief\":true");
    else {
        psg_strbuf_str(&b, ",\"variables\":[");
        inspect_variables(ts, &b);
        psg_strbuf_str(&b, "],\"accumulators\":[");
        inspect_accumulators(ts, &b);
        psg_strbuf_str(&b, "]");
    }
    pthread_mutex_lock(&ts->lock);
    int ng = ts->n_graphs, nd = ts->n_workers_done, nq = ts->jq_len,
        np = psg_ts_peers_holding_locked(ts), used = ts->runners_used, idle = 0;
    for (const idle_thread_t *t = ts->idle_runners; t; t = t->next) idle++;
    psg_strbuf_t done = {0}; /* who said JobDone: the chief's membership (worker/membership.c) */
    for (int i = 0; i < nd; i++) {
        if (i) psg_strbuf_add(&done, ",", 1);
        psg_strbuf_json_str(&done, ts->workers_done[i]);
    }
    pthread_mutex_unlock(&ts->lock);
    psg_strbuf_printf(&b,
                      ",\"resources\":%d,\"graphs\":%d,\"pending\":%d,\"queued\":%d,\"peers\":%d,"
                      "\"workers_done\":%d,\"runners\":%d,\"runners_idle\":%d,\"runners_used\":%d",
                      psg_resource_count(ts->rm, NULL), ng, psg_rendezvous_num_pending(ts->rv), nq,
                      np, nd, ts->max_steps, idle, used);
    psg_strbuf_printf(&b, ",\"workers_done_tasks\":[%s]", done.s ? done.s : "");
    free(done.s);
    /* a string: JSON readers keep 53 bits of a number */
    psg_strbuf_printf(&b, ",\"incarnation\":\"%016" PRIx64 "\"", psg_wire_incarnation());
    if (ts->repl) { /* chain replication: where this task's shard is backed up */
        psg_strbuf_str(&b, ",\"backup_task\":");
        psg_strbuf_json_str(&b, psg_ts_repl_backup(ts->repl));
        psg_strbuf_str(&b, ",\"replication\":");
        psg_ts_repl_stats(ts->repl, &b);
    }
    psg_strbuf_printf(&b,
                      ",\"memory\":{\"limit\":%" PRId64 ",\"held\":%" PRId64 ",\"peak\":%" PRId64
                      ",\"buffer_cache\":%zu}",
                      psg_membudget_limit(ts->budget), psg_membudget_held(ts->budget),
                      psg_membudget_peak(ts->budget), psg_buffer_cached_bytes());
    if (ts->server) {
        psg_server_stats_t st = psg_server_stats(ts->server);
        psg_strbuf_printf(&b,
                          ",\"received\":%" PRIu64 ",\"rejected\":%" PRIu64 ",\"refused\":%" PRIu64,
                          st.received, st.rejected, st.refused);
    }
    psg_strbuf_str(&b, "}");
    if (b.oom) {
        free(b.s);
        psg_error_set("out of memory");
        return NULL;
    }
    return b.s;
}

char *psg_task_server_inspect(psg_task_server_t *ts) {
    return report(ts, false);
}

void psg_ts_on_inspect(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    char *json = report(ts, psg_proto_inspect_brief(r));
    psg_rep_t rep = {.type = r->type, .u.json = {json, json ? strlen(json) : 0}};
    psg_msg_t *m = json ? psg_rep_encode(r->type, &rep) : NULL;
    if (m)
        psg_ts_reply_ok(ts, *reqp, &m);
    else
        psg_ts_reply_error(ts, *reqp, PSG_ERR_NO_MEMORY, "out of memory");
    free(json);
}

/* ---- files, under the task's logdirs only ---- */

/* Whether dir (an existing directory) is one of the task's logdirs or under one. */
static int check_under_logdir(psg_task_server_t *ts, const char *op, const char *dir) {
    if (!ts->n_logdirs)
        return psg_error_set_code(
            PSG_ERR_DENIED,
            "%s: this task has no logdir (psgraph server --logdir DIR): it writes nowhere", op);
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return psg_error_set_code(PSG_ERR_DENIED, "%s: directory '%s': %s", op, dir,
                                  strerror(errno));
    for (int i = 0; i < ts->n_logdirs; i++) {
        size_t n = strlen(ts->logdirs[i]);
        if (!strncmp(real, ts->logdirs[i], n) && (real[n] == 0 || real[n] == '/' || n == 1))
            return 0;
    }
    return psg_error_set_code(PSG_ERR_DENIED, "%s: '%s' is not under this task's logdir '%s'", op,
                              dir, ts->logdirs[0]);
}

/* Writes this task's variables as one shard (on the server thread: the variables are
 * read under their locks while runner threads go on updating them). */
void psg_ts_on_save_shard(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_msg_t *req = *reqp;
    psg_checkpoint_shard_t sh = {0};
    if (check_under_logdir(ts, "SaveShard", r->u.shard.dir) < 0 ||
        psg_checkpoint_write_shard(ts->rm, r->u.shard.dir, r->step, r->u.shard.shard,
                                   r->u.shard.num_shards, &sh) < 0) {
        psg_ts_reply_last_error(ts, req);
        return;
    }
    psg_strbuf_t names = {0};
    for (int i = 0; i < sh.num_tensors; i++) psg_strbuf_printf(&names, "%s\n", sh.names[i]);
    char line[PSG_CKPT_NAME_MAX + 96];
    snprintf(line, sizeof line, "%s %" PRIu64 " %08x %" PRIu64, sh.file, sh.size,
             (unsigned)sh.crc32, sh.tensor_bytes);
    psg_rep_t rep = {.type = r->type, .u.saved = {line, names.s ? names.s : "", names.len}};
    psg_msg_t *m = names.oom ? NULL : psg_rep_encode(r->type, &rep);
    if (m)
        psg_ts_reply_ok(ts, req, &m);
    else
        psg_ts_reply_error(ts, req, PSG_ERR_NO_MEMORY, "out of memory");
    free(names.s);
    psg_checkpoint_shard_clear(&sh);
}

/* Loads shard k of the committed checkpoint at the request's step into this task. */
void psg_ts_on_restore_shard(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    char path[PSG_PROTO_MAX_PATH + PSG_CKPT_NAME_MAX];
    snprintf(path, sizeof path, "%s/%s-%" PRId64 ".index.json", r->u.shard.dir, PSG_CKPT_PREFIX,
             r->step);
    psg_checkpoint_t *ck = psg_checkpoint_open(path, r->u.shard.shard);
    if (!ck || psg_checkpoint_restore(ck, ts->rm, false) < 0) {
        psg_ts_reply_last_error(ts, *reqp);
        psg_checkpoint_destroy(&ck);
        return;
    }
    psg_rep_t rep = {.type = r->type, .u.count = psg_checkpoint_num_tensors(ck)};
    psg_checkpoint_destroy(&ck);
    psg_msg_t *m = psg_rep_encode(r->type, &rep);
    if (m)
        psg_ts_reply_ok(ts, *reqp, &m);
    else
        psg_ts_reply_error(ts, *reqp, PSG_ERR_NO_MEMORY, "out of memory");
}

void psg_ts_on_trace(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_msg_t *req = *reqp;
    if (r->u.trace.start) {
        if (!ts->trace && !(ts->trace = psg_trace_new(r->u.trace.pid, ts->task, "CPU:0"))) {
            psg_ts_reply_error(ts, req, PSG_ERR_NO_MEMORY, "out of memory");
            return;
        }
        psg_trace_set_step(ts->trace, r->step);
        psg_task_server_set_node_hook(ts, psg_trace_node_hook, ts->trace);
        psg_ts_reply_ok(ts, req, NULL);
        return;
    }
    if (!ts->trace) {
        psg_ts_reply_error(ts, req, PSG_ERR_BAD_REQUEST,
                           "Trace: \"stop\" without a \"start\" before");
        return;
    }
    char dir[PSG_PROTO_MAX_PATH];
    snprintf(dir, sizeof dir, "%s", r->u.trace.path);
    const char *base = strrchr(r->u.trace.path, '/');
    base = base ? base + 1 : r->u.trace.path;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        psg_ts_reply_error(ts, req, PSG_ERR_BAD_REQUEST, "Trace: '%s' names no file",
                           r->u.trace.path);
        return;
    }
    psg_task_server_set_node_hook(ts, NULL, NULL);
    if (check_under_logdir(ts, "Trace", dirname(dir)) < 0 ||
        psg_trace_write(ts->trace, r->u.trace.path) < 0) {
        psg_ts_reply_last_error(ts, req);
        return;
    }
    psg_rep_t rep = {.type = r->type, .u.count = psg_trace_num_events(ts->trace)};
    psg_msg_t *m = psg_rep_encode(r->type, &rep);
    if (m)
        psg_ts_reply_ok(ts, req, &m);
    else
        psg_ts_reply_error(ts, req, PSG_ERR_NO_MEMORY, "out of memory");
}

/* ---- JobDone and the waits ---- */

/* " at global step N" when this task holds the job's global step; "" otherwise. */
static void global_step_said(psg_task_server_t *ts, char *buf, size_t size) {
    buf[0] = 0;
    psg_variable_t *v = psg_resource_find_variable(ts->rm, "global_step");
    if (!v || v->dtype != PSG_DT_I64 || !v->value) return;
    pthread_mutex_lock(&v->lock);
    if (v->initialized && psg_tensor_numel(v->value) == 1)
        snprintf(buf, size, " at global step %" PRId64, psg_tensor_i64(v->value)[0]);
    pthread_mutex_unlock(&v->lock);
}

void psg_ts_on_job_done(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_msg_t *req = *reqp;
    const char *who = r->u.worker[0] ? r->u.worker : req->peer;
    /* one worker, however its name is spelt ("/job:worker/task:2" from the chief's verdict,
     * "/job:worker/replica:0/task:2" from the worker itself): counted once */
    char canon[PSG_DEVICE_NAME_MAX];
    psg_device_name_t d;
    if (psg_device_name_parse(who, &d) == 0 && d.has_job && d.has_task) {
        if (!d.has_replica) d.has_replica = true, d.replica = 0;
        who = psg_device_name_task_str(&d, canon, sizeof canon);
    }
    psg_error_clear();
    pthread_mutex_lock(&ts->lock);
    bool seen = false;
    for (int i = 0; i < ts->n_workers_done && !seen; i++) seen = !strcmp(ts->workers_done[i], who);
    if (!seen && ts->n_workers_done < MAX_WORKERS_DONE) {
        char *s = strdup(who);
        if (s) ts->workers_done[ts->n_workers_done++] = s;
    }
    int n = ts->n_workers_done;
    pthread_mutex_unlock(&ts->lock);
    psg_ts_reply_ok(ts, req, NULL);
    if (ts->expect_workers > 0 && n >= ts->expect_workers) {
        char at[64];
        global_step_said(ts, at, sizeof at);
        /* the server thread's: set before its loop sees the stop */
        if (psg_ts_request_stop(ts, "job done: %d workers finished%s", n, at))
            atomic_store(&ts->job_done, true);
    }
}

/* Whether the waiter is answered: its names from `next` on are initialized (a variable
 * once initialized stays so: each name is looked up until it is, then never again). */
static bool waiter_ready(psg_task_server_t *ts, waiter_t *w) {
    if (w->type == PSG_REQ_WAIT_DONE) {
        pthread_mutex_lock(&ts->lock);
        int n = ts->n_workers_done;
        pthread_mutex_unlock(&ts->lock);
        return n >= w->workers;
    }
    for (; w->next < w->n_names; w->next++) {
        psg_variable_t *v = psg_resource_find_variable(ts->rm, w->names[w->next]);
        if (!v || !v->initialized) return false;
    }
    return true;
}

static void waiter_free(psg_task_server_t *ts, waiter_t *w) {
    free(w->names);
    w->names = NULL;
    pthread_mutex_lock(&ts->lock);
    if (w->peer) w->peer->waiters--;
    pthread_mutex_unlock(&ts->lock);
}

/* Replies to a waiter by its route and id (the request itself is gone). */
static void waiter_reply(psg_task_server_t *ts, const waiter_t *w, bool ok, psg_err_code_t code,
                         const char *why) {
    psg_msg_t stub = {.kind = PSG_MSG_REQUEST,
                      .id = w->id,
                      .route = w->route,
                      .op = (char *)psg_proto_entry(w->type)->op};
    snprintf(stub.peer, sizeof stub.peer, "%s", w->peer_addr);
    if (ok)
        psg_ts_reply_ok(ts, &stub, NULL);
    else
        psg_ts_reply_error(ts, &stub, code, "%s: %s", stub.op, why);
}

void psg_ts_on_wait(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_msg_t *req = *reqp;
    waiter_list_t *l = r->type == PSG_REQ_WAIT_INIT ? &ts->wait_init : &ts->wait_done;
    waiter_t w = {.route = req->route,
                  .id = req->id,
                  .type = r->type,
                  .workers = r->u.workers,
                  .deadline = psg_codec_now_ms() + ts->recv_timeout_ms};
    snprintf(w.peer_addr, sizeof w.peer_addr, "%s", req->peer);
    if (r->type == PSG_REQ_WAIT_INIT) {
        w.names = r->u.init.names, w.n_names = r->u.init.n;
        r->u.init.names = NULL, r->u.init.n = 0; /* the waiter owns them now */
    }
    if (waiter_ready(ts, &w)) {
        psg_ts_reply_ok(ts, req, NULL);
        free(w.names);
        return;
    }
    pthread_mutex_lock(&ts->lock);
    peer_t *p = psg_ts_peer_locked(ts, req);
    int rc = p ? 0 : -1;
    if (p && p->waiters >= ts->lim.max_waiters_per_peer)
        rc = psg_error_set_code(PSG_ERR_LIMIT,
                                "%s: peer %s has %d waits pending (the limit is %d per peer)",
                                req->op, p->label, p->waiters, ts->lim.max_waiters_per_peer);
    else if (p) /* NULL: the peers' table refused it (error set) */
        p->waiters++, w.peer = p;
    pthread_mutex_unlock(&ts->lock);
    if (rc == 0 && l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        waiter_t *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (v)
            l->v = v, l->cap = cap;
        else
            rc = psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    }
    if (rc < 0) {
        psg_ts_reply_last_error(ts, req);
        waiter_free(ts, &w);
        return;
    }
    l->v[l->n++] = w;
}

static void check_list(psg_task_server_t *ts, waiter_list_t *l, bool all) {
    int64_t now = psg_codec_now_ms();
    for (int i = 0; i < l->n;) {
        waiter_t *w = &l->v[i];
        if (!all && waiter_ready(ts, w)) {
            waiter_reply(ts, w, true, 0, NULL);
        } else if (all) {
            waiter_reply(ts, w, false, PSG_ERR_STOPPING, "the server is stopping");
        } else if (now >= w->deadline) {
            waiter_reply(ts, w, false, PSG_ERR_TIMEOUT, "still not ready after the Recv timeout");
        } else {
            i++;
            continue;
        }
        waiter_free(ts, w);
        l->v[i] = l->v[--l->n];
    }
}

void psg_ts_check_waiters(psg_task_server_t *ts, bool all) {
    check_list(ts, &ts->wait_init, all);
    check_list(ts, &ts->wait_done, all);
}
