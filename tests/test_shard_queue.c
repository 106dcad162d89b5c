/* The shard queue of an elastic job (ops/state/shard_queue.c): every shard of every epoch
 * handed out once and done once with workers that take in turn; a dead process's shard and a
 * restarted worker's (new incarnation) handed out again, first, a dead process's successor's
 * kept; the epoch order a
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

/* Worker 1's process is found dead holding a shard: the chief's next take names it and gives
 * it back, and the next taker gets it first; its late report of it counts as stale. */
static void test_lost_worker_shard_handed_out_again(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shard_queue_t *q = psg_shard_queue_get(rm, "shards", 5, 1, 7);
    CHECK(q);
    int64_t a = take(q, 0, 1, -1, NULL), b = take(q, 1, 1, -1, NULL);
    CHECK(a >= 0 && b >= 0 && a != b);
    int64_t dead[2] = {1, 1}; /* worker 1, incarnation 1 */
    int64_t s = -2;
    bool fin = true;
    CHECK(psg_shard_queue_take(q, 0, 1, a, dead, 1, &s, &fin) == 0);
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

/* The chief found worker 1's process 1 dead; worker 1's process 2 took a shard before the
 * chief's take named process 1: only process 1's shard goes back, process 2 keeps its own and
 * reports it done once (the verdict on a worker's name alone had it finished twice). ps0 names
 * the holders, each (worker, incarnation) once. */
static void test_dead_process_not_its_successor(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_shard_queue_t *q = psg_shard_queue_get(rm, "shards", 6, 1, 3);
    CHECK(q);
    int64_t a = take(q, 0, 7, -1, NULL), b = take(q, 1, 1, -1, NULL);
    int64_t n = -1, *held = psg_shard_queue_holders(q, &n);
    CHECK(held && n == 2);
    CHECK(held[0] + held[2] == 1 && held[1] + held[3] == 8); /* (0, 7) and (1, 1) */
    free(held);
    /* process 1 of worker 1 dies; its process 2 takes (gets b back: an older incarnation's) */
    int64_t c = take(q, 1, 2, -1, NULL);
    CHECK(c == b);
    int64_t dead[4] = {1, 1, 2, 5}; /* worker 1's process 1, and one that holds nothing */
    int64_t s = -2;
    bool fin = true;
    CHECK(psg_shard_queue_take(q, 0, 7, a, dead, 2, &s, &fin) == 0);
    CHECK(s >= 0 && s != c && !fin);
    psg_shard_queue_stats_t st;
    psg_shard_queue_stats(q, &st);
    CHECK(st.given_back == 1 && st.done == 1 && st.doing == 2);
    CHECK(take(q, 1, 2, c, NULL) >= 0); /* process 2's report counts */
    psg_shard_queue_stats(q, &st);
    CHECK(st.done == 2 && st.stale_done == 0);
    /* the same verdict again: nothing of process 2's goes back */
    CHECK(psg_shard_queue_take(q, 0, 7, s, dead, 2, &s, &fin) == 0);
    psg_shard_queue_stats(q, &st);
    CHECK(st.given_back == 1 && st.done == 3);
    held = psg_shard_queue_holders(q, &n);
    CHECK(held && n == 2);
    free(held);
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
    int64_t dead[2] = {-3, 1};
    CHECK(psg_shard_queue_take(q, 0, 1, -1, dead, 1, &s, &fin) < 0);
    CHECK_ERROR_HAS("not a worker");
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
    psg_endpoint_t dead = psg_placeholder(g, "dead", PSG_DT_I64, &vec);
    psg_endpoint_t out = psg_shard_queue_take_op(g, "data/take", h, inc, done, dead, 1);
    CHECK(psg_graph_error(g) == NULL);
    psg_session_t *s = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
    CHECK(s);
    psg_shape_t none = psg_shape_1d(0);
    psg_tensor_t *feeds[3] = {psg_tensor_scalar_i64(5), psg_tensor_scalar_i64(-1),
                              psg_tensor_new(PSG_DT_I64, &none)};
    psg_endpoint_t fe[3] = {inc, done, dead};
    int seen[6] = {0};
    for (int i = 0; i < 7; i++) {
        psg_tensor_t *got = NULL;
        CHECK(psg_session_run(s, 3, fe, feeds, 1, &out, &got, 0, NULL) == 0);
        int64_t shard = got ? psg_tensor_i64(got)[0] : -2;
        /* the holder named after the take: this worker (1) in process 5, while it holds one */
        CHECK(got && psg_tensor_numel(got) == (shard >= 0 ? 4 : 2));
        if (shard >= 0) CHECK(psg_tensor_i64(got)[2] == 1 && psg_tensor_i64(got)[3] == 5);
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
    psg_tensor_destroy(&feeds[1]);
    feeds[1] = psg_tensor_scalar_i64(-1);
    psg_tensor_destroy(&feeds[2]);
    psg_shape_t three = psg_shape_1d(3); /* not pairs */
    feeds[2] = psg_tensor_new(PSG_DT_I64, &three);
    memset(psg_tensor_i64(feeds[2]), 0, 3 * sizeof(int64_t));
    CHECK(psg_session_run(s, 3, fe, feeds, 1, &out, &got, 0, NULL) < 0 && !got);
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&feeds[i]);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_each_shard_once_an_epoch);
    RUN_TEST(test_lost_worker_shard_handed_out_again);
    RUN_TEST(test_dead_process_not_its_successor);
    RUN_TEST(test_epoch_order);
    RUN_TEST(test_bad_input);
    RUN_TEST(test_ops);
    return psg_test_summary();
}
