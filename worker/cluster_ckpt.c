/* Checkpoints and recovery of a training job in a cluster (worker/cluster_ckpt.h): the
 * chief's saver (SaveShard to every ps in parallel, then the index and the prune), the
 * start (restore the shards of ps tasks that hold nothing, or run their initializers), and
 * the recovery after a failed step (wait for every ps, restore the shard of a ps that
 * restarted, register the graphs again). Not the ps side (task_server.c). */
#include "worker/cluster_ckpt.h"

#include "ps/protocol.h"
#include "psgraph/checkpoint.h"
#include "psgraph/clock.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "worker/failover.h"
#include "worker/resume.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_KEEP 5
#define DEFAULT_EVERY_SECS 600.0
/* How long a recovery waits for a lost ps to come back by default (launch --restart
 * on-failure restarts it within seconds; without it, the job stops then, naming the ps). */
#define DEFAULT_RECOVERY_MS 60000

struct psg_cluster_ckpt {
    const psg_train_config_t *c;
    const psg_cluster_t *cluster;
    psg_dist_session_t *ds;
    bool chief;
    const char *task;
    FILE *out, *metrics;
    int nps;
    int64_t timeout_ms;
    int64_t recovery_ms; /* how long a lost ps is waited for */
    psg_checkpoint_policy_t policy;
    int64_t last_saved; /* the step of the newest committed checkpoint, -1: none */
    double last_save_time;
    uint64_t
        *ps_inc; /* each ps's incarnation when last heard (0: not yet): a new one is a restart */
};

static const char *ps_task(int i, char *buf, size_t size) {
    return psg_device_name("ps", i, NULL, buf, size);
}

psg_cluster_ckpt_t *psg_cluster_ckpt_new(const psg_train_config_t *c, const psg_cluster_t *cluster,
                                         psg_dist_session_t *ds, bool chief, const char *task,
                                         FILE *out, FILE *metrics) {
    psg_cluster_ckpt_t *h = calloc(1, sizeof *h);
    if (!h) {
        psg_error_set("out of memory");
        return NULL;
    }
    *h = (psg_cluster_ckpt_t){.c = c,
                              .cluster = cluster,
                              .ds = ds,
                              .chief = chief,
                              .task = task,
                              .out = out,
                              .metrics = metrics,
                              .nps = psg_cluster_num_tasks(cluster, "ps"),
                              .timeout_ms = c->step_timeout_ms > 0 ? c->step_timeout_ms : 30000,
                              .recovery_ms = c->recovery_timeout_s > 0
                                                 ? (int64_t)(c->recovery_timeout_s * 1000)
                                                 : DEFAULT_RECOVERY_MS,
                              .last_saved = -1,
                              .last_save_time = psg_now_sec()};
    if (!(h->ps_inc = calloc((size_t)h->nps + 1, sizeof *h->ps_inc))) {
        psg_error_set("out of memory");
        free(h);
        return NULL;
    }
    h->policy.keep = c->keep > 0 ? c->keep : DEFAULT_KEEP;
    h->policy.every_secs = DEFAULT_EVERY_SECS;
    if (c->checkpoint_every && psg_checkpoint_policy_parse(c->checkpoint_every, &h->policy) < 0) {
        psg_error_wrap("--checkpoint-every");
        psg_cluster_ckpt_destroy(&h);
    }
    return h;
}

void psg_cluster_ckpt_destroy(psg_cluster_ckpt_t **h) {
    if (!h || !*h) return;
    free((*h)->ps_inc);
    free(*h);
    *h = NULL;
}

/* The step of the newest checkpoint of the logdir whose every shard verifies into *step
 * (-1: none); -1 with the error set when there are checkpoints and none verifies (unless
 * --fresh-start: worker/resume.h). */
static int latest_step(psg_cluster_ckpt_t *h, int64_t *step) {
    psg_checkpoint_t *ck = NULL;
    *step = -1;
    if (!h->c->logdir) return 0;
    int found = psg_resume_open_latest(h->c->logdir, h->c->fresh_start, h->out, &ck);
    if (found < 0) return -1;
    if (found > 0) *step = psg_checkpoint_step(ck);
    psg_checkpoint_destroy(&ck);
    return 0;
}

/* Waits until ps i answers Inspect (each try bounded by the step timeout: a try returns as
 * soon as the task is up again), up to the recovery deadline. *restarted: whether it is a
 * new process since it was last heard (a new incarnation; the first time, whether it holds
 * no initialized variable). */
static int wait_ps(psg_cluster_ckpt_t *h, int i, double deadline, bool *restarted) {
    char task[PSG_DEVICE_NAME_MAX];
    ps_task(i, task, sizeof task);
    for (;;) {
        /* each try bounded by what is left, so that the deadline holds */
        int64_t left = (int64_t)((deadline - psg_now_sec()) * 1e3);
        char *json = psg_dist_session_inspect_within(h->ds, task,
                                                     left < 1000            ? 1000
                                                     : left < h->timeout_ms ? left
                                                                            : h->timeout_ms);
        if (json) {
            uint64_t inc = psg_dist_session_incarnation(h->ds, task);
            bool holds = psg_failover_holds_own(json); /* backup copies are another's */
            *restarted = h->ps_inc[i] ? inc != h->ps_inc[i] : !holds;
            if (h->ps_inc[i] && *restarted) {
                fprintf(h->out,
                        "%s: ps%d is a new process (incarnation %016" PRIx64 ", was %016" PRIx64
                        ")\n",
                        h->task, i, inc, h->ps_inc[i]);
                fflush(h->out);
            }
            h->ps_inc[i] = inc;
            free(json);
            return 0;
        }
        if (psg_now_sec() > deadline) return psg_error_wrap("recovery: %s did not come back", task);
    }
}

/* Gives ps i its shard of the checkpoint at `step` (step < 0: runs its initializers). */
static int restore_ps(psg_cluster_ckpt_t *h, int i, int64_t step, int *tensors) {
    char task[PSG_DEVICE_NAME_MAX];
    ps_task(i, task, sizeof task);
    *tensors = 0;
    if (step < 0) return psg_dist_session_run_init_on(h->ds, task);
    (void)psg_dist_session_drain(h->ds); /* a step open on a restarted ps failed with it */
    psg_req_t req = {
        .type = PSG_REQ_RESTORE_SHARD, .step = step, .u.shard = {.shard = i, .num_shards = h->nps}};
    snprintf(req.u.shard.dir, sizeof req.u.shard.dir, "%s", h->c->logdir);
    psg_msg_t *m = psg_req_encode(&req);
    psg_msg_t *r = m ? psg_dist_session_call(h->ds, task, &m, h->timeout_ms) : NULL;
    psg_rep_t rep;
    if (!r || psg_rep_decode(r, PSG_REQ_RESTORE_SHARD, &rep) < 0) {
        psg_msg_destroy(&r);
        return psg_error_wrap("restoring shard %d from step %" PRId64, i, step);
    }
    *tensors = (int)rep.u.count;
    psg_msg_destroy(&r);
    return 0;
}

/* A chief that restarted while ps tasks hold their shards (holding > 0), some of which
 * restarted too (fresh): with a backup of each shard, those fail over to their backups
 * (docs/replication.md) instead of being restored from the checkpoint or initialized again;
 * the others (no backup holds their shard) are, by the caller. */
static void start_failover(psg_cluster_ckpt_t *h, int holding, const bool *fresh) {
    int n_fresh = 0;
    for (int i = 0; i < h->nps; i++) n_fresh += fresh[i];
    if (psg_cluster_ps_replicas(h->cluster) < 2 || holding == 0 || n_fresh == 0) return;
    int64_t probe = 1000, peer = psg_cluster_peer_timeout_ms(h->cluster);
    if (peer > 0 && peer < probe) probe = peer;
    int64_t wait = h->timeout_ms < 5000 ? h->timeout_ms : 5000;
    bool moved = false;
    fprintf(h->out,
            "%s: %d of %d ps tasks hold their shards and %d restarted too: failing those over to "
            "their backups\n",
            h->task, holding, h->nps, n_fresh);
    if (psg_failover_recover(h->ds, h->cluster, probe, wait, h->out, h->metrics, -1, &moved) < 0)
        fprintf(h->out, "failover: %s; restoring them from the checkpoint\n", psg_error_message());
    fflush(h->out);
}

int psg_cluster_ckpt_start(psg_cluster_ckpt_t *h, int64_t *start_step) {
    int64_t latest = -1;
    if (latest_step(h, &latest) < 0) return -1;
    *start_step = latest > 0 ? latest : 0;
    h->last_saved = latest;
    if (!h->chief) {
        if (psg_dist_session_wait_init(h->ds, 600000) < 0) return psg_error_wrap("%s", h->task);
        if (latest > 0) {
            fprintf(h->out, "%s: going on from the checkpoint at step %" PRId64 "\n", h->task,
                    latest);
            fflush(h->out);
        }
        return 0;
    }
    /* the ps tasks may still be starting (over ssh, pulling an image): the default at least */
    int64_t wait_ms = h->recovery_ms > DEFAULT_RECOVERY_MS ? h->recovery_ms : DEFAULT_RECOVERY_MS;
    double deadline =
        psg_now_sec() + (double)(wait_ms > h->timeout_ms ? wait_ms : h->timeout_ms) / 1e3;
    int holding = 0;
    bool *fresh = calloc((size_t)h->nps, sizeof *fresh);
    if (!fresh) return psg_error_set("out of memory");
    for (int i = 0; i < h->nps; i++) {
        if (wait_ps(h, i, deadline, &fresh[i]) < 0) {
            free(fresh);
            return -1;
        }
        holding += !fresh[i];
    }
    start_failover(h, holding, fresh);
    for (int i = 0; i < h->nps; i++) {
        if (!fresh[i] || psg_dist_session_ps_serving(h->ds, i) != i) continue;
        int n = 0;
        double t0 = psg_now_sec();
        if (restore_ps(h, i, latest, &n) < 0) {
            free(fresh);
            return -1;
        }
        if (latest >= 0)
            fprintf(h->out,
                    "restored shard %d of %s/%s-%" PRId64
                    ".index.json on ps%d: %d tensors (%.3f s)\n",
                    i, h->c->logdir, PSG_CKPT_PREFIX, latest, i, n, psg_now_sec() - t0);
    }
    free(fresh);
    if (holding)
        fprintf(h->out,
                "%d of %d ps tasks hold initialized variables (the chief restarted): not "
                "re-initializing them; going on from step %" PRId64 "\n",
                holding, h->nps, *start_step);
    fflush(h->out);
    /* variables of the chief's own task, if any (a fresh process) */
    return psg_dist_session_run_init_on(h->ds, h->task);
}

typedef struct {
    psg_cluster_ckpt_t *h;
    int shard;
    int64_t step;
    psg_checkpoint_shard_t report;
    int rc;
    char error[1024];
} save_job_t;

/* Asks ps `shard` to write its shard and parses its report. */
static void *save_one(void *arg) {
    save_job_t *j = arg;
    psg_cluster_ckpt_t *h = j->h;
    char task[PSG_DEVICE_NAME_MAX];
    ps_task(j->shard, task, sizeof task);
    psg_req_t req = {.type = PSG_REQ_SAVE_SHARD,
                     .step = j->step,
                     .u.shard = {.shard = j->shard, .num_shards = h->nps}};
    snprintf(req.u.shard.dir, sizeof req.u.shard.dir, "%s", h->c->logdir);
    psg_msg_t *m = psg_req_encode(&req), *r = NULL;
    j->rc = -1;
    if (m) r = psg_dist_session_call(h->ds, task, &m, h->timeout_ms);
    psg_msg_destroy(&m);
    if (!r) {
        snprintf(j->error, sizeof j->error, "%s", psg_error_message());
    } else if (psg_checkpoint_shard_parse(&j->report, r->key, r->body ? r->body->data : "",
                                          r->body ? r->body->size : 0) < 0) {
        snprintf(j->error, sizeof j->error, "task %s: SaveShard: %s", task, psg_error_message());
    } else {
        j->rc = 0;
    }
    psg_msg_destroy(&r);
    return NULL;
}

/* The chief's save at `step`: every ps writes its shard at once, then the index, the prune. */
static int save(psg_cluster_ckpt_t *h, int64_t step) {
    double t0 = psg_now_sec();
    /* the shards hold every update of the steps before: the last overlapped one applied */
    if (psg_dist_session_drain(h->ds) < 0)
        return psg_error_wrap("checkpoint at step %" PRId64, step);
    save_job_t *jobs = calloc((size_t)h->nps, sizeof *jobs);
    pthread_t *th = calloc((size_t)h->nps, sizeof *th);
    bool *started = calloc((size_t)h->nps, sizeof *started);
    int rc = jobs && th && started ? 0 : psg_error_set("out of memory");
    for (int i = 0; rc == 0 && i < h->nps; i++) {
        jobs[i] = (save_job_t){.h = h, .shard = i, .step = step};
        started[i] = pthread_create(&th[i], NULL, save_one, &jobs[i]) == 0;
        if (!started[i]) save_one(&jobs[i]);
    }
    for (int i = 0; rc == 0 && i < h->nps; i++)
        if (started[i]) pthread_join(th[i], NULL);
    for (int i = 0; rc == 0 && i < h->nps; i++)
        if (jobs[i].rc < 0)
            rc = psg_error_set("checkpoint at step %" PRId64 ": %s", step, jobs[i].error);
    psg_checkpoint_shard_t *reports = rc == 0 ? calloc((size_t)h->nps, sizeof *reports) : NULL;
    for (int i = 0; reports && i < h->nps; i++) reports[i] = jobs[i].report;
    if (rc == 0 && !reports) rc = psg_error_set("out of memory");
    if (rc == 0 && psg_checkpoint_write_index(h->c->logdir, step, h->nps, reports) < 0) rc = -1;
    if (rc == 0 && psg_checkpoint_prune(h->c->logdir, h->policy.keep) < 0) rc = -1;
    free(reports);
    for (int i = 0; jobs && i < h->nps; i++) psg_checkpoint_shard_clear(&jobs[i].report);
    free(jobs);
    free(th);
    free(started);
    if (rc < 0) return -1;
    double secs = psg_now_sec() - t0;
    h->last_saved = step;
    h->last_save_time = psg_now_sec();
    fprintf(h->out,
            "checkpoint %s/%s-%" PRId64
            ".index.json written in %.3f s (%d ps shards in parallel)\n",
            h->c->logdir, PSG_CKPT_PREFIX, step, secs, h->nps);
    fflush(h->out);
    if (h->metrics)
        fprintf(h->metrics,
                "{\"event\":\"checkpoint\",\"step\":%" PRId64 ",\"seconds\":%.4f,\"shards\":%d}\n",
                step, secs, h->nps);
    return 0;
}

int psg_cluster_ckpt_after_step(psg_cluster_ckpt_t *h, int64_t done) {
    if (!h->chief || !h->c->logdir ||
        !psg_checkpoint_policy_due(&h->policy, done, h->last_saved, psg_now_sec(),
                                   h->last_save_time))
        return 0;
    if (save(h, done) == 0) return 0;
    /* a ps down (it will be restarted): no index, the shard files written are orphans that
     * a later prune removes; training goes on and the next save is due at the next interval */
    fprintf(h->out, "warning: %s; not committed, training goes on\n", psg_error_message());
    fflush(h->out);
    h->last_save_time = psg_now_sec();
    return 0;
}

int psg_cluster_ckpt_end(psg_cluster_ckpt_t *h, int64_t step) {
    if (!h->chief || !h->c->logdir) return 0;
    return save(h, step);
}

/* With a backup of each shard: fails over from the ps tasks that are lost. 1 when it did
 * (the step can be retried), 0 when none is lost or it cannot (then the checkpoint restore
 * runs, said so). */
static int try_failover(psg_cluster_ckpt_t *h, int64_t step, const char *why) {
    if (psg_cluster_ps_replicas(h->cluster) < 2) return 0;
    fprintf(h->out, "recovery: step %" PRId64 " failed (%s); probing the ps tasks\n", step + 1,
            why);
    fflush(h->out);
    /* a live ps answers Inspect on its server thread at once: a second tells a dead one */
    int64_t probe = 1000, peer = psg_cluster_peer_timeout_ms(h->cluster);
    if (peer > 0 && peer < probe) probe = peer;
    bool moved = false;
    /* a backup being re-replicated holds its copies within a few seconds */
    int64_t wait = h->timeout_ms < 5000 ? h->timeout_ms : 5000;
    if (psg_failover_recover(h->ds, h->cluster, probe, wait, h->out, h->metrics, step, &moved) <
        0) {
        fprintf(h->out, "failover: %s; falling back to the checkpoint restore\n",
                psg_error_message());
        fflush(h->out);
        return 0;
    }
    for (int i = 0; moved && i < h->nps; i++) { /* the processes the shards are on now */
        char task[PSG_DEVICE_NAME_MAX];
        ps_task(i, task, sizeof task);
        uint64_t inc = psg_dist_session_incarnation(h->ds, task);
        if (inc) h->ps_inc[i] = inc;
    }
    return moved;
}

int psg_cluster_ckpt_recover(psg_cluster_ckpt_t *h, int64_t step) {
    char why[1024];
    snprintf(why, sizeof why, "%s", psg_error_message());
    if (try_failover(h, step, why)) return 0;
    fprintf(h->out, "recovery: step %" PRId64 " failed (%s); waiting for every ps task\n", step + 1,
            why);
    fflush(h->out);
    double t0 = psg_now_sec();
    double deadline = t0 + (double)h->recovery_ms / 1e3;
    for (int i = 0; i < h->nps; i++) {
        bool restarted = false;
        if (psg_dist_session_ps_serving(h->ds, i) != i) continue; /* failed over: serves none */
        if (wait_ps(h, i, deadline, &restarted) < 0) return -1;
        if (!restarted || !h->chief) continue;
        /* ps i restarted: only its shard rolls back, the others keep their values */
        int n = 0;
        if (restore_ps(h, i, h->last_saved, &n) < 0) return -1;
        int64_t lost = h->last_saved >= 0 ? step - h->last_saved : step;
        if (h->last_saved >= 0)
            fprintf(h->out,
                    "recovery: ps%d restarted; restored its shard %d from %s/%s-%" PRId64
                    ".index.json (%d tensors); lost %" PRId64 " steps of shard %d (step %" PRId64
                    ", checkpoint at %" PRId64 "); the other shards keep their values\n",
                    i, i, h->c->logdir, PSG_CKPT_PREFIX, h->last_saved, n, lost, i, step,
                    h->last_saved);
        else
            fprintf(h->out,
                    "recovery: ps%d restarted before any checkpoint; re-initialized its "
                    "variables; lost %" PRId64 " steps of shard %d\n",
                    i, lost, i);
        if (h->metrics)
            fprintf(h->metrics,
                    "{\"event\":\"recovery\",\"ps\":%d,\"step\":%" PRId64 ",\"checkpoint\":%" PRId64
                    ",\"steps_lost\":%" PRId64 "}\n",
                    i, step, h->last_saved, lost);
        fflush(h->out);
    }
    if (!h->chief && psg_dist_session_wait_init(h->ds, (int64_t)((deadline - psg_now_sec()) * 1e3) +
                                                           h->timeout_ms) < 0)
        return psg_error_wrap("recovery");
    if (psg_dist_session_reregister(h->ds) < 0) return psg_error_wrap("recovery");
    fprintf(h->out, "recovery: every ps task answers (%.2f s); retrying step %" PRId64 "\n",
            psg_now_sec() - t0, step + 1);
    fflush(h->out);
    return 0;
}

int psg_cluster_ckpt_trace_ps(psg_cluster_ckpt_t *h, bool start, int64_t step, const char *prefix) {
    if (psg_dist_session_drain(h->ds) < 0) return psg_error_wrap("--trace");
    for (int i = 0; i < h->nps; i++) {
        char task[PSG_DEVICE_NAME_MAX];
        ps_task(i, task, sizeof task);
        psg_req_t req = {
            .type = PSG_REQ_TRACE, .step = step, .u.trace = {.start = start, .pid = i}};
        snprintf(req.u.trace.path, sizeof req.u.trace.path, "%s.ps%d.json", prefix, i);
        psg_msg_t *m = psg_req_encode(&req);
        psg_msg_t *r = m ? psg_dist_session_call(h->ds, task, &m, h->timeout_ms) : NULL;
        if (!r) return psg_error_wrap("--trace");
        if (!start)
            fprintf(h->out, "trace: %s events of %s written to %s\n", r->key ? r->key : "?", task,
                    req.u.trace.path);
        psg_msg_destroy(&r);
    }
    fflush(h->out);
    return 0;
}
