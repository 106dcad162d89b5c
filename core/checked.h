/* Checked integer arithmetic for every size that comes from bytes (a file, a peer's
 * message, a graph a peer registered): dims, counts, strides, offsets. Each returns true
 * when the exact result does not fit (C23's ckd_* convention), leaving *r unspecified.
 * Not a bignum: callers turn `true` into an error that names the thing. */
#ifndef PSG_CORE_CHECKED_H
#define PSG_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool psg_ckd_add_i64(int64_t *r, int64_t a, int64_t b) {
    return __builtin_add_overflow(a, b, r);
}
static inline bool psg_ckd_sub_i64(int64_t *r, int64_t a, int64_t b) {
    return __builtin_sub_overflow(a, b, r);
}
static inline bool psg_ckd_mul_i64(int64_t *r, int64_t a, int64_t b) {
    return __builtin_mul_overflow(a, b, r);
}
static inline bool psg_ckd_add_u64(uint64_t *r, uint64_t a, uint64_t b) {
    return __builtin_add_overflow(a, b, r);
}
static inline bool psg_ckd_mul_u64(uint64_t *r, uint64_t a, uint64_t b) {
    return __builtin_mul_overflow(a, b, r);
}
static inline bool psg_ckd_add_size(size_t *r, size_t a, size_t b) {
    return __builtin_add_overflow(a, b, r);
}
static inline bool psg_ckd_mul_size(size_t *r, size_t a, size_t b) {
    return __builtin_mul_overflow(a, b, r);
}

/* The product of n non-negative dims into *r; true when a dim is negative or it overflows. */
static inline bool psg_ckd_product_i64(int64_t *r, const int64_t *dims, int n) {
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        if (dims[i] < 0 || psg_ckd_mul_i64(&p, p, dims[i])) return true;
    *r = p;
    return false;
}

#endif
