/* CPU kernels of the training ops: each optimizer update rule (TensorFlow's
 * ResourceApply* formulas) applied in place to a variable and its slots under
 * the variable's lock, plus ScaleVariable, IncrementVariable, ExponentialDecay.
 * Not the builders or shape inference (ops/train.c). */
#include "ops/cpu/train.h"
#include "ops/cpu/array.h"
#include "ops/params.h"
#include "psgraph/error.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#define PSG_USED_MAX 16

/* The scalar inputs a kernel read, as it read them, for the write log (chain replication): an
 * input read from a variable (Adam's beta powers) may change under another step before the log
 * would copy it. */
typedef struct {
    float v[PSG_USED_MAX];
    uint32_t mask; /* bit i: input i's value is v[i] */
} used_t;

/* One update over elements [begin, end): w, s1, s2 and g are all (n). Each reads the value
 * before from its `in` (the same buffer, in place; another, out of place: chain
 * replication keeps the value before as the way back of a retry: psg_variable_t.keepers). */
typedef struct {
    float *w;                          /* the variable, (n) */
    float *s1, *s2;                    /* slots, (n) each, or NULL */
    const float *w_in, *s1_in, *s2_in; /* the values before: w, s1, s2 in place */
    const float *g;                    /* the gradient, (n) */
    float lr, a, b, eps;
    bool nesterov;
    psg_variable_t *slots[2]; /* the slots' variables, locked with the variable's */
    int nslots;
    used_t used;
} update_t;

/* Big variables are updated by several threads; small ones inline. */
#define UPDATE_GRAIN 32768

static int scalar_input(psg_kernel_ctx_t *c, used_t *used, int i, const char *what, float *out) {
    if (psg_update_check_scalar(c, i, what) < 0) return -1;
    *out = psg_tensor_f32(c->inputs[i])[0];
    if (i < PSG_USED_MAX) {
        used->v[i] = *out;
        used->mask |= 1u << i;
    }
    return 0;
}

/* Tells the write log of c's resources (if any) of this update, with the scalars as read.
 * Under the locks of the variables it writes. */
static void log_update(psg_kernel_ctx_t *c, const used_t *used) {
    if (!psg_resource_logs(c->resources)) return;
    int n = c->num_inputs < PSG_USED_MAX ? c->num_inputs : PSG_USED_MAX;
    psg_tensor_t *in[PSG_USED_MAX] = {0};
    bool ok = true;
    for (int i = 0; i < n; i++) {
        in[i] = used->mask >> i & 1 ? psg_tensor_scalar_f32(used->v[i]) : c->inputs[i];
        ok = ok && in[i];
    }
    if (ok && n == c->num_inputs) {
        psg_resource_log_write(c->resources, c->node, in, n);
    } else { /* not logged: its next forward sends the values */
        for (int i = 0; i < c->num_inputs; i++)
            if (c->inputs[i]->dtype == PSG_DT_RESOURCE)
                psg_variable_note_unlogged(psg_kernel_variable(c, i));
    }
    for (int i = 0; i < n; i++)
        if (used->mask >> i & 1) psg_tensor_destroy(&in[i]);
}

/* The check_numerics scan: the lowest index of a NaN or Inf, or n. */
typedef struct {
    const float *g;            /* (n) */
    _Atomic int64_t first_bad; /* starts at n */
} scan_t;

static void scan_range(void *ctx, int64_t b, int64_t e) {
    scan_t *sc = ctx;
    /* an all-ones exponent is Inf or NaN; an integer OR-reduction vectorizes */
    uint32_t any = 0;
    for (int64_t i = b; i < e; i++) {
        uint32_t u;
        memcpy(&u, &sc->g[i], sizeof u);
        any |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (!any) return;
    int64_t i = b;
    while (isfinite(sc->g[i])) i++;
    int64_t cur = atomic_load(&sc->first_bad);
    while (i < cur && !atomic_compare_exchange_weak(&sc->first_bad, &cur, i)) {
    }
}

/* Resolves the variable (input 0), its `nslots` slots (inputs 1..nslots) and
 * the gradient (input gi); checks shapes and, when the node's check_numerics
 * attr is on (the default), that every gradient element is finite. */
static int prepare(psg_kernel_ctx_t *c, int nslots, int gi, psg_variable_t **var, update_t *u) {
    psg_variable_t *v = NULL, *s[2];
    if (psg_update_operands(c, psg_kernel_variable, nslots, gi, &v, s) < 0) return -1;
    const psg_tensor_t *g = c->inputs[gi];
    const float *gd = psg_tensor_f32(g);
    if (((const psg_apply_params_t *)psg_kernel_params(c))->check_numerics) {
        scan_t sc = {gd, psg_tensor_numel(g)};
        psg_parallel_for(c->pool, sc.first_bad, UPDATE_GRAIN, scan_range, &sc);
        int64_t i = atomic_load(&sc.first_bad);
        if (i < psg_tensor_numel(g))
            return psg_error_set("non-finite gradient for variable '%s': element %lld is %s "
                                 "(check_numerics; the variable was not updated)",
                                 v->name, (long long)i, isnan(gd[i]) ? "NaN" : "Inf");
    }
    memset(u, 0, sizeof *u); /* w, s1, s2: under the locks (run_update) */
    u->g = gd;
    u->slots[0] = s[0];
    u->slots[1] = s[1];
    u->nslots = nslots;
    *var = v;
    return 0;
}

/* Runs fn over the variable's elements under its lock and its slots' (a checkpoint reads
 * the variable and its slots under the variable's lock: one update, never half of one). */
static int run_update(psg_kernel_ctx_t *c, psg_variable_t *v, psg_range_fn fn, update_t *u) {
    psg_variable_lock_update(v, u->slots, u->nslots);
    /* a retried step's update that v holds already is not applied twice (ps/replicate.c); a
     * variable whose value before is kept (chain replication's way back) is written aside:
     * into a new buffer, published once written whole (a lock-free reader, ReadVariable,
     * gets the value before the update or after it); buffers resolved here, under the locks */
    psg_variable_t *vars[3] = {v, u->slots[0], u->slots[1]};
    psg_tensor_t *aside[3] = {NULL, NULL, NULL};
    if (psg_variable_note_write_aside(v, c->step_id, &aside[0])) {
        for (int i = 0; i < u->nslots; i++)
            (void)psg_variable_note_write_aside(u->slots[i], c->step_id, &aside[i + 1]);
        float *in[3] = {NULL, NULL, NULL}, *out[3] = {NULL, NULL, NULL};
        for (int i = 0; i <= u->nslots; i++) {
            in[i] = psg_tensor_f32(vars[i]->value);
            out[i] = aside[i] ? psg_tensor_f32(aside[i]) : in[i];
        }
        u->w = out[0], u->s1 = out[1], u->s2 = out[2];
        u->w_in = in[0], u->s1_in = in[1], u->s2_in = in[2];
        log_update(c, &u->used);
        psg_parallel_for(c->pool, psg_tensor_numel(v->value), UPDATE_GRAIN, fn, u);
        for (int i = 0; i <= u->nslots; i++)
            psg_variable_end_write_aside(vars[i], c->step_id, &aside[i]);
    }
    psg_variable_unlock_update(v, u->slots, u->nslots);
    return 0;
}

/* ---- the rules ---- */

static void sgd_range(void *ctx, int64_t b, int64_t e) {
    const update_t *u = ctx;
    for (int64_t i = b; i < e; i++) u->w[i] = u->w_in[i] - u->lr * u->g[i];
}

/* accum = momentum*accum + g; var -= lr*accum
 * (nesterov: var -= lr*g + lr*momentum*accum) */
static void momentum_range(void *ctx, int64_t b, int64_t e) {
    const update_t *u = ctx;
    for (int64_t i = b; i < e; i++) {
        float a = u->s1_in[i] * u->a + u->g[i];
        u->s1[i] = a;
        u->w[i] = u->w_in[i] - (u->nesterov ? u->g[i] * u->lr + a * u->a * u->lr : u->lr * a);
    }
}

/* ms = rho*ms + (1-rho)*g^2; mom = momentum*mom + lr*g/sqrt(ms+eps); var -= mom */
static void rmsprop_range(void *ctx, int64_t b, int64_t e) {
    const update_t *u = ctx;
    for (int64_t i = b; i < e; i++) {
        float g = u->g[i];
        float ms = u->a * u->s1_in[i] + (1.0f - u->a) * g * g;
        float mom = u->b * u->s2_in[i] + u->lr * g / sqrtf(ms + u->eps);
        u->s1[i] = ms;
        u->s2[i] = mom;
        u->w[i] = u->w_in[i] - mom;
    }
}

/* m += (g-m)*(1-beta1); v += (g^2-v)*(1-beta2); var -= lr_t*m/(sqrt(v)+eps),
 * lr_t (in u->lr) = lr*sqrt(1-beta2_power)/(1-beta1_power): the reference loop */
static void adam_scalar(const update_t *u, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
        float g = u->g[i];
        float m = u->s1_in[i] + (g - u->s1_in[i]) * (1.0f - u->a);
        float v = u->s2_in[i] + (g * g - u->s2_in[i]) * (1.0f - u->b);
        u->s1[i] = m;
        u->s2[i] = v;
        u->w[i] = u->w_in[i] - u->lr * m / (sqrtf(v) + u->eps);
    }
}

#if defined(__AVX__)
typedef float v8f_t __attribute__((vector_size(32)));

static inline v8f_t v8_load(const float *p) {
    v8f_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

/* The same operations as adam_scalar, in the same order, 8 elements at a time: IEEE's
 * +, -, *, / and sqrt are correctly rounded in vectors too, and ISO C mode never fuses a
 * multiply-add, so each element gets the reference's bits (the loop above is not vectorized
 * by the compiler: sqrtf may set errno). A backup replays it on its copies: Adam ran twice
 * per step with --ps-replicas 2. */
static void adam_range(void *ctx, int64_t b, int64_t e) {
    const update_t *u = ctx;
    const v8f_t ca = (v8f_t){0} + (1.0f - u->a), cb = (v8f_t){0} + (1.0f - u->b);
    const v8f_t lr = (v8f_t){0} + u->lr, eps = (v8f_t){0} + u->eps;
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        v8f_t g = v8_load(u->g + i), s1 = v8_load(u->s1_in + i), s2 = v8_load(u->s2_in + i);
        v8f_t m = s1 + (g - s1) * ca;
        v8f_t v = s2 + (g * g - s2) * cb;
        __m256 vv;
        memcpy(&vv, &v, sizeof vv);
        vv = _mm256_sqrt_ps(vv);
        v8f_t root;
        memcpy(&root, &vv, sizeof root);
        v8f_t w = v8_load(u->w_in + i) - lr * m / (root + eps);
        memcpy(u->s1 + i, &m, sizeof m);
        memcpy(u->s2 + i, &v, sizeof v);
        memcpy(u->w + i, &w, sizeof w);
    }
    adam_scalar(u, i, e);
}
#else
static void adam_range(void *ctx, int64_t b, int64_t e) {
    adam_scalar(ctx, b, e);
}
#endif

/* accum += g^2; var -= lr*g/sqrt(accum) */
static void adagrad_range(void *ctx, int64_t b, int64_t e) {
    const update_t *u = ctx;
    for (int64_t i = b; i < e; i++) {
        float g = u->g[i];
        float a = u->s1_in[i] + g * g;
        u->s1[i] = a;
        u->w[i] = u->w_in[i] - u->lr * g / sqrtf(a);
    }
}

/* TensorFlow's FTRL-proximal (ApplyFtrl): accum (s1) += g^2, linear (s2) += g - (accum_new^-p
 * - accum^-p) / lr * w, w = (sign(linear) l1 - linear) / (accum_new^-p / lr + 2 l2) where
 * |linear| > l1, else 0; a: l1, b: l2, eps: lr_power p (<= 0). */
static void ftrl_range(void *ctx, int64_t b, int64_t e) {
    const update_t *u = ctx;
    float lr = u->lr, l1 = u->a, l2 = u->b, lp = u->eps;
    for (int64_t i = b; i < e; i++) {
        float g = u->g[i], acc = u->s1_in[i] + g * g;
        float pow_new = lp == -0.5f ? sqrtf(acc) : powf(acc, -lp);
        float pow_old = lp == -0.5f ? sqrtf(u->s1_in[i]) : powf(u->s1_in[i], -lp);
        float lin = u->s2_in[i] + g - (pow_new - pow_old) / lr * u->w_in[i];
        u->s2[i] = lin;
        u->w[i] =
            fabsf(lin) > l1 ? ((lin > 0 ? l1 : -l1) - lin) / (pow_new / lr + 2.0f * l2) : 0.0f;
        u->s1[i] = acc;
    }
}

/* A rule whose one scalar is the learning rate (input nslots + 1, before the gradient). */
static int lr_update(psg_kernel_ctx_t *c, int nslots, psg_range_fn fn) {
    psg_variable_t *v = NULL;
    update_t u;
    if (prepare(c, nslots, nslots + 2, &v, &u) < 0 ||
        scalar_input(c, &u.used, nslots + 1, "lr", &u.lr) < 0)
        return -1;
    return run_update(c, v, fn, &u);
}

/* inputs: var (resource, shape S), lr (scalar), grad (S) */
int psg_cpu_apply_gradient_descent(psg_kernel_ctx_t *c) {
    return lr_update(c, 0, sgd_range);
}

/* inputs: var (S), accum (S), lr (scalar), grad (S) */
int psg_cpu_apply_adagrad(psg_kernel_ctx_t *c) {
    return lr_update(c, 1, adagrad_range);
}

/* inputs: var (S), accum (S), lr (scalar), grad (S), momentum (scalar) */
int psg_cpu_apply_momentum(psg_kernel_ctx_t *c) {
    psg_variable_t *v = NULL;
    update_t u;
    if (prepare(c, 1, 3, &v, &u) < 0 || scalar_input(c, &u.used, 2, "lr", &u.lr) < 0 ||
        scalar_input(c, &u.used, 4, "momentum", &u.a) < 0)
        return -1;
    u.nesterov = ((const psg_apply_params_t *)psg_kernel_params(c))->use_nesterov;
    return run_update(c, v, momentum_range, &u);
}

/* inputs: var (S), ms (S), mom (S), lr, rho, momentum, epsilon (scalars), grad (S) */
int psg_cpu_apply_rmsprop(psg_kernel_ctx_t *c) {
    psg_variable_t *v = NULL;
    update_t u;
    if (prepare(c, 2, 7, &v, &u) < 0 || scalar_input(c, &u.used, 3, "lr", &u.lr) < 0 ||
        scalar_input(c, &u.used, 4, "rho", &u.a) < 0 ||
        scalar_input(c, &u.used, 5, "momentum", &u.b) < 0 ||
        scalar_input(c, &u.used, 6, "epsilon", &u.eps) < 0)
        return -1;
    return run_update(c, v, rmsprop_range, &u);
}

/* inputs: var (S), m (S), v (S), beta1_power, beta2_power, lr, beta1, beta2,
 * epsilon (scalars), grad (S) */
int psg_cpu_apply_adam(psg_kernel_ctx_t *c) {
    psg_variable_t *v = NULL;
    update_t u;
    float b1p = 0, b2p = 0, lr = 0;
    if (prepare(c, 2, 9, &v, &u) < 0 || scalar_input(c, &u.used, 3, "beta1_power", &b1p) < 0 ||
        scalar_input(c, &u.used, 4, "beta2_power", &b2p) < 0 ||
        scalar_input(c, &u.used, 5, "lr", &lr) < 0 ||
        scalar_input(c, &u.used, 6, "beta1", &u.a) < 0 ||
        scalar_input(c, &u.used, 7, "beta2", &u.b) < 0 ||
        scalar_input(c, &u.used, 8, "epsilon", &u.eps) < 0)
        return -1;
    if (b1p == 1.0f) return psg_error_set("beta1_power is 1: Adam's bias correction divides by 0");
    u.lr = lr * sqrtf(1.0f - b2p) / (1.0f - b1p);
    return run_update(c, v, adam_range, &u);
}

/* inputs: var (S), accum (S), linear (S), grad (S), lr, l1, l2, lr_power (scalars) */
int psg_cpu_apply_ftrl(psg_kernel_ctx_t *c) {
    psg_variable_t *v = NULL;
    update_t u;
    if (prepare(c, 2, 3, &v, &u) < 0 || scalar_input(c, &u.used, 4, "lr", &u.lr) < 0 ||
        scalar_input(c, &u.used, 5, "l1", &u.a) < 0 ||
        scalar_input(c, &u.used, 6, "l2", &u.b) < 0 ||
        scalar_input(c, &u.used, 7, "lr_power", &u.eps) < 0)
        return -1;
    if (!(u.lr > 0)) return psg_error_set("FTRL's lr must be > 0, got %g", (double)u.lr);
    if (!(u.a >= 0) || !(u.b >= 0) || !(u.eps <= 0))
        return psg_error_set("FTRL needs l1 >= 0, l2 >= 0 and lr_power <= 0");
    return run_update(c, v, ftrl_range, &u);
}

/* inputs: var (resource, f32 S), factor (scalar f32): var *= factor */
int psg_cpu_scale_variable(psg_kernel_ctx_t *c) {
    psg_variable_t *v = NULL;
    float f = 0;
    used_t used = {0};
    if (psg_update_variable(c, psg_kernel_variable, 0, &v) < 0 ||
        scalar_input(c, &used, 1, "factor", &f) < 0)
        return -1;
    pthread_mutex_lock(&v->lock);
    float *w = psg_tensor_f32(v->value);
    int64_t n = psg_variable_note_write(v, c->step_id) ? psg_tensor_numel(v->value) : 0;
    if (n) log_update(c, &used);
    for (int64_t i = 0; i < n; i++) w[i] *= f;
    pthread_mutex_unlock(&v->lock);
    return 0;
}

/* inputs: var (resource, i64, i32 or f32, any shape): var += attr "by" */
int psg_cpu_increment_variable(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_kernel_variable(c, 0);
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    int64_t by = psg_node_get_int(c->node, "by", 1);
    int rc = 0;
    pthread_mutex_lock(&v->lock);
    int64_t n = psg_variable_note_write(v, c->step_id) ? psg_tensor_numel(v->value) : 0;
    if (n) log_update(c, &(used_t){0});
    switch (v->dtype) {
    case PSG_DT_I64:
        for (int64_t i = 0; i < n; i++) psg_tensor_i64(v->value)[i] += by;
        break;
    case PSG_DT_I32:
        for (int64_t i = 0; i < n; i++) psg_tensor_i32(v->value)[i] += (int32_t)by;
        break;
    case PSG_DT_F32:
        for (int64_t i = 0; i < n; i++) psg_tensor_f32(v->value)[i] += (float)by;
        break;
    default:
        rc = psg_error_set("cannot increment variable '%s' of dtype %s", v->name,
                           psg_dtype_name(v->dtype));
    }
    pthread_mutex_unlock(&v->lock);
    return rc;
}

/* input: step (scalar i64, i32 or f32); output: scalar f32
 * learning_rate * decay_rate ^ (step / decay_steps), the exponent floored
 * when staircase. */
int psg_cpu_exponential_decay(psg_kernel_ctx_t *c) {
    const psg_tensor_t *t = c->inputs[0];
    double step;
    switch (t->dtype) {
    case PSG_DT_I64: step = (double)psg_tensor_i64(t)[0]; break;
    case PSG_DT_I32: step = (double)psg_tensor_i32(t)[0]; break;
    case PSG_DT_F32: step = (double)psg_tensor_f32(t)[0]; break;
    default: return psg_error_set("step must be i64, i32 or f32, got %s", psg_dtype_name(t->dtype));
    }
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    double lr = psg_node_get_float(c->node, "learning_rate", 0.0);
    double steps = psg_node_get_float(c->node, "decay_steps", 1.0);
    double rate = psg_node_get_float(c->node, "decay_rate", 1.0);
    double p = step / steps;
    if (psg_node_get_bool(c->node, "staircase", false)) p = floor(p);
    psg_tensor_f32(out)[0] = (float)(lr * pow(rate, p));
    return 0;
}
