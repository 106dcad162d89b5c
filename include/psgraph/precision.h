/* Mixed precision, as TensorFlow's auto mixed precision and PyTorch's
 * autocast: a graph-level compute dtype (bf16 or f16) under which the
 * builders of the compute-heavy ops (MatMul, Dense's product, Conv2D and its
 * two backprops) cast their f32 inputs to it, run in it with f32
 * accumulation, and cast the result back to f32. Variables, optimizer
 * slots, losses, batch norm, reductions and updates stay f32 (the master
 * weights); autodiff needs nothing special (the gradient of each Cast is the
 * reverse Cast), so every model and every gradient gets it by building on a
 * graph with the setting on. docs/mixed_precision.md says why and how. */
#ifndef PSGRAPH_PRECISION_H
#define PSGRAPH_PRECISION_H

#include "psgraph/graph.h"

#include <stdbool.h>

/* The graph's setting itself, psg_graph_set_compute_dtype and psg_graph_compute_dtype,
 * is declared in psgraph/graph.h (the graph keeps it). */

/* The --precision option: "f32" -> PSG_DT_F32, "mixed" (or "mixed-bf16") ->
 * PSG_DT_BF16, "mixed-f16" -> PSG_DT_F16. Returns 0, or -1 with the error
 * set naming the bad value. */
int psg_precision_parse(const char *s, psg_dtype_t *compute_dtype);
/* psg_precision_parse then psg_graph_set_compute_dtype: the one call a
 * command with a --precision option makes on its graph before building the
 * model (NULL: f32). Returns 0, or -1 with the error set naming the value. */
int psg_graph_set_precision(psg_graph_t *g, const char *precision);
/* "f32", "mixed" or "mixed-f16" for a compute dtype. */
const char *psg_precision_name(psg_dtype_t compute_dtype);

/* The static loss scale a compute dtype needs: 1 for f32 and bf16 (f32's
 * exponent range), PSG_F16_LOSS_SCALE for f16, whose small gradients would
 * flush to zero. psg_trainable_gradients applies it. */
#define PSG_F16_LOSS_SCALE 1024.0
double psg_graph_loss_scale(const psg_graph_t *g);

/* ---- for the builders of the allowlisted ops ---- */

/* Casts each f32 endpoint of ins[0..n) to g's compute dtype, in place.
 * Returns true when every floating input was f32 (the op is called from f32
 * code, so its result goes back to f32 with psg_compute_output); false when
 * the setting is f32 or some input is already in the compute dtype (a
 * gradient of an op built in it: it stays in it). */
bool psg_compute_inputs(psg_graph_t *g, int n, psg_endpoint_t *ins);
/* y cast back to f32 and named `name` when cast_back; y otherwise. */
psg_endpoint_t psg_compute_output(psg_graph_t *g, const char *name, psg_endpoint_t y,
                                  bool cast_back);
/* The name of the op node itself when its output is cast back under `name`:
 * "<name>_bf16" (or _f16) in buf; NULL (the op's default) for a NULL name. */
const char *psg_compute_op_name(const psg_graph_t *g, const char *name, bool cast_back, char *buf,
                                size_t size);

#endif
