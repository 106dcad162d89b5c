/* A variable read (ReadVariable, which takes no lock of the variable's) while another
 * thread updates it written aside (chain replication's way back, psg_variable_t.keepers:
 * each update writes a new buffer): every read is a whole value, the one before an update
 * or after it, never a buffer being written, and the reads of one reader never go back. */
#include "tests/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdlib.h>

/* Elements of w (1 MiB: an update takes long enough for a read to land inside it) */
enum { ELEMS = 1 << 18, UPDATES = 600, READERS = 2 };

typedef struct {
    psg_callable_t *call; /* the update (SGD, lr 1, gradient 1: w_k = -k) or the read */
    atomic_bool *done;    /* set by the updater once it applied every update */
    atomic_int *reading;  /* readers that read once: the updater starts after all did */
    int reads, torn, back;
    bool failed;
    float bad_first, bad_last; /* the first torn read's first and last elements */
} worker_t;

static void *update_loop(void *arg) {
    worker_t *wk = arg;
    while (atomic_load(wk->reading) < READERS) sched_yield();
    for (int k = 0; k < UPDATES; k++)
        if (psg_callable_run(wk->call, NULL, NULL) < 0) break;
    atomic_store(wk->done, true);
    return NULL;
}

/* Each read: every element equal (its last read first: an update in progress writes from
 * the first element on), an integer in [-UPDATES, 0], not above the reader's last read. */
static void *read_loop(void *arg) {
    worker_t *wk = arg;
    float prev = 1.0f;
    while (!atomic_load(wk->done)) {
        psg_tensor_t *t = NULL;
        if (psg_callable_run(wk->call, NULL, &t) < 0) {
            if (wk->reads == 0) atomic_fetch_add(wk->reading, 1); /* the updater goes on */
            wk->failed = true;
            break;
        }
        const volatile float *f = psg_tensor_f32(t);
        float last = f[ELEMS - 1];
        bool whole = last == (float)(int)last && last <= 0 && last >= -UPDATES;
        for (int i = 0; i < ELEMS && whole; i++) whole = f[i] == last;
        if (!whole && wk->torn++ == 0) wk->bad_first = f[0], wk->bad_last = last;
        if (whole && last > prev) wk->back++;
        if (whole) prev = last;
        if (wk->reads++ == 0) atomic_fetch_add(wk->reading, 1);
        psg_tensor_destroy(&t);
    }
    return NULL;
}

static void test_reads_whole_during_updates_aside(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(ELEMS);
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_tensor_t *ones = psg_tensor_new(PSG_DT_F32, &s);
    for (int i = 0; i < ELEMS; i++) psg_tensor_f32(ones)[i] = 1.0f;
    psg_endpoint_t grad = psg_const(g, "grad", &ones);
    psg_optimizer_config_t cfg = psg_optimizer_defaults("sgd");
    cfg.learning_rate = 1.0f;
    psg_optimizer_t *opt = psg_optimizer_new(&cfg);
    int train = -1;
    CHECK(opt && psg_optimizer_apply_gradients(opt, g, 1, &grad, &w, &train) == 0);
    psg_endpoint_t read = psg_read_variable(g, "read_w", w);
    psg_session_options_t so = {.num_threads = 1};
    psg_session_t *up = psg_session_new(g, &so, NULL);
    CHECK(up && psg_session_run_init(up) == 0);
    psg_resource_mgr_t *rm = psg_session_resources(up);
    psg_variable_t *v = psg_resource_find_variable(rm, "w");
    CHECK(v != NULL);
    if (!v) return;
    pthread_mutex_lock(&v->lock);
    v->keepers = 1; /* a step wants its value before each write: written aside */
    pthread_mutex_unlock(&v->lock);

    atomic_bool done = false;
    atomic_int reading = 0;
    psg_session_t *rs[READERS];
    worker_t wu = {.call = psg_session_make_callable(up, 0, NULL, 0, NULL, 1, &train),
                   .done = &done,
                   .reading = &reading},
             wr[READERS];
    CHECK(wu.call != NULL);
    pthread_t tu, tr[READERS];
    for (int i = 0; i < READERS; i++) {
        rs[i] = psg_session_new(g, &so, rm);
        wr[i] = (worker_t){.call = psg_session_make_callable(rs[i], 0, NULL, 1, &read, 0, NULL),
                           .done = &done,
                           .reading = &reading};
        CHECK(wr[i].call != NULL);
        pthread_create(&tr[i], NULL, read_loop, &wr[i]);
    }
    pthread_create(&tu, NULL, update_loop, &wu);
    pthread_join(tu, NULL);
    int reads = 0, torn = 0, back = 0;
    for (int i = 0; i < READERS; i++) {
        pthread_join(tr[i], NULL);
        reads += wr[i].reads, torn += wr[i].torn, back += wr[i].back;
        CHECK(!wr[i].failed);
        if (wr[i].torn)
            fprintf(stderr, "reader %d: %d of %d reads not whole (first: w[0] %g, w[last] %g)\n", i,
                    wr[i].torn, wr[i].reads, (double)wr[i].bad_first, (double)wr[i].bad_last);
    }
    fprintf(stderr, "%d reads during %d updates\n", reads, UPDATES);
    CHECK(reads > 0);
    CHECK(torn == 0);
    CHECK(back == 0);
    CHECK(psg_tensor_f32(v->value)[0] == -(float)UPDATES); /* every update applied */
    pthread_mutex_lock(&v->lock);
    v->keepers = 0;
    psg_tensor_destroy(&v->before);
    pthread_mutex_unlock(&v->lock);
    for (int i = 0; i < READERS; i++) {
        psg_callable_destroy(&wr[i].call);
        psg_session_destroy(&rs[i]);
    }
    psg_callable_destroy(&wu.call);
    psg_session_destroy(&up);
    psg_optimizer_destroy(&opt);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_reads_whole_during_updates_aside);
    return psg_test_summary();
}
