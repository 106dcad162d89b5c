/* The op registry: each op is registered once with its signature, its shape
 * inference, its gradient (which builds graph nodes, not numbers) and a
 * kernel per device type. Adding an op touches one file under ops/ (the def),
 * its kernels under ops/cpu/ (and ops/cuda/); a new family adds one line to
 * ops/families.c. */
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

typedef struct psg_kernel_ctx psg_kernel_ctx_t;
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

struct psg_rendezvous;
typedef struct psg_async_op psg_async_op_t;

/* What a kernel sees for one run of one node. */
struct psg_kernel_ctx {
    const psg_node_t *node;
    int num_inputs;
    psg_tensor_t *const *inputs;
    int num_outputs;
    psg_tensor_t **outputs;        /* the kernel sets each (alloc below or an alias) */
    const psg_dtype_t *out_dtypes; /* inferred from the concrete input shapes */
    const psg_shape_t *out_shapes;
    psg_resource_mgr_t *resources;
    psg_threadpool_t *pool; /* for psg_parallel_for; may be NULL */
    int64_t step_id;
    struct psg_rendezvous *rendezvous; /* the step's, for Send/Recv; NULL when the run has none */
    psg_async_op_t *async;             /* set for PSG_OP_ASYNC ops only */
    int device;         /* -1: a CPU kernel on host tensors; k: a CUDA kernel on GPU k's tensors */
    const void *params; /* the def's prepare struct for this node; NULL without prepare */
};

/* Allocates output i with its inferred dtype and shape (uninitialized), in
 * host memory or on the kernel's GPU (ctx->device), and returns it (still
 * owned by the ctx). NULL with the error set on failure. */
psg_tensor_t *psg_kernel_alloc_output(psg_kernel_ctx_t *ctx, int i);
/* Makes output i an alias of t (takes a new reference). */
void psg_kernel_set_output(psg_kernel_ctx_t *ctx, int i, psg_tensor_t *t);

/* An op flagged PSG_OP_ASYNC: its kernel returns 0 once it has started the
 * work (or -1 with the error set if it could not, and then never calls done),
 * keeps ctx->async (the ctx itself is gone after the call) and later, from
 * any thread, sets each output and calls psg_async_op_done exactly once.
 * The outputs' shapes come from the data: no completeness check is made. */
/* Makes output i of the pending op t (takes a new reference). */
void psg_async_op_set_output(psg_async_op_t *a, int i, psg_tensor_t *t);
/* The node the pending op runs (for messages and attributes). */
const psg_node_t *psg_async_op_node(const psg_async_op_t *a);
/* Finishes the op: rc 0, or -1 with the error set on the calling thread.
 * Frees a. */
void psg_async_op_done(psg_async_op_t *a, int rc);

/* The gradient of an op whose outputs do not vary smoothly with its inputs (ArgMax,
 * Equal, counts, shapes, ids): no gradient for any input. */
int psg_grad_none(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                  psg_endpoint_t *dx);

/* ---- helpers for infer functions ---- */

/* Checks input i has dtype dt; error "input i (name) must be f32, got i64". */
int psg_infer_expect_dtype(psg_infer_ctx_t *c, int i, psg_dtype_t dt);
/* For the ops that run in f32 or a 16-bit float (mixed precision): checks
 * every input is f32, bf16 or f16, all one dtype, and sets *dt to it. */
int psg_infer_expect_compute_dtype(psg_infer_ctx_t *c, psg_dtype_t *dt);
/* Checks input i has rank r (unknown rank passes). */
int psg_infer_expect_rank(psg_infer_ctx_t *c, int i, int rank);
/* Numpy broadcasting of two shapes into *out; -1 with the error set if they
 * cannot broadcast. Unknown dims broadcast to unknown. */
int psg_shape_broadcast(const psg_shape_t *a, const psg_shape_t *b, psg_shape_t *out);

#endif
