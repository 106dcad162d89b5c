/* The gradient accumulator of one variable (TensorFlow's
 * ConditionalAccumulator, with a cap, and SparseConditionalAccumulator): it sums the
 * gradients computed for its current global step (dense, or rows summed per id), drops
 * older (stale) and surplus ones, and hands the mean to a pending take. Not the graph
 * ops (ops/sync.c). */
#include "ops/cpu/sparse.h"
#include "ops/state/blocking.h"
#include "ops/state/handle.h"
#include "ops/state/timer.h"
#include "psgraph/error.h"
#include "ops/state/sync_resources.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACCUMULATOR_MAGIC 0x75636361u /* "accu" */

struct psg_accumulator {
    uint32_t magic; /* first: tells a handle to an accumulator from others */
    pthread_mutex_t lock;
    char *name;
    psg_shape_t shape;
    int64_t numel;
    psg_timer_t *timer; /* the manager's; outlives this accumulator */
    int64_t step;       /* the global step gradients must be computed for */
    int count;          /* gradients summed for `step` */
    int num_required;   /* cap per step; 0: none */
    int live_required;  /* set by the chief as workers come and go; 0: the takes' own */
    psg_tensor_t *sum;  /* f32, the shape; valid when count > 0 */
    /* a sparse accumulator: the rows of the step's gradients summed per id (ids in order
     * of first appearance), valid when count > 0 */
    bool sparse;
    psg_id_map_t ids;
    float *rows;      /* (rows_cap, row_len) */
    int64_t rows_cap; /* rows allocated */
    int64_t row_len;  /* numel / shape[0] */
    bool closed;
    psg_accumulator_counts_t counts;
    /* the pending take */
    bool waiting;
    int want;
    int64_t timeout_ms;
    uint64_t timer_id;
    psg_accumulator_take_fn done;
    void *arg;
};

typedef struct {
    const char *name;
    psg_shape_t shape;
    int num_required;
    psg_timer_t *timer;
    bool sparse;
} create_args_t;

static void destroy_accumulator(void *obj);

static void *create_accumulator(void *ctx) {
    create_args_t *c = ctx;
    psg_accumulator_t *a = calloc(1, sizeof *a);
    if (!a || !(a->name = strdup(c->name))) {
        free(a);
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&a->lock, NULL);
    a->magic = ACCUMULATOR_MAGIC;
    a->shape = c->shape;
    a->numel = psg_shape_numel(&c->shape);
    a->num_required = c->num_required > 0 ? c->num_required : 0;
    a->timer = c->timer;
    a->sparse = c->sparse;
    a->row_len = c->shape.rank > 0 && c->shape.dims[0] > 0 ? a->numel / c->shape.dims[0] : 1;
    return a;
}

/* Closes a (when `close`) and fails its pending take, if any, with
 * "accumulator 'NAME' <why>". */
static void fail_take(psg_accumulator_t *a, bool close, psg_err_code_t code, const char *why) {
    pthread_mutex_lock(&a->lock);
    a->closed = a->closed || close;
    bool waiting = a->waiting;
    a->waiting = false;
    uint64_t id = a->timer_id;
    psg_accumulator_take_fn done = a->done;
    void *arg = a->arg;
    pthread_mutex_unlock(&a->lock);
    if (!waiting) return;
    psg_timer_cancel(a->timer, id, true);
    char msg[512];
    snprintf(msg, sizeof msg, "accumulator '%s' %s", a->name, why);
    done(arg, NULL, NULL, code, msg);
}

/* The manager destroys it once no step runs: a pending take fails. */
static void destroy_accumulator(void *obj) {
    psg_accumulator_t *a = obj;
    fail_take(a, true, PSG_ERR_STOPPING, "destroyed while a take waited");
    psg_tensor_destroy(&a->sum);
    psg_id_map_free(&a->ids);
    free(a->rows);
    pthread_mutex_destroy(&a->lock);
    a->magic = 0;
    free(a->name);
    free(a);
}

static psg_accumulator_t *get(psg_resource_mgr_t *rm, const char *name, const psg_shape_t *shape,
                              int num_required, bool sparse) {
    if (!psg_shape_is_complete(shape) || (sparse && shape->rank < 1)) {
        psg_error_set("accumulator '%s': needs a complete shape", name);
        return NULL;
    }
    /* the timer is registered first, so the manager destroys it last */
    psg_timer_t *timer = psg_timer_of(rm);
    if (!timer) return NULL;
    create_args_t c = {name, *shape, num_required, timer, sparse};
    psg_accumulator_t *a = psg_resource_lookup_or_create(
        rm, name, "accumulator", create_accumulator, &c, destroy_accumulator);
    if (a && !psg_shape_equal(&a->shape, shape)) {
        char s1[PSG_SHAPE_STR_MAX], s2[PSG_SHAPE_STR_MAX];
        psg_error_set("accumulator '%s' exists with shape %s, asked for %s", name,
                      psg_shape_str(&a->shape, s1, sizeof s1), psg_shape_str(shape, s2, sizeof s2));
        return NULL;
    }
    if (a && a->sparse != sparse) {
        psg_error_set("accumulator '%s' exists for %s gradients, asked for %s ones", name,
                      a->sparse ? "sparse" : "dense", sparse ? "sparse" : "dense");
        return NULL;
    }
    if (a && num_required > 0) {
        pthread_mutex_lock(&a->lock);
        a->num_required = num_required;
        pthread_mutex_unlock(&a->lock);
    }
    return a;
}

psg_accumulator_t *psg_accumulator_get(psg_resource_mgr_t *rm, const char *name,
                                       const psg_shape_t *shape, int num_required) {
    return get(rm, name, shape, num_required, false);
}

psg_accumulator_t *psg_sparse_accumulator_get(psg_resource_mgr_t *rm, const char *name,
                                              const psg_shape_t *shape, int num_required) {
    return get(rm, name, shape, num_required, true);
}

bool psg_accumulator_is_sparse(const psg_accumulator_t *a) {
    return a->sparse;
}

PSG_PS_HANDLE_ACCESSORS(psg_accumulator_t, psg_accumulator, ACCUMULATOR_MAGIC, "an accumulator")

/* A sparse accumulator's mean, with the lock held: *values (rows, shape[1:]) the summed
 * rows / count, *indices (rows) i64 their ids. -1 on out of memory (error set). */
static int sparse_mean_locked(psg_accumulator_t *a, psg_tensor_t **values, psg_tensor_t **indices) {
    int64_t n = a->count > 0 ? a->ids.n : 0;
    psg_shape_t vs = a->shape;
    vs.dims[0] = n;
    psg_shape_t is = psg_shape_1d(n);
    *values = psg_tensor_new(PSG_DT_F32, &vs);
    *indices = psg_tensor_new(PSG_DT_I64, &is);
    if (!*values || !*indices) {
        psg_tensor_destroy(values);
        psg_tensor_destroy(indices);
        return psg_error_set("accumulator '%s': out of memory", a->name);
    }
    float *v = psg_tensor_f32(*values), inv = 1.0f / (float)(a->count > 0 ? a->count : 1);
    for (int64_t i = 0; i < n * a->row_len; i++) v[i] = a->rows[i] * inv;
    int64_t *ix = psg_tensor_i64(*indices);
    for (int64_t i = 0; n > 0 && i < a->ids.cap; i++)
        if (a->ids.slot[i] >= 0) ix[a->ids.slot[i]] = a->ids.keys[i];
    return 0;
}

/* With the lock held and count >= want: the mean of the step (a sparse accumulator's
 * rows in *mean, their ids in *indices; a dense one's leaves *indices NULL), the sum
 * reset and the step advanced. -1 on out of memory (error set; nothing changed). */
static int take_mean_locked(psg_accumulator_t *a, psg_tensor_t **mean, psg_tensor_t **indices) {
    *indices = NULL;
    if (a->sparse) {
        if (sparse_mean_locked(a, mean, indices) < 0) return -1;
    } else {
        *mean = a->sum;
        a->sum = NULL;
        float *m = psg_tensor_f32(*mean);
        float n = (float)a->count;
        for (int64_t i = 0; i < a->numel; i++) m[i] /= n;
    }
    a->count = 0;
    a->step++;
    a->counts.takes++;
    return 0;
}

/* A take that can complete: detaches it. Called with the lock held; the
 * caller finishes it (finish_take) after unlocking. */
typedef struct {
    psg_accumulator_take_fn done;
    void *arg;
    uint64_t timer_id;
    psg_tensor_t *mean, *indices;
    psg_err_code_t code;
    char error[256];
} finished_take_t;

static bool complete_if_ready_locked(psg_accumulator_t *a, finished_take_t *f) {
    if (!a->waiting || a->count < a->want) return false;
    f->done = a->done;
    f->arg = a->arg;
    f->timer_id = a->timer_id;
    f->mean = f->indices = NULL;
    f->error[0] = '\0';
    f->code = PSG_ERR_UNKNOWN;
    if (take_mean_locked(a, &f->mean, &f->indices) < 0) {
        f->code = psg_error_code();
        snprintf(f->error, sizeof f->error, "%s", psg_error_message());
    }
    a->waiting = false;
    return true;
}

static void finish_take(psg_accumulator_t *a, finished_take_t *f) {
    psg_timer_cancel(a->timer, f->timer_id, true);
    f->done(f->arg, f->mean, f->indices, f->code, f->mean ? NULL : f->error);
}

/* With the lock held: whether a gradient for local_step is dropped (the accumulator is
 * closed, the step is older than its own: stale, or it has its N already: late), counted. */
static bool dropped_locked(psg_accumulator_t *a, int64_t local_step) {
    if (a->closed)
        a->counts.closed++;
    else if (local_step < a->step)
        a->counts.stale++;
    else if (a->num_required > 0 && a->count >= a->num_required)
        a->counts.late++;
    else
        return false;
    return true;
}

int psg_accumulator_apply(psg_accumulator_t *a, int64_t local_step, const psg_tensor_t *grad,
                          bool *accepted) {
    *accepted = false;
    if (a->sparse)
        return psg_error_set(
            "accumulator '%s' takes sparse gradients (rows and ids), got a dense one", a->name);
    if (grad->dtype != PSG_DT_F32 || !psg_shape_equal(&grad->shape, &a->shape)) {
        char s1[PSG_SHAPE_STR_MAX], s2[PSG_SHAPE_STR_MAX];
        return psg_error_set("accumulator '%s' takes f32%s gradients, got %s%s", a->name,
                             psg_shape_str(&a->shape, s1, sizeof s1), psg_dtype_name(grad->dtype),
                             psg_shape_str(&grad->shape, s2, sizeof s2));
    }
    finished_take_t f;
    bool finished = false;
    pthread_mutex_lock(&a->lock);
    if (!dropped_locked(a, local_step)) {
        const float *g = psg_tensor_f32(grad);
        if (a->count == 0) {
            psg_tensor_destroy(&a->sum);
            a->sum = psg_tensor_new(PSG_DT_F32, &a->shape);
            if (!a->sum) {
                pthread_mutex_unlock(&a->lock);
                return psg_error_wrap("accumulator '%s'", a->name);
            }
            memcpy(a->sum->data, g, sizeof(float) * (size_t)a->numel);
        } else {
            float *s = psg_tensor_f32(a->sum);
            for (int64_t i = 0; i < a->numel; i++) s[i] += g[i];
        }
        a->count++;
        a->counts.accepted++;
        *accepted = true;
        finished = complete_if_ready_locked(a, &f);
    }
    pthread_mutex_unlock(&a->lock);
    if (finished) finish_take(a, &f);
    return 0;
}

static void take_timed_out(void *arg, uint64_t id) {
    psg_accumulator_t *a = arg;
    pthread_mutex_lock(&a->lock);
    if (!a->waiting || a->timer_id != id) {
        pthread_mutex_unlock(&a->lock);
        return;
    }
    a->waiting = false;
    char msg[512];
    snprintf(msg, sizeof msg,
             "accumulator '%s': %d of %d gradients for step %lld after %lld ms (a worker is "
             "dead, or slower than the timeout)",
             a->name, a->count, a->want, (long long)a->step, (long long)a->timeout_ms);
    psg_accumulator_take_fn done = a->done;
    void *darg = a->arg;
    pthread_mutex_unlock(&a->lock);
    done(darg, NULL, NULL, PSG_ERR_TIMEOUT, msg);
}

void psg_accumulator_take_async(psg_accumulator_t *a, int num_required, int64_t timeout_ms,
                                psg_accumulator_take_fn done, void *arg) {
    char msg[512] = "";
    psg_err_code_t code = PSG_ERR_BAD_REQUEST;
    finished_take_t f;
    bool finished = false;
    pthread_mutex_lock(&a->lock);
    if (num_required < 1) {
        snprintf(msg, sizeof msg, "accumulator '%s': num_required must be >= 1, got %d", a->name,
                 num_required);
    } else if (a->closed) {
        code = PSG_ERR_CLOSED;
        snprintf(msg, sizeof msg, "accumulator '%s' is closed: " PSG_SYNC_CLOSED_TEXT, a->name);
    } else if (a->waiting) {
        snprintf(msg, sizeof msg, "accumulator '%s': a take is already waiting", a->name);
    }
    if (msg[0]) {
        pthread_mutex_unlock(&a->lock);
        done(arg, NULL, NULL, code, msg);
        return;
    }
    if (a->live_required > 0) num_required = a->live_required;
    a->num_required = num_required;
    a->waiting = true;
    a->want = num_required;
    a->done = done;
    a->arg = arg;
    a->timer_id = 0;
    a->timeout_ms = timeout_ms = psg_timer_wait_ms(a->timer, timeout_ms); /* always a deadline */
    finished = complete_if_ready_locked(a, &f);
    if (!finished) {
        a->timer_id = psg_timer_add(a->timer, timeout_ms, take_timed_out, a);
        if (a->timer_id == 0) {
            a->waiting = false;
            code = psg_error_code();
            snprintf(msg, sizeof msg, "accumulator '%s': %s", a->name, psg_error_message());
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (finished) finish_take(a, &f);
    if (msg[0]) done(arg, NULL, NULL, code, msg);
}

/* ---- blocking take ---- */

typedef struct {
    psg_blocking_t b;
    psg_tensor_t *mean, *indices;
    psg_err_code_t code;
} take_wait_t;

static void take_wait_done(void *arg, psg_tensor_t *mean, psg_tensor_t *indices,
                           psg_err_code_t code, const char *error) {
    take_wait_t *w = arg;
    w->mean = mean;
    w->indices = indices;
    w->code = code;
    psg_blocking_finish(&w->b, error);
}

int psg_accumulator_take(psg_accumulator_t *a, int num_required, int64_t timeout_ms,
                         psg_tensor_t **mean) {
    psg_tensor_t *indices = NULL;
    int rc = psg_accumulator_take_sparse(a, num_required, timeout_ms, mean, &indices);
    psg_tensor_destroy(&indices);
    return rc;
}

int psg_accumulator_take_sparse(psg_accumulator_t *a, int num_required, int64_t timeout_ms,
                                psg_tensor_t **mean, psg_tensor_t **indices) {
    take_wait_t w = {.mean = NULL};
    psg_blocking_init(&w.b);
    psg_accumulator_take_async(a, num_required, timeout_ms, take_wait_done, &w);
    psg_blocking_wait(&w.b);
    *mean = w.mean;
    *indices = w.indices;
    return w.mean ? 0 : psg_error_set_code(w.code, "%s", w.b.error);
}

int psg_accumulator_set_required(psg_accumulator_t *a, int num_required) {
    if (num_required < 1)
        return psg_error_set("accumulator '%s': num_required must be >= 1, got %d", a->name,
                             num_required);
    finished_take_t f;
    pthread_mutex_lock(&a->lock);
    a->live_required = a->num_required = num_required;
    if (a->waiting) a->want = num_required;
    bool finished = complete_if_ready_locked(a, &f);
    pthread_mutex_unlock(&a->lock);
    if (finished) finish_take(a, &f);
    return 0;
}

void psg_accumulator_set_global_step(psg_accumulator_t *a, int64_t step) {
    pthread_mutex_lock(&a->lock);
    if (step != a->step) {
        a->step = step;
        a->count = 0;
        psg_tensor_destroy(&a->sum);
    }
    pthread_mutex_unlock(&a->lock);
}

/* ---- the sparse sum ---- */

/* Room for `more` new ids and their rows, with the lock held: the map rebuilt larger (ids
 * put again in slot order keep their slots), the rows grown. -1 on out of memory. */
static int sparse_reserve_locked(psg_accumulator_t *a, int64_t more) {
    int64_t need = (a->ids.keys ? a->ids.n : 0) + more;
    if (!a->ids.keys || 2 * need > a->ids.cap) {
        psg_id_map_t m;
        if (psg_id_map_init(&m, 2 * need) < 0) return -1;
        if (a->ids.keys) {
            int64_t *order = malloc(sizeof(int64_t) * (size_t)(a->ids.n + 1));
            if (!order) {
                psg_id_map_free(&m);
                return psg_error_set("out of memory");
            }
            for (int64_t i = 0; i < a->ids.cap; i++)
                if (a->ids.slot[i] >= 0) order[a->ids.slot[i]] = a->ids.keys[i];
            for (int64_t i = 0; i < a->ids.n; i++) psg_id_map_put(&m, order[i]);
            free(order);
        }
        psg_id_map_free(&a->ids);
        a->ids = m;
    }
    if (need > a->rows_cap) {
        int64_t cap = a->rows_cap > 0 ? a->rows_cap : 256;
        while (cap < need) cap *= 2;
        float *r = realloc(a->rows, sizeof(float) * (size_t)(cap * a->row_len));
        if (!r) return psg_error_set("out of memory");
        a->rows = r;
        a->rows_cap = cap;
    }
    return 0;
}

/* The checks of a sparse gradient against the accumulator's shape, before the lock. */
static int check_sparse(const psg_accumulator_t *a, const psg_tensor_t *values,
                        const psg_tensor_t *indices) {
    char s1[PSG_SHAPE_STR_MAX], s2[PSG_SHAPE_STR_MAX];
    if (!a->sparse)
        return psg_error_set("accumulator '%s' takes dense gradients, got a sparse one", a->name);
    bool fits = values->dtype == PSG_DT_F32 && values->shape.rank == a->shape.rank;
    for (int d = 1; fits && d < a->shape.rank; d++)
        fits = values->shape.dims[d] == a->shape.dims[d];
    if (!fits)
        return psg_error_set("accumulator '%s' takes f32 rows of %s, got %s%s", a->name,
                             psg_shape_str(&a->shape, s1, sizeof s1), psg_dtype_name(values->dtype),
                             psg_shape_str(&values->shape, s2, sizeof s2));
    if ((indices->dtype != PSG_DT_I32 && indices->dtype != PSG_DT_I64) ||
        indices->shape.rank != 1 || indices->shape.dims[0] != values->shape.dims[0])
        return psg_error_set(
            "accumulator '%s': %s%s indices for %lld rows (want i32 or i64, one a row)", a->name,
            psg_dtype_name(indices->dtype), psg_shape_str(&indices->shape, s2, sizeof s2),
            (long long)values->shape.dims[0]);
    for (int64_t i = 0; i < indices->shape.dims[0]; i++) {
        int64_t r = psg_index_at(indices, i);
        if (r < 0 || r >= a->shape.dims[0])
            return psg_error_set("accumulator '%s': index %lld out of [0, %lld)", a->name,
                                 (long long)r, (long long)a->shape.dims[0]);
    }
    return 0;
}

/* The first gradient of a step starts the sum afresh. */
static void sparse_reset_locked(psg_accumulator_t *a) {
    a->ids.n = 0;
    for (int64_t i = 0; a->ids.slot && i < a->ids.cap; i++) a->ids.slot[i] = -1;
}

/* Adds k rows to the sum, with the lock held and room reserved. */
static void sparse_add_locked(psg_accumulator_t *a, const float *v, const psg_tensor_t *indices,
                              int64_t k) {
    size_t row = sizeof(float) * (size_t)a->row_len;
    for (int64_t i = 0; i < k; i++) {
        int32_t before = a->ids.n, slot = psg_id_map_put(&a->ids, psg_index_at(indices, i));
        float *dst = a->rows + (int64_t)slot * a->row_len;
        const float *src = v + i * a->row_len;
        if (a->ids.n > before)
            memcpy(dst, src, row);
        else
            for (int64_t j = 0; j < a->row_len; j++) dst[j] += src[j];
    }
}

int psg_accumulator_apply_sparse(psg_accumulator_t *a, int64_t local_step,
                                 const psg_tensor_t *values, const psg_tensor_t *indices,
                                 bool *accepted) {
    *accepted = false;
    if (check_sparse(a, values, indices) < 0) return -1;
    int64_t k = values->shape.dims[0];
    finished_take_t f;
    bool finished = false;
    int rc = 0;
    pthread_mutex_lock(&a->lock);
    if (dropped_locked(a, local_step)) {
        /* counted */
    } else if ((a->count == 0 ? sparse_reset_locked(a), 0 : 0), sparse_reserve_locked(a, k) < 0) {
        rc = psg_error_wrap("accumulator '%s'", a->name);
    } else {
        sparse_add_locked(a, psg_tensor_f32(values), indices, k);
        a->count++;
        a->counts.accepted++;
        *accepted = true;
        finished = complete_if_ready_locked(a, &f);
    }
    pthread_mutex_unlock(&a->lock);
    if (finished) finish_take(a, &f);
    return rc;
}

void psg_accumulator_reset(psg_accumulator_t *a, int64_t step) {
    /* a take of the failed step may wait still (its step was aborted, not the take) */
    fail_take(a, false, PSG_ERR_ABORTED, "reset: the step starts again after a failover");
    pthread_mutex_lock(&a->lock);
    a->step = step;
    a->count = 0;
    psg_tensor_destroy(&a->sum);
    pthread_mutex_unlock(&a->lock);
}

void psg_accumulator_fail_take(psg_accumulator_t *a, const char *why) {
    fail_take(a, false, PSG_ERR_ABORTED, why);
}

int64_t psg_accumulator_global_step(psg_accumulator_t *a) {
    pthread_mutex_lock(&a->lock);
    int64_t s = a->step;
    pthread_mutex_unlock(&a->lock);
    return s;
}

int psg_accumulator_num_accumulated(psg_accumulator_t *a) {
    pthread_mutex_lock(&a->lock);
    int n = a->count;
    pthread_mutex_unlock(&a->lock);
    return n;
}

void psg_accumulator_counts(psg_accumulator_t *a, psg_accumulator_counts_t *out) {
    pthread_mutex_lock(&a->lock);
    *out = a->counts;
    pthread_mutex_unlock(&a->lock);
}

void psg_accumulator_close(psg_accumulator_t *a) {
    fail_take(a, true, PSG_ERR_CLOSED, "is closed: " PSG_SYNC_CLOSED_TEXT);
}
