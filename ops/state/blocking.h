/* A blocking call over an asynchronous one (an accumulator's take, a token
 * queue's dequeue): the caller waits on a psg_blocking_t that the async
 * callback finishes once, after storing its results beside it. Header-only. */
#ifndef PSGRAPH_OPS_STATE_BLOCKING_H
#define PSGRAPH_OPS_STATE_BLOCKING_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    char error[512]; /* the callback's error; "" for none */
} psg_blocking_t;

static inline void psg_blocking_init(psg_blocking_t *b) {
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    b->done = false;
    b->error[0] = 0;
}

/* From the callback, its results stored: records error (NULL: none) and wakes
 * the waiter (the lock orders the results before the waiter's reads). */
static inline void psg_blocking_finish(psg_blocking_t *b, const char *error) {
    pthread_mutex_lock(&b->lock);
    if (error) snprintf(b->error, sizeof b->error, "%s", error);
    b->done = true;
    pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* Waits for psg_blocking_finish, then releases b's lock and condition. */
static inline void psg_blocking_wait(psg_blocking_t *b) {
    pthread_mutex_lock(&b->lock);
    while (!b->done) pthread_cond_wait(&b->cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
}

#endif
