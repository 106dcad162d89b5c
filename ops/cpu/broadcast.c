/* Broadcast strides and the two generic broadcast loops (expand, reduce).
 * The innermost dim runs as a plain loop, so common cases vectorize. */
#include "ops/cpu/broadcast.h"

#include <string.h>

void psg_broadcast_strides(const psg_shape_t *in, const psg_shape_t *out, int64_t *strides) {
    int64_t s = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
        int ii = i - (out->rank - in->rank);
        if (ii < 0) {
            strides[i] = 0;
            continue;
        }
        strides[i] = in->dims[ii] == 1 ? 0 : s;
        s *= in->dims[ii];
    }
}

/* Walks every position of `big` (rank r) with its offset into the small
 * tensor, calling the inner loop over the last dim. */
typedef void (*inner_fn)(float *small, float *big, int64_t n, int64_t small_stride);

static void walk(const psg_shape_t *big, const int64_t *small_strides, float *small, float *bigp,
                 inner_fn fn) {
    int r = big->rank;
    if (r == 0) {
        fn(small, bigp, 1, 0);
        return;
    }
    int64_t inner = big->dims[r - 1];
    int64_t outer = psg_shape_numel(big) / (inner ? inner : 1);
    if (inner == 0) return;
    int64_t idx[PSG_MAX_RANK] = {0};
    int64_t off = 0;
    for (int64_t o = 0; o < outer; o++) {
        fn(small + off, bigp + o * inner, inner, small_strides[r - 1]);
        for (int d = r - 2; d >= 0; d--) {
            idx[d]++;
            off += small_strides[d];
            if (idx[d] < big->dims[d]) break;
            off -= small_strides[d] * idx[d];
            idx[d] = 0;
        }
    }
}

static void inner_reduce(float *small, float *big, int64_t n, int64_t stride) {
    if (stride) {
        for (int64_t j = 0; j < n; j++) small[j] += big[j];
    } else {
        float acc = 0;
        for (int64_t j = 0; j < n; j++) acc += big[j];
        small[0] += acc;
    }
}

static void inner_expand(float *small, float *big, int64_t n, int64_t stride) {
    if (stride) {
        memcpy(big, small, sizeof(float) * (size_t)n);
    } else {
        float v = small[0];
        for (int64_t j = 0; j < n; j++) big[j] = v;
    }
}

void psg_reduce_to_shape_f32(const float *in, const psg_shape_t *in_shape, float *out,
                             const psg_shape_t *out_shape) {
    int64_t strides[PSG_MAX_RANK];
    psg_broadcast_strides(out_shape, in_shape, strides);
    memset(out, 0, sizeof(float) * (size_t)psg_shape_numel(out_shape));
    walk(in_shape, strides, out, (float *)in, inner_reduce);
}

void psg_broadcast_to_f32(const float *in, const psg_shape_t *in_shape, float *out,
                          const psg_shape_t *out_shape) {
    int64_t strides[PSG_MAX_RANK];
    psg_broadcast_strides(in_shape, out_shape, strides);
    walk(out_shape, strides, (float *)in, out, inner_expand);
}
