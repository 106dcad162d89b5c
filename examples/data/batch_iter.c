/* Batch iterators over a dataset: the epoch order (shuffled by seed and
 * epoch), sharding by blocks across workers, batching, and a prefetch thread
 * that makes the same batches ahead into a bounded queue. Not the datasets
 * themselves (examples/data/dataset.c). */
#include "psgraph/data.h"
#include "psgraph/device.h"
#include "psgraph/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Makes the batches in order; used directly or by the prefetch thread. */
typedef struct {
    const psg_dataset_t *ds;
    psg_batch_iter_options_t opt;
    int64_t per_epoch;   /* batches of this shard per epoch */
    int64_t epoch, next; /* the next batch to make */
    int64_t *order;      /* of order_epoch */
    int64_t order_epoch;
    int64_t *idx; /* one batch's example ids (batch_size) */
} producer_t;

typedef struct {
    psg_tensor_t *images, *labels;
    int64_t epoch;
    int status; /* 1 a batch, 0 the end, -1 an error (message in err) */
    char *err;
} item_t;

struct psg_batch_iter {
    producer_t p;
    int64_t epoch;    /* of the batch last returned */
    int final_status; /* once the end or an error came: 0 or -1; else 1 */
    char *final_err;
    /* prefetch: a ring of cap items */
    bool threaded;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    item_t *ring;
    int cap, head, count;
    bool stop;
};

static int64_t shards(const psg_batch_iter_options_t *o) {
    return o->num_shards > 1 ? o->num_shards : 1;
}

static int64_t batches_per_epoch(int64_t n, const psg_batch_iter_options_t *o) {
    int64_t s = shards(o), b = o->batch_size;
    if (o->drop_remainder) return n / (s * b);
    int64_t blocks = (n + b - 1) / b;
    return o->shard_index < blocks ? (blocks - o->shard_index + s - 1) / s : 0;
}

/* *t moved into pinned memory (opt.pin_memory): the copy to a GPU then needs
 * no staging copy on the step's time, and this one is made on the producer's. */
static int pin(psg_tensor_t **t) {
    psg_tensor_t *p = psg_tensor_new_pinned((*t)->dtype, &(*t)->shape);
    if (!p) return -1;
    memcpy(p->data, (*t)->data, psg_tensor_nbytes(*t));
    psg_tensor_destroy(t);
    *t = p;
    return 0;
}

/* 1 and a batch, 0 at the end, -1 on error. */
static int produce(producer_t *p, item_t *it) {
    memset(it, 0, sizeof *it);
    if (p->opt.num_epochs > 0 && p->epoch >= p->opt.num_epochs) return it->status = 0;
    int64_t n = psg_dataset_size(p->ds), b = p->opt.batch_size;
    if (p->order_epoch != p->epoch) {
        psg_data_epoch_order(n, p->opt.seed, p->epoch, p->opt.shuffle, p->order);
        p->order_epoch = p->epoch;
    }
    int64_t start =
        (p->next * shards(&p->opt) + (p->opt.num_shards > 1 ? p->opt.shard_index : 0)) * b;
    int64_t count = n - start < b ? n - start : b;
    for (int64_t i = 0; i < count; i++) p->idx[i] = p->order[start + i];
    it->epoch = p->epoch;
    if (psg_dataset_gather(p->ds, (int)count, p->idx, &it->images, &it->labels) < 0 ||
        (p->opt.pin_memory && (pin(&it->images) < 0 || pin(&it->labels) < 0))) {
        psg_tensor_destroy(&it->images);
        psg_tensor_destroy(&it->labels);
        it->err = strdup(psg_error_message());
        return it->status = -1;
    }
    if (++p->next == p->per_epoch) {
        p->next = 0;
        p->epoch++;
    }
    return it->status = 1;
}

static void *prefetch_main(void *arg) {
    psg_batch_iter_t *it = arg;
    for (;;) {
        pthread_mutex_lock(&it->lock);
        while (it->count == it->cap && !it->stop) pthread_cond_wait(&it->not_full, &it->lock);
        bool stop = it->stop;
        pthread_mutex_unlock(&it->lock);
        if (stop) break;
        item_t item;
        int status = produce(&it->p, &item); /* outside the lock: the consumer goes on */
        pthread_mutex_lock(&it->lock);
        it->ring[(it->head + it->count) % it->cap] = item;
        it->count++;
        pthread_cond_signal(&it->not_empty);
        pthread_mutex_unlock(&it->lock);
        if (status != 1) break;
    }
    return NULL;
}

psg_batch_iter_options_t psg_batch_iter_train_options(int batch_size, uint64_t seed) {
    return (psg_batch_iter_options_t){.batch_size = batch_size,
                                      .shuffle = true,
                                      .seed = seed,
                                      .drop_remainder = true,
                                      .num_shards = 1,
                                      .prefetch = 2};
}

psg_batch_iter_options_t psg_batch_iter_eval_options(int batch_size) {
    return (psg_batch_iter_options_t){.batch_size = batch_size, .num_shards = 1, .num_epochs = 1};
}

psg_batch_iter_t *psg_batch_iter_new(const psg_dataset_t *ds, const psg_batch_iter_options_t *opt) {
    int64_t n = psg_dataset_size(ds);
    if (opt->batch_size <= 0 || opt->prefetch < 0 || opt->num_epochs < 0 || opt->start_batch < 0 ||
        (opt->num_shards > 1 && (opt->shard_index < 0 || opt->shard_index >= opt->num_shards))) {
        psg_error_set(
            "batch iterator: bad options (batch %d, shard %d of %d, prefetch %d, start %lld)",
            opt->batch_size, opt->shard_index, opt->num_shards, opt->prefetch,
            (long long)opt->start_batch);
        return NULL;
    }
    int64_t per = batches_per_epoch(n, opt);
    if (per == 0) {
        psg_error_set("batch iterator: %lld examples make no batch of %d for shard %d of %lld",
                      (long long)n, opt->batch_size, opt->num_shards > 1 ? opt->shard_index : 0,
                      (long long)shards(opt));
        return NULL;
    }
    psg_batch_iter_t *it = calloc(1, sizeof *it);
    if (!it) goto oom;
    it->p.ds = ds;
    it->p.opt = *opt;
    it->p.per_epoch = per;
    it->p.order_epoch = -1;
    it->p.epoch = it->epoch = opt->start_batch / per;
    it->p.next = opt->start_batch % per;
    it->p.order = malloc(sizeof(int64_t) * (size_t)n);
    it->p.idx = malloc(sizeof(int64_t) * (size_t)opt->batch_size);
    it->final_status = 1;
    if (!it->p.order || !it->p.idx) goto oom;
    if (opt->prefetch > 0) {
        it->cap = opt->prefetch;
        it->ring = calloc((size_t)it->cap, sizeof(item_t));
        if (!it->ring) goto oom;
        pthread_mutex_init(&it->lock, NULL);
        pthread_cond_init(&it->not_empty, NULL);
        pthread_cond_init(&it->not_full, NULL);
        it->threaded = true;
        if (pthread_create(&it->thread, NULL, prefetch_main, it) != 0) {
            it->threaded = false;
            pthread_mutex_destroy(&it->lock);
            pthread_cond_destroy(&it->not_empty);
            pthread_cond_destroy(&it->not_full);
            psg_batch_iter_destroy(&it);
            psg_error_set("batch iterator: cannot start the prefetch thread");
            return NULL;
        }
    }
    return it;
oom:
    psg_batch_iter_destroy(&it);
    psg_error_set("out of memory");
    return NULL;
}

int psg_batch_iter_next(psg_batch_iter_t *it, psg_tensor_t **images, psg_tensor_t **labels) {
    *images = *labels = NULL;
    if (it->final_status != 1) {
        if (it->final_status < 0)
            psg_error_set("%s", it->final_err ? it->final_err : "out of memory");
        return it->final_status;
    }
    item_t item;
    if (it->threaded) {
        pthread_mutex_lock(&it->lock);
        while (it->count == 0) pthread_cond_wait(&it->not_empty, &it->lock);
        item = it->ring[it->head];
        it->head = (it->head + 1) % it->cap;
        it->count--;
        pthread_cond_signal(&it->not_full);
        pthread_mutex_unlock(&it->lock);
    } else {
        produce(&it->p, &item);
    }
    if (item.status != 1) {
        it->final_status = item.status;
        it->final_err = item.err;
        if (item.status < 0) psg_error_set("%s", item.err ? item.err : "out of memory");
        return item.status;
    }
    it->epoch = item.epoch;
    *images = item.images;
    *labels = item.labels;
    return 1;
}

int64_t psg_batch_iter_epoch(const psg_batch_iter_t *it) {
    return it->epoch;
}
int64_t psg_batch_iter_batches_per_epoch(const psg_batch_iter_t *it) {
    return it->p.per_epoch;
}

void psg_batch_iter_destroy(psg_batch_iter_t **itp) {
    if (!itp || !*itp) return;
    psg_batch_iter_t *it = *itp;
    *itp = NULL;
    if (it->threaded) {
        pthread_mutex_lock(&it->lock);
        it->stop = true;
        pthread_cond_broadcast(&it->not_full);
        pthread_mutex_unlock(&it->lock);
        pthread_join(it->thread, NULL);
        for (int i = 0; i < it->count; i++) {
            item_t *x = &it->ring[(it->head + i) % it->cap];
            psg_tensor_destroy(&x->images);
            psg_tensor_destroy(&x->labels);
            free(x->err);
        }
        pthread_mutex_destroy(&it->lock);
        pthread_cond_destroy(&it->not_empty);
        pthread_cond_destroy(&it->not_full);
    }
    free(it->ring);
    free(it->final_err);
    free(it->p.order);
    free(it->p.idx);
    free(it);
}
