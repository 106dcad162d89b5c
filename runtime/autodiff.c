/* Reverse-mode autodiff over the graph: walks the nodes between xs and ys
 * backwards (node ids are a topological order: inputs exist before their
 * users) and asks each op's gradient function to build its backward nodes. */
#include "graph/graph_layout.h"
#include "psgraph/autodiff.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_sparse.h"
#include "psgraph/precision.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    psg_endpoint_t *v;
    int n, cap;
} contrib_t;

static void contrib_add(contrib_t *c, psg_endpoint_t e) {
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 2;
        c->v = realloc(c->v, sizeof(psg_endpoint_t) * (size_t)c->cap);
        PSG_ASSERT(c->v);
    }
    c->v[c->n++] = e;
}

/* The sum of the contributions, or PSG_NO_ENDPOINT for none. */
static psg_endpoint_t contrib_sum(psg_graph_t *g, contrib_t *c) {
    if (c->n == 0) return PSG_NO_ENDPOINT;
    if (c->n == 1) return c->v[0];
    psg_dtype_t dt = psg_graph_dtype(g, c->v[0]);
    /* sparse gradients of one tensor: their rows and indices concatenated */
    psg_endpoint_t s = psg_sparse_sum(g, c->n, c->v);
    if (psg_endpoint_valid(s)) {
    } else if (dt == PSG_DT_BF16 || dt == PSG_DT_F16) {
        /* the gradients of a 16-bit tensor read by several products (mixed precision):
         * summed in f32, rounded once */
        for (int i = 0; i < c->n; i++) c->v[i] = psg_cast(g, "AddN/to_f32", c->v[i], PSG_DT_F32);
        s = psg_cast(g, "AddN/to_16", psg_add_n(g, "AddN", c->n, c->v), dt);
    } else {
        s = psg_add_n(g, "AddN", c->n, c->v);
    }
    c->n = 1;
    c->v[0] = s;
    return s;
}

static bool has_scope_prefix(const psg_graph_t *g, const char *scope, int upto) {
    size_t len = strlen(scope);
    for (int i = 0; i < upto; i++)
        if (!strncmp(g->nodes[i]->name, scope, len) && g->nodes[i]->name[len] == '/') return true;
    return false;
}

int psg_gradients(psg_graph_t *g, int n_ys, const psg_endpoint_t *ys, const psg_endpoint_t *grad_ys,
                  int n_xs, const psg_endpoint_t *xs, psg_endpoint_t *grads) {
    int total = g->num_nodes;
    for (int i = 0; i < n_xs; i++) grads[i] = PSG_NO_ENDPOINT;
    for (int i = 0; i < n_ys; i++)
        if (ys[i].node < 0 || ys[i].node >= total)
            return psg_error_set("gradients: y %d is invalid", i);
    for (int i = 0; i < n_xs; i++)
        if (xs[i].node < 0 || xs[i].node >= total)
            return psg_error_set("gradients: x %d is invalid", i);

    char *from_x = calloc((size_t)total + 1, 1);
    char *to_y = calloc((size_t)total + 1, 1);
    contrib_t *contrib = calloc((size_t)total * PSG_MAX_OUTPUTS + 1, sizeof(contrib_t));
    PSG_ASSERT(from_x && to_y && contrib);
    /* forward: nodes that depend on an x */
    for (int i = 0; i < n_xs; i++) from_x[xs[i].node] = 1;
    for (int id = 0; id < total; id++) {
        const psg_node_t *n = g->nodes[id];
        for (int i = 0; i < n->num_inputs && !from_x[id]; i++)
            if (from_x[n->inputs[i].node]) from_x[id] = 1;
    }
    /* backward: nodes a y depends on */
    for (int i = 0; i < n_ys; i++) to_y[ys[i].node] = 1;
    for (int id = total - 1; id >= 0; id--) {
        if (!to_y[id]) continue;
        const psg_node_t *n = g->nodes[id];
        for (int i = 0; i < n->num_inputs; i++) to_y[n->inputs[i].node] = 1;
    }

    char scope[32] = "gradients";
    for (int k = 1; has_scope_prefix(g, scope, total); k++)
        snprintf(scope, sizeof scope, "gradients_%d", k);
    int rc = psg_graph_push_scope(g, scope);
    if (rc < 0) goto done;

    for (int i = 0; i < n_ys; i++) {
        if (!from_x[ys[i].node]) continue;
        psg_endpoint_t seed = grad_ys && psg_endpoint_valid(grad_ys[i])
                                  ? grad_ys[i]
                                  : psg_ones_like(g, "grad_ys", ys[i]);
        if (!psg_endpoint_valid(seed)) {
            rc = -1;
            goto pop;
        }
        contrib_add(&contrib[ys[i].node * PSG_MAX_OUTPUTS + ys[i].index], seed);
    }

    for (int id = total - 1; id >= 0; id--) {
        if (!from_x[id] || !to_y[id]) continue;
        const psg_node_t *n = g->nodes[id];
        psg_endpoint_t dy[PSG_MAX_OUTPUTS];
        bool any = false;
        if (psg_graph_push_scope(g, n->name) < 0 || psg_graph_push_scope(g, "grad") < 0) {
            rc = -1;
            goto pop;
        }
        for (int o = 0; o < n->num_outputs; o++) {
            dy[o] = contrib_sum(g, &contrib[id * PSG_MAX_OUTPUTS + o]);
            any |= psg_endpoint_valid(dy[o]);
        }
        /* nothing flows in, or this is an x with no other x upstream */
        bool upstream_x = false;
        for (int i = 0; i < n->num_inputs; i++) upstream_x |= from_x[n->inputs[i].node];
        if (any && upstream_x) {
            if (!n->def->grad) {
                psg_graph_pop_scope(g);
                psg_graph_pop_scope(g);
                rc = psg_error_set("gradients: node '%s' (%s) has no gradient", n->name,
                                   psg_node_op(n));
                goto pop;
            }
            psg_endpoint_t *dx =
                malloc(sizeof *dx * ((size_t)n->num_inputs + 1)); /* any number of inputs */
            if (!dx) {
                psg_graph_pop_scope(g);
                psg_graph_pop_scope(g);
                rc = psg_error_set("out of memory");
                goto pop;
            }
            for (int i = 0; i < n->num_inputs; i++) dx[i] = PSG_NO_ENDPOINT;
            if (n->def->grad(g, n, dy, dx) < 0 || psg_graph_error(g)) {
                free(dx);
                psg_graph_pop_scope(g);
                psg_graph_pop_scope(g);
                rc = psg_error_wrap("gradients of node '%s' (%s)", n->name, psg_node_op(n));
                goto pop;
            }
            for (int i = 0; i < n->num_inputs; i++) {
                psg_endpoint_t in = n->inputs[i];
                if (psg_endpoint_valid(dx[i]) && from_x[in.node])
                    contrib_add(&contrib[in.node * PSG_MAX_OUTPUTS + in.index], dx[i]);
            }
            free(dx);
        }
        psg_graph_pop_scope(g);
        psg_graph_pop_scope(g);
    }
    for (int i = 0; i < n_xs; i++) {
        contrib_t *c = &contrib[xs[i].node * PSG_MAX_OUTPUTS + xs[i].index];
        grads[i] = contrib_sum(g, c);
        if (c->n && !psg_endpoint_valid(grads[i])) rc = -1;
    }
pop:
    psg_graph_pop_scope(g);
done:
    for (int i = 0; i < total * PSG_MAX_OUTPUTS; i++) free(contrib[i].v);
    free(contrib);
    free(from_x);
    free(to_y);
    return rc;
}

int psg_loss_gradients(psg_graph_t *g, psg_endpoint_t loss, int n_xs, const psg_endpoint_t *xs,
                       psg_endpoint_t *grads) {
    double scale = psg_graph_loss_scale(g);
    if (scale == 1.0) return psg_gradients(g, 1, &loss, NULL, n_xs, xs, grads);
    psg_endpoint_t seed = psg_fill_like(g, "loss_scale", loss, (float)scale);
    if (psg_gradients(g, 1, &loss, &seed, n_xs, xs, grads) < 0) return -1;
    for (int i = 0; i < n_xs; i++) {
        if (!psg_endpoint_valid(grads[i])) continue;
        grads[i] = psg_scale(g, NULL, grads[i], 1.0 / scale);
        if (!psg_endpoint_valid(grads[i])) return psg_error_wrap("unscaling gradient %d", i);
    }
    return 0;
}

int psg_trainable_gradients(psg_graph_t *g, psg_endpoint_t loss, int *n, psg_endpoint_t **out) {
    *out = NULL;
    const int *ids = psg_graph_collection(g, "trainable_variables", n);
    if (*n == 0) return psg_error_set("no trainable variables");
    psg_endpoint_t *vars = malloc(sizeof(psg_endpoint_t) * 2 * (size_t)*n);
    if (!vars) return psg_error_set("out of memory");
    for (int i = 0; i < *n; i++) vars[i] = (psg_endpoint_t){ids[i], 0};
    if (psg_loss_gradients(g, loss, *n, vars, vars + *n) < 0) {
        free(vars);
        return -1;
    }
    *out = vars;
    return 0;
}
