/* The worker's side of hot failover (docs/replication.md): a ps task that is lost hands its
 * shard to the task holding its backup copies; the session moves every node placed on the
 * lost task there and registers its partitions again, so the next step runs on the backup
 * (which promotes the copies to its own shard as it applies them, ps/replicate.c). Not the
 * decision when to fail over (worker/cluster_ckpt.c) nor the forward of updates (ps/). */
#include "psgraph/error.h"
#include "psgraph/task_server.h"
#include "psgraph/wire.h"
#include "worker/dist_session_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The task serving ps task k's shard: followed through every failover. */
static int serving(const psg_dist_session_t *s, int k) {
    for (int hops = 0; s->served_by && k >= 0 && k < s->n_ps && s->served_by[k] != k; hops++) {
        if (hops > s->n_ps) return k; /* a cycle: PSG_ASSERT-worthy, but stay on k */
        k = s->served_by[k];
    }
    return k;
}

int psg_dist_session_ps_serving(psg_dist_session_t *s, int k) {
    return serving(s, k);
}

int psg_dist_session_apply_failover(psg_dist_session_t *s) {
    if (!s->served_by) return 0;
    int nn = psg_graph_num_nodes(s->g);
    for (int i = 0; i < nn; i++) {
        const char *dev = psg_node_assigned_device(psg_graph_node(s->g, i));
        psg_device_name_t d;
        if (!dev[0] || psg_device_name_parse(dev, &d) < 0 || !d.has_job || !d.has_task ||
            strcmp(d.job, "ps"))
            continue;
        int to = serving(s, d.task);
        if (to == d.task) continue;
        d.task = to;
        char moved[PSG_DEVICE_NAME_MAX];
        psg_device_name_str(&d, moved, sizeof moved);
        if (psg_graph_set_assigned_device(s->g, i, moved) < 0) return -1;
    }
    return 0;
}

/* Every callable dropped, to be partitioned again on the placement as it is now. */
static void unbuild_all(psg_dist_session_t *s) {
    (void)psg_dist_session_drain(s); /* a step open on the lost task failed with it */
    for (int i = 0; i < s->n_callables; i++) {
        psg_dist_callable_t *c = s->callables[i];
        psg_dist_callable_unbuild(c);
        c->overlap = c->ahead = false;
    }
    s->placed_nodes = -1; /* placed again, then moved */
}

int psg_dist_session_failover(psg_dist_session_t *s, int from, int to) {
    int nps = psg_cluster_num_tasks(s->cluster, "ps");
    if (from < 0 || from >= nps || to < 0 || to >= nps)
        return psg_error_set("failover from ps%d to ps%d: the cluster has %d ps tasks", from, to,
                             nps);
    if (!s->served_by) {
        if (!(s->served_by = malloc((size_t)nps * sizeof *s->served_by)))
            return psg_error_set("out of memory");
        for (int k = 0; k < nps; k++) s->served_by[k] = k;
        s->n_ps = nps;
    }
    s->served_by[from] = to;
    for (int k = 0; k < nps; k++) /* shards it took over before follow it */
        if (s->served_by[k] == from && k != from) s->served_by[k] = to;
    /* this process's steps still pulling from it (a sync chief's apply step, on its own
     * thread) fail now: they would wait for the puller to find the loss itself */
    char task[PSG_DEVICE_NAME_MAX], why[128];
    psg_device_name("ps", from, NULL, task, sizeof task);
    snprintf(why, sizeof why, "failed over to ps%d: its pulls from ps%d are not answered", to,
             from);
    psg_task_server_fail_pulls_from(s->server, task, why);
    unbuild_all(s);
    if (psg_dist_session_reregister(s) < 0)
        return psg_error_wrap("failover from ps%d to ps%d", from, to);
    return 0;
}

void psg_dist_session_failover_reset(psg_dist_session_t *s) {
    if (!s->served_by) return;
    for (int k = 0; k < s->n_ps; k++) s->served_by[k] = k;
    unbuild_all(s);
}

int psg_dist_session_undo_failed(psg_dist_session_t *s, psg_dist_callable_t *c) {
    if (!s->writer[0] || c->retry_seq <= 0) return 0;
    char id[sizeof s->writer + 32];
    int len = snprintf(id, sizeof id, "#%s %" PRId64 "\n", s->writer, c->retry_seq);
    int nps = psg_cluster_num_tasks(s->cluster, "ps");
    for (int k = 0; k < nps; k++) {
        if (serving(s, k) != k) continue; /* its shard is served by another: asked there */
        char task[PSG_DEVICE_NAME_MAX];
        psg_device_name("ps", k, NULL, task, sizeof task);
        psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_REPLICATE);
        if (!m || psg_msg_set_key(m, "undo") < 0 || psg_msg_set_body(m, id, (size_t)len) < 0) {
            psg_msg_destroy(&m);
            return psg_error_set("out of memory");
        }
        psg_msg_t *r = psg_dist_session_call(s, task, &m, s->timeout_ms);
        psg_msg_destroy(&m);
        if (!r) return psg_error_wrap("taking back the failed step's update on %s", task);
        psg_msg_destroy(&r);
    }
    return 0;
}
