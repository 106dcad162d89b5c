/* CUDA kernels that work along axes: Sum/Mean as an (A, R, B) reduction
 * (split along R in two passes when A*B is small) or a general one, sums of
 * squares, row-wise softmax / log-softmax / sparse cross-entropy / argmax (a
 * warp per row), and batch norm over the last dim built on the reductions.
 * Not elementwise ops (elementwise.cu). */
#include "ops/cuda/common.h"
#include "psgraph/half.h"

#include <math.h>

/* A temporary device block, stream-ordered: freed once its kernels are queued. */
typedef struct {
    void *p, *hint;
} tmp_t;

static float *tmp_new(int gpu, tmp_t *t, int64_t floats) {
    t->p = psg_cuda_alloc(gpu, sizeof(float) * (size_t)(floats > 0 ? floats : 1), &t->hint);
    return (float *)t->p;
}

static void tmp_free(tmp_t *t) {
    if (t->p) psg_cuda_free(t->p, t->hint);
    t->p = NULL;
}

__device__ static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

/* The block's sum of v, valid in thread 0 (blockDim.x a multiple of 32, <= 1024). */
__device__ static float block_sum(float v) {
    __shared__ float part[32];
    v = warp_sum(v);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? part[lane] : 0.0f;
    return warp == 0 ? warp_sum(v) : 0.0f;
}

/* ---- (A, R, B) ---- */

/* What a reduction sums at x's element i of channel b: x itself (mean NULL),
 * or batch norm's (x - mean[b]) * inv[b] (inv NULL: 1), squared when sq,
 * times dy[i] when dy is set (the products rounded on their own, not
 * fused into the sum, as when a kernel wrote them out first): the
 * statistics without a temporary tensor written and read again. */
typedef struct {
    const float *mean, *inv, *dy;
    bool sq;
} term_t;

/* Element i of x of dtype DT as f32: exact for the 16-bit floats (batch norm reads a
 * mixed-precision product's output itself, ops/nn.c). */
template <int DT> __device__ static inline float load_f32(const void *x, int64_t i) {
    if (DT == PSG_CU_F32) return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return DT == PSG_CU_BF16 ? psg_bf16_to_f32(h) : psg_f16_to_f32(h);
}

/* v stored as element i of y of dtype DT, rounded as the CPU rounds (psgraph/half.h). */
template <int DT> __device__ static inline void store_f32(void *y, int64_t i, float v) {
    if (DT == PSG_CU_F32)
        ((float *)y)[i] = v;
    else
        ((uint16_t *)y)[i] = DT == PSG_CU_BF16 ? psg_f32_to_bf16(v) : psg_f32_to_f16(v);
}

template <int DT>
__device__ static inline float term_at(const void *x, int64_t i, int64_t b, const term_t &t) {
    float xi = load_f32<DT>(x, i);
    if (!t.mean) return xi;
    float v = (xi - t.mean[b]) * (t.inv ? t.inv[b] : 1.0f);
    return t.sq ? __fmul_rn(v, v) : t.dy ? __fmul_rn(t.dy[i], v) : v;
}

/* o (A, B) = scale * sum over r of x (A, R, 1): a block per row a */
template <int DT>
__global__ static void reduce_rows(const void *x, float *o, int64_t A, int64_t R, float scale,
                                   term_t t) {
    for (int64_t a = blockIdx.x; a < A; a += gridDim.x) {
        float s = 0.0f;
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x) s += term_at<DT>(x, a * R + r, 0, t);
        s = block_sum(s);
        if (threadIdx.x == 0) o[a] = s * scale;
    }
}

/* o (A, P, B) = scale * the sums of x (A, R, B) over the P chunks of R */
template <int DT>
__global__ static void reduce_chunks(const void *x, float *o, int64_t A, int64_t R, int64_t B,
                                     int64_t P, float scale, term_t t) {
    PSG_GRID_STRIDE(i, A * P * B) {
        int64_t b = i % B, p = (i / B) % P, a = i / (B * P);
        int64_t r0 = R * p / P, r1 = R * (p + 1) / P, base = a * R * B + b;
        float s = 0.0f;
        for (int64_t r = r0; r < r1; r++) s += term_at<DT>(x, base + r * B, b, t);
        o[i] = s * scale;
    }
}

/* As reduce_chunks, with a second sum beside it, of t.dy itself, into o2: batch norm's
 * gradient reads dy once for both of its sums. Each sum sees the values in the same order
 * as its own reduce_chunks would: the same results, bit for bit. */
template <int DT>
__global__ static void reduce_chunks_and_dy(const void *x, float *o, float *o2, int64_t A,
                                            int64_t R, int64_t B, int64_t P, float scale,
                                            term_t t) {
    PSG_GRID_STRIDE(i, A * P * B) {
        int64_t b = i % B, p = (i / B) % P, a = i / (B * P);
        int64_t r0 = R * p / P, r1 = R * (p + 1) / P, base = a * R * B + b;
        float s = 0.0f, s2 = 0.0f;
        for (int64_t r = r0; r < r1; r++) {
            s += term_at<DT>(x, base + r * B, b, t);
            s2 += t.dy[base + r * B];
        }
        o[i] = s * scale;
        o2[i] = s2 * scale;
    }
}

/* How many chunks of R a reduction of (A, R, B) takes: enough to fill the GPU, each at least
 * 32 rows. One function for reduce_arb_term and bn_grad_sums: the same chunks give the same
 * sums, bit for bit. */
static int64_t chunks_of(int64_t A, int64_t R, int64_t B) {
    int64_t P = (65536 + A * B - 1) / (A * B), most = (R + 31) / 32;
    if (P > most) P = most;
    return P < 1 ? 1 : P;
}

/* psg_cuda_reduce_arb of term t of x (of dtype DT) */
template <int DT>
static int reduce_arb_term(int gpu, const void *x, float *o, int64_t A, int64_t R, int64_t B,
                           float scale, term_t t) {
    PSG_CUDA_DEV(d, gpu);
    const term_t plain = {NULL, NULL, NULL, false};
    if (A * B == 0) return 0;
    if (R == 0) return psg_cuda_fill(gpu, PSG_CU_F32, o, A * B, 0.0);
    if (B == 1) {
        unsigned grid = (unsigned)(A < 65535 ? A : 65535);
        reduce_rows<DT><<<grid, PSG_CUDA_THREADS, 0, d->compute>>>(x, o, A, R, scale, t);
        PSG_CUDA_LAUNCHED("reduce_rows");
        return 0;
    }
    int64_t P = chunks_of(A, R, B);
    if (P == 1) {
        reduce_chunks<DT><<<psg_cuda_blocks(A * B), PSG_CUDA_THREADS, 0, d->compute>>>(
            x, o, A, R, B, 1, scale, t);
        PSG_CUDA_LAUNCHED("reduce_chunks");
        return 0;
    }
    tmp_t tp = {NULL, NULL};
    float *part = tmp_new(gpu, &tp, A * P * B);
    if (!part) return -1;
    reduce_chunks<DT><<<psg_cuda_blocks(A * P * B), PSG_CUDA_THREADS, 0, d->compute>>>(
        x, part, A, R, B, P, 1.0f, t);
    reduce_chunks<PSG_CU_F32><<<psg_cuda_blocks(A * B), PSG_CUDA_THREADS, 0, d->compute>>>(
        part, o, A, P, B, 1, scale, plain);
    tmp_free(&tp);
    PSG_CUDA_LAUNCHED("reduce_chunks");
    return 0;
}

extern "C" int psg_cuda_reduce_arb(int gpu, const float *x, float *o, int64_t A, int64_t R,
                                   int64_t B, float scale) {
    const term_t plain = {NULL, NULL, NULL, false};
    return reduce_arb_term<PSG_CU_F32>(gpu, x, o, A, R, B, scale, plain);
}

/* ---- any set of axes ---- */

typedef struct {
    int nk, nr; /* kept and reduced dims */
    int64_t kdim[PSG_CU_MAX_RANK], kstride[PSG_CU_MAX_RANK];
    int64_t rdim[PSG_CU_MAX_RANK], rstride[PSG_CU_MAX_RANK];
    int64_t rcount;
} axes_t;

/* o (kept dims) = scale * sum of x over the reduced dims, a thread per output */
__global__ static void reduce_general(const float *x, float *o, axes_t ax, int64_t n, float scale) {
    PSG_GRID_STRIDE(i, n) {
        int64_t rem = i, base = 0;
        for (int k = ax.nk - 1; k >= 0; k--) {
            base += (rem % ax.kdim[k]) * ax.kstride[k];
            rem /= ax.kdim[k];
        }
        float s = 0.0f;
        for (int64_t j = 0; j < ax.rcount; j++) {
            int64_t r = j, off = base;
            for (int k = ax.nr - 1; k >= 0; k--) {
                off += (r % ax.rdim[k]) * ax.rstride[k];
                r /= ax.rdim[k];
            }
            s += x[off];
        }
        o[i] = s * scale;
    }
}

extern "C" int psg_cuda_reduce(int gpu, const float *x, const int64_t *dims, int rank,
                               const bool *reduced, float *o, float scale) {
    PSG_CUDA_DEV(d, gpu);
    axes_t ax;
    memset(&ax, 0, sizeof ax);
    ax.rcount = 1;
    int64_t n = 1, stride = 1, strides[PSG_CU_MAX_RANK];
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = stride;
        stride *= dims[i];
    }
    for (int i = 0; i < rank; i++) {
        if (reduced[i]) {
            ax.rdim[ax.nr] = dims[i];
            ax.rstride[ax.nr++] = strides[i];
            ax.rcount *= dims[i];
        } else {
            ax.kdim[ax.nk] = dims[i];
            ax.kstride[ax.nk++] = strides[i];
            n *= dims[i];
        }
    }
    if (n == 0) return 0;
    reduce_general<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(x, o, ax, n, scale);
    PSG_CUDA_LAUNCHED("reduce_general");
    return 0;
}

/* ---- sum of squares ---- */

/* part (gridDim.x) = per-block sums of x (n) squared */
__global__ static void squares_partial(const float *x, int64_t n, float *part) {
    float s = 0.0f;
    PSG_GRID_STRIDE(i, n) s += x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

extern "C" int psg_cuda_sum_squares(int gpu, const float *x, int64_t n, float scale, float *out) {
    PSG_CUDA_DEV(d, gpu);
    unsigned blocks = psg_cuda_blocks(n);
    if (blocks > 1024) blocks = 1024;
    tmp_t t = {NULL, NULL};
    float *part = tmp_new(gpu, &t, blocks);
    if (!part) return -1;
    const term_t plain = {NULL, NULL, NULL, false};
    squares_partial<<<blocks, PSG_CUDA_THREADS, 0, d->compute>>>(x, n, part);
    reduce_rows<PSG_CU_F32>
        <<<1, PSG_CUDA_THREADS, 0, d->compute>>>(part, out, 1, blocks, scale, plain);
    tmp_free(&t);
    PSG_CUDA_LAUNCHED("sum_squares");
    return 0;
}

/* ---- rows: a warp per row ---- */

#define ROWS_PER_BLOCK (PSG_CUDA_THREADS / 32)

static unsigned row_blocks(int64_t rows) {
    int64_t b = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

#define FOR_EACH_ROW(r, rows)                                                                      \
    for (int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32; r < (rows);          \
         r += (int64_t)gridDim.x * ROWS_PER_BLOCK)

/* The row's max and sum of exp(x - max), in every lane. */
__device__ static void row_stats(const float *x, int64_t c, float *max, float *sum) {
    int lane = threadIdx.x % 32;
    float m = -INFINITY;
    for (int64_t k = lane; k < c; k += 32) m = fmaxf(m, x[k]);
    m = __shfl_sync(0xffffffffu, warp_max(m), 0);
    float s = 0.0f;
    for (int64_t k = lane; k < c; k += 32) s += expf(x[k] - m);
    s = __shfl_sync(0xffffffffu, warp_sum(s), 0);
    *max = m;
    *sum = s;
}

/* y (rows, c) = softmax or log-softmax of x (rows, c) */
__global__ static void softmax_kernel(const float *x, float *y, int64_t rows, int64_t c, bool log) {
    FOR_EACH_ROW(r, rows) {
        const float *xr = x + r * c;
        float *yr = y + r * c;
        float m, s;
        row_stats(xr, c, &m, &s);
        float lse = m + logf(s), inv = 1.0f / s;
        for (int64_t k = threadIdx.x % 32; k < c; k += 32)
            yr[k] = log ? xr[k] - lse : expf(xr[k] - m) * inv;
    }
}

extern "C" int psg_cuda_softmax(int gpu, const float *x, float *y, int64_t rows, int64_t c,
                                bool log) {
    PSG_CUDA_DEV(d, gpu);
    if (rows * c == 0) return 0;
    softmax_kernel<<<row_blocks(rows), PSG_CUDA_THREADS, 0, d->compute>>>(x, y, rows, c, log);
    PSG_CUDA_LAUNCHED("softmax");
    return 0;
}

/* loss (n), back (n, c) from logits (n, c) and labels (n) */
__global__ static void xent_kernel(const float *x, const void *labels, bool i64, float *loss,
                                   float *back, int64_t n, int64_t c) {
    FOR_EACH_ROW(r, n) {
        const float *xr = x + r * c;
        float *br = back + r * c;
        int64_t label = i64 ? ((const int64_t *)labels)[r] : ((const int32_t *)labels)[r];
        bool ok = label >= 0 && label < c;
        float m, s;
        row_stats(xr, c, &m, &s);
        float inv = 1.0f / s;
        for (int64_t k = threadIdx.x % 32; k < c; k += 32)
            br[k] = ok ? expf(xr[k] - m) * inv - (k == label ? 1.0f : 0.0f) : NAN;
        if (threadIdx.x % 32 == 0) loss[r] = ok ? logf(s) + m - xr[label] : NAN;
    }
}

extern "C" int psg_cuda_sparse_xent(int gpu, const float *logits, const void *labels,
                                    bool labels_i64, float *loss, float *back, int64_t n,
                                    int64_t c) {
    PSG_CUDA_DEV(d, gpu);
    if (n == 0) return 0;
    xent_kernel<<<row_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(logits, labels, labels_i64,
                                                                    loss, back, n, c);
    PSG_CUDA_LAUNCHED("sparse_xent");
    return 0;
}

/* out (rows) = the first index of each row's max of x (rows, c) */
__global__ static void argmax_kernel(const float *x, int64_t *out, int64_t rows, int64_t c) {
    FOR_EACH_ROW(r, rows) {
        const float *xr = x + r * c;
        int lane = threadIdx.x % 32;
        int64_t best = -1;
        float bv = 0.0f;
        for (int64_t k = lane; k < c; k += 32)
            if (best < 0 || xr[k] > bv) best = k, bv = xr[k];
        for (int o = 16; o > 0; o >>= 1) {
            int64_t ob = __shfl_down_sync(0xffffffffu, best, o);
            float ov = __shfl_down_sync(0xffffffffu, bv, o);
            if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) best = ob, bv = ov;
        }
        if (lane == 0) out[r] = best < 0 ? 0 : best;
    }
}

extern "C" int psg_cuda_argmax(int gpu, const float *x, int64_t *out, int64_t rows, int64_t c) {
    PSG_CUDA_DEV(d, gpu);
    if (rows == 0) return 0;
    argmax_kernel<<<row_blocks(rows), PSG_CUDA_THREADS, 0, d->compute>>>(x, out, rows, c);
    PSG_CUDA_LAUNCHED("argmax");
    return 0;
}

/* ---- batch norm ---- */

/* Per channel: the statistics and the folded affine y = x * a + b. */
__global__ static void bn_finalize(bool training, float eps, int64_t rows, int64_t c,
                                   const float *sqsum, const float *mean_in, const float *var_in,
                                   const float *scale, const float *offset, float *bmean,
                                   float *bvar, float *smean, float *sinv, float *a, float *b) {
    PSG_GRID_STRIDE(i, c) {
        double var;
        if (training) {
            var = (double)sqsum[i] / (double)rows;
            bvar[i] = (float)(rows > 1 ? (double)sqsum[i] / (double)(rows - 1) : var);
        } else {
            smean[i] = mean_in[i];
            var = var_in[i];
            bvar[i] = var_in[i];
        }
        bmean[i] = smean[i];
        sinv[i] = (float)(1.0 / sqrt(var + (double)eps));
        a[i] = scale[i] * sinv[i];
        b[i] = offset[i] - smean[i] * a[i];
    }
}

/* out (rows, c) = dy * a + (x - mean) * b + k (dy NULL: x * a + b); x of dtype DT, out of
 * dtype OUT */
template <int DT, int OUT>
__global__ static void bn_affine(const void *x, const float *dy, const float *a, const float *b,
                                 const float *k, const float *mean, void *out, int64_t n,
                                 int64_t c) {
    bool narrow = n <= (int64_t)UINT32_MAX; /* 32-bit modulo: 64-bit division is emulated */
    PSG_GRID_STRIDE(i, n) {
        int64_t ch = narrow ? (int64_t)((uint32_t)i % (uint32_t)c) : i % c;
        float xi = load_f32<DT>(x, i);
        store_f32<OUT>(out, i,
                       dy ? dy[i] * a[ch] + (xi - mean[ch]) * b[ch] + k[ch] : xi * a[ch] + b[ch]);
    }
}

/* The statistics of x (rows, c) of dtype DT: smean, and small (c) the sums of the squared
 * deviations. */
template <int DT>
static int bn_moments(int gpu, const void *x, int64_t rows, int64_t c, float *smean, float *small) {
    const term_t plain = {NULL, NULL, NULL, false};
    int rc = reduce_arb_term<DT>(gpu, x, smean, 1, rows, c, 1.0f / (float)rows, plain);
    const term_t squares = {smean, NULL, NULL, true}; /* (x - mean)^2 */
    return rc == 0 ? reduce_arb_term<DT>(gpu, x, small, 1, rows, c, 1.0f, squares) : rc;
}

/* The sums for the gradient: small (c) of dy, small + c of dy (x - mean) inv; in one pass
 * over dy and x (reduce_chunks_and_dy) where reduce_arb_term would take reduce_chunks. */
template <int DT>
static int bn_grad_sums(int gpu, const float *dy, const void *x, int64_t rows, int64_t c,
                        const float *smean, const float *sinv, float *small) {
    PSG_CUDA_DEV(d, gpu);
    const term_t dyx = {smean, sinv, dy, false}; /* dy (x - mean) inv */
    if (c <= 1 || rows == 0) {
        int rc = psg_cuda_reduce_arb(gpu, dy, small, 1, rows, c, 1.0f);
        return rc == 0 ? reduce_arb_term<DT>(gpu, x, small + c, 1, rows, c, 1.0f, dyx) : rc;
    }
    int64_t P = chunks_of(1, rows, c); /* reduce_arb_term's: each sum the same */
    if (P == 1) {
        reduce_chunks_and_dy<DT><<<psg_cuda_blocks(c), PSG_CUDA_THREADS, 0, d->compute>>>(
            x, small + c, small, 1, rows, c, 1, 1.0f, dyx);
        PSG_CUDA_LAUNCHED("reduce_chunks_and_dy");
        return 0;
    }
    tmp_t tp = {NULL, NULL};
    float *part = tmp_new(gpu, &tp, 2 * P * c);
    if (!part) return -1;
    const term_t plain = {NULL, NULL, NULL, false};
    reduce_chunks_and_dy<DT><<<psg_cuda_blocks(P * c), PSG_CUDA_THREADS, 0, d->compute>>>(
        x, part + P * c, part, 1, rows, c, P, 1.0f, dyx);
    for (int k = 0; k < 2; k++)
        reduce_chunks<PSG_CU_F32><<<psg_cuda_blocks(c), PSG_CUDA_THREADS, 0, d->compute>>>(
            part + k * P * c, small + k * c, 1, P, c, 1, 1.0f, plain);
    tmp_free(&tp);
    PSG_CUDA_LAUNCHED("reduce_chunks_and_dy");
    return 0;
}

#define PSG_BN_BY_DTYPE(dt, call)                                                                  \
    ((dt) == PSG_CU_BF16  ? call(PSG_CU_BF16)                                                      \
     : (dt) == PSG_CU_F16 ? call(PSG_CU_F16)                                                       \
                          : call(PSG_CU_F32))

extern "C" int psg_cuda_batch_norm(int gpu, bool training, float eps, int64_t rows, int64_t c,
                                   int x_dtype, const void *x, const float *scale,
                                   const float *offset, const float *mean, const float *var,
                                   float *y, float *bmean, float *bvar, float *smean, float *sinv) {
    PSG_CUDA_DEV(d, gpu);
    if (c == 0) return 0;
    if (training && rows == 0)
        return psg_error_set("batch norm in training needs at least one row");
    int64_t n = rows * c;
    tmp_t s = {NULL, NULL};
    float *small = tmp_new(gpu, &s, 3 * c); /* sqsum, a, b */
    int rc = !small ? -1 : 0;
#define MOMENTS(DT) bn_moments<DT>(gpu, x, rows, c, smean, small)
    if (rc == 0 && training) rc = PSG_BN_BY_DTYPE(x_dtype, MOMENTS);
#undef MOMENTS
    if (rc == 0) {
        bn_finalize<<<psg_cuda_blocks(c), PSG_CUDA_THREADS, 0, d->compute>>>(
            training, eps, rows, c, small, mean, var, scale, offset, bmean, bvar, smean, sinv,
            small + c, small + 2 * c);
#define AFFINE(DT)                                                                                 \
    (bn_affine<DT, PSG_CU_F32><<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(           \
         x, NULL, small + c, small + 2 * c, NULL, NULL, y, n, c),                                  \
     0)
        if (n) (void)PSG_BN_BY_DTYPE(x_dtype, AFFINE);
#undef AFFINE
    }
    tmp_free(&s);
    if (rc < 0) return -1;
    PSG_CUDA_LAUNCHED("batch_norm");
    return 0;
}

/* Per channel: dscale, doffset and the folded dx = dy * a + (x - mean) * b + k. */
__global__ static void bn_grad_finalize(bool training, int64_t rows, int64_t c, const float *sdy,
                                        const float *sdyx, const float *scale, const float *inv,
                                        float *dscale, float *doffset, float *a, float *b,
                                        float *k) {
    PSG_GRID_STRIDE(i, c) {
        double m = rows > 0 ? (double)rows : 1.0;
        doffset[i] = sdy[i];
        dscale[i] = sdyx[i];
        a[i] = scale[i] * inv[i];
        b[i] = training ? (float)(-(double)a[i] * inv[i] * sdyx[i] / m) : 0.0f;
        k[i] = training ? (float)(-(double)a[i] * sdy[i] / m) : 0.0f;
    }
}

extern "C" int psg_cuda_batch_norm_grad(int gpu, bool training, int64_t rows, int64_t c,
                                        int x_dtype, const float *dy, const void *x,
                                        const float *scale, const float *smean, const float *sinv,
                                        void *dx, float *dscale, float *doffset) {
    PSG_CUDA_DEV(d, gpu);
    if (c == 0) return 0;
    int64_t n = rows * c;
    tmp_t s = {NULL, NULL};
    float *small = tmp_new(gpu, &s, 5 * c); /* sdy, sdyx, a, b, k */
    int rc = !small ? -1 : 0;
#define SUMS(DT) bn_grad_sums<DT>(gpu, dy, x, rows, c, smean, sinv, small)
    if (rc == 0 && n) {
        rc = PSG_BN_BY_DTYPE(x_dtype, SUMS);
#undef SUMS
    } else if (rc == 0) {
        rc = psg_cuda_fill(gpu, PSG_CU_F32, small, 2 * c, 0.0);
    }
    if (rc == 0) {
        bn_grad_finalize<<<psg_cuda_blocks(c), PSG_CUDA_THREADS, 0, d->compute>>>(
            training, rows, c, small, small + c, scale, sinv, dscale, doffset, small + 2 * c,
            small + 3 * c, small + 4 * c);
#define AFFINE(DT)                                                                                 \
    (bn_affine<DT, DT><<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(                   \
         x, dy, small + 2 * c, small + 3 * c, small + 4 * c, smean, dx, n, c),                     \
     0)
        if (n) (void)PSG_BN_BY_DTYPE(x_dtype, AFFINE);
#undef AFFINE
    }
    tmp_free(&s);
    if (rc < 0) return -1;
    PSG_CUDA_LAUNCHED("batch_norm_grad");
    return 0;
}
