/* Straggler injection: the --straggler parser (each bad field named) and
 * the sampler (repeatable, the right means, only the named workers). */
#include "psgraph/straggler.h"
#include "tests/testutil.h"

static void test_parse(void) {
    psg_straggler_spec_t s;
    CHECK(psg_straggler_parse("worker=2,delay_ms=300", &s) == 0);
    CHECK(s.worker == 2 && s.dist == PSG_STRAGGLER_FIXED && s.delay_ms == 300 && s.prob == 1);
    CHECK(psg_straggler_parse("worker=all,dist=exponential,mean_ms=20", &s) == 0);
    CHECK(s.worker == -1 && s.dist == PSG_STRAGGLER_EXPONENTIAL && s.mean_ms == 20);
    CHECK(psg_straggler_parse("worker=all,dist=lognormal,median_ms=10,sigma=0.5,prob=0.25", &s) ==
          0);
    CHECK(s.dist == PSG_STRAGGLER_LOGNORMAL && fabs(s.mu - log(10.0)) < 1e-12 && s.sigma == 0.5 &&
          s.prob == 0.25);
    CHECK(psg_straggler_parse("worker=1,mu=2,sigma=1", &s) == 0 &&
          s.dist == PSG_STRAGGLER_LOGNORMAL);

    static const struct {
        const char *text, *error;
    } bad[] = {
        {"delay_ms=300", "--straggler 'delay_ms=300': worker: missing"},
        {"worker=x,delay_ms=300", "worker: not a task index or 'all' ('x')"},
        {"worker=-1,delay_ms=3", "worker: not a task index or 'all' ('-1')"},
        {"worker=1,delay=300", "delay: unknown field"},
        {"worker=1,delay_ms=abc", "delay_ms: not a number ('abc')"},
        {"worker=1,delay_ms=-5", "delay_ms: must be in [0, "},
        {"worker=1", "delay_ms: missing"},
        {"worker=1,worker=2,delay_ms=1", "worker: given twice"},
        {"worker=1,dist=gamma",
         "dist: unknown distribution (fixed, exponential, lognormal) ('gamma')"},
        {"worker=1,dist=fixed,mean_ms=3", "mean_ms: not a parameter of this distribution"},
        {"worker=1,dist=lognormal,sigma=1", "median_ms: give exactly one of median_ms and mu"},
        {"worker=1,median_ms=5", "sigma: missing"},
        {"worker=1,delay_ms=5,prob=0", "prob: must be in"},
        {"worker=1,300", "300: expected key=value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(psg_straggler_parse(bad[i].text, &s) < 0);
        CHECK_ERROR_HAS(bad[i].error);
    }
}

static void test_sampler(void) {
    psg_straggler_t *s = psg_straggler_new(42), *same = psg_straggler_new(42);
    CHECK(psg_straggler_delay_ms(s, 0, 0) == 0 && psg_straggler_count(s) == 0);
    CHECK(psg_straggler_add(s, "worker=2,delay_ms=300") == 0);
    CHECK(psg_straggler_add(s, "worker=all,dist=exponential,mean_ms=10") == 0);
    CHECK(psg_straggler_add(s, "worker=x") < 0 && psg_straggler_count(s) == 2);
    CHECK(psg_straggler_add(same, "worker=2,delay_ms=300") == 0);
    CHECK(psg_straggler_add(same, "worker=all,dist=exponential,mean_ms=10") == 0);
    double sum0 = 0, sum2 = 0;
    int n = 20000;
    for (int step = n - 1; step >= 0; step--) {
        double d0 = psg_straggler_delay_ms(s, 0, step), d2 = psg_straggler_delay_ms(s, 2, step);
        CHECK(d0 >= 0 && d2 >= 300);
        sum0 += d0;
        sum2 += d2;
        if (step % 1000 == 0) CHECK(d0 == psg_straggler_delay_ms(same, 0, step));
    }
    CHECK_NEAR(sum0 / n, 10.0, 0.5);
    CHECK_NEAR(sum2 / n, 310.0, 0.5);
    /* lognormal: the median is e^mu */
    psg_straggler_t *ln = psg_straggler_new(7);
    CHECK(psg_straggler_add(ln, "worker=all,median_ms=20,sigma=1") == 0);
    int below = 0;
    for (int step = 0; step < n; step++) below += psg_straggler_delay_ms(ln, 3, step) < 20.0;
    CHECK_NEAR((double)below / n, 0.5, 0.02);
    /* prob: about that share of steps are delayed */
    psg_straggler_t *p = psg_straggler_new(9);
    CHECK(psg_straggler_add(p, "worker=1,delay_ms=5,prob=0.1") == 0);
    int delayed = 0;
    for (int step = 0; step < n; step++) delayed += psg_straggler_delay_ms(p, 1, step) > 0;
    CHECK_NEAR((double)delayed / n, 0.1, 0.01);
    CHECK(psg_straggler_delay_ms(p, 0, 3) == 0);
    CHECK(psg_straggler_sleep(NULL, 0, 0) == 0);
    psg_straggler_destroy(&s);
    psg_straggler_destroy(&same);
    psg_straggler_destroy(&ln);
    psg_straggler_destroy(&p);
    CHECK(s == NULL);
}

int main(void) {
    RUN_TEST(test_parse);
    RUN_TEST(test_sampler);
    return psg_test_summary();
}
