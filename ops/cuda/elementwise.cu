/* CUDA kernels of the elementwise ops: binary arithmetic with numpy
 * broadcasting (a flat fast path when no input is broadcast), unary
 * functions, casts (to and from bf16 / f16 too, rounding as the CPU),
 * comparisons, fills, bias add, dropout, block copies. Grid-stride loops,
 * f32. Not reductions (reduce.cu). */
#include "ops/cuda/common.h"
#include "psgraph/half.h"

#include <math.h>

/* ---- binary ---- */

__device__ static inline float binary_op(int op, float x, float y) {
    switch (op) {
    case PSG_CU_ADD: return x + y;
    case PSG_CU_SUB: return x - y;
    case PSG_CU_MUL: return x * y;
    case PSG_CU_DIV: return x / y;
    case PSG_CU_RELU_GRAD: return y > 0.0f ? x : 0.0f;
    case PSG_CU_SIGMOID_GRAD: return x * y * (1.0f - y);
    default: return x * (1.0f - y * y); /* PSG_CU_TANH_GRAD */
    }
}

/* a, b, out are (n): no broadcast, or a scalar a / b (stride 0) */
__global__ static void binary_flat(int op, const float *a, int64_t sa, const float *b, int64_t sb,
                                   float *out, int64_t n) {
    PSG_GRID_STRIDE(i, n) out[i] = binary_op(op, a[i * sa], b[i * sb]);
}

/* out is (bc.dims); a and b through bc.sa, bc.sb */
__global__ static void binary_bcast(int op, const float *a, const float *b, float *out,
                                    psg_cu_bcast_t bc, int64_t n) {
    PSG_GRID_STRIDE(i, n) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = bc.rank - 1; d >= 0; d--) {
            int64_t idx = rem % bc.dims[d];
            rem /= bc.dims[d];
            oa += idx * bc.sa[d];
            ob += idx * bc.sb[d];
        }
        out[i] = binary_op(op, a[oa], b[ob]);
    }
}

static int64_t bc_numel(const psg_cu_bcast_t *bc) {
    int64_t n = 1;
    for (int d = 0; d < bc->rank; d++) n *= bc->dims[d];
    return n;
}

/* 1: strides are the dense ones of dims; 0: all zero; -1: neither */
static int stride_kind(const psg_cu_bcast_t *bc, const int64_t *s) {
    int64_t dense = 1;
    bool is_dense = true, is_zero = true;
    for (int d = bc->rank - 1; d >= 0; d--) {
        if (bc->dims[d] != 1 && s[d] != dense) is_dense = false;
        if (bc->dims[d] != 1 && s[d] != 0) is_zero = false;
        dense *= bc->dims[d];
    }
    return is_dense ? 1 : is_zero ? 0 : -1;
}

extern "C" int psg_cuda_binary(int gpu, psg_cu_binary_t op, const float *a, const float *b,
                               float *out, const psg_cu_bcast_t *bc) {
    PSG_CUDA_DEV(d, gpu);
    int64_t n = bc_numel(bc);
    if (n == 0) return 0;
    int ka = stride_kind(bc, bc->sa), kb = stride_kind(bc, bc->sb);
    if (ka >= 0 && kb >= 0)
        binary_flat<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>((int)op, a, ka, b, kb,
                                                                             out, n);
    else
        binary_bcast<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>((int)op, a, b, out,
                                                                              *bc, n);
    PSG_CUDA_LAUNCHED("binary");
    return 0;
}

__global__ static void broadcast_kernel(const float *x, float *y, psg_cu_bcast_t bc, int64_t n) {
    PSG_GRID_STRIDE(i, n) {
        int64_t rem = i, ox = 0;
        for (int d = bc.rank - 1; d >= 0; d--) {
            ox += (rem % bc.dims[d]) * bc.sa[d];
            rem /= bc.dims[d];
        }
        y[i] = x[ox];
    }
}

extern "C" int psg_cuda_broadcast(int gpu, const float *x, float *y, const psg_cu_bcast_t *bc) {
    PSG_CUDA_DEV(d, gpu);
    int64_t n = bc_numel(bc);
    if (n == 0) return 0;
    broadcast_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(x, y, *bc, n);
    PSG_CUDA_LAUNCHED("broadcast");
    return 0;
}

/* ---- unary ---- */

/* x, y are (n) */
__global__ static void unary_kernel(int op, float p, const float *x, float *y, int64_t n) {
    PSG_GRID_STRIDE(i, n) {
        float v = x[i], r;
        switch (op) {
        case PSG_CU_NEG: r = -v; break;
        case PSG_CU_SQUARE: r = v * v; break;
        case PSG_CU_SQRT: r = sqrtf(v); break;
        case PSG_CU_EXP: r = expf(v); break;
        case PSG_CU_LOG: r = logf(v); break;
        case PSG_CU_POW: r = powf(v, p); break;
        case PSG_CU_SCALE: r = v * p; break;
        case PSG_CU_RELU: r = v > 0.0f ? v : 0.0f; break;
        case PSG_CU_SIGMOID: r = 1.0f / (1.0f + expf(-v)); break;
        default: r = tanhf(v); break;
        }
        y[i] = r;
    }
}

extern "C" int psg_cuda_unary(int gpu, psg_cu_unary_t op, float p, const float *x, float *y,
                              int64_t n) {
    PSG_CUDA_DEV(d, gpu);
    if (n == 0) return 0;
    unary_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>((int)op, p, x, y, n);
    PSG_CUDA_LAUNCHED("unary");
    return 0;
}

/* ---- fill, cast, equal ---- */

__device__ static inline double load_as_double(const void *p, int dt, int64_t i) {
    switch (dt) {
    case PSG_CU_F32: return ((const float *)p)[i];
    case PSG_CU_I32: return ((const int32_t *)p)[i];
    case PSG_CU_I64: return (double)((const int64_t *)p)[i];
    case PSG_CU_BF16: return psg_bf16_to_f32(((const uint16_t *)p)[i]);
    case PSG_CU_F16: return psg_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const uint8_t *)p)[i]; /* u8, bool */
    }
}

/* Truncates toward zero, saturates, NaN to 0, as the CPU kernel. */
__device__ static inline int64_t to_int(double v, double lo, double hi) {
    if (!(v == v)) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

/* y (n) of dtype `to` from the doubles of x (n) of dtype `from`; fill: x NULL, value v */
__global__ static void convert_kernel(int from, const void *x, double v, int to, void *y,
                                      int64_t n) {
    PSG_GRID_STRIDE(i, n) {
        double s = x ? load_as_double(x, from, i) : v;
        switch (to) {
        case PSG_CU_F32: ((float *)y)[i] = (float)s; break;
        case PSG_CU_I32: ((int32_t *)y)[i] = (int32_t)to_int(s, -2147483648.0, 2147483647.0); break;
        case PSG_CU_BF16: /* through f32, as the CPU */
            ((uint16_t *)y)[i] = psg_f32_to_bf16((float)s);
            break;
        case PSG_CU_F16: ((uint16_t *)y)[i] = psg_f32_to_f16((float)s); break;
        default:
            ((int64_t *)y)[i] = to_int(s, -9223372036854775808.0, 9223372036854774784.0);
            break;
        }
    }
}

static bool convertible(int dt) {
    return dt == PSG_CU_F32 || dt == PSG_CU_I32 || dt == PSG_CU_I64 || dt == PSG_CU_BF16 ||
           dt == PSG_CU_F16;
}

static bool is_half(int dt) {
    return dt == PSG_CU_BF16 || dt == PSG_CU_F16;
}

/* One value to or from bf16 (bf) or f16, rounding as the CPU (psgraph/half.h). */
__device__ static inline uint16_t to_half(float v, bool bf) {
    return bf ? psg_f32_to_bf16(v) : psg_f32_to_f16(v);
}
__device__ static inline float from_half(uint16_t h, bool bf) {
    return bf ? psg_bf16_to_f32(h) : psg_f16_to_f32(h);
}

/* y (n) = x (n) between f32 and bf16 / f16 (mixed precision's casts), in
 * float: memory bound, so no doubles */
__global__ static void half_kernel(int from, const void *x, int to, void *y, int64_t n) {
    PSG_GRID_STRIDE(i, n) {
        if (from == PSG_CU_F32)
            ((uint16_t *)y)[i] = to_half(((const float *)x)[i], to == PSG_CU_BF16);
        else
            ((float *)y)[i] = from_half(((const uint16_t *)x)[i], from == PSG_CU_BF16);
    }
}

/* As half_kernel, four elements a thread (16-byte f32 and 8-byte 16-bit
 * accesses: the casts of mixed precision move whole activations, and the
 * one-element kernel reached a fraction of the memory's bandwidth on them);
 * n4 = n / 4, for n % 4 == 0 and x, y aligned to their vectors. */
__global__ static void half_kernel4(int from, const void *x, int to, void *y, int64_t n4) {
    bool bf = from == PSG_CU_BF16 || to == PSG_CU_BF16;
    PSG_GRID_STRIDE(i, n4) {
        if (from == PSG_CU_F32) {
            float4 v = ((const float4 *)x)[i];
            ((ushort4 *)y)[i] = make_ushort4(to_half(v.x, bf), to_half(v.y, bf), to_half(v.z, bf),
                                             to_half(v.w, bf));
        } else {
            ushort4 h = ((const ushort4 *)x)[i];
            ((float4 *)y)[i] = make_float4(from_half(h.x, bf), from_half(h.y, bf),
                                           from_half(h.z, bf), from_half(h.w, bf));
        }
    }
}

/* Whether a cast of n elements between x and y can take four at a time. */
static bool vector_cast(const void *x, const void *y, int64_t n) {
    return n % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
}

extern "C" int psg_cuda_fill(int gpu, int dtype, void *y, int64_t n, double v) {
    PSG_CUDA_DEV(d, gpu);
    if (!convertible(dtype)) return psg_error_set("fill: unsupported dtype %d", dtype);
    if (n == 0) return 0;
    convert_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(dtype, NULL, v, dtype,
                                                                            y, n);
    PSG_CUDA_LAUNCHED("fill");
    return 0;
}

extern "C" int psg_cuda_cast(int gpu, int from, const void *x, int to, void *y, int64_t n) {
    PSG_CUDA_DEV(d, gpu);
    if (!convertible(to)) return psg_error_set("Cast to dtype %d is not supported", to);
    if (n == 0) return 0;
    if (((from == PSG_CU_F32 && is_half(to)) || (is_half(from) && to == PSG_CU_F32)) &&
        vector_cast(x, y, n)) {
        half_kernel4<<<psg_cuda_blocks(n / 4), PSG_CUDA_THREADS, 0, d->compute>>>(from, x, to, y,
                                                                                  n / 4);
        PSG_CUDA_LAUNCHED("cast");
        return 0;
    }
    if ((from == PSG_CU_F32 && is_half(to)) || (is_half(from) && to == PSG_CU_F32)) {
        half_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(from, x, to, y, n);
        PSG_CUDA_LAUNCHED("cast");
        return 0;
    }
    convert_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(from, x, 0.0, to, y, n);
    PSG_CUDA_LAUNCHED("cast");
    return 0;
}

/* out (n) = a (n) == b (n or 1): as floats for f32, else byte for byte */
__global__ static void equal_kernel(bool f32, int es, const uint8_t *a, const uint8_t *b,
                                    int64_t sb, uint8_t *out, int64_t n) {
    PSG_GRID_STRIDE(i, n) {
        if (f32) {
            out[i] = ((const float *)a)[i] == ((const float *)b)[i * sb];
        } else {
            bool eq = true;
            for (int k = 0; k < es; k++) eq = eq && a[i * es + k] == b[i * sb * es + k];
            out[i] = eq;
        }
    }
}

extern "C" int psg_cuda_equal(int gpu, int dtype, int es, const void *a, const void *b,
                              bool b_scalar, uint8_t *out, int64_t n) {
    PSG_CUDA_DEV(d, gpu);
    if (n == 0) return 0;
    equal_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(
        dtype == PSG_CU_F32, es, (const uint8_t *)a, (const uint8_t *)b, b_scalar ? 0 : 1, out, n);
    PSG_CUDA_LAUNCHED("equal");
    return 0;
}

/* ---- accumulate, bias add ---- */

/* y (n) += x (n) */
__global__ static void add_into_kernel(float *y, const float *x, int64_t n) {
    PSG_GRID_STRIDE(i, n) y[i] += x[i];
}

extern "C" int psg_cuda_add_into(int gpu, float *y, const float *x, int64_t n) {
    PSG_CUDA_DEV(d, gpu);
    if (n == 0) return 0;
    add_into_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(y, x, n);
    PSG_CUDA_LAUNCHED("add_into");
    return 0;
}

/* y (rows, c) = x (rows, c) + bias (c), ReLU'd when relu */
__global__ static void bias_add_kernel(const float *x, const float *bias, float *y, int64_t n,
                                       int64_t c, bool relu) {
    PSG_GRID_STRIDE(i, n) {
        float v = x[i] + bias[i % c];
        y[i] = relu && !(v > 0.0f) ? 0.0f : v;
    }
}

extern "C" int psg_cuda_bias_add(int gpu, const float *x, const float *bias, float *y, int64_t rows,
                                 int64_t c, bool relu) {
    PSG_CUDA_DEV(d, gpu);
    int64_t n = rows * c;
    if (n == 0) return 0;
    bias_add_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(x, bias, y, n, c,
                                                                             relu);
    PSG_CUDA_LAUNCHED("bias_add");
    return 0;
}

/* ---- dropout: the CPU kernel's generator ---- */

__device__ static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* x, y, mask are (n) */
__global__ static void dropout_kernel(const float *x, float *y, float *mask, int64_t n,
                                      uint64_t key, uint32_t threshold, float scale) {
    PSG_GRID_STRIDE(i, n) {
        uint32_t r = (uint32_t)(mix64(key + (uint64_t)i * 0x9e3779b97f4a7c15ull) >> 40);
        float m = r >= threshold ? scale : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

extern "C" int psg_cuda_dropout(int gpu, const float *x, float *y, float *mask, int64_t n,
                                uint64_t key, uint32_t threshold, float scale) {
    PSG_CUDA_DEV(d, gpu);
    if (n == 0) return 0;
    dropout_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(x, y, mask, n, key,
                                                                            threshold, scale);
    PSG_CUDA_LAUNCHED("dropout");
    return 0;
}

/* ---- block copies (Slice, SliceGrad, the conv's padding) ---- */

typedef struct {
    int rank;
    int64_t size[PSG_CU_MAX_RANK];
    int64_t ss[PSG_CU_MAX_RANK], ds[PSG_CU_MAX_RANK]; /* element strides of src and dst */
    int64_t so, doff;                                 /* element offsets of the block */
} block_t;

/* copies the block, one element (es bytes) per item */
__global__ static void copy_block_kernel(int es, const uint8_t *src, uint8_t *dst, block_t b,
                                         int64_t n) {
    PSG_GRID_STRIDE(i, n) {
        int64_t rem = i, s = b.so, t = b.doff;
        for (int d = b.rank - 1; d >= 0; d--) {
            int64_t idx = rem % b.size[d];
            rem /= b.size[d];
            s += idx * b.ss[d];
            t += idx * b.ds[d];
        }
        for (int k = 0; k < es; k++) dst[t * es + k] = src[s * es + k];
    }
}

extern "C" int psg_cuda_copy_block(int gpu, int es, int rank, const int64_t *size, const void *src,
                                   const int64_t *src_dims, const int64_t *src_begin, void *dst,
                                   const int64_t *dst_dims, const int64_t *dst_begin) {
    PSG_CUDA_DEV(d, gpu);
    if (rank > PSG_CU_MAX_RANK) return psg_error_set("rank %d is above %d", rank, PSG_CU_MAX_RANK);
    block_t b;
    memset(&b, 0, sizeof b);
    b.rank = rank;
    int64_t n = 1, s1 = 1, d1 = 1;
    for (int i = rank - 1; i >= 0; i--) {
        b.size[i] = size[i];
        b.ss[i] = s1;
        b.ds[i] = d1;
        b.so += src_begin[i] * s1;
        b.doff += dst_begin[i] * d1;
        s1 *= src_dims[i];
        d1 *= dst_dims[i];
        n *= size[i];
    }
    if (n == 0) return 0;
    copy_block_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(
        es, (const uint8_t *)src, (uint8_t *)dst, b, n);
    PSG_CUDA_LAUNCHED("copy_block");
    return 0;
}

extern "C" int psg_cuda_memcpy(int gpu, void *dst, const void *src, size_t n) {
    PSG_CUDA_DEV(d, gpu);
    if (n == 0 || dst == src) return 0;
    PSG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, d->compute));
    return 0;
}

extern "C" int psg_cuda_memcpy2d(int gpu, void *dst, size_t dpitch, const void *src, size_t spitch,
                                 size_t width, size_t height) {
    PSG_CUDA_DEV(d, gpu);
    if (width == 0 || height == 0) return 0;
    PSG_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                     cudaMemcpyDeviceToDevice, d->compute));
    return 0;
}
