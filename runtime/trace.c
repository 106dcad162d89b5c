/* The Chrome trace writer behind psgraph/trace.h: events kept in memory
 * under a lock while traced steps run, written as one JSON document at the
 * end. Not on the hot path when tracing is off: the executor's hook is NULL. */
#include "psgraph/trace.h"

#include "psgraph/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    char *name, *cat;
    int64_t start_ns, end_ns, step;
    int tid;
    int64_t pushed, pulled; /* a step's tensor bytes; -1: not a step event */
    int64_t bytes;          /* a Send's or a Recv's tensor bytes; 0: none */
} event_t;

struct psg_trace {
    int pid;
    char *process_name, *device;
    pthread_mutex_t lock;
    event_t *events;
    int num_events, cap_events, dropped;
    int64_t step;
    int64_t realtime_minus_mono_ns;
};

/* Small thread numbers, the same for a thread across traces, from 1. */
static atomic_int next_tid = 1;
static _Thread_local int my_tid;

static int thread_tid(void) {
    if (!my_tid) my_tid = atomic_fetch_add(&next_tid, 1);
    return my_tid;
}

static int64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

psg_trace_t *psg_trace_new(int pid, const char *process_name, const char *device) {
    psg_trace_t *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->pid = pid;
    t->process_name = strdup(process_name ? process_name : "psgraph");
    t->device = strdup(device ? device : "CPU:0");
    if (!t->process_name || !t->device) goto oom;
    pthread_mutex_init(&t->lock, NULL);
    t->realtime_minus_mono_ns = clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC);
    return t;
oom:
    if (t) {
        free(t->process_name);
        free(t->device);
        free(t);
    }
    psg_error_set("out of memory");
    return NULL;
}

void psg_trace_destroy(psg_trace_t **pt) {
    if (!pt || !*pt) return;
    psg_trace_t *t = *pt;
    for (int i = 0; i < t->num_events; i++) {
        free(t->events[i].name);
        free(t->events[i].cat);
    }
    free(t->events);
    free(t->process_name);
    free(t->device);
    pthread_mutex_destroy(&t->lock);
    free(t);
    *pt = NULL;
}

void psg_trace_set_step(psg_trace_t *t, int64_t step) {
    pthread_mutex_lock(&t->lock);
    t->step = step;
    pthread_mutex_unlock(&t->lock);
}

static void add_event(psg_trace_t *t, event_t e, bool own_step) {
    pthread_mutex_lock(&t->lock);
    if (!own_step) e.step = t->step;
    if (e.name && e.cat && t->num_events == t->cap_events) {
        int cap = t->cap_events ? 2 * t->cap_events : 1024;
        event_t *p = realloc(t->events, (size_t)cap * sizeof *p);
        if (p) {
            t->events = p;
            t->cap_events = cap;
        }
    }
    bool ok = e.name && e.cat && t->num_events < t->cap_events;
    if (ok)
        t->events[t->num_events++] = e;
    else
        t->dropped++;
    pthread_mutex_unlock(&t->lock);
    if (!ok) {
        free(e.name);
        free(e.cat);
    }
}

void psg_trace_event(psg_trace_t *t, const char *name, const char *cat, int64_t start_ns,
                     int64_t end_ns) {
    add_event(t, (event_t){strdup(name), strdup(cat), start_ns, end_ns, 0, thread_tid(), -1, -1, 0},
              false);
}

void psg_trace_step_event(psg_trace_t *t, int64_t step, int64_t start_ns, int64_t end_ns,
                          int64_t bytes_pushed, int64_t bytes_pulled) {
    char name[48];
    snprintf(name, sizeof name, "step %lld", (long long)step);
    event_t e = {strdup(name),
                 strdup("step"),
                 start_ns,
                 end_ns,
                 step,
                 thread_tid(),
                 bytes_pushed < 0 ? 0 : bytes_pushed,
                 bytes_pulled < 0 ? 0 : bytes_pulled,
                 0};
    add_event(t, e, true);
}

void psg_trace_node_hook(void *ctx, const char *node, const char *op, int64_t step_id,
                         int64_t start_ns, int64_t end_ns, int64_t bytes) {
    (void)step_id;
    add_event(ctx,
              (event_t){strdup(node), strdup(op), start_ns, end_ns, 0, thread_tid(), -1, -1,
                        bytes > 0 ? bytes : 0},
              false);
}

int psg_trace_num_events(psg_trace_t *t) {
    pthread_mutex_lock(&t->lock);
    int n = t->num_events;
    pthread_mutex_unlock(&t->lock);
    return n;
}

int psg_trace_dropped(psg_trace_t *t) {
    pthread_mutex_lock(&t->lock);
    int n = t->dropped;
    pthread_mutex_unlock(&t->lock);
    return n;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

int psg_trace_write(psg_trace_t *t, const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return psg_error_set("%s: %s", tmp, strerror(errno));
    pthread_mutex_lock(&t->lock);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":", t->pid);
    json_str(f, t->process_name);
    fprintf(f, "}}");
    /* one thread_name record per thread seen */
    int max_tid = 0;
    for (int i = 0; i < t->num_events; i++)
        if (t->events[i].tid > max_tid) max_tid = t->events[i].tid;
    char *seen = calloc((size_t)max_tid + 1, 1);
    for (int i = 0; seen && i < t->num_events; i++) {
        int tid = t->events[i].tid;
        if (seen[tid]) continue;
        seen[tid] = 1;
        fprintf(
            f,
            ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"",
            t->pid, tid);
        for (const char *c = t->device; *c; c++)
            if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20) fputc(*c, f);
        fprintf(f, " thread %d\"}}", tid);
    }
    free(seen);
    for (int i = 0; i < t->num_events; i++) {
        const event_t *e = &t->events[i];
        double ts = (double)(e->start_ns + t->realtime_minus_mono_ns) / 1000.0;
        double dur = (double)(e->end_ns - e->start_ns) / 1000.0;
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":", t->pid,
                e->tid, ts, dur);
        json_str(f, e->name);
        fprintf(f, ",\"cat\":");
        json_str(f, e->cat);
        fprintf(f, ",\"args\":{\"op\":");
        json_str(f, e->cat);
        fprintf(f, ",\"step\":%lld", (long long)e->step);
        if (e->pushed >= 0)
            fprintf(f, ",\"bytes_pushed\":%lld,\"bytes_pulled\":%lld", (long long)e->pushed,
                    (long long)e->pulled);
        if (e->bytes > 0 || !strcmp(e->cat, "Send") || !strcmp(e->cat, "Recv"))
            fprintf(f, ",\"bytes\":%lld", (long long)e->bytes);
        fprintf(f, "}}");
    }
    fprintf(f, "\n]}\n");
    pthread_mutex_unlock(&t->lock);
    int rc = 0;
    if (ferror(f)) rc = psg_error_set("%s: write failed", tmp);
    if (fclose(f) != 0 && rc == 0) rc = psg_error_set("%s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) < 0) rc = psg_error_set("%s: %s", path, strerror(errno));
    if (rc < 0) unlink(tmp);
    return rc;
}

int psg_trace_parse_steps(const char *s, int64_t *first, int64_t *last) {
    char *end;
    errno = 0;
    long long a = strtoll(s, &end, 10), b = a;
    if (!errno && end != s && *end == ':') {
        const char *q = end + 1;
        b = strtoll(q, &end, 10);
        if (end == q) b = -1;
    }
    if (errno || end == s || *end || a < 1 || b < a)
        return psg_error_set("'%s' is not a step range A:B with 1 <= A <= B", s);
    *first = a;
    *last = b;
    return 0;
}
