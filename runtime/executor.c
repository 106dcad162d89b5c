/* The executor: dependency counting, a ready queue shared by the calling
 * thread and pool helpers, kernels run with their concrete shapes inferred,
 * and every buffer released as soon as its last consumer is done. A node
 * assigned to a GPU runs its CUDA kernel on device tensors (its CPU kernel on
 * host copies when the op has none); tensors are copied where an edge
 * crosses devices. Not the planner (plan.c), placement or partitioning. */
#include "runtime/executor.h"
#include "core/membudget.h"
#include "graph/graph_layout.h"
#include "ops/kernel_ctx.h"
#include "psgraph/device.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/fp_mode.h"
#include "psgraph/rendezvous.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/plan_internal.h"

/* ---- running a plan ---- */

typedef struct psg_run run_t;

/* Runs of one plan in arrival order (docs/engine.md, "Overlapping runs, ordered per resource").
 * Each run holds a ticket with a gate per resource group: closed while the
 * run before still has nodes of that group to finish. */
struct psg_run_order {
    const psg_plan_t *p;
    pthread_mutex_t lock; /* taken before a run's lock, never after */
    psg_run_ticket_t *last;
    int tickets; /* not yet released */
};

struct psg_run_ticket {
    psg_run_order_t *order;
    psg_run_ticket_t *prev; /* the run before, while its ticket is held */
    psg_run_ticket_t *next; /* the run after: its gates open as this run's groups end */
    int *group_left;        /* this run's nodes of each group not finished */
    bool *gate_closed;      /* per group: the run before still touches it */
    int closed;             /* gates closed */
    run_t *run;             /* while its plan runs */
};

struct psg_run {
    psg_plan_t *p;
    psg_threadpool_t *pool;
    psg_resource_mgr_t *rm;
    int64_t step_id;
    psg_rendezvous_t *rendezvous;
    psg_node_timing_fn on_node; /* NULL: no timing */
    void *on_node_ctx;
    bool sync_gpu;           /* with on_node: a GPU node's time ends when its kernels did */
    psg_membudget_t *budget; /* its kernels' buffers are charged to it (NULL: none) */
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int *ready; /* LIFO stack of plan-local ids */
    int num_ready;
    int remaining; /* nodes not yet finished */
    int running;   /* nodes being executed */
    int helpers;   /* pool helpers inside run_loop */
    int max_threads;
    bool failed;
    psg_err_code_t error_code; /* the first failed node's: a caller decides on it */
    char error[1024];
    psg_run_ticket_t *ticket; /* NULL: runs alone */
    bool continued;           /* the thread that opened a gate runs what it released */
    /* a run without a thread of its own while it waits (psg_run_start with a wake): */
    psg_run_wake_fn wake; /* NULL: its driver sleeps on `changed` instead */
    void *wake_ctx;
    bool suspended; /* psg_run_continue returned 0: no thread drives it */
    bool wake_due;  /* wake it once its lock is let go (run_unlock) */
    /* the run's own state */
    psg_tensor_t **slots;
    atomic_int *pending;
    atomic_int *uses_left;
};

static void release_slot(run_t *r, int slot) {
    if (atomic_fetch_sub(&r->uses_left[slot], 1) == 1) psg_tensor_destroy(&r->slots[slot]);
}

/* With r->lock: whether its driver (psg_run_continue) has something to do: nodes to run,
 * or the run to end (done, failed, or stalled with every gate open). */
static bool driver_can_go(const run_t *r) {
    if (r->num_ready > 0 && !r->failed && !r->continued) return true;
    return r->running == 0 && r->helpers == 0 &&
           (r->remaining == 0 || r->failed || !r->ticket || !r->ticket->closed);
}

/* With r->lock, where something of r changed: wakes its sleeping driver, or makes a run
 * that waits without a thread due to be woken (by run_unlock, once the lock is let go). */
static void signal_driver(run_t *r) {
    if (!r->wake) {
        pthread_cond_broadcast(&r->changed);
    } else if (r->suspended && driver_can_go(r)) {
        r->suspended = false;
        r->wake_due = true;
    }
}

/* Lets go of r->lock and calls the wake that became due: from then on another thread may
 * drive r, and finish it, so r is not touched after. */
static void run_unlock(run_t *r) {
    bool due = r->wake_due;
    r->wake_due = false;
    psg_run_wake_fn fn = r->wake;
    void *ctx = r->wake_ctx;
    pthread_mutex_unlock(&r->lock);
    if (due) fn(ctx);
}

/* Wakes that became due under the order's lock (open_gate), called once it is let go. */
static _Thread_local struct {
    psg_run_wake_fn fn;
    void *ctx;
} deferred_wake[4];
static _Thread_local int n_deferred_wakes;

static void defer_wake_locked(run_t *r) {
    if (!r->wake_due) return;
    r->wake_due = false;
    PSG_ASSERT(n_deferred_wakes < 4); /* one gate opening wakes the one run after */
    deferred_wake[n_deferred_wakes].fn = r->wake;
    deferred_wake[n_deferred_wakes++].ctx = r->wake_ctx;
}

static void flush_deferred_wakes(void) {
    while (n_deferred_wakes > 0) {
        n_deferred_wakes--;
        deferred_wake[n_deferred_wakes].fn(deferred_wake[n_deferred_wakes].ctx);
    }
}

/* Finishes a PSG_OP_ASYNC node: the done hook of its psg_async_op (ops/kernel_ctx.h),
 * whose runner is the run and index the node's plan-local id. */
static void async_done(psg_async_op_t *a, int rc);

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The bytes of the tensors (the timeline's args.bytes of a Send or a Recv); a resource
 * handle counts nothing. */
static int64_t tensors_bytes(psg_tensor_t *const *t, int n) {
    int64_t sum = 0;
    for (int i = 0; i < n; i++)
        if (t[i] && t[i]->dtype != PSG_DT_RESOURCE) sum += (int64_t)psg_tensor_nbytes(t[i]);
    return sum;
}

/* Keeps the outputs that someone reads and releases the node's inputs. */
static void store_outputs(run_t *r, plan_node_t *pn, psg_tensor_t **outputs) {
    const psg_node_t *n = pn->node;
    for (int o = 0; o < n->num_outputs; o++) {
        int s = pn->slot_base + o;
        if (r->p->slot_uses[s])
            r->slots[s] = outputs[o];
        else
            psg_tensor_destroy(&outputs[o]); /* nobody reads it */
    }
    for (int i = 0; i < n->num_inputs; i++) release_slot(r, pn->input_slots[i]);
}

/* One node's per-input arrays: its inputs (on its device), their dtypes and shapes, and
 * the copies made to move them there (owned by the run of the node). */
typedef struct {
    psg_tensor_t **inputs, **moved;
    psg_dtype_t *dt;
    psg_shape_t *sh;
} node_io_t;

/* A node of at most this many inputs keeps its arrays on the stack; a larger one (a peer's
 * AddN may list 200,000) on the heap: no array sized by a graph lives on a thread's stack. */
#define FEW_INPUTS 8

static int execute_node_io(run_t *r, plan_node_t *pn, node_io_t *io);

/* Runs one node's kernel; returns 0, 1 when an async kernel has started (its
 * psg_async_op_done finishes the node), or -1 with the error naming the node. */
static int execute_node(run_t *r, plan_node_t *pn) {
    size_t ni = (size_t)pn->node->num_inputs;
    psg_tensor_t *inputs[FEW_INPUTS], *moved[FEW_INPUTS];
    psg_dtype_t dt[FEW_INPUTS];
    psg_shape_t sh[FEW_INPUTS];
    node_io_t io = {inputs, moved, dt, sh};
    void *heap = NULL;
    if (ni > FEW_INPUTS) {
        heap =
            malloc(ni * (sizeof(psg_shape_t) + 2 * sizeof(psg_tensor_t *) + sizeof(psg_dtype_t)));
        if (!heap)
            return psg_error_set_code(PSG_ERR_NO_MEMORY,
                                      "node '%s' (%s): out of memory for its %zu inputs",
                                      pn->node->name, psg_node_op(pn->node), ni);
        io.sh = heap; /* the most aligned first */
        io.inputs = (psg_tensor_t **)(io.sh + ni);
        io.moved = io.inputs + ni;
        io.dt = (psg_dtype_t *)(io.moved + ni);
    }
    int rc = execute_node_io(r, pn, &io);
    free(heap);
    return rc;
}

static int execute_node_io(run_t *r, plan_node_t *pn, node_io_t *io) {
    psg_plan_t *p = r->p;
    const psg_node_t *n = pn->node;
    bool async = n->def->flags & PSG_OP_ASYNC;
    int ni = n->num_inputs, no = n->num_outputs;
    psg_tensor_t **inputs = io->inputs, **moved = io->moved;
    psg_dtype_t *in_dt = io->dt, out_dt[PSG_MAX_OUTPUTS];
    psg_shape_t *in_sh = io->sh, out_sh[PSG_MAX_OUTPUTS];
    psg_tensor_t *sync_outputs[PSG_MAX_OUTPUTS] = {0};
    psg_async_op_t *a = NULL;
    psg_tensor_t **outputs = sync_outputs;
    int rc = 0;
    for (int i = 0; i < ni; i++) {
        inputs[i] = r->slots[pn->input_slots[i]];
        PSG_ASSERT(inputs[i]);
        moved[i] = NULL;
        if (inputs[i]->buf->device != pn->device && inputs[i]->dtype != PSG_DT_RESOURCE) {
            moved[i] = psg_tensor_to_device(inputs[i], pn->device);
            if (!moved[i])
                rc = psg_error_wrap("input %d", i);
            else
                inputs[i] = moved[i];
        }
        in_dt[i] = inputs[i]->dtype;
        /* a resource handle's runtime tensor is a scalar; its shape is the variable's */
        in_sh[i] = in_dt[i] == PSG_DT_RESOURCE
                       ? p->g->nodes[n->inputs[i].node]->out_shapes[n->inputs[i].index]
                       : inputs[i]->shape;
    }
    for (int o = 0; o < no; o++) {
        out_dt[o] = PSG_DT_INVALID;
        out_sh[o] = psg_shape_unknown();
    }
    psg_infer_ctx_t ic = {n, ni, in_dt, in_sh, no, out_dt, out_sh};
    if (rc == 0) rc = n->def->infer(&ic);
    bool dynamic = n->def->flags & PSG_OP_DYNAMIC_SHAPE;
    for (int o = 0; rc == 0 && !async && !dynamic && o < no; o++) {
        if (out_dt[o] != PSG_DT_RESOURCE && !psg_shape_is_complete(&out_sh[o])) {
            char b[PSG_SHAPE_STR_MAX];
            rc = psg_error_set("output %d has no complete shape at run time (%s)", o,
                               psg_shape_str(&out_sh[o], b, sizeof b));
        }
    }
    if (rc == 0 && async) {
        a = calloc(1, sizeof *a);
        if (!a)
            rc = psg_error_set("out of memory");
        else {
            a->node = n;
            a->done = async_done;
            a->runner = r;
            a->index = (int)(pn - p->nodes);
            outputs = a->outputs;
        }
    }
    int64_t start_ns = r->on_node ? mono_ns() : 0;
    /* the timeline's bytes of a Send: its input, read before the kernel moves it */
    int64_t send_bytes =
        r->on_node && rc == 0 && !strcmp(psg_node_op(n), "Send") ? tensors_bytes(inputs, ni) : 0;
    if (a) a->start_ns = start_ns;
    if (rc == 0) {
        psg_kernel_ctx_t kc = {.node = n,
                               .num_inputs = ni,
                               .inputs = inputs,
                               .num_outputs = no,
                               .outputs = outputs,
                               .out_dtypes = out_dt,
                               .out_shapes = out_sh,
                               .resources = r->rm,
                               .pool = r->pool,
                               .step_id = r->step_id,
                               .rendezvous = r->rendezvous,
                               .async = a,
                               .device = pn->device - 1,
                               .params = pn->params,
                               .state = pn->state};
        unsigned fp = psg_fp_enter(); /* denormals as the process chose, on any thread */
        rc = pn->kernel(&kc);
        psg_fp_leave(fp);
        for (int i = 0; i < ni; i++) psg_tensor_destroy(&moved[i]);
        if (rc == 0 && async) return 1; /* a belongs to psg_async_op_done now */
        for (int o = 0; rc == 0 && o < no; o++)
            if (!outputs[o]) rc = psg_error_set("kernel left output %d unset", o);
        if (rc == 0 && r->on_node && r->sync_gpu && pn->device != PSG_DEVICE_HOST)
            rc = psg_gpu_synchronize(pn->device - 1);
    }
    if (rc < 0) {
        for (int i = 0; i < ni; i++) psg_tensor_destroy(&moved[i]);
        for (int o = 0; o < no; o++) psg_tensor_destroy(&outputs[o]);
        free(a);
        return psg_error_wrap("node '%s' (%s)", n->name, psg_node_op(n));
    }
    int64_t recv_bytes =
        r->on_node && !strcmp(psg_node_op(n), "Recv") ? tensors_bytes(outputs, no) : 0;
    store_outputs(r, pn, outputs);
    if (r->on_node)
        r->on_node(r->on_node_ctx, n->name, psg_node_op(n), r->step_id, start_ns, mono_ns(),
                   send_bytes + recv_bytes);
    return 0;
}

/* Aborts the step in the rendezvous (without r->lock: the abort runs the
 * callbacks of waiting Recvs, which take it) so no partition waits for a
 * tensor this failed node will never send. */
static void abort_step(run_t *r) {
    if (!r->rendezvous) return;
    /* the abort fails waiting Recvs, maybe on this thread: keep this node's error */
    psg_err_code_t code = psg_error_code();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", psg_error_message());
    psg_rendezvous_abort_step(r->rendezvous, r->step_id, msg);
    psg_error_set_code(code, "%s", msg);
}

/* ---- ordered runs ---- */

psg_run_order_t *psg_run_order_new(const psg_plan_t *p) {
    if (!p->can_overlap) {
        psg_error_set(
            "the plan's runs cannot overlap: a stateful node outside every resource group");
        return NULL;
    }
    psg_run_order_t *o = calloc(1, sizeof *o);
    if (!o) {
        psg_error_set("out of memory");
        return NULL;
    }
    o->p = p;
    pthread_mutex_init(&o->lock, NULL);
    return o;
}

void psg_run_order_destroy(psg_run_order_t **op) {
    if (!op || !*op) return;
    psg_run_order_t *o = *op;
    *op = NULL;
    PSG_ASSERT(o->tickets == 0);
    pthread_mutex_destroy(&o->lock);
    free(o);
}

psg_run_ticket_t *psg_run_order_take(psg_run_order_t *o) {
    int ng = o->p->num_groups;
    psg_run_ticket_t *t = calloc(1, sizeof *t);
    if (t) {
        t->group_left = malloc(sizeof(int) * (size_t)(ng + 1));
        t->gate_closed = calloc((size_t)ng + 1, sizeof(bool));
    }
    if (!t || !t->group_left || !t->gate_closed) {
        if (t) {
            free(t->group_left);
            free(t->gate_closed);
        }
        free(t);
        psg_error_set("out of memory");
        return NULL;
    }
    t->order = o;
    pthread_mutex_lock(&o->lock);
    psg_run_ticket_t *prev = o->last;
    for (int g = 0; g < ng; g++) {
        t->group_left[g] = o->p->group_start[g + 1] - o->p->group_start[g];
        t->gate_closed[g] = prev && prev->group_left[g] > 0;
        t->closed += t->gate_closed[g];
    }
    t->prev = prev;
    if (prev) prev->next = t;
    o->last = t;
    o->tickets++;
    pthread_mutex_unlock(&o->lock);
    return t;
}

/* Continuing: the thread that opens a gate of a run whose own thread is
 * asleep (nothing of it executing) runs the nodes it released itself, once
 * it let go of the order's lock, instead of waking that thread. On a ps that
 * is a variable's read and Send for the worker's next step, right after this
 * step's update of it: one wake-up less on the step's critical path. One
 * level only: nodes run so never continue another run. */
static _Thread_local run_t *continuation;
static _Thread_local bool continuing;

static void run_loop(run_t *r);

/* Runs the run this thread took over in open_gate, until nothing of it is ready. */
static void run_continuation(void) {
    run_t *r = continuation;
    if (!r) return;
    continuation = NULL;
    continuing = true;
    for (;;) {
        run_loop(r);
        pthread_mutex_lock(&r->lock);
        if (r->num_ready > 0 && !r->failed && r->remaining > 0) { /* made ready meanwhile */
            pthread_mutex_unlock(&r->lock);
            continue;
        }
        r->continued = false;
        r->helpers--;
        signal_driver(r);
        run_unlock(r);
        break;
    }
    continuing = false;
}

/* With the order's lock: opens gate g of t, and makes the nodes it held back
 * ready when t's run is under way. */
static void open_gate(psg_run_ticket_t *t, int g) {
    if (!t || !t->gate_closed[g]) return;
    t->gate_closed[g] = false;
    run_t *r = t->run;
    if (!r) {
        t->closed--;
        return;
    }
    const psg_plan_t *p = t->order->p;
    /* the run's thread reads t->closed under its lock: it must not see the gate open
     * before the nodes it held back are ready, or it would end the run without them */
    pthread_mutex_lock(&r->lock);
    t->closed--;
    for (int i = p->group_start[g]; i < p->group_start[g + 1]; i++) {
        int li = p->group_nodes[i];
        if (atomic_fetch_sub(&r->pending[li], 1) == 1) r->ready[r->num_ready++] = li;
    }
    if (!continuing && !continuation && !r->continued && r->running == 0 && !r->failed &&
        r->num_ready > 0 && r->p->host_only) {
        r->continued = true;
        r->helpers++; /* keeps r alive, and its thread waiting, until run_continuation */
        continuation = r;
    } else {
        signal_driver(r);
    }
    defer_wake_locked(r);
    pthread_mutex_unlock(&r->lock);
}

/* Node li of r finished (or will never run): the next run may touch a group
 * once all of this run's nodes of it are done. */
static void groups_node_done(run_t *r, int li) {
    const plan_node_t *pn = &r->p->nodes[li];
    psg_run_ticket_t *t = r->ticket;
    if (!t || !pn->num_groups) return;
    pthread_mutex_lock(&t->order->lock);
    for (int k = 0; k < pn->num_groups; k++)
        if (--t->group_left[pn->groups[k]] == 0) open_gate(t->next, pn->groups[k]);
    pthread_mutex_unlock(&t->order->lock);
    flush_deferred_wakes();
    run_continuation();
}

void psg_run_ticket_release(psg_run_ticket_t **tp) {
    if (!tp || !*tp) return;
    psg_run_ticket_t *t = *tp;
    *tp = NULL;
    psg_run_order_t *o = t->order;
    pthread_mutex_lock(&o->lock);
    PSG_ASSERT(!t->run);
    /* A run that failed or never ran holds nothing back any more; a run
     * before it may still, and the run after then waits for that one. */
    psg_run_ticket_t *prev = t->prev, *next = t->next;
    for (int g = 0; g < o->p->num_groups; g++) {
        t->group_left[g] = 0;
        if (!(prev && prev->group_left[g] > 0)) open_gate(next, g);
    }
    if (prev) prev->next = next;
    if (next) next->prev = prev;
    if (o->last == t) o->last = prev;
    o->tickets--;
    pthread_mutex_unlock(&o->lock);
    free(t->group_left);
    free(t->gate_closed);
    free(t);
    flush_deferred_wakes();
    run_continuation();
}

/* Called with r->lock held once node li has finished: records the error, or
 * makes its consumers ready. */
static void node_finished(run_t *r, int li, int rc) {
    psg_plan_t *p = r->p;
    r->running--;
    r->remaining--;
    if (rc < 0) {
        /* the first failure, unless it was only the abort another failure caused */
        if (!r->failed || psg_error_is_cause_of(r->error_code, psg_error_code())) {
            r->error_code = psg_error_code();
            snprintf(r->error, sizeof r->error, "%s", psg_error_message());
        }
        r->failed = true;
    } else {
        plan_node_t *pn = &p->nodes[li];
        for (int k = 0; k < pn->num_consumers; k++) {
            int c = pn->consumers[k];
            if (atomic_fetch_sub(&r->pending[c], 1) == 1) r->ready[r->num_ready++] = c;
        }
    }
    signal_driver(r);
}

static void async_done(psg_async_op_t *a, int rc) {
    run_t *r = a->runner;
    plan_node_t *pn = &r->p->nodes[a->index];
    const psg_node_t *n = pn->node;
    for (int o = 0; rc == 0 && o < n->num_outputs; o++)
        if (!a->outputs[o]) rc = psg_error_set("kernel left output %d unset", o);
    if (rc < 0) {
        for (int o = 0; o < n->num_outputs; o++) psg_tensor_destroy(&a->outputs[o]);
        psg_error_wrap("node '%s' (%s)", n->name, psg_node_op(n));
        abort_step(r);
    } else {
        int64_t bytes = r->on_node && !strcmp(psg_node_op(n), "Recv")
                            ? tensors_bytes(a->outputs, n->num_outputs)
                            : 0;
        store_outputs(r, pn, a->outputs);
        if (r->on_node)
            r->on_node(r->on_node_ctx, n->name, psg_node_op(n), r->step_id, a->start_ns, mono_ns(),
                       bytes);
    }
    groups_node_done(r, a->index);
    pthread_mutex_lock(&r->lock);
    node_finished(r, a->index, rc);
    free(a);
    run_unlock(r); /* r may be gone as soon as the lock is released */
}

static void helper_main(void *arg) {
    run_t *r = arg;
    run_loop(r);
    pthread_mutex_lock(&r->lock);
    r->helpers--;
    signal_driver(r);
    run_unlock(r);
}

/* Called with the lock held: wakes pool helpers for ready work beyond what
 * the threads already running can take. */
static void maybe_spawn(run_t *r) {
    while (r->num_ready > 1 && 1 + r->helpers < r->max_threads && r->helpers < r->num_ready - 1) {
        r->helpers++;
        psg_threadpool_submit(r->pool, helper_main, r);
    }
}

/* The caller runs this until the step is done; helpers run it until no work
 * is ready (they never wait, so they never hold a pool thread idle). */
static void run_loop(run_t *r) {
    psg_plan_t *p = r->p;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        if (r->failed || r->remaining == 0) break;
        if (r->num_ready == 0) break;
        int li = r->ready[--r->num_ready];
        r->running++;
        maybe_spawn(r);
        run_unlock(r);

        psg_membudget_t *outer = psg_membudget_enter(r->budget);
        int rc = execute_node(r, &p->nodes[li]);
        psg_membudget_enter(outer);
        if (rc < 0) abort_step(r);
        if (rc != 1) groups_node_done(r, li);

        pthread_mutex_lock(&r->lock);
        if (rc != 1) node_finished(r, li, rc);
    }
    run_unlock(r);
}

int psg_plan_run(psg_plan_t *p, psg_threadpool_t *pool, psg_resource_mgr_t *rm, int64_t step_id,
                 psg_tensor_t *const *feed_values, psg_tensor_t **fetched) {
    psg_run_env_t env = {.pool = pool, .rm = rm, .step_id = step_id};
    return psg_plan_run_with(p, &env, feed_values, fetched);
}

/* Whether the fed values match the fed outputs' static dtypes and shapes. */
static int check_feeds(const psg_plan_t *p, psg_tensor_t *const *feed_values) {
    for (int i = 0; i < p->n_feeds; i++) {
        int s = p->feed_slots[i];
        if (s < 0) continue;
        const psg_tensor_t *t = feed_values[i];
        if (!t) return psg_error_set("feed %d is NULL", i);
        const psg_node_t *n = p->g->nodes[p->feeds[i].node];
        int o = p->feeds[i].index;
        if (t->dtype != n->out_dtypes[o] || !psg_shape_compatible(&t->shape, &n->out_shapes[o])) {
            char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
            return psg_error_set("node '%s' (%s): fed %s%s, expects %s%s", n->name, psg_node_op(n),
                                 psg_dtype_name(t->dtype), psg_shape_str(&t->shape, a, sizeof a),
                                 psg_dtype_name(n->out_dtypes[o]),
                                 psg_shape_str(&n->out_shapes[o], b, sizeof b));
        }
    }
    return 0;
}

psg_run_t *psg_run_start(psg_plan_t *p, const psg_run_env_t *env, psg_tensor_t *const *feed_values,
                         psg_run_wake_fn wake, void *wake_ctx) {
    if (check_feeds(p, feed_values) < 0) return NULL;
    /* the run and its own state, in one block: the run, slots (pointers), then the counters */
    size_t ns = (size_t)p->num_slots + 1, nn = (size_t)p->num_nodes + 1;
    run_t *r = calloc(1, sizeof *r + ns * sizeof *r->slots + ns * sizeof *r->uses_left +
                             nn * sizeof *r->pending + nn * sizeof *r->ready);
    if (!r) {
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory for a run of %d nodes", p->num_nodes);
        return NULL;
    }
    *r = (run_t){.p = p,
                 .pool = env->pool,
                 .rm = env->rm,
                 .step_id = env->step_id,
                 .rendezvous = env->rendezvous,
                 .on_node = env->on_node,
                 .on_node_ctx = env->on_node_ctx,
                 .sync_gpu = env->sync_gpu,
                 .ticket = env->ticket,
                 .budget = env->budget,
                 .wake = wake,
                 .wake_ctx = wake_ctx};
    PSG_ASSERT(!r->ticket || r->ticket->order->p == p);
    r->slots = (psg_tensor_t **)(r + 1);
    r->uses_left = (atomic_int *)(r->slots + ns);
    r->pending = r->uses_left + ns;
    r->ready = (int *)(r->pending + nn);
    for (int s = 0; s < p->num_slots; s++) atomic_init(&r->uses_left[s], p->slot_uses[s]);
    for (int i = 0; i < p->n_feeds; i++) {
        int s = p->feed_slots[i];
        if (s >= 0 && p->slot_uses[s] && !r->slots[s]) r->slots[s] = psg_tensor_ref(feed_values[i]);
    }
    for (int li = 0; li < p->num_nodes; li++) atomic_init(&r->pending[li], p->nodes[li].num_deps);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    r->remaining = p->num_exec;
    r->max_threads = psg_threadpool_size(env->pool);

    /* The gates still closed hold their groups' nodes back; from here on the
     * run before opens them (open_gate), under the order's lock. */
    psg_run_order_t *order = r->ticket ? r->ticket->order : NULL;
    if (order) {
        pthread_mutex_lock(&order->lock);
        for (int g = 0; g < p->num_groups; g++) {
            if (!r->ticket->gate_closed[g]) continue;
            for (int i = p->group_start[g]; i < p->group_start[g + 1]; i++)
                atomic_fetch_add(&r->pending[p->group_nodes[i]], 1);
        }
        r->ticket->run = r;
    }
    for (int i = p->num_initial_ready - 1; i >= 0; i--)
        if (atomic_load(&r->pending[p->initial_ready[i]]) == 0)
            r->ready[r->num_ready++] = p->initial_ready[i];
    if (order) pthread_mutex_unlock(&order->lock);
    return r;
}

int psg_run_continue(psg_run_t *r) {
    pthread_mutex_lock(&r->lock);
    for (;;) {
        if (r->num_ready > 0 && !r->failed && !r->continued) {
            pthread_mutex_unlock(&r->lock);
            run_loop(r);
            pthread_mutex_lock(&r->lock);
            continue;
        }
        if (r->running == 0 && r->helpers == 0 &&
            (r->remaining == 0 || r->failed || !r->ticket || !r->ticket->closed))
            break;
        if (r->wake) { /* waits without this thread: signal_driver makes the wake due */
            r->suspended = true;
            pthread_mutex_unlock(&r->lock);
            return 0;
        }
        pthread_cond_wait(&r->changed, &r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return 1;
}

int psg_run_finish(psg_run_t **rp, psg_tensor_t **fetched) {
    run_t *r = *rp;
    *rp = NULL;
    const psg_plan_t *p = r->p;
    if (r->ticket) {
        pthread_mutex_lock(&r->ticket->order->lock);
        r->ticket->run = NULL;
        pthread_mutex_unlock(&r->ticket->order->lock);
    }
    int rc = 0;
    for (int i = 0; fetched && i < p->n_fetches; i++) fetched[i] = NULL;
    if (r->failed) {
        rc = psg_error_set_code(r->error_code, "%s", r->error);
    } else if (r->remaining != 0) {
        rc = psg_error_set("executor stalled with %d nodes left (internal error)", r->remaining);
    } else if (fetched) {
        /* fetches come back in host memory, as every caller reads them there */
        for (int i = 0; i < p->n_fetches && rc == 0; i++) {
            fetched[i] = psg_tensor_to_host(r->slots[p->fetch_slots[i]]);
            if (!fetched[i]) rc = psg_error_wrap("fetch %d", i);
        }
        for (int i = 0; rc < 0 && i < p->n_fetches; i++) psg_tensor_destroy(&fetched[i]);
    }
    for (int s = 0; s < p->num_slots; s++) psg_tensor_destroy(&r->slots[s]);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->changed);
    free(r);
    return rc;
}

int psg_plan_run_with(psg_plan_t *p, const psg_run_env_t *env, psg_tensor_t *const *feed_values,
                      psg_tensor_t **fetched) {
    for (int i = 0; i < p->n_fetches; i++) fetched[i] = NULL;
    psg_run_t *r = psg_run_start(p, env, feed_values, NULL, NULL);
    if (!r) return -1;
    psg_run_continue(r); /* without a wake: returns once the run is over */
    return psg_run_finish(&r, fetched);
}
