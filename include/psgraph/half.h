/* 16-bit floats: bf16 (f32's sign and 8-bit exponent, 7 mantissa bits) and
 * IEEE f16 (5-bit exponent, 10 mantissa bits), stored as uint16_t, and their
 * conversions to and from f32, rounding to nearest even. Inline and plain C
 * so that the CPU kernels and the CUDA kernels (which include this header
 * too) round bit for bit alike. Not the Cast op (ops/math.c). */
#ifndef PSGRAPH_HALF_H
#define PSGRAPH_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define PSG_HALF_FN __host__ __device__ static inline
#else
#define PSG_HALF_FN static inline
#endif

PSG_HALF_FN uint32_t psg_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

PSG_HALF_FN float psg_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f32 to bf16, round to nearest even; Inf stays Inf, NaN stays a (quiet)
 * NaN of the same sign, and finite values past bf16's largest round to Inf. */
PSG_HALF_FN uint16_t psg_f32_to_bf16(float f) {
    uint32_t u = psg_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 to f32: exact. */
PSG_HALF_FN float psg_bf16_to_f32(uint16_t h) {
    return psg_f32_from_bits((uint32_t)h << 16);
}

/* f32 to IEEE f16, round to nearest even, subnormals kept; |f| >= 65520
 * (halfway past f16's largest, 65504) gives Inf; NaN stays a quiet NaN. */
PSG_HALF_FN uint16_t psg_f32_to_f16(float f) {
    uint32_t u = psg_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25: the tie goes to even, 0 */
    if (a < 0x38800000u) {
        /* f16 subnormal: the value in units of 2^-24, from the 24-bit significand */
        uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000u; /* exponent rebiased from 127 to 15 */
    uint32_t h = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* IEEE f16 to f32: exact. */
PSG_HALF_FN float psg_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return psg_f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e) return psg_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
    float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return psg_f32_from_bits(sign | psg_f32_bits(v));
}

#endif
