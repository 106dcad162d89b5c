/* The update ops as graph builders (SGD, momentum, RMSProp, Adam, AdaGrad,
 * with TensorFlow's formulas), and the small variable ops an optimizer needs.
 * Their kernels are ops/cpu/train.c (and ops/cuda/train.c). Not the
 * optimizers that wire them to a loss's gradients (optimizer.h). */
#ifndef PSGRAPH_OPS_TRAIN_H
#define PSGRAPH_OPS_TRAIN_H

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

#endif
