/* Chain replication of a ps task's shard (ps/replicate.h, docs/replication.md): after a
 * step that wrote variables, the primary sends its backup what they need to hold the same
 * bytes and waits for its ack before the step's reply: the dense updates logged since the
 * last forward (ps/repl_log.c: their gradients and hyper-parameters, replayed by the same
 * kernels), or the values of variables that something else wrote (an assign, a sparse
 * update, a value put back) and of the whole shard on a re-replication. Not the worker's
 * failover (worker/failover.c). */
#include "ps/replicate.h"

#include "ps/applied.h"
#include "ps/repl_log.h"
#include "ps/repl_queue.h"
#include "ps/client.h"
#include "ps/task_server_internal.h"
#include "ops/state/sync_resources.h"
#include "psgraph/device.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A lost backup is tried again at most this often (each try copies the whole shard). */
#define RETRY_MS 1000
/* How long a lost backup may take to answer an empty forward before the whole shard is sent
 * to it: the step that tries waits that long while it is still gone. */
#define PROBE_MS 100
/* The verdicts a task keeps: ps tasks found lost whose shards it serves (a few per job). */
#define MAX_VERDICTS 32
/* A snapshot (the whole shard by value) when the updates forwarded since the last one reach
 * this many times the shard's bytes, unless PSG_REPL_SNAPSHOT_EVERY gives a count of forwards:
 * the backup holds at most that much log, and drops it unapplied at each snapshot. */
#define SNAPSHOT_FACTOR 8
/* The backup applies its oldest forwards held beyond these (a primary that sends no snapshot
 * holds its memory no further). */
#define MAX_HELD 4096
#define MAX_HELD_BYTES ((size_t)1 << 30)
/* The name prefix of a snapshot's tensor that is a variable's value before the step's update
 * (its way back on the backup). */
#define PRE_PREFIX '<'

struct psg_ts_repl {
    psg_task_server_t *ts;
    char backup[PSG_DEVICE_NAME_MAX];
    char address[256];
    psg_ts_client_t *client;
    int64_t timeout_ms;
    /* one forward at a time: the backup applies them in the order the values were taken */
    pthread_mutex_t lock;
    bool synced;             /* a full copy went through since the backup was last lost */
    uint64_t restarts;       /* the backup's restarts (new incarnations) when it was synced */
    int64_t last_try_ms;     /* the last forward that failed (0: none since the last success) */
    psg_applied_t *applied;  /* which update of each writer every variable holds */
    psg_repl_log_t *log;     /* the updates logged since the last forward; the backup's replay */
    psg_repl_queue_t *queue; /* as a backup: the forwards held, applied by its thread */
    /* snapshots: every snapshot_every forwards (0: from the bytes, SNAPSHOT_FACTOR); the
     * forwards and bytes of updates since the last, the bytes of the last (the shard's) */
    int snapshot_every;
    atomic_uint_fast64_t since_snapshot; /* read by Inspect without r->lock */
    size_t bytes_since, shard_bytes;
    /* what was forwarded (Inspect "replication"): forwards acknowledged, updates replayed,
     * variables sent by value, bytes of tensors; and, as a backup, updates replayed here */
    atomic_uint_fast64_t forwards, replayed, values, bytes, replayed_here, snapshots;
    /* as a backup: the drains that applied a log, by the request they came before (the last:
     * a request row added at run time) */
    atomic_uint_fast64_t drains[PSG_REQ_COUNT + 1];
    bool lost_said; /* the loss was logged */
    /* the verdicts of failovers to this task (psg_ts_on_replicate, key "lost"): ps task
     * verdicts[i].ps, as process verdicts[i].inc, was found lost; its shard is served here */
    pthread_mutex_t verdict_lock;
    int n_verdicts;
    struct {
        int ps;
        uint64_t inc;
    } verdicts[MAX_VERDICTS];
    /* a verdict named this task's backup: the next forward does not wait for it */
    atomic_bool backup_found_lost;
};

static int apply_forward(void *ctx, const psg_msg_t *req);

int psg_ts_repl_new(psg_task_server_t *ts, psg_ts_repl_t **out) {
    *out = NULL;
    if (!ts->cluster || strcmp(ts->task_dn.job, "ps")) return 0;
    int b = psg_cluster_ps_backup(ts->cluster, ts->task_dn.task);
    if (b < 0 || b == ts->task_dn.task) return 0;
    psg_ts_repl_t *r = calloc(1, sizeof *r);
    if (!r) return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    r->ts = ts;
    psg_device_name("ps", b, NULL, r->backup, sizeof r->backup);
    snprintf(r->address, sizeof r->address, "%s", psg_cluster_address(ts->cluster, "ps", b));
    int peer = ts->peer_timeout_ms > 0 ? ts->peer_timeout_ms : PSG_WIRE_PEER_TIMEOUT_MS;
    r->timeout_ms = peer;
    const char *every = getenv("PSG_REPL_SNAPSHOT_EVERY"); /* tests: a snapshot's place */
    r->snapshot_every = every && atoi(every) > 0 ? atoi(every) : 0;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->verdict_lock, NULL);
    if (!(r->applied = psg_applied_new()) || !(r->log = psg_repl_log_new(ts->rm, r->applied)) ||
        !(r->client = psg_ts_client_new(r->backup, r->address, r->timeout_ms, ts->peer_timeout_ms,
                                        ts->keys)) ||
        !(r->queue = psg_repl_queue_new(apply_forward, r, MAX_HELD, MAX_HELD_BYTES))) {
        psg_ts_client_destroy(&r->client);
        psg_applied_destroy(&r->applied);
        psg_repl_log_destroy(&r->log);
        pthread_mutex_destroy(&r->lock);
        pthread_mutex_destroy(&r->verdict_lock);
        free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void psg_ts_repl_destroy(psg_ts_repl_t **rp) {
    if (!rp || !*rp) return;
    psg_ts_repl_t *r = *rp;
    *rp = NULL;
    psg_repl_queue_destroy(&r->queue); /* drops what it holds (nothing reads the copies) */
    psg_ts_client_destroy(&r->client);
    psg_repl_log_destroy(&r->log);
    psg_applied_destroy(&r->applied);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->verdict_lock);
    free(r);
}

const char *psg_ts_repl_backup(const psg_ts_repl_t *r) {
    return r ? r->backup : "";
}

static int send_verdicts(psg_ts_repl_t *r);

/* ---- what a graph writes ---- */

static bool writes_variables(const char *op) {
    return !strncmp(op, "Apply", 5) || !strncmp(op, "SparseApply", 11) ||
           !strncmp(op, "Assign", 6) || !strncmp(op, "Scatter", 7) ||
           !strcmp(op, "ScaleVariable") || !strcmp(op, "IncrementVariable");
}

static const char *handle_name(const psg_graph_t *g, psg_endpoint_t e) {
    if (e.node < 0 || e.node >= psg_graph_num_nodes(g)) return NULL;
    const psg_node_t *src = psg_graph_node(g, e.node);
    if (strcmp(psg_node_op(src), "VarHandle")) return NULL;
    const char *shared = psg_node_get_str(src, "shared_name", "");
    return shared[0] ? shared : psg_node_name(src);
}

/* Adds name to names (n of cap) unless there; -1 (names freed) on out of memory. */
static int names_add(const char ***names, int *n, int *cap, const char *name) {
    for (int k = 0; k < *n; k++)
        if (!strcmp((*names)[k], name)) return 0;
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        const char **v = realloc(*names, (size_t)*cap * sizeof *v);
        if (!v) {
            free(*names);
            *names = NULL;
            *n = 0;
            return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        }
        *names = v;
    }
    (*names)[(*n)++] = name;
    return 0;
}

int psg_ts_repl_written(const psg_graph_t *g, const char ***names, int *n) {
    *names = NULL;
    *n = 0;
    int nn = psg_graph_num_nodes(g), cap = 0;
    for (int i = 0; i < nn; i++) {
        const psg_node_t *node = psg_graph_node(g, i);
        if (!writes_variables(psg_node_op(node))) continue;
        for (int j = 0; j < psg_node_num_inputs(node); j++) {
            const char *name = handle_name(g, psg_node_input(node, j));
            if (name && names_add(names, n, &cap, name) < 0) return -1;
        }
    }
    return 0;
}

int psg_ts_repl_handles(const psg_graph_t *g, const char ***names, int *n) {
    *names = NULL;
    *n = 0;
    int nn = psg_graph_num_nodes(g), cap = 0;
    for (int i = 0; i < nn; i++) {
        const char *name = handle_name(g, (psg_endpoint_t){i, 0});
        if (name && names_add(names, n, &cap, name) < 0) return -1;
    }
    return 0;
}

/* ---- the primary's side ---- */

struct psg_ts_undo {
    char writer[PSG_APPLIED_WRITER_MAX];
    int64_t seq;
    int64_t step; /* the run's step id: the writes its kernels count (psg_variable_note_write) */
    int n;
    bool *skip;   /* (n) holds the update, written since by another: not written */
    bool *rolled; /* (n) holds it as its last: rolled back to before it, run again */
    /* (n) not skip: its value before the step (rolled: before the update run again; else
     * kept by the variable as the run writes it, taken after: psg_variable_t.before) */
    psg_tensor_t **values;
    bool *keeps; /* (n) counted among the variable's keepers until taken (once, after the run) */
    uint64_t *writes; /* (n) its count of writes before the step */
};

/* The written variables that were backup copies here are this task's own from now on: the
 * workers failed over to it. */
static void promote(psg_task_server_t *ts, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        psg_variable_t *v = psg_resource_find_variable(ts->rm, names[i]);
        if (!v || !v->backup) continue;
        psg_variable_t *guard = psg_variable_guard(v);
        pthread_mutex_lock(&guard->lock);
        v->backup = false;
        psg_variable_note_unlogged(v); /* its writes as a copy were not logged: by value */
        pthread_mutex_unlock(&guard->lock);
    }
}

/* Adds v's value to a full forward (a snapshot or a re-replication) of step u, and, when v is
 * one of the step's names that holds the step's update alone since it began, its value
 * before the update as "<NAME" (the way back of a retry of that update on the backup, as
 * here: a primary lost right after a snapshot leaves no update to replay that would keep it). */
static int add_full_value(psg_ts_repl_t *r, psg_msg_t *m, psg_variable_t *v,
                          const char *const *names, const bool *skip, int n, const psg_ts_undo_t *u,
                          psg_strbuf_t *rows, size_t *bytes) {
    int at = -1;
    for (int i = 0; u && i < n && at < 0; i++)
        if ((!skip || !skip[i]) && !strcmp(names[i], v->name)) at = i;
    bool only = false;
    psg_repl_since_t since = {u ? u->step : 0, at >= 0 ? u->writes[at] : 0};
    if (psg_repl_add_value(m, v, r->applied, rows, bytes, at >= 0 ? &since : NULL, &only) < 0)
        return -1;
    psg_tensor_t *pre = only ? psg_applied_pre_of(r->applied, v->name, u->writer, u->seq) : NULL;
    if (!pre) return 0;
    char name[1024];
    int rc = 0;
    if (snprintf(name, sizeof name, "%c%s", PRE_PREFIX, v->name) < (int)sizeof name) {
        *bytes += psg_tensor_nbytes(pre);
        rc = psg_msg_add_tensor(m, name, pre);
    }
    psg_tensor_destroy(&pre);
    return rc;
}

/* The Replicate request of a step that wrote the named variables (but those skip marks):
 * the logged updates to replay and the values of the variables written otherwise
 * (ps/repl_log.c); with full, the values of the whole shard (a snapshot, or a copy to a
 * backup that was lost). The body: the update these hold, which updates the variables
 * hold, the replay lines. *plan: for psg_repl_commit. */
static psg_msg_t *build(psg_ts_repl_t *r, const char *const *names, const bool *skip, int n,
                        bool full, const psg_ts_undo_t *u, int *count, int *replays, size_t *bytes,
                        psg_repl_plan_t **plan) {
    psg_task_server_t *ts = r->ts;
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_REPLICATE);
    psg_strbuf_t rows = {0};
    *count = *replays = 0;
    *bytes = 0;
    if (!m || psg_msg_set_key(m, full ? "full" : "update") < 0) goto fail;
    /* the step's update: the variables it wrote hold it (its writes were applied, and are in
     * this forward or in one before); the records of others' updates go with each value,
     * taken with it, and with each replay line (ps/repl_log.c) */
    if (u) psg_strbuf_printf(&rows, "#%s %" PRId64 "\n", u->writer, u->seq);
    for (int i = 0; u && i < n; i++)
        if (!skip || !skip[i])
            psg_strbuf_printf(&rows, "%s\t%s\t%" PRId64 "\n", names[i], u->writer, u->seq);
    if (full) {
        /* logged from now on: an update logged before a variable's value is taken is in it */
        psg_repl_log_set_on(r->log, true);
        int nv = psg_resource_num_variables(ts->rm);
        for (int i = 0; i < nv; i++) {
            psg_variable_t *v = psg_resource_variable_at(ts->rm, i);
            if (!v->initialized || v->backup) continue;
            if (add_full_value(r, m, v, names, skip, n, u, &rows, bytes) < 0) goto fail;
            (*count)++;
        }
    } else if (psg_repl_log_forward(r->log, ts->rm, names, skip, n, m, &rows, count, replays, bytes,
                                    plan) < 0) {
        goto fail;
    }
    if (rows.oom) {
        psg_error_set("out of memory");
        goto fail;
    }
    if (rows.len && psg_msg_set_body(m, rows.s, rows.len) < 0) goto fail;
    free(rows.s);
    return m;
fail:
    free(rows.s);
    psg_repl_commit(plan, false);
    psg_msg_destroy(&m);
    return NULL;
}

/* Sends one Replicate; 0 once the backup applied it. Under r->lock. */
static int forward(psg_ts_repl_t *r, const char *const *names, const bool *skip, int n, bool full,
                   const psg_ts_undo_t *u, int *count, size_t *bytes) {
    psg_repl_plan_t *plan = NULL;
    int replays = 0;
    psg_msg_t *m = build(r, names, skip, n, full, u, count, &replays, bytes, &plan);
    if (!m) return -1;
    /* nothing to send: no value, no update to replay, and no update id whose records the
     * backup must get (the step's updates went with another step's forward) */
    bool records = false;
    for (int i = 0; u && i < n && !records; i++) records = !skip || !skip[i];
    if (!full && *count == 0 && !records) {
        psg_repl_commit(&plan, true);
        psg_msg_destroy(&m);
        return 0;
    }
    psg_msg_t *reply = psg_ts_call_msg(r->client, &m, r->timeout_ms);
    psg_repl_commit(&plan, reply != NULL);
    if (!reply) return -1;
    psg_msg_destroy(&reply);
    atomic_fetch_add(&r->forwards, 1);
    atomic_fetch_add(&r->replayed, (uint64_t)replays);
    atomic_fetch_add(&r->values, (uint64_t)(*count - replays));
    atomic_fetch_add(&r->bytes, *bytes);
    return 0;
}

/* Whether a backup that was lost answers again: an empty forward within PROBE_MS (a step
 * that tries does not wait the whole timeout for a backup still gone). Under r->lock. */
static int probe(psg_ts_repl_t *r) {
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_REPLICATE);
    if (!m || psg_msg_set_key(m, "update") < 0) {
        psg_msg_destroy(&m);
        return psg_error_set("out of memory");
    }
    psg_msg_t *reply =
        psg_ts_call_msg(r->client, &m, r->timeout_ms < PROBE_MS ? r->timeout_ms : PROBE_MS);
    if (!reply) return -1;
    psg_msg_destroy(&reply);
    return 0;
}

/* ---- a retried step: the variables that hold its update already ---- */

static void undo_free(psg_ts_undo_t *u) {
    for (int i = 0; u && i < u->n; i++) psg_tensor_destroy(&u->values[i]);
    if (u) free(u->values), free(u->skip), free(u->rolled), free(u->keeps), free(u->writes);
    free(u);
}

/* The run of u is over: its updates are no longer its (psg_repl_log_step_begin); u freed. */
static void undo_done(psg_ts_repl_t *r, psg_ts_undo_t *u) {
    if (u && r) psg_repl_log_step_end(r->log, u->step);
    undo_free(u);
}

/* Before the step, variable i of u: rolled back, kept aside or its value before recorded. */
static void undo_take(psg_ts_repl_t *r, psg_ts_undo_t *u, int i, psg_variable_t *v,
                      const char *name) {
    psg_tensor_t *pre = psg_applied_pre_of(r->applied, name, u->writer, u->seq);
    bool held = !pre && psg_applied_get(r->applied, name, u->writer) >= u->seq;
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    u->writes[i] = v->writes;
    if (pre && psg_tensor_nbytes(pre) == psg_tensor_nbytes(v->value)) {
        memcpy(v->value->data, pre->data, psg_tensor_nbytes(v->value));
        psg_variable_note_unlogged(v);
        /* it holds the update no more until the run applies it again (and records it) */
        (void)psg_applied_forget(r->applied, name, u->writer, u->seq - 1);
        u->rolled[i] = true;
        u->values[i] = pre; /* where a failure of this run puts it back */
        pre = NULL;
    } else if (held) {
        /* this run's kernels leave it alone: another's update landing meanwhile stays (a
         * copy put back after the run would drop it) */
        v->skip_step = u->step;
        u->skip[i] = true;
    } else {
        /* its value before the run's write, kept as it writes (an update kernel writes a new
         * buffer and keeps the old one, no copy): a copy here cost 3x the gradient a step
         * with Adam */
        v->keepers++;
        u->keeps[i] = true;
    }
    pthread_mutex_unlock(&guard->lock);
    psg_tensor_destroy(&pre);
}

/* After the run: each variable's value before the run's write, as it kept it (none when
 * the run did not write it); the variable keeps no more for this run. */
static void undo_take_before(psg_task_server_t *ts, psg_ts_undo_t *u, const char *const *names) {
    for (int i = 0; u && i < u->n; i++) {
        psg_variable_t *v = u->keeps[i] ? psg_resource_find_variable(ts->rm, names[i]) : NULL;
        if (!v) continue;
        psg_variable_t *guard = psg_variable_guard(v);
        pthread_mutex_lock(&guard->lock);
        if (v->before && v->before_step == u->step) {
            u->values[i] = v->before;
            v->before = NULL;
        }
        if (--v->keepers == 0) psg_tensor_destroy(&v->before); /* another's, not wanted */
        pthread_mutex_unlock(&guard->lock);
    }
}

int psg_ts_repl_begin(psg_task_server_t *ts, const char *update, int64_t step,
                      const char *const *names, int n, psg_ts_undo_t **out) {
    *out = NULL;
    psg_ts_repl_t *r = ts->repl;
    if (!r || !update[0] || n <= 0) return 0;
    psg_ts_undo_t *u = calloc(1, sizeof *u);
    if (!u || !(u->skip = calloc((size_t)n, sizeof *u->skip)) ||
        !(u->rolled = calloc((size_t)n, sizeof *u->rolled)) ||
        !(u->values = calloc((size_t)n, sizeof *u->values)) ||
        !(u->keeps = calloc((size_t)n, sizeof *u->keeps)) ||
        !(u->writes = calloc((size_t)n, sizeof *u->writes))) {
        undo_free(u);
        return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    }
    u->n = n;
    u->step = step;
    if (psg_applied_parse_id(update, u->writer, sizeof u->writer, &u->seq) < 0) {
        undo_free(u);
        return -1;
    }
    /* its kernels' updates are logged and recorded under its id as they are applied */
    if (psg_repl_log_step_begin(r->log, step, u->writer, u->seq) < 0) {
        undo_free(u);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        psg_variable_t *v = psg_resource_find_variable(ts->rm, names[i]);
        if (v && v->initialized && psg_variable_on_host(v)) undo_take(r, u, i, v, names[i]);
    }
    *out = u;
    return 0;
}

/* After the run: the variables it left alone written by others again. */
static void undo_unskip(psg_task_server_t *ts, const psg_ts_undo_t *u, const char *const *names) {
    for (int i = 0; u && i < u->n; i++) {
        psg_variable_t *v = u->skip[i] ? psg_resource_find_variable(ts->rm, names[i]) : NULL;
        if (!v) continue;
        psg_variable_t *guard = psg_variable_guard(v);
        pthread_mutex_lock(&guard->lock);
        if (v->skip_step == u->step) v->skip_step = 0;
        pthread_mutex_unlock(&guard->lock);
    }
}

/* After a failed run, variable i of u: put back to its value before the run when only this
 * run wrote it since (a failed step leaves no write here, so that its retry is its only
 * update: a step fails after some of its updates ran when a Recv after them fails); kept
 * when another's update landed on it too (putting it back would drop that one): then it
 * holds this update, and its retry leaves it alone. */
static void abort_one(psg_task_server_t *ts, const psg_ts_undo_t *u, int i, const char *name) {
    psg_variable_t *v = psg_resource_find_variable(ts->rm, name);
    if (!v || (!u->values[i] && !u->keeps[i])) return;
    psg_applied_t *a = ts->repl->applied;
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    bool wrote = psg_variable_wrote(v, u->step);
    uint64_t since = v->writes - u->writes[i];
    bool others = since > (wrote ? 1u : 0u);
    /* its value before, kept as the run wrote it (none on out of memory: it holds the update) */
    bool back = wrote && !others && u->values[i];
    if (back) {
        memcpy(v->value->data, u->values[i]->data, psg_tensor_nbytes(v->value));
        psg_variable_note_unlogged(v);
    }
    /* the records under the lock too: a value copied for a forward comes with the records
     * taken with it (psg_repl_add_value) */
    if (wrote && !back) { /* it holds the update; its value before is not the way back */
        (void)psg_applied_set(a, name, u->writer, u->seq);
        (void)psg_applied_set_last(a, name, NULL, 0, NULL);
    } else if (wrote || u->rolled[i]) {
        /* put back (its kernel recorded the update as it applied it, ps/repl_log.c), or rolled
         * back and not run again: it holds the update no more */
        (void)psg_applied_forget(a, name, u->writer, u->seq - 1);
        (void)psg_applied_set_last(a, name, NULL, 0, NULL);
    }
    pthread_mutex_unlock(&guard->lock);
}

void psg_ts_repl_abort(psg_task_server_t *ts, const char *const *names, psg_ts_undo_t **u) {
    if (!u || !*u) return;
    undo_take_before(ts, *u, names);
    undo_unskip(ts, *u, names);
    for (int i = 0; i < (*u)->n; i++) abort_one(ts, *u, i, names[i]);
    undo_done(ts->repl, *u);
    *u = NULL;
}

/* Whether variable i was written by this run only since it began: its value before the run
 * is then its value before this update (another's update landing on it meanwhile would be
 * dropped by a retry that rolls back to it). */
static bool only_this_step(psg_task_server_t *ts, const psg_ts_undo_t *u, int i, const char *name) {
    psg_variable_t *v = psg_resource_find_variable(ts->rm, name);
    if (!v) return false;
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    bool only = v->writes - u->writes[i] == 1 && psg_variable_wrote(v, u->step);
    pthread_mutex_unlock(&guard->lock);
    return only;
}

/* Whether the next forward is a snapshot: the backup drops the log it holds. Under r->lock. */
static bool snapshot_due(const psg_ts_repl_t *r) {
    if (r->snapshot_every > 0)
        return atomic_load(&r->since_snapshot) + 1 >= (uint64_t)r->snapshot_every;
    return r->shard_bytes > 0 && r->bytes_since >= SNAPSHOT_FACTOR * r->shard_bytes;
}

/* A forward went through: a full one starts the count again. Under r->lock. */
static void snapshot_count(psg_ts_repl_t *r, bool full, size_t bytes) {
    if (full) {
        atomic_store(&r->since_snapshot, 0);
        r->bytes_since = 0;
        r->shard_bytes = bytes;
        atomic_fetch_add(&r->snapshots, 1);
    } else {
        atomic_fetch_add(&r->since_snapshot, 1);
        r->bytes_since += bytes;
    }
}

void psg_ts_replicate(psg_task_server_t *ts, const char *const *names, int n,
                      psg_ts_undo_t **undo) {
    psg_ts_repl_t *r = ts->repl;
    psg_ts_undo_t *u = undo ? *undo : NULL;
    if (undo) *undo = NULL;
    if (!r || n <= 0) {
        undo_done(r, u);
        return;
    }
    const bool *skip = u ? u->skip : NULL;
    undo_take_before(ts, u, names);
    undo_unskip(ts, u, names);
    /* recorded at once, not after the forward: a retry of this step may come while the
     * forward still waits for a backup that died */
    for (int i = 0; u && i < n; i++) {
        if (skip[i]) continue;
        (void)psg_applied_set(r->applied, names[i], u->writer, u->seq);
        /* no way back: a retry leaves it alone */
        if (!only_this_step(ts, u, i, names[i]) || (!u->values[i] && !u->rolled[i]))
            (void)psg_applied_set_last(r->applied, names[i], NULL, 0, NULL);
        else if (!u->rolled[i]) /* what a retry of this step starts again from */
            (void)psg_applied_set_last(r->applied, names[i], u->writer, u->seq, &u->values[i]);
    }
    pthread_mutex_lock(&r->lock);
    int64_t t0 = psg_ts_now_ms();
    int count = 0;
    size_t bytes = 0;
    promote(ts, names, n);
    if (atomic_exchange(&r->backup_found_lost, false) && r->synced) {
        /* lost already for the workers: not waited for (a cut link holds a forward for the
         * peer timeout); tried again as a backup that does not answer */
        psg_net_log("task %s: its backup %s (%s) was found lost (a failover to this task): the "
                    "shard has no backup until it answers again",
                    ts->task, r->backup, r->address);
        r->lost_said = true;
        r->synced = false;
        r->last_try_ms = t0;
        psg_repl_log_set_on(r->log, false);
        psg_ts_client_reset(r->client);
    }
    if (!r->synced && r->last_try_ms && t0 - r->last_try_ms < RETRY_MS) {
        /* no backup now: the step goes on, its values travel with the next full copy */
        pthread_mutex_unlock(&r->lock);
        undo_done(r, u);
        return;
    }
    bool copy = !r->synced; /* the whole shard to a backup that was lost */
    bool full = copy || snapshot_due(r);
    int rc = copy && r->last_try_ms ? probe(r) : 0;
    if (rc == 0 && copy) rc = send_verdicts(r);
    if (rc == 0) rc = forward(r, names, skip, n, full, u, &count, &bytes);
    /* a backup that restarted since the last full copy holds only what this step sent */
    if (rc == 0 && psg_ts_client_restarts(r->client) != r->restarts) {
        psg_net_log("task %s: its backup %s (%s) restarted: copying the whole shard to it",
                    ts->task, r->backup, r->address);
        r->restarts = psg_ts_client_restarts(r->client);
        full = true;
        rc = forward(r, names, skip, n, true, u, &count, &bytes);
    }
    if (rc == 0) {
        snapshot_count(r, full, bytes);
        if (full && r->last_try_ms)
            psg_net_log("task %s: re-replicated its shard to %s (%s): %d variables, %zu bytes in "
                        "%.3f s; it is the backup again",
                        ts->task, r->backup, r->address, count, bytes,
                        (double)(psg_ts_now_ms() - t0) / 1e3);
        r->synced = true;
        r->last_try_ms = 0;
        r->lost_said = false;
    }
    if (rc < 0) {
        if (!r->lost_said)
            psg_net_log("task %s: its backup %s (%s) is lost (%s): the shard has no backup "
                        "until it answers again",
                        ts->task, r->backup, r->address, psg_error_message());
        r->lost_said = true;
        r->synced = false;
        r->last_try_ms = t0;
        psg_repl_log_set_on(r->log, false);
        psg_ts_client_reset(r->client);
    }
    pthread_mutex_unlock(&r->lock);
    undo_done(r, u);
}

/* ---- the backup's side ---- */

/* Writes a forwarded value into the backup copy `name`. Its last update is not known from
 * then on: a value may hold several workers' updates since the copy's previous one (the
 * forward's update id names one of them), so its value before is the way back of none; a
 * retry here of an update its records say it holds leaves it alone. */
static int apply_copy(psg_task_server_t *ts, const char *name, const psg_tensor_t *t) {
    psg_variable_t *v = psg_resource_variable(ts->rm, name, t->dtype, &t->shape);
    if (!v) return -1;
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    int rc = 0;
    if (v->initialized && !v->backup)
        rc = psg_error_set_code(PSG_ERR_DENIED,
                                "variable '%s' is this task's own (its primary), not a backup "
                                "copy: two primaries of one shard",
                                name);
    else if (!psg_tensor_on_host(v->value))
        rc = psg_error_set("variable '%s' is not on the host", name);
    if (rc == 0) {
        memcpy(v->value->data, t->data, psg_tensor_nbytes(v->value));
        v->backup = true;
        v->initialized = true;
        psg_variable_note_unlogged(v);
    }
    pthread_mutex_unlock(&guard->lock);
    if (rc == 0) (void)psg_applied_set_last(ts->repl->applied, name, NULL, 0, NULL);
    return rc;
}

/* A snapshot's value of copy `name` before the forward's update (writer, seq): kept as the
 * copy's way back (the primary keeps the same), as after a replay of that update here. */
static int apply_pre(psg_task_server_t *ts, const char *name, const psg_tensor_t *t,
                     const char *writer, int64_t seq) {
    psg_variable_t *v = psg_resource_find_variable(ts->rm, name);
    if (!writer[0] || !v || !v->backup || psg_tensor_nbytes(t) != psg_tensor_nbytes(v->value))
        return psg_error_set_code(PSG_ERR_BAD_REQUEST,
                                  "'%c%s': not the value before an update of a copy sent with it",
                                  PRE_PREFIX, name);
    psg_tensor_t *pre = psg_tensor_copy(t);
    if (!pre) return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    return psg_applied_set_last(ts->repl->applied, name, writer, seq, &pre);
}

/* The forward's update id, its body's first line "#WRITER SEQ" (absent: none, writer "").
 * false with the error set when malformed. */
static bool update_id(const psg_msg_t *req, char *writer, size_t size, int64_t *seq) {
    const char *d = req->body ? (const char *)req->body->data : NULL;
    size_t len = req->body ? req->body->size : 0;
    if (!len || d[0] != '#') return true;
    const char *nl = memchr(d, '\n', len);
    size_t n = nl ? (size_t)(nl - d) : len;
    char id[PSG_APPLIED_WRITER_MAX + 32];
    if (n - 1 >= sizeof id) {
        psg_error_set_code(PSG_ERR_BAD_REQUEST, "Replicate: update id of %zu bytes", n - 1);
        return false;
    }
    memcpy(id, d + 1, n - 1);
    id[n - 1] = 0;
    if (psg_applied_parse_id(id, writer, size, seq) < 0) {
        psg_error_wrap("Replicate");
        return false;
    }
    return true;
}

/* Puts every variable whose last update is (writer, seq) back to its value before it (the
 * chief's step of a sync job that failed over: docs/replication.md); how many were. */
static int undo_update(psg_task_server_t *ts, const char *writer, int64_t seq) {
    int nv = psg_resource_num_variables(ts->rm), undone = 0;
    for (int i = 0; i < nv; i++) {
        psg_variable_t *v = psg_resource_variable_at(ts->rm, i);
        psg_tensor_t *pre = psg_applied_pre_of(ts->repl->applied, v->name, writer, seq);
        if (!pre) continue;
        psg_variable_t *guard = psg_variable_guard(v);
        pthread_mutex_lock(&guard->lock);
        bool fits =
            psg_tensor_on_host(v->value) && psg_tensor_nbytes(pre) == psg_tensor_nbytes(v->value);
        if (fits) {
            memcpy(v->value->data, pre->data, psg_tensor_nbytes(v->value));
            psg_variable_note_unlogged(v);
        }
        pthread_mutex_unlock(&guard->lock);
        psg_tensor_destroy(&pre);
        if (!fits) continue;
        (void)psg_applied_forget(ts->repl->applied, v->name, writer, seq - 1);
        (void)psg_applied_set_last(ts->repl->applied, v->name, NULL, 0, NULL);
        undone++;
    }
    return undone;
}

/* ---- verdicts: the ps tasks found lost whose shards this task serves ---- */

/* The verdicts as lines "PS INCARNATION" (hex) into b. */
static void verdicts_dump(psg_ts_repl_t *r, psg_strbuf_t *b) {
    pthread_mutex_lock(&r->verdict_lock);
    for (int i = 0; i < r->n_verdicts; i++)
        psg_strbuf_printf(b, "%d %016" PRIx64 "\n", r->verdicts[i].ps, r->verdicts[i].inc);
    pthread_mutex_unlock(&r->verdict_lock);
}

/* This process was found lost and another task serves its shard since (its link was cut and
 * came back): every variable of its own becomes a backup copy, so that the task serving the
 * shard now copies it here (it rejoins as that task's backup) and its stale values are never
 * served, checkpointed or copied as the shard's. */
static void demote(psg_task_server_t *ts) {
    int nv = psg_resource_num_variables(ts->rm), n = 0;
    for (int i = 0; i < nv; i++) {
        psg_variable_t *v = psg_resource_variable_at(ts->rm, i);
        psg_variable_t *guard = psg_variable_guard(v);
        pthread_mutex_lock(&guard->lock);
        if (v->initialized && !v->backup) {
            v->backup = true;
            n++;
        }
        pthread_mutex_unlock(&guard->lock);
    }
    if (n > 0)
        psg_net_log("task %s: its shard is served by another task since a failover (this process, "
                    "incarnation %016" PRIx64 ", was found lost): its %d variables are backup "
                    "copies from now on, to be copied again from the shard's new primary",
                    ts->task, psg_wire_incarnation(), n);
}

/* One verdict line "PS INCARNATION" (a ps task's index, 1-16 hex digits, not 0); false when
 * malformed. */
static bool verdict_parse(const char *s, size_t n, int nps, int *ps, uint64_t *inc) {
    size_t i = 0;
    long k = 0;
    for (; i < n && i < 6 && s[i] >= '0' && s[i] <= '9'; i++) k = 10 * k + (s[i] - '0');
    if (i == 0 || i >= n || s[i] != ' ' || k >= nps) return false;
    size_t h0 = ++i;
    uint64_t x = 0;
    for (; i < n && i - h0 < 16 && strchr("0123456789abcdefABCDEF", s[i]) && s[i]; i++)
        x = x << 4 | (uint64_t)(s[i] <= '9' ? s[i] - '0' : (s[i] | 0x20) - 'a' + 10);
    if (i != n || i == h0 || x == 0) return false;
    *ps = (int)k;
    *inc = x;
    return true;
}

/* A new verdict (ps task `ps` lost): a take waiting here fails, so that the sync chief whose
 * step waits in it (for gradients the workers' failed steps send again only after its
 * failover) fails over at once instead of at the take's timeout. */
static void fail_takes(psg_task_server_t *ts, int ps) {
    char why[160];
    snprintf(why, sizeof why,
             "take failed: ps%d was found lost and failed over (the step starts again)", ps);
    int na = psg_resource_count(ts->rm, "accumulator");
    for (int i = 0; i < na; i++) {
        psg_accumulator_t *a = psg_resource_at(ts->rm, "accumulator", i, NULL);
        if (a) psg_accumulator_fail_take(a, why);
    }
}

/* Keeps the verdicts of a "lost" request's body, lines "PS INCARNATION"; one naming this
 * process demotes it. -1 with the error set (naming the line) on a malformed one. */
static int verdicts_take(psg_task_server_t *ts, const char *d, size_t len) {
    psg_ts_repl_t *r = ts->repl;
    int nps = psg_cluster_num_tasks(ts->cluster, "ps");
    for (size_t at = 0, line = 1; at < len; line++) {
        const char *nl = memchr(d + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (d + at)) : len - at;
        int ps = 0;
        uint64_t inc = 0;
        if (!verdict_parse(d + at, n, nps, &ps, &inc))
            return psg_error_set_code(PSG_ERR_BAD_REQUEST,
                                      "Replicate lost: line %zu '%.*s' is not \"PS INCARNATION\" "
                                      "(a ps task below %d, a hexadecimal incarnation)",
                                      line, (int)(n < 40 ? n : 40), d + at, nps);
        at += n + 1;
        if (ps == ts->task_dn.task && inc == psg_wire_incarnation()) {
            demote(ts);
            continue;
        }
        pthread_mutex_lock(&r->verdict_lock);
        bool seen = false;
        for (int i = 0; i < r->n_verdicts && !seen; i++)
            seen = r->verdicts[i].ps == ps && r->verdicts[i].inc == inc;
        if (!seen && r->n_verdicts == MAX_VERDICTS) { /* the oldest goes */
            memmove(r->verdicts, r->verdicts + 1, (MAX_VERDICTS - 1) * sizeof r->verdicts[0]);
            r->n_verdicts--;
        }
        if (!seen) {
            r->verdicts[r->n_verdicts].ps = ps;
            r->verdicts[r->n_verdicts++].inc = inc;
        }
        pthread_mutex_unlock(&r->verdict_lock);
        if (!seen) fail_takes(ts, ps);
        if (!seen && ps == psg_cluster_ps_backup(ts->cluster, ts->task_dn.task))
            atomic_store(&r->backup_found_lost, true);
    }
    return 0;
}

/* Key "lost": the body's verdicts kept (none: a question); the reply's body lists them all. */
static void on_lost(psg_task_server_t *ts, const psg_msg_t *req) {
    if (req->body && req->body->size &&
        verdicts_take(ts, (const char *)req->body->data, req->body->size) < 0) {
        psg_ts_reply_last_error(ts, req);
        return;
    }
    psg_strbuf_t b = {0};
    verdicts_dump(ts->repl, &b);
    psg_msg_t *m = b.oom ? NULL : psg_msg_new(PSG_MSG_REPLY, req->op);
    if (!m || (b.len && psg_msg_set_body(m, b.s, b.len) < 0)) {
        psg_msg_destroy(&m);
        free(b.s);
        psg_ts_reply_error(ts, req, PSG_ERR_NO_MEMORY, "out of memory");
        return;
    }
    free(b.s);
    psg_ts_reply_ok(ts, req, &m);
}

/* Before a full copy to a backup that was lost: the verdicts kept here, so that a backup
 * that is the lost primary of one of them (its link came back) turns its shard into backup
 * copies first. Under r->lock. */
static int send_verdicts(psg_ts_repl_t *r) {
    psg_strbuf_t b = {0};
    verdicts_dump(r, &b);
    if (b.oom || !b.len) {
        free(b.s);
        return b.oom ? psg_error_set("out of memory") : 0;
    }
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_REPLICATE);
    int rc = m && psg_msg_set_key(m, "lost") == 0 && psg_msg_set_body(m, b.s, b.len) == 0
                 ? 0
                 : psg_error_set("out of memory");
    free(b.s);
    psg_msg_t *reply = rc == 0 ? psg_ts_call_msg(r->client, &m, r->timeout_ms) : NULL;
    psg_msg_destroy(&m);
    if (!reply) return -1;
    psg_msg_destroy(&reply);
    return 0;
}

void psg_ts_on_replicate(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_msg_t *req = *reqp;
    if (!ts->repl) {
        psg_ts_reply_error(ts, req, PSG_ERR_DENIED,
                           "Replicate: this task keeps no backups (--ps-replicas is 1)");
        return;
    }
    if (r && r->u.key && !strcmp(r->u.key, "lost")) {
        on_lost(ts, req);
        return;
    }
    if (r && r->u.key && !strcmp(r->u.key, "undo")) {
        char writer[PSG_APPLIED_WRITER_MAX] = "";
        int64_t seq = 0;
        if (!update_id(req, writer, sizeof writer, &seq) || !writer[0]) {
            if (!writer[0]) psg_error_set_code(PSG_ERR_BAD_REQUEST, "Replicate undo: no update id");
            psg_ts_reply_last_error(ts, req);
            return;
        }
        int n = undo_update(ts, writer, seq);
        if (n > 0)
            psg_net_log("task %s: took back update %s %" PRId64 " from %d variables (its step "
                        "failed over: it runs again)",
                        ts->task, writer, seq, n);
        psg_ts_reply_ok(ts, req, NULL);
        return;
    }
    /* "update", "full": answered once taken (the backup holds the forward: a primary lost
     * from now on loses none of it, the server thread serves nothing that reads the copies
     * before it is applied); held, in the order taken, until a snapshot ("full") drops it
     * or something reads the copies (psg_ts_repl_before) */
    char writer[PSG_APPLIED_WRITER_MAX] = "";
    int64_t seq = 0;
    for (int i = 0; i < req->ntensors; i++)
        if (!req->names[i] || !*req->names[i]) {
            psg_ts_reply_error(ts, req, PSG_ERR_BAD_REQUEST, "Replicate: tensor %d has no name", i);
            return;
        }
    if (!update_id(req, writer, sizeof writer, &seq) || psg_repl_queue_ready(ts->repl->queue) < 0) {
        psg_ts_reply_last_error(ts, req);
        return;
    }
    psg_ts_reply_ok(ts, req, NULL);
    int updates = 0; /* its replay lines */
    const char *d = req->body ? (const char *)req->body->data : NULL;
    for (size_t i = 0, len = d ? req->body->size : 0; i < len; i++)
        updates += d[i] == '!' && (i == 0 || d[i - 1] == '\n');
    psg_repl_queue_push(ts->repl->queue, reqp, r && r->u.key && !strcmp(r->u.key, "full"), updates);
}

/* Whether every variable a registered graph names is this task's own (not a backup copy,
 * not absent): a forward taken before its run does not write them. */
static bool graph_own_only(psg_task_server_t *ts, uint64_t handle) {
    reg_graph_t *rg = psg_ts_graph_get(ts, handle);
    bool own = rg != NULL;
    for (int i = 0; own && i < rg->n_handles; i++) {
        psg_variable_t *v = psg_resource_find_variable(ts->rm, rg->handles[i]);
        if (!v) {
            own = false;
            break;
        }
        psg_variable_t *guard = psg_variable_guard(v);
        pthread_mutex_lock(&guard->lock);
        own = v->initialized && !v->backup;
        pthread_mutex_unlock(&guard->lock);
    }
    psg_ts_graph_put(ts, &rg);
    return own;
}

void psg_ts_repl_before(psg_task_server_t *ts, const psg_req_t *r) {
    /* a Recv, a brief report (the chief's membership, every 250 ms) and who is done read no
     * variable: the log stays held (dropped under the next snapshot, unapplied) */
    if (!ts->repl || r->type == PSG_REQ_RECV || psg_proto_inspect_brief(r) ||
        r->type == PSG_REQ_JOB_DONE || r->type == PSG_REQ_WAIT_DONE)
        return;
    bool forward = r->type == PSG_REQ_REPLICATE &&
                   (!r->u.key || (strcmp(r->u.key, "lost") && strcmp(r->u.key, "undo")));
    /* a step of this task's own shard runs beside the log of its primary's (disjoint
     * variables) and leaves it held; one that names a copy (a failover to this task) runs
     * after it is applied */
    bool run = r->type == PSG_REQ_RUN_GRAPH || r->type == PSG_REQ_RUN_GRAPH_RECV;
    if (forward || (run && graph_own_only(ts, r->u.run.handle))) return;
    int held = psg_repl_queue_drain(ts->repl->queue);
    if (held > 0) /* Inspect's "drains_as_backup" */
        atomic_fetch_add(
            &ts->repl->drains[r->type >= 0 && r->type < PSG_REQ_COUNT ? r->type : PSG_REQ_COUNT],
            1);
    /* said but before what reads the copies routinely: a report (psgraph inspect, the tests'
     * comparisons), a checkpoint */
    if (held > 0 && r->type != PSG_REQ_INSPECT && r->type != PSG_REQ_SAVE_SHARD)
        psg_net_log("task %s: applied the %d forwards of its primary it held (its last snapshot "
                    "and the updates since) before a %s",
                    ts->task, held, psg_proto_entry(r->type)->op);
}

/* A forward taken (psg_ts_on_replicate), on the queue's thread: its records merged, its
 * values written, its updates replayed; -1 with the error set (and said). */
static int apply_forward(void *ctx, const psg_msg_t *req) {
    psg_ts_repl_t *r = ctx;
    psg_task_server_t *ts = r->ts;
    char writer[PSG_APPLIED_WRITER_MAX] = "";
    int64_t seq = 0;
    int rc = 0, replayed = 0;
    if (req->body && req->body->size &&
        psg_applied_merge(r->applied, (const char *)req->body->data, req->body->size) < 0)
        rc = -1;
    if (rc == 0 && !update_id(req, writer, sizeof writer, &seq)) rc = -1;
    for (int i = 0; rc == 0 && i < req->ntensors; i++)
        if (strcmp(req->names[i], "@") && req->names[i][0] != PRE_PREFIX) /* "@": an input */
            rc = apply_copy(ts, req->names[i], req->tensors[i]);
    for (int i = 0; rc == 0 && i < req->ntensors; i++) /* a snapshot's ways back, then */
        if (req->names[i][0] == PRE_PREFIX)
            rc = apply_pre(ts, req->names[i] + 1, req->tensors[i], writer, seq);
    /* then the updates of the variables not sent by value (disjoint from those) */
    if (rc == 0) rc = psg_repl_replay(r->log, ts->rm, r->applied, req, &replayed);
    atomic_fetch_add(&r->replayed_here, (uint64_t)replayed);
    if (rc < 0) {
        psg_error_wrap("Replicate");
        psg_net_log("task %s: a forward of its primary failed to apply here (%s): its next "
                    "forward is refused, so that it copies the whole shard again",
                    ts->task, psg_error_message());
    }
    return rc;
}

void psg_ts_repl_stats(psg_ts_repl_t *r, psg_strbuf_t *b) {
    uint64_t held = 0, dropped = 0;
    psg_repl_queue_stats(r->queue, &held, &dropped);
    uint64_t since = (uint64_t)atomic_load(&r->since_snapshot);
    psg_strbuf_printf(b,
                      "{\"forwards\":%" PRIu64 ",\"updates_replayed\":%" PRIu64
                      ",\"values\":%" PRIu64 ",\"bytes\":%" PRIu64
                      ",\"replayed_as_backup\":%" PRIu64 ",\"snapshots\":%" PRIu64
                      ",\"since_snapshot\":%" PRIu64 ",\"held_as_backup\":%" PRIu64
                      ",\"dropped_as_backup\":%" PRIu64,
                      (uint64_t)atomic_load(&r->forwards), (uint64_t)atomic_load(&r->replayed),
                      (uint64_t)atomic_load(&r->values), (uint64_t)atomic_load(&r->bytes),
                      (uint64_t)atomic_load(&r->replayed_here),
                      (uint64_t)atomic_load(&r->snapshots), since, held, dropped);
    /* {"Inspect":1,"RegisterGraph":2}: what made this backup apply the log it held */
    psg_strbuf_str(b, ",\"drains_as_backup\":{");
    for (int t = 0, k = 0; t <= PSG_REQ_COUNT; t++) {
        uint64_t n = (uint64_t)atomic_load(&r->drains[t]);
        if (n)
            psg_strbuf_printf(b, "%s\"%s\":%" PRIu64, k++ ? "," : "",
                              t < PSG_REQ_COUNT ? psg_proto_entry((psg_req_type_t)t)->op : "other",
                              n);
    }
    psg_strbuf_str(b, "}}");
}
