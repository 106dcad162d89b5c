/* The op profile behind psgraph/op_profile.h: the hook sums by node name (a map of
 * the names seen, grown as needed), the report groups the nodes by op type and looks
 * each up in the graph for its FLOPs. */
#include "psgraph/op_profile.h"

#include "core/strmap.h"
#include "psgraph/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name, *op;
    int64_t runs, ns;
} node_row_t;

struct psg_op_profile {
    pthread_mutex_t lock;
    psg_strmap_t *index; /* node name -> row (the rows own the names) */
    node_row_t *rows;
    int n, cap;
};

psg_op_profile_t *psg_op_profile_new(void) {
    psg_op_profile_t *p = calloc(1, sizeof *p);
    if (!p || !(p->index = psg_strmap_new())) {
        free(p);
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    return p;
}

void psg_op_profile_destroy(psg_op_profile_t **pp) {
    if (!pp || !*pp) return;
    psg_op_profile_t *p = *pp;
    *pp = NULL;
    psg_strmap_destroy(&p->index);
    for (int i = 0; i < p->n; i++) {
        free(p->rows[i].name);
        free(p->rows[i].op);
    }
    free(p->rows);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* The row of node `name`, made on first sight; NULL when out of memory. Under lock. */
static node_row_t *row_of(psg_op_profile_t *p, const char *name, const char *op) {
    int i = psg_strmap_get(p->index, name);
    if (i >= 0) return &p->rows[i];
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        node_row_t *r = realloc(p->rows, sizeof *r * (size_t)cap);
        if (!r) return NULL;
        p->rows = r;
        p->cap = cap;
    }
    node_row_t *r = &p->rows[p->n];
    *r = (node_row_t){strdup(name), strdup(op), 0, 0};
    if (!r->name || !r->op || psg_strmap_put(p->index, r->name, p->n) == -2) {
        free(r->name);
        free(r->op);
        return NULL;
    }
    p->n++;
    return r;
}

void psg_op_profile_node_hook(void *ctx, const char *node, const char *op, int64_t step_id,
                              int64_t start_ns, int64_t end_ns, int64_t bytes) {
    (void)step_id;
    (void)bytes;
    psg_op_profile_t *p = ctx;
    pthread_mutex_lock(&p->lock);
    node_row_t *r = row_of(p, node, op);
    if (r) { /* out of memory drops the run: a profile, not an account */
        r->runs++;
        r->ns += end_ns - start_ns;
    }
    pthread_mutex_unlock(&p->lock);
}

/* The elements of e's shape, an unknown dim counted as `unknown` (the batch); -1 when
 * e has no shape or an unknown dim with no value for it. */
static double numel_of(const psg_graph_t *g, psg_endpoint_t e, int64_t unknown) {
    const psg_shape_t *s = psg_graph_shape(g, e);
    if (!s || s->rank < 0) return -1;
    double n = 1;
    for (int d = 0; d < s->rank; d++) {
        int64_t v = s->dims[d] >= 0 ? s->dims[d] : unknown;
        if (v < 0) return -1;
        n *= (double)v;
    }
    return n;
}

static double dim_of(const psg_graph_t *g, psg_endpoint_t e, int d) {
    const psg_shape_t *s = psg_graph_shape(g, e);
    return s && d < s->rank && s->dims[d] >= 0 ? (double)s->dims[d] : -1;
}

double psg_node_flops(const psg_graph_t *g, const psg_node_t *n, int64_t unknown_dim) {
    const char *op = psg_node_op(n);
    psg_endpoint_t out = {psg_node_id(n), 0};
    if ((!strcmp(op, "MatMul") || !strcmp(op, "Dense")) && psg_node_num_inputs(n) >= 2) {
        bool ta = psg_node_get_bool(n, "transpose_a", false);
        double k = dim_of(g, psg_node_input(n, 0), ta ? 0 : 1), mn = numel_of(g, out, unknown_dim);
        return k < 0 || mn < 0 ? 0 : 2 * mn * k;
    }
    bool conv = !strcmp(op, "Conv2D") || !strcmp(op, "FusedConv2D"),
         grads = !strcmp(op, "Conv2DBackpropInput") || !strcmp(op, "Conv2DBackpropFilter");
    if ((!conv && !grads) || psg_node_num_inputs(n) < (conv ? 2 : 3)) return 0;
    /* the filter is [Kh, Kw, Ci, Co]; the output space is y (Conv2D) or dy (gradients) */
    psg_endpoint_t f = psg_node_input(n, 1);
    double y = numel_of(g, conv ? out : psg_node_input(n, 2), unknown_dim);
    double kh = dim_of(g, f, 0), kw = dim_of(g, f, 1), ci = dim_of(g, f, 2);
    return y < 0 || kh < 0 || kw < 0 || ci < 0 ? 0 : 2 * y * kh * kw * ci;
}

static int cmp_ms(const void *a, const void *b) {
    double x = ((const psg_op_profile_row_t *)a)->ms, y = ((const psg_op_profile_row_t *)b)->ms;
    return (x < y) - (x > y);
}

int psg_op_profile_rows(psg_op_profile_t *p, const psg_graph_t *g, int64_t batch,
                        psg_op_profile_row_t **rows) {
    pthread_mutex_lock(&p->lock);
    psg_op_profile_row_t *out = calloc((size_t)p->n + 1, sizeof *out);
    psg_strmap_t *ops = psg_strmap_new();
    int m = 0;
    for (int i = 0; out && ops && i < p->n; i++) {
        const node_row_t *r = &p->rows[i];
        int k = psg_strmap_get(ops, r->op);
        if (k < 0) {
            k = m++;
            snprintf(out[k].op, sizeof out[k].op, "%s", r->op);
            psg_strmap_put(ops, r->op, k); /* the node rows own the op names */
        }
        out[k].nodes++;
        out[k].runs += r->runs;
        out[k].ms += (double)r->ns * 1e-6;
        int id = g ? psg_graph_find(g, r->name) : -1;
        if (id >= 0)
            out[k].gflop +=
                psg_node_flops(g, psg_graph_node(g, id), batch) * (double)r->runs * 1e-9;
    }
    pthread_mutex_unlock(&p->lock);
    psg_strmap_destroy(&ops);
    if (!out) return psg_error_set("out of memory");
    qsort(out, (size_t)m, sizeof *out, cmp_ms);
    *rows = out;
    return m;
}

int psg_op_profile_write_json(psg_op_profile_t *p, const psg_graph_t *g, int64_t batch,
                              int64_t steps, double wall_ms, FILE *out) {
    psg_op_profile_row_t *rows = NULL;
    int m = psg_op_profile_rows(p, g, batch, &rows);
    if (m < 0) return -1;
    double per = steps > 0 ? 1.0 / (double)steps : 1, wall = wall_ms * per, ms = 0, gflop = 0;
    for (int i = 0; i <= m; i++) {
        bool total = i == m;
        double r_ms = total ? ms : rows[i].ms * per, r_gf = total ? gflop : rows[i].gflop * per;
        if (!total) ms += r_ms, gflop += r_gf;
        fprintf(
            out,
            "{\"op_profile\":\"%s\",\"nodes\":%lld,\"runs_per_step\":%.1f,\"ms_per_step\":%.3f,"
            "\"share_of_step\":%.4f,\"gflop_per_step\":%.6g,\"tflops\":%.6g,\"step_ms\":%.3f}\n",
            total ? "total" : rows[i].op, total ? 0LL : (long long)rows[i].nodes,
            total ? 0.0 : (double)rows[i].runs * per, r_ms, wall > 0 ? r_ms / wall : 0, r_gf,
            r_ms > 0 ? r_gf / r_ms : 0, wall);
    }
    free(rows);
    return 0;
}
