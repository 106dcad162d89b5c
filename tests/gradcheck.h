/* Finite-difference gradient checking for any op (or subgraph): builds
 * y = f(x...) from placeholders, asks autodiff for d(sum(W*y))/dx with a
 * fixed random weighting W, and compares with central differences. */
#ifndef PSGRAPH_TESTS_GRADCHECK_H
#define PSGRAPH_TESTS_GRADCHECK_H

#include "psgraph/psgraph.h"

typedef struct {
    psg_tensor_t *value; /* borrowed; f32 for a differentiable input */
    bool differentiable; /* false: fed as is, not checked (labels, indices) */
} psg_gradcheck_input_t;

/* Builds the function under test from its inputs (placeholders); returns y.
 * A function with several outputs returns the one to check (call again per output). */
typedef psg_endpoint_t (*psg_gradcheck_build_fn)(psg_graph_t *g, const psg_endpoint_t *inputs,
                                                 void *ctx);

/* Checks every element of every differentiable input: passes when
 * |analytic - numeric| <= tol * (1 + |numeric|). Prints each mismatch (up to a
 * few per input) with `label`, and returns 0 on pass, -1 on fail or error. */
int psg_gradcheck(const char *label, int n_inputs, const psg_gradcheck_input_t *inputs,
                  psg_gradcheck_build_fn build, void *ctx, double tol);

#endif
