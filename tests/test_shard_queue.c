/* The shard queue of an elastic job (ops/state/shard_queue.c): every shard of every epoch
 * handed out once and done once with workers that take in turn; a lost worker's shard and a
 * restarted worker's (new incarnation) handed out again, first; the epoch order a
 * permutation that depends on (seed, epoch) only; a peer's bad input an error that changes
 * nothing; the op in a session, fed as a worker feeds it, and its bad feeds. */
#include "ops/state/shard_queue.h"
#include "psgraph/session.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

static int64_t take(psg_shard_queue_t *q, int worker, uint64_t inc, int64_t done, bool *finished) {
    int64_t shard = -2;
    bool fin = false;
    CHECK(psg_shard_queue_take(q, worker, inc, done, NULL, 0, &shard, &fin) == 0);
    if (finished) *finished = fin;
    return shard;
}

/* 3 workers take in turn, each reporting its last shard: every (epoch, shard) once. */
static void test_each_shard_once_an_epoch(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shard_queue_t *q = psg_shard_queue_get(rm, "shards", 7, 3, 42);
    CHECK(q);
    int seen[21] = {0};
    int64_t held[3] = {-1, -1, -1};
    bool finished = false;
    for (int round = 0; !finished && round < 100; round++)
        for (int w = 0; w < 3 && !finished; w++) {
            int64_t s = take(q, w, 1, held[w], &finished);
            held[w] = s;
            if (s >= 0) {
                CHECK(s < 21);
                seen[s]++;
                /* epochs in order: a shard of epoch e only once e's are all out */
                for (int64_t e = 0; e < s / 7; e++)
                    for (int k = 0; k < 7; k++) CHECK(seen[e * 7 + k] == 1);
            }
        }
    CHECK(finished);
    for (int i = 0; i < 21; i++) CHECK(seen[i] == 1);
    psg_shard_queue_stats_t st;
    psg_shard_queue_stats(q, &st);
    CHECK(st.done == 21 && st.given_back == 0 && st.stale_done == 0 && st.doing == 0);
    CHECK(take(q, 0, 1, -1, &finished) == -1 && finished);
    psg_resource_mgr_destroy(&rm);
}

/* Worker 1 is lost holding a shard: the chief's next take gives it back, and the next taker
 * gets it first; worker 1's late report of it counts as stale. */
static void test_lost_worker_shard_handed_out_again(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shard_queue_t *q = psg_shard_queue_get(rm, "shards", 5, 1, 7);
    CHECK(q);
    int64_t a = take(q, 0, 1, -1, NULL), b = take(q, 1, 1, -1, NULL);
    CHECK(a >= 0 && b >= 0 && a != b);
    int32_t live[2] = {1, 0};
    int64_t s = -2;
    bool fin = true;
    CHECK(psg_shard_queue_take(q, 0, 1, a, live, 2, &s, &fin) == 0);
    CHECK(s == b && !fin); /* the lost one's shard, first in line */
    psg_shard_queue_stats_t st;
    psg_shard_queue_stats(q, &st);
    CHECK(st.given_back == 1 && st.done == 1 && st.doing == 1);
    CHECK(take(q, 1, 1, b, NULL) >= 0); /* worker 1 answers late: its report is stale */
    psg_shard_queue_stats(q, &st);
    CHECK(st.stale_done == 1 && st.done == 1);
    /* a restarted worker 2 (incarnation 2) gets back what its first process held */
    int64_t c = take(q, 2, 1, -1, NULL);
    CHECK(c >= 0 && take(q, 2, 2, -1, NULL) == c);
    psg_shard_queue_stats(q, &st);
    CHECK(st.given_back == 2);
    psg_resource_mgr_destroy(&rm);
}

/* The order of an epoch: a permutation, the same for (seed, epoch), another for another epoch. */
static void test_epoch_order(void) {
    int64_t a[50], b[50], c[50];
    psg_shard_queue_order(50, 3, 0, a);
    psg_shard_queue_order(50, 3, 0, b);
    psg_shard_queue_order(50, 3, 1, c);
    int count[50] = {0};
    for (int i = 0; i < 50; i++) count[a[i]]++;
    for (int i = 0; i < 50; i++) CHECK(count[i] == 1);
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(a, c, sizeof a) != 0);
}

/* What a peer may send wrong: errors naming the queue, nothing changed. */
static void test_bad_input(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    CHECK(!psg_shard_queue_get(rm, "bad", 0, 3, 1));
    CHECK(!psg_shard_queue_get(rm, "bad", INT64_C(1) << 30, INT64_C(1) << 30, 1));
    psg_shard_queue_t *q = psg_shard_queue_get(rm, "shards", 4, 2, 1);
    CHECK(q && !psg_shard_queue_get(rm, "shards", 5, 2, 1));
    CHECK_ERROR_HAS("exists with 4 shards");
    int64_t s = -2;
    bool fin = false;
    CHECK(psg_shard_queue_take(q, -1, 1, -1, NULL, 0, &s, &fin) < 0);
    CHECK(psg_shard_queue_take(q, 0, 1, 8, NULL, 0, &s, &fin) < 0);
    CHECK_ERROR_HAS("shard queue 'shards'");
    CHECK(psg_shard_queue_take(q, 0, 1, -5, NULL, 0, &s, &fin) < 0);
    CHECK(psg_shard_queue_take(q, 0, 1, -1, NULL, 3, &s, &fin) < 0);
    psg_shard_queue_stats_t st;
    psg_shard_queue_stats(q, &st);
    CHECK(st.doing == 0 && st.done == 0 && st.todo == 0);
    psg_resource_mgr_destroy(&rm);
}

/* The ops in a session, fed as a worker feeds them; bad feeds fail the run. */
static void test_ops(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t sc = psg_shape_scalar(), vec = psg_shape_1d(-1);
    psg_endpoint_t h = psg_shard_queue_op(g, "data/shards", 3, 2, 9);
    psg_endpoint_t inc = psg_placeholder(g, "inc", PSG_DT_I64, &sc);
    psg_endpoint_t done = psg_placeholder(g, "done", PSG_DT_I64, &sc);
    psg_endpoint_t live = psg_placeholder(g, "live", PSG_DT_I32, &vec);
    psg_endpoint_t out = psg_shard_queue_take_op(g, "data/take", h, inc, done, live, 1);
    CHECK(psg_graph_error(g) == NULL);
    psg_session_t *s = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
    CHECK(s);
    psg_shape_t none = psg_shape_1d(0);
    psg_tensor_t *feeds[3] = {psg_tensor_scalar_i64(5), psg_tensor_scalar_i64(-1),
                              psg_tensor_new(PSG_DT_I32, &none)};
    psg_endpoint_t fe[3] = {inc, done, live};
    int seen[6] = {0};
    for (int i = 0; i < 7; i++) {
        psg_tensor_t *got = NULL;
        CHECK(psg_session_run(s, 3, fe, feeds, 1, &out, &got, 0, NULL) == 0);
        CHECK(got && psg_tensor_numel(got) == 2);
        int64_t shard = psg_tensor_i64(got)[0];
        CHECK(shard >= -1 && shard < 6);
        if (shard >= 0) seen[shard]++;
        CHECK((psg_tensor_i64(got)[1] == 1) == (i == 6));
        psg_tensor_i64(feeds[1])[0] = shard;
        psg_tensor_destroy(&got);
    }
    for (int i = 0; i < 6; i++) CHECK(seen[i] == 1);
    psg_tensor_i64(feeds[1])[0] = 99; /* not a shard: the run fails */
    psg_tensor_t *got = NULL;
    CHECK(psg_session_run(s, 3, fe, feeds, 1, &out, &got, 0, NULL) < 0 && !got);
    psg_tensor_destroy(&feeds[1]);
    feeds[1] = psg_tensor_scalar_f32(1); /* a wrong dtype */
    CHECK(psg_session_run(s, 3, fe, feeds, 1, &out, &got, 0, NULL) < 0 && !got);
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&feeds[i]);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_each_shard_once_an_epoch);
    RUN_TEST(test_lost_worker_shard_handed_out_again);
    RUN_TEST(test_epoch_order);
    RUN_TEST(test_bad_input);
    RUN_TEST(test_ops);
    return psg_test_summary();
}
