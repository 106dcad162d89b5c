/* A hostile peer's graphs against a live `psgraph server`, second round (issue 27): graphs
 * that once overflowed the planner's heap or a thread's stack, and each is registered, run
 * and answered while the server keeps serving others. */
#include "hostile_util.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Registers g (fetching output 0 of `fetch`) through c and runs it once; the fetched
 * tensor, or NULL with the error set. */
static psg_tensor_t *register_and_run(psg_client_t *c, psg_graph_t *g, int fetch,
                                      uint64_t *handle) {
    *handle = register_graph(c, g, fetch);
    if (!*handle) return NULL;
    psg_req_t run = {.type = PSG_REQ_RUN_GRAPH, .step = 1, .u.run = {.handle = *handle}};
    psg_msg_t *m = psg_req_encode(&run), *rep = psg_client_call(c, &m, 60000);
    psg_tensor_t *t = rep && rep->ntensors == 1 ? psg_tensor_ref(rep->tensors[0]) : NULL;
    psg_msg_destroy(&rep);
    return t;
}

static void deregister(psg_client_t *c, uint64_t handle) {
    psg_req_t d = {.type = PSG_REQ_DEREGISTER_GRAPH, .u.handle = handle};
    psg_msg_t *m = psg_req_encode(&d), *rep = psg_client_call(c, &m, 20000);
    CHECK(rep != NULL);
    psg_msg_destroy(&rep);
}

/* Finding 1: the planner's depth-first walk pushed a dependency once per time it was listed,
 * on a stack sized for each node twice: a NoOp whose control inputs all name one Const
 * wrote past it (ASan: heap-buffer-overflow; the release ps died within a few dozen). */
static void test_repeated_dependencies(void) {
    psg_client_t *c = connect_peer();
    int registered = 0, ran = 0;
    for (int k = 0; k < 60 && registered == k; k++) {
        psg_graph_t *g = psg_graph_new();
        psg_endpoint_t x = psg_const_scalar(g, "c", 3.0f);
        psg_node_builder_t *b = psg_node_begin(g, "NoOp", "all_c");
        for (int i = 0; i < 1000; i++) psg_node_add_control(b, x.node);
        int noop = psg_node_finish(b);
        /* and an AddN of the Const listed 1000 times, run after the NoOp */
        psg_endpoint_t xs[1000];
        for (int i = 0; i < 1000; i++) xs[i] = x;
        b = psg_node_begin(g, "AddN", "sum");
        for (int i = 0; i < 1000; i++) psg_node_add_input(b, xs[i]);
        psg_node_add_control(b, noop);
        psg_node_add_control(b, noop);
        psg_endpoint_t sum = psg_node_finish_ep(b);
        uint64_t h = 0;
        psg_tensor_t *t = register_and_run(c, g, sum.node, &h);
        registered += h != 0;
        if (!h) printf("  graph %d: %s\n", k, psg_error_message());
        ran += t && psg_tensor_f32(t)[0] == 3000.0f;
        psg_tensor_destroy(&t);
        if (h) deregister(c, h);
        psg_graph_destroy(&g);
    }
    printf(
        "  60 graphs of a Const listed 1000 times (controls and inputs): %d registered, %d ran\n",
        registered, ran);
    CHECK(registered == 60 && ran == 60);
    CHECK(alive());
    psg_client_destroy(&c);
}

/* Finding 2: a node's inputs sized arrays on the server thread's stack (shape inference) and
 * on a runner's (the executor): an AddN of 200,000 inputs overflowed them. It registers and
 * runs now, and a NoOp of 200,000 control inputs plans in linear time. */
static void test_huge_fan_in(void) {
    enum { FAN = 200000 };
    psg_client_t *c = connect_peer();
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t one = psg_const_scalar(g, "one", 1.0f);
    psg_node_builder_t *b = psg_node_begin(g, "AddN", "wide");
    for (int i = 0; i < FAN; i++) psg_node_add_input(b, one);
    psg_endpoint_t sum = psg_node_finish_ep(b);
    CHECK(sum.node >= 0);
    uint64_t h = 0;
    psg_tensor_t *t = register_and_run(c, g, sum.node, &h);
    CHECK(h != 0 && t && psg_tensor_f32(t)[0] == (float)FAN);
    psg_tensor_destroy(&t);
    if (h) deregister(c, h);
    psg_graph_destroy(&g);
    g = psg_graph_new();
    psg_endpoint_t k = psg_const_scalar(g, "k", 2.0f);
    b = psg_node_begin(g, "NoOp", "wait_all");
    for (int i = 0; i < FAN; i++) psg_node_add_control(b, k.node);
    int noop = psg_node_finish(b);
    b = psg_node_begin(g, "Identity", "after");
    psg_node_add_input(b, k);
    psg_node_add_control(b, noop);
    psg_endpoint_t after = psg_node_finish_ep(b);
    t = register_and_run(c, g, after.node, &h);
    CHECK(h != 0 && t && psg_tensor_f32(t)[0] == 2.0f);
    psg_tensor_destroy(&t);
    if (h) deregister(c, h);
    psg_graph_destroy(&g);
    CHECK(alive());
    psg_client_destroy(&c);
}

int main(int argc, char **argv) {
    if (hostile_begin(argc, argv, "hostile_graphs") < 0) return 1;
    RUN_TEST(test_repeated_dependencies);
    CHECK(!server_restart_if_dead());
    RUN_TEST(test_huge_fan_in);
    CHECK(!server_restart_if_dead());
    return hostile_end("hostile_graphs_sigterm");
}
