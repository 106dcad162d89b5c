/* Mixed precision: the graph's compute dtype, the --precision names, and the
 * casts the builders of the allowlisted ops put around them. Not the Cast op
 * (ops/math.c) and not the 16-bit kernels (ops/cpu/half.c, ops/cuda/). */
#include "psgraph/precision.h"
#include "graph/cast_memo.h"
#include "psgraph/error.h"
#include "psgraph/ops_math.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int psg_precision_parse(const char *s, psg_dtype_t *compute_dtype) {
    if (!strcmp(s, "f32"))
        *compute_dtype = PSG_DT_F32;
    else if (!strcmp(s, "mixed") || !strcmp(s, "mixed-bf16"))
        *compute_dtype = PSG_DT_BF16;
    else if (!strcmp(s, "mixed-f16"))
        *compute_dtype = PSG_DT_F16;
    else
        return psg_error_set("precision '%s' is not f32, mixed (bf16) or mixed-f16", s);
    return 0;
}

int psg_graph_set_precision(psg_graph_t *g, const char *precision) {
    psg_dtype_t dt = PSG_DT_F32;
    if (precision && psg_precision_parse(precision, &dt) < 0) return -1;
    return psg_graph_set_compute_dtype(g, dt);
}

const char *psg_precision_name(psg_dtype_t compute_dtype) {
    switch (compute_dtype) {
    case PSG_DT_BF16: return "mixed";
    case PSG_DT_F16: return "mixed-f16";
    default: return "f32";
    }
}

double psg_graph_loss_scale(const psg_graph_t *g) {
    return psg_graph_compute_dtype(g) == PSG_DT_F16 ? PSG_F16_LOSS_SCALE : 1.0;
}

static bool is_half(psg_dtype_t dt) {
    return dt == PSG_DT_BF16 || dt == PSG_DT_F16;
}

/* The cast of src to dtype: one made before when it would sit on the device a new one
 * would get (the device functions' verdict for a Cast of src now), else a new one. A
 * tensor that feeds several products (Inception's branches, a weight's forward and
 * backward products) is then cast once per device, not once per product. */
static psg_endpoint_t shared_cast(psg_graph_t *g, psg_endpoint_t src, psg_dtype_t dtype) {
    int found = psg_graph_cast_memo_find(g, src, dtype);
    if (found >= 0) return (psg_endpoint_t){found, 0};
    psg_endpoint_t c = psg_cast(g, NULL, src, dtype);
    if (psg_endpoint_valid(c)) psg_graph_cast_memo_add(g, src, dtype, c.node);
    return c;
}

bool psg_compute_inputs(psg_graph_t *g, int n, psg_endpoint_t *ins) {
    psg_dtype_t cd = psg_graph_compute_dtype(g);
    if (cd == PSG_DT_F32) return false;
    bool all_f32 = true;
    for (int i = 0; i < n; i++) {
        if (!psg_endpoint_valid(ins[i])) return false; /* the builder reports it */
        psg_dtype_t dt = psg_graph_dtype(g, ins[i]);
        if (dt == PSG_DT_F32)
            ins[i] = shared_cast(g, ins[i], cd);
        else if (is_half(dt))
            all_f32 = false;
    }
    return all_f32;
}

psg_endpoint_t psg_compute_output(psg_graph_t *g, const char *name, psg_endpoint_t y,
                                  bool cast_back) {
    return cast_back ? psg_cast(g, name, y, PSG_DT_F32) : y;
}

const char *psg_compute_op_name(const psg_graph_t *g, const char *name, bool cast_back, char *buf,
                                size_t size) {
    if (!cast_back || !name) return name;
    snprintf(buf, size, "%s_%s", name, psg_dtype_name(psg_graph_compute_dtype(g)));
    return buf;
}
