/* The placement a distributed session reads (docs/replication.md): every session of a
 * process places the same graph into its nodes' assigned devices, each with its own
 * failovers, so a session places it again, and reads those devices, under one lock when
 * another session placed it last. A sync chief's runner and its worker's loop failed ps0
 * over at the same moment: one re-placed the graph on ps0 while the other partitioned it,
 * which sent a RegisterGraph to the dead ps0. Not the partitions (dist_session.c). */
#include "psgraph/device.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/op.h"
#include "worker/dist_session_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t placement_lock = PTHREAD_MUTEX_INITIALIZER;
static const psg_dist_session_t *placed_by; /* whose placement the graph holds now */

int psg_dist_placement_lock(psg_dist_session_t *s) {
    pthread_mutex_lock(&placement_lock);
    if (placed_by == s && psg_graph_num_nodes(s->g) == s->placed_nodes) return 0;
    int nj = psg_cluster_num_jobs(s->cluster);
    psg_job_spec_t jobs[16];
    if (nj > 16) {
        pthread_mutex_unlock(&placement_lock);
        return psg_error_set("too many jobs in the cluster (%d)", nj);
    }
    for (int i = 0; i < nj; i++) {
        jobs[i].name = psg_cluster_job(s->cluster, i);
        jobs[i].num_tasks = psg_cluster_num_tasks(s->cluster, jobs[i].name);
        /* a worker's towers may ask for this process's GPUs (every worker has as many);
         * the ps tasks' variables and updates stay on their CPUs */
        jobs[i].num_gpus = strcmp(jobs[i].name, "ps") ? psg_gpu_count() : 0;
    }
    /* a GPU tower's op without a CUDA kernel runs on the task's CPU, as in one process */
    psg_placement_options_t po = {.default_device = s->device,
                                  .allow_soft_placement = true,
                                  .num_jobs = nj,
                                  .jobs = jobs,
                                  .ps_memory_limit = s->ps_memory_limit};
    placed_by = NULL;
    if (psg_place(s->g, &po) < 0 || psg_dist_session_apply_failover(s) < 0) {
        pthread_mutex_unlock(&placement_lock);
        return -1;
    }
    placed_by = s;
    s->placed_nodes = psg_graph_num_nodes(s->g);
    return 0;
}

void psg_dist_placement_unlock(void) {
    pthread_mutex_unlock(&placement_lock);
}

void psg_dist_placement_forget(const psg_dist_session_t *s) {
    pthread_mutex_lock(&placement_lock);
    if (placed_by == s) placed_by = NULL;
    pthread_mutex_unlock(&placement_lock);
}

int psg_dist_session_place(psg_dist_session_t *s) {
    if (psg_dist_placement_lock(s) < 0) return -1;
    psg_dist_placement_unlock();
    return 0;
}

/* Appends "NAME\n" to l's body. */
static int append_name(psg_task_vars_t *l, const char *name) {
    size_t n = strlen(name);
    if (l->len + n + 2 > l->cap) {
        size_t cap = 2 * (l->len + n + 2);
        char *b = realloc(l->names, cap);
        if (!b) return psg_error_set("out of memory");
        l->names = b;
        l->cap = cap;
    }
    memcpy(l->names + l->len, name, n);
    l->len += n;
    l->names[l->len++] = '\n';
    return 0;
}

/* The list of task's variables in *lists, added when new; NULL on out of memory. */
static psg_task_vars_t *list_of(psg_task_vars_t **lists, int *n, const char *task) {
    for (int k = 0; k < *n; k++)
        if (!strcmp((*lists)[k].task, task)) return &(*lists)[k];
    psg_task_vars_t *v = realloc(*lists, (size_t)(*n + 1) * sizeof *v);
    if (!v) {
        psg_error_set("out of memory");
        return NULL;
    }
    *lists = v;
    v[*n] = (psg_task_vars_t){0};
    snprintf(v[*n].task, sizeof v[*n].task, "%s", task);
    return &v[(*n)++];
}

int psg_dist_session_variables_by_task(psg_dist_session_t *s, psg_task_vars_t **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    if (psg_dist_placement_lock(s) < 0) return -1;
    int nn = psg_graph_num_nodes(s->g), rc = 0;
    for (int i = 0; i < nn && rc == 0; i++) {
        const psg_node_t *v = psg_graph_node(s->g, i);
        if (!(psg_node_def(v)->flags & PSG_OP_VARIABLE)) continue;
        psg_device_name_t d;
        char task[PSG_DEVICE_NAME_MAX];
        if (psg_device_name_parse(psg_node_assigned_device(v), &d) < 0) {
            rc = -1;
            break;
        }
        psg_device_name_task_str(&d, task, sizeof task);
        if (!strcmp(task, s->task)) continue;
        const char *shared = psg_node_get_str(v, "shared_name", "");
        psg_task_vars_t *l = list_of(out, n_out, task);
        if (!l || append_name(l, shared[0] ? shared : psg_node_name(v)) < 0) rc = -1;
    }
    psg_dist_placement_unlock();
    if (rc < 0) psg_task_vars_free(out, n_out);
    return rc;
}

void psg_task_vars_free(psg_task_vars_t **lists, int *n) {
    for (int k = 0; *lists && k < *n; k++) free((*lists)[k].names);
    free(*lists);
    *lists = NULL;
    *n = 0;
}

int *psg_dist_session_init_ops_on(psg_dist_session_t *s, const char *task, int *n_out) {
    *n_out = 0;
    psg_device_name_t want;
    if (psg_device_name_parse(task, &want) < 0) return NULL;
    if (!want.has_replica) want.has_replica = true, want.replica = 0;
    if (psg_dist_placement_lock(s) < 0) return NULL;
    int n = 0;
    const int *init = psg_graph_collection(s->g, "init", &n);
    int *mine = calloc((size_t)n + 1, sizeof *mine);
    for (int i = 0; mine && i < n; i++) {
        psg_device_name_t d;
        if (psg_device_name_parse(psg_node_assigned_device(psg_graph_node(s->g, init[i])), &d) ==
                0 &&
            psg_device_name_same_task(&d, &want))
            mine[(*n_out)++] = init[i];
    }
    psg_dist_placement_unlock();
    if (!mine) psg_error_set("out of memory");
    return mine;
}
