/* Automatic differentiation: adds the backward nodes to the graph.
 * Gradients are graph nodes like any other: they can be placed, cut and sent. */
#ifndef PSGRAPH_AUTODIFF_H
#define PSGRAPH_AUTODIFF_H

#include "psgraph/graph.h"

/* Adds nodes computing d(sum of ys)/d(xs[i]) and writes their endpoints into
 * grads[i]. grad_ys (may be NULL) gives the incoming gradient of each y (NULL
 * or an invalid endpoint: ones of y's shape). Gradients arriving at a node by
 * several paths are summed (AddN). An x that no y depends on gets
 * PSG_NO_ENDPOINT. Nodes that do not depend on any x are not differentiated.
 * The new nodes live under the scope "gradients" (or "gradients_1", ...).
 * Returns 0, or -1 with the error naming the node whose op has no gradient. */
int psg_gradients(psg_graph_t *g, int n_ys, const psg_endpoint_t *ys, const psg_endpoint_t *grad_ys,
                  int n_xs, const psg_endpoint_t *xs, psg_endpoint_t *grads);

/* d(loss)/d(xs[i]) into grads[i] as psg_gradients, under g's loss scale S
 * (psg_graph_loss_scale, precision.h): the backward pass starts from S
 * instead of 1, so small gradients survive f16, and each gradient is
 * divided by S at the end, in f32. With S = 1 it is psg_gradients. */
int psg_loss_gradients(psg_graph_t *g, psg_endpoint_t loss, int n_xs, const psg_endpoint_t *xs,
                       psg_endpoint_t *grads);

/* psg_loss_gradients of `loss` with respect to every variable handle of the
 * "trainable_variables" collection. *out (the caller frees it) holds 2 * *n
 * endpoints: the handles, then their gradients. Returns 0, or -1 with the
 * error set ("no trainable variables" among others) and *out NULL. */
int psg_trainable_gradients(psg_graph_t *g, psg_endpoint_t loss, int *n, psg_endpoint_t **out);

#endif
