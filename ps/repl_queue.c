/* The backup's log of forwards and the thread that applies it (ps/repl_queue.h): a list
 * under one lock, a condition for the thread and one for those who wait for it. Not the
 * apply itself (ps/replicate.c). */
#include "ps/repl_queue.h"

#include "psgraph/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct item {
    struct item *next;
    psg_msg_t *forward;
    uint64_t seq; /* its place among the pushed (1, 2, ...) */
    size_t bytes; /* its tensors' */
    int updates;
} item_t;

struct psg_repl_queue {
    psg_repl_apply_fn apply;
    void *ctx;
    int max_held;
    size_t max_bytes;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work; /* the thread waits for a drain, the bounds passed or the stop */
    pthread_cond_t done; /* drains wait for the thread */
    item_t *head, **tail;
    int n_held;        /* in the list */
    size_t held_bytes; /* of those */
    bool busy;         /* one taken off the list is being applied */
    /* the seq of the last pushed; the copies are those of every forward up to `applied`
     * (applied, or dropped under a snapshot applied since); a drain wants up to `want` */
    uint64_t pushed, applied, want;
    uint64_t dropped_updates;
    bool stop;
    bool failed; /* a forward failed to apply, not said to a primary yet */
    psg_err_code_t err_code;
    char err[512];
};

/* The first failure since the last one said (the error set on this thread). */
static void fail_locked(psg_repl_queue_t *q) {
    if (q->failed) return;
    q->failed = true;
    q->err_code = psg_error_code();
    snprintf(q->err, sizeof q->err, "%s", psg_error_message());
}

static void item_free(item_t *it) {
    if (!it) return;
    psg_msg_destroy(&it->forward);
    free(it);
}

/* Whether the thread has work: a drain waits, or more is held than the bounds allow. */
static bool due_locked(const psg_repl_queue_t *q) {
    return q->head &&
           (q->want > q->applied || q->n_held > q->max_held || q->held_bytes > q->max_bytes);
}

static void *apply_loop(void *arg) {
    psg_repl_queue_t *q = arg;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (!q->stop && !due_locked(q)) pthread_cond_wait(&q->work, &q->lock);
        if (q->stop) break;
        item_t *it = q->head;
        q->head = it->next;
        if (!q->head) q->tail = &q->head;
        q->n_held--;
        q->held_bytes -= it->bytes;
        q->busy = true;
        pthread_mutex_unlock(&q->lock);
        int rc = q->apply(q->ctx, it->forward);
        pthread_mutex_lock(&q->lock);
        if (rc < 0) fail_locked(q);
        q->busy = false;
        q->applied = it->seq;
        pthread_cond_broadcast(&q->done);
        pthread_mutex_unlock(&q->lock);
        item_free(it);
        psg_error_clear();
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

psg_repl_queue_t *psg_repl_queue_new(psg_repl_apply_fn apply, void *ctx, int max_held,
                                     size_t max_bytes) {
    psg_repl_queue_t *q = calloc(1, sizeof *q);
    if (!q) {
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    q->apply = apply;
    q->ctx = ctx;
    q->max_held = max_held;
    q->max_bytes = max_bytes;
    q->tail = &q->head;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->done, NULL);
    if (pthread_create(&q->thread, NULL, apply_loop, q) != 0) {
        psg_error_set("cannot start the thread that applies a backup's forwards");
        pthread_cond_destroy(&q->work);
        pthread_cond_destroy(&q->done);
        pthread_mutex_destroy(&q->lock);
        free(q);
        return NULL;
    }
    return q;
}

void psg_repl_queue_destroy(psg_repl_queue_t **qp) {
    if (!qp || !*qp) return;
    psg_repl_queue_t *q = *qp;
    *qp = NULL;
    pthread_mutex_lock(&q->lock);
    q->stop = true;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->lock);
    pthread_join(q->thread, NULL);
    while (q->head) {
        item_t *it = q->head;
        q->head = it->next;
        item_free(it);
    }
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

int psg_repl_queue_ready(psg_repl_queue_t *q) {
    pthread_mutex_lock(&q->lock);
    int rc = 0;
    if (q->failed) {
        q->failed = false;
        rc = psg_error_set_code(q->err_code, "%s", q->err);
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void psg_repl_queue_push(psg_repl_queue_t *q, psg_msg_t **forward, bool snapshot, int updates) {
    item_t *it = calloc(1, sizeof *it), *dropped = NULL;
    pthread_mutex_lock(&q->lock);
    if (it) {
        it->forward = *forward;
        *forward = NULL;
        it->updates = updates;
        for (int i = 0; i < it->forward->ntensors; i++)
            it->bytes += psg_tensor_nbytes(it->forward->tensors[i]);
        if (snapshot) { /* its values hold what those before it would write */
            dropped = q->head;
            for (item_t *d = dropped; d; d = d->next) q->dropped_updates += (uint64_t)d->updates;
            q->head = NULL;
            q->tail = &q->head;
            q->n_held = 0;
            q->held_bytes = 0;
        }
        it->seq = ++q->pushed;
        *q->tail = it;
        q->tail = &it->next;
        q->n_held++;
        q->held_bytes += it->bytes;
        if (due_locked(q)) pthread_cond_signal(&q->work);
    }
    pthread_mutex_unlock(&q->lock);
    while (dropped) {
        item_t *next = dropped->next;
        item_free(dropped);
        dropped = next;
    }
    if (it) return;
    /* no memory for the list: applied here, in order once those before it are */
    psg_repl_queue_drain(q);
    if (q->apply(q->ctx, *forward) < 0) {
        pthread_mutex_lock(&q->lock);
        fail_locked(q);
        pthread_mutex_unlock(&q->lock);
    }
    psg_msg_destroy(forward);
}

int psg_repl_queue_drain(psg_repl_queue_t *q) {
    pthread_mutex_lock(&q->lock);
    uint64_t until = q->pushed;
    int held = q->n_held + (q->busy ? 1 : 0);
    if (until > q->want) q->want = until;
    if (q->applied < until) pthread_cond_signal(&q->work);
    while (q->applied < until) pthread_cond_wait(&q->done, &q->lock);
    pthread_mutex_unlock(&q->lock);
    return held;
}

void psg_repl_queue_stats(psg_repl_queue_t *q, uint64_t *held, uint64_t *dropped_updates) {
    pthread_mutex_lock(&q->lock);
    *held = (uint64_t)q->n_held + (q->busy ? 1u : 0u);
    *dropped_updates = q->dropped_updates;
    pthread_mutex_unlock(&q->lock);
}
