/* The chief's set of live workers (worker/membership.h, docs/distributed.md "Membership"):
 * a thread that asks the other workers' task servers and the ps tasks, the states it keeps,
 * the end-of-job wait on them. Not the strategies' aggregation (sync/) nor the launcher. */
#include "worker/membership.h"

#include "core/json.h"
#include "core/strbuf.h"
#include "ps/client.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/wire.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often each worker is asked, and how long an answer may take. */
#define PROBE_MS 250
/* How long the ps tasks may take to say who is done before a silent worker is called lost: a
 * ps busy with a large model's gradients under load can take longer than PROBE_MS, and a
 * worker that said JobDone then exited is done, not lost. */
#define CONFIRM_MS 3000
/* During the end-of-job wait, how often the ps tasks are asked who is done: the job ends this
 * much after the last worker's JobDone at most (a brief Inspect a poll, only then). */
#define END_POLL_MS 50

/* JOINING: not heard from yet; ABSENT: not heard from for the peer timeout since the job
 * began (not started: --workers MIN:MAX), not counted live until it answers (it joins);
 * LEFT: it said it leaves (SIGTERM: worker/membership_leave.h), out of the live set as a lost
 * one, at once. */
typedef enum { JOINING, LIVE, DONE, LOST, ABSENT, LEFT } state_t;

typedef struct {
    char task[PSG_DEVICE_NAME_MAX]; /* "/job:worker/replica:0/task:2" */
    char tag[48];                   /* "worker2" */
    char host[128];                 /* its address's host */
    psg_ts_client_t *client;
    state_t state;
    int64_t heard_ms; /* its last answer (or when it was first asked) */
    uint64_t inc;     /* its incarnation when it last answered (0: none yet) */
    char why[96];     /* LOST, LEFT: why */
    bool left_said;   /* its leave was seen (marked LEFT then, if it was live) */
    bool late;        /* ABSENT or LOST, answered after the end-of-job wait: said once */
    int64_t at_step;  /* the chief's step when it was found lost */
    psg_membership_heard_t heard; /* any answer, admitted or not: for the shards' hand-out */
} member_t;

struct psg_membership {
    FILE *out;
    int peer_ms;
    int n, nps;
    member_t *m;
    /* (2 nps) who said JobDone: the thread's clients, then the end-of-job wait's own (it asks
     * itself, not behind a round of the thread's probes, some waiting on gone workers) */
    psg_ts_client_t **ps;
    psg_ts_client_t *self; /* the chief's own task server: who said it leaves */
    pthread_mutex_t lock;  /* the states, changes, wait_from_ms */
    pthread_cond_t cond;   /* a state changed, or stop */
    int changes, joined;
    int64_t start_ms;     /* the thread began */
    int64_t wait_from_ms; /* the end-of-job wait began (0: not yet) */
    /* the end-of-job wait is over: the ps tasks are told the job is done for every worker
     * not awaited, so an absent one is admitted no more (it stops with the job) */
    bool closed;
    atomic_llong step;
    psg_membership_live_fn on_live; /* NULL: none */
    void *live_arg;
    bool told[65]; /* the set on_live was last called with, by rank */
    bool stop;
    pthread_t thread;
    bool started;
};

/* "host" of "host:port", "tcp://host:port"; "this host" for an ipc:// address. */
static void host_of(const char *addr, char *buf, size_t size) {
    if (!strncmp(addr, "ipc://", 6)) {
        snprintf(buf, size, "this host");
        return;
    }
    if (!strncmp(addr, "tcp://", 6)) addr += 6;
    const char *colon = strrchr(addr, ':');
    size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
    snprintf(buf, size, "%.*s", (int)(n < size ? n : size - 1), addr);
}

/* Says a change of worker x (under lock). */
static void say(psg_membership_t *m, const member_t *x, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(psg_membership_t *m, const member_t *x, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    m->changes++;
    if (!m->out) return;
    fprintf(m->out, "membership: %s on %s: %s\n", x->tag, x->host, what);
    fflush(m->out);
}

/* Whether the thread is told to stop: between two requests (each may wait PROBE_MS on a task
 * that is gone, the ps tasks too once the job is done), so that the chief exits at once. */
static bool stopping(psg_membership_t *m) {
    pthread_mutex_lock(&m->lock);
    bool stop = m->stop;
    pthread_mutex_unlock(&m->lock);
    return stop;
}

/* The brief Inspect of task server c (no variables read: a ps that backs up another's shard
 * keeps its log held), parsed; *said its "workers_done_tasks" array, NULL when none. The
 * caller frees the result with psg_json_free. */
static psg_json_t *done_tasks_of(psg_ts_client_t *c, int timeout_ms, const psg_json_t **said) {
    psg_req_t in = {.type = PSG_REQ_INSPECT, .u.key = "brief"};
    psg_rep_t rep;
    psg_msg_t *r = c ? psg_ts_call(c, &in, &rep, timeout_ms) : NULL;
    char *text = r && r->body ? strndup((const char *)r->body->data, r->body->size) : NULL;
    psg_msg_destroy(&r);
    psg_json_t *j = text ? psg_json_parse(text) : NULL;
    free(text);
    const psg_json_t *a = j ? psg_json_get(j, "workers_done_tasks") : NULL;
    *said = a && a->type == PSG_JSON_ARRAY ? a : NULL;
    return j;
}

/* Whether member x is the task that item s of a workers_done_tasks array names. */
static bool names_member(const psg_json_t *s, const member_t *x) {
    psg_device_name_t d, e;
    return s->type == PSG_JSON_STRING && psg_device_name_parse(s->string, &d) == 0 &&
           psg_device_name_parse(x->task, &e) == 0 && !strcmp(d.job, e.job) && d.task == e.task;
}

/* The workers that said JobDone to any ps task, marked DONE (each ps given timeout_ms), through
 * the clients ps[0..nps). */
static void ask_done(psg_membership_t *m, psg_ts_client_t **ps, int timeout_ms) {
    for (int k = 0; k < m->nps && !stopping(m); k++) {
        const psg_json_t *done;
        psg_json_t *j = done_tasks_of(ps[k], timeout_ms, &done);
        pthread_mutex_lock(&m->lock);
        for (int i = 0; done && i < done->count; i++) {
            for (int w = 0; w < m->n; w++) {
                state_t s = m->m[w].state;
                /* a lost or absent one's JobDone is the chief's own
                 * (psg_dist_session_job_done_for): it stays out of the live workers */
                if (s == DONE || s == LOST || s == ABSENT || s == LEFT ||
                    !names_member(done->items[i], &m->m[w]))
                    continue;
                m->m[w].state = DONE;
                pthread_cond_broadcast(&m->cond);
            }
        }
        pthread_mutex_unlock(&m->lock);
        psg_json_free(j);
        psg_error_clear();
    }
}

/* The workers that told the chief's own task server they leave (a JobDone sent there: only a
 * leaving worker sends one, worker/membership_leave.c), marked LEFT, once each: a worker that
 * comes back answers with a new incarnation (ask_worker) and is live again. */
static void ask_left(psg_membership_t *m) {
    const psg_json_t *said;
    psg_json_t *j = done_tasks_of(m->self, PROBE_MS, &said);
    pthread_mutex_lock(&m->lock);
    for (int i = 0; said && i < said->count; i++) {
        for (int w = 0; w < m->n; w++) {
            member_t *x = &m->m[w];
            if (x->left_said || !names_member(said->items[i], x)) continue;
            x->left_said = true;
            if (x->state != LIVE && x->state != JOINING) continue; /* lost, done: it stays so */
            x->state = LEFT;
            x->heard.left_inc = x->inc;
            x->at_step = atomic_load(&m->step);
            snprintf(x->why, sizeof x->why, "left (it got SIGTERM and said so)");
            say(m, x, "%s at step %lld", x->why, (long long)x->at_step);
            pthread_cond_broadcast(&m->cond);
        }
    }
    pthread_mutex_unlock(&m->lock);
    psg_json_free(j);
    psg_error_clear();
}

/* Whether Inspect's reply r says its task server runs a graph ("graphs" >= 1): the worker
 * made its step, so it is about to send its first gradient. */
static bool runs_a_graph(const psg_msg_t *r) {
    char *text = r->body ? strndup((const char *)r->body->data, r->body->size) : NULL;
    psg_json_t *j = text ? psg_json_parse(text) : NULL;
    free(text);
    const psg_json_t *g = j ? psg_json_get(j, "graphs") : NULL;
    bool runs = g && g->type == PSG_JSON_NUMBER && g->number >= 1;
    psg_json_free(j);
    psg_error_clear();
    return runs;
}

/* Asks worker x whether it answers; a change of its state said. */
static void ask_worker(psg_membership_t *m, member_t *x, bool *silent_long) {
    psg_req_t in = {.type = PSG_REQ_INSPECT, .u.key = "brief"};
    psg_rep_t rep;
    int64_t asked = psg_ts_now_ms();
    psg_msg_t *r = psg_ts_call(x->client, &in, &rep, PROBE_MS);
    bool answered = r != NULL;
    pthread_mutex_lock(&m->lock);
    bool absent = x->state == ABSENT;
    x->heard.probed_ms = asked;
    if (answered) {
        x->heard.answered_ms = psg_ts_now_ms();
        x->heard.inc = psg_ts_client_incarnation(x->client);
    }
    pthread_mutex_unlock(&m->lock);
    /* one that joins is admitted once it made its step, not while it starts: the step in
     * progress would wait for its gradient meanwhile */
    bool ready = !answered || !absent || runs_a_graph(r);
    psg_msg_destroy(&r);
    if (!answered) psg_error_clear();
    if (!ready) return;
    int64_t now = psg_ts_now_ms();
    uint64_t inc = answered ? psg_ts_client_incarnation(x->client) : 0;
    pthread_mutex_lock(&m->lock);
    if (answered && x->state == LEFT && inc == x->heard.left_inc) {
        pthread_mutex_unlock(&m->lock); /* the one that left, still exiting */
        return;
    }
    if (answered) {
        if ((x->state == ABSENT || x->state == LOST || x->state == LEFT) && m->closed) {
            if (!x->late)
                say(m, x,
                    "answers after the job's end (step %lld): not admitted, it stops with the "
                    "job",
                    (long long)atomic_load(&m->step));
            x->late = true;
            pthread_mutex_unlock(&m->lock);
            return;
        }
        if (x->state == LOST || x->state == LEFT)
            say(m, x, "answers again (incarnation %016" PRIx64 ") at step %lld", inc,
                (long long)atomic_load(&m->step));
        else if (x->state == ABSENT) {
            say(m, x, "joined at step %lld", (long long)atomic_load(&m->step));
            m->joined++;
        } else if (x->inc && inc && inc != x->inc)
            say(m, x, "restarted (incarnation %016" PRIx64 ", was %016" PRIx64 ") at step %lld",
                inc, x->inc, (long long)atomic_load(&m->step));
        if (x->state != DONE) x->state = LIVE;
        x->heard_ms = now;
        if (inc) x->inc = inc;
    } else if (x->state == JOINING && !m->wait_from_ms && now - m->start_ms >= m->peer_ms) {
        x->state = ABSENT; /* not started: the job goes on without it until it joins */
        say(m, x, "not started (silent %.1f s since the job began): the job goes on without it",
            (double)(now - m->start_ms) / 1e3);
    } else if (x->state == LIVE || (x->state == JOINING && m->wait_from_ms)) {
        /* never heard from: silent since the end-of-job wait began, not since the start */
        int64_t from =
            x->state == JOINING && x->heard_ms < m->wait_from_ms ? m->wait_from_ms : x->heard_ms;
        *silent_long = now - from >= m->peer_ms;
        if (*silent_long)
            snprintf(x->why, sizeof x->why, "lost (silent %.1f s%s)", (double)(now - from) / 1e3,
                     x->state == JOINING ? ", never heard from" : "");
    }
    pthread_mutex_unlock(&m->lock);
}

/* The chief and the others neither lost nor absent, by rank (under lock); how many ranks. */
static int live_locked(const psg_membership_t *m, bool *alive) {
    alive[0] = true;
    for (int i = 0; i < m->n && i < 64; i++)
        alive[i + 1] = m->m[i].state != LOST && m->m[i].state != ABSENT && m->m[i].state != LEFT;
    return (m->n < 64 ? m->n : 64) + 1;
}

/* Tells on_live a new set, outside the lock. */
static void tell_live(psg_membership_t *m) {
    bool alive[65];
    pthread_mutex_lock(&m->lock);
    int n = live_locked(m, alive);
    bool changed = m->on_live && !m->stop && memcmp(alive, m->told, sizeof *alive * (size_t)n);
    pthread_mutex_unlock(&m->lock);
    if (!changed) return;
    if (m->on_live(m->live_arg, alive, n) < 0) {
        if (m->out) {
            fprintf(m->out, "membership: warning: %s\n", psg_error_message());
            fflush(m->out);
        }
        psg_error_clear();
        return;
    }
    memcpy(m->told, alive, sizeof *alive * (size_t)n);
}

/* Whether the end-of-job wait is on (psg_membership_wait_done): only the awaited count. */
static bool ending(psg_membership_t *m) {
    pthread_mutex_lock(&m->lock);
    bool on = m->wait_from_ms && !m->closed;
    pthread_mutex_unlock(&m->lock);
    return on;
}

static void *run(void *arg) {
    psg_membership_t *m = arg;
    while (!stopping(m)) {
        bool any_silent = false, silent[64] = {0};
        /* the end of the job waits for the JobDone of the last workers: the ps tasks asked
         * first, and no probe of a worker not awaited (lost, left, not started: each waits
         * PROBE_MS in vain) comes before it (issue 31: 0.3 s of the job's end) */
        bool end = ending(m);
        if (end) ask_done(m, m->ps, PROBE_MS);
        ask_left(m); /* first: a leave is said before the probes' waits on gone workers */
        for (int i = 0; i < m->n && i < 64 && !stopping(m); i++) {
            pthread_mutex_lock(&m->lock);
            state_t s = m->m[i].state;
            pthread_mutex_unlock(&m->lock);
            if (s == DONE || (end && s != LIVE && s != JOINING)) continue;
            ask_worker(m, &m->m[i], &silent[i]);
            any_silent |= silent[i];
        }
        /* a worker that finished exits: silent, but it said JobDone first */
        ask_done(m, m->ps, any_silent ? CONFIRM_MS : PROBE_MS);
        pthread_mutex_lock(&m->lock);
        for (int i = 0; any_silent && i < m->n && i < 64; i++) {
            member_t *x = &m->m[i];
            if (!silent[i] || x->state == DONE || x->state == LOST || x->state == LEFT) continue;
            x->state = LOST;
            x->at_step = atomic_load(&m->step);
            say(m, x, "%s at step %lld", x->why, (long long)x->at_step);
            pthread_cond_broadcast(&m->cond);
        }
        pthread_mutex_unlock(&m->lock);
        tell_live(m); /* the strategy follows a loss or a return at once */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (end ? END_POLL_MS : PROBE_MS) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&m->lock);
        if (!m->stop) pthread_cond_timedwait(&m->cond, &m->lock, &ts);
        pthread_mutex_unlock(&m->lock);
    }
    return NULL;
}

/* The worker tasks of cl but self, in rank order (the chief job's first). */
static int members_init(psg_membership_t *m, const psg_cluster_t *cl, const char *self) {
    static const char *const jobs[] = {"chief", "worker"};
    psg_device_name_t me;
    if (psg_device_name_parse(self, &me) < 0) return -1;
    int total = psg_cluster_num_tasks(cl, "chief") + psg_cluster_num_tasks(cl, "worker");
    if (!(m->m = calloc((size_t)(total > 0 ? total : 1), sizeof *m->m)))
        return psg_error_set("out of memory");
    int64_t now = psg_ts_now_ms();
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < psg_cluster_num_tasks(cl, jobs[j]); k++) {
            if (!strcmp(me.job, jobs[j]) && me.task == k) continue;
            member_t *x = &m->m[m->n];
            const char *addr = psg_cluster_address(cl, jobs[j], k);
            psg_device_name(jobs[j], k, NULL, x->task, sizeof x->task);
            snprintf(x->tag, sizeof x->tag, "%s%d", jobs[j], k);
            host_of(addr ? addr : "?", x->host, sizeof x->host);
            x->heard_ms = now;
            if (!addr || !(x->client = psg_ts_client_new(x->task, addr, PROBE_MS, m->peer_ms,
                                                         psg_cluster_keys(cl))))
                return -1;
            m->n++;
        }
    return 0;
}

/* A client of the chief's own task server (task `self` of cl). */
static psg_ts_client_t *self_client(const psg_cluster_t *cl, const char *self, int peer_ms) {
    psg_device_name_t me;
    if (psg_device_name_parse(self, &me) < 0) return NULL;
    const char *addr = psg_cluster_address(cl, me.job, me.task);
    if (!addr) {
        psg_error_set("membership: no address for %s", self);
        return NULL;
    }
    return psg_ts_client_new(self, addr, PROBE_MS, peer_ms, psg_cluster_keys(cl));
}

psg_membership_t *psg_membership_new(const psg_cluster_t *cl, const char *self, FILE *out) {
    psg_membership_t *m = calloc(1, sizeof *m);
    if (!m) {
        psg_error_set("out of memory");
        return NULL;
    }
    m->out = out;
    m->peer_ms = psg_cluster_peer_timeout_ms(cl);
    if (m->peer_ms <= 0) m->peer_ms = PSG_WIRE_PEER_TIMEOUT_MS;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->cond, NULL);
    m->nps = psg_cluster_num_tasks(cl, "ps");
    int rc = members_init(m, cl, self);
    if (rc == 0 && m->n > 64) rc = psg_error_set("membership: %d workers (at most 65)", m->n + 1);
    if (rc == 0 && !(m->ps = calloc((size_t)(m->nps > 0 ? 2 * m->nps : 1), sizeof *m->ps)))
        rc = psg_error_set("out of memory");
    for (int k = 0; rc == 0 && k < 2 * m->nps; k++) {
        char task[PSG_DEVICE_NAME_MAX];
        psg_device_name("ps", k % m->nps, NULL, task, sizeof task);
        const char *addr = psg_cluster_address(cl, "ps", k % m->nps);
        if (!(m->ps[k] = psg_ts_client_new(task, addr ? addr : "", PROBE_MS, m->peer_ms,
                                           psg_cluster_keys(cl))))
            rc = -1;
    }
    if (rc == 0 && !(m->self = self_client(cl, self, m->peer_ms))) rc = -1;
    m->start_ms = psg_ts_now_ms();
    if (rc == 0 && pthread_create(&m->thread, NULL, run, m) != 0)
        rc = psg_error_set("membership: cannot start its thread");
    m->started = rc == 0;
    if (rc < 0) psg_membership_destroy(&m);
    return m;
}

void psg_membership_destroy(psg_membership_t **mp) {
    if (!mp || !*mp) return;
    psg_membership_t *m = *mp;
    *mp = NULL;
    if (m->started) {
        pthread_mutex_lock(&m->lock);
        m->stop = true;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->thread, NULL);
    }
    for (int i = 0; i < m->n; i++) psg_ts_client_destroy(&m->m[i].client);
    for (int k = 0; m->ps && k < 2 * m->nps; k++) psg_ts_client_destroy(&m->ps[k]);
    psg_ts_client_destroy(&m->self);
    free(m->ps);
    free(m->m);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void psg_membership_heard(psg_membership_t *m, int rank, psg_membership_heard_t *h) {
    pthread_mutex_lock(&m->lock);
    *h = rank >= 1 && rank <= m->n ? m->m[rank - 1].heard : (psg_membership_heard_t){0};
    pthread_mutex_unlock(&m->lock);
}

int psg_membership_peer_timeout_ms(const psg_membership_t *m) {
    return m->peer_ms;
}

int64_t psg_membership_now_ms(void) {
    return psg_ts_now_ms();
}

void psg_membership_on_live(psg_membership_t *m, psg_membership_live_fn fn, void *arg) {
    pthread_mutex_lock(&m->lock);
    m->on_live = fn;
    m->live_arg = arg;
    live_locked(m, m->told);
    pthread_mutex_unlock(&m->lock);
}

void psg_membership_set_step(psg_membership_t *m, int64_t step) {
    if (m) atomic_store(&m->step, step);
}

int psg_membership_wait_done(psg_membership_t *m, int64_t timeout_ms) {
    int64_t t0 = psg_ts_now_ms();
    pthread_mutex_lock(&m->lock);
    m->wait_from_ms = t0;
    pthread_cond_broadcast(&m->cond); /* asked again at once */
    for (;;) {
        /* the ps tasks asked from here too: the last JobDone seen within END_POLL_MS */
        pthread_mutex_unlock(&m->lock);
        ask_done(m, m->ps + m->nps, PROBE_MS);
        pthread_mutex_lock(&m->lock);
        int running = 0;
        for (int i = 0; i < m->n; i++) running += m->m[i].state == LIVE || m->m[i].state == JOINING;
        if (running == 0) break;
        int64_t left = t0 + timeout_ms - psg_ts_now_ms();
        if (left <= 0) {
            m->closed = true;
            psg_strbuf_t b = {0};
            for (int i = 0; i < m->n; i++)
                if (m->m[i].state == LIVE || m->m[i].state == JOINING)
                    psg_strbuf_printf(&b, "%s%s on %s (%s)", b.len ? ", " : "", m->m[i].tag,
                                      m->m[i].host,
                                      m->m[i].state == LIVE ? "it answers" : "never heard from");
            pthread_mutex_unlock(&m->lock);
            psg_error_set_code(
                PSG_ERR_TIMEOUT, "after %.1f s, %d worker%s neither done nor lost: %s",
                (double)timeout_ms / 1e3, running, running == 1 ? "" : "s", b.s ? b.s : "");
            free(b.s);
            return -1;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t w = left < END_POLL_MS ? left : END_POLL_MS;
        ts.tv_nsec += w * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&m->cond, &m->lock, &ts);
    }
    /* under the lock that admits: one admitted before this is awaited above, none after */
    m->closed = true;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int psg_membership_end(psg_membership_t *m, psg_dist_session_t *ds, int workers, int64_t timeout_ms,
                       FILE *out, bool *all_done) {
    *all_done = m ? psg_membership_wait_done(m, timeout_ms) == 0
                  : psg_dist_session_wait_workers(ds, workers, timeout_ms) == 0;
    if (!*all_done) {
        fprintf(out, "warning: waiting for the workers to finish: %s; evaluating anyway\n",
                psg_error_message());
        fflush(out);
    }
    char lost[64][128], who[64][256];
    int nlost = m ? psg_membership_lost(m, lost, who, 64) : 0;
    for (int i = 0; i < nlost; i++) {
        /* one that starts now is not admitted: the ps tasks tell it the job is done */
        fprintf(out, "membership: %s: the job ends without it; the ps tasks are told it is done\n",
                who[i]);
        fflush(out);
        if (psg_dist_session_job_done_for(ds, lost[i]) < 0) { /* they stop later */
            fprintf(out, "warning: telling the ps tasks %s is lost: %s\n", lost[i],
                    psg_error_message());
            fflush(out);
        }
    }
    return nlost;
}

int psg_membership_lost(psg_membership_t *m, char (*tasks)[128], char (*who)[256], int max) {
    int n = 0;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->n; i++) {
        const member_t *x = &m->m[i];
        if ((x->state != LOST && x->state != ABSENT && x->state != LEFT) || n >= max) continue;
        snprintf(who[n], 256, "%s on %s (%s)", x->tag, x->host,
                 x->state == LOST   ? "lost"
                 : x->state == LEFT ? "left"
                                    : "not started");
        snprintf(tasks[n++], 128, "%s", x->task);
    }
    pthread_mutex_unlock(&m->lock);
    return n;
}

/* "NAME":[{"task","host","why","at_step"}] of the members in state s (under lock). */
static void members_json(const psg_membership_t *m, psg_strbuf_t *b, const char *name, state_t s) {
    psg_strbuf_printf(b, "\"%s\":[", name);
    for (int i = 0, k = 0; i < m->n; i++) {
        const member_t *x = &m->m[i];
        if (x->state != s) continue;
        psg_strbuf_str(b, k++ ? ",{\"task\":" : "{\"task\":");
        psg_strbuf_json_str(b, x->tag);
        psg_strbuf_str(b, ",\"host\":");
        psg_strbuf_json_str(b, x->host);
        psg_strbuf_str(b, ",\"why\":");
        psg_strbuf_json_str(b, x->why);
        psg_strbuf_printf(b, ",\"at_step\":%lld}", (long long)x->at_step);
    }
    psg_strbuf_str(b, "],");
}

void psg_membership_json(psg_membership_t *m, char *buf, size_t size) {
    psg_strbuf_t b = {0};
    pthread_mutex_lock(&m->lock);
    members_json(m, &b, "workers_lost", LOST);
    members_json(m, &b, "workers_left", LEFT);
    psg_strbuf_printf(&b, "\"workers_joined\":%d,\"membership_changes\":%d,", m->joined,
                      m->changes);
    pthread_mutex_unlock(&m->lock);
    snprintf(buf, size, "%s", b.oom || !b.s ? "" : b.s);
    free(b.s);
}
