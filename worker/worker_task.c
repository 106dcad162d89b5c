/* A worker process's place in a cluster (worker_task.h): which task it is,
 * its rank and the chief, its task server and replica device setter. Not
 * the session and not the training loop. */
#include "worker/worker_task.h"

#include "psgraph/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool psg_worker_task_wanted(const psg_train_config_t *c) {
    return c->cluster_file || psg_cluster_env_given();
}

/* The cluster's errors are the configuration's (psgraph exits 2 on them). */
#define CONFIG_ERROR(...) psg_error_set_code(PSG_ERR_CONFIG, __VA_ARGS__)

int psg_worker_task_join(psg_worker_task_t *w, const psg_train_config_t *c, const char *prog) {
    memset(w, 0, sizeof *w);
    w->cluster = c->cluster_file ? psg_cluster_from_file(c->cluster_file, c->job, c->task)
                                 : psg_cluster_from_env();
    if (!w->cluster) return -1;
    if (c->keys_dir && psg_cluster_set_keys(w->cluster, c->keys_dir) < 0)
        return psg_error_wrap("--keys");
    if (c->peer_timeout_s > 0 && psg_cluster_set_peer_timeout(w->cluster, c->peer_timeout_s) < 0)
        return psg_error_wrap("--peer-timeout");
    if (c->ps_replicas > 0 && psg_cluster_set_ps_replicas(w->cluster, c->ps_replicas) < 0)
        return psg_error_wrap("--ps-replicas");
    psg_task_t me = psg_cluster_task(w->cluster);
    if (!me.job)
        return CONFIG_ERROR(
            "%s names no task for this process: give it \"task\": {\"type\": \"worker\", "
            "\"index\": I}%s",
            c->cluster_file ? c->cluster_file : "TF_CONFIG",
            c->cluster_file ? ", or --job worker --task I" : "");
    int chiefs = psg_cluster_num_tasks(w->cluster, "chief");
    if (!strcmp(me.job, PSG_EVALUATOR_JOB))
        return CONFIG_ERROR("task %s/%d: %s has no evaluator task (psgraph train's evaluator "
                            "evaluates the models it builds itself: mlp, cnn)",
                            me.job, me.index, prog);
    if (strcmp(me.job, "worker") && strcmp(me.job, "chief"))
        return CONFIG_ERROR("task %s/%d: %s runs workers; a %s task runs `psgraph server`", me.job,
                            me.index, prog, me.job);
    if (psg_cluster_num_tasks(w->cluster, "ps") == 0)
        return CONFIG_ERROR(
            "the cluster has no \"ps\" job: psgraph keeps the variables on parameter "
            "servers, so a cluster needs at least one ps task (a TF_CONFIG with only "
            "chief and worker jobs is MultiWorkerMirroredStrategy's form, which "
            "psgraph does not run); add \"ps\": [\"host:port\"]");
    w->num_workers = chiefs + psg_cluster_num_tasks(w->cluster, "worker");
    w->rank = !strcmp(me.job, "chief") ? 0 : chiefs + me.index;
    w->chief = w->rank == 0;
    psg_device_name(me.job, me.index, NULL, w->task, sizeof w->task);
    int64_t timeout = c->step_timeout_ms > 0 ? c->step_timeout_ms : 30000;
    psg_task_server_options_t so = {.cluster = w->cluster,
                                    .num_threads = c->threads,
                                    .recv_timeout_ms = timeout,
                                    .logdirs = {c->logdir},
                                    .insecure = c->insecure};
    /* a Trace request writes beside the --trace file */
    char trace_dir[4096];
    if (c->trace_path) {
        snprintf(trace_dir, sizeof trace_dir, "%s", c->trace_path);
        char *slash = strrchr(trace_dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(trace_dir, sizeof trace_dir, ".");
        so.logdirs[c->logdir ? 1 : 0] = trace_dir;
    }
    if (!(w->server = psg_task_server_new(&so))) return -1;
    if (psg_curve_listen_check(psg_task_server_endpoint(w->server), psg_cluster_keys(w->cluster),
                               c->insecure) == 1 &&
        c->out)
        fprintf(c->out, "%s: warning: %s\n", w->task, psg_error_message());
    if (!(w->setter = psg_dist_replica_setter_new(w->cluster, PSG_PS_GREEDY))) return -1;
    return 0;
}

void psg_worker_task_leave(psg_worker_task_t *w) {
    psg_task_server_destroy(&w->server);
    psg_replica_setter_destroy(&w->setter);
    psg_cluster_destroy(&w->cluster);
}

void psg_worker_task_tag(const psg_worker_task_t *w, char *buf, size_t size) {
    psg_task_t me = psg_cluster_task(w->cluster);
    snprintf(buf, size, "%s%d", me.job, me.index);
}
