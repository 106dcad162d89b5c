/* A mailbox: the tensors one peer hands another, each for a step, taken once by the owner
 * in step order (ring all-reduce's chunks, sync/strategy_allreduce.c: worker i puts a chunk
 * into worker i + 1's mailbox of a phase, worker i + 1 takes it). A put for a step that
 * is not taken yet is kept (a fast sender may be a step ahead); a take waits, holding no
 * thread, for its step's put, with a deadline on the task's timer, as a token dequeue.
 * Not the ops (ops/sync.c) and not the strategy. */
#include "ops/state/handle.h"
#include "ops/state/timer.h"
#include "psgraph/error.h"
#include "ops/state/sync_resources.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct letter {
    int64_t step;
    psg_tensor_t *value;
    struct letter *next;
} letter_t;

#define MAILBOX_MAGIC 0x786f626du /* "mbox" */

struct psg_mailbox {
    uint32_t magic; /* first: tells a handle to a mailbox from others */
    pthread_mutex_t lock;
    char *name;
    psg_timer_t *timer;
    letter_t *letters; /* in arrival order */
    int64_t taken;     /* the last step taken; -1 before the first */
    char *error;       /* closed: why; later puts are dropped, later takes fail with it */
    /* the pending take */
    bool waiting;
    int64_t want, timeout_ms;
    uint64_t timer_id;
    char from[128];
    psg_mailbox_fn done;
    void *arg;
};

static void *create_mailbox(void *ctx) {
    const void *const *c = ctx;
    psg_mailbox_t *m = calloc(1, sizeof *m);
    if (!m || !(m->name = strdup(c[0]))) {
        free(m);
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->magic = MAILBOX_MAGIC;
    m->timer = (psg_timer_t *)c[1];
    m->taken = -1;
    return m;
}

/* Detaches the pending take, its timer cancelled by the caller after unlocking. */
typedef struct {
    psg_mailbox_fn done;
    void *arg;
    uint64_t timer_id;
} pending_t;

static bool detach_locked(psg_mailbox_t *m, pending_t *p) {
    if (!m->waiting) return false;
    *p = (pending_t){m->done, m->arg, m->timer_id};
    m->waiting = false;
    return true;
}

static void finish(psg_mailbox_t *m, pending_t *p, psg_tensor_t *value, const char *error) {
    psg_timer_cancel(m->timer, p->timer_id, true);
    p->done(p->arg, value, error);
}

static void free_letters(letter_t *l) {
    while (l) {
        letter_t *next = l->next;
        psg_tensor_destroy(&l->value);
        free(l);
        l = next;
    }
}

static void destroy_mailbox(void *obj) {
    psg_mailbox_t *m = obj;
    char msg[512];
    snprintf(msg, sizeof msg, "mailbox '%s' destroyed", m->name);
    psg_mailbox_close(m, msg);
    pthread_mutex_destroy(&m->lock);
    m->magic = 0;
    free_letters(m->letters);
    free(m->error);
    free(m->name);
    free(m);
}

psg_mailbox_t *psg_mailbox_get(psg_resource_mgr_t *rm, const char *name) {
    psg_timer_t *timer = psg_timer_of(rm);
    if (!timer) return NULL;
    const void *c[2] = {name, timer};
    return psg_resource_lookup_or_create(rm, name, "mailbox", create_mailbox, (void *)c,
                                         destroy_mailbox);
}

PSG_PS_HANDLE_ACCESSORS(psg_mailbox_t, psg_mailbox, MAILBOX_MAGIC, "a mailbox")

/* The letter for step, removed from the list; NULL when none. */
static letter_t *remove_letter_locked(psg_mailbox_t *m, int64_t step) {
    for (letter_t **p = &m->letters; *p; p = &(*p)->next)
        if ((*p)->step == step) {
            letter_t *l = *p;
            *p = l->next;
            l->next = NULL;
            return l;
        }
    return NULL;
}

int psg_mailbox_put(psg_mailbox_t *m, int64_t step, psg_tensor_t *value) {
    letter_t *l = calloc(1, sizeof *l);
    if (!l) return psg_error_set("mailbox '%s': out of memory", m->name);
    l->step = step;
    l->value = psg_tensor_ref(value);
    pending_t p;
    bool served = false;
    pthread_mutex_lock(&m->lock);
    if (m->error || step <= m->taken) { /* closed, or a step already taken: dropped */
        pthread_mutex_unlock(&m->lock);
        free_letters(l);
        return 0;
    }
    for (letter_t *o = m->letters; o; o = o->next)
        if (o->step == step) {
            pthread_mutex_unlock(&m->lock);
            free_letters(l);
            return psg_error_set("mailbox '%s': a second put for step %lld", m->name,
                                 (long long)step);
        }
    if (m->waiting && m->want == step) {
        served = detach_locked(m, &p);
        m->taken = step;
    } else {
        letter_t **t = &m->letters;
        while (*t) t = &(*t)->next;
        *t = l;
    }
    pthread_mutex_unlock(&m->lock);
    if (served) {
        finish(m, &p, l->value, NULL);
        free_letters(l);
    }
    return 0;
}

static void take_timed_out(void *arg, uint64_t id) {
    psg_mailbox_t *m = arg;
    pthread_mutex_lock(&m->lock);
    if (!m->waiting || m->timer_id != id) {
        pthread_mutex_unlock(&m->lock);
        return;
    }
    m->waiting = false;
    char msg[640];
    snprintf(msg, sizeof msg,
             "mailbox '%s': %s sent nothing for step %lld within %lld ms (the last step taken "
             "here: %lld; that worker is dead, or slower than the timeout)",
             m->name, m->from[0] ? m->from : "the sender", (long long)m->want,
             (long long)m->timeout_ms, (long long)m->taken);
    psg_mailbox_fn done = m->done;
    void *darg = m->arg;
    pthread_mutex_unlock(&m->lock);
    done(darg, NULL, msg);
}

void psg_mailbox_take_async(psg_mailbox_t *m, int64_t step, const char *from, int64_t timeout_ms,
                            psg_mailbox_fn done, void *arg) {
    char msg[640] = "";
    letter_t *l = NULL;
    pthread_mutex_lock(&m->lock);
    if (m->error)
        snprintf(msg, sizeof msg, "mailbox '%s' is closed: %s", m->name, m->error);
    else if (m->waiting)
        snprintf(msg, sizeof msg, "mailbox '%s': a take is already waiting", m->name);
    else if (step <= m->taken)
        snprintf(msg, sizeof msg, "mailbox '%s': step %lld was taken already", m->name,
                 (long long)step);
    else if ((l = remove_letter_locked(m, step)))
        m->taken = step;
    if (msg[0] || l) {
        /* the letters of older steps (never taken) can no longer be */
        for (letter_t **p = &m->letters; l && *p;) {
            letter_t *o = *p;
            if (o->step >= step) {
                p = &o->next;
                continue;
            }
            *p = o->next;
            o->next = NULL;
            free_letters(o);
        }
        pthread_mutex_unlock(&m->lock);
        done(arg, l ? l->value : NULL, msg[0] ? msg : NULL);
        free_letters(l);
        return;
    }
    m->waiting = true;
    m->want = step;
    m->done = done;
    m->arg = arg;
    snprintf(m->from, sizeof m->from, "%s", from ? from : "");
    m->timeout_ms = timeout_ms = psg_timer_wait_ms(m->timer, timeout_ms); /* always a deadline */
    m->timer_id = psg_timer_add(m->timer, timeout_ms, take_timed_out, m);
    if (m->timer_id == 0) {
        m->waiting = false;
        snprintf(msg, sizeof msg, "mailbox '%s': %s", m->name, psg_error_message());
    }
    pthread_mutex_unlock(&m->lock);
    if (msg[0]) done(arg, NULL, msg);
}

void psg_mailbox_close(psg_mailbox_t *m, const char *error) {
    pending_t p;
    pthread_mutex_lock(&m->lock);
    if (!m->error) m->error = strdup(error ? error : "closed");
    bool pending = detach_locked(m, &p);
    letter_t *l = m->letters;
    m->letters = NULL;
    char msg[640];
    snprintf(msg, sizeof msg, "mailbox '%s' is closed: %s", m->name,
             m->error ? m->error : "out of memory");
    pthread_mutex_unlock(&m->lock);
    free_letters(l);
    if (pending) finish(m, &p, NULL, msg);
}

int psg_mailbox_size(psg_mailbox_t *m) {
    pthread_mutex_lock(&m->lock);
    int n = 0;
    for (letter_t *l = m->letters; l; l = l->next) n++;
    pthread_mutex_unlock(&m->lock);
    return n;
}
