/* The records of which update of each writer every variable holds (ps/applied.c), as chain
 * replication forwards them: newest SEQ kept, the dump read back by a backup, a peer's
 * malformed lines refused by line, the last update's value before it, update ids parsed.
 * Not the forward nor the failover (tests/test_replication.sh runs those with processes). */
#include "ps/applied.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *W0 = "/job:worker/replica:0/task:0@00000000000000ab.0";
static const char *W1 = "/job:worker/replica:0/task:1@00000000000000cd.0";

static void test_newest_kept(void) {
    psg_applied_t *a = psg_applied_new();
    CHECK(a != NULL);
    CHECK(psg_applied_get(a, "w", W0) == -1);
    CHECK(psg_applied_set(a, "w", W0, 5) == 0);
    CHECK(psg_applied_set(a, "w", W0, 3) == 0); /* older: kept 5 */
    CHECK(psg_applied_get(a, "w", W0) == 5);
    CHECK(psg_applied_get(a, "w", W1) == -1);
    CHECK(psg_applied_forget(a, "w", W0, 4) == 0); /* a failed retry undone: exact */
    CHECK(psg_applied_get(a, "w", W0) == 4);
    psg_applied_destroy(&a);
    CHECK(a == NULL);
    psg_applied_destroy(&a); /* NULL-safe */
}

static void test_dump_merge(void) {
    psg_applied_t *a = psg_applied_new(), *b = psg_applied_new();
    CHECK(psg_applied_set(a, "w", W0, 7) == 0 && psg_applied_set(a, "w", W1, 2) == 0 &&
          psg_applied_set(a, "b", W0, 7) == 0);
    psg_strbuf_t one = {0}, all = {0};
    psg_applied_dump(a, "w", &one);
    CHECK(one.s && strstr(one.s, "w\t/job:worker/replica:0/task:0@00000000000000ab.0\t7\n") &&
          strstr(one.s, "\t2\n") && !strstr(one.s, "b\t"));
    psg_applied_dump(a, NULL, &all);
    CHECK(psg_applied_merge(b, all.s, all.len) == 0);
    CHECK(psg_applied_get(b, "w", W0) == 7 && psg_applied_get(b, "w", W1) == 2 &&
          psg_applied_get(b, "b", W0) == 7);
    const char *with_id = "#/job:worker/replica:0/task:0@1.0 9\nw\tx\t9\n";
    CHECK(psg_applied_merge(b, with_id, strlen(with_id)) == 0 && psg_applied_get(b, "w", "x") == 9);
    free(one.s);
    free(all.s);
    psg_applied_destroy(&a);
    psg_applied_destroy(&b);
}

static void test_bad_lines(void) {
    psg_applied_t *a = psg_applied_new();
    const char *bad[] = {"w\tx\n",
                         "w\tx\t\n",
                         "\tx\t3\n",
                         "w\t\t3\n",
                         "w\tx\t-1\n",
                         "w\tx\t3z\n",
                         "w\tx\t99999999999999999999999\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(psg_applied_merge(a, bad[i], strlen(bad[i])) < 0);
        CHECK(psg_error_code() == PSG_ERR_BAD_REQUEST);
        CHECK_ERROR_HAS("line 1");
    }
    const char *second = "w\tx\t3\nw\tx\n";
    CHECK(psg_applied_merge(a, second, strlen(second)) < 0);
    CHECK_ERROR_HAS("line 2");
    CHECK(psg_applied_get(a, "w", "x") == 3); /* the lines before are merged */
    psg_applied_destroy(&a);
}

static void test_last_update(void) {
    psg_applied_t *a = psg_applied_new();
    psg_shape_t s = psg_shape_1d(2);
    float v[2] = {1, 2};
    psg_tensor_t *pre = psg_test_tensor(&s, v);
    CHECK(psg_applied_set_last(a, "w", W0, 4, &pre) == 0 && pre == NULL);
    psg_tensor_t *got = psg_applied_pre_of(a, "w", W0, 4);
    CHECK(got && psg_tensor_f32(got)[1] == 2);
    psg_tensor_destroy(&got);
    CHECK(psg_applied_pre_of(a, "w", W0, 3) == NULL && psg_applied_pre_of(a, "w", W1, 4) == NULL);
    CHECK(psg_applied_set_last(a, "w", NULL, 0, NULL) == 0); /* a full copy: not known */
    CHECK(psg_applied_pre_of(a, "w", W0, 4) == NULL);
    psg_strbuf_t d = {0};
    psg_applied_dump(a, NULL, &d); /* no record of a writer was made by it */
    CHECK(d.len == 0);
    free(d.s);
    psg_applied_destroy(&a);
}

static void test_parse_id(void) {
    char w[PSG_APPLIED_WRITER_MAX];
    int64_t seq = 0;
    CHECK(psg_applied_parse_id("/job:worker/task:0@ab.1 12", w, sizeof w, &seq) == 0 &&
          !strcmp(w, "/job:worker/task:0@ab.1") && seq == 12);
    const char *bad[] = {"", "w", "w 0", "w -3", " 4", "w 4x", "w 99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(psg_applied_parse_id(bad[i], w, sizeof w, &seq) < 0);
        CHECK_ERROR_HAS("is not \"WRITER SEQ\"");
    }
    char tiny[4];
    CHECK(psg_applied_parse_id("writer 3", tiny, sizeof tiny, &seq) < 0);
}

int main(void) {
    RUN_TEST(test_newest_kept);
    RUN_TEST(test_dump_merge);
    RUN_TEST(test_bad_lines);
    RUN_TEST(test_last_update);
    RUN_TEST(test_parse_id);
    return psg_test_summary();
}
