/* The op registry: each op is registered once with its signature, its shape
 * inference, its gradient (which builds graph nodes, not numbers) and a
 * kernel per device type. Adding an op touches one file under ops/ (the def),
 * its kernels under ops/cpu/ (and ops/cuda/); a new family adds one line to
 * ops/families.c. This header is the graph layer's (graph/op_registry.c): the
 * def and the registry. What an op's own code calls (its kernel's context, the
 * helpers of infer and grad functions) is psgraph/kernel.h, the ops layer's. */
#ifndef PSGRAPH_OP_H
#define PSGRAPH_OP_H

#include "psgraph/graph.h"
#include "psgraph/resource.h"
#include "psgraph/threadpool.h"

#define PSG_MAX_OUTPUTS 8

/* What shape inference sees: the node's attributes (through `node`, which is
 * not yet in the graph: use only psg_node_attr* / psg_node_get_*), the input
 * dtypes and shapes. It fills out_dtypes and out_shapes. At build time shapes
 * may hold unknown dims (-1); at run time the same function runs on the
 * concrete input shapes and must then give complete output shapes. */
typedef struct {
    const psg_node_t *node;
    int num_inputs;
    const psg_dtype_t *in_dtypes;
    const psg_shape_t *in_shapes;
    int num_outputs;
    psg_dtype_t *out_dtypes;
    psg_shape_t *out_shapes;
} psg_infer_ctx_t;

/* Returns 0, or -1 with psg_error_set("why") (the caller adds the node name). */
typedef int (*psg_infer_fn)(psg_infer_ctx_t *c);

/* Builds the gradient of `node`'s inputs given the gradients of its outputs.
 * grad_outputs[i] may be PSG_NO_ENDPOINT (nothing flows back into output i).
 * Sets grad_inputs[j] for each input (PSG_NO_ENDPOINT for none). The new
 * nodes go in `g`, under the current scope. Returns 0 or -1 with the error set. */
typedef int (*psg_grad_fn)(psg_graph_t *g, const psg_node_t *node,
                           const psg_endpoint_t *grad_outputs, psg_endpoint_t *grad_inputs);

/* Parses the node's attributes and derives what its kernels need (a conv's
 * window and geometry, a MatMul's transposes, Concat's axis, an update's
 * flags) into `params`, a zeroed plain struct of the def's params_size
 * bytes: once per node of a plan, at psg_plan_new, and read by the CPU and
 * the CUDA kernel alike as ctx->params. Input shapes known at build time are
 * psg_graph_shape(g, node->inputs[i]) (unknown dims -1). Returns 0, or -1
 * with the error set (the plan fails naming the node). */
typedef int (*psg_prepare_fn)(const psg_graph_t *g, const psg_node_t *node, void *params);

/* What a kernel sees for one run of one node (psgraph/kernel.h). */
typedef struct psg_kernel_ctx psg_kernel_ctx_t;
/* A kernel of an op flagged PSG_OP_ASYNC, between its start and its finish (psgraph/kernel.h). */
typedef struct psg_async_op psg_async_op_t;
/* Computes the node's outputs. Returns 0, or -1 with psg_error_set (the
 * executor adds the node name). */
typedef int (*psg_kernel_fn)(psg_kernel_ctx_t *ctx);

enum {
    PSG_OP_STATEFUL = 1u << 0,     /* touches resources or randomness: never folded or merged */
    PSG_OP_VARIABLE = 1u << 1,     /* creates or names a variable: placed on a ps by the setter */
    PSG_OP_SOURCE_FEED = 1u << 2,  /* a placeholder: must be fed */
    PSG_OP_ASYNC = 1u << 3,        /* the kernel finishes later (Recv): see psg_async_op_done */
    PSG_OP_DYNAMIC_SHAPE = 1u << 4 /* output shapes come from the data (Unique): the kernel
                                      makes its outputs and sets them (psg_kernel_set_output) */
};

struct psg_op_def {
    const char *name; /* "MatMul" */
    int num_inputs;   /* -1: variadic, at least one */
    int num_outputs;  /* fixed; <= PSG_MAX_OUTPUTS */
    unsigned flags;
    psg_infer_fn infer;     /* required */
    psg_grad_fn grad;       /* NULL: not differentiable (autodiff fails if a path needs it) */
    psg_kernel_fn cpu;      /* NULL: no CPU kernel */
    psg_kernel_fn cuda;     /* NULL: no CUDA kernel */
    psg_prepare_fn prepare; /* NULL: the kernels read the node's attributes themselves */
    size_t params_size;     /* the bytes of prepare's struct */
    /* a kernel's own state per plan node, as TensorFlow's kernel members (Const's copy on
     * its GPU): state_size zeroed bytes made with the plan, kept across its runs (one run
     * of a plan at a time), passed to state_free (may be NULL) before the plan frees them */
    size_t state_size;
    void (*state_free)(void *state);
};

/* The registered op named `name`, or NULL. */
const psg_op_def_t *psg_op_lookup(const char *name);
/* All ops, for listing and tests: the i-th (0 <= i < psg_op_count()). */
int psg_op_count(void);
const psg_op_def_t *psg_op_at(int i);
/* Adds a family of ops: defs is a NULL-terminated array, borrowed for the
 * life of the process. The built-in families are registered when the library
 * loads (ops/families.c); a program registers its own before it builds
 * graphs with them. Returns 0, or -1 with the error set when a def has no
 * name or infer function or its name is taken (then nothing is added).
 * Thread-safe. */
int psg_op_register_family(const psg_op_def_t *const *defs);

#endif
