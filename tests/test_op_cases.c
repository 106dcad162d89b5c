/* The gradients of the shared op cases (tests/op_cases.c, which test_cuda
 * also runs on a GPU against the CPU) checked by finite differences on the
 * CPU: every case with an fd_tol, every f32 input. */
#include "tests/gradcheck.h"
#include "tests/op_cases.h"
#include "tests/testutil.h"

static psg_endpoint_t build_case(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    const psg_op_case_t *c = ctx;
    return c->build(g, in);
}

static void test_gradients_of_the_cases(void) {
    unsigned seed = 11;
    int checked = 0;
    for (int k = 0; k < psg_num_op_cases; k++) {
        const psg_op_case_t *c = &psg_op_cases[k];
        if (!(c->fd_tol > 0)) continue;
        psg_tensor_t *values[4] = {NULL};
        psg_op_case_values(c, &seed, values);
        psg_gradcheck_input_t in[4];
        for (int i = 0; i < c->n_in; i++)
            in[i] = (psg_gradcheck_input_t){values[i], c->kinds[i] != PSG_CASE_LABELS};
        int rc = psg_gradcheck(c->name, c->n_in, in, build_case, (void *)c, c->fd_tol);
        CHECK(rc == 0);
        printf("  %-28s %s\n", c->name, rc == 0 ? "ok" : "FAIL");
        checked++;
        for (int i = 0; i < c->n_in; i++) psg_tensor_destroy(&values[i]);
    }
    CHECK(checked >= 30); /* the table's f32 differentiable cases */
}

int main(void) {
    RUN_TEST(test_gradients_of_the_cases);
    return psg_test_summary();
}
