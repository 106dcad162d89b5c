/* A worker's training data as shards handed out by the ps (worker/shard_data.h). */
#include "worker/shard_data.h"

#include "ops/state/shard_queue.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/wire.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PS0_DEVICE "/job:ps/replica:0/task:0/device:CPU:0"

struct psg_shard_data {
    psg_shard_data_options_t o;
    FILE *metrics;
    int64_t per_epoch, shards; /* batches an epoch; shards an epoch */
    psg_endpoint_t feeds[3], take;
    psg_dist_callable_t *call; /* owned by the session */
    pthread_mutex_t lock;      /* the flags below: the membership's thread writes them */
    bool *alive;               /* as the membership last said; all true at first */
    int32_t *live;             /* 0: lost since the chief's last take (its shards go back) */
    int64_t shard;             /* held (epoch * shards + index), -1: none */
    int64_t last;              /* the last one held: stepped on again while none is left */
    int64_t next_batch, end;   /* of the epoch's batches, in the shard read now */
    bool spare;                /* reading `last` again: not counted, not reported */
    int64_t spares;            /* spare batches read */
    int64_t order_epoch;       /* the epoch `order` is of, -1: none */
    int64_t *order;            /* [examples] */
    int64_t *idx;              /* [batch] */
};

psg_shard_data_t *psg_shard_data_new(psg_graph_t *g, const psg_shard_data_options_t *o) {
    int64_t n = psg_dataset_size(o->ds);
    if (o->batch <= 0 || o->shard_batches <= 0 || o->epochs <= 0 || n < o->batch) {
        psg_error_set("--data-shards dispatch: %lld examples, batch %d, %lld batches a shard, "
                      "%lld epochs: nothing to hand out",
                      (long long)n, o->batch, (long long)o->shard_batches, (long long)o->epochs);
        return NULL;
    }
    psg_shard_data_t *d = calloc(1, sizeof *d);
    if (!d || !(d->order = malloc(sizeof *d->order * (size_t)n)) ||
        !(d->idx = malloc(sizeof *d->idx * (size_t)o->batch)) ||
        !(d->live = calloc((size_t)(o->workers > 0 ? o->workers : 1), sizeof *d->live)) ||
        !(d->alive = calloc((size_t)(o->workers > 0 ? o->workers : 1), sizeof *d->alive))) {
        if (d) free(d->order), free(d->idx), free(d->live);
        free(d);
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&d->lock, NULL);
    d->o = *o;
    d->per_epoch = n / o->batch;
    d->shards = (d->per_epoch + o->shard_batches - 1) / o->shard_batches;
    d->shard = d->last = -1;
    for (int i = 0; i < o->workers; i++) d->alive[i] = true, d->live[i] = 1;
    d->order_epoch = -1;
    psg_shape_t sc = psg_shape_scalar(), vec = psg_shape_1d(-1);
    psg_graph_push_device(g, PS0_DEVICE);
    psg_endpoint_t h = psg_shard_queue_op(g, "data/shards", d->shards, o->epochs, o->seed);
    d->feeds[0] = psg_placeholder(g, "data/shard_incarnation", PSG_DT_I64, &sc);
    d->feeds[1] = psg_placeholder(g, "data/shard_done", PSG_DT_I64, &sc);
    d->feeds[2] = psg_placeholder(g, "data/shard_live", PSG_DT_I32, &vec);
    d->take = psg_shard_queue_take_op(g, "data/shard_take", h, d->feeds[0], d->feeds[1],
                                      d->feeds[2], o->rank);
    psg_graph_pop_device(g);
    if (psg_graph_error(g)) {
        psg_error_set("--data-shards dispatch: %s", psg_graph_error(g));
        psg_shard_data_destroy(&d);
    }
    return d;
}

int psg_shard_data_start(psg_shard_data_t *d, psg_dist_session_t *s, FILE *metrics) {
    d->metrics = metrics;
    d->call = psg_dist_session_make_callable(s, 3, d->feeds, 1, &d->take, 0, NULL);
    return d->call ? 0 : psg_error_wrap("--data-shards dispatch");
}

/* Only a worker that goes from live to lost is marked. Not one found absent (not started: never
 * heard from, so it holds no shard): absent, then joining, it takes a shard before the
 * membership admits it, and the chief's next take would have given that shard back (it was
 * finished twice). A mark not yet sent is dropped when the worker is live again (a restart:
 * ps0 gives back its old process's shard when the new one first takes). */
void psg_shard_data_set_live(psg_shard_data_t *d, const bool *alive, const bool *lost, int n) {
    pthread_mutex_lock(&d->lock);
    for (int i = 0; i < n && i < d->o.workers; i++) {
        if (d->alive[i] && !alive[i] && lost[i]) d->live[i] = 0;
        if (!d->alive[i] && alive[i]) d->live[i] = 1;
        d->alive[i] = alive[i];
    }
    pthread_mutex_unlock(&d->lock);
}

int64_t psg_shard_data_batches_per_epoch(const psg_shard_data_t *d) {
    return d->per_epoch;
}

int64_t psg_shard_data_epoch(const psg_shard_data_t *d) {
    return d->last < 0 ? -1 : d->last / d->shards;
}

/* The batches [*first, *end) of the epoch in shard s. */
static void shard_range(const psg_shard_data_t *d, int64_t s, int64_t *first, int64_t *end) {
    *first = (s % d->shards) * d->o.shard_batches;
    *end = *first + d->o.shard_batches < d->per_epoch ? *first + d->o.shard_batches : d->per_epoch;
}

static void say(psg_shard_data_t *d, const char *event, int64_t s) {
    int64_t first, end;
    shard_range(d, s, &first, &end);
    char line[256];
    snprintf(line, sizeof line,
             "{\"event\":\"%s\",\"worker\":%d,\"shard\":%lld,\"epoch\":%lld,\"index\":%lld,"
             "\"examples\":%lld}",
             event, d->o.rank, (long long)s, (long long)(s / d->shards), (long long)(s % d->shards),
             (long long)((end - first) * d->o.batch));
    if (d->o.out) fprintf(d->o.out, "%s\n", line), fflush(d->o.out);
    if (d->metrics) fprintf(d->metrics, "%s\n", line), fflush(d->metrics);
}

/* Whether a worker is marked lost (under d->lock). */
static bool any_lost_locked(const psg_shard_data_t *d) {
    for (int i = 0; i < d->o.workers; i++)
        if (!d->live[i]) return true;
    return false;
}

/* One take: the shard held reported done, the next into d->shard (-1: none); *finished. */
static int take(psg_shard_data_t *d, bool *finished) {
    pthread_mutex_lock(&d->lock);
    int n_live = any_lost_locked(d) ? d->o.workers : 0; /* none lost: no word (as the others) */
    psg_shape_t sh = psg_shape_1d(n_live);
    psg_tensor_t *live = psg_tensor_new(PSG_DT_I32, &sh);
    if (live) memcpy(psg_tensor_i32(live), d->live, sizeof *d->live * (size_t)n_live);
    pthread_mutex_unlock(&d->lock);
    psg_tensor_t *f[3] = {psg_tensor_scalar_i64((int64_t)psg_wire_incarnation()),
                          psg_tensor_scalar_i64(d->shard), live},
                 *got = NULL;
    int rc = f[0] && f[1] && f[2] ? psg_dist_callable_run(d->call, f, &got)
                                  : psg_error_set("out of memory");
    if (rc == 0 && n_live) { /* the lost ones' shards are back in todo: the marks sent are
                              * spent, not one the membership set since */
        const int32_t *sent = psg_tensor_i32(f[2]);
        pthread_mutex_lock(&d->lock);
        for (int i = 0; i < n_live; i++)
            if (!sent[i]) d->live[i] = 1;
        pthread_mutex_unlock(&d->lock);
    }
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&f[i]);
    if (rc < 0) return psg_error_wrap("--data-shards dispatch: taking a shard");
    if (psg_tensor_numel(got) != 2 || got->dtype != PSG_DT_I64) {
        psg_tensor_destroy(&got);
        return psg_error_set("--data-shards dispatch: a take's answer is not 2 i64 values");
    }
    if (d->shard >= 0) say(d, "shard_done", d->shard);
    d->shard = psg_tensor_i64(got)[0];
    *finished = psg_tensor_i64(got)[1] != 0;
    psg_tensor_destroy(&got);
    if (d->shard < -1 || d->shard >= d->shards * d->o.epochs)
        return psg_error_set("--data-shards dispatch: shard %lld of %lld", (long long)d->shard,
                             (long long)(d->shards * d->o.epochs));
    if (d->shard >= 0) say(d, "shard_taken", d->shard);
    return 0;
}

int psg_shard_data_next(psg_shard_data_t *d, psg_tensor_t **images, psg_tensor_t **labels) {
    if (d->spare || d->next_batch >= d->end) { /* used up, or none was left: ask (again) */
        bool finished = false;
        if (take(d, &finished) < 0) return -1;
        if (finished) return 0;
        d->spare = d->shard < 0;
        if (!d->spare) {
            d->last = d->shard;
            shard_range(d, d->shard, &d->next_batch, &d->end);
        } else if (d->last < 0) {
            d->last = 0; /* none taken yet: the first shard's batches, as spares */
        }
    }
    int64_t epoch = d->last / d->shards, b = d->next_batch;
    if (d->spare) {
        int64_t first, end;
        shard_range(d, d->last, &first, &end);
        b = first + d->spares++ % (end - first);
    } else {
        d->next_batch++;
    }
    if (d->order_epoch != epoch) {
        psg_data_epoch_order(psg_dataset_size(d->o.ds), d->o.seed, epoch, true, d->order);
        d->order_epoch = epoch;
    }
    memcpy(d->idx, d->order + b * d->o.batch, sizeof *d->idx * (size_t)d->o.batch);
    return psg_dataset_gather(d->o.ds, d->o.batch, d->idx, images, labels) < 0 ? -1 : 1;
}

void psg_shard_data_destroy(psg_shard_data_t **dp) {
    psg_shard_data_t *d = dp ? *dp : NULL;
    if (!d) return;
    pthread_mutex_destroy(&d->lock);
    free(d->order);
    free(d->idx);
    free(d->live);
    free(d->alive);
    free(d);
    *dp = NULL;
}
