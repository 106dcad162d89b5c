/* Optimizers as graph ops: builders of the update ops that change a variable
 * and its slots in place (SGD, momentum, RMSProp, Adam, AdaGrad, with
 * TensorFlow's formulas), and psg_optimizer_t, which wires them to the
 * gradients of a loss with slot variables, a global step and one train op.
 * Not the training loop (hooks, logging) and not sync replicas. */
#ifndef PSGRAPH_OPTIMIZER_H
#define PSGRAPH_OPTIMIZER_H

#include "psgraph/graph.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- the update ops ----
 * Each takes variable handles (from psg_variable / psg_var_handle) for the
 * variable and its slots, scalar f32 endpoints for the hyper-parameters (so a
 * schedule can feed or compute them) and the gradient, of the variable's
 * shape. The node has no outputs: each returns the node id, or -1 with the
 * error "node 'name' (Op): why" naming the variable on a shape mismatch.
 *
 * NaN/Inf policy: every update op has a bool attr `check_numerics` (on by
 * default; the optimizer's config can turn it off). When on, the kernel scans
 * the gradient before touching anything, and a non-finite element fails the
 * step with "non-finite gradient for variable 'w': element 3 is NaN"; the
 * variable and its slots are left unchanged. The scan is one read pass over
 * the gradient, cheap beside the update itself. */

/* var -= lr * grad */
int psg_apply_gradient_descent(psg_graph_t *g, const char *name, psg_endpoint_t var,
                               psg_endpoint_t lr, psg_endpoint_t grad);
/* accum = momentum * accum + grad; var -= lr * accum
 * (use_nesterov: var -= lr * grad + lr * momentum * accum) */
int psg_apply_momentum(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t accum,
                       psg_endpoint_t lr, psg_endpoint_t grad, psg_endpoint_t momentum,
                       bool use_nesterov);
/* Non-centered RMSProp with momentum, as Inception uses:
 * ms = rho * ms + (1 - rho) * grad^2; mom = momentum * mom + lr * grad / sqrt(ms + epsilon);
 * var -= mom */
int psg_apply_rmsprop(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t ms,
                      psg_endpoint_t mom, psg_endpoint_t lr, psg_endpoint_t rho,
                      psg_endpoint_t momentum, psg_endpoint_t epsilon, psg_endpoint_t grad);
/* lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power);
 * m += (grad - m) * (1 - beta1); v += (grad^2 - v) * (1 - beta2);
 * var -= lr_t * m / (sqrt(v) + epsilon). The beta powers are values (read
 * them from their variables); the op does not advance them. */
int psg_apply_adam(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t m,
                   psg_endpoint_t v, psg_endpoint_t beta1_power, psg_endpoint_t beta2_power,
                   psg_endpoint_t lr, psg_endpoint_t beta1, psg_endpoint_t beta2,
                   psg_endpoint_t epsilon, psg_endpoint_t grad);
/* accum += grad^2; var -= lr * grad / sqrt(accum) */
int psg_apply_adagrad(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t accum,
                      psg_endpoint_t lr, psg_endpoint_t grad);
/* The generic form of the builders above: op is "ApplyGradientDescent",
 * "ApplyMomentum", ...; inputs in the op's order; control: a node id the
 * update must run after, or -1. */
int psg_apply_update(psg_graph_t *g, const char *op, const char *name, int n,
                     const psg_endpoint_t *inputs, bool check_numerics, bool use_nesterov,
                     int control);

/* var *= factor (f32 variable, scalar f32 factor): advances Adam's beta powers. */
int psg_scale_variable(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t factor);
/* var += by, for an i64, i32 or f32 variable: advances the global step. */
int psg_increment_variable(psg_graph_t *g, const char *name, psg_endpoint_t var, int64_t by);
/* learning_rate * decay_rate ^ (step / decay_steps) (the exponent floored
 * when staircase), a scalar f32; step is a scalar i64, i32 or f32 value,
 * e.g. psg_read_variable of psg_global_step. PSG_NO_ENDPOINT on error. */
psg_endpoint_t psg_exponential_decay(psg_graph_t *g, const char *name, float learning_rate,
                                     psg_endpoint_t step, int64_t decay_steps, float decay_rate,
                                     bool staircase);

/* The name of the variable behind a handle endpoint ("?" if none). */
const char *psg_variable_name(const psg_graph_t *g, psg_endpoint_t handle);

/* The graph's global step: the handle of the scalar i64 variable
 * "global_step" (starts at 0, in "variables", "init" and the collection
 * "global_step"; not trainable), created on first call under the current
 * device function, found by name after. PSG_NO_ENDPOINT on error. */
psg_endpoint_t psg_global_step(psg_graph_t *g);

/* ---- optimizers ---- */

typedef struct {
    const char *kind;          /* "sgd", "momentum", "rmsprop", "adam", "adagrad" */
    float learning_rate;       /* used unless a learning-rate tensor is set */
    float momentum;            /* momentum: 0.9; rmsprop: 0.0 (Inception: 0.9) */
    bool use_nesterov;         /* momentum only */
    float rho;                 /* rmsprop's decay: 0.9 */
    float epsilon;             /* rmsprop: 1e-10 (Inception: 1.0); adam: 1e-8 */
    float beta1, beta2;        /* adam: 0.9, 0.999 */
    float initial_accumulator; /* adagrad's accumulator start: 0.1 */
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
/* "GradientDescent", "Momentum", "RMSProp", "Adam", "Adagrad": the scope of
 * its update nodes and the suffix of its slot variables. */
const char *psg_optimizer_name(const psg_optimizer_t *opt);

/* Adds the updates of vars[i] by grads[i] to g and sets *train_op to a NoOp
 * that runs them all and then increments the global step (psg_global_step).
 * A pair whose gradient is PSG_NO_ENDPOINT is skipped; no gradient at all is
 * an error. Slot variables are named "<var>/<Name>", "<var>/<Name>_1" as
 * TensorFlow's (Momentum; RMSProp ms, mom; Adam m, v; Adagrad), created with
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
