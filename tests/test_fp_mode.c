/* Denormal floats (core/fp_mode.c): the process's choice from PSGRAPH_DENORMALS, a bad value
 * refused naming it; psg_fp_enter/leave set and give back the thread's mode; a kernel run by a
 * session follows the choice for a denormal result (flush to zero) and a denormal input (read
 * as zero), and so does each task of the pool (a share of a kernel) on threads started before. */
#include "tests/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define BIG (1 << 16) /* Mul splits this over the pool's threads */

static volatile float quarter = 0.25f, two = 2.0f;

/* a normal float times a quarter: a denormal, or 0 when flushed */
static float denormal_result(void) {
    volatile float x = 2e-38f;
    return x * quarter;
}

/* a denormal times two: 1e-38 (denormal too), or 0 when denormal inputs read as zero */
static float denormal_input(void) {
    volatile float d = 5e-39f;
    return d * two;
}

static void test_enter_leave(void) {
    psg_fp_set_flush_denormals(false);
    unsigned outer = psg_fp_enter();
    CHECK(denormal_result() != 0.0f && denormal_input() != 0.0f);
    psg_fp_set_flush_denormals(true);
    unsigned saved = psg_fp_enter();
    CHECK(denormal_result() == 0.0f && denormal_input() == 0.0f);
    psg_fp_leave(saved); /* back to keeping */
    CHECK(denormal_result() != 0.0f && denormal_input() != 0.0f);
    psg_fp_leave(outer);
}

static void test_environment(void) {
    setenv("PSGRAPH_DENORMALS", "keep", 1);
    CHECK(psg_fp_mode_from_env() == 0 && !psg_fp_flush_denormals());
    setenv("PSGRAPH_DENORMALS", "flush", 1);
    CHECK(psg_fp_mode_from_env() == 0 && psg_fp_flush_denormals());
    setenv("PSGRAPH_DENORMALS", "keep", 1);
    CHECK(psg_fp_mode_from_env() == 0);
    setenv("PSGRAPH_DENORMALS", "ftz", 1);
    CHECK(psg_fp_mode_from_env() < 0);
    CHECK_ERROR_HAS("PSGRAPH_DENORMALS='ftz'");
    CHECK(!psg_fp_flush_denormals()); /* unchanged by the bad value */
    unsetenv("PSGRAPH_DENORMALS");
    CHECK(psg_fp_mode_from_env() == 0 && psg_fp_flush_denormals()); /* the default */
}

/* x * c over BIG elements by a session of 2 threads: how many outputs are 0 */
static int zeros_of_mul(float x, float c) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(BIG);
    psg_endpoint_t in = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_tensor_t *ct = psg_tensor_scalar_f32(c);
    psg_endpoint_t y = psg_mul(g, "y", in, psg_const(g, "c", &ct));
    psg_session_options_t so = {.num_threads = 2};
    psg_session_t *sess = psg_session_new(g, &so, NULL);
    CHECK(sess != NULL);
    float *v = malloc(BIG * sizeof *v);
    for (int i = 0; i < BIG; i++) v[i] = x;
    psg_tensor_t *feed = psg_test_tensor(&s, v), *out = NULL;
    int zeros = -1;
    if (sess && psg_session_run(sess, 1, &in, &feed, 1, &y, &out, 0, NULL) == 0) {
        const float *o = out->data;
        zeros = 0;
        for (int i = 0; i < BIG; i++) zeros += o[i] == 0.0f;
    }
    psg_tensor_destroy(&out);
    psg_tensor_destroy(&feed);
    free(v);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
    return zeros;
}

static void test_kernels_follow_the_choice(void) {
    /* the test's own thread keeps denormals: the kernels set the mode themselves */
    psg_fp_set_flush_denormals(false);
    unsigned outer = psg_fp_enter();
    psg_fp_set_flush_denormals(true);
    CHECK(zeros_of_mul(2e-38f, 0.25f) == BIG); /* results flushed, on both threads */
    CHECK(zeros_of_mul(5e-39f, 2.0f) == BIG);  /* inputs read as zero */
    CHECK(zeros_of_mul(2e-38f, 2.0f) == 0);    /* normal floats are not touched */
    CHECK(denormal_result() != 0.0f);          /* and the caller's mode is given back */
    psg_fp_set_flush_denormals(false);
    CHECK(zeros_of_mul(2e-38f, 0.25f) == 0);
    CHECK(zeros_of_mul(5e-39f, 2.0f) == 0);
    psg_fp_leave(outer);
    psg_fp_set_flush_denormals(true);
}

typedef struct {
    pthread_t caller;
    atomic_int on_pool, flushed_on_pool;
} chunks_t;

static void chunk(void *arg, int64_t begin, int64_t end) {
    chunks_t *c = arg;
    (void)begin;
    (void)end;
    if (!pthread_equal(pthread_self(), c->caller)) {
        atomic_fetch_add(&c->on_pool, 1);
        atomic_fetch_add(&c->flushed_on_pool, denormal_result() == 0.0f);
    }
    nanosleep(&(struct timespec){0, 200000}, NULL); /* so that the pool's threads take some */
}

/* The pool's threads were started keeping denormals; a task set flushing runs flushing. */
static void test_pool_tasks(void) {
    psg_fp_set_flush_denormals(false);
    unsigned outer = psg_fp_enter();
    psg_threadpool_t *p = psg_threadpool_new(3);
    psg_fp_set_flush_denormals(true);
    chunks_t c = {.caller = pthread_self()};
    atomic_init(&c.on_pool, 0);
    atomic_init(&c.flushed_on_pool, 0);
    psg_parallel_for(p, 64, 1, chunk, &c);
    CHECK(atomic_load(&c.on_pool) > 0);
    CHECK(atomic_load(&c.flushed_on_pool) == atomic_load(&c.on_pool));
    psg_threadpool_destroy(&p);
    psg_fp_leave(outer);
}

int main(void) {
    if (!psg_fp_mode_supported()) {
        printf("skip: this CPU's floating-point mode cannot be set\n");
        return 77;
    }
    RUN_TEST(test_enter_leave);
    RUN_TEST(test_environment);
    RUN_TEST(test_kernels_follow_the_choice);
    RUN_TEST(test_pool_tasks);
    return psg_test_summary();
}
