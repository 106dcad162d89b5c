/* The overlap model's calibration: a merged cluster trace (Chrome trace JSON, as
 * `psgraph launch ... train --trace FILE` writes it) read into a psg_sim_profile_t: one
 * worker's compute, when each pull is needed and each push is made, their bytes, the ps's
 * apply time. Not a trace viewer: medians over the traced steps, nothing else. */
#include "core/json.h"
#include "psgraph/simulate.h"

#include "psgraph/error.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TRACE_BYTES ((long)16 << 20) /* core/json.c's limit */
#define MAX_MSGS 4096

typedef struct {
    const char *name, *cat;
    int pid;
    double ts, dur; /* µs */
    long step;
    double bytes;
} tev_t;

/* one message of the profile, by node name: its values over the steps */
typedef struct {
    const char *name;
    bool push;
    double *at, *bytes;
    int n, ps;
} row_t;

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        psg_error_set("trace %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n > MAX_TRACE_BYTES)
        psg_error_set("trace %s: %ld bytes, more than %ld (trace fewer steps: --trace-steps A:B)",
                      path, n, MAX_TRACE_BYTES);
    else if (n < 0 || fseek(f, 0, SEEK_SET) != 0 || !(text = malloc((size_t)n + 1)))
        psg_error_set("trace %s: cannot read it", path);
    else if (fread(text, 1, (size_t)n, f) != (size_t)n) {
        psg_error_set("trace %s: short read", path);
        free(text);
        text = NULL;
    } else {
        text[n] = 0;
    }
    fclose(f);
    return text;
}

static double num(const psg_json_t *o, const char *key, double dflt) {
    const psg_json_t *v = o ? psg_json_get(o, key) : NULL;
    return v && v->type == PSG_JSON_NUMBER ? v->number : dflt;
}

static const char *str(const psg_json_t *o, const char *key) {
    const psg_json_t *v = o ? psg_json_get(o, key) : NULL;
    return v && v->type == PSG_JSON_STRING ? v->string : NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int cmp_span(const void *a, const void *b) {
    const double *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* The measure of the union of the spans (pairs, merged in place) before t. */
static double busy_before(const double *spans, int n, double t) {
    double sum = 0;
    for (int i = 0; i < n && spans[2 * i] < t; i++) sum += fmin(spans[2 * i + 1], t) - spans[2 * i];
    return sum;
}

/* Sorts and merges the n spans; returns how many are left. */
static int merge_spans(double *spans, int n) {
    qsort(spans, (size_t)n, 2 * sizeof *spans, cmp_span);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k > 0 && spans[2 * i] <= spans[2 * k - 1]) {
            spans[2 * k - 1] = fmax(spans[2 * k - 1], spans[2 * i + 1]);
        } else {
            spans[2 * k] = spans[2 * i];
            spans[2 * k + 1] = spans[2 * i + 1];
            k++;
        }
    }
    return k;
}

/* The length of `name` up to "/_recv_" or "/_send_" (the edge's source node), or -1. */
static int edge_prefix(const char *name, const char *mark) {
    const char *p = strstr(name, mark);
    return p ? (int)(p - name) : -1;
}

/* The ps index of the ps process whose op of category `cat` names the same edge source. */
static int ps_of(const tev_t *ev, int n, const int *ps_index, int npids, const char *name,
                 bool push) {
    int len = edge_prefix(name, push ? "/_send_" : "/_recv_");
    if (len < 0) return -1;
    const char *want = push ? "Recv" : "Send", *mark = push ? "/_recv_" : "/_send_";
    for (int i = 0; i < n; i++) {
        if (ev[i].pid < 0 || ev[i].pid >= npids || ps_index[ev[i].pid] < 0 ||
            strcmp(ev[i].cat, want) != 0)
            continue;
        if (edge_prefix(ev[i].name, mark) == len && !strncmp(ev[i].name, name, (size_t)len))
            return ps_index[ev[i].pid];
    }
    return -1;
}

typedef struct {
    tev_t *ev;
    int n, npids, worker, workers, nps;
    int *ps_index; /* per pid: the ps task, -1 when not a ps */
} trace_t;

/* The events and processes of the parsed document into t. */
static int load_events(const char *path, const psg_json_t *doc, trace_t *t) {
    const psg_json_t *arr = psg_json_get(doc, "traceEvents");
    if (!arr || arr->type != PSG_JSON_ARRAY)
        return psg_error_set("trace %s: no \"traceEvents\" array", path);
    t->ev = calloc((size_t)arr->count + 1, sizeof *t->ev);
    if (!t->ev) return psg_error_set("out of memory");
    t->worker = -1;
    for (int i = 0; i < arr->count; i++) {
        const psg_json_t *e = arr->items[i];
        const char *ph = str(e, "ph"), *name = str(e, "name");
        int pid = (int)num(e, "pid", -1);
        if (!ph || !name || pid < 0 || pid > 1000000) continue;
        if (pid >= t->npids) t->npids = pid + 1;
        if (!strcmp(ph, "M") && !strcmp(name, "process_name")) {
            const char *pname = str(psg_json_get(e, "args"), "name");
            if (pname && strstr(pname, "/job:worker/")) {
                t->workers++;
                if (t->worker < 0 || pid < t->worker) t->worker = pid;
            }
            continue;
        }
        if (strcmp(ph, "X") != 0) continue;
        const psg_json_t *args = psg_json_get(e, "args");
        const char *cat = str(e, "cat");
        t->ev[t->n++] = (tev_t){name,
                                cat ? cat : "",
                                pid,
                                num(e, "ts", 0),
                                num(e, "dur", 0),
                                (long)num(args, "step", -1),
                                num(args, "bytes", -1)};
    }
    if (t->worker < 0)
        return psg_error_set("trace %s: no worker process (a process_name with /job:worker/): "
                             "a cluster's merged trace is needed",
                             path);
    t->ps_index = malloc((size_t)(t->npids + 1) * sizeof *t->ps_index);
    if (!t->ps_index) return psg_error_set("out of memory");
    for (int i = 0; i <= t->npids; i++) t->ps_index[i] = -1;
    for (int i = 0; i < arr->count; i++) {
        const psg_json_t *e = arr->items[i];
        const char *ph = str(e, "ph"), *name = str(e, "name");
        const char *pname = str(psg_json_get(e, "args"), "name");
        int pid = (int)num(e, "pid", -1);
        if (!ph || strcmp(ph, "M") || !name || strcmp(name, "process_name") || !pname || pid < 0 ||
            pid >= t->npids || !strstr(pname, "/job:ps/"))
            continue;
        const char *task = strstr(pname, "task:");
        t->ps_index[pid] = task ? atoi(task + 5) : t->nps;
        t->nps++;
    }
    return 0;
}

static row_t *row_of(row_t *rows, int *nrows, const char *name, bool push, int nsteps) {
    for (int i = 0; i < *nrows; i++)
        if (rows[i].push == push && !strcmp(rows[i].name, name)) return &rows[i];
    if (*nrows == MAX_MSGS) return NULL;
    row_t *r = &rows[(*nrows)++];
    *r = (row_t){
        name, push, calloc((size_t)nsteps, sizeof(double)), calloc((size_t)nsteps, sizeof(double)),
        0,    -1};
    return r->at && r->bytes ? r : NULL;
}

/* One traced step of the worker (events of step `step`): its rows and compute; -1 on out of
 * memory, 1 when the step has no compute. */
static int read_step(const trace_t *t, long step, row_t *rows, int *nrows, int nsteps,
                     double *compute) {
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->ev[i].pid == t->worker && t->ev[i].step == step && strcmp(t->ev[i].cat, "step")) n++;
    double *spans = malloc((size_t)(2 * n + 2) * sizeof *spans);
    if (!spans) return psg_error_set("out of memory");
    int k = 0;
    for (int i = 0; i < t->n; i++) {
        const tev_t *e = &t->ev[i];
        if (e->pid != t->worker || e->step != step || !strcmp(e->cat, "step") ||
            !strcmp(e->cat, "Recv"))
            continue;
        spans[2 * k] = e->ts;
        spans[2 * k + 1] = e->ts + e->dur;
        k++;
    }
    k = merge_spans(spans, k);
    *compute = busy_before(spans, k, INFINITY) / 1000.0;
    int rc = k > 0 ? 0 : 1;
    for (int i = 0; rc == 0 && i < t->n; i++) {
        const tev_t *e = &t->ev[i];
        bool push = !strcmp(e->cat, "Send");
        if (e->pid != t->worker || e->step != step || (!push && strcmp(e->cat, "Recv"))) continue;
        row_t *r = row_of(rows, nrows, e->name, push, nsteps);
        if (!r) {
            rc = psg_error_set("trace: out of memory or more than %d messages a step", MAX_MSGS);
            break;
        }
        if (r->n == nsteps) continue; /* a name twice in a step: the first counts */
        r->at[r->n] = busy_before(spans, k, push ? e->ts : e->ts + e->dur) / 1000.0;
        r->bytes[r->n++] = e->bytes;
    }
    free(spans);
    return rc;
}

/* The worker's steps (sorted step events) into *steps; their count. */
static int worker_steps(const trace_t *t, const tev_t ***steps) {
    int n = 0;
    const tev_t **s = malloc((size_t)(t->n + 1) * sizeof *s);
    if (!s) return psg_error_set("out of memory");
    for (int i = 0; i < t->n; i++)
        if (t->ev[i].pid == t->worker && !strcmp(t->ev[i].cat, "step")) s[n++] = &t->ev[i];
    for (int i = 1; i < n; i++) /* insertion sort by start: a few dozen steps */
        for (int j = i; j > 0 && s[j]->ts < s[j - 1]->ts; j--) {
            const tev_t *x = s[j];
            s[j] = s[j - 1];
            s[j - 1] = x;
        }
    *steps = s;
    return n;
}

/* The profile from the rows and the per-step numbers. */
static int fill_profile(const char *path, const trace_t *t, row_t *rows, int nrows, int used,
                        double *compute, double *period, double *ps_ms, psg_sim_profile_t *p) {
    int npull = 0, npush = 0;
    double push_bytes = 0;
    for (int i = 0; i < nrows; i++) {
        for (int j = 0; j < rows[i].n; j++)
            if (rows[i].bytes[j] < 0)
                return psg_error_set("trace %s: %s '%s' has no args.bytes (a trace of an older "
                                     "psgraph: trace the run again)",
                                     path, rows[i].push ? "Send" : "Recv", rows[i].name);
        if (rows[i].n * 2 < used) continue; /* in fewer than half the steps: not the step's */
        if (rows[i].push)
            npush++;
        else
            npull++;
    }
    if (npush == 0)
        return psg_error_set("trace %s: worker pid %d sent nothing in its steps (no Send: not a "
                             "cluster run?)",
                             path, t->worker);
    p->pulls = calloc((size_t)npull + 1, sizeof *p->pulls);
    p->pushes = calloc((size_t)npush, sizeof *p->pushes);
    if (!p->pulls || !p->pushes) return psg_error_set("out of memory");
    for (int i = 0; i < nrows; i++) {
        row_t *r = &rows[i];
        if (r->n * 2 < used) continue;
        int ps = ps_of(t->ev, t->n, t->ps_index, t->npids, r->name, r->push);
        psg_sim_msg_t m = {median(r->bytes, r->n), median(r->at, r->n), 0,
                           ps >= 0 ? ps : (r->push ? p->n_pushes : p->n_pulls)};
        if (r->push) {
            p->pushes[p->n_pushes++] = m;
            push_bytes += m.bytes;
        } else {
            p->pulls[p->n_pulls++] = m;
        }
    }
    double apply = median(ps_ms, used);
    for (int j = 0; j < p->n_pushes; j++)
        p->pushes[j].apply_ms =
            push_bytes > 0 ? apply * p->pushes[j].bytes / push_bytes : apply / p->n_pushes;
    p->compute_ms = median(compute, used);
    p->trace_step_ms = median(period, used);
    p->trace_workers = t->workers;
    p->trace_steps = used;
    return 0;
}

/* The ps's time in its updates (ops whose type has "Apply": the optimizer's, the
 * accumulators') from t0 to t1 (µs), in ms. Not its takes and dequeues: those wait. */
static double ps_time(const trace_t *t, double t0, double t1) {
    double sum = 0;
    for (int i = 0; i < t->n; i++) {
        const tev_t *e = &t->ev[i];
        if (e->pid < t->npids && t->ps_index[e->pid] >= 0 && e->ts >= t0 && e->ts < t1 &&
            strstr(e->cat, "Apply"))
            sum += e->dur;
    }
    return sum / 1000.0;
}

int psg_sim_profile_from_trace(const char *path, psg_sim_profile_t *p) {
    memset(p, 0, sizeof *p);
    char *text = read_file(path);
    if (!text) return -1;
    psg_json_t *doc = psg_json_parse(text);
    free(text);
    if (!doc) return psg_error_wrap("trace %s", path);
    trace_t t = {0};
    const tev_t **steps = NULL;
    row_t *rows = calloc(MAX_MSGS, sizeof *rows);
    double *per = NULL;
    int nrows = 0, used = 0,
        rc = rows ? load_events(path, doc, &t) : psg_error_set("out of memory");
    int nsteps = rc == 0 ? worker_steps(&t, &steps) : 0;
    if (rc == 0 && nsteps < 0) rc = -1;
    if (rc == 0 && nsteps < 3)
        rc = psg_error_set("trace %s: worker pid %d has %d traced steps (need 3 or more: "
                           "--trace-steps A:B)",
                           path, t.worker, nsteps);
    if (rc == 0 && !(per = calloc((size_t)(3 * nsteps), sizeof *per)))
        rc = psg_error_set("out of memory");
    /* the first traced step warms up; each other one but the last has a next start */
    for (int i = 1; rc == 0 && i + 1 < nsteps; i++) {
        double compute = 0;
        int r = read_step(&t, steps[i]->step, rows, &nrows, nsteps, &compute);
        if (r < 0) rc = -1;
        if (r != 0) continue;
        per[used] = compute;
        per[nsteps + used] = (steps[i + 1]->ts - steps[i]->ts) / 1000.0;
        per[2 * nsteps + used] = ps_time(&t, steps[i]->ts, steps[i + 1]->ts);
        used++;
    }
    if (rc == 0 && used == 0)
        rc = psg_error_set("trace %s: no step of worker pid %d has ops", path, t.worker);
    if (rc == 0)
        rc = fill_profile(path, &t, rows, nrows, used, per, per + nsteps, per + 2 * nsteps, p);
    for (int i = 0; i < nrows; i++) {
        free(rows[i].at);
        free(rows[i].bytes);
    }
    free(rows);
    free(per);
    free(steps);
    free(t.ev);
    free(t.ps_index);
    psg_json_free(doc);
    if (rc < 0) psg_sim_profile_free(p);
    return rc;
}

void psg_sim_profile_free(psg_sim_profile_t *p) {
    if (!p) return;
    free(p->pulls);
    free(p->pushes);
    p->pulls = p->pushes = NULL;
    p->n_pulls = p->n_pushes = 0;
}
