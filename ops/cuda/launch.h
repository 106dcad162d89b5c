/* The extern "C" launchers of the CUDA kernels, as plain C: each enqueues its
 * work on GPU `gpu`'s compute stream and returns 0, or -1 with the error set.
 * Pointers are device pointers unless said otherwise; shapes are in the
 * comments. The C glue (the .c files of ops/cuda) calls them from the ops' kernels. */
#ifndef PSGRAPH_OPS_CUDA_LAUNCH_H
#define PSGRAPH_OPS_CUDA_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dtype codes: the values of psg_dtype_t (tensor.h is C-only: C11 atomics) */
enum { PSG_CU_F32 = 1, PSG_CU_I32 = 3, PSG_CU_I64 = 4, PSG_CU_U8 = 5, PSG_CU_BOOL = 8 };
enum { PSG_CU_F16 = 6, PSG_CU_BF16 = 7 }; /* the 16-bit floats of mixed precision */

#define PSG_CU_MAX_RANK 8

/* ---- elementwise (elementwise.cu) ---- */

typedef enum {
    PSG_CU_ADD,
    PSG_CU_SUB,
    PSG_CU_MUL,
    PSG_CU_DIV,
    PSG_CU_RELU_GRAD,
    PSG_CU_SIGMOID_GRAD,
    PSG_CU_TANH_GRAD /* a is dy, b the forward output */
} psg_cu_binary_t;

typedef enum {
    PSG_CU_NEG,
    PSG_CU_SQUARE,
    PSG_CU_SQRT,
    PSG_CU_EXP,
    PSG_CU_LOG,
    PSG_CU_POW,
    PSG_CU_SCALE,
    PSG_CU_RELU,
    PSG_CU_SIGMOID,
    PSG_CU_TANH
} psg_cu_unary_t;

/* An output shape and, per dim, the element stride of inputs a and b over
 * it (0 where an input is broadcast). */
typedef struct {
    int rank;
    int64_t dims[PSG_CU_MAX_RANK];
    int64_t sa[PSG_CU_MAX_RANK], sb[PSG_CU_MAX_RANK];
} psg_cu_bcast_t;

/* out (bc->dims) = op(a, b), a and b read through bc->sa, bc->sb */
int psg_cuda_binary(int gpu, psg_cu_binary_t op, const float *a, const float *b, float *out,
                    const psg_cu_bcast_t *bc);
/* y (n) = op(x (n)); p is Pow's exponent or Scale's factor */
int psg_cuda_unary(int gpu, psg_cu_unary_t op, float p, const float *x, float *y, int64_t n);
/* y (bc->dims) = x read through bc->sa (a broadcast) */
int psg_cuda_broadcast(int gpu, const float *x, float *y, const psg_cu_bcast_t *bc);
/* y (n) of dtype = v */
int psg_cuda_fill(int gpu, int dtype, void *y, int64_t n, double v);
/* y (n, dtype `to`) = x (n, dtype `from`); to ints: truncated, saturated, NaN to 0;
 * to bf16 / f16: rounded to nearest even, bit for bit as the CPU (psgraph/half.h) */
int psg_cuda_cast(int gpu, int from, const void *x, int to, void *y, int64_t n);
/* out (n) = a == b; a (n), b (n, or one element when b_scalar), elements of es bytes */
int psg_cuda_equal(int gpu, int dtype, int es, const void *a, const void *b, bool b_scalar,
                   uint8_t *out, int64_t n);
/* y (n) += x (n) */
int psg_cuda_add_into(int gpu, float *y, const float *x, int64_t n);
/* y (rows, C) = x (rows, C) + bias (C), then max(0, .) when relu; y may be x */
int psg_cuda_bias_add(int gpu, const float *x, const float *bias, float *y, int64_t rows, int64_t c,
                      bool relu);
/* y, mask (n) from x (n): the CPU kernel's counter-based hash, so the same mask */
int psg_cuda_dropout(int gpu, const float *x, float *y, float *mask, int64_t n, uint64_t key,
                     uint32_t threshold, float scale);
/* Copies the block `size` (rank dims) of es-byte elements from src (src_dims)
 * at src_begin to dst (dst_dims) at dst_begin. */
int psg_cuda_copy_block(int gpu, int es, int rank, const int64_t *size, const void *src,
                        const int64_t *src_dims, const int64_t *src_begin, void *dst,
                        const int64_t *dst_dims, const int64_t *dst_begin);
/* n bytes within one GPU, on its compute stream */
int psg_cuda_memcpy(int gpu, void *dst, const void *src, size_t n);
/* height rows of width bytes, rows dpitch / spitch bytes apart */
int psg_cuda_memcpy2d(int gpu, void *dst, size_t dpitch, const void *src, size_t spitch,
                      size_t width, size_t height);

/* ---- sparse (sparse.cu) ---- */

/* out (n, row_bytes) = src (rows, row_bytes) at rows ix (n, i32 or i64 as ix64); a
 * negative index gives a zero row when negative_is_zero; *bad gets the count of the
 * other indices outside [0, rows) (their rows zero). Waits for the count. */
int psg_cuda_gather(int gpu, const void *src, int64_t rows, int64_t row_bytes, const void *ix,
                    bool ix64, int64_t n, bool negative_is_zero, void *out, int64_t *bad);

/* ---- reductions and row-wise ops (reduce.cu) ---- */

/* o (A, B) = scale * sum over r of x (A, R, B) */
int psg_cuda_reduce_arb(int gpu, const float *x, float *o, int64_t A, int64_t R, int64_t B,
                        float scale);
/* o = scale * x (dims, rank) summed over the dims flagged in reduced (kept
 * dims in order) */
int psg_cuda_reduce(int gpu, const float *x, const int64_t *dims, int rank, const bool *reduced,
                    float *o, float scale);
/* out (1) = scale * sum of x (n) squared */
int psg_cuda_sum_squares(int gpu, const float *x, int64_t n, float scale, float *out);
/* y (rows, C) = softmax or log-softmax of each row of x (rows, C) */
int psg_cuda_softmax(int gpu, const float *x, float *y, int64_t rows, int64_t c, bool log);
/* loss (N) and back (N, C) = softmax - onehot of logits (N, C) and labels
 * (N, i32 or i64); a label outside [0, C) gives NaN loss and back on its row */
int psg_cuda_sparse_xent(int gpu, const float *logits, const void *labels, bool labels_i64,
                         float *loss, float *back, int64_t n, int64_t c);
/* out (rows) = index of the first maximum of each row of x (rows, C) */
int psg_cuda_argmax(int gpu, const float *x, int64_t *out, int64_t rows, int64_t c);

/* ---- matrix products (blas.cu) ---- */

/* C (M, N) = alpha op(A) op(B) + beta C, row-major, as psg_gemm_f32: op(A)
 * is (M, K): A (M, K) lda, or (K, M) when ta; op(B) is (K, N): B (K, N) ldb,
 * or (N, K) when tb. cuBLAS on the compute stream. */
int psg_cuda_gemm(int gpu, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                  int64_t ldc);
/* C = op(A) op(B) as psg_cuda_gemm (alpha 1, beta 0), with A, B and C of
 * dtype PSG_CU_BF16 or PSG_CU_F16 and f32 accumulation (cublasGemmEx,
 * CUBLAS_COMPUTE_32F: tensor cores, one rounding of each result). */
int psg_cuda_gemm_half(int gpu, int dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       const void *a, int64_t lda, const void *b, int64_t ldb, void *c,
                       int64_t ldc);

/* ---- windows: pooling (pool.cu), convolution (cudnn.cu) ---- */

/* One conv or pool on NHWC tensors, as psg_nn_geom_t. */
typedef struct {
    int64_t n, h, w, c;
    int64_t kh, kw, oc;
    int64_t oh, ow;
    int64_t sh, sw;
    int64_t pt, pl; /* padding before; the rest of SAME's padding goes after */
} psg_cu_geom_t;

/* y (N, OH, OW, C) = max or mean (cells inside the input only) of x's windows */
int psg_cuda_pool(int gpu, bool max, const psg_cu_geom_t *g, const float *x, float *y);
/* dx (N, H, W, C) from x (N, H, W, C) and dy (N, OH, OW, C); max: the first
 * maximum of a window takes its gradient */
int psg_cuda_pool_grad(int gpu, bool max, const psg_cu_geom_t *g, const float *x, const float *dy,
                       float *dx);
/* Average pooling (dy NULL: y into out; else dx into out) through cuDNN where its windows
 * are TensorFlow's (cudnn.cu): 1 when it ran, 0 when g is not such (pool.cu's kernels then),
 * -1 with the error set. */
int psg_cudnn_avg_pool(int gpu, const psg_cu_geom_t *g, const float *x, const float *dy,
                       float *out);
/* The convolutions take tensors of one dtype: PSG_CU_F32 (FMA math, no
 * TF32), or PSG_CU_BF16 / PSG_CU_F16 (tensor cores, f32 compute type). */
/* y (N, OH, OW, OC) = x (N, H, W, C) conv w (KH, KW, C, OC) */
int psg_cuda_conv2d(int gpu, int dtype, const psg_cu_geom_t *g, const void *x, const void *w,
                    void *y);
/* dx (N, H, W, C) from w (KH, KW, C, OC) and dy (N, OH, OW, OC) */
int psg_cuda_conv2d_backprop_input(int gpu, int dtype, const psg_cu_geom_t *g, const void *w,
                                   const void *dy, void *dx);
/* dw (KH, KW, C, OC) from x (N, H, W, C) and dy (N, OH, OW, OC) */
int psg_cuda_conv2d_backprop_filter(int gpu, int dtype, const psg_cu_geom_t *g, const void *x,
                                    const void *dy, void *dw);

/* ---- batch norm over the last dim (reduce.cu) ---- */

/* x, y (rows, C); scale, offset, mean, var, and the outputs bmean, bvar,
 * smean, sinv (C). Training: batch statistics (bvar unbiased), mean and var
 * unused; else mean and var are used. As psg_cpu_fused_batch_norm. */
int psg_cuda_batch_norm(int gpu, bool training, float eps, int64_t rows, int64_t c, int x_dtype,
                        const void *x, const float *scale, const float *offset, const float *mean,
                        const float *var, float *y, float *bmean, float *bvar, float *smean,
                        float *sinv);
/* dx (rows, C), dscale, doffset (C) from dy, x (rows, C), scale, smean, sinv (C); x and dx of
 * x_dtype (PSG_CU_F32, or a 16-bit x read exactly and dx rounded once as the CPU rounds) */
int psg_cuda_batch_norm_grad(int gpu, bool training, int64_t rows, int64_t c, int x_dtype,
                             const float *dy, const void *x, const float *scale, const float *smean,
                             const float *sinv, void *dx, float *dscale, float *doffset);

/* ---- optimizer updates (train.cu) ---- */

typedef enum {
    PSG_CU_SGD,
    PSG_CU_MOMENTUM,
    PSG_CU_RMSPROP,
    PSG_CU_ADAM,
    PSG_CU_ADAGRAD
} psg_cu_rule_t;

/* Updates w (n) and its slots s1, s2 (n, or NULL) by g (n) in place, as the
 * CPU rules. hp holds device pointers to the scalar hyper-parameters in the
 * op's input order: SGD lr; Momentum lr, momentum; RMSProp lr, rho,
 * momentum, epsilon; Adam beta1_power, beta2_power, lr, beta1, beta2,
 * epsilon; Adagrad lr. With check, a gradient holding a NaN or Inf leaves
 * the variable and slots unchanged (decided on the GPU: no host sync). */
int psg_cuda_apply(int gpu, psg_cu_rule_t rule, float *w, float *s1, float *s2, const float *g,
                   int64_t n, const float *const *hp, bool nesterov, bool check);
/* w (n) *= factor (a device scalar) */
int psg_cuda_scale_by(int gpu, float *w, int64_t n, const float *factor);
/* v (n, dtype f32, i32 or i64) += by */
int psg_cuda_increment(int gpu, int dtype, void *v, int64_t n, int64_t by);
/* out (1) = lr * rate ^ (step / steps), floored exponent when staircase;
 * step is one element of dtype f32, i32 or i64 */
int psg_cuda_exponential_decay(int gpu, int dtype, const void *step, float *out, double lr,
                               double steps, double rate, bool staircase);

/* ---- benchmark peers: the libraries called directly, psgraph not involved ---- */

/* Seconds per cublasSgemm of the row-major product (m, k) x (k, n) (ta, tb
 * as psg_cuda_gemm) on its own handle, stream and cudaMalloc'd buffers, over
 * `iters` calls after warm-up, timed with CUDA events. -1 with the error set. */
double psg_cuda_peer_gemm_seconds(int gpu, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                                  int iters);
/* Seconds per call of cuDNN's fastest algorithm (cudnnFind*Ex) for `dir` (0
 * forward, 1 backprop data, 2 backprop filter) of the NHWC f32 convolution g
 * (symmetric padding pt, pl), FMA math as psgraph's, its own handle and
 * buffers. -1 with the error set. */
double psg_cuda_peer_conv_seconds(int gpu, const psg_cu_geom_t *g, int dir, int iters);

#ifdef __cplusplus
}
#endif

#endif
