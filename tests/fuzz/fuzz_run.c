/* libFuzzer: a graph registered and run, as a task server runs a peer's (issue 27): the
 * deserializer, the planner, and the executor with every kernel, on a hostile graph. Every
 * node is a target and every Placeholder is fed zeros of its shape; the run has a memory
 * budget of 64 MiB (what its kernels allocate is charged, as on a task server), a fresh
 * resource manager, and waits of at most 10 ms (a Recv, a take, a dequeue). A graph whose
 * static shapes ask for more work than a fuzz input should get (2e7 flops or elements) is
 * not run: the task server's step timeout is its bound there, libFuzzer's -timeout here.
 * (2e8 let a MaxPool of 136 M window reads through: 16 s in this ASan -O1 build, over the
 * 10 s timeout, found after 5.4 M runs; 2e7 keeps the slowest kernel near 2 s.)
 * After each input the budget must hold nothing: a buffer the run lost would show. */
#include "core/membudget.h"
#include "ops/state/timer.h"
#include "psgraph/op_profile.h"
#include "psgraph/psgraph.h"
#include "runtime/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUDGET ((int64_t)64 << 20)
#define MAX_WORK 2e7

/* What a run of g may cost: its MatMul and Conv flops, and every node's output elements
 * times its window (pools). Unknown dims count 1. */
static double work_of(const psg_graph_t *g) {
    double work = 0;
    for (int i = 0; i < psg_graph_num_nodes(g); i++) {
        const psg_node_t *n = psg_graph_node(g, i);
        double window = 1;
        const psg_attr_t *k = psg_node_attr(n, "ksize");
        for (int d = 0; k && k->type == PSG_ATTR_INTS && d < k->u.ints.n; d++)
            window *= k->u.ints.v[d] > 0 ? (double)k->u.ints.v[d] : 1;
        for (int o = 0; o < psg_node_num_outputs(n); o++) {
            const psg_shape_t *s = psg_node_output_shape(n, o);
            double numel = 1;
            for (int d = 0; s->rank > 0 && d < s->rank; d++)
                numel *= s->dims[d] > 0 ? (double)s->dims[d] : 1;
            work += numel * window;
        }
        work += psg_node_flops(g, n, 1);
    }
    return work;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static psg_membudget_t *budget;
    if (!budget && !(budget = psg_membudget_new(BUDGET, "the fuzz run's memory"))) return 0;
    psg_membudget_t *outer = psg_membudget_enter(budget);
    psg_graph_t *g = psg_graph_deserialize_within(data, size, (size_t)BUDGET);
    psg_membudget_enter(outer);
    if (!g) return 0;
    int n = psg_graph_num_nodes(g), nf = 0;
    psg_endpoint_t *feeds = calloc((size_t)n + 1, sizeof *feeds);
    psg_tensor_t **values = calloc((size_t)n + 1, sizeof *values);
    int *targets = calloc((size_t)n + 1, sizeof *targets);
    psg_resource_mgr_t *rm = NULL;
    psg_rendezvous_t *rv = NULL;
    psg_plan_t *plan = NULL;
    if (!feeds || !values || !targets || work_of(g) > MAX_WORK) goto done;
    outer = psg_membudget_enter(budget);
    for (int i = 0; i < n; i++) {
        const psg_node_t *nd = psg_graph_node(g, i);
        targets[i] = i;
        if (strcmp(psg_node_op(nd), "Placeholder") || psg_node_num_outputs(nd) != 1) continue;
        const psg_shape_t *s = psg_node_output_shape(nd, 0);
        psg_dtype_t dt = psg_node_output_dtype(nd, 0);
        if (!psg_shape_is_complete(s) || dt == PSG_DT_RESOURCE ||
            !(values[nf] = psg_tensor_zeros(dt, s)))
            continue;
        feeds[nf++] = (psg_endpoint_t){i, 0};
    }
    psg_membudget_enter(outer);
    rm = psg_resource_mgr_new();
    rv = psg_rendezvous_new(10);
    psg_timer_t *timer = rm ? psg_timer_of(rm) : NULL;
    if (!rm || !rv || !timer) goto done;
    psg_timer_set_max_wait(timer, 10);
    plan = psg_plan_new(g, nf, feeds, 0, NULL, n, targets);
    int rc = -1;
    if (plan) {
        psg_run_env_t env = {.rm = rm, .step_id = 1, .rendezvous = rv, .budget = budget};
        rc = psg_plan_run_with(plan, &env, values, NULL);
    }
    if (getenv("PSG_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_run: %s\n", rc == 0 ? "ran" : psg_error_message());
done:
    psg_plan_destroy(&plan);
    psg_rendezvous_destroy(&rv);
    psg_resource_mgr_destroy(&rm);
    for (int i = 0; i < nf; i++) psg_tensor_destroy(&values[i]);
    free(values);
    free(feeds);
    free(targets);
    psg_graph_destroy(&g);
    if (psg_membudget_held(budget) != 0) {
        fprintf(stderr, "fuzz_run: %lld bytes still charged after the input was freed\n",
                (long long)psg_membudget_held(budget));
        abort();
    }
    return 0;
}
