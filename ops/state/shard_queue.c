/* The data shards of an elastic job handed out by the ps (ops/state/shard_queue.h). */
#include "ops/state/shard_queue.h"
#include "ops/state/handle.h"
#include "psgraph/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHARD_QUEUE_MAGIC 0x64726873u /* "shrd" */
/* shards * epochs above this is refused: ids stay far from int64's end */
#define MAX_SHARDS_TOTAL (INT64_C(1) << 40)

typedef struct {
    int64_t shard;
    int worker;
    uint64_t incarnation;
} held_t;

struct psg_shard_queue {
    uint32_t magic; /* first: tells a handle to a shard queue from others */
    pthread_mutex_t lock;
    char *name;
    int64_t shards, epochs;
    uint64_t seed;
    int64_t next_epoch; /* the next epoch whose shards are added to todo */
    int64_t *todo;      /* a stack: todo[n_todo - 1] is handed out next */
    int64_t n_todo, cap_todo;
    held_t *doing;
    int64_t n_doing, cap_doing;
    psg_shard_queue_stats_t st;
};

typedef struct {
    const char *name;
    int64_t shards, epochs;
    uint64_t seed;
} create_ctx_t;

static void *create_queue(void *ctx) {
    const create_ctx_t *c = ctx;
    psg_shard_queue_t *q = calloc(1, sizeof *q);
    if (!q || !(q->name = strdup(c->name))) {
        free(q);
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&q->lock, NULL);
    q->magic = SHARD_QUEUE_MAGIC;
    q->shards = q->st.shards = c->shards;
    q->epochs = q->st.epochs = c->epochs;
    q->seed = c->seed;
    return q;
}

static void destroy_queue(void *obj) {
    psg_shard_queue_t *q = obj;
    pthread_mutex_destroy(&q->lock);
    q->magic = 0;
    free(q->todo);
    free(q->doing);
    free(q->name);
    free(q);
}

psg_shard_queue_t *psg_shard_queue_get(psg_resource_mgr_t *rm, const char *name, int64_t shards,
                                       int64_t epochs, uint64_t seed) {
    if (shards < 1 || epochs < 1 || shards > MAX_SHARDS_TOTAL / epochs) {
        psg_error_set("shard queue '%s': %lld shards an epoch over %lld epochs: each must be >= 1 "
                      "and their product at most 2^40",
                      name, (long long)shards, (long long)epochs);
        return NULL;
    }
    create_ctx_t c = {name, shards, epochs, seed};
    psg_shard_queue_t *q =
        psg_resource_lookup_or_create(rm, name, "shard queue", create_queue, &c, destroy_queue);
    if (q && (q->shards != shards || q->epochs != epochs || q->seed != seed)) {
        psg_error_set("shard queue '%s' exists with %lld shards, %lld epochs, seed %llu; asked "
                      "for %lld, %lld, %llu",
                      name, (long long)q->shards, (long long)q->epochs, (unsigned long long)q->seed,
                      (long long)shards, (long long)epochs, (unsigned long long)seed);
        return NULL;
    }
    return q;
}

PSG_PS_HANDLE_ACCESSORS(psg_shard_queue_t, psg_shard_queue, SHARD_QUEUE_MAGIC, "a shard queue")

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void psg_shard_queue_order(int64_t shards, uint64_t seed, int64_t epoch, int64_t *order) {
    uint64_t s = seed * 0x2545f4914f6cdd1dull ^ (uint64_t)epoch * 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < shards; i++) order[i] = i;
    for (int64_t i = shards - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)(splitmix64(&s) % (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static int grow(void **p, int64_t *cap, int64_t need, size_t size) {
    if (need <= *cap) return 0;
    int64_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *np = realloc(*p, (size_t)n * size);
    if (!np) return psg_error_set("out of memory");
    *p = np;
    *cap = n;
    return 0;
}

static int push_todo(psg_shard_queue_t *q, int64_t shard) {
    if (grow((void **)&q->todo, &q->cap_todo, q->n_todo + 1, sizeof *q->todo) < 0) return -1;
    q->todo[q->n_todo++] = shard;
    return 0;
}

/* The next epoch's shards into todo, its first in order on top. */
static int fill_epoch(psg_shard_queue_t *q) {
    if (grow((void **)&q->todo, &q->cap_todo, q->n_todo + q->shards, sizeof *q->todo) < 0)
        return -1;
    int64_t *order = malloc(sizeof *order * (size_t)q->shards);
    if (!order) return psg_error_set("out of memory");
    psg_shard_queue_order(q->shards, q->seed, q->next_epoch, order);
    for (int64_t i = q->shards - 1; i >= 0; i--)
        q->todo[q->n_todo++] = q->next_epoch * q->shards + order[i];
    free(order);
    q->next_epoch++;
    return 0;
}

/* Whether (worker, incarnation) is one of the n pairs in dead. */
static bool is_dead(const int64_t *dead, int64_t n, int worker, uint64_t incarnation) {
    for (int64_t k = 0; k < n; k++)
        if (dead[2 * k] == worker && (uint64_t)dead[2 * k + 1] == incarnation) return true;
    return false;
}

/* Held shards of a dead process or of an older incarnation of the taker back to todo. */
static int give_back(psg_shard_queue_t *q, int worker, uint64_t incarnation, const int64_t *dead,
                     int64_t n_dead) {
    for (int64_t i = 0; i < q->n_doing;) {
        held_t *h = &q->doing[i];
        bool older = h->worker == worker && h->incarnation != incarnation;
        if (!older && !is_dead(dead, n_dead, h->worker, h->incarnation)) {
            i++;
            continue;
        }
        if (push_todo(q, h->shard) < 0) return -1;
        q->st.given_back++;
        q->doing[i] = q->doing[--q->n_doing];
    }
    return 0;
}

/* done (>= 0) reported by (worker, incarnation): done if it holds it, else stale. */
static void mark_done(psg_shard_queue_t *q, int worker, uint64_t incarnation, int64_t done) {
    for (int64_t i = 0; i < q->n_doing; i++) {
        const held_t *h = &q->doing[i];
        if (h->shard == done && h->worker == worker && h->incarnation == incarnation) {
            q->doing[i] = q->doing[--q->n_doing];
            q->st.done++;
            return;
        }
    }
    q->st.stale_done++;
}

int psg_shard_queue_take(psg_shard_queue_t *q, int worker, uint64_t incarnation, int64_t done,
                         const int64_t *dead, int64_t n_dead, int64_t *shard, bool *finished) {
    int64_t total = q->shards * q->epochs;
    if (worker < 0)
        return psg_error_set("shard queue '%s': worker %d is not a worker", q->name, worker);
    if (done < -1 || done >= total)
        return psg_error_set("shard queue '%s': shard %lld done by worker %d is not a shard (0 to "
                             "%lld)",
                             q->name, (long long)done, worker, (long long)total - 1);
    if (n_dead < 0 || (n_dead > 0 && !dead))
        return psg_error_set("shard queue '%s': %lld dead processes", q->name, (long long)n_dead);
    for (int64_t k = 0; k < n_dead; k++)
        if (dead[2 * k] < 0 || dead[2 * k] > INT32_MAX)
            return psg_error_set("shard queue '%s': dead process of worker %lld: not a worker",
                                 q->name, (long long)dead[2 * k]);
    pthread_mutex_lock(&q->lock);
    int rc = give_back(q, worker, incarnation, dead, n_dead);
    if (rc == 0 && done >= 0) mark_done(q, worker, incarnation, done);
    if (rc == 0 && q->n_todo == 0 && q->next_epoch < q->epochs) rc = fill_epoch(q);
    *shard = -1;
    if (rc == 0 && q->n_todo > 0 &&
        (rc = grow((void **)&q->doing, &q->cap_doing, q->n_doing + 1, sizeof *q->doing)) == 0) {
        *shard = q->todo[--q->n_todo];
        q->doing[q->n_doing++] = (held_t){*shard, worker, incarnation};
    }
    *finished = q->st.done == total;
    pthread_mutex_unlock(&q->lock);
    return rc;
}

int64_t *psg_shard_queue_holders(psg_shard_queue_t *q, int64_t *n) {
    pthread_mutex_lock(&q->lock);
    int64_t *pairs = malloc(sizeof *pairs * (size_t)(2 * q->n_doing + 1));
    *n = 0;
    for (int64_t i = 0; pairs && i < q->n_doing; i++) {
        const held_t *h = &q->doing[i];
        int64_t k = 0;
        while (k < *n &&
               !(pairs[2 * k] == h->worker && (uint64_t)pairs[2 * k + 1] == h->incarnation))
            k++;
        if (k < *n) continue;
        pairs[2 * k] = h->worker;
        pairs[2 * k + 1] = (int64_t)h->incarnation;
        (*n)++;
    }
    pthread_mutex_unlock(&q->lock);
    if (!pairs) psg_error_set("out of memory");
    return pairs;
}

void psg_shard_queue_stats(psg_shard_queue_t *q, psg_shard_queue_stats_t *out) {
    pthread_mutex_lock(&q->lock);
    *out = q->st;
    out->doing = q->n_doing;
    out->todo = q->n_todo;
    pthread_mutex_unlock(&q->lock);
}
