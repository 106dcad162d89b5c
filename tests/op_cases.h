/* The table of op cases (op, input shapes, tolerances) shared by the
 * backends' comparison (test_cuda) and the finite-difference gradient checks
 * (test_op_cases). A new op adds its rows here. */
#ifndef PSGRAPH_TESTS_OP_CASES_H
#define PSGRAPH_TESTS_OP_CASES_H

#include "psgraph/psgraph.h"

/* How an input's values are drawn. */
enum { PSG_CASE_F32, PSG_CASE_POSITIVE, PSG_CASE_LABELS };

/* Builds the op (and what it needs) on the placeholders `in`; returns y. */
typedef psg_endpoint_t (*psg_op_case_build_fn)(psg_graph_t *g, const psg_endpoint_t *in);

typedef struct {
    const char *name;
    int n_in;
    psg_shape_t shapes[4];
    int kinds[4]; /* PSG_CASE_* */
    psg_op_case_build_fn build;
    double tol;    /* GPU against CPU: the largest relative difference */
    bool grad;     /* also compare d(sum(w * y))/d(each f32 input) on both */
    double fd_tol; /* > 0: check the gradients by finite differences with this tolerance */
} psg_op_case_t;

extern const psg_op_case_t psg_op_cases[];
extern const int psg_num_op_cases;

/* Draws the case's input values (labels in [0, 10), positive in [0.5, 1.5),
 * others in [-1, 1.5)) into values[0..n_in), which the caller destroys. */
void psg_op_case_values(const psg_op_case_t *c, unsigned *seed, psg_tensor_t **values);

#endif
