/* CPU kernels' side of the 16-bit float dtypes: f32 <-> bf16 / f16 array
 * conversions, and f32 kernels run on 16-bit tensors through f32 copies.
 * Not the scalar rounding (psgraph/half.h). */
#include "ops/cpu/half.h"
#include "ops/cpu/math.h"
#include "psgraph/error.h"
#include "psgraph/half.h"

#include <stdlib.h>

bool psg_dtype_is_half(psg_dtype_t dt) {
    return dt == PSG_DT_BF16 || dt == PSG_DT_F16;
}

typedef struct {
    psg_dtype_t from, to;
    const void *x;
    void *y;
} convert_job_t;

static void convert_range(void *ctx, int64_t i0, int64_t i1) {
    const convert_job_t *j = ctx;
    if (j->from == PSG_DT_F32) {
        const float *restrict x = j->x;
        uint16_t *restrict y = j->y;
        if (j->to == PSG_DT_BF16)
            for (int64_t i = i0; i < i1; i++) y[i] = psg_f32_to_bf16(x[i]);
        else
            for (int64_t i = i0; i < i1; i++) y[i] = psg_f32_to_f16(x[i]);
    } else {
        const uint16_t *restrict x = j->x;
        float *restrict y = j->y;
        if (j->from == PSG_DT_BF16)
            for (int64_t i = i0; i < i1; i++) y[i] = psg_bf16_to_f32(x[i]);
        else
            for (int64_t i = i0; i < i1; i++) y[i] = psg_f16_to_f32(x[i]);
    }
}

int psg_cpu_convert_half(psg_threadpool_t *pool, psg_dtype_t from, const void *x, psg_dtype_t to,
                         void *y, int64_t n) {
    if (!((from == PSG_DT_F32 && psg_dtype_is_half(to)) ||
          (to == PSG_DT_F32 && psg_dtype_is_half(from))))
        return psg_error_set("no conversion from %s to %s", psg_dtype_name(from),
                             psg_dtype_name(to));
    convert_job_t j = {from, to, x, y};
    if (n < PSG_MATH_PARALLEL_MIN)
        convert_range(&j, 0, n);
    else
        psg_parallel_for(pool, n, PSG_MATH_PARALLEL_MIN / 2, convert_range, &j);
    return 0;
}

/* t as f32: a new reference to t itself when it is not 16-bit. */
static psg_tensor_t *as_f32(psg_threadpool_t *pool, psg_tensor_t *t) {
    if (!psg_dtype_is_half(t->dtype)) return psg_tensor_ref(t);
    psg_tensor_t *f = psg_tensor_new(PSG_DT_F32, &t->shape);
    if (f &&
        psg_cpu_convert_half(pool, t->dtype, t->data, PSG_DT_F32, f->data, psg_tensor_numel(t)) < 0)
        psg_tensor_destroy(&f);
    return f;
}

int psg_cpu_run_as_f32(psg_kernel_ctx_t *c, psg_kernel_fn f32_kernel) {
    psg_tensor_t *few[8], **in = few, *out[PSG_MAX_OUTPUTS] = {NULL};
    psg_dtype_t dts[PSG_MAX_OUTPUTS];
    int rc = 0, made = 0;
    /* a peer's graph may give an op any number of inputs: more than a few go on the heap */
    if (c->num_inputs > 8 && !(in = malloc(sizeof *in * (size_t)c->num_inputs)))
        return psg_error_set("out of memory for %d inputs", c->num_inputs);
    for (; made < c->num_inputs && rc == 0; made++) {
        in[made] = as_f32(c->pool, c->inputs[made]);
        if (!in[made]) rc = -1;
    }
    for (int i = 0; i < c->num_outputs; i++)
        dts[i] = psg_dtype_is_half(c->out_dtypes[i]) ? PSG_DT_F32 : c->out_dtypes[i];
    psg_kernel_ctx_t f = *c;
    f.inputs = in;
    f.outputs = out;
    f.out_dtypes = dts;
    if (rc == 0) rc = f32_kernel(&f);
    for (int i = 0; i < c->num_outputs && rc == 0; i++) {
        if (!out[i]) continue;
        if (!psg_dtype_is_half(c->out_dtypes[i])) {
            psg_kernel_set_output(c, i, out[i]);
            continue;
        }
        psg_tensor_t *o = psg_kernel_alloc_output(c, i);
        rc = o ? psg_cpu_convert_half(c->pool, PSG_DT_F32, out[i]->data, o->dtype, o->data,
                                      psg_tensor_numel(o))
               : -1;
    }
    for (int i = 0; i < made; i++) psg_tensor_destroy(&in[i]);
    if (in != few) free(in);
    for (int i = 0; i < c->num_outputs; i++) psg_tensor_destroy(&out[i]);
    return rc;
}
