/* The single-process trainer's checkpoint, summary and timeline hooks
 * (worker/train_hooks.h): the glue between the training loop and
 * ps/checkpoint*.c, worker/summary.c and runtime/trace.c. Not the multi-process
 * runtime, where the chief asks each ps to write its shard. */
#include "worker/train_hooks.h"

#include "psgraph/checkpoint.h"
#include "psgraph/clock.h"
#include "psgraph/error.h"
#include "psgraph/summary.h"
#include "psgraph/trace.h"
#include "worker/resume.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_KEEP 5
#define DEFAULT_EVERY_SECS 600.0

struct psg_train_hooks {
    const psg_train_config_t *c;
    psg_session_t *sess;
    FILE *out, *metrics;
    psg_checkpoint_policy_t policy;
    int64_t last_saved;
    double last_save_time;
    psg_summary_writer_t *events;
    psg_trace_t *trace;
    bool tracing;
    psg_cluster_ckpt_t *cluster; /* in a cluster: the chief's saver, recovery */
    bool chief;
    psg_task_server_t *server; /* in a cluster: whose node hook traces */
    const char *trace_path;    /* the merged trace's path (the launcher merges) */
    int64_t trace_first, trace_last;
    char trace_file[4200]; /* this task's part */
    bool ps_tracing;
    int64_t step_start_ns, step_served, step_pulled; /* the traced step's start */
    int64_t last_step;                               /* the loop's last step; 0: unknown */
};

static int restore(psg_train_hooks_t *h, int64_t *start_step) {
    psg_checkpoint_t *ck = NULL;
    double t0 = psg_now_sec();
    int found = psg_resume_open_latest(h->c->logdir, h->c->fresh_start, h->out, &ck);
    if (found <= 0) return found;
    psg_resource_mgr_t *rm = psg_session_resources(h->sess);
    bool match = false;
    int rc = psg_checkpoint_restore(ck, rm, true);
    if (rc == 0) rc = psg_checkpoint_verify_restored(ck, rm, &match);
    if (rc == 0 && !match)
        rc = psg_error_set("%s: the variables differ from the checkpoint after restore",
                           psg_checkpoint_path(ck));
    if (rc == 0) {
        *start_step = psg_checkpoint_step(ck);
        h->last_saved = *start_step;
        fprintf(
            h->out,
            "restored %s: global step %lld, %d tensors, values verified against its crc32 (%.3f s)\n",
            psg_checkpoint_path(ck), (long long)*start_step, psg_checkpoint_num_tensors(ck),
            psg_now_sec() - t0);
        fflush(h->out);
    }
    psg_checkpoint_destroy(&ck);
    return rc;
}

psg_train_hooks_t *psg_train_hooks_new(const psg_train_config_t *c, psg_session_t *sess, FILE *out,
                                       FILE *metrics, int64_t *start_step) {
    *start_step = 0;
    psg_train_hooks_t *h = calloc(1, sizeof *h);
    if (!h) {
        psg_error_set("out of memory");
        return NULL;
    }
    h->c = c;
    h->sess = sess;
    h->out = out;
    h->metrics = metrics;
    h->policy.keep = c->keep > 0 ? c->keep : DEFAULT_KEEP;
    h->policy.every_secs = DEFAULT_EVERY_SECS;
    h->last_saved = -1;
    h->last_save_time = psg_now_sec();
    if (c->checkpoint_every && psg_checkpoint_policy_parse(c->checkpoint_every, &h->policy) < 0) {
        psg_error_wrap("--checkpoint-every");
        goto fail;
    }
    if (c->logdir) {
        if (restore(h, start_step) < 0) goto fail;
        if (!(h->events = psg_summary_writer_new(c->logdir))) goto fail;
    }
    if (c->trace_path && !(h->trace = psg_trace_new(0, "/job:localhost/replica:0/task:0", "CPU:0")))
        goto fail;
    return h;
fail:
    psg_train_hooks_destroy(&h);
    return NULL;
}

void psg_train_hooks_destroy(psg_train_hooks_t **ph) {
    if (!ph || !*ph) return;
    psg_train_hooks_t *h = *ph;
    if (h->tracing && h->server)
        psg_task_server_set_node_hook(h->server, NULL, NULL);
    else if (h->tracing)
        psg_session_set_node_hook(h->sess, NULL, NULL);
    psg_summary_writer_destroy(&h->events);
    psg_trace_destroy(&h->trace);
    psg_cluster_ckpt_destroy(&h->cluster);
    free(h);
    *ph = NULL;
}

int psg_train_hooks_set_cluster(psg_train_hooks_t *h, psg_cluster_ckpt_t *cc, bool chief,
                                const psg_train_config_t *c, psg_task_server_t *server,
                                int trace_pid, const char *task, const char *tag) {
    psg_cluster_ckpt_destroy(&h->cluster);
    h->cluster = cc;
    h->chief = chief;
    h->server = server;
    if (chief && c->logdir && !h->events && !(h->events = psg_summary_writer_new(c->logdir)))
        return -1;
    if (c->trace_path && !h->trace) {
        if (!(h->trace = psg_trace_new(trace_pid, task, "CPU:0")))
            return psg_error_set("out of memory");
        h->trace_path = c->trace_path;
        h->trace_first = c->trace_first;
        h->trace_last = c->trace_last;
        snprintf(h->trace_file, sizeof h->trace_file, "%s.%s.json", c->trace_path, tag);
    }
    return 0;
}

int psg_train_hooks_recover(psg_train_hooks_t *h, int64_t step) {
    if (!h->cluster) return -1;
    return psg_cluster_ckpt_recover(h->cluster, step);
}

void psg_train_hooks_before_step(psg_train_hooks_t *h, int64_t step) {
    if (h->server) {
        if (!h->trace || step + 1 < h->trace_first || step + 1 > h->trace_last) return;
        if (h->chief && !h->ps_tracing) {
            h->ps_tracing =
                psg_cluster_ckpt_trace_ps(h->cluster, true, step + 1, h->trace_path) == 0;
            if (!h->ps_tracing) fprintf(h->out, "warning: %s\n", psg_error_message());
        }
        psg_trace_set_step(h->trace, step + 1);
        psg_task_server_set_node_hook(h->server, psg_trace_node_hook, h->trace);
        h->tracing = true;
        psg_task_server_tensor_bytes(h->server, &h->step_served, &h->step_pulled);
        h->step_start_ns = (int64_t)(psg_now_sec() * 1e9);
        return;
    }
    if (!h->trace || step + 1 < h->c->trace_first || step + 1 > h->c->trace_last) return;
    psg_trace_set_step(h->trace, step + 1);
    psg_session_set_node_hook(h->sess, psg_trace_node_hook, h->trace);
    h->tracing = true;
}

/* The chief's stop of the ps tasks' timeline. */
static int stop_ps_trace(psg_train_hooks_t *h) {
    if (!h->ps_tracing) return 0;
    h->ps_tracing = false;
    return psg_cluster_ckpt_trace_ps(h->cluster, false, 0, h->trace_path);
}

static int save(psg_train_hooks_t *h, int64_t step) {
    psg_resource_mgr_t *rm = psg_session_resources(h->sess);
    double secs = 0;
    if (psg_checkpoint_save(h->c->logdir, step, 1, &rm, h->policy.keep, &secs) < 0)
        return psg_error_wrap("checkpoint at step %lld", (long long)step);
    h->last_saved = step;
    h->last_save_time = psg_now_sec();
    fprintf(h->out, "checkpoint %s/%s-%lld.index.json written in %.3f s\n", h->c->logdir,
            PSG_CKPT_PREFIX, (long long)step, secs);
    fflush(h->out);
    if (h->metrics)
        fprintf(h->metrics, "{\"event\":\"checkpoint\",\"step\":%lld,\"seconds\":%.4f}\n",
                (long long)step, secs);
    return 0;
}

int psg_train_hooks_after_step(psg_train_hooks_t *h, int64_t done) {
    if (h->tracing) {
        if (h->server) {
            /* the step's span with the bytes it moved: pushed (peers pulled from this
             * task: gradients), pulled (this task pulled: variables, rows) */
            int64_t served = 0, pulled = 0;
            psg_task_server_tensor_bytes(h->server, &served, &pulled);
            psg_trace_step_event(h->trace, done, h->step_start_ns, (int64_t)(psg_now_sec() * 1e9),
                                 served - h->step_served, pulled - h->step_pulled);
            psg_task_server_set_node_hook(h->server, NULL, NULL);
        } else {
            psg_session_set_node_hook(h->sess, NULL, NULL);
        }
        h->tracing = false;
    }
    if (h->server && done >= h->trace_last && stop_ps_trace(h) < 0) return -1;
    if (h->cluster) /* the last one waits for the other workers (final_checkpoint) */
        return h->last_step > 0 && done >= h->last_step
                   ? 0
                   : psg_cluster_ckpt_after_step(h->cluster, done);
    if (h->c->logdir && psg_checkpoint_policy_due(&h->policy, done, h->last_saved, psg_now_sec(),
                                                  h->last_save_time))
        return save(h, done);
    return 0;
}

int psg_train_hooks_progress(psg_train_hooks_t *h, int64_t step, double loss, double lr,
                             double examples_per_sec) {
    if (!h->events) return 0;
    const char *tags[] = {"loss", "learning_rate", "examples_per_sec"};
    float v[] = {(float)loss, (float)lr, (float)examples_per_sec};
    return psg_summary_scalars(h->events, step, 3, tags, v);
}

int psg_train_hooks_eval(psg_train_hooks_t *h, int64_t step, const psg_train_eval_t *e, bool topk) {
    if (!h->events) return 0;
    if (!topk) return psg_summary_scalar(h->events, step, "accuracy", (float)e->accuracy);
    const char *tags[] = {"accuracy", "top1", "top5", "top1_ema", "top5_ema"};
    float v[] = {(float)e->accuracy, (float)e->top1[0], (float)e->top5[0], (float)e->top1[1],
                 (float)e->top5[1]};
    return psg_summary_scalars(h->events, step, e->n_models > 1 ? 5 : 3, tags, v);
}

void psg_train_hooks_set_last_step(psg_train_hooks_t *h, int64_t last) {
    h->last_step = last;
}

int psg_train_hooks_final_checkpoint(psg_train_hooks_t *h, int64_t step) {
    return h->cluster ? psg_cluster_ckpt_end(h->cluster, step) : 0;
}

int psg_train_hooks_end(psg_train_hooks_t *h, int64_t step) {
    if (h->server) {
        if (stop_ps_trace(h) < 0) return -1;
        if (!h->trace) return 0;
        if (psg_trace_write(h->trace, h->trace_file) < 0) return psg_error_wrap("--trace");
        fprintf(
            h->out,
            "trace: %d op events of steps %lld to %lld written to %s (psgraph launch merges the tasks' files into %s)\n",
            psg_trace_num_events(h->trace), (long long)h->trace_first, (long long)h->trace_last,
            h->trace_file, h->trace_path);
        fflush(h->out);
        return 0;
    }
    if (h->c->logdir && step != h->last_saved && save(h, step) < 0) return -1;
    if (h->trace) {
        if (psg_trace_write(h->trace, h->c->trace_path) < 0) return psg_error_wrap("--trace");
        fprintf(h->out, "trace: %d op events of steps %lld to %lld written to %s\n",
                psg_trace_num_events(h->trace), (long long)h->c->trace_first,
                (long long)h->c->trace_last, h->c->trace_path);
        fflush(h->out);
    }
    return 0;
}

const char *psg_train_hooks_eta(double secs, char *buf, size_t size) {
    long long t = secs > 0 && secs < 1e9 ? (long long)(secs + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, size, "%lldh%02lldm%02llds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60)
        snprintf(buf, size, "%lldm%02llds", t / 60, t % 60);
    else
        snprintf(buf, size, "%llds", t);
    return buf;
}

int psg_train_hooks_join_cluster(psg_train_hooks_t *h, const psg_train_config_t *c,
                                 const psg_worker_task_t *w, psg_dist_session_t *ds, FILE *out,
                                 FILE *metrics, int64_t *start_step) {
    psg_cluster_ckpt_t *cc =
        psg_cluster_ckpt_new(c, w->cluster, ds, w->chief, w->task, out, metrics);
    if (!cc || psg_cluster_ckpt_start(cc, start_step) < 0) {
        psg_cluster_ckpt_destroy(&cc);
        return psg_error_wrap("%s", w->task);
    }
    char tag[64];
    psg_worker_task_tag(w, tag, sizeof tag);
    return psg_train_hooks_set_cluster(h, cc, w->chief, c, w->server,
                                       psg_cluster_num_tasks(w->cluster, "ps") + w->rank, w->task,
                                       tag);
}
