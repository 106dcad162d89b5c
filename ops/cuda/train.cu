/* CUDA kernels of the training ops: the optimizer rules of ops/cpu/train.c
 * applied in place, their scalar hyper-parameters read from device memory
 * (no host sync per step), the NaN/Inf check decided on the GPU, and the
 * small state ops. Not the builders (ops/train.c, runtime/optimizer.c). */
#include "ops/cuda/common.h"

#include <math.h>

typedef struct {
    const float *hp[6]; /* device scalars, in the op's input order */
} hyper_t;

/* *bad = 1 when g (n) holds a NaN or Inf */
__global__ static void scan_kernel(const float *g, int64_t n, int *bad) {
    PSG_GRID_STRIDE(i, n) if (!isfinite(g[i])) *bad = 1;
}

/* w, s1, s2, g are (n); skipped entirely when *bad (bad may be NULL) */
__global__ static void apply_kernel(int rule, float *w, float *s1, float *s2, const float *g,
                                    int64_t n, hyper_t h, bool nesterov, const int *bad) {
    if (bad && *bad) return;
    float lr, a = 0.0f, b = 0.0f, eps = 0.0f;
    switch (rule) {
    case PSG_CU_MOMENTUM: lr = *h.hp[0], a = *h.hp[1]; break;
    case PSG_CU_RMSPROP: lr = *h.hp[0], a = *h.hp[1], b = *h.hp[2], eps = *h.hp[3]; break;
    case PSG_CU_ADAM: {
        float b1p = *h.hp[0], b2p = *h.hp[1];
        lr = *h.hp[2] * sqrtf(1.0f - b2p) / (1.0f - b1p);
        a = *h.hp[3], b = *h.hp[4], eps = *h.hp[5];
        break;
    }
    default: lr = *h.hp[0]; break; /* SGD, Adagrad */
    }
    PSG_GRID_STRIDE(i, n) {
        float gi = g[i];
        switch (rule) {
        case PSG_CU_SGD: w[i] -= lr * gi; break;
        case PSG_CU_MOMENTUM: {
            float acc = s1[i] * a + gi;
            s1[i] = acc;
            w[i] -= nesterov ? gi * lr + acc * a * lr : lr * acc;
            break;
        }
        case PSG_CU_RMSPROP: {
            float ms = a * s1[i] + (1.0f - a) * gi * gi;
            float mom = b * s2[i] + lr * gi / sqrtf(ms + eps);
            s1[i] = ms;
            s2[i] = mom;
            w[i] -= mom;
            break;
        }
        case PSG_CU_ADAM: {
            float m = s1[i] + (gi - s1[i]) * (1.0f - a);
            float v = s2[i] + (gi * gi - s2[i]) * (1.0f - b);
            s1[i] = m;
            s2[i] = v;
            w[i] -= lr * m / (sqrtf(v) + eps);
            break;
        }
        default: { /* Adagrad */
            float acc = s1[i] + gi * gi;
            s1[i] = acc;
            w[i] -= lr * gi / sqrtf(acc);
            break;
        }
        }
    }
}

extern "C" int psg_cuda_apply(int gpu, psg_cu_rule_t rule, float *w, float *s1, float *s2,
                              const float *g, int64_t n, const float *const *hp, bool nesterov,
                              bool check) {
    PSG_CUDA_DEV(d, gpu);
    static const int num_hp[] = {1, 2, 4, 6, 1};
    hyper_t h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < num_hp[rule]; i++) h.hp[i] = hp[i];
    if (n == 0) return 0;
    void *hint = NULL;
    int *bad = NULL;
    if (check) {
        bad = (int *)psg_cuda_alloc(gpu, sizeof(int), &hint);
        if (!bad) return -1;
        cudaError_t e = cudaMemsetAsync(bad, 0, sizeof(int), d->compute);
        if (e != cudaSuccess) {
            psg_cuda_free(bad, hint);
            PSG_CUDA_CHECK(e);
        }
        scan_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(g, n, bad);
    }
    apply_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>((int)rule, w, s1, s2, g,
                                                                          n, h, nesterov, bad);
    if (bad) psg_cuda_free(bad, hint);
    PSG_CUDA_LAUNCHED("apply");
    return 0;
}

/* w (n) *= *factor */
__global__ static void scale_by_kernel(float *w, int64_t n, const float *factor) {
    float f = *factor;
    PSG_GRID_STRIDE(i, n) w[i] *= f;
}

extern "C" int psg_cuda_scale_by(int gpu, float *w, int64_t n, const float *factor) {
    PSG_CUDA_DEV(d, gpu);
    if (n == 0) return 0;
    scale_by_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(w, n, factor);
    PSG_CUDA_LAUNCHED("scale_by");
    return 0;
}

/* v (n) += by */
__global__ static void increment_kernel(int dt, void *v, int64_t n, int64_t by) {
    PSG_GRID_STRIDE(i, n) {
        if (dt == PSG_CU_I64)
            ((int64_t *)v)[i] += by;
        else if (dt == PSG_CU_I32)
            ((int32_t *)v)[i] += (int32_t)by;
        else
            ((float *)v)[i] += (float)by;
    }
}

extern "C" int psg_cuda_increment(int gpu, int dtype, void *v, int64_t n, int64_t by) {
    PSG_CUDA_DEV(d, gpu);
    if (dtype != PSG_CU_I64 && dtype != PSG_CU_I32 && dtype != PSG_CU_F32)
        return psg_error_set("cannot increment a variable of dtype %d", dtype);
    if (n == 0) return 0;
    increment_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(dtype, v, n, by);
    PSG_CUDA_LAUNCHED("increment");
    return 0;
}

/* out (1) from step (1) */
__global__ static void decay_kernel(int dt, const void *step, float *out, double lr, double steps,
                                    double rate, bool staircase) {
    double s = dt == PSG_CU_I64   ? (double)*(const int64_t *)step
               : dt == PSG_CU_I32 ? (double)*(const int32_t *)step
                                  : (double)*(const float *)step;
    double p = s / steps;
    if (staircase) p = floor(p);
    *out = (float)(lr * pow(rate, p));
}

extern "C" int psg_cuda_exponential_decay(int gpu, int dtype, const void *step, float *out,
                                          double lr, double steps, double rate, bool staircase) {
    PSG_CUDA_DEV(d, gpu);
    decay_kernel<<<1, 1, 0, d->compute>>>(dtype, step, out, lr, steps, rate, staircase);
    PSG_CUDA_LAUNCHED("exponential_decay");
    return 0;
}
