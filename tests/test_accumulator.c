/* The resources of sync replicas on their own: the gradient accumulator
 * (mean of a step, stale and surplus gradients dropped and counted, takes
 * that wait, time out or are closed) and the token queue; then the same
 * through their graph ops in a session. */
#include "ops/state/sync_resources.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static psg_tensor_t *vec3(float a, float b, float c) {
    float v[3] = {a, b, c};
    psg_shape_t s = psg_shape_1d(3);
    return psg_test_tensor(&s, v);
}

static bool apply3(psg_accumulator_t *acc, int64_t step, float a, float b, float c) {
    psg_tensor_t *g = vec3(a, b, c);
    bool accepted = false;
    CHECK(psg_accumulator_apply(acc, step, g, &accepted) == 0);
    psg_tensor_destroy(&g);
    return accepted;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void test_mean_and_stale(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t s3 = psg_shape_1d(3);
    psg_accumulator_t *acc = psg_accumulator_get(rm, "w/grad_accum", &s3, 0);
    CHECK(acc && psg_accumulator_global_step(acc) == 0);
    CHECK(psg_accumulator_get(rm, "w/grad_accum", &s3, 0) == acc);
    CHECK(apply3(acc, 0, 1, 2, 3) && apply3(acc, 0, 3, 4, 5));
    CHECK(psg_accumulator_num_accumulated(acc) == 2);
    psg_tensor_t *mean = NULL;
    CHECK(psg_accumulator_take(acc, 2, 1000, &mean) == 0 && mean);
    if (mean) {
        const float *m = psg_tensor_f32(mean);
        CHECK(m[0] == 2.0f && m[1] == 3.0f && m[2] == 4.0f);
    }
    psg_tensor_destroy(&mean);
    CHECK(psg_accumulator_global_step(acc) == 1 && psg_accumulator_num_accumulated(acc) == 0);
    /* a gradient of step 0 arrives after the take: stale, dropped, counted */
    CHECK(!apply3(acc, 0, 100, 100, 100));
    CHECK(psg_accumulator_num_accumulated(acc) == 0);
    /* a newer local step is accepted (TensorFlow's rule) */
    CHECK(apply3(acc, 5, 1, 1, 1));
    psg_accumulator_counts_t c;
    psg_accumulator_counts(acc, &c);
    CHECK(c.accepted == 3 && c.stale == 1 && c.late == 0 && c.takes == 1);
    /* set_global_step drops what was summed for another step */
    psg_accumulator_set_global_step(acc, 7);
    CHECK(psg_accumulator_global_step(acc) == 7 && psg_accumulator_num_accumulated(acc) == 0);
    CHECK(!apply3(acc, 6, 1, 1, 1));
    psg_resource_mgr_destroy(&rm);
}

static void test_cap_drops_the_slowest(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t s3 = psg_shape_1d(3);
    psg_accumulator_t *acc = psg_accumulator_get(rm, "acc", &s3, 2);
    CHECK(apply3(acc, 0, 1, 1, 1) && apply3(acc, 0, 3, 3, 3));
    CHECK(!apply3(acc, 0, 50, 50, 50)); /* the third of N = 2: the backup's, dropped */
    psg_tensor_t *mean = NULL;
    CHECK(psg_accumulator_take(acc, 2, 0, &mean) == 0 && psg_tensor_f32(mean)[1] == 2.0f);
    psg_tensor_destroy(&mean);
    psg_accumulator_counts_t c;
    psg_accumulator_counts(acc, &c);
    CHECK(c.accepted == 2 && c.late == 1);
    psg_resource_mgr_destroy(&rm);
}

/* rows (k, 2) of a (6, 2) table at ids: one sparse gradient */
static bool apply_rows(psg_accumulator_t *acc, int64_t step, int k, const int64_t *ids,
                       const float *rows) {
    psg_shape_t vs = psg_shape_2d(k, 2), is = psg_shape_1d(k);
    psg_tensor_t *v = psg_test_tensor(&vs, rows), *ix = psg_tensor_new(PSG_DT_I64, &is);
    for (int i = 0; i < k; i++) psg_tensor_i64(ix)[i] = ids[i];
    bool accepted = false;
    CHECK(psg_accumulator_apply_sparse(acc, step, v, ix, &accepted) == 0);
    psg_tensor_destroy(&v);
    psg_tensor_destroy(&ix);
    return accepted;
}

/* TensorFlow's SparseConditionalAccumulator: the rows of a step's first N gradients summed
 * per id (duplicates within and across gradients), divided by the gradients counted; stale
 * and surplus gradients dropped; rows that do not fit refused, naming the accumulator. */
static void test_sparse_mean_stale_and_late(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t table = psg_shape_2d(6, 2);
    psg_accumulator_t *acc = psg_sparse_accumulator_get(rm, "emb/grad_accum", &table, 2);
    CHECK(acc && psg_accumulator_is_sparse(acc));
    CHECK(psg_accumulator_get(rm, "emb/grad_accum", &table, 2) == NULL); /* not a dense one */
    CHECK(strstr(psg_error_message(), "emb/grad_accum") && strstr(psg_error_message(), "sparse"));
    /* worker A: ids 4, 1, 4 (4 twice); worker B: ids 1, 5; a third (the backup) is late */
    CHECK(apply_rows(acc, 0, 3, (int64_t[]){4, 1, 4}, (float[]){1, 2, 10, 20, 3, 4}));
    CHECK(apply_rows(acc, 0, 2, (int64_t[]){1, 5}, (float[]){30, 40, 7, 8}));
    CHECK(!apply_rows(acc, 0, 1, (int64_t[]){0}, (float[]){99, 99}));
    psg_tensor_t *mean = NULL, *ids = NULL;
    CHECK(psg_accumulator_take_sparse(acc, 2, 1000, &mean, &ids) == 0 && mean && ids);
    if (mean && ids) {
        CHECK(psg_tensor_numel(ids) == 3 && ids->dtype == PSG_DT_I64);
        CHECK(mean->shape.rank == 2 && mean->shape.dims[0] == 3 && mean->shape.dims[1] == 2);
        const int64_t *ix = psg_tensor_i64(ids);
        const float *m = psg_tensor_f32(mean);
        float want[6][2] = {{0}, {20, 30}, {0}, {0}, {2, 3}, {3.5f, 4}};
        for (int i = 0; i < 3; i++)
            CHECK(m[2 * i] == want[ix[i]][0] && m[2 * i + 1] == want[ix[i]][1]);
        CHECK(ix[0] == 4 && ix[1] == 1 && ix[2] == 5); /* order of first appearance */
    }
    psg_tensor_destroy(&mean);
    psg_tensor_destroy(&ids);
    /* step 1: a gradient computed for step 0 is stale; the next step starts from nothing */
    CHECK(!apply_rows(acc, 0, 1, (int64_t[]){2}, (float[]){5, 5}));
    CHECK(apply_rows(acc, 1, 1, (int64_t[]){2}, (float[]){6, 8}));
    CHECK(psg_accumulator_take_sparse(acc, 1, 1000, &mean, &ids) == 0);
    CHECK(mean && psg_tensor_numel(ids) == 1 && psg_tensor_i64(ids)[0] == 2 &&
          psg_tensor_f32(mean)[1] == 8.0f);
    psg_tensor_destroy(&mean);
    psg_tensor_destroy(&ids);
    psg_accumulator_counts_t c;
    psg_accumulator_counts(acc, &c);
    CHECK(c.accepted == 3 && c.late == 1 && c.stale == 1 && c.takes == 2);
    /* many ids: the sum grows past its first room and keeps every id's rows */
    enum { K = 3000 };
    psg_shape_t big = psg_shape_2d(K, 2);
    psg_accumulator_t *wide = psg_sparse_accumulator_get(rm, "big", &big, 0);
    int64_t *many = malloc(sizeof(int64_t) * K);
    float *ones = malloc(sizeof(float) * 2 * K);
    for (int i = 0; i < K; i++) many[i] = (i * 7) % K, ones[2 * i] = ones[2 * i + 1] = 1;
    CHECK(apply_rows(wide, 0, K, many, ones) && apply_rows(wide, 0, K, many, ones));
    CHECK(psg_accumulator_take_sparse(wide, 2, 1000, &mean, &ids) == 0 &&
          psg_tensor_numel(ids) == K);
    bool all_one = mean != NULL;
    for (int i = 0; mean && i < 2 * K; i++) all_one = all_one && psg_tensor_f32(mean)[i] == 1.0f;
    CHECK(all_one);
    psg_tensor_destroy(&mean);
    psg_tensor_destroy(&ids);
    free(many);
    free(ones);
    /* what does not fit is refused with the accumulator's name; nothing counted */
    bool accepted = true;
    psg_shape_t bad_rows = psg_shape_2d(1, 3), one = psg_shape_1d(1);
    psg_tensor_t *v = psg_tensor_zeros(PSG_DT_F32, &bad_rows),
                 *ix = psg_tensor_zeros(PSG_DT_I64, &one);
    CHECK(psg_accumulator_apply_sparse(acc, 2, v, ix, &accepted) < 0 && !accepted);
    CHECK(strstr(psg_error_message(), "emb/grad_accum") != NULL);
    psg_tensor_destroy(&v);
    psg_shape_t row = psg_shape_2d(1, 2);
    v = psg_tensor_zeros(PSG_DT_F32, &row);
    psg_tensor_i64(ix)[0] = 6; /* past the table's 6 rows */
    CHECK(psg_accumulator_apply_sparse(acc, 2, v, ix, &accepted) < 0 &&
          strstr(psg_error_message(), "out of"));
    CHECK(psg_accumulator_apply(acc, 2, v, &accepted) < 0); /* a dense gradient */
    CHECK(psg_accumulator_num_accumulated(acc) == 0);
    psg_tensor_destroy(&v);
    psg_tensor_destroy(&ix);
    psg_resource_mgr_destroy(&rm);
}

/* A take's callback for take_async: what it got. */
typedef struct {
    int calls;
    psg_tensor_t *mean;
    psg_err_code_t code;
    char error[512];
} got_take_t;

static void on_take(void *arg, psg_tensor_t *mean, psg_tensor_t *indices, psg_err_code_t code,
                    const char *error) {
    got_take_t *g = arg;
    g->calls++;
    g->mean = mean;
    g->code = code;
    snprintf(g->error, sizeof g->error, "%s", error ? error : "");
    psg_tensor_destroy(&indices);
}

/* The edges of a step: a cap of one, the N of a take that timed out caps the rest of its step,
 * a table of one row, a variable of no elements, and a take pending when the task's resources
 * go (the server stops): it fails, it is not left waiting. */
static void test_edges_of_a_step(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t s3 = psg_shape_1d(3);
    /* N = 1: the second gradient of the step is late */
    psg_accumulator_t *one = psg_accumulator_get(rm, "one", &s3, 1);
    CHECK(apply3(one, 0, 1, 2, 3) && !apply3(one, 0, 7, 7, 7));
    psg_accumulator_counts_t c;
    psg_accumulator_counts(one, &c);
    CHECK(c.accepted == 1 && c.late == 1);
    /* no cap given: a take of 2 that timed out after 1 gradient caps its step at 2 */
    psg_accumulator_t *acc = psg_accumulator_get(rm, "acc", &s3, 0);
    CHECK(apply3(acc, 0, 1, 1, 1));
    psg_tensor_t *mean = NULL;
    CHECK(psg_accumulator_take(acc, 2, 10, &mean) < 0 && psg_error_code() == PSG_ERR_TIMEOUT);
    CHECK(apply3(acc, 0, 3, 3, 3) && !apply3(acc, 0, 50, 50, 50));
    CHECK(psg_accumulator_take(acc, 2, 1000, &mean) == 0 && mean &&
          psg_tensor_f32(mean)[2] == 2.0f);
    psg_tensor_destroy(&mean);
    /* a table of one row: rows of 3, summed */
    psg_shape_t row = psg_shape_2d(1, 3), r1 = psg_shape_1d(1);
    psg_accumulator_t *sp = psg_sparse_accumulator_get(rm, "one_row", &row, 0);
    psg_tensor_t *v = psg_test_tensor(&row, (float[]){2, 4, 6}),
                 *ix = psg_tensor_zeros(PSG_DT_I64, &r1);
    bool accepted = false;
    CHECK(psg_accumulator_apply_sparse(sp, 0, v, ix, &accepted) == 0 && accepted);
    psg_tensor_f32(v)[2] = 0;
    CHECK(psg_accumulator_apply_sparse(sp, 0, v, ix, &accepted) == 0 && accepted);
    psg_tensor_t *ids = NULL;
    CHECK(psg_accumulator_take_sparse(sp, 2, 1000, &mean, &ids) == 0 && mean && ids);
    if (mean && ids) {
        const float *m = psg_tensor_f32(mean);
        CHECK(psg_tensor_numel(mean) == 3 && m[0] == 2 && m[1] == 4 && m[2] == 3);
        CHECK(psg_tensor_numel(ids) == 1 && psg_tensor_i64(ids)[0] == 0);
    }
    psg_tensor_destroy(&mean);
    psg_tensor_destroy(&ids);
    psg_tensor_destroy(&v);
    psg_tensor_destroy(&ix);
    /* a variable of 0 x 3 elements */
    psg_shape_t empty = psg_shape_2d(0, 3);
    psg_accumulator_t *none = psg_accumulator_get(rm, "empty", &empty, 0);
    psg_tensor_t *g0 = psg_tensor_zeros(PSG_DT_F32, &empty);
    CHECK(none && psg_accumulator_apply(none, 0, g0, &accepted) == 0 && accepted);
    CHECK(psg_accumulator_take(none, 1, 1000, &mean) == 0 && mean && psg_tensor_numel(mean) == 0);
    psg_tensor_destroy(&mean);
    psg_tensor_destroy(&g0);
    /* a take that asks for no timeout gets the task's longest wait, not none */
    psg_accumulator_t *patient = psg_accumulator_get(rm, "patient", &s3, 0);
    got_take_t got = {0};
    psg_accumulator_take_async(patient, 1, 0, on_take, &got);
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
    CHECK(got.calls == 0);
    CHECK(apply3(patient, 0, 4, 4, 4));
    CHECK(got.calls == 1 && got.mean && psg_tensor_f32(got.mean)[0] == 4.0f);
    psg_tensor_destroy(&got.mean);
    /* the resources go with a take pending: it fails with "stopping" */
    got = (got_take_t){0};
    psg_accumulator_take_async(acc, 2, 60000, on_take, &got);
    CHECK(got.calls == 0);
    psg_resource_mgr_destroy(&rm);
    CHECK(got.calls == 1 && !got.mean && got.code == PSG_ERR_STOPPING);
    CHECK(strstr(got.error, "accumulator 'acc' destroyed while a take waited") != NULL);
}

/* A sparse sum that grows: a first gradient of 10 ids, then 3000 others (the map of ids and
 * the rows grow, each id keeping its rows), then ids that do not come as one i32 or i64 per
 * row are refused. */
static void test_sparse_sum_grows(void) {
    enum { K = 3010 };
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t table = psg_shape_2d(K, 2);
    psg_accumulator_t *acc = psg_sparse_accumulator_get(rm, "grow", &table, 0);
    int64_t *ids = malloc(sizeof(int64_t) * K);
    float *rows = malloc(sizeof(float) * 2 * K);
    PSG_ASSERT(ids && rows);
    for (int i = 0; i < K; i++)
        ids[i] = K - 1 - i, rows[2 * i] = (float)i, rows[2 * i + 1] = -(float)i;
    CHECK(apply_rows(acc, 0, 10, ids, rows));
    CHECK(apply_rows(acc, 0, K - 10, ids + 10, rows + 20));
    psg_tensor_t *mean = NULL, *got = NULL;
    CHECK(psg_accumulator_take_sparse(acc, 2, 1000, &mean, &got) == 0 && mean && got);
    if (mean && got) {
        CHECK(psg_tensor_numel(got) == K && mean->shape.dims[0] == K);
        bool all = psg_tensor_numel(got) == K;
        for (int i = 0; all && i < K; i++) /* first appearance: row i is id K - 1 - i, halved */
            all = psg_tensor_i64(got)[i] == K - 1 - i &&
                  psg_tensor_f32(mean)[2 * i] == (float)i / 2 &&
                  psg_tensor_f32(mean)[2 * i + 1] == -(float)i / 2;
        CHECK(all);
    }
    psg_tensor_destroy(&mean);
    psg_tensor_destroy(&got);
    free(ids);
    free(rows);
    /* indices: f32, or one a row but as a [1, 1] matrix */
    psg_shape_t one_row = psg_shape_2d(1, 2), r1 = psg_shape_1d(1);
    psg_tensor_t *v = psg_tensor_zeros(PSG_DT_F32, &one_row);
    psg_tensor_t *fx = psg_tensor_zeros(PSG_DT_F32, &r1),
                 *mx = psg_tensor_zeros(PSG_DT_I64, &one_row);
    bool accepted = true;
    CHECK(psg_accumulator_apply_sparse(acc, 1, v, fx, &accepted) < 0 && !accepted);
    CHECK_ERROR_HAS("accumulator 'grow': f32[1] indices for 1 rows (want i32 or i64, one a row)");
    psg_tensor_destroy(&mx);
    psg_shape_t m11 = psg_shape_2d(1, 1);
    mx = psg_tensor_zeros(PSG_DT_I64, &m11);
    CHECK(psg_accumulator_apply_sparse(acc, 1, v, mx, &accepted) < 0 && !accepted);
    CHECK_ERROR_HAS("i64[1, 1] indices for 1 rows");
    CHECK(psg_accumulator_num_accumulated(acc) == 0);
    psg_tensor_destroy(&v);
    psg_tensor_destroy(&fx);
    psg_tensor_destroy(&mx);
    psg_resource_mgr_destroy(&rm);
}

typedef struct {
    psg_accumulator_t *acc;
    int rc;
    psg_tensor_t *mean;
    psg_err_code_t code;
    char error[512];
} taker_t;

static void *taker_main(void *arg) {
    taker_t *t = arg;
    t->rc = psg_accumulator_take(t->acc, 2, 5000, &t->mean);
    t->code = psg_error_code();
    if (t->rc < 0) snprintf(t->error, sizeof t->error, "%s", psg_error_message());
    return NULL;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_take_waits_times_out_and_closes(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t s3 = psg_shape_1d(3);
    psg_accumulator_t *acc = psg_accumulator_get(rm, "acc", &s3, 0);
    /* the take waits until the second gradient comes */
    taker_t t = {.acc = acc};
    pthread_t th;
    pthread_create(&th, NULL, taker_main, &t);
    CHECK(apply3(acc, 0, 2, 2, 2));
    sleep_ms(20);
    CHECK(apply3(acc, 0, 4, 4, 4));
    pthread_join(th, NULL);
    CHECK(t.rc == 0 && t.mean && psg_tensor_f32(t.mean)[0] == 3.0f);
    psg_tensor_destroy(&t.mean);
    CHECK(!apply3(acc, 0, 4, 4, 4)); /* the take completed inside apply: step 0 is over */
    /* a take that cannot complete times out, saying how many came */
    CHECK(apply3(acc, 1, 1, 1, 1));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    psg_tensor_t *mean = NULL;
    CHECK(psg_accumulator_take(acc, 2, 50, &mean) < 0 && !mean);
    CHECK(seconds_since(&t0) < 2.0);
    CHECK_ERROR_HAS("accumulator 'acc': 1 of 2 gradients for step 1 after 50 ms");
    CHECK(psg_error_code() == PSG_ERR_TIMEOUT); /* a failure, not the end of training */
    /* the gradient stays: a later take can still complete the step */
    CHECK(psg_accumulator_num_accumulated(acc) == 1);
    /* close wakes a waiting take with a clean "training is over" */
    taker_t t2 = {.acc = acc};
    pthread_create(&th, NULL, taker_main, &t2);
    sleep_ms(20);
    psg_accumulator_close(acc);
    pthread_join(th, NULL);
    CHECK(t2.rc < 0 && strstr(t2.error, "accumulator 'acc' is closed"));
    CHECK(t2.code == PSG_ERR_CLOSED);
    CHECK(!apply3(acc, 1, 1, 1, 1));
    psg_accumulator_counts_t c;
    psg_accumulator_counts(acc, &c);
    CHECK(c.closed == 1);
    CHECK(psg_accumulator_take(acc, 1, 0, &mean) < 0);
    CHECK_ERROR_HAS(PSG_SYNC_CLOSED_TEXT);
    CHECK(psg_error_code() == PSG_ERR_CLOSED);
    psg_resource_mgr_destroy(&rm);
}

typedef struct {
    taker_t t;
    atomic_bool done;
} waited_t;

static void *waited_main(void *arg) {
    waited_t *w = arg;
    taker_main(&w->t);
    atomic_store(&w->done, true);
    return NULL;
}

/* A failover's reset (docs/replication.md): the step's gradients dropped, the step kept, a
 * waiting take failed as aborted; set_global_step to the same step keeps them. */
static void test_reset(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t s3 = psg_shape_1d(3);
    psg_accumulator_t *acc = psg_accumulator_get(rm, "acc", &s3, 0);
    psg_accumulator_set_global_step(acc, 3);
    CHECK(apply3(acc, 3, 1, 1, 1));
    psg_accumulator_set_global_step(acc, 3);
    CHECK(psg_accumulator_num_accumulated(acc) == 1);
    psg_accumulator_reset(acc, 3);
    CHECK(psg_accumulator_global_step(acc) == 3 && psg_accumulator_num_accumulated(acc) == 0);
    /* a take waiting (for 2, with 1 in) fails at a reset, which drops that one too */
    CHECK(apply3(acc, 3, 5, 5, 5));
    waited_t w = {.t = {.acc = acc}};
    pthread_t th;
    pthread_create(&th, NULL, waited_main, &w);
    while (!atomic_load(&w.done)) { /* until the take waits and is failed */
        sleep_ms(5);
        psg_accumulator_reset(acc, 3);
    }
    pthread_join(th, NULL);
    CHECK(w.t.rc < 0 && w.t.code == PSG_ERR_ABORTED && strstr(w.t.error, "reset"));
    /* the step then runs again: its gradients sent again complete a new take */
    CHECK(apply3(acc, 3, 2, 2, 2) && apply3(acc, 3, 4, 4, 4));
    psg_tensor_t *mean = NULL;
    CHECK(psg_accumulator_take(acc, 2, 1000, &mean) == 0 && psg_tensor_f32(mean)[0] == 3.0f);
    psg_tensor_destroy(&mean);
    CHECK(psg_accumulator_global_step(acc) == 4);
    psg_resource_mgr_destroy(&rm);
}

/* A take failed because a ps task was lost (psg_accumulator_fail_take): the gradients in stay,
 * a later take completes with them. */
static void test_fail_take(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t s3 = psg_shape_1d(3);
    psg_accumulator_t *acc = psg_accumulator_get(rm, "acc", &s3, 0);
    psg_accumulator_set_global_step(acc, 7);
    psg_accumulator_fail_take(acc, "nobody waits"); /* no take: nothing happens */
    CHECK(apply3(acc, 7, 1, 1, 1));
    waited_t w = {.t = {.acc = acc}};
    pthread_t th;
    pthread_create(&th, NULL, waited_main, &w);
    while (!atomic_load(&w.done)) { /* until the take waits and is failed */
        sleep_ms(5);
        psg_accumulator_fail_take(acc, "take failed: ps0 was found lost");
    }
    pthread_join(th, NULL);
    CHECK(w.t.rc < 0 && w.t.code == PSG_ERR_ABORTED &&
          strstr(w.t.error, "accumulator 'acc' take failed: ps0 was found lost"));
    CHECK(psg_accumulator_num_accumulated(acc) == 1 && psg_accumulator_global_step(acc) == 7);
    CHECK(apply3(acc, 7, 3, 3, 3));
    psg_tensor_t *mean = NULL;
    CHECK(psg_accumulator_take(acc, 2, 1000, &mean) == 0 && psg_tensor_f32(mean)[0] == 2.0f);
    psg_tensor_destroy(&mean);
    psg_resource_mgr_destroy(&rm);
}

static void test_accumulator_errors(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t s3 = psg_shape_1d(3), s2 = psg_shape_1d(2);
    psg_accumulator_t *acc = psg_accumulator_get(rm, "acc", &s3, 0);
    CHECK(psg_accumulator_get(rm, "acc", &s2, 0) == NULL);
    CHECK_ERROR_HAS("accumulator 'acc' exists with shape [3], asked for [2]");
    psg_shape_t unknown = psg_shape_2d(-1, 3), scalar = psg_shape_scalar();
    CHECK(psg_accumulator_get(rm, "partial", &unknown, 0) == NULL);
    CHECK_ERROR_HAS("accumulator 'partial': needs a complete shape");
    CHECK(psg_sparse_accumulator_get(rm, "rowless", &scalar, 0) == NULL);
    CHECK_ERROR_HAS("accumulator 'rowless': needs a complete shape");
    CHECK(psg_resource_variable(rm, "v", PSG_DT_F32, &s2) != NULL);
    CHECK(psg_accumulator_get(rm, "v", &s2, 0) == NULL);
    CHECK_ERROR_HAS("resource 'v' is a variable, not a accumulator");
    CHECK(psg_resource_variable(rm, "acc", PSG_DT_F32, &s2) == NULL);
    CHECK_ERROR_HAS("the name belongs to a resource of type 'accumulator'");
    psg_token_queue_t *q = psg_token_queue_get(rm, "q");
    CHECK(q && psg_token_queue_get(rm, "acc") == NULL);
    CHECK_ERROR_HAS("resource 'acc' is a accumulator, not a token queue");
    CHECK(psg_resource_count(rm, "accumulator") == 1 && psg_resource_count(rm, NULL) == 3);
    const char *name = NULL;
    CHECK(psg_resource_at(rm, "token queue", 0, &name) == q && name && !strcmp(name, "q"));
    psg_tensor_t *g = psg_tensor_zeros(PSG_DT_F32, &s2);
    bool accepted = true;
    CHECK(psg_accumulator_apply(acc, 0, g, &accepted) < 0 && !accepted);
    CHECK_ERROR_HAS("accumulator 'acc' takes f32[3] gradients, got f32[2]");
    psg_tensor_destroy(&g);
    psg_tensor_t *h = psg_token_queue_handle(q);
    CHECK(psg_accumulator_from_handle(h) == NULL);
    CHECK_ERROR_HAS("not an accumulator handle");
    CHECK(psg_token_queue_from_handle(h) == q);
    psg_tensor_destroy(&h);
    psg_resource_mgr_destroy(&rm);
}

/* The chief's N as workers are lost or join (psg_accumulator_set_required): a take waiting
 * for 2 with 1 in completes when N drops to 1; later takes ask for the live N whatever
 * their own, and the cap follows it; N grows again. The token queue's repeat the same. */
static void test_live_required(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shape_t s3 = psg_shape_1d(3);
    psg_accumulator_t *acc = psg_accumulator_get(rm, "acc", &s3, 2);
    CHECK(apply3(acc, 0, 6, 6, 6));
    waited_t w = {.t = {.acc = acc}};
    pthread_t th;
    pthread_create(&th, NULL, waited_main, &w);
    sleep_ms(20);
    CHECK(!atomic_load(&w.done)); /* 1 of 2 */
    CHECK(psg_accumulator_set_required(acc, 1) == 0);
    pthread_join(th, NULL);
    CHECK(w.t.rc == 0 && w.t.mean && psg_tensor_f32(w.t.mean)[0] == 6.0f);
    psg_tensor_destroy(&w.t.mean);
    CHECK(psg_accumulator_global_step(acc) == 1);
    /* a take of 2 (its attr) gets the live 1; a second gradient of the step is late */
    CHECK(apply3(acc, 1, 2, 2, 2) && !apply3(acc, 1, 9, 9, 9));
    psg_tensor_t *mean = NULL;
    CHECK(psg_accumulator_take(acc, 2, 1000, &mean) == 0 && psg_tensor_f32(mean)[0] == 2.0f);
    psg_tensor_destroy(&mean);
    /* a worker joins: 3 from now on, a take of 2 times out with 2 in */
    CHECK(psg_accumulator_set_required(acc, 3) == 0);
    CHECK(apply3(acc, 2, 1, 1, 1) && apply3(acc, 2, 2, 2, 2));
    CHECK(psg_accumulator_take(acc, 2, 50, &mean) < 0);
    CHECK_ERROR_HAS("accumulator 'acc': 2 of 3 gradients for step 2 after 50 ms");
    CHECK(apply3(acc, 2, 3, 3, 3));
    CHECK(psg_accumulator_take(acc, 2, 1000, &mean) == 0 && psg_tensor_f32(mean)[0] == 2.0f);
    psg_tensor_destroy(&mean);
    psg_accumulator_counts_t c;
    psg_accumulator_counts(acc, &c);
    CHECK(c.accepted == 5 && c.late == 1 && c.takes == 3);
    CHECK(psg_accumulator_set_required(acc, 0) < 0);
    CHECK_ERROR_HAS("accumulator 'acc': num_required must be >= 1, got 0");
    /* tokens: 2 a step from now on, whatever the enqueue asks */
    psg_token_queue_t *q = psg_token_queue_get(rm, "q");
    int64_t one = 1;
    CHECK(psg_token_queue_set_repeat(q, 2) == 0);
    CHECK(psg_token_queue_enqueue_many(q, &one, 1, 3, 0) == 0 && psg_token_queue_size(q) == 2);
    /* a worker joins: one more token of the last step at once, for it (local step 0) */
    int64_t tok = 0;
    CHECK(psg_token_queue_dequeue(q, 0, 0, 100, &tok) == 0 && tok == 1);
    CHECK(psg_token_queue_dequeue(q, 1, 0, 100, &tok) == 0 && tok == 1);
    CHECK(psg_token_queue_set_repeat(q, 3) == 0 && psg_token_queue_size(q) == 1);
    CHECK(psg_token_queue_dequeue(q, 2, 0, 100, &tok) == 0 && tok == 1);
    CHECK(psg_token_queue_set_repeat(q, 3) == 0 && psg_token_queue_size(q) == 0);
    CHECK(psg_token_queue_set_repeat(q, 0) < 0);
    CHECK_ERROR_HAS("token queue 'q': repeat must be >= 1, got 0");
    psg_resource_mgr_destroy(&rm);
}

static void test_token_queue(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_token_queue_t *q = psg_token_queue_get(rm, "sync_token_q");
    int64_t tok = 0, one = 1, two = 2, five = 5;
    CHECK(psg_token_queue_enqueue_many(q, &one, 1, 3, 0) == 0 && psg_token_queue_size(q) == 3);
    CHECK(psg_token_queue_dequeue(q, 0, 0, 100, &tok) == 0 && tok == 1);
    /* a worker at step 1 never takes a second token of step 1 */
    CHECK(psg_token_queue_dequeue(q, 0, 1, 30, &tok) < 0);
    CHECK_ERROR_HAS("token queue 'sync_token_q': worker 0 got no token for a step after 1 "
                    "within 30 ms (the last tokens released were for step 1");
    CHECK(psg_token_queue_size(q) == 2);
    /* new tokens drop the older ones nobody took (a dead worker's) */
    CHECK(psg_token_queue_enqueue_many(q, &two, 1, 3, 0) == 0 && psg_token_queue_size(q) == 3);
    CHECK(psg_token_queue_dequeue(q, 1, 0, 100, &tok) == 0 && tok == 2);
    /* the step that reaches end_step closes the queue: training is over */
    CHECK(psg_token_queue_enqueue_many(q, &five, 1, 3, 5) == 0 && psg_token_queue_size(q) == 0);
    CHECK(psg_token_queue_dequeue(q, 1, 2, 100, &tok) == 0 && tok == -1);
    CHECK(psg_token_queue_enqueue_many(q, &five, 1, 3, 0) == 0 && psg_token_queue_size(q) == 0);
    /* closed by an error: dequeues fail with it */
    psg_token_queue_t *q2 = psg_token_queue_get(rm, "q2");
    psg_token_queue_close(q2, "the chief failed");
    CHECK(psg_token_queue_dequeue(q2, 3, 0, 100, &tok) < 0);
    CHECK_ERROR_HAS("token queue 'q2' is closed: the chief failed");
    CHECK(psg_token_queue_enqueue_many(q2, &one, 1, 1, 0) < 0);
    psg_resource_mgr_destroy(&rm);
}

typedef struct {
    psg_token_queue_t *q;
    int64_t after, token;
    int rc;
} dequeuer_t;

static void *dequeuer_main(void *arg) {
    dequeuer_t *d = arg;
    d->rc = psg_token_queue_dequeue(d->q, 0, d->after, 5000, &d->token);
    return NULL;
}

static void test_token_queue_wakes_waiters(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_token_queue_t *q = psg_token_queue_get(rm, "q");
    dequeuer_t d[3] = {{q, 0, 0, -2}, {q, 0, 0, -2}, {q, 3, 0, -2}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, dequeuer_main, &d[i]);
    sleep_ms(20);
    int64_t one = 1;
    CHECK(psg_token_queue_enqueue_many(q, &one, 1, 2, 0) == 0);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    CHECK(d[0].rc == 0 && d[0].token == 1 && d[1].rc == 0 && d[1].token == 1);
    psg_token_queue_close(q, NULL); /* the one waiting for a step after 3 gets -1 */
    pthread_join(th[2], NULL);
    CHECK(d[2].rc == 0 && d[2].token == -1);
    psg_resource_mgr_destroy(&rm);
}

/* The ops in a session: apply twice, take the mean, release and take tokens. */
static void test_ops_in_a_session(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s3 = psg_shape_1d(3), sc = psg_shape_scalar();
    psg_endpoint_t grad = psg_placeholder(g, "grad", PSG_DT_F32, &s3);
    psg_endpoint_t step = psg_placeholder(g, "step", PSG_DT_I64, &sc);
    psg_endpoint_t h = psg_accumulator_op(g, "w/grad_accum", &s3, 2);
    psg_endpoint_t ok = psg_accumulator_apply_op(g, "apply", h, step, grad);
    psg_endpoint_t mean = psg_accumulator_take_op(g, "take", h, 2, 2000);
    psg_endpoint_t n = psg_accumulator_num_accumulated_op(g, "n", h);
    psg_endpoint_t flags[2] = {ok, ok};
    psg_endpoint_t count = psg_count_accepted(g, "count", 2, flags);
    psg_endpoint_t q = psg_token_queue_op(g, "sync_token_q");
    int enq = psg_token_queue_enqueue_many_op(g, "enqueue", q, step, 3, 0);
    psg_endpoint_t deq = psg_token_queue_dequeue_op(g, "dequeue", q, step, 0, 2000);
    psg_endpoint_t wait = {deq.node, 1};
    int set = psg_accumulator_set_global_step_op(g, "set_step", h, step);
    int close_q = psg_token_queue_close_op(g, "close_q", q, "");
    int live_n = psg_accumulator_set_required_op(g, "set_required", h, step);
    int live_q = psg_token_queue_set_repeat_op(g, "set_repeat", q, step);
    CHECK(psg_graph_error(g) == NULL && enq >= 0 && set >= 0 && close_q >= 0 && live_n >= 0 &&
          live_q >= 0);
    /* a variable's handle is not an accumulator's */
    psg_endpoint_t v = psg_var_handle(g, "v", PSG_DT_F32, &s3);
    psg_endpoint_t bad = psg_accumulator_apply_op(g, "bad_apply", v, step, grad);
    CHECK(psg_endpoint_valid(bad));
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    psg_endpoint_t feeds[2] = {grad, step};
    for (int i = 0; i < 2; i++) {
        psg_tensor_t *gv = vec3((float)i, 2.0f * (float)i, 1), *sv = psg_tensor_scalar_i64(0);
        psg_tensor_t *fv[2] = {gv, sv}, *out[2] = {NULL, NULL};
        psg_endpoint_t fetch[2] = {ok, count};
        CHECK(psg_session_run(s, 2, feeds, fv, 2, fetch, out, 0, NULL) == 0);
        CHECK(out[0] && psg_tensor_i32(out[0])[0] == 1 && psg_tensor_i32(out[1])[0] == 2);
        psg_tensor_destroy(&out[0]);
        psg_tensor_destroy(&out[1]);
        psg_tensor_destroy(&gv);
        psg_tensor_destroy(&sv);
    }
    psg_tensor_t *out = NULL;
    CHECK(psg_session_run(s, 0, NULL, NULL, 1, &n, &out, 0, NULL) == 0 &&
          psg_tensor_i32(out)[0] == 2);
    psg_tensor_destroy(&out);
    CHECK(psg_session_run(s, 0, NULL, NULL, 1, &mean, &out, 0, NULL) == 0);
    CHECK(out && psg_tensor_f32(out)[0] == 0.5f && psg_tensor_f32(out)[1] == 1.0f);
    psg_tensor_destroy(&out);
    /* stale now: the op says 0 */
    psg_tensor_t *gv = vec3(1, 1, 1), *s0 = psg_tensor_scalar_i64(0),
                 *s4 = psg_tensor_scalar_i64(4);
    psg_tensor_t *fv[2] = {gv, s0};
    CHECK(psg_session_run(s, 2, feeds, fv, 1, &ok, &out, 0, NULL) == 0 &&
          psg_tensor_i32(out)[0] == 0);
    psg_tensor_destroy(&out);
    CHECK(psg_session_run(s, 2, feeds, fv, 1, &bad, &out, 0, NULL) < 0);
    CHECK_ERROR_HAS(
        "node 'bad_apply' (AccumulatorApplyGradient): input is not an accumulator handle");
    /* a count below 1 is refused, naming the node */
    CHECK(psg_session_run(s, 1, &step, &s0, 0, NULL, NULL, 1, &live_n) < 0);
    CHECK_ERROR_HAS("set_required: n must be in [1, ");
    /* tokens: 4 a step from now on (the chief's count of live workers), then enqueue 4
     * (3 times, the op says: 4 taken), dequeue one newer than step 0 */
    CHECK(psg_session_run(s, 1, &step, &s4, 0, NULL, NULL, 1, &live_q) == 0);
    CHECK(psg_session_run(s, 1, &step, &s4, 0, NULL, NULL, 1, &enq) == 0);
    psg_token_queue_t *tq =
        psg_resource_find(psg_session_resources(s), "sync_token_q", "token queue");
    CHECK(tq && psg_token_queue_size(tq) == 4);
    psg_tensor_t *got[2] = {NULL, NULL};
    psg_endpoint_t dq[2] = {deq, wait};
    CHECK(psg_session_run(s, 1, &step, &s0, 2, dq, got, 0, NULL) == 0);
    CHECK(got[0] && psg_tensor_i64(got[0])[0] == 4 && psg_tensor_f32(got[1])[0] >= 0);
    psg_tensor_destroy(&got[0]);
    psg_tensor_destroy(&got[1]);
    CHECK(psg_session_run(s, 1, &step, &s4, 0, NULL, NULL, 1, &set) == 0);
    CHECK(psg_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &close_q) == 0);
    CHECK(psg_session_run(s, 1, &step, &s4, 2, dq, got, 0, NULL) == 0);
    CHECK(got[0] && psg_tensor_i64(got[0])[0] == -1);
    psg_tensor_destroy(&got[0]);
    psg_tensor_destroy(&got[1]);
    psg_accumulator_t *acc =
        psg_resource_find(psg_session_resources(s), "w/grad_accum", "accumulator");
    CHECK(acc && psg_accumulator_global_step(acc) == 4);
    psg_tensor_destroy(&gv);
    psg_tensor_destroy(&s0);
    psg_tensor_destroy(&s4);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_mean_and_stale);
    RUN_TEST(test_cap_drops_the_slowest);
    RUN_TEST(test_sparse_mean_stale_and_late);
    RUN_TEST(test_edges_of_a_step);
    RUN_TEST(test_sparse_sum_grows);
    RUN_TEST(test_take_waits_times_out_and_closes);
    RUN_TEST(test_reset);
    RUN_TEST(test_fail_take);
    RUN_TEST(test_accumulator_errors);
    RUN_TEST(test_live_required);
    RUN_TEST(test_token_queue);
    RUN_TEST(test_token_queue_wakes_waiters);
    RUN_TEST(test_ops_in_a_session);
    return psg_test_summary();
}
