/* CPU kernels of the sparse updates: the rows of a gradient summed per id (an id map),
 * then each unique row of the variable and its slots updated under the variable's lock.
 * Not the dense updates (ops/cpu/train.c). */
#include "ops/cpu/sparse_apply.h"
#include "ops/cpu/array.h"
#include "ops/cpu/sparse.h"
#include "psgraph/error.h"
#include "psgraph/resource.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    psg_variable_t *var, *slot[2];
    float *w, *s1, *s2; /* (rows, d) */
    int64_t d;          /* elements per row */
    int32_t n;          /* unique rows */
    int64_t *rows;      /* (n) their rows in the variable */
    const float *g;     /* (n, d): the summed gradient of each */
    float *owned;       /* g when duplicates were summed */
} sparse_t;

static void sparse_free(sparse_t *s) {
    free(s->rows);
    free(s->owned);
}

static int f32_var(psg_kernel_ctx_t *c, int i, psg_variable_t **out) {
    psg_variable_t *v = psg_kernel_variable(c, i);
    if (v->dtype != PSG_DT_F32)
        return psg_error_set("variable '%s' is %s; optimizers update f32 variables", v->name,
                             psg_dtype_name(v->dtype));
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    *out = v;
    return 0;
}

static int scalar(psg_kernel_ctx_t *c, int i, float *out) {
    const psg_tensor_t *t = c->inputs[i];
    if (t->dtype != PSG_DT_F32 || psg_tensor_numel(t) != 1)
        return psg_error_set("input %d must be a scalar f32", i);
    *out = psg_tensor_f32(t)[0];
    return 0;
}

/* Resolves var, slots, the rows and indices (checked against the variable), scans for
 * non-finite values (check_numerics), and sums duplicate ids. */
static int prepare(psg_kernel_ctx_t *c, int nslots, int gi, sparse_t *s) {
    memset(s, 0, sizeof *s);
    if (f32_var(c, 0, &s->var) < 0) return -1;
    for (int k = 0; k < nslots; k++)
        if (f32_var(c, 1 + k, &s->slot[k]) < 0) return -1;
    const psg_variable_t *v = s->var;
    const psg_tensor_t *g = c->inputs[gi], *ix = c->inputs[gi + 1];
    int64_t rows = v->shape.dims[0], n = psg_tensor_numel(ix);
    s->d = rows > 0 ? psg_tensor_numel(v->value) / rows : 0;
    if (g->dtype != PSG_DT_F32 || psg_tensor_numel(g) != n * s->d ||
        (g->shape.rank > 0 && g->shape.dims[0] != n))
        return psg_error_set(
            "gradient of %lld elements is not %lld rows of variable '%s' (%lld elements a row)",
            (long long)psg_tensor_numel(g), (long long)n, v->name, (long long)s->d);
    if (n > INT32_MAX) return psg_error_set("%lld gradient rows: at most 2^31 - 1", (long long)n);
    const float *gd = psg_tensor_f32(g);
    if (psg_node_get_bool(c->node, "check_numerics", true))
        for (int64_t i = 0; i < n * s->d; i++)
            if (!isfinite(gd[i]))
                return psg_error_set("non-finite gradient for variable '%s': element %lld is %s "
                                     "(check_numerics; the variable was not updated)",
                                     v->name, (long long)i, isnan(gd[i]) ? "NaN" : "Inf");
    psg_id_map_t m;
    if (psg_id_map_init(&m, n) < 0) return -1;
    int32_t *slot_of = malloc(((size_t)n + 1) * sizeof *slot_of);
    s->rows = malloc(((size_t)n + 1) * sizeof *s->rows);
    int rc = slot_of && s->rows ? 0 : psg_error_set("out of memory");
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        int64_t r = psg_index_at(ix, i);
        if (r < 0 || r >= rows) {
            rc =
                psg_error_set("index %lld (element %lld) is outside the %lld rows of variable '%s'",
                              (long long)r, (long long)i, (long long)rows, v->name);
            break;
        }
        int32_t before = m.n;
        slot_of[i] = psg_id_map_put(&m, r);
        if (m.n > before) s->rows[slot_of[i]] = r;
    }
    s->n = m.n;
    psg_id_map_free(&m);
    if (rc == 0 && s->n == n) {
        s->g = gd; /* every id once: the rows as they came (in first-appearance order) */
    } else if (rc == 0) {
        s->owned = calloc((size_t)s->n * (size_t)s->d + 1, sizeof(float));
        if (!s->owned) rc = psg_error_set("out of memory");
        for (int64_t i = 0; rc == 0 && i < n; i++) {
            float *dst = s->owned + (int64_t)slot_of[i] * s->d;
            for (int64_t k = 0; k < s->d; k++) dst[k] += gd[i * s->d + k];
        }
        s->g = s->owned;
    }
    free(slot_of);
    if (rc < 0) {
        sparse_free(s);
        return -1;
    }
    return 0; /* the buffers: under the lock (run) */
}

/* The update of one row: w, s1, s2 and g each point at the row's d elements. */
typedef void (*row_fn)(const float *p, int64_t d, float *w, float *s1, float *s2, const float *g);

static int run(sparse_t *s, row_fn fn, const float *p) {
    pthread_mutex_lock(&s->var->lock);
    /* the buffers as of now: a dense update may have written the variable aside since
     * prepare (chain replication's way back, psg_variable_note_write_aside) */
    s->w = psg_tensor_f32(s->var->value);
    s->s1 = s->slot[0] ? psg_tensor_f32(s->slot[0]->value) : NULL;
    s->s2 = s->slot[1] ? psg_tensor_f32(s->slot[1]->value) : NULL;
    /* chain replication forwards its value (the write log gets dense updates only) */
    psg_variable_note_unlogged(s->var);
    for (int k = 0; k < 2; k++)
        if (s->slot[k]) psg_variable_note_unlogged(s->slot[k]);
    for (int32_t i = 0; i < s->n; i++) {
        int64_t o = s->rows[i] * s->d;
        fn(p, s->d, s->w + o, s->s1 ? s->s1 + o : NULL, s->s2 ? s->s2 + o : NULL,
           s->g + (int64_t)i * s->d);
    }
    pthread_mutex_unlock(&s->var->lock);
    sparse_free(s);
    return 0;
}

/* p: lr */
static void sgd_row(const float *p, int64_t d, float *w, float *s1, float *s2, const float *g) {
    (void)s1, (void)s2;
    for (int64_t k = 0; k < d; k++) w[k] -= p[0] * g[k];
}

/* p: lr, momentum, nesterov */
static void momentum_row(const float *p, int64_t d, float *w, float *s1, float *s2,
                         const float *g) {
    (void)s2;
    for (int64_t k = 0; k < d; k++) {
        float a = s1[k] * p[1] + g[k];
        s1[k] = a;
        w[k] -= p[2] != 0 ? g[k] * p[0] + a * p[1] * p[0] : p[0] * a;
    }
}

/* p: lr */
static void adagrad_row(const float *p, int64_t d, float *w, float *s1, float *s2, const float *g) {
    (void)s2;
    for (int64_t k = 0; k < d; k++) {
        float a = s1[k] + g[k] * g[k];
        s1[k] = a;
        w[k] -= p[0] * g[k] / sqrtf(a);
    }
}

/* p: lr, l1, l2, lr_power (TensorFlow's ApplyFtrl: s1 the accumulator, s2 the linear term) */
static void ftrl_row(const float *p, int64_t d, float *w, float *s1, float *s2, const float *g) {
    float lr = p[0], l1 = p[1], l2 = p[2], lp = p[3];
    for (int64_t k = 0; k < d; k++) {
        float acc = s1[k] + g[k] * g[k];
        float pow_new = lp == -0.5f ? sqrtf(acc) : powf(acc, -lp);
        float pow_old = lp == -0.5f ? sqrtf(s1[k]) : powf(s1[k], -lp);
        s2[k] += g[k] - (pow_new - pow_old) / lr * w[k];
        float quad = pow_new / lr + 2.0f * l2;
        w[k] = fabsf(s2[k]) > l1 ? ((s2[k] > 0 ? l1 : -l1) - s2[k]) / quad : 0.0f;
        s1[k] = acc;
    }
}

/* p: lr_t, beta1, beta2, epsilon */
static void adam_row(const float *p, int64_t d, float *w, float *s1, float *s2, const float *g) {
    for (int64_t k = 0; k < d; k++) {
        float m = s1[k] + (g[k] - s1[k]) * (1.0f - p[1]);
        float v = s2[k] + (g[k] * g[k] - s2[k]) * (1.0f - p[2]);
        s1[k] = m;
        s2[k] = v;
        w[k] -= p[0] * m / (sqrtf(v) + p[3]);
    }
}

int psg_cpu_sparse_apply_gradient_descent(psg_kernel_ctx_t *c) {
    float p[1] = {0};
    sparse_t s;
    if (scalar(c, 1, &p[0]) < 0 || prepare(c, 0, 2, &s) < 0) return -1;
    return run(&s, sgd_row, p);
}

int psg_cpu_sparse_apply_momentum(psg_kernel_ctx_t *c) {
    float p[3] = {0, 0, psg_node_get_bool(c->node, "use_nesterov", false) ? 1.0f : 0.0f};
    sparse_t s;
    if (scalar(c, 2, &p[0]) < 0 || scalar(c, 5, &p[1]) < 0 || prepare(c, 1, 3, &s) < 0) return -1;
    return run(&s, momentum_row, p);
}

int psg_cpu_sparse_apply_adagrad(psg_kernel_ctx_t *c) {
    float p[1] = {0};
    sparse_t s;
    if (scalar(c, 2, &p[0]) < 0 || prepare(c, 1, 3, &s) < 0) return -1;
    return run(&s, adagrad_row, p);
}

int psg_cpu_sparse_apply_ftrl(psg_kernel_ctx_t *c) {
    float p[4] = {0};
    sparse_t s;
    for (int i = 0; i < 4; i++)
        if (scalar(c, 5 + i, &p[i]) < 0) return -1;
    if (!(p[0] > 0)) return psg_error_set("FTRL's lr must be > 0, got %g", (double)p[0]);
    if (p[1] < 0 || p[2] < 0 || p[3] > 0)
        return psg_error_set("FTRL needs l1 >= 0, l2 >= 0 and lr_power <= 0");
    if (prepare(c, 2, 3, &s) < 0) return -1;
    return run(&s, ftrl_row, p);
}

int psg_cpu_sparse_apply_adam(psg_kernel_ctx_t *c) {
    float b1p = 0, b2p = 0, lr = 0, p[4] = {0};
    sparse_t s;
    if (scalar(c, 3, &b1p) < 0 || scalar(c, 4, &b2p) < 0 || scalar(c, 5, &lr) < 0 ||
        scalar(c, 6, &p[1]) < 0 || scalar(c, 7, &p[2]) < 0 || scalar(c, 8, &p[3]) < 0)
        return -1;
    if (b1p == 1.0f) return psg_error_set("beta1_power is 1: Adam's bias correction divides by 0");
    p[0] = lr * sqrtf(1.0f - b2p) / (1.0f - b1p);
    if (prepare(c, 2, 9, &s) < 0) return -1;
    return run(&s, adam_row, p);
}
