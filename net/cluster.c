/* The cluster spec behind include/psgraph/cluster.h: TF_CONFIG checked field by field, so
 * that a typo in a launch script is an error naming the field, not a task that hangs.
 * Not the JSON reader (core/json.c) nor anything that opens a socket. */
#include "psgraph/cluster.h"

#include "core/json.h"
#include "core/strmap.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_JOBS 64
#define MAX_TASKS 100000
#define TASK_SLOTS 131072 /* > MAX_TASKS: (job, task) as one int in the address map */
#define MAX_FILE_BYTES ((size_t)1 << 20)

typedef struct {
    char *name;
    int ntasks;
    char **addrs;
} job_t;

struct psg_cluster {
    int njobs;
    job_t jobs[MAX_JOBS];
    int task_job; /* -1: no task set; EVALUATOR_OUTSIDE: an evaluator not in the cluster */
    int task_index;
    char *keys_field;       /* the document's "keys", NULL when absent */
    psg_curve_keys_t *keys; /* loaded from --keys, "keys" or PSGRAPH_KEYS; NULL: none */
    int peer_timeout_ms;    /* "peer_timeout" (seconds) or --peer-timeout; 0: the default */
    int ps_replicas;        /* "ps_replicas" or --ps-replicas; 0: 1 */
};

void psg_cluster_destroy(psg_cluster_t **cp) {
    if (!cp || !*cp) return;
    psg_cluster_t *c = *cp;
    *cp = NULL;
    for (int j = 0; j < c->njobs; j++) {
        for (int t = 0; t < c->jobs[j].ntasks; t++) free(c->jobs[j].addrs[t]);
        free(c->jobs[j].addrs);
        free(c->jobs[j].name);
    }
    free(c->keys_field);
    psg_curve_keys_destroy(&c->keys);
    free(c);
}

/* A job name as TensorFlow accepts it: a letter, then letters, digits and '_'. */
static bool valid_job_name(const char *s) {
    if (!isalpha((unsigned char)*s)) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_') return false;
    return true;
}

/* A Unix socket path fits sockaddr_un's 108 bytes with its NUL. */
#define MAX_IPC_PATH 107

/* "host:port", "[v6]:port": a non-empty host without spaces, a port in 1..65535; or
 * "ipc://path" for tasks of one host (a Unix domain socket: no TCP stack on the way). */
static bool valid_address(const char *s) {
    if (!strncmp(s, "ipc://", 6)) {
        size_t n = strlen(s + 6);
        for (const char *q = s + 6; *q; q++)
            if (isspace((unsigned char)*q)) return false;
        return n > 0 && n <= MAX_IPC_PATH;
    }
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return false;
    if (s[0] == '[' && colon[-1] != ']') return false;
    for (const char *q = s; q < colon; q++)
        if (isspace((unsigned char)*q) || *q == '/') return false;
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    return colon[1] && *end == '\0' && errno == 0 && port >= 1 && port <= 65535 &&
           isdigit((unsigned char)colon[1]);
}

static int find_job(const psg_cluster_t *c, const char *name) {
    for (int j = 0; j < c->njobs; j++)
        if (strcmp(c->jobs[j].name, name) == 0) return j;
    return -1;
}

static int cmp_job(const void *a, const void *b) {
    return strcmp(((const job_t *)a)->name, ((const job_t *)b)->name);
}

static int parse_jobs(psg_cluster_t *c, const psg_json_t *cl, psg_strmap_t *addrs);

/* The jobs of "cluster"; every address once, found by a map (linear on a 1 MB spec). */
static int parse_cluster(psg_cluster_t *c, const psg_json_t *cl) {
    psg_strmap_t *addrs = psg_strmap_new();
    if (!addrs) return psg_error_set("out of memory");
    int rc = parse_jobs(c, cl, addrs);
    psg_strmap_destroy(&addrs);
    return rc;
}

static int parse_jobs(psg_cluster_t *c, const psg_json_t *cl, psg_strmap_t *addrs) {
    if (cl->type != PSG_JSON_OBJECT)
        return psg_error_set("\"cluster\" is %s, not an object of jobs",
                             psg_json_type_name(cl->type));
    if (cl->count == 0) return psg_error_set("\"cluster\" has no job");
    if (cl->count > MAX_JOBS) return psg_error_set("\"cluster\" has over %d jobs", MAX_JOBS);
    for (int j = 0; j < cl->count; j++) {
        const psg_json_t *job = cl->items[j];
        if (!valid_job_name(job->key))
            return psg_error_set("cluster job \"%.64s\": not a valid job name", job->key);
        job_t *dst = &c->jobs[c->njobs];
        if (!(dst->name = strdup(job->key))) return psg_error_set("out of memory");
        c->njobs++;
        if (job->type != PSG_JSON_ARRAY)
            return psg_error_set(
                "cluster.%s is %s, not a list of \"host:port\" or \"ipc://path\" addresses",
                job->key, psg_json_type_name(job->type));
        if (job->count == 0) return psg_error_set("cluster.%s has no task", job->key);
        if (job->count > MAX_TASKS)
            return psg_error_set("cluster.%s has over %d tasks", job->key, MAX_TASKS);
        if (strcmp(job->key, "chief") == 0 && job->count > 1)
            return psg_error_set("cluster.chief has %d tasks; there is at most one chief",
                                 job->count);
        if (!(dst->addrs = calloc((size_t)job->count, sizeof *dst->addrs)))
            return psg_error_set("out of memory");
        for (int t = 0; t < job->count; t++) {
            const psg_json_t *a = job->items[t];
            if (a->type != PSG_JSON_STRING)
                return psg_error_set(
                    "cluster.%s[%d] is %s, not a \"host:port\" or \"ipc://path\" string", job->key,
                    t, psg_json_type_name(a->type));
            if (!valid_address(a->string))
                return psg_error_set("cluster.%s[%d] = \"%.100s\" is not host:port (port 1-65535) "
                                     "or ipc://path (at most 107 bytes, no spaces)",
                                     job->key, t, a->string);
            int other = psg_strmap_put(addrs, a->string, j * TASK_SLOTS + t);
            if (other == -2) return psg_error_set("out of memory");
            if (other >= 0)
                return psg_error_set(
                    "cluster.%s[%d] = \"%s\" is also cluster.%s[%d]: duplicate address", job->key,
                    t, a->string, c->jobs[other / TASK_SLOTS].name, other % TASK_SLOTS);
            if (!(dst->addrs[t] = strdup(a->string))) return psg_error_set("out of memory");
            dst->ntasks = t + 1;
        }
    }
    qsort(c->jobs, (size_t)c->njobs, sizeof c->jobs[0], cmp_job);
    return 0;
}

static int parse_task(psg_cluster_t *c, const psg_json_t *task) {
    if (task->type != PSG_JSON_OBJECT)
        return psg_error_set("\"task\" is %s, not an object", psg_json_type_name(task->type));
    const char *type = NULL;
    int index = 0;
    for (int i = 0; i < task->count; i++) {
        const psg_json_t *f = task->items[i];
        if (strcmp(f->key, "type") == 0) {
            if (f->type != PSG_JSON_STRING)
                return psg_error_set("task.type is %s, not a string", psg_json_type_name(f->type));
            type = f->string;
        } else if (strcmp(f->key, "index") == 0) {
            if (f->type != PSG_JSON_NUMBER || !f->integral || f->number < 0 ||
                f->number > MAX_TASKS)
                return psg_error_set("task.index is not a task index (a non-negative integer)");
            index = (int)f->number;
        } else if (strcmp(f->key, "trial") != 0) {
            return psg_error_set("task.%.64s: unknown field (expected type, index)", f->key);
        }
    }
    if (!type) return psg_error_set("task.type is missing");
    if (psg_cluster_set_task(c, type, index) < 0) return psg_error_wrap("task");
    return 0;
}

/* Loads the keys the document names ("keys", relative to base_dir when not absolute), or
 * else those of $PSGRAPH_KEYS when use_env. */
static int load_keys(psg_cluster_t *c, const char *base_dir, bool use_env) {
    const char *env = use_env ? getenv(PSG_CURVE_KEYS_ENV) : NULL;
    if (!c->keys_field && (!env || !*env)) return 0;
    char dir[4096];
    if (c->keys_field && c->keys_field[0] != '/' && base_dir)
        snprintf(dir, sizeof dir, "%s/%s", base_dir, c->keys_field);
    else
        snprintf(dir, sizeof dir, "%s", c->keys_field ? c->keys_field : env);
    if (psg_cluster_set_keys(c, dir) < 0)
        return psg_error_wrap("%s", c->keys_field ? "keys" : PSG_CURVE_KEYS_ENV);
    return 0;
}

int psg_cluster_set_keys(psg_cluster_t *c, const char *dir) {
    psg_curve_keys_t *k = NULL;
    if (dir && !(k = psg_curve_keys_load(dir, NULL))) return -1;
    psg_curve_keys_destroy(&c->keys);
    c->keys = k;
    return 0;
}

const psg_curve_keys_t *psg_cluster_keys(const psg_cluster_t *c) {
    return c ? c->keys : NULL;
}

int psg_cluster_peer_timeout_ms(const psg_cluster_t *c) {
    return c ? c->peer_timeout_ms : 0;
}

/* The longest peer timeout: a day (beyond it a task is better called lost). */
#define MAX_PEER_TIMEOUT_S 86400.0

int psg_cluster_set_peer_timeout(psg_cluster_t *c, double seconds) {
    if (!(seconds > 0 && seconds <= MAX_PEER_TIMEOUT_S))
        return psg_error_set("peer timeout %g s: must be above 0 and at most %g s", seconds,
                             MAX_PEER_TIMEOUT_S);
    int ms = (int)(seconds * 1000.0 + 0.5);
    c->peer_timeout_ms = ms > 0 ? ms : 1;
    return 0;
}

int psg_cluster_ps_replicas(const psg_cluster_t *c) {
    return c && c->ps_replicas > 1 ? c->ps_replicas : 1;
}

static int ps_job_tasks(const psg_cluster_t *c) {
    for (int j = 0; j < c->njobs; j++)
        if (!strcmp(c->jobs[j].name, "ps")) return c->jobs[j].ntasks;
    return 0;
}

int psg_cluster_set_ps_replicas(psg_cluster_t *c, int n) {
    int nps = ps_job_tasks(c);
    if (n != 1 && n != 2)
        return psg_error_set_code(PSG_ERR_CONFIG,
                                  "ps replicas %d: must be 1 (no backup) or 2 (a backup of each "
                                  "shard on the next ps task)",
                                  n);
    if (n == 2 && nps < 2)
        return psg_error_set_code(PSG_ERR_CONFIG,
                                  "ps replicas 2 needs at least 2 ps tasks (the cluster has %d): "
                                  "a shard's backup lives on another ps task",
                                  nps);
    c->ps_replicas = n;
    return 0;
}

int psg_cluster_ps_backup(const psg_cluster_t *c, int k) {
    int nps = c ? ps_job_tasks(c) : 0;
    if (psg_cluster_ps_replicas(c) < 2 || k < 0 || k >= nps) return -1;
    return (k + 1) % nps;
}

int psg_cluster_ps_backed_up(const psg_cluster_t *c, int k) {
    int nps = c ? ps_job_tasks(c) : 0;
    if (psg_cluster_ps_replicas(c) < 2 || k < 0 || k >= nps) return -1;
    return (k + nps - 1) % nps;
}

static psg_cluster_t *parse_doc(const char *json, const char *origin, const char *base_dir,
                                bool use_env);

psg_cluster_t *psg_cluster_parse(const char *json, const char *origin) {
    return parse_doc(json, origin, NULL, false);
}

static psg_cluster_t *parse_doc(const char *json, const char *origin, const char *base_dir,
                                bool use_env) {
    if (!origin) origin = "cluster spec";
    psg_cluster_t *c = calloc(1, sizeof *c);
    if (!c) {
        psg_error_set("out of memory");
        return NULL;
    }
    c->task_job = -1;
    psg_json_t *doc = psg_json_parse(json);
    if (!doc) goto fail;
    if (doc->type != PSG_JSON_OBJECT) {
        psg_error_set("the document is %s, not an object", psg_json_type_name(doc->type));
        goto fail;
    }
    for (int i = 0; i < doc->count; i++) {
        const char *k = doc->items[i]->key;
        if (strcmp(k, "cluster") && strcmp(k, "task") && strcmp(k, "environment") &&
            strcmp(k, "rpc_layer") && strcmp(k, "keys") && strcmp(k, "peer_timeout") &&
            strcmp(k, "ps_replicas")) {
            psg_error_set("unknown field \"%.64s\" (expected cluster, task, keys, peer_timeout, "
                          "ps_replicas)",
                          k);
            goto fail;
        }
    }
    const psg_json_t *pt = psg_json_get(doc, "peer_timeout");
    if (pt && pt->type != PSG_JSON_NUMBER) {
        psg_error_set("\"peer_timeout\" is %s, not a number of seconds",
                      psg_json_type_name(pt->type));
        goto fail;
    }
    if (pt && psg_cluster_set_peer_timeout(c, pt->number) < 0) {
        psg_error_wrap("\"peer_timeout\"");
        goto fail;
    }
    const psg_json_t *keys = psg_json_get(doc, "keys");
    if (keys && (keys->type != PSG_JSON_STRING || !*keys->string)) {
        psg_error_set("\"keys\" is %s, not the path of a key folder (psgraph keygen DIR)",
                      psg_json_type_name(keys->type));
        goto fail;
    }
    if (keys && !(c->keys_field = strdup(keys->string))) {
        psg_error_set("out of memory");
        goto fail;
    }
    const psg_json_t *cl = psg_json_get(doc, "cluster");
    if (!cl) {
        psg_error_set("\"cluster\" is missing");
        goto fail;
    }
    if (parse_cluster(c, cl) < 0) goto fail;
    const psg_json_t *reps = psg_json_get(doc, "ps_replicas");
    if (reps && (reps->type != PSG_JSON_NUMBER || !(reps->number >= 0 && reps->number <= 64) ||
                 reps->number != (double)(int)reps->number)) {
        psg_error_set("\"ps_replicas\" is %s, not 1 or 2", psg_json_type_name(reps->type));
        goto fail;
    }
    if (reps && psg_cluster_set_ps_replicas(c, (int)reps->number) < 0) {
        psg_error_wrap("\"ps_replicas\"");
        goto fail;
    }
    const psg_json_t *task = psg_json_get(doc, "task");
    if (task && parse_task(c, task) < 0) goto fail;
    if (load_keys(c, base_dir, use_env) < 0) goto fail;
    psg_json_free(doc);
    return c;
fail:
    psg_error_wrap("%s", origin);
    psg_error_recode(PSG_ERR_CONFIG);
    psg_json_free(doc);
    psg_cluster_destroy(&c);
    return NULL;
}

psg_cluster_t *psg_cluster_from_env(void) {
    const char *s = getenv("TF_CONFIG");
    if (!s || !*s) {
        psg_error_set_code(PSG_ERR_CONFIG, "TF_CONFIG is not set");
        return NULL;
    }
    return parse_doc(s, "TF_CONFIG", NULL, true);
}

bool psg_cluster_env_given(void) {
    const char *s = getenv("TF_CONFIG");
    if (!s) return false;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (!*s) return false;
    psg_json_t *doc = psg_json_parse(s);
    if (!doc) return true; /* malformed: the parser says so where it is read */
    bool given = doc->type != PSG_JSON_OBJECT;
    for (int i = 0; !given && i < doc->count;
         i++) { /* a typo is no local training: the parser names it */
        const psg_json_t *f = doc->items[i];
        given = strcmp(f->key, "environment") && strcmp(f->key, "rpc_layer") &&
                (strcmp(f->key, "cluster") || f->type != PSG_JSON_OBJECT || f->count > 0);
    }
    psg_json_free(doc);
    return given;
}

psg_cluster_t *psg_cluster_from_file(const char *path, const char *job, int index) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        psg_error_set_code(PSG_ERR_CONFIG, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = malloc(MAX_FILE_BYTES + 1);
    size_t n = text ? fread(text, 1, MAX_FILE_BYTES + 1, f) : 0;
    bool err = ferror(f);
    fclose(f);
    if (!text || err || n > MAX_FILE_BYTES) {
        psg_error_set_code(PSG_ERR_CONFIG, "%s: %s", path,
                           !text ? "out of memory"
                           : err ? "read error"
                                 : "over 1 MiB");
        free(text);
        return NULL;
    }
    text[n] = '\0';
    if (memchr(text, '\0', n)) {
        free(text);
        psg_error_set_code(PSG_ERR_CONFIG, "%s: contains a NUL byte", path);
        return NULL;
    }
    char base[4096];
    snprintf(base, sizeof base, "%s", path);
    char *slash = strrchr(base, '/');
    if (slash) *slash = 0;
    psg_cluster_t *c = parse_doc(text, path, slash ? base : ".", true);
    free(text);
    if (c && job && psg_cluster_set_task(c, job, index) < 0) {
        psg_error_wrap("%s: --job %s --task %d", path, job, index);
        psg_error_recode(PSG_ERR_CONFIG);
        psg_cluster_destroy(&c);
    }
    return c;
}

#define EVALUATOR_OUTSIDE (-2)

int psg_cluster_set_task(psg_cluster_t *c, const char *job, int index) {
    int j = job ? find_job(c, job) : -1;
    if (j < 0 && job && !strcmp(job, PSG_EVALUATOR_JOB) && index == 0) {
        /* TensorFlow's evaluator is not a job of the cluster: it only reads checkpoints */
        c->task_job = EVALUATOR_OUTSIDE;
        c->task_index = 0;
        return 0;
    }
    if (j < 0) {
        char known[256] = "";
        for (int i = 0; i < c->njobs; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     c->jobs[i].name);
        return psg_error_set("job \"%.64s\" is not in the cluster (jobs: %s)", job ? job : "(null)",
                             known);
    }
    if (index < 0 || index >= c->jobs[j].ntasks)
        return psg_error_set("index %d is out of range: job %s has %d task%s (0..%d)", index, job,
                             c->jobs[j].ntasks, c->jobs[j].ntasks == 1 ? "" : "s",
                             c->jobs[j].ntasks - 1);
    c->task_job = j;
    c->task_index = index;
    return 0;
}

psg_task_t psg_cluster_task(const psg_cluster_t *c) {
    if (c->task_job == EVALUATOR_OUTSIDE)
        return (psg_task_t){PSG_EVALUATOR_JOB, c->task_index, NULL};
    if (c->task_job < 0) return (psg_task_t){NULL, -1, NULL};
    const job_t *j = &c->jobs[c->task_job];
    return (psg_task_t){j->name, c->task_index, j->addrs[c->task_index]};
}

int psg_cluster_num_jobs(const psg_cluster_t *c) {
    return c->njobs;
}

const char *psg_cluster_job(const psg_cluster_t *c, int i) {
    return i >= 0 && i < c->njobs ? c->jobs[i].name : NULL;
}

int psg_cluster_num_tasks(const psg_cluster_t *c, const char *job) {
    int j = find_job(c, job);
    return j < 0 ? 0 : c->jobs[j].ntasks;
}

const char *psg_cluster_address(const psg_cluster_t *c, const char *job, int index) {
    int j = find_job(c, job);
    if (j < 0) {
        psg_error_set("job \"%.64s\" is not in the cluster", job);
        return NULL;
    }
    if (index < 0 || index >= c->jobs[j].ntasks) {
        psg_error_set("/job:%s/task:%d: index out of range (the job has %d tasks)", job, index,
                      c->jobs[j].ntasks);
        return NULL;
    }
    return c->jobs[j].addrs[index];
}

int psg_cluster_tasks(const psg_cluster_t *c, psg_task_t *out, int max) {
    int n = 0;
    for (int j = 0; j < c->njobs; j++)
        for (int t = 0; t < c->jobs[j].ntasks; t++, n++)
            if (n < max) out[n] = (psg_task_t){c->jobs[j].name, t, c->jobs[j].addrs[t]};
    return n;
}

char *psg_device_name(const char *job, int index, const char *device, char *buf, size_t size) {
    snprintf(buf, size, "/job:%s/task:%d%s%s", job, index, device ? "/" : "", device ? device : "");
    return buf;
}
