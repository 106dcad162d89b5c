/* Hot failover of a training job (worker/failover.h, docs/replication.md): which ps task is
 * lost, where its shard goes, and the message that says so. Not the re-placement
 * (worker/dist_failover.c) nor the forward of updates (ps/replicate.c). */
#include "worker/failover.h"

#include "core/json.h"
#include "psgraph/clock.h"
#include "psgraph/error.h"
#include "psgraph/task_server.h"
#include "psgraph/wire.h"

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

/* How long a ps task's backup may take to say whether another task (the chief, a worker)
 * found that ps task lost already: a live one answers on its server thread at once. */
#define VERDICT_MS 250

/* Whether ps task k answers Inspect within probe_ms as process `was` (0: not known yet),
 * holding variables of its own shard (a ps that serves one holds its variables: a restarted
 * one holds none, or only backup copies); *why says what is wrong when not. */
static bool alive(psg_dist_session_t *ds, int k, uint64_t was, int64_t probe_ms, char *why,
                  size_t size) {
    char task[PSG_DEVICE_NAME_MAX];
    psg_device_name("ps", k, NULL, task, sizeof task);
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

/* A Replicate "lost" to ps task b: body (NULL: a question) the verdicts to keep; the
 * reply's body (malloc'd, "" when none) lists every verdict b keeps. NULL with the error set
 * when b does not answer within timeout_ms. */
static char *verdicts_call(psg_dist_session_t *ds, int b, const char *body, int64_t timeout_ms) {
    char task[PSG_DEVICE_NAME_MAX];
    psg_device_name("ps", b, NULL, task, sizeof task);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_REPLICATE);
    if (!m || psg_msg_set_key(m, "lost") < 0 ||
        (body && psg_msg_set_body(m, body, strlen(body)) < 0)) {
        psg_msg_destroy(&m);
        psg_error_set("out of memory");
        return NULL;
    }
    psg_msg_t *r = psg_dist_session_call(ds, task, &m, timeout_ms);
    psg_msg_destroy(&m);
    return r ? psg_dist_session_reply_text(&r) : NULL;
}

/* Whether another task (the chief, a worker) failed ps task k, as process `was`, over to its
 * backup already: the backup keeps that verdict (ps/replicate.c), so this worker takes it
 * instead of waiting the whole probe for a task that does not answer. */
static bool found_lost(psg_dist_session_t *ds, const psg_cluster_t *cluster, int k, uint64_t was,
                       char *why, size_t size) {
    int b = psg_cluster_ps_backup(cluster, k);
    if (b < 0 || !was) return false;
    char *list = verdicts_call(ds, b, NULL, VERDICT_MS);
    char line[64];
    int len = snprintf(line, sizeof line, "\n%d %016" PRIx64 "\n", k, was);
    /* its lines, each "PS INCARNATION\n": this one first, or after another's newline */
    bool found = list && (!strncmp(list, line + 1, (size_t)len - 1) || strstr(list, line));
    free(list);
    if (found)
        snprintf(why, size,
                 "another task found it lost (incarnation %016" PRIx64
                 ") and failed it over to ps%d already: not probed again",
                 was, b);
    return found;
}

/* Tells ps task b that ps task k, as process `was`, is lost and b serves its shard: the
 * other workers take that verdict (found_lost) and a lost k that comes back turns its
 * shard into backup copies (its link was cut: it must not serve stale values). */
static void keep_verdict(psg_dist_session_t *ds, int k, int b, uint64_t was, int64_t timeout_ms,
                         FILE *out) {
    if (!was) return;
    char line[64];
    snprintf(line, sizeof line, "%d %016" PRIx64 "\n", k, was);
    char *list = verdicts_call(ds, b, line, timeout_ms);
    if (!list) { /* not fatal: the other workers then probe ps k themselves */
        fprintf(out, "failover: ps%d did not keep the verdict on ps%d (%s)\n", b, k,
                psg_error_message());
        fflush(out);
    }
    free(list);
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
static int fail_over(psg_dist_session_t *ds, const psg_cluster_t *cluster, int k, uint64_t was,
                     int64_t probe_ms, int64_t wait_ms, const char *why, FILE *out, FILE *metrics,
                     int64_t step, double t0) {
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
    keep_verdict(ds, k, b, was, probe_ms, out);
    return 0;
}

int psg_failover_recover(psg_dist_session_t *ds, const psg_cluster_t *cluster, int64_t probe_ms,
                         int64_t wait_ms, FILE *out, FILE *metrics, int64_t step, bool *moved) {
    *moved = false;
    int nps = psg_cluster_num_tasks(cluster, "ps");
    double t0 = psg_now_sec();
    for (int k = 0; k < nps; k++) {
        if (psg_dist_session_ps_serving(ds, k) != k) continue; /* serves nothing now */
        char why[1024], task[PSG_DEVICE_NAME_MAX];
        psg_device_name("ps", k, NULL, task, sizeof task);
        uint64_t was = psg_dist_session_incarnation(ds, task);
        /* a task another found lost already is not probed again: the step that failed here
         * often failed because that task failed the step over (a sync chief's reissue) */
        if (!found_lost(ds, cluster, k, was, why, sizeof why) &&
            alive(ds, k, was, probe_ms, why, sizeof why))
            continue;
        if (fail_over(ds, cluster, k, was, probe_ms, wait_ms, why, out, metrics, step, t0) < 0) {
            char keep[2048];
            snprintf(keep, sizeof keep, "%s", psg_error_message());
            psg_dist_session_failover_reset(ds);
            return psg_error_set("%s", keep);
        }
        *moved = true;
    }
    return 0;
}
