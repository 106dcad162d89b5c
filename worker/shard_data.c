/* A worker's training data as shards handed out by the ps (worker/shard_data.h). */
#include "worker/shard_data.h"

#include "ops/state/shard_queue.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/wire.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define PS0_DEVICE "/job:ps/replica:0/task:0/device:CPU:0"

/* The chief's watch on a process that holds shards (ps0 names them in each take's answer). */
typedef struct {
    int rank;
    uint64_t inc;
    int64_t since_ms; /* heard from last (psg_membership_now_ms), or first named by ps0 */
    bool said;        /* found dead: said once */
} holder_t;

struct psg_shard_data {
    psg_shard_data_options_t o;
    FILE *metrics;
    int64_t per_epoch, shards; /* batches an epoch; shards an epoch */
    psg_endpoint_t feeds[3], take;
    psg_dist_callable_t *call; /* owned by the session */
    psg_membership_t *members; /* the chief's (borrowed), NULL: not the chief */
    holder_t *holders;         /* the other processes holding shards at the last take */
    int n_holders;
    int64_t shard;           /* held (epoch * shards + index), -1: none */
    int64_t last;            /* the last one held: stepped on again while none is left */
    int64_t next_batch, end; /* of the epoch's batches, in the shard read now */
    bool spare;              /* reading `last` again: not counted, not reported */
    int64_t spares;          /* spare batches read */
    int64_t order_epoch;     /* the epoch `order` is of, -1: none */
    int64_t *order;          /* [examples] */
    int64_t *idx;            /* [batch] */
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
        !(d->idx = malloc(sizeof *d->idx * (size_t)o->batch))) {
        if (d) free(d->order);
        free(d);
        psg_error_set("out of memory");
        return NULL;
    }
    d->o = *o;
    d->per_epoch = n / o->batch;
    d->shards = (d->per_epoch + o->shard_batches - 1) / o->shard_batches;
    d->shard = d->last = -1;
    d->order_epoch = -1;
    psg_shape_t sc = psg_shape_scalar(), vec = psg_shape_1d(-1);
    psg_graph_push_device(g, PS0_DEVICE);
    psg_endpoint_t h = psg_shard_queue_op(g, "data/shards", d->shards, o->epochs, o->seed);
    d->feeds[0] = psg_placeholder(g, "data/shard_incarnation", PSG_DT_I64, &sc);
    d->feeds[1] = psg_placeholder(g, "data/shard_done", PSG_DT_I64, &sc);
    d->feeds[2] = psg_placeholder(g, "data/shard_dead", PSG_DT_I64, &vec);
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

void psg_shard_data_watch(psg_shard_data_t *d, psg_membership_t *members) {
    d->members = members;
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

/* The chief's verdict on the processes that hold shards, as ps0 named them at its last take:
 * dead once the membership probed the worker the peer timeout after it last heard that very
 * process (or after ps0 first named it) and did not hear it (a worker's name alone is never
 * enough: a process that took a shard after a verdict on its worker is not the one judged).
 * Their (worker, incarnation) pairs as a new i64 tensor; each said once on out. */
static psg_tensor_t *dead_holders(psg_shard_data_t *d) {
    int n = 0;
    int64_t *pairs = malloc(sizeof *pairs * (size_t)(2 * d->n_holders + 1));
    if (!pairs) return NULL;
    int64_t peer = d->members ? psg_membership_peer_timeout_ms(d->members) : 0;
    for (int i = 0; d->members && i < d->n_holders; i++) {
        holder_t *h = &d->holders[i];
        psg_membership_heard_t heard;
        psg_membership_heard(d->members, h->rank, &heard);
        if (heard.inc == h->inc && heard.answered_ms > h->since_ms) h->since_ms = heard.answered_ms;
        bool left = heard.left_inc && heard.left_inc == h->inc; /* it said so: at once */
        if (!left && heard.probed_ms - h->since_ms < peer) continue;
        pairs[2 * n] = h->rank;
        pairs[2 * n++ + 1] = (int64_t)h->inc;
        if (h->said) continue;
        h->said = true;
        if (d->o.out && left)
            fprintf(d->o.out,
                    "data shards: worker%d's process %016" PRIx64 " left the job holding shards: "
                    "they are handed out again\n",
                    h->rank, h->inc),
                fflush(d->o.out);
        else if (d->o.out)
            fprintf(d->o.out,
                    "data shards: worker%d's process %016" PRIx64 " holds shards and was not heard "
                    "from for %.1f s: they are handed out again\n",
                    h->rank, h->inc, (double)(heard.probed_ms - h->since_ms) / 1e3),
                fflush(d->o.out);
    }
    psg_shape_t sh = psg_shape_1d(2 * n);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_I64, &sh);
    if (t) memcpy(psg_tensor_i64(t), pairs, sizeof *pairs * (size_t)(2 * n));
    free(pairs);
    return t;
}

/* The chief's watch from a take's answer: the n holders in pairs, other than this worker
 * (its own older process's shards go back when it takes); one already watched keeps its time. */
static int watch_holders(psg_shard_data_t *d, const int64_t *pairs, int64_t n) {
    holder_t *next = malloc(sizeof *next * (size_t)(n + 1));
    if (!next) return psg_error_set("out of memory");
    int k = 0;
    int64_t now = psg_membership_now_ms();
    for (int64_t i = 0; i < n && k < INT32_MAX; i++) {
        int rank = pairs[2 * i] < INT32_MAX ? (int)pairs[2 * i] : INT32_MAX;
        uint64_t inc = (uint64_t)pairs[2 * i + 1];
        if (rank == d->o.rank) continue;
        next[k] = (holder_t){rank, inc, now, false};
        for (int j = 0; j < d->n_holders; j++)
            if (d->holders[j].rank == rank && d->holders[j].inc == inc) next[k] = d->holders[j];
        k++;
    }
    free(d->holders);
    d->holders = next;
    d->n_holders = k;
    return 0;
}

/* One take: the shard held reported done, the next into d->shard (-1: none); *finished. */
static int take(psg_shard_data_t *d, bool *finished) {
    psg_tensor_t *f[3] = {psg_tensor_scalar_i64((int64_t)psg_wire_incarnation()),
                          psg_tensor_scalar_i64(d->shard), dead_holders(d)},
                 *got = NULL;
    int rc = f[0] && f[1] && f[2] ? psg_dist_callable_run(d->call, f, &got)
                                  : psg_error_set("out of memory");
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&f[i]);
    if (rc < 0) return psg_error_wrap("--data-shards dispatch: taking a shard");
    int64_t n = psg_tensor_numel(got);
    if (n < 2 || n % 2 || got->dtype != PSG_DT_I64) {
        psg_tensor_destroy(&got);
        return psg_error_set("--data-shards dispatch: a take's answer is not 2 + 2 n i64 values");
    }
    if (d->shard >= 0) say(d, "shard_done", d->shard);
    d->shard = psg_tensor_i64(got)[0];
    *finished = psg_tensor_i64(got)[1] != 0;
    rc = d->members ? watch_holders(d, psg_tensor_i64(got) + 2, n / 2 - 1) : 0;
    psg_tensor_destroy(&got);
    if (rc < 0) return -1;
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
    free(d->order);
    free(d->idx);
    free(d->holders);
    free(d);
    *dp = NULL;
}
