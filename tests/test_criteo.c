/* The Criteo-format reader (hashing, empty fields, gzip, folders, errors naming file and
 * line), the AUC, the synthetic generator (fixed seed, planted AUC) and a short
 * wide-and-deep training on it that learns (held-out AUC well above chance). */
#include "tests/testutil.h"

#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

static char dir[64];

static void path_in(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", dir, name);
}

static void write_text(const char *name, const char *text, bool gz) {
    char p[128];
    path_in(p, sizeof p, name);
    gzFile f = gzopen(p, gz ? "wb" : "wT");
    CHECK(f != NULL);
    gzputs(f, text);
    gzclose(f);
}

/* label, 13 ints, 26 categoricals; the third int empty and the 2nd categorical empty */
static const char *ROW1 =
    "1\t5\t-3\t\t0\t1\t2\t3\t4\t5\t6\t7\t8\t9\t"
    "ff\t\t10\t0\t1\t2\t3\t4\t5\t6\t7\t8\t9\ta\tb\tc\td\te\tf\t11\t12\t13\t14\t15\t16\tFFFFFFFFFFFFFFFFFFFF\n";

static void test_hash(void) {
    CHECK(psg_ctr_hash("ff", 2, 7) == 255 % 7);
    CHECK(psg_ctr_hash("", 0, 7) == 0);
    CHECK(psg_ctr_hash("68fd1e64", 8, 1000000) == 0x68fd1e64 % 1000000);
    /* longer than 64 bits: still int(hex, 16) % buckets (2^80 - 1 mod 1000 = 175) */
    CHECK(psg_ctr_hash("FFFFFFFFFFFFFFFFFFFF", 20, 1000) == 175);
    CHECK(psg_ctr_hash("xz", 2, 10) == -1);
}

static void test_load(void) {
    char text[2048];
    snprintf(text, sizeof text, "%s%s", ROW1,
             "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n");
    write_text("a.txt", text, false);
    write_text("b.gz", ROW1, true);
    char p[128];
    path_in(p, sizeof p, "a.txt");
    psg_ctr_data_t *d = psg_ctr_load(p, 1000);
    CHECK(d != NULL);
    if (d) {
        CHECK(d->rows == 2);
        CHECK(d->labels[0] == 1 && d->labels[1] == 0);
        CHECK_NEAR(d->dense[0], log1p(5.0), 1e-6);
        CHECK_NEAR(d->dense[1], 0, 0);     /* negative: log(1 + max(x, 0)) */
        CHECK_NEAR(d->dense[2], 0, 0);     /* empty */
        CHECK(d->ids[0] == 255);           /* field 0: ff */
        CHECK(d->ids[1] == 1000);          /* field 1 empty: bucket 0 of field 1 */
        CHECK(d->ids[2] == 2 * 1000 + 16); /* field 2: 0x10 */
        CHECK(d->ids[25] == 25 * 1000 + 175);
        for (int k = 0; k < 26; k++) CHECK(d->ids[26 + k] == (int64_t)k * 1000); /* all empty */
    }
    psg_ctr_destroy(&d);
    /* a folder: its files in name order, gzip and plain alike */
    d = psg_ctr_load(dir, 1000);
    CHECK(d != NULL && d->rows == 3 && d->labels[2] == 1 && d->ids[2 * 26] == 255);
    psg_ctr_destroy(&d);
    /* errors name the file and line */
    write_text("c.txt", "1\t2\t3\n", false);
    path_in(p, sizeof p, "c.txt");
    CHECK(psg_ctr_load(p, 1000) == NULL);
    CHECK_ERROR_HAS("c.txt:1: 3 fields, expected 40");
    snprintf(text, sizeof text, "%s2%s", ROW1, ROW1 + 1);
    write_text("c.txt", text, false);
    CHECK(psg_ctr_load(p, 1000) == NULL);
    CHECK_ERROR_HAS("c.txt:2: label '2'");
    unlink(p);
    path_in(p, sizeof p, "missing.txt");
    CHECK(psg_ctr_load(p, 1000) == NULL);
    CHECK_ERROR_HAS("missing.txt");
}

static void test_auc(void) {
    float y[] = {0, 0, 1, 1}, s1[] = {0.1f, 0.2f, 0.3f, 0.4f}, s2[] = {0.4f, 0.3f, 0.2f, 0.1f},
          s3[] = {1, 1, 1, 1};
    float s4[] = {0.1f, 0.35f, 0.3f, 0.4f};
    CHECK_NEAR(psg_auc(s1, y, 4), 1.0, 1e-12);
    CHECK_NEAR(psg_auc(s2, y, 4), 0.0, 1e-12);
    CHECK_NEAR(psg_auc(s3, y, 4), 0.5, 1e-12); /* ties: average ranks */
    CHECK_NEAR(psg_auc(s4, y, 4), 0.75, 1e-12);
    CHECK(isnan(psg_auc(s1, (float[]){1, 1, 1, 1}, 4)));
}

/* The generator's file is the same for one seed, and the wide-deep trainer learns from
 * it: held-out AUC well above chance, below the planted one. */
static void test_synthetic_and_train(void) {
    char p[128], q[128];
    path_in(p, sizeof p, "ctr.tsv.gz");
    path_in(q, sizeof q, "ctr2.tsv.gz");
    double planted = 0, planted2 = 0;
    CHECK(psg_ctr_synthesize(p, 12000, 5, NULL, &planted) == 0);
    CHECK(psg_ctr_synthesize(q, 12000, 5, NULL, &planted2) == 0);
    CHECK(planted > 0.8 && planted == planted2);
    psg_ctr_data_t *a = psg_ctr_load(p, 1000), *b = psg_ctr_load(q, 1000);
    CHECK(a && b && a->rows == 12000 && !memcmp(a->ids, b->ids, sizeof(int64_t) * 12000 * 26));
    psg_ctr_destroy(&a);
    psg_ctr_destroy(&b);
    psg_train_config_t c;
    psg_train_config_defaults(&c);
    c.model = "wide-deep";
    c.data = "criteo";
    c.data_dir = p;
    c.buckets = 1000;
    c.epochs = 3;
    c.lr = 0.003;
    c.log_every = 1000;
    FILE *devnull = fopen("/dev/null", "w");
    c.out = devnull;
    psg_train_result_t r;
    CHECK(psg_train(&c, &r) == 0);
    printf("wide-deep on 12000 synthetic rows: held-out AUC %.4f (planted %.4f)\n", r.test_accuracy,
           planted);
    CHECK(r.test_accuracy > 0.65 && r.test_accuracy < planted);
    /* wrong data for the model: named */
    c.data = "fashion-mnist";
    CHECK(psg_train(&c, &r) < 0);
    CHECK_ERROR_HAS("--data criteo");
    fclose(devnull);
    unlink(p);
    unlink(q);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/psg_criteo_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN_TEST(test_hash);
    RUN_TEST(test_load);
    RUN_TEST(test_auc);
    RUN_TEST(test_synthetic_and_train);
    char p[128];
    const char *names[] = {"a.txt", "b.gz", "c.txt"};
    for (int i = 0; i < 3; i++) {
        path_in(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return psg_test_summary();
}
