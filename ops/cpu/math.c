/* CPU kernels of the elementwise math ops: binary arithmetic with numpy
 * broadcasting (dims coalesced first, so same-shape, scalar, row- and
 * column-vector cases run as flat vectorizable loops), unary functions,
 * activation backprops, Dropout, Cast and Equal. Not reductions (math_reduce.c). */
#include "ops/math_setup.h"
#include "ops/cpu/math.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/half.h"
#include "ops/params.h"
#include "psgraph/half.h"
#include "psgraph/error.h"

#include <math.h>
#include <string.h>

/* ---- binary: one loop per (op, broadcast pattern) ---- */

/* vv: both inputs run along; vs: b is one value; sv: a is one value. */
typedef void (*bin_loop_fn)(const float *restrict a, const float *restrict b, float *restrict o,
                            int64_t n);
typedef struct {
    bin_loop_fn vv, vs, sv;
} bin_loops_t;

#define DEF_BINARY(name, EXPR)                                                                     \
    static void name##_vv(const float *restrict a, const float *restrict b, float *restrict o,     \
                          int64_t n) {                                                             \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float x = a[i], y = b[i];                                                              \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    }                                                                                              \
    static void name##_vs(const float *restrict a, const float *restrict b, float *restrict o,     \
                          int64_t n) {                                                             \
        float y = b[0];                                                                            \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float x = a[i];                                                                        \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    }                                                                                              \
    static void name##_sv(const float *restrict a, const float *restrict b, float *restrict o,     \
                          int64_t n) {                                                             \
        float x = a[0];                                                                            \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float y = b[i];                                                                        \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    }                                                                                              \
    static const bin_loops_t name##_loops = {name##_vv, name##_vs, name##_sv};

DEF_BINARY(add, x + y)
DEF_BINARY(sub, x - y)
DEF_BINARY(mul, x *y)
DEF_BINARY(div, x / y)
/* x is the incoming gradient dy, y the forward output */
DEF_BINARY(relu_grad, y > 0.0f ? x : 0.0f)
DEF_BINARY(sigmoid_grad, x *y *(1.0f - y))
DEF_BINARY(tanh_grad, x *(1.0f - y * y))

/* The broadcast as a loop nest over the output, after dropping size-1 dims
 * and merging neighbours that both inputs walk contiguously (or not at all). */
typedef struct {
    int rank;
    int64_t dims[PSG_MAX_RANK];
    int64_t sa[PSG_MAX_RANK], sb[PSG_MAX_RANK];
    const float *a, *b;
    float *o;
    const bin_loops_t *loops;
} bin_job_t;

static void bin_plan(bin_job_t *j, const psg_shape_t *a, const psg_shape_t *b,
                     const psg_shape_t *out) {
    int64_t sa[PSG_MAX_RANK], sb[PSG_MAX_RANK];
    psg_broadcast_strides(a, out, sa);
    psg_broadcast_strides(b, out, sb);
    int r = 0;
    for (int i = 0; i < out->rank; i++) {
        if (out->dims[i] == 1) continue;
        if (r > 0 && sa[r - 1] == sa[i] * out->dims[i] && sb[r - 1] == sb[i] * out->dims[i]) {
            j->dims[r - 1] *= out->dims[i];
            j->sa[r - 1] = sa[i];
            j->sb[r - 1] = sb[i];
            continue;
        }
        j->dims[r] = out->dims[i];
        j->sa[r] = sa[i];
        j->sb[r] = sb[i];
        r++;
    }
    if (r == 0) { /* a scalar, or all dims 1 */
        j->dims[0] = 1;
        j->sa[0] = j->sb[0] = 1;
        r = 1;
    }
    j->rank = r;
}

/* The inner dim over output elements [begin, end) of one row whose inputs
 * start at offsets oa, ob; o is where element `begin` goes. */
static void bin_inner(const bin_job_t *j, int64_t oa, int64_t ob, int64_t begin, int64_t end,
                      float *o) {
    int last = j->rank - 1;
    int64_t sa = j->sa[last], sb = j->sb[last], n = end - begin;
    const float *a = j->a + oa + sa * begin, *b = j->b + ob + sb * begin;
    if (sa && sb) {
        j->loops->vv(a, b, o, n);
    } else if (sa) {
        j->loops->vs(a, b, o, n);
    } else if (sb) {
        j->loops->sv(a, b, o, n);
    } else {
        j->loops->vs(a, b, o, 1);
        for (int64_t i = 1; i < n; i++) o[i] = o[0];
    }
}

/* Rows [begin, end) of the outer dims (all but the last), or elements of the
 * only dim when rank is 1. */
static void bin_range(void *ctx, int64_t begin, int64_t end) {
    const bin_job_t *j = ctx;
    if (j->rank == 1) {
        bin_inner(j, 0, 0, begin, end, j->o + begin);
        return;
    }
    int last = j->rank - 1;
    int64_t inner = j->dims[last];
    int64_t idx[PSG_MAX_RANK], oa = 0, ob = 0, rem = begin;
    for (int d = last - 1; d >= 0; d--) {
        idx[d] = rem % j->dims[d];
        rem /= j->dims[d];
        oa += idx[d] * j->sa[d];
        ob += idx[d] * j->sb[d];
    }
    for (int64_t row = begin; row < end; row++) {
        bin_inner(j, oa, ob, 0, inner, j->o + row * inner);
        for (int d = last - 1; d >= 0; d--) {
            oa += j->sa[d];
            ob += j->sb[d];
            if (++idx[d] < j->dims[d]) break;
            oa -= j->sa[d] * idx[d];
            ob -= j->sb[d] * idx[d];
            idx[d] = 0;
        }
    }
}

static int binary(psg_kernel_ctx_t *c, const bin_loops_t *loops) {
    const psg_tensor_t *a = c->inputs[0], *b = c->inputs[1];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    bin_job_t j = {
        .a = psg_tensor_f32(a), .b = psg_tensor_f32(b), .o = psg_tensor_f32(out), .loops = loops};
    bin_plan(&j, &a->shape, &b->shape, &out->shape);
    int64_t n = psg_tensor_numel(out);
    if (n == 0) return 0;
    int64_t units = j.rank == 1 ? n : n / j.dims[j.rank - 1];
    int64_t per_unit = n / units;
    if (n < PSG_MATH_PARALLEL_MIN) {
        bin_range(&j, 0, units);
        return 0;
    }
    int64_t grain = (PSG_MATH_PARALLEL_MIN / 2) / per_unit;
    psg_parallel_for(c->pool, units, grain > 0 ? grain : 1, bin_range, &j);
    return 0;
}

/* Add..TanhGrad: the loops of the prepared function (ops/params.h). */
int psg_cpu_binary(psg_kernel_ctx_t *c) {
    static const bin_loops_t *const loops[PSG_MATH_FN_COUNT] = {
        [PSG_MATH_ADD] = &add_loops,
        [PSG_MATH_SUB] = &sub_loops,
        [PSG_MATH_MUL] = &mul_loops,
        [PSG_MATH_DIV] = &div_loops,
        [PSG_MATH_RELU_GRAD] = &relu_grad_loops,
        [PSG_MATH_SIGMOID_GRAD] = &sigmoid_grad_loops,
        [PSG_MATH_TANH_GRAD] = &tanh_grad_loops,
    };
    const bin_loops_t *l = loops[((const psg_math_fn_params_t *)psg_kernel_params(c))->fn];
    PSG_ASSERT(l);
    return binary(c, l);
}

/* ---- unary ---- */

/* p is the op's constant (exponent, scale), unused by most. */
typedef void (*un_loop_fn)(const float *restrict x, float *restrict o, int64_t n, float p);

#define DEF_UNARY(name, EXPR)                                                                      \
    static void name##_loop(const float *restrict xs, float *restrict o, int64_t n, float p) {     \
        (void)p;                                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float x = xs[i];                                                                       \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    }

DEF_UNARY(neg, -x)
DEF_UNARY(square, x *x)
DEF_UNARY(sqrt, sqrtf(x))
DEF_UNARY(exp, expf(x))
DEF_UNARY(log, logf(x))
DEF_UNARY(pow, powf(x, p))
DEF_UNARY(scale, x *p)
DEF_UNARY(relu, x > 0.0f ? x : 0.0f)
DEF_UNARY(sigmoid, 1.0f / (1.0f + expf(-x)))
DEF_UNARY(tanh, tanhf(x))

typedef struct {
    un_loop_fn fn;
    const float *x;
    float *o;
    float p;
} un_job_t;

static void un_range(void *ctx, int64_t begin, int64_t end) {
    const un_job_t *j = ctx;
    j->fn(j->x + begin, j->o + begin, end - begin, j->p);
}

static int unary(psg_kernel_ctx_t *c, un_loop_fn fn, float p) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    un_job_t j = {fn, psg_tensor_f32(c->inputs[0]), psg_tensor_f32(out), p};
    int64_t n = psg_tensor_numel(out);
    if (n < PSG_MATH_PARALLEL_MIN)
        un_range(&j, 0, n);
    else
        psg_parallel_for(c->pool, n, PSG_MATH_PARALLEL_MIN / 2, un_range, &j);
    return 0;
}

/* Neg..Tanh: the loop of the prepared function and its constant. */
int psg_cpu_unary(psg_kernel_ctx_t *c) {
    static const un_loop_fn loops[PSG_MATH_FN_COUNT] = {
        [PSG_MATH_NEG] = neg_loop,         [PSG_MATH_SQUARE] = square_loop,
        [PSG_MATH_SQRT] = sqrt_loop,       [PSG_MATH_EXP] = exp_loop,
        [PSG_MATH_LOG] = log_loop,         [PSG_MATH_POW] = pow_loop,
        [PSG_MATH_SCALE] = scale_loop,     [PSG_MATH_RELU] = relu_loop,
        [PSG_MATH_SIGMOID] = sigmoid_loop, [PSG_MATH_TANH] = tanh_loop,
    };
    const psg_math_fn_params_t *p = psg_kernel_params(c);
    PSG_ASSERT(loops[p->fn]);
    return unary(c, loops[p->fn], p->p);
}

/* ---- Dropout ---- */

/* A counter-based generator: element i of step s gets its own hash, so the
 * mask is the same whichever thread makes which chunk. */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct {
    const float *x;
    float *y, *mask; /* each (n) */
    uint64_t key;
    uint32_t threshold; /* keep when 24 random bits >= threshold */
    float scale;
} dropout_job_t;

static void dropout_range(void *ctx, int64_t begin, int64_t end) {
    const dropout_job_t *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        uint32_t r = (uint32_t)(mix64(j->key + (uint64_t)i * 0x9e3779b97f4a7c15ull) >> 40);
        float m = r >= j->threshold ? j->scale : 0.0f;
        j->mask[i] = m;
        j->y[i] = j->x[i] * m;
    }
}

uint64_t psg_math_dropout_key(const psg_node_t *node, int64_t step_id) {
    uint64_t key = (uint64_t)psg_node_get_int(node, "seed", 0) * 0x100000001b3ull;
    for (const char *p = psg_node_name(node); *p; p++)
        key = (key ^ (unsigned char)*p) * 0x100000001b3ull;
    return mix64(key ^ mix64((uint64_t)step_id + 0x632be59bd9b4e019ull));
}

int psg_cpu_dropout(psg_kernel_ctx_t *c) {
    psg_tensor_t *y = psg_kernel_alloc_output(c, 0);
    psg_tensor_t *mask = y ? psg_kernel_alloc_output(c, 1) : NULL;
    if (!mask) return -1;
    double rate = psg_node_get_float(c->node, "rate", 0.0);
    uint64_t key = psg_math_dropout_key(c->node, c->step_id);
    dropout_job_t j = {psg_tensor_f32(c->inputs[0]),  psg_tensor_f32(y),
                       psg_tensor_f32(mask),          key,
                       (uint32_t)(rate * 16777216.0), (float)(1.0 / (1.0 - rate))};
    int64_t n = psg_tensor_numel(y);
    if (n < PSG_MATH_PARALLEL_MIN)
        dropout_range(&j, 0, n);
    else
        psg_parallel_for(c->pool, n, PSG_MATH_PARALLEL_MIN / 2, dropout_range, &j);
    return 0;
}

/* ---- Cast, Equal ---- */

static double load_as_double(const void *p, psg_dtype_t dt, int64_t i) {
    switch (dt) {
    case PSG_DT_F32: return ((const float *)p)[i];
    case PSG_DT_F64: return ((const double *)p)[i];
    case PSG_DT_I32: return ((const int32_t *)p)[i];
    case PSG_DT_I64: return (double)((const int64_t *)p)[i];
    case PSG_DT_BOOL:
    case PSG_DT_U8: return ((const uint8_t *)p)[i];
    case PSG_DT_BF16: return psg_bf16_to_f32(((const uint16_t *)p)[i]);
    case PSG_DT_F16: return psg_f16_to_f32(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

/* Truncates toward zero, saturates, NaN to 0: never undefined behaviour. */
static int64_t to_int(double v, double lo, double hi) {
    if (!(v == v)) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

int psg_cpu_cast(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    psg_tensor_t *out;
    if (psg_cast_setup(c, &out) < 0) return -1;
    if (!out) return 0; /* the same dtype: output 0 is input 0 */
    int64_t n = psg_tensor_numel(out);
    if ((x->dtype == PSG_DT_F32 && psg_dtype_is_half(out->dtype)) ||
        (psg_dtype_is_half(x->dtype) && out->dtype == PSG_DT_F32))
        return psg_cpu_convert_half(c->pool, x->dtype, x->data, out->dtype, out->data, n);
    switch (out->dtype) {
    case PSG_DT_F32: {
        float *o = psg_tensor_f32(out);
        if (x->dtype == PSG_DT_I32) {
            const int32_t *s = psg_tensor_i32(x);
            for (int64_t i = 0; i < n; i++) o[i] = (float)s[i];
        } else {
            for (int64_t i = 0; i < n; i++) o[i] = (float)load_as_double(x->data, x->dtype, i);
        }
        return 0;
    }
    case PSG_DT_I32: {
        int32_t *o = psg_tensor_i32(out);
        for (int64_t i = 0; i < n; i++)
            o[i] =
                (int32_t)to_int(load_as_double(x->data, x->dtype, i), -2147483648.0, 2147483647.0);
        return 0;
    }
    case PSG_DT_I64: {
        int64_t *o = psg_tensor_i64(out);
        if (x->dtype == PSG_DT_I32) {
            const int32_t *s = psg_tensor_i32(x);
            for (int64_t i = 0; i < n; i++) o[i] = s[i];
        } else {
            /* 2^63 is exact in double; the largest double below it is the top */
            for (int64_t i = 0; i < n; i++)
                o[i] = to_int(load_as_double(x->data, x->dtype, i), -9223372036854775808.0,
                              9223372036854774784.0);
        }
        return 0;
    }
    case PSG_DT_BF16:
    case PSG_DT_F16: {
        /* from integers or the other 16-bit type: through f32 (an i64 past 2^24 rounds twice) */
        uint16_t *o = out->data;
        for (int64_t i = 0; i < n; i++) {
            float v = (float)load_as_double(x->data, x->dtype, i);
            o[i] = out->dtype == PSG_DT_BF16 ? psg_f32_to_bf16(v) : psg_f32_to_f16(v);
        }
        return 0;
    }
    default: return psg_error_set("Cast to %s is not supported", psg_dtype_name(out->dtype));
    }
}

int psg_cpu_equal(psg_kernel_ctx_t *c) {
    const psg_tensor_t *a = c->inputs[0], *b = c->inputs[1];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t n = psg_tensor_numel(out);
    int64_t sb = psg_tensor_numel(b) == 1 ? 0 : 1;
    uint8_t *o = out->data;
    size_t es = psg_dtype_size(a->dtype);
    const char *pa = a->data, *pb = b->data;
    if (a->dtype == PSG_DT_F32) {
        const float *fa = psg_tensor_f32(a), *fb = psg_tensor_f32(b);
        for (int64_t i = 0; i < n; i++) o[i] = fa[i] == fb[i * sb];
    } else {
        for (int64_t i = 0; i < n; i++) o[i] = memcmp(pa + i * es, pb + i * sb * es, es) == 0;
    }
    return 0;
}
