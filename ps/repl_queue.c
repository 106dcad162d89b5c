/* The backup's queue of forwards and the thread that applies them (ps/repl_queue.h): a
 * list under one lock, a condition for the thread and one for those who wait for it. Not
 * the apply itself (ps/replicate.c). */
#include "ps/repl_queue.h"

#include "psgraph/error.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct item {
    struct item *next;
    psg_msg_t *forward;
} item_t;

struct psg_repl_queue {
    psg_repl_apply_fn apply;
    void *ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work; /* the thread waits for a forward or the stop */
    pthread_cond_t done; /* drains and ready wait for the thread */
    item_t *head, **tail;
    /* counts: pushed - applied are queued and not yet applied (the one being applied too);
     * a drain waits for applied to reach pushed */
    uint64_t pushed, applied;
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

static void *apply_loop(void *arg) {
    psg_repl_queue_t *q = arg;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->work, &q->lock);
        if (!q->head) break; /* stopped, all applied */
        item_t *it = q->head;
        q->head = it->next;
        if (!q->head) q->tail = &q->head;
        pthread_mutex_unlock(&q->lock);
        int rc = q->apply(q->ctx, it->forward);
        pthread_mutex_lock(&q->lock);
        if (rc < 0) fail_locked(q);
        q->applied++;
        pthread_cond_broadcast(&q->done);
        pthread_mutex_unlock(&q->lock);
        psg_msg_destroy(&it->forward);
        free(it);
        psg_error_clear();
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

psg_repl_queue_t *psg_repl_queue_new(psg_repl_apply_fn apply, void *ctx) {
    psg_repl_queue_t *q = calloc(1, sizeof *q);
    if (!q) {
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    q->apply = apply;
    q->ctx = ctx;
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
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

int psg_repl_queue_ready(psg_repl_queue_t *q, int max_pending) {
    pthread_mutex_lock(&q->lock);
    while (q->pushed - q->applied >= (uint64_t)max_pending && !q->failed)
        pthread_cond_wait(&q->done, &q->lock);
    int rc = 0;
    if (q->failed) {
        q->failed = false;
        rc = psg_error_set_code(q->err_code, "%s", q->err);
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void psg_repl_queue_push(psg_repl_queue_t *q, psg_msg_t **forward) {
    item_t *it = calloc(1, sizeof *it);
    pthread_mutex_lock(&q->lock);
    if (it) {
        it->forward = *forward;
        *forward = NULL;
        *q->tail = it;
        q->tail = &it->next;
        q->pushed++;
        pthread_cond_signal(&q->work);
    }
    pthread_mutex_unlock(&q->lock);
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

void psg_repl_queue_drain(psg_repl_queue_t *q) {
    pthread_mutex_lock(&q->lock);
    uint64_t until = q->pushed;
    while (q->applied < until) pthread_cond_wait(&q->done, &q->lock);
    pthread_mutex_unlock(&q->lock);
}
