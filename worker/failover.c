/* Hot failover of a training job (worker/failover.h, docs/replication.md): which ps task is
 * lost, where its shard goes, and the message that says so. Not the re-placement
 * (worker/dist_failover.c) nor the forward of updates (ps/replicate.c). */
#include "worker/failover.h"

#include "core/json.h"
#include "psgraph/clock.h"
#include "psgraph/error.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

bool psg_failover_holds_own(const char *json) {
    psg_json_t *doc = json ? psg_json_parse(json) : NULL;
    const psg_json_t *vars = doc ? psg_json_get(doc, "variables") : NULL;
    bool holds = false;
    for (int i = 0; vars && vars->type == PSG_JSON_ARRAY && i < vars->count && !holds; i++) {
        const psg_json_t *init = psg_json_get(vars->items[i], "initialized");
        const psg_json_t *backup = psg_json_get(vars->items[i], "backup");
        holds = init && init->type == PSG_JSON_BOOL && init->boolean &&
                !(backup && backup->type == PSG_JSON_BOOL && backup->boolean);
    }
    psg_json_free(doc);
    return holds;
}

/* Whether ps task k answers Inspect within probe_ms as the process it was, holding variables
 * of its own shard (a ps that serves one holds its variables: a restarted one holds none, or
 * only backup copies); *why says what is wrong when not. */
static bool alive(psg_dist_session_t *ds, int k, int64_t probe_ms, char *why, size_t size) {
    char task[PSG_DEVICE_NAME_MAX];
    psg_device_name("ps", k, NULL, task, sizeof task);
    uint64_t was = psg_dist_session_incarnation(ds, task);
    char *json = psg_dist_session_inspect_within(ds, task, probe_ms);
    if (!json) {
        snprintf(why, size, "%s", psg_error_message());
        return false;
    }
    bool holds = psg_failover_holds_own(json);
    free(json);
    uint64_t now = psg_dist_session_incarnation(ds, task);
    if (!holds) { /* a new process whose restart the failed step already reported */
        snprintf(why, size,
                 "it answers as incarnation %016" PRIx64 " and holds none of its shard's "
                 "variables: it restarted",
                 now);
        return false;
    }
    if (was && now != was) {
        snprintf(why, size,
                 "it restarted (incarnation %016" PRIx64 ", was %016" PRIx64 "): its shard is gone",
                 now, was);
        return false;
    }
    return true;
}

/* Whether ps task b answers Inspect within probe_ms (whatever it holds: a backup holds
 * copies of another's shard, WaitInit then checks they are all there). */
static bool answers(psg_dist_session_t *ds, int b, int64_t probe_ms, char *why, size_t size) {
    char task[PSG_DEVICE_NAME_MAX];
    psg_device_name("ps", b, NULL, task, sizeof task);
    char *json = psg_dist_session_inspect_within(ds, task, probe_ms);
    if (!json) snprintf(why, size, "%s", psg_error_message());
    free(json);
    /* a restart of it (a re-replicated backup is a new process) is known: the steps now
     * sent to it must not fail for it */
    (void)psg_dist_session_incarnation(ds, task);
    return json != NULL;
}

/* "; it served the shard of psJ[, psL] too since a failover: a second failure of that shard
 * before it was re-replicated" when ps k serves others' shards, else "". */
static void taken_over(psg_dist_session_t *ds, const psg_cluster_t *cluster, int k, char *buf,
                       size_t size) {
    size_t len = 0;
    buf[0] = 0;
    int nps = psg_cluster_num_tasks(cluster, "ps");
    for (int j = 0; j < nps && len + 48 < size; j++)
        if (j != k && psg_dist_session_ps_serving(ds, j) == k)
            len += (size_t)snprintf(buf + len, size - len, "%sps%d",
                                    len ? ", " : "; it served the shard of ", j);
    if (len && len < size)
        snprintf(buf + len, size - len,
                 " too since a failover: a second failure of that shard before it was "
                 "re-replicated");
}

/* Moves ps k's shards to its backup; -1 when the backup cannot take them. */
static int fail_over(psg_dist_session_t *ds, const psg_cluster_t *cluster, int k, int64_t probe_ms,
                     int64_t wait_ms, const char *why, FILE *out, FILE *metrics, int64_t step,
                     double t0) {
    int b = psg_cluster_ps_backup(cluster, k);
    char bwhy[1024] = "", others[256];
    taken_over(ds, cluster, k, others, sizeof others);
    if (b < 0) return psg_error_set("ps%d is lost (%s) and has no backup%s", k, why, others);
    if (!answers(ds, b, probe_ms, bwhy, sizeof bwhy))
        return psg_error_set("ps%d is lost (%s) and so is its backup ps%d (%s)%s", k, why, b, bwhy,
                             others);
    if (psg_dist_session_failover(ds, k, b) < 0) return -1;
    /* the backup holds every variable of the shard, or it was not re-replicated yet */
    if (psg_dist_session_wait_init(ds, wait_ms) < 0)
        return psg_error_set("ps%d is lost (%s) and its backup ps%d does not hold its shard (it "
                             "came back and was not re-replicated yet: a second failure of the "
                             "shard; %s)",
                             k, why, b, psg_error_message());
    double dt = psg_now_sec() - t0;
    fprintf(out,
            "failover: ps%d is lost (%s); its shard is served by its backup ps%d from step %" PRId64
            " (switched in %.3f s; no checkpoint read)\n",
            k, why, b, step + 1, dt);
    fflush(out);
    if (metrics)
        fprintf(metrics,
                "{\"event\":\"failover\",\"ps\":%d,\"backup\":%d,\"step\":%" PRId64
                ",\"switch_sec\":%.3f}\n",
                k, b, step, dt);
    return 0;
}

int psg_failover_recover(psg_dist_session_t *ds, const psg_cluster_t *cluster, int64_t probe_ms,
                         int64_t wait_ms, FILE *out, FILE *metrics, int64_t step, bool *moved) {
    *moved = false;
    int nps = psg_cluster_num_tasks(cluster, "ps");
    double t0 = psg_now_sec();
    for (int k = 0; k < nps; k++) {
        if (psg_dist_session_ps_serving(ds, k) != k) continue; /* serves nothing now */
        char why[1024];
        if (alive(ds, k, probe_ms, why, sizeof why)) continue;
        if (fail_over(ds, cluster, k, probe_ms, wait_ms, why, out, metrics, step, t0) < 0) {
            char keep[2048];
            snprintf(keep, sizeof keep, "%s", psg_error_message());
            psg_dist_session_failover_reset(ds);
            return psg_error_set("%s", keep);
        }
        *moved = true;
    }
    return 0;
}
