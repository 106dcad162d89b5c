/* The casts mixed precision's builders share (ops/precision.c): the graph remembers each
 * Cast they made of an endpoint to a dtype, so a tensor that feeds several products
 * (Inception's branches, a weight's forward and backward products) is cast once per
 * device, not once per product. The memo lives and dies with the graph; when to cast is
 * ops'. Not the Cast op. */
#ifndef PSGRAPH_GRAPH_CAST_MEMO_H
#define PSGRAPH_GRAPH_CAST_MEMO_H

#include "psgraph/graph.h"

/* The Cast node of src to dtype remembered by psg_graph_cast_memo_add that sits on the
 * device a new Cast of src would get from g's device functions now; -1 when none. */
int psg_graph_cast_memo_find(const psg_graph_t *g, psg_endpoint_t src, psg_dtype_t dtype);
/* Remembers node `cast` as the Cast of src to dtype (out of memory: not remembered, and a
 * later product casts again). */
void psg_graph_cast_memo_add(psg_graph_t *g, psg_endpoint_t src, psg_dtype_t dtype, int cast);

#endif
