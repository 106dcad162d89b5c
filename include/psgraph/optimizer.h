/* Optimizers as graph ops: builders of the update ops that change a variable
 * and its slots in place (SGD, momentum, RMSProp, Adam, AdaGrad, with
 * TensorFlow's formulas), and psg_optimizer_t, which wires them to the
 * gradients of a loss with slot variables, a global step and one train op.
 * Not the training loop (hooks, logging) and not sync replicas. */
#ifndef PSGRAPH_OPTIMIZER_H
#define PSGRAPH_OPTIMIZER_H

#include "psgraph/graph.h"
#include "psgraph/ops_train.h"

#include <stdbool.h>
#include <stdint.h>

/* The graph's global step: the handle of the scalar i64 variable
 * "global_step" (starts at 0, in "variables", "init" and the collection
 * "global_step"; not trainable), created on first call under the current
 * device function, found by name after. PSG_NO_ENDPOINT on error. */
psg_endpoint_t psg_global_step(psg_graph_t *g);

/* ---- optimizers ---- */

typedef struct {
    const char *kind;          /* "sgd", "momentum", "rmsprop", "adam", "adagrad", "ftrl" */
    float learning_rate;       /* used unless a learning-rate tensor is set */
    float momentum;            /* momentum: 0.9; rmsprop: 0.0 (Inception: 0.9) */
    bool use_nesterov;         /* momentum only */
    float rho;                 /* rmsprop's decay: 0.9 */
    float epsilon;             /* rmsprop: 1e-10 (Inception: 1.0); adam: 1e-8 */
    float beta1, beta2;        /* adam: 0.9, 0.999 */
    float initial_accumulator; /* adagrad's and ftrl's accumulator start: 0.1 */
    float l1, l2;              /* ftrl's regularization strengths: 0, 0 */
    float lr_power;            /* ftrl's learning-rate power: -0.5 (TensorFlow's FtrlOptimizer) */
    bool check_numerics;       /* fail the step on a NaN/Inf gradient: true */
} psg_optimizer_config_t;

typedef struct psg_optimizer psg_optimizer_t;

/* TensorFlow's defaults for `kind` (learning_rate 0.01; see the fields).
 * An unknown kind is kept as is: psg_optimizer_new reports it. */
psg_optimizer_config_t psg_optimizer_defaults(const char *kind);
/* An optimizer with a copy of *cfg. NULL with the error set on an unknown
 * kind or a hyper-parameter out of range. The caller owns it. */
psg_optimizer_t *psg_optimizer_new(const psg_optimizer_config_t *cfg);
void psg_optimizer_destroy(psg_optimizer_t **opt);
/* Uses a scalar f32 endpoint as the learning rate (a schedule, a
 * placeholder) instead of the constant; it must belong to the graph later
 * passed to minimize / apply_gradients. */
void psg_optimizer_set_learning_rate_tensor(psg_optimizer_t *opt, psg_endpoint_t lr);
/* Its config (kind, hyper-parameters) and its learning-rate tensor (PSG_NO_ENDPOINT:
 * the constant): what an optimizer built beside it with the same rate needs. */
const psg_optimizer_config_t *psg_optimizer_config(const psg_optimizer_t *opt);
psg_endpoint_t psg_optimizer_learning_rate_tensor(const psg_optimizer_t *opt);
/* "GradientDescent", "Momentum", "RMSProp", "Adam", "Adagrad", "Ftrl": the scope of
 * its update nodes and the suffix of its slot variables. */
const char *psg_optimizer_name(const psg_optimizer_t *opt);

/* Adds the updates of vars[i] by grads[i] to g and sets *train_op to a NoOp
 * that runs them all and then increments the global step (psg_global_step).
 * A pair whose gradient is PSG_NO_ENDPOINT is skipped; no gradient at all is
 * an error. Slot variables are named "<var>/<Name>", "<var>/<Name>_1" as
 * TensorFlow's (Momentum; RMSProp ms, mom; Adam m, v; Adagrad; Ftrl accum, linear), created with
 * their initializers in "init" (RMSProp's ms at 1.0, Adagrad's at
 * initial_accumulator, the others at 0) on the variable's requested device,
 * or found by name when an earlier call made them; Adam adds the variables
 * "beta1_power" and "beta2_power", advanced after the updates. Updates wait
 * for every gradient (a NoOp "<Name>/gradients_ready"), so no gradient reads a
 * variable an update already changed. Build outside any name scope for
 * TensorFlow's exact names (the current scope prefixes them).
 * Returns 0, or -1 with the error set (and the graph's error when a node failed). */
int psg_optimizer_apply_gradients(psg_optimizer_t *opt, psg_graph_t *g, int n,
                                  const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                                  int *train_op);
/* psg_gradients of `loss` with respect to every variable of the
 * "trainable_variables" collection, then apply_gradients. */
int psg_optimizer_minimize(psg_optimizer_t *opt, psg_graph_t *g, psg_endpoint_t loss,
                           int *train_op);

#endif
