/* CPU kernels of BiasAdd (y = x + bias over the last dim) and BiasAddGrad
 * (the sum of dy over all but the last dim), split over the pool by rows.
 * Not a general broadcasting add (that is the math ops' Add). */
#include "ops/cpu/nn.h"
#include "psgraph/error.h"

#include <stdlib.h>
#include <string.h>

/* Rows per chunk: about 32K floats, enough to amortize a hand-off. */
static int64_t row_grain(int64_t c) {
    return c > 0 ? 32768 / c + 1 : 1;
}

typedef struct {
    int64_t rows, c;
    const float *x;    /* (rows, C) */
    const float *bias; /* (C) */
    float *y;          /* (rows, C) */
    int64_t parts;
    float *partial; /* (parts, C): BiasAddGrad's sum of each part */
} bias_job_t;

/* Output 0 of c, and the job over input 0 (..., C) as rows of C. NULL on failure. */
static psg_tensor_t *bias_job(psg_kernel_ctx_t *c, bias_job_t *j) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return NULL;
    const psg_shape_t *s = &c->inputs[0]->shape;
    *j = (bias_job_t){.c = s->dims[s->rank - 1], .x = psg_tensor_f32(c->inputs[0])};
    j->rows = j->c > 0 ? psg_tensor_numel(c->inputs[0]) / j->c : 0;
    return out;
}

static void bias_add_rows(void *ctx, int64_t begin, int64_t end) {
    const bias_job_t *j = ctx;
    const int64_t C = j->c;
    const float *restrict b = j->bias;
    for (int64_t r = begin; r < end; r++) {
        const float *restrict x = j->x + r * C;
        float *restrict y = j->y + r * C;
        for (int64_t i = 0; i < C; i++) y[i] = x[i] + b[i];
    }
}

/* inputs: x (..., C), bias (C); output (..., C) */
int psg_cpu_bias_add(psg_kernel_ctx_t *c) {
    bias_job_t j;
    psg_tensor_t *out = bias_job(c, &j);
    if (!out) return -1;
    j.bias = psg_tensor_f32(c->inputs[1]);
    j.y = psg_tensor_f32(out);
    psg_parallel_for(c->pool, j.rows, row_grain(j.c), bias_add_rows, &j);
    return 0;
}

static void bias_grad_parts(void *ctx, int64_t begin, int64_t end) {
    const bias_job_t *j = ctx;
    const int64_t C = j->c;
    for (int64_t p = begin; p < end; p++) {
        float *restrict acc = j->partial + p * C;
        memset(acc, 0, sizeof(float) * (size_t)C);
        int64_t r0 = j->rows * p / j->parts, r1 = j->rows * (p + 1) / j->parts;
        for (int64_t r = r0; r < r1; r++) {
            const float *restrict x = j->x + r * C;
            for (int64_t i = 0; i < C; i++) acc[i] += x[i];
        }
    }
}

/* inputs: dy (..., C); output (C) */
int psg_cpu_bias_add_grad(psg_kernel_ctx_t *c) {
    bias_job_t j;
    psg_tensor_t *out = bias_job(c, &j);
    if (!out) return -1;
    int64_t threads = psg_threadpool_size(c->pool), by_size = j.rows / row_grain(j.c);
    j.parts = by_size < threads ? by_size : threads;
    if (j.parts < 1) j.parts = 1;
    float *acc = psg_tensor_f32(out);
    if (j.parts == 1) {
        j.partial = acc;
        bias_grad_parts(&j, 0, 1);
        return 0;
    }
    j.partial = malloc(sizeof(float) * (size_t)(j.parts * j.c));
    if (!j.partial) return psg_error_set("out of memory");
    psg_parallel_for(c->pool, j.parts, 1, bias_grad_parts, &j);
    memcpy(acc, j.partial, sizeof(float) * (size_t)j.c);
    for (int64_t p = 1; p < j.parts; p++) {
        const float *restrict src = j.partial + p * j.c;
        for (int64_t i = 0; i < j.c; i++) acc[i] += src[i];
    }
    free(j.partial);
    return 0;
}
