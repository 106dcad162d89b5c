/* Helpers shared by op definitions: the empty gradient, and for shape inference dtype
 * and rank checks and numpy broadcasting, each with a message that names the input. */
#include "psgraph/error.h"
#include "psgraph/kernel.h"

int psg_grad_none(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                  psg_endpoint_t *dx) {
    (void)g;
    (void)dy;
    for (int i = 0; i < psg_node_num_inputs(n); i++) dx[i] = PSG_NO_ENDPOINT;
    return 0;
}

int psg_infer_expect_dtype(psg_infer_ctx_t *c, int i, psg_dtype_t dt) {
    if (c->in_dtypes[i] != dt)
        return psg_error_set("input %d must be %s, got %s", i, psg_dtype_name(dt),
                             psg_dtype_name(c->in_dtypes[i]));
    return 0;
}

int psg_infer_expect_compute_dtype(psg_infer_ctx_t *c, psg_dtype_t *dt) {
    *dt = c->in_dtypes[0];
    if (*dt != PSG_DT_F32 && *dt != PSG_DT_BF16 && *dt != PSG_DT_F16)
        return psg_error_set("input 0 must be f32, bf16 or f16, got %s", psg_dtype_name(*dt));
    for (int i = 1; i < c->num_inputs; i++)
        if (c->in_dtypes[i] != *dt)
            return psg_error_set("input %d is %s, input 0 is %s: cast one (mixed precision)", i,
                                 psg_dtype_name(c->in_dtypes[i]), psg_dtype_name(*dt));
    return 0;
}

int psg_infer_expect_rank(psg_infer_ctx_t *c, int i, int rank) {
    const psg_shape_t *s = &c->in_shapes[i];
    if (s->rank >= 0 && s->rank != rank) {
        char buf[PSG_SHAPE_STR_MAX];
        return psg_error_set("input %d must have rank %d, got shape %s", i, rank,
                             psg_shape_str(s, buf, sizeof buf));
    }
    return 0;
}

int psg_shape_broadcast(const psg_shape_t *a, const psg_shape_t *b, psg_shape_t *out) {
    if (a->rank < 0 || b->rank < 0) {
        *out = psg_shape_unknown();
        return 0;
    }
    int rank = a->rank > b->rank ? a->rank : b->rank;
    psg_shape_t r = {.rank = rank};
    for (int i = 0; i < rank; i++) {
        int ia = i - (rank - a->rank), ib = i - (rank - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da == 1)
            r.dims[i] = db;
        else if (db == 1)
            r.dims[i] = da;
        else if (da < 0 || db < 0)
            r.dims[i] = da < 0 ? db : da; /* unknown against known: take the known */
        else if (da == db)
            r.dims[i] = da;
        else {
            char sa[PSG_SHAPE_STR_MAX], sb[PSG_SHAPE_STR_MAX];
            return psg_error_set("shapes %s and %s cannot broadcast (dim %d: %lld vs %lld)",
                                 psg_shape_str(a, sa, sizeof sa), psg_shape_str(b, sb, sizeof sb),
                                 i, (long long)da, (long long)db);
        }
    }
    *out = r;
    return 0;
}
