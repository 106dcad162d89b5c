/* A servable's batch cut over lanes: single-threaded plans of one inference graph run side
 * by side on the rows of a batch (serving/servable_lanes.c says why). Internal to servables. */
#ifndef PSGRAPH_SERVING_SERVABLE_LANES_H
#define PSGRAPH_SERVING_SERVABLE_LANES_H

#include "psgraph/graph.h"
#include "psgraph/resource.h"
#include "psgraph/servable.h"
#include "psgraph/tensor.h"

typedef struct psg_servable_lanes psg_servable_lanes_t;

/* `lanes` plans of g feeding `feeds` and fetching `fetches`, their values in rm (shared, only
 * read), each with a session of one thread; lanes 1.. on threads of their own. NULL with the
 * error naming the lane. */
psg_servable_lanes_t *psg_servable_lanes_new(psg_graph_t *g, psg_resource_mgr_t *rm, int lanes,
                                             int n_in, const psg_endpoint_t *feeds, int n_out,
                                             const psg_endpoint_t *fetches);
void psg_servable_lanes_destroy(psg_servable_lanes_t **ls);
int psg_servable_lanes_count(const psg_servable_lanes_t *ls);

/* One batch (inputs checked, dim 0 its rows, at least 1): its rows cut into min(rows, lanes)
 * consecutive parts, one a lane, all at once; outputs joined in row order (new tensors,
 * the caller's). One call at a time. -1 with the first failing lane's error. */
int psg_servable_lanes_run(psg_servable_lanes_t *ls, psg_tensor_t *const *inputs,
                           psg_tensor_t **outputs);

#endif
