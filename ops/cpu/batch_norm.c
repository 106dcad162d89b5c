/* CPU kernels of FusedBatchNorm and FusedBatchNormGrad over the last
 * (channel) dim, f32 (x also bf16 / f16, through an f32 copy) with per-channel
 * sums in double, split over the pool by rows. Not the moving averages: the model updates those
 * (see ops/nn.c). */
#include "ops/cpu/half.h"
#include "ops/cpu/nn.h"
#include "psgraph/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SUM_X, SUM_SQDEV, SUM_DY_XHAT };

typedef struct {
    int mode;
    int64_t rows, c, parts;
    const float *x;       /* (rows, C) */
    const float *dy;      /* (rows, C) */
    const float *mean;    /* (C) */
    const float *inv_std; /* (C) */
    double *acc;          /* (parts, 2, C): per-part sums */
} sums_job_t;

static void sums_parts(void *ctx, int64_t begin, int64_t end) {
    const sums_job_t *j = ctx;
    const int64_t C = j->c;
    for (int64_t p = begin; p < end; p++) {
        double *restrict a0 = j->acc + p * 2 * C, *restrict a1 = a0 + C;
        memset(a0, 0, sizeof(double) * (size_t)(2 * C));
        int64_t r0 = j->rows * p / j->parts, r1 = j->rows * (p + 1) / j->parts;
        const float *restrict m = j->mean, *restrict s = j->inv_std;
        for (int64_t r = r0; r < r1; r++) {
            const float *restrict x = j->x + r * C;
            if (j->mode == SUM_X) {
                for (int64_t i = 0; i < C; i++) a0[i] += x[i];
            } else if (j->mode == SUM_SQDEV) {
                for (int64_t i = 0; i < C; i++) {
                    float d = x[i] - m[i];
                    a0[i] += d * d;
                }
            } else {
                const float *restrict dy = j->dy + r * C;
                for (int64_t i = 0; i < C; i++) {
                    a0[i] += dy[i];
                    a1[i] += dy[i] * ((x[i] - m[i]) * s[i]);
                }
            }
        }
    }
}

/* Per-channel sums over all rows into out0 (and out1 for SUM_DY_XHAT). */
static int channel_sums(psg_threadpool_t *pool, sums_job_t *j, double *out0, double *out1) {
    int64_t threads = psg_threadpool_size(pool), by_size = j->rows * j->c / 65536;
    j->parts = by_size < threads ? by_size : threads;
    if (j->parts < 1) j->parts = 1;
    j->acc = malloc(sizeof(double) * (size_t)(j->parts * 2 * j->c));
    if (!j->acc) return psg_error_set("out of memory");
    psg_parallel_for(pool, j->parts, 1, sums_parts, j);
    for (int64_t i = 0; i < j->c; i++) {
        double s0 = 0, s1 = 0;
        for (int64_t p = 0; p < j->parts; p++) {
            s0 += j->acc[p * 2 * j->c + i];
            s1 += j->acc[p * 2 * j->c + j->c + i];
        }
        out0[i] = s0;
        if (out1) out1[i] = s1;
    }
    free(j->acc);
    return 0;
}

/* y = x * a + b per channel (forward), or dx = dy * a + (x - mean) * b + k
 * (backward, the three-term formula folded per channel). */
typedef struct {
    int64_t c;
    const float *x;                /* (rows, C) */
    const float *dy;               /* (rows, C), NULL in the forward */
    const float *a, *b, *k, *mean; /* (C) */
    float *out;                    /* (rows, C) */
} affine_job_t;

static void affine_rows(void *ctx, int64_t begin, int64_t end) {
    const affine_job_t *j = ctx;
    const int64_t C = j->c;
    const float *restrict a = j->a, *restrict b = j->b;
    for (int64_t r = begin; r < end; r++) {
        const float *restrict x = j->x + r * C;
        float *restrict o = j->out + r * C;
        if (!j->dy) {
            for (int64_t i = 0; i < C; i++) o[i] = x[i] * a[i] + b[i];
        } else {
            const float *restrict dy = j->dy + r * C, *restrict k = j->k, *restrict m = j->mean;
            for (int64_t i = 0; i < C; i++) o[i] = dy[i] * a[i] + (x[i] - m[i]) * b[i] + k[i];
        }
    }
}

static void run_affine(psg_threadpool_t *pool, int64_t rows, affine_job_t *j) {
    psg_parallel_for(pool, rows, j->c > 0 ? 32768 / j->c + 1 : 1, affine_rows, j);
}

float psg_batch_norm_inv_std(float var, float eps) {
    return (float)(1.0 / sqrt((double)var + eps));
}

void psg_batch_norm_affine(int64_t c, const float *scale, const float *offset, const float *mean,
                           const float *inv_std, float *a, float *b) {
    for (int64_t i = 0; i < c; i++) {
        a[i] = scale[i] * inv_std[i];
        b[i] = offset[i] - mean[i] * a[i];
    }
}

/* inputs: x (..., C), scale (C), offset (C) [, mean (C), variance (C)]
 * outputs: y (..., C), batch_mean (C), batch_var (C, unbiased in training),
 * saved_mean (C), saved_inv_std (C) */
int psg_cpu_fused_batch_norm(psg_kernel_ctx_t *c) {
    /* a 16-bit x (ops/nn.c): read exactly as f32, the same as the Cast it replaces */
    if (psg_dtype_is_half(c->inputs[0]->dtype))
        return psg_cpu_run_as_f32(c, psg_cpu_fused_batch_norm);
    bool training = psg_node_get_bool(c->node, "is_training", true);
    float eps = (float)psg_node_get_float(c->node, "epsilon", 1e-3);
    for (int o = 0; o < 5; o++)
        if (!psg_kernel_alloc_output(c, o)) return -1;
    const psg_shape_t *s = &c->inputs[0]->shape;
    int64_t C = s->dims[s->rank - 1], rows = C > 0 ? psg_tensor_numel(c->inputs[0]) / C : 0;
    const float *x = psg_tensor_f32(c->inputs[0]);
    const float *scale = psg_tensor_f32(c->inputs[1]), *offset = psg_tensor_f32(c->inputs[2]);
    float *bmean = psg_tensor_f32(c->outputs[1]), *bvar = psg_tensor_f32(c->outputs[2]);
    float *smean = psg_tensor_f32(c->outputs[3]), *sinv = psg_tensor_f32(c->outputs[4]);
    float *a = malloc(sizeof(float) * (size_t)(2 * C + 1));
    double *sum = malloc(sizeof(double) * (size_t)(C + 1));
    if (!a || !sum) {
        free(a);
        free(sum);
        return psg_error_set("out of memory");
    }
    float *b = a + C;
    int rc = 0;
    if (training) {
        if (rows == 0) {
            rc = psg_error_set("batch norm in training needs at least one row");
            goto done;
        }
        sums_job_t j = {.mode = SUM_X, .rows = rows, .c = C, .x = x};
        if ((rc = channel_sums(c->pool, &j, sum, NULL)) < 0) goto done;
        for (int64_t i = 0; i < C; i++) smean[i] = (float)(sum[i] / (double)rows);
        j = (sums_job_t){.mode = SUM_SQDEV, .rows = rows, .c = C, .x = x, .mean = smean};
        if ((rc = channel_sums(c->pool, &j, sum, NULL)) < 0) goto done;
        for (int64_t i = 0; i < C; i++) {
            double var = sum[i] / (double)rows;
            sinv[i] = (float)(1.0 / sqrt(var + eps));
            bmean[i] = smean[i];
            bvar[i] = (float)(rows > 1 ? sum[i] / (double)(rows - 1) : var);
        }
    } else {
        const float *mean = psg_tensor_f32(c->inputs[3]), *var = psg_tensor_f32(c->inputs[4]);
        for (int64_t i = 0; i < C; i++) {
            smean[i] = bmean[i] = mean[i];
            bvar[i] = var[i];
            sinv[i] = psg_batch_norm_inv_std(var[i], eps);
        }
    }
    psg_batch_norm_affine(C, scale, offset, smean, sinv, a, b);
    affine_job_t aj = {.c = C, .x = x, .a = a, .b = b, .out = psg_tensor_f32(c->outputs[0])};
    run_affine(c->pool, rows, &aj);
done:
    free(a);
    free(sum);
    return rc;
}

/* inputs: dy (..., C), x (..., C), scale (C), saved_mean (C), saved_inv_std (C)
 * outputs: dx (..., C), dscale (C), doffset (C) */
int psg_cpu_fused_batch_norm_grad(psg_kernel_ctx_t *c) {
    /* a 16-bit x: dx computed in f32 and rounded once, as the Cast's gradient rounded it */
    if (psg_dtype_is_half(c->inputs[1]->dtype))
        return psg_cpu_run_as_f32(c, psg_cpu_fused_batch_norm_grad);
    bool training = psg_node_get_bool(c->node, "is_training", true);
    for (int o = 0; o < 3; o++)
        if (!psg_kernel_alloc_output(c, o)) return -1;
    const psg_shape_t *s = &c->inputs[0]->shape;
    int64_t C = s->dims[s->rank - 1], rows = C > 0 ? psg_tensor_numel(c->inputs[0]) / C : 0;
    const float *dy = psg_tensor_f32(c->inputs[0]), *x = psg_tensor_f32(c->inputs[1]);
    const float *scale = psg_tensor_f32(c->inputs[2]), *mean = psg_tensor_f32(c->inputs[3]);
    const float *inv = psg_tensor_f32(c->inputs[4]);
    float *dscale = psg_tensor_f32(c->outputs[1]), *doffset = psg_tensor_f32(c->outputs[2]);
    float *a = malloc(sizeof(float) * (size_t)(3 * C + 1));
    double *sum = malloc(sizeof(double) * (size_t)(2 * C + 1));
    if (!a || !sum) {
        free(a);
        free(sum);
        return psg_error_set("out of memory");
    }
    float *b = a + C, *k = b + C;
    sums_job_t j = {
        .mode = SUM_DY_XHAT, .rows = rows, .c = C, .x = x, .dy = dy, .mean = mean, .inv_std = inv};
    int rc = channel_sums(c->pool, &j, sum, sum + C);
    if (rc == 0) {
        for (int64_t i = 0; i < C; i++) {
            double sdy = sum[i], sdyx = sum[C + i], m = rows > 0 ? (double)rows : 1.0;
            doffset[i] = (float)sdy;
            dscale[i] = (float)sdyx;
            /* training: dx = scale*inv/M * (M*dy - sum(dy) - xhat*sum(dy*xhat)) */
            a[i] = scale[i] * inv[i];
            b[i] = training ? (float)(-(double)a[i] * inv[i] * sdyx / m) : 0.0f;
            k[i] = training ? (float)(-(double)a[i] * sdy / m) : 0.0f;
        }
        affine_job_t aj = {.c = C,
                           .x = x,
                           .dy = dy,
                           .a = a,
                           .b = b,
                           .k = k,
                           .mean = mean,
                           .out = psg_tensor_f32(c->outputs[0])};
        run_affine(c->pool, rows, &aj);
    }
    free(a);
    free(sum);
    return rc;
}
