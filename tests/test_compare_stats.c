/* psgraph compare's numbers over repeats (cli/compare_stats.c): the 95 % interval against
 * values computed by hand from Student's t, the runs a load margin flags (a run beside a CPU
 * hog), what is not measured left out, and the machine read from /proc. */
#include "cli/compare_stats.h"
#include "tests/testutil.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static bool near(double a, double b, double tol) {
    return fabs(a - b) <= tol;
}

/* 10, 12, 14: mean 12, s = 2, t(0.975, 2) = 4.303, half-width 4.303 * 2 / sqrt(3) = 4.9687. */
static void test_interval_by_hand(void) {
    double x[] = {10, 12, 14};
    psg_compare_stat_t s = psg_compare_stat(x, 3);
    CHECK(s.n == 3 && near(s.mean, 12, 1e-12) && s.min == 10 && s.max == 14);
    CHECK(near(s.lo, 12 - 4.9687, 1e-3) && near(s.hi, 12 + 4.9687, 1e-3));
    char buf[256];
    psg_compare_stat_json(buf, sizeof buf, "t", &s, "%.2f");
    CHECK(!strcmp(buf, "\"t\":{\"n\":3,\"mean\":12.00,\"min\":10.00,\"max\":14.00,"
                       "\"ci95\":[7.03,16.97]}"));
    /* a run that never reached the target (-1) or measured nothing (NaN) is left out */
    double y[] = {-1, 5, NAN, 7};
    s = psg_compare_stat(y, 4);
    CHECK(s.n == 2 && near(s.mean, 6, 1e-12) &&
          near(s.hi - s.mean, 12.706 * sqrt(2) / sqrt(2), 1e-9));
    double one[] = {3};
    s = psg_compare_stat(one, 1);
    CHECK(s.n == 1 && s.lo == 3 && s.hi == 3);
    s = psg_compare_stat(y, 1);
    psg_compare_stat_json(buf, sizeof buf, "t", &s, "%.2f");
    CHECK(s.n == 0 && !strcmp(buf, "\"t\":null"));
    /* the table's ends and past it: t -> 1.96 */
    CHECK(psg_compare_t975(1) == 12.706 && psg_compare_t975(30) == 2.042);
    CHECK(near(psg_compare_t975(60), 2.000, 0.002) && near(psg_compare_t975(100000), 1.96, 1e-3));
    CHECK(isnan(psg_compare_t975(0)));
}

/* Six runs at loads near 3 and one beside a CPU hog at 5.2 (the others' median 3.05): only
 * that one is flagged with a margin of 0.25 (0.76 of load); with 1 (3.05) it is not. The
 * runs measured here (docs/sync.md): 5 runs at 17.9-25.5 runnable tasks and one beside 3
 * busy loops at 32.9 on a loaded machine. On an idle machine the margin is of a load of 1.
 * One run alone has nothing to differ from. */
static void test_load_flags(void) {
    double load[] = {3.1, 2.9, 3.4, 5.2, 3.0, 2.7, 3.3};
    bool flagged[16];
    CHECK(psg_compare_flag_loads(load, 7, 0.25, flagged) == 1);
    for (int i = 0; i < 7; i++) CHECK(flagged[i] == (i == 3));
    CHECK(psg_compare_flag_loads(load, 7, 1.0, flagged) == 0);
    double busy[] = {23.25, 21.08, 25.53, 32.89, 17.94, 19.26};
    CHECK(psg_compare_flag_loads(busy, 6, 0.25, flagged) == 1 && flagged[3]);
    double idle[] = {0.1, 0.0, 0.2, 1.6};
    CHECK(psg_compare_flag_loads(idle, 4, 0.25, flagged) == 1 && flagged[3]);
    CHECK(psg_compare_flag_loads(load, 1, 0.0, flagged) == 0 && !flagged[0]);
    /* What compare flags by: the runnable tasks not of the run. The default workload's 15
     * runs on a quiet machine (2026-11-27) had 0.57 (local SGD) to 1.31 (async) runnable
     * tasks, nearly all their own: by that load ten were flagged. Their others' load is near
     * 0 and none is; one more run beside two busy loops is. */
    double quiet[16] = {0.02, 0.05, 0.01, 0.03, 0.00, 0.04, 0.02, 0.06,
                        0.01, 0.03, 0.02, 0.00, 0.05, 0.02, 0.04, 1.95};
    CHECK(psg_compare_flag_loads(quiet, 15, 0.25, flagged) == 0);
    CHECK(psg_compare_flag_loads(quiet, 16, 0.25, flagged) == 1 && flagged[15]);
}

/* The runnable threads of a process tree: a child spinning on a second thread is counted
 * (while it spins), a sleeping child is not, and a pid that does not exist has none. */
static void test_tree_runnable(void) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t spinner = fork();
    if (spinner == 0) { /* spin until the parent closes the pipe */
        close(pipefd[1]);
        fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
        char c;
        while (read(pipefd[0], &c, 1) < 0) {
        }
        _exit(0);
    }
    close(pipefd[0]);
    int seen = 0;
    for (int i = 0; i < 200 && !seen; i++) { /* on a busy machine: runnable at some sample */
        int n = psg_tree_runnable((long)spinner);
        CHECK(n >= 0);
        seen = n == 1;
        usleep(5000);
    }
    CHECK(seen);
    close(pipefd[1]);
    CHECK(waitpid(spinner, NULL, 0) == spinner);
    pid_t sleeper = fork();
    if (sleeper == 0) {
        pause();
        _exit(0);
    }
    int asleep = 0; /* once it reached pause() */
    for (int i = 0; i < 400 && !asleep; i++) {
        asleep = psg_tree_runnable((long)sleeper) == 0;
        usleep(5000);
    }
    CHECK(asleep);
    kill(sleeper, SIGKILL);
    CHECK(waitpid(sleeper, NULL, 0) == sleeper);
    CHECK(psg_tree_runnable(999999999L) == 0);
}

/* /proc gives a load and CPU times; the busy time only grows. */
static void test_machine_sample(void) {
    psg_machine_sample_t a, b;
    CHECK(psg_machine_sample(&a) == 0 && a.load1 >= 0 && a.busy_sec > 0 && a.steal_sec >= 0);
    volatile double spin = 0;
    for (int i = 0; i < 20000000; i++) spin += i * 1e-9;
    CHECK(psg_machine_sample(&b) == 0 && b.busy_sec >= a.busy_sec);
}

/* Local SGD with H = 4 (the default workload's: 117 steps an epoch, --eval-every 20): the
 * chief's copy is the average after steps 4, 8, ..., 20, 120, 400, its own after 117 (an
 * epoch's evaluation, one local step past the average of 116) and 234; post-local SGD with
 * --local-after 100: every step to 100 is averaged (sync), then 104, 108; no rounds
 * (every 0): every step is the model. */
static void test_averaged_at(void) {
    CHECK(psg_compare_averaged_at(4, 4, 0) && psg_compare_averaged_at(20, 4, 0));
    CHECK(psg_compare_averaged_at(120, 4, 0) && psg_compare_averaged_at(400, 4, 0));
    CHECK(!psg_compare_averaged_at(117, 4, 0) && !psg_compare_averaged_at(234, 4, 0));
    CHECK(!psg_compare_averaged_at(351, 4, 0) && psg_compare_averaged_at(468, 4, 0));
    CHECK(psg_compare_averaged_at(1, 4, 100) && psg_compare_averaged_at(99, 4, 100));
    CHECK(psg_compare_averaged_at(100, 4, 100) && !psg_compare_averaged_at(101, 4, 100));
    CHECK(!psg_compare_averaged_at(102, 4, 100) && psg_compare_averaged_at(104, 4, 100));
    CHECK(psg_compare_averaged_at(117, 0, 0) && psg_compare_averaged_at(117, 1, 0));
}

int main(void) {
    RUN_TEST(test_interval_by_hand);
    RUN_TEST(test_tree_runnable);
    RUN_TEST(test_load_flags);
    RUN_TEST(test_machine_sample);
    RUN_TEST(test_averaged_at);
    return psg_test_summary();
}
