/* The rendezvous: a hash map from (step, key) to a sent tensor or a waiting
 * receiver, a timer thread (started on the first timed wait) that fails
 * receivers past their deadline, and aborts per step or for good.
 * Not the wire: remote sends arrive here through psg_rendezvous_send. */
#include "psgraph/error.h"
#include "psgraph/rendezvous.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NUM_BUCKETS 256
#define ENDED_ABORTS 64 /* aborted steps remembered after their cleanup */
/* Aborted steps remembered before it: a peer whose steps fail and that never cleans them
 * up (a hostile one, or one that died) made a record per step, for good; past this many
 * the oldest goes to the cleaned-up ring as if cleaned up. */
#define MAX_ABORTS 256

typedef struct entry {
    int64_t step;
    char *key;
    psg_tensor_t *value;         /* a sent tensor, or NULL for a waiter */
    psg_rendezvous_done_fn done; /* a waiter's callback */
    void *arg;
    int64_t deadline_ns; /* a waiter's deadline; 0: none */
    int64_t timeout_ms;  /* what the deadline came from, for the message */
    struct entry *next;
} entry_t;

typedef struct aborted_step {
    int64_t step;
    char *why;
    psg_err_code_t code; /* what its waiters fail with: PSG_ERR_ABORTED, or the cause's code */
    struct aborted_step *next;
} aborted_step_t;

struct psg_rendezvous {
    pthread_mutex_t lock;
    pthread_cond_t timer_cond; /* on CLOCK_MONOTONIC */
    entry_t *buckets[NUM_BUCKETS];
    int num_entries;
    int num_timed; /* waiters with a deadline */
    int64_t default_timeout_ms;
    char *aborted;                 /* reason of a global abort */
    aborted_step_t *aborted_steps; /* newest first */
    int num_aborted;
    /* aborted steps already cleaned up, newest last in a ring: a late pull of one (a peer
     * that was stopped or slow runs the step after this task gave it up) fails at once
     * instead of waiting out its timeout while holding the peer's graph */
    aborted_step_t ended[ENDED_ABORTS];
    int ended_next;
    pthread_t timer;
    bool timer_started, stopping;
    /* when the timer thread wakes by itself: INT64_MAX while it waits for a signal, 0 while
     * it is awake (it scans again before it sleeps). A waiter due earlier signals it; the
     * others do not, so that a Recv does not cost a context switch and a scan */
    int64_t timer_wake_ns;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static size_t bucket_of(int64_t step, const char *key) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)step;
    for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return (size_t)(h % NUM_BUCKETS);
}

psg_rendezvous_t *psg_rendezvous_new(int64_t default_timeout_ms) {
    psg_rendezvous_t *rv = calloc(1, sizeof *rv);
    if (!rv) {
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&rv->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rv->timer_cond, &ca);
    pthread_condattr_destroy(&ca);
    rv->default_timeout_ms = default_timeout_ms;
    return rv;
}

int64_t psg_rendezvous_default_timeout_ms(const psg_rendezvous_t *rv) {
    return rv->default_timeout_ms;
}

/* Unlinks and returns the entry (step, key), or NULL. Lock held. */
static entry_t *take_locked(psg_rendezvous_t *rv, int64_t step, const char *key) {
    entry_t **pp = &rv->buckets[bucket_of(step, key)];
    for (; *pp; pp = &(*pp)->next) {
        entry_t *e = *pp;
        if (e->step == step && !strcmp(e->key, key)) {
            *pp = e->next;
            e->next = NULL;
            rv->num_entries--;
            if (!e->value && e->deadline_ns) rv->num_timed--;
            return e;
        }
    }
    return NULL;
}

static void insert_locked(psg_rendezvous_t *rv, entry_t *e) {
    size_t b = bucket_of(e->step, e->key);
    e->next = rv->buckets[b];
    rv->buckets[b] = e;
    rv->num_entries++;
    if (!e->value && e->deadline_ns) rv->num_timed++;
}

/* Moves every entry for which pick() is true onto *out. Lock held. */
static void take_all_locked(psg_rendezvous_t *rv, bool (*pick)(const entry_t *, const void *),
                            const void *ctx, entry_t **out) {
    for (int b = 0; b < NUM_BUCKETS; b++) {
        entry_t **pp = &rv->buckets[b];
        while (*pp) {
            entry_t *e = *pp;
            if (!pick(e, ctx)) {
                pp = &e->next;
                continue;
            }
            *pp = e->next;
            rv->num_entries--;
            if (!e->value && e->deadline_ns) rv->num_timed--;
            e->next = *out;
            *out = e;
        }
    }
}

static void free_entry(entry_t *e) {
    psg_tensor_destroy(&e->value);
    free(e->key);
    free(e);
}

/* Fails each waiter of the list with "<what> ... key" and frees the list.
 * Called without the lock. */
static void fail_all(entry_t *list, psg_err_code_t code, const char *what) {
    while (list) {
        entry_t *e = list;
        list = e->next;
        if (!e->value) {
            char msg[1024];
            snprintf(msg, sizeof msg,
                     "rendezvous: %s while waiting for key '%s' (step %" PRId64 ")", what, e->key,
                     e->step);
            e->done(e->arg, NULL, code, msg);
        }
        free_entry(e);
    }
}

/* Why step was aborted (NULL: it was not), and in *code what its waiters fail with. */
static const char *step_abort_code_locked(psg_rendezvous_t *rv, int64_t step,
                                          psg_err_code_t *code) {
    *code = PSG_ERR_ABORTED;
    if (rv->aborted) return rv->aborted;
    for (aborted_step_t *a = rv->aborted_steps; a; a = a->next)
        if (a->step == step) return *code = a->code, a->why;
    for (int i = 0; i < ENDED_ABORTS; i++)
        if (rv->ended[i].why && rv->ended[i].step == step)
            return *code = rv->ended[i].code, rv->ended[i].why;
    return NULL;
}

static const char *step_abort_locked(psg_rendezvous_t *rv, int64_t step) {
    psg_err_code_t code;
    return step_abort_code_locked(rv, step, &code);
}

static void *timer_main(void *arg) {
    psg_rendezvous_t *rv = arg;
    pthread_mutex_lock(&rv->lock);
    while (!rv->stopping) {
        int64_t now = now_ns(), next = 0;
        entry_t *expired = NULL;
        for (int b = 0; b < NUM_BUCKETS && rv->num_timed; b++) {
            entry_t **pp = &rv->buckets[b];
            while (*pp) {
                entry_t *e = *pp;
                if (e->value || !e->deadline_ns || e->deadline_ns > now) {
                    if (!e->value && e->deadline_ns && (!next || e->deadline_ns < next))
                        next = e->deadline_ns;
                    pp = &e->next;
                    continue;
                }
                *pp = e->next;
                rv->num_entries--;
                rv->num_timed--;
                e->next = expired;
                expired = e;
            }
        }
        if (expired) {
            pthread_mutex_unlock(&rv->lock);
            while (expired) {
                entry_t *e = expired;
                expired = e->next;
                char msg[1024];
                snprintf(msg, sizeof msg,
                         "rendezvous: timed out after %" PRId64
                         " ms waiting for key '%s' (step %" PRId64 ")",
                         e->timeout_ms, e->key, e->step);
                e->done(e->arg, NULL, PSG_ERR_TIMEOUT, msg);
                free_entry(e);
            }
            pthread_mutex_lock(&rv->lock);
            continue;
        }
        rv->timer_wake_ns = next ? next : INT64_MAX;
        if (!next) {
            pthread_cond_wait(&rv->timer_cond, &rv->lock);
        } else {
            struct timespec ts = {(time_t)(next / 1000000000), (long)(next % 1000000000)};
            pthread_cond_timedwait(&rv->timer_cond, &rv->lock, &ts);
        }
        rv->timer_wake_ns = 0;
    }
    pthread_mutex_unlock(&rv->lock);
    return NULL;
}

static entry_t *new_entry(int64_t step, const char *key) {
    entry_t *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->step = step;
    e->key = strdup(key);
    if (!e->key) {
        free(e);
        return NULL;
    }
    return e;
}

int psg_rendezvous_send(psg_rendezvous_t *rv, int64_t step, const char *key, psg_tensor_t **t) {
    psg_tensor_t *value = *t;
    *t = NULL;
    if (!value) return psg_error_set("rendezvous: sending NULL for key '%s'", key);
    pthread_mutex_lock(&rv->lock);
    psg_err_code_t code;
    const char *why = step_abort_code_locked(rv, step, &code);
    if (why) {
        int rc = psg_error_set_code(
            code, "rendezvous: aborted (%s) while sending key '%s' (step %" PRId64 ")", why, key,
            step);
        pthread_mutex_unlock(&rv->lock);
        psg_tensor_destroy(&value);
        return rc;
    }
    entry_t *e = take_locked(rv, step, key);
    if (e && e->value) {
        insert_locked(rv, e); /* put the first one back */
        pthread_mutex_unlock(&rv->lock);
        psg_tensor_destroy(&value);
        return psg_error_set("rendezvous: key '%s' sent twice in step %" PRId64, key, step);
    }
    if (e) {
        pthread_mutex_unlock(&rv->lock);
        e->done(e->arg, value, PSG_ERR_UNKNOWN, NULL);
        free_entry(e);
        return 0;
    }
    e = new_entry(step, key);
    if (!e) {
        pthread_mutex_unlock(&rv->lock);
        psg_tensor_destroy(&value);
        return psg_error_set("out of memory");
    }
    e->value = value;
    insert_locked(rv, e);
    pthread_mutex_unlock(&rv->lock);
    return 0;
}

void psg_rendezvous_recv_async(psg_rendezvous_t *rv, int64_t step, const char *key,
                               int64_t timeout_ms, psg_rendezvous_done_fn done, void *arg) {
    char msg[1024];
    pthread_mutex_lock(&rv->lock);
    psg_err_code_t code;
    const char *why = step_abort_code_locked(rv, step, &code);
    if (why) {
        snprintf(msg, sizeof msg,
                 "rendezvous: aborted (%s) while waiting for key '%s' (step %" PRId64 ")", why, key,
                 step);
        pthread_mutex_unlock(&rv->lock);
        done(arg, NULL, code, msg);
        return;
    }
    entry_t *e = take_locked(rv, step, key);
    if (e && e->value) {
        pthread_mutex_unlock(&rv->lock);
        psg_tensor_t *t = e->value;
        e->value = NULL;
        free_entry(e);
        done(arg, t, PSG_ERR_UNKNOWN, NULL);
        return;
    }
    if (e) {
        insert_locked(rv, e);
        pthread_mutex_unlock(&rv->lock);
        snprintf(msg, sizeof msg, "rendezvous: key '%s' received twice in step %" PRId64, key,
                 step);
        done(arg, NULL, PSG_ERR_BAD_REQUEST, msg);
        return;
    }
    e = new_entry(step, key);
    if (!e) {
        pthread_mutex_unlock(&rv->lock);
        done(arg, NULL, PSG_ERR_NO_MEMORY, "rendezvous: out of memory");
        return;
    }
    e->done = done;
    e->arg = arg;
    if (timeout_ms > 0) {
        e->timeout_ms = timeout_ms;
        e->deadline_ns = now_ns() + timeout_ms * 1000000;
        if (!rv->timer_started) {
            if (pthread_create(&rv->timer, NULL, timer_main, rv) != 0) {
                pthread_mutex_unlock(&rv->lock);
                free_entry(e);
                done(arg, NULL, PSG_ERR_UNKNOWN, "rendezvous: cannot start the timer thread");
                return;
            }
            rv->timer_started = true;
        }
    }
    insert_locked(rv, e);
    if (e->deadline_ns && e->deadline_ns < rv->timer_wake_ns) pthread_cond_signal(&rv->timer_cond);
    pthread_mutex_unlock(&rv->lock);
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    psg_tensor_t *t;
    psg_err_code_t code;
    char error[1024];
} sync_wait_t;

static void sync_done(void *arg, psg_tensor_t *t, psg_err_code_t code, const char *error) {
    sync_wait_t *w = arg;
    pthread_mutex_lock(&w->lock);
    w->t = t;
    w->code = code;
    if (error) snprintf(w->error, sizeof w->error, "%s", error);
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

int psg_rendezvous_recv(psg_rendezvous_t *rv, int64_t step, const char *key, int64_t timeout_ms,
                        psg_tensor_t **out) {
    sync_wait_t w = {.done = false};
    *out = NULL;
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    psg_rendezvous_recv_async(rv, step, key, timeout_ms, sync_done, &w);
    pthread_mutex_lock(&w.lock);
    while (!w.done) pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    if (!w.t) return psg_error_set_code(w.code, "%s", w.error);
    *out = w.t;
    return 0;
}

static bool pick_any(const entry_t *e, const void *ctx) {
    (void)e;
    (void)ctx;
    return true;
}

static bool pick_step(const entry_t *e, const void *ctx) {
    return e->step == *(const int64_t *)ctx;
}

void psg_rendezvous_abort(psg_rendezvous_t *rv, const char *why) {
    entry_t *list = NULL;
    pthread_mutex_lock(&rv->lock);
    if (!rv->aborted) rv->aborted = strdup(why && *why ? why : "aborted");
    take_all_locked(rv, pick_any, NULL, &list);
    char what[600];
    snprintf(what, sizeof what, "aborted (%s)", rv->aborted ? rv->aborted : "aborted");
    pthread_mutex_unlock(&rv->lock);
    fail_all(list, PSG_ERR_ABORTED, what);
}

/* Moves a (off the aborted list) into the ring of cleaned-up steps, its oldest out. */
static void end_abort_locked(psg_rendezvous_t *rv, aborted_step_t *a) {
    aborted_step_t *slot = &rv->ended[rv->ended_next];
    rv->ended_next = (rv->ended_next + 1) % ENDED_ABORTS;
    free(slot->why);
    slot->step = a->step;
    slot->code = a->code;
    slot->why = a->why; /* moved */
    free(a);
    rv->num_aborted--;
}

void psg_rendezvous_abort_step(psg_rendezvous_t *rv, int64_t step, const char *why) {
    psg_rendezvous_abort_step_code(rv, step, PSG_ERR_ABORTED, why);
}

void psg_rendezvous_abort_step_code(psg_rendezvous_t *rv, int64_t step, psg_err_code_t code,
                                    const char *why) {
    entry_t *list = NULL;
    char what[600];
    snprintf(what, sizeof what, "aborted (%s)", why && *why ? why : "aborted");
    pthread_mutex_lock(&rv->lock);
    if (!step_abort_locked(rv, step)) {
        aborted_step_t *a = calloc(1, sizeof *a);
        if (a) {
            a->step = step;
            a->code = code;
            a->why = strdup(why && *why ? why : "aborted");
            a->next = rv->aborted_steps;
            rv->aborted_steps = a;
            rv->num_aborted++;
        }
        if (rv->num_aborted > MAX_ABORTS) {
            aborted_step_t **oldest = &rv->aborted_steps;
            while ((*oldest)->next) oldest = &(*oldest)->next;
            aborted_step_t *o = *oldest;
            *oldest = NULL;
            end_abort_locked(rv, o);
        }
    }
    psg_err_code_t kept;
    step_abort_code_locked(rv, step, &kept); /* the first abort's code, as its why */
    take_all_locked(rv, pick_step, &step, &list);
    pthread_mutex_unlock(&rv->lock);
    fail_all(list, kept, what);
}

void psg_rendezvous_cleanup_step(psg_rendezvous_t *rv, int64_t step) {
    entry_t *list = NULL;
    pthread_mutex_lock(&rv->lock);
    take_all_locked(rv, pick_step, &step, &list);
    for (aborted_step_t **pp = &rv->aborted_steps; *pp;) {
        aborted_step_t *a = *pp;
        if (a->step != step) {
            pp = &a->next;
            continue;
        }
        *pp = a->next;
        end_abort_locked(rv, a);
    }
    pthread_mutex_unlock(&rv->lock);
    fail_all(list, PSG_ERR_ABORTED, "step ended");
}

int psg_rendezvous_num_pending(psg_rendezvous_t *rv) {
    pthread_mutex_lock(&rv->lock);
    int n = rv->num_entries;
    pthread_mutex_unlock(&rv->lock);
    return n;
}

void psg_rendezvous_destroy(psg_rendezvous_t **rvp) {
    if (!rvp || !*rvp) return;
    psg_rendezvous_t *rv = *rvp;
    *rvp = NULL;
    entry_t *list = NULL;
    pthread_mutex_lock(&rv->lock);
    rv->stopping = true;
    take_all_locked(rv, pick_any, NULL, &list);
    pthread_cond_signal(&rv->timer_cond);
    pthread_mutex_unlock(&rv->lock);
    if (rv->timer_started) pthread_join(rv->timer, NULL);
    fail_all(list, PSG_ERR_STOPPING, "rendezvous destroyed");
    for (int i = 0; i < ENDED_ABORTS; i++) free(rv->ended[i].why);
    while (rv->aborted_steps) {
        aborted_step_t *a = rv->aborted_steps;
        rv->aborted_steps = a->next;
        free(a->why);
        free(a);
    }
    free(rv->aborted);
    pthread_cond_destroy(&rv->timer_cond);
    pthread_mutex_destroy(&rv->lock);
    free(rv);
}

/* ---- keys ---- */

char *psg_rendezvous_key(const char *src_device, uint64_t src_incarnation, const char *dst_device,
                         const char *edge_name, char *buf, size_t size) {
    snprintf(buf, size, "%s;%016" PRIx64 ";%s;%s;0:0", src_device, src_incarnation, dst_device,
             edge_name);
    return buf;
}

int psg_rendezvous_key_parse(const char *key, psg_rendezvous_key_t *out) {
    const char *part[5];
    size_t len[5];
    const char *p = key;
    size_t total = strnlen(key, PSG_RENDEZVOUS_KEY_MAX);
    if (total >= PSG_RENDEZVOUS_KEY_MAX)
        return psg_error_set("malformed rendezvous key '%.60s...': longer than %d bytes", key,
                             PSG_RENDEZVOUS_KEY_MAX - 1);
    for (int i = 0; i < 5; i++) {
        const char *semi = strchr(p, ';');
        if ((i < 4) != (semi != NULL))
            return psg_error_set("malformed rendezvous key '%s': expected 5 parts separated by ';'",
                                 key);
        part[i] = p;
        len[i] = semi ? (size_t)(semi - p) : strlen(p);
        p = semi ? semi + 1 : p + len[i];
    }
    if (len[0] == 0 || len[2] == 0 || len[3] == 0)
        return psg_error_set("malformed rendezvous key '%s': empty device or edge name", key);
    if (len[1] != 16)
        return psg_error_set("malformed rendezvous key '%s': incarnation is not 16 hex digits",
                             key);
    uint64_t inc = 0;
    for (size_t i = 0; i < 16; i++) {
        char c = part[1][i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return psg_error_set("malformed rendezvous key '%s': incarnation is not 16 hex digits",
                                 key);
        inc = inc << 4 | (uint64_t)d;
    }
    if (len[4] != 3 || memcmp(part[4], "0:0", 3))
        return psg_error_set("malformed rendezvous key '%s': frame is not '0:0'", key);
    memcpy(out->src_device, part[0], len[0]);
    out->src_device[len[0]] = '\0';
    memcpy(out->dst_device, part[2], len[2]);
    out->dst_device[len[2]] = '\0';
    memcpy(out->edge_name, part[3], len[3]);
    out->edge_name[len[3]] = '\0';
    out->src_incarnation = inc;
    return 0;
}
