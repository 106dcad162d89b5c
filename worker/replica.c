/* The training graph of a replica from (model, towers, one process or a
 * cluster's strategy), decided once here (replica.h). */
#include "worker/replica.h"

#include "psgraph/error.h"

#include <stdlib.h>
#include <string.h>

/* The model (or its towers) and, in a cluster, its gradients for the strategy. */
static int build_model(psg_graph_t *g, const psg_replica_spec_t *s, psg_replica_t *r, bool cluster,
                       int *n, psg_endpoint_t **grads, psg_endpoint_t **vars) {
    if (s->towers) {
        if (!(r->towers = calloc(1, sizeof *r->towers))) return psg_error_set("out of memory");
        int rc = cluster ? psg_towers_build_gradients(g, s->towers, r->towers, n, grads, vars)
                         : psg_towers_build(g, s->towers, s->opt, r->towers);
        if (rc < 0) return -1;
        r->m = r->towers->towers[0];
        r->loss = r->towers->loss;
        r->correct = r->m.correct; /* evaluation feeds tower 0 only */
        r->n_feeds = 2 * r->towers->num_towers;
        psg_towers_feeds(r->towers, r->feeds);
        r->train_op = r->towers->train_op;
        return 0;
    }
    if (s->build_one(s->ctx, g, &r->m) < 0) return -1;
    r->loss = r->m.loss;
    r->correct = r->m.correct;
    r->feeds[0] = r->m.images;
    r->feeds[1] = r->m.labels;
    r->n_feeds = 2;
    return cluster || s->forward_only ? 0
                                      : psg_optimizer_minimize(s->opt, g, r->m.loss, &r->train_op);
}

int psg_replica_build(psg_graph_t *g, const psg_replica_spec_t *s, psg_replica_t *r) {
    memset(r, 0, sizeof *r);
    r->train_op = -1;
    bool cluster = s->w && s->w->cluster;
    bool local = cluster && psg_sync_train_local_model(s->c);
    /* a local_model strategy's model is the worker's own; the rest is the setter's */
    if (cluster) {
        if (local)
            psg_graph_push_device(g, s->w->task);
        else
            psg_graph_push_replica_setter(g, s->w->setter);
    }
    int n = 0;
    psg_endpoint_t *grads = NULL, *vars = NULL;
    int rc = build_model(g, s, r, cluster, &n, &grads, &vars);
    if (rc == 0 && cluster) {
        if (local) {
            psg_graph_pop_device(g);
            psg_graph_push_replica_setter(g, s->w->setter);
        }
        r->sync = psg_sync_train_new(s->c, g, s->opt, n, grads, vars, r->loss, r->n_feeds, r->feeds,
                                     r->towers, s->w->rank, s->w->num_workers, s->out);
        rc = r->sync ? 0 : -1;
        r->train_op = r->loss.node; /* a generic callable only evaluates */
    }
    if (cluster) psg_graph_pop_device(g);
    free(grads);
    free(vars);
    return rc;
}

void psg_replica_free(psg_replica_t *r) {
    psg_sync_train_destroy(&r->sync);
    free(r->towers);
    r->towers = NULL;
}
