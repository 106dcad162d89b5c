/* `psgraph train --sync sync` across real processes on 127.0.0.1: the ps task
 * runs in this process (so the test reads its variables and accumulators
 * directly), each worker is a `psgraph train` process. Equivalence with one
 * worker of batch 2·B (also with 2 CPU towers a worker), a delayed backup
 * worker's gradients dropped, a dead worker failing the others in time with
 * b = 0 (and a dead chief with b = 1: no recovery yet), a failed chief's runner ending
 * the others' token waits at once, and a SIGKILLed worker not stopping training with
 * b = 1 (mlp to the accuracy bar); ring all-reduce equal
 * to sync with b = 0 (2 and 4 workers) and failing in time, naming the dead worker. Every
 * process is reaped, every file removed. */
#include "tests/testutil.h"

#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_W 4

static const char *psgraph_exe;
static bool asan;
static char tmpdir[256];

/* One job: a cluster file, the ps in process, workers as processes. */
typedef struct {
    int nw;
    char name[32], cluster[600], logs[MAX_W][600];
    psg_cluster_t *c;
    psg_task_server_t *ps;
    pid_t pids[MAX_W];
    int status[MAX_W];
} job_t;

static void job_start(job_t *j, const char *name, int nw) {
    memset(j, 0, sizeof *j);
    j->nw = nw;
    snprintf(j->name, sizeof j->name, "%s", name);
    snprintf(j->cluster, sizeof j->cluster, "%s/%s.json", tmpdir, name);
    FILE *f = fopen(j->cluster, "w");
    PSG_ASSERT(f);
    fprintf(f, "{\"cluster\": {\"ps\": [\"127.0.0.1:%d\"], \"worker\": [", psg_test_free_port());
    for (int i = 0; i < nw; i++)
        fprintf(f, "%s\"127.0.0.1:%d\"", i ? ", " : "", psg_test_free_port());
    fprintf(f, "]}}\n");
    fclose(f);
    j->c = psg_cluster_from_file(j->cluster, "ps", 0);
    PSG_ASSERT(j->c);
    /* Recvs wait past the chief's take (3/4 of a step timeout of 8 s, 16 s under ASan): a
     * dead worker shows as the take's "gradients for step", not as the update's Recv of the
     * worker's group of applies timing out first */
    psg_task_server_options_t so = {.cluster = j->c, .recv_timeout_ms = 30000, .logdirs = {tmpdir}};
    j->ps = psg_task_server_new(&so);
    PSG_ASSERT(j->ps);
}

/* Starts worker i: psgraph train --cluster ... --job worker --task i ARGS (NULL-ended). */
static void job_spawn(job_t *j, int i, const char *const *args) {
    snprintf(j->logs[i], sizeof j->logs[i], "%s/%s.worker%d.log", tmpdir, j->name, i);
    char task[16];
    snprintf(task, sizeof task, "%d", i);
    const char *argv[64] = {psgraph_exe, "train",  "--cluster", j->cluster,
                            "--job",     "worker", "--task",    task};
    int n = 8;
    for (int k = 0; args[k] && n < 63; k++) argv[n++] = args[k];
    argv[n] = NULL;
    pid_t pid = fork();
    PSG_ASSERT(pid >= 0);
    if (pid == 0) {
        int fd = open(j->logs[i], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(psgraph_exe, (char *const *)argv);
        _exit(127);
    }
    j->pids[i] = pid;
}

/* Waits for worker i until deadline (now_s); kills and reaps it after. Returns its
 * exit code, 128 + signal, or -1 when it had to be killed. */
static int job_wait(job_t *j, int i, double deadline) {
    if (!j->pids[i]) return j->status[i];
    int st = 0;
    pid_t r;
    while ((r = waitpid(j->pids[i], &st, WNOHANG)) == 0 && psg_test_now_sec() < deadline)
        usleep(20000);
    if (r == 0) {
        kill(j->pids[i], SIGKILL);
        waitpid(j->pids[i], &st, 0);
        j->status[i] = -1;
    } else {
        j->status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    j->pids[i] = 0;
    return j->status[i];
}

static void job_stop(job_t *j) {
    for (int i = 0; i < j->nw; i++) job_wait(j, i, 0);
    psg_task_server_destroy(&j->ps);
    psg_cluster_destroy(&j->c);
}

/* The whole log of worker i (malloc'd, "" when unreadable). */
static char *job_log(const job_t *j, int i) {
    FILE *f = fopen(j->logs[i], "r");
    char *s = calloc(1, 1 << 20);
    PSG_ASSERT(s);
    if (f) {
        size_t n = fread(s, 1, (1 << 20) - 1, f);
        s[n] = 0;
        fclose(f);
    }
    return s;
}

/* Waits until worker i's log holds `what` (true) or deadline passes. */
static bool job_log_wait(const job_t *j, int i, const char *what, double deadline) {
    while (psg_test_now_sec() < deadline) {
        char *s = job_log(j, i);
        bool found = strstr(s, what) != NULL;
        free(s);
        if (found) return true;
        usleep(20000);
    }
    return false;
}

/* The integer after "key": in the line of s that starts with `line` (-1: none). */
static long long field(const char *s, const char *line, const char *key) {
    const char *p = strstr(s, line);
    if (!p) return -1;
    const char *end = strchr(p, '\n');
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *k = strstr(p, pat);
    if (!k || (end && k > end)) return -1;
    return strtoll(k + strlen(pat), NULL, 10);
}

static double field_f(const char *s, const char *line, const char *key) {
    const char *p = strstr(s, line);
    if (!p) return -1;
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *k = strstr(p, pat);
    return k ? strtod(k + strlen(pat), NULL) : -1;
}

static void dump_logs(const job_t *j) {
    for (int i = 0; i < j->nw; i++) {
        char *s = job_log(j, i);
        size_t n = strlen(s);
        fprintf(stderr, "---- %s worker %d (last lines)\n%s\n", j->name, i,
                s + (n > 1500 ? n - 1500 : 0));
        free(s);
    }
}

/* The worst relative difference of job a's f32 variables (named prefix + b's name: local
 * SGD's ps copies are "local_sgd/global/<var>") from job b's, read from their ps, after
 * steps steps of a, the chief reporting global_steps and used gradients (-1: not checked). */
static double compare_variables_as(job_t *a, job_t *b, const char *what, const char *prefix,
                                   int steps, int used, int global_steps) {
    char *log0 = job_log(a, 0);
    CHECK(field(log0, "{\"event\":\"done\"", "global_steps") == global_steps);
    if (used >= 0) CHECK(field(log0, "{\"event\":\"done\"", "gradients_used") == used);
    CHECK(field(log0, "{\"event\":\"done\"", "gradients_dropped") == 0);
    free(log0);
    psg_resource_mgr_t *ra = psg_task_server_resources(a->ps),
                       *rr = psg_task_server_resources(b->ps);
    int nv = psg_resource_num_variables(rr), compared = 0;
    double worst = 0, worst_abs = 0;
    for (int i = 0; i < nv; i++) {
        psg_variable_t *want = psg_resource_variable_at(rr, i);
        /* the model's variables (not the job's bookkeeping: counts, clocks) */
        if (want->dtype != PSG_DT_F32 || !strncmp(want->name, "sync_replicas/", 14) ||
            !strncmp(want->name, "ssp/", 4))
            continue;
        char name[512];
        snprintf(name, sizeof name, "%s%s", prefix, want->name);
        psg_variable_t *got = psg_resource_find_variable(ra, name);
        CHECK(got != NULL);
        if (!got || !got->value || !want->value) continue;
        const float *x = psg_tensor_f32(want->value), *y = psg_tensor_f32(got->value);
        for (int64_t e = 0; e < psg_tensor_numel(want->value); e++) {
            /* relative to the element; elements within 1e-3 of 0 (biases that start at 0,
             * weights near it: the float noise of a sum is relative to its terms, not to
             * the result) are held to 1e-5 of 1e-3, i.e. an absolute 1e-8 */
            double d = fabs((double)x[e] - (double)y[e]);
            worst = fmax(worst, d / fmax(fabs((double)x[e]), 1e-3));
            worst_abs = fmax(worst_abs, d);
        }
        compared++;
    }
    printf("  equivalence, %s: %d variables, worst relative difference %.3g (absolute %.3g) "
           "after %d steps\n",
           what, compared, worst, worst_abs, steps);
    CHECK(compared >= 4);
    return worst;
}

static double compare_variables(job_t *a, job_t *b, const char *what) {
    return compare_variables_as(a, b, what, "", 4, 8, 4);
}

/* Starts job j (name, nw workers), each `psgraph train` with base[nb], then tail (NULL-ended). */
static void job_start_with(job_t *j, const char *name, int nw, const char *const *base, size_t nb,
                           const char *const *tail) {
    const char *args[40];
    int n = 0;
    for (size_t k = 0; k < nb; k++) args[n++] = base[k];
    for (int k = 0; tail[k] && n < 39; k++) args[n++] = tail[k];
    args[n] = NULL;
    job_start(j, name, nw);
    for (int i = 0; i < nw; i++) job_spawn(j, i, args);
}

/* Strategies whose answer is sync's with b = 0 (docs/sync.md), 2 workers, SGD, 20 steps of
 * the same batches: SSP with s = 0 (bulk-synchronous: each applies its gradient / 2 once
 * both have read the step) and local SGD with H = 1 (the average of the two copies after
 * one step each is the averaged gradient step); the parameters on the ps within 1e-5. */
static void test_strategies_equal_sync(void) {
    const char *base[] = {"--model", "mlp", "--data", "synthetic", "--optimizer",    "sgd",
                          "--steps", "20",  "--seed", "3",         "--step-timeout", "60",
                          "--batch", "16",  "--sync"};
    const char *tails[4][6] = {{"sync", NULL},
                               {"ssp", "--staleness", "0", NULL},
                               {"local", "--local-steps", "1", NULL},
                               {"sync", "--compress", "topk", "--compress-ratio", "1", NULL}};
    const char *names[4] = {"strat_sync", "strat_ssp", "strat_local", "strat_topk"};
    job_t jobs[4];
    for (int j = 0; j < 4; j++)
        job_start_with(&jobs[j], names[j], 2, base, sizeof base / sizeof *base, tails[j]);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    bool ok = true;
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 2; i++) ok &= job_wait(&jobs[j], i, deadline) == 0;
    CHECK(ok);
    for (int j = 0; !ok && j < 4; j++) dump_logs(&jobs[j]);
    /* ssp's global step counts each worker's update; local SGD's counts averages */
    CHECK(compare_variables_as(&jobs[1], &jobs[0], "ssp s = 0 vs sync b = 0", "", 20, 40, 40) <=
          1e-5);
    CHECK(compare_variables_as(&jobs[2], &jobs[0], "local H = 1 vs sync b = 0", "local_sgd/global/",
                               20, 40, 20) <= 1e-5);
    /* top-k of every entry: the gradients as they were (sent as values and indices) */
    CHECK(compare_variables_as(&jobs[3], &jobs[0], "sync, top-k ratio 1 vs sync", "", 20, 40, 20) <=
          1e-5);
    for (int j = 0; j < 4; j++) job_stop(&jobs[j]);
}

/* DiLoCo where its answer is known: with --outer-lr 1 and --outer-momentum 0 the outer
 * Nesterov step is global -= mean(global - local), local SGD's average: 2 workers, SGD,
 * H = 4, 20 steps of the same batches, the ps's copies within 1e-5. With the default outer
 * step (lr 0.7, momentum 0.9) the copies differ: the outer optimizer is the one applied. */
static void test_diloco_outer_sgd_is_local_sgd(void) {
    const char *base[] = {"--model", "mlp", "--data",        "synthetic", "--optimizer",    "sgd",
                          "--steps", "20",  "--seed",        "3",         "--step-timeout", "60",
                          "--batch", "16",  "--local-steps", "4",         "--sync"};
    const char *tails[3][6] = {{"local", NULL},
                               {"diloco", "--outer-lr", "1", "--outer-momentum", "0", NULL},
                               {"diloco", NULL}};
    const char *names[3] = {"diloco_local", "diloco_sgd", "diloco_nesterov"};
    job_t jobs[3];
    for (int j = 0; j < 3; j++)
        job_start_with(&jobs[j], names[j], 2, base, sizeof base / sizeof *base, tails[j]);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    bool ok = true;
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 2; i++) ok &= job_wait(&jobs[j], i, deadline) == 0;
    CHECK(ok);
    for (int j = 0; !ok && j < 3; j++) dump_logs(&jobs[j]);
    /* 5 averages (the used count: the ps's 10 or the workers' own 20 or 40 local steps, as
     * their reports came in time: not checked) */
    CHECK(compare_variables_as(&jobs[1], &jobs[0], "diloco outer lr 1, momentum 0 vs local H = 4",
                               "", 20, -1, 5) <= 1e-5);
    CHECK(compare_variables_as(&jobs[2], &jobs[0], "diloco outer lr 0.7, Nesterov 0.9 vs local", "",
                               20, -1, 5) > 1e-3);
    for (int j = 0; j < 3; j++) job_stop(&jobs[j]);
}

/* DiLoCo's outer step starts from the model's initial x0: one worker, H = 1, outer lr 1/2,
 * momentum 0, one inner SGD step of rate lr: the ps's copy moves half way from x0 to
 * x0 - lr g, one SGD step of rate lr / 2 (async, --lr 0.025). Its copies started at zeros
 * (0.5 x0 - lr g / 2 here). */
static void test_diloco_starts_from_the_model(void) {
    const char *base[] = {"--model", "mlp", "--data", "synthetic", "--optimizer",    "sgd",
                          "--steps", "1",   "--seed", "3",         "--step-timeout", "60",
                          "--batch", "16",  "--sync"};
    const char *tails[2][12] = {{"diloco", "--outer-lr", "0.5", "--outer-momentum", "0",
                                 "--local-steps", "1", "--lr", "0.05", NULL},
                                {"async", "--lr", "0.025", NULL}};
    job_t jobs[2];
    for (int j = 0; j < 2; j++)
        job_start_with(&jobs[j], j ? "diloco_ref" : "diloco_x0", 1, base,
                       sizeof base / sizeof *base, tails[j]);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    bool ok = job_wait(&jobs[0], 0, deadline) == 0;
    ok &= job_wait(&jobs[1], 0, deadline) == 0;
    CHECK(ok);
    for (int j = 0; !ok && j < 2; j++) dump_logs(&jobs[j]);
    CHECK(compare_variables_as(&jobs[0], &jobs[1], "diloco (outer lr 1/2) vs SGD at lr / 2",
                               "local_sgd/global/", 1, -1, 1) <= 1e-5);
    for (int j = 0; j < 2; j++) job_stop(&jobs[j]);
}

/* Ring all-reduce where its answer is known: with SGD, 2 and 4 workers, 20 steps of the
 * same batches, the mean of the workers' gradients applied by each to its own copy is sync's
 * step with b = 0: the chief's copy (written to the ps at the end) within 1e-5 of sync's
 * variables on its ps. */
static void test_allreduce_equals_sync(void) {
    const char *base[] = {"--model", "mlp", "--data", "synthetic", "--optimizer",    "sgd",
                          "--steps", "20",  "--seed", "3",         "--step-timeout", "60",
                          "--batch", "16",  "--sync"};
    const char *tails[2][2] = {{"sync", NULL}, {"allreduce", NULL}};
    const char *names[4] = {"ar_sync2", "ar_ring2", "ar_sync4", "ar_ring4"};
    job_t jobs[4];
    for (int j = 0; j < 4; j++)
        job_start_with(&jobs[j], names[j], j < 2 ? 2 : 4, base, sizeof base / sizeof *base,
                       tails[j % 2]);
    double deadline = psg_test_now_sec() + (asan ? 300 : 120);
    bool ok = true;
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < jobs[j].nw; i++) ok &= job_wait(&jobs[j], i, deadline) == 0;
    CHECK(ok);
    for (int j = 0; !ok && j < 4; j++) dump_logs(&jobs[j]);
    CHECK(compare_variables_as(&jobs[1], &jobs[0], "allreduce vs sync b = 0, 2 workers",
                               "allreduce/model/", 20, -1, 20) <= 1e-5);
    CHECK(compare_variables_as(&jobs[3], &jobs[2], "allreduce vs sync b = 0, 4 workers",
                               "allreduce/model/", 20, -1, 20) <= 1e-5);
    /* each worker sent 2 (N - 1) / N of the model a step, in its ring's chunks */
    char *l = job_log(&jobs[3], 0);
    long long push = field(l, "{\"event\":\"done\"", "push_bytes_per_step"),
              model = field(l, "{\"event\":\"done\"", "model_push_bytes_per_step");
    printf(
        "  allreduce, 4 workers: %lld bytes pushed a step by a worker, 2 (N - 1) / N x the model "
        "%lld\n",
        push, model);
    CHECK(model > 0 && push >= model && push <= model + model / 20);
    free(l);
    for (int j = 0; j < 4; j++) job_stop(&jobs[j]);
}

/* SSP across processes: worker 1 is 200 ms slower a step, worker 0 may be at most s = 1 step
 * ahead. Without the ps's wait, worker 0 would finish its 20 steps while worker 1 is at its
 * second (staleness up to ~19); with it, every step of both reads within 1 step of the
 * slowest (staleness max exactly 1: the fast one did run ahead, and was held there), and
 * worker 0 is released each time worker 1 applies (both finish their 20 steps). */
static void test_ssp_holds_the_fast_worker(void) {
    const char *base[] = {"--model",     "mlp", "--data",         "synthetic",
                          "--optimizer", "sgd", "--steps",        "20",
                          "--seed",      "3",   "--step-timeout", "60",
                          "--batch",     "16",  "--sync",         "ssp",
                          "--staleness", "1",   "--straggler",    "worker=1,delay_ms=200"};
    const char *tail[] = {NULL};
    job_t job;
    job_start_with(&job, "ssp_straggler", 2, base, sizeof base / sizeof *base, tail);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    bool ok = job_wait(&job, 0, deadline) == 0;
    ok &= job_wait(&job, 1, deadline) == 0;
    CHECK(ok);
    if (!ok) dump_logs(&job);
    char *log0 = job_log(&job, 0);
    const char *done = "{\"event\":\"done\"";
    long long max = field(log0, done, "max"), used = field(log0, done, "gradients_used");
    double mean = field_f(log0, done, "mean");
    printf(
        "  ssp s = 1, worker 1 200 ms slower a step: staleness mean %.3f max %lld, %lld gradients\n",
        mean, max, used);
    CHECK(max == 1 && mean > 0 && used == 40);
    CHECK(strstr(log0, "\"per_worker\":[[20,0],[20,0]]") != NULL);
    free(log0);
    job_stop(&job);
}

/* The straggler's draws under local SGD (H = 4), 2 workers, 8 steps: worker 1 sleeps, before
 * its j-th step, the delay the documented hash gives (seed, worker 1, step j), step by step
 * as every strategy's j-th step does. Keyed by the local step, which local SGD keeps for H
 * steps, it slept one draw 4 times over and its stragglers cost as much as sync's. */
static void test_local_sgd_draws_a_delay_each_step(void) {
    char logdir[400];
    snprintf(logdir, sizeof logdir, "%s/local_straggler_logs", tmpdir);
    const char *spec = "worker=all,dist=lognormal,median_ms=2,sigma=1";
    const char *base[] = {"--model",     "mlp", "--data",   "synthetic", "--optimizer",    "sgd",
                          "--steps",     "8",   "--seed",   "5",         "--step-timeout", "60",
                          "--batch",     "16",  "--sync",   "local",     "--local-steps",  "4",
                          "--straggler", spec,  "--logdir", logdir};
    const char *tail[] = {NULL};
    job_t job;
    job_start_with(&job, "local_straggler", 2, base, sizeof base / sizeof *base, tail);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    bool ok = job_wait(&job, 0, deadline) == 0;
    ok &= job_wait(&job, 1, deadline) == 0;
    CHECK(ok);
    if (!ok) dump_logs(&job);
    char path[500];
    snprintf(path, sizeof path, "%s/metrics.worker1.jsonl", logdir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    psg_straggler_t *want = psg_straggler_new(5);
    PSG_ASSERT(want && psg_straggler_add(want, spec) == 0);
    char line[2048];
    int steps = 0, distinct = 0;
    double prev = -1, last_wall = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"event\":\"sync_step\"")) continue;
        double got = field_f(line, "", "straggler_ms"), w = psg_straggler_delay_ms(want, 1, steps);
        if (fabs(got - w) > 1e-3 * (1 + w)) {
            fprintf(stderr, "  worker 1's step %d slept %.3f ms, the draw for it is %.3f ms\n",
                    steps, got, w);
            CHECK(false);
        }
        distinct += got != prev;
        prev = got;
        /* the step's loss, when it ended, and the bytes it moved: none on a local step, the
         * model's difference out and the average in every 4th */
        double loss = field_f(line, "", "loss"), wall = field_f(line, "", "wall_sec"),
               push = field_f(line, "", "push_bytes"), pull = field_f(line, "", "pull_bytes");
        bool avg = steps % 4 == 3;
        if (!(loss > 0 && isfinite(loss) && wall >= last_wall && (push > 0) == avg &&
              (pull > 0) == avg)) {
            fprintf(stderr, "  worker 1's step %d: %s", steps, line);
            CHECK(false);
        }
        last_wall = wall;
        steps++;
    }
    if (f) fclose(f);
    printf("  local H = 4, worker 1: %d steps, %d distinct delays in a row, loss, wall time and "
           "bytes in each line\n",
           steps, distinct);
    CHECK(steps == 8 && distinct == 8);
    psg_straggler_destroy(&want);
    job_stop(&job);
}

/* Top-k's momentum on the worker (--compress-momentum), 2 workers, sync, 20 steps, where the
 * answer is known: at ratio 1 DGC's momentum correction is the momentum optimizer itself
 * (the workers' velocities average to the ps's accumulator; the ps runs SGD), and with its
 * masking every velocity is forgotten once sent, which is plain SGD; gradients under
 * --compress-min-size are sent whole, so a size above every variable is no compression;
 * folded, the ps runs plain SGD of rate lr / (1 - m): SGD of that rate (m = 0.5, so that
 * the rate is the same float as --lr 0.1). */
static void test_topk_momentum_known_answers(void) {
    /* 7 jobs of 3 processes at once: under ASan on 2 busy cores a first step took over the
     * 15 s a token wait gets of --step-timeout 20 */
    const char *base[] = {"--model", "mlp",    "--data", "synthetic",      "--steps",
                          "20",      "--seed", "3",      "--step-timeout", "60",
                          "--batch", "16",     "--sync", "sync",           "--optimizer"};
    const char *tails[7][10] = {
        {"momentum", NULL},
        {"momentum", "--compress", "topk", "--compress-ratio", "1", "--compress-momentum", "worker",
         NULL},
        {"sgd", NULL},
        {"momentum", "--compress", "topk", "--compress-ratio", "1", "--compress-momentum",
         "worker-masked", NULL},
        {"momentum", "--compress", "topk", "--compress-ratio", "0.01", "--compress-min-size",
         "1000000", NULL},
        {"momentum", "--momentum", "0.5", "--compress", "topk", "--compress-ratio", "1",
         "--compress-momentum", "folded", NULL},
        {"sgd", "--lr", "0.1", NULL}}; /* the mlp's lr 0.05 / (1 - 0.5): the same float */
    const char *names[7] = {"mom",        "mom_worker",     "sgd", "mom_masked", "mom_min_size",
                            "mom_folded", "sgd_folded_rate"};
    job_t jobs[7];
    for (int j = 0; j < 7; j++)
        job_start_with(&jobs[j], names[j], 2, base, sizeof base / sizeof *base, tails[j]);
    double deadline = psg_test_now_sec() + (asan ? 240 : 90);
    bool ok = true;
    for (int j = 0; j < 7; j++)
        for (int i = 0; i < 2; i++) ok &= job_wait(&jobs[j], i, deadline) == 0;
    CHECK(ok);
    for (int j = 0; !ok && j < 7; j++) dump_logs(&jobs[j]);
    /* against the job without the ps's Momentum slots */
    CHECK(compare_variables_as(&jobs[0], &jobs[1], "momentum vs top-k 1, momentum on the workers",
                               "", 20, 40, 20) <= 1e-5);
    CHECK(compare_variables_as(&jobs[3], &jobs[2], "top-k 1, masked momentum vs sgd", "", 20, 40,
                               20) <= 1e-5);
    CHECK(compare_variables_as(&jobs[4], &jobs[0], "top-k 1 %, all under the min size vs momentum",
                               "", 20, 40, 20) <= 1e-5);
    CHECK(compare_variables_as(&jobs[5], &jobs[6],
                               "top-k 1, momentum folded vs sgd at lr / (1 - m)", "", 20, 40,
                               20) <= 1e-5);
    for (int j = 0; j < 7; j++) job_stop(&jobs[j]);
}

/* Async with top-k at ratio 1 against async uncompressed (one worker: a fixed order), and
 * at 1 %: 20x fewer bytes pushed a step, as the chief reports. */
static void test_topk_ratio_one_is_uncompressed(void) {
    const char *base[] = {"--model", "mlp", "--data", "synthetic", "--optimizer",    "sgd",
                          "--steps", "20",  "--seed", "3",         "--step-timeout", "60",
                          "--batch", "16",  "--sync", "async"};
    const char *tails[3][5] = {{NULL},
                               {"--compress", "topk", "--compress-ratio", "1", NULL},
                               {"--compress", "topk", "--compress-ratio", "0.01", NULL}};
    const char *names[3] = {"async_dense", "async_topk1", "async_topk001"};
    job_t jobs[3];
    for (int j = 0; j < 3; j++)
        job_start_with(&jobs[j], names[j], 1, base, sizeof base / sizeof *base, tails[j]);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    bool ok = true;
    for (int j = 0; j < 3; j++) ok &= job_wait(&jobs[j], 0, deadline) == 0;
    CHECK(ok);
    for (int j = 0; !ok && j < 3; j++) dump_logs(&jobs[j]);
    CHECK(compare_variables_as(&jobs[1], &jobs[0], "async, top-k ratio 1 vs async", "", 20, 20,
                               20) <= 1e-5);
    char *dense = job_log(&jobs[0], 0), *sparse = job_log(&jobs[2], 0);
    long long full = field(dense, "{\"event\":\"done\"", "push_bytes_per_step"),
              sent = field(sparse, "{\"event\":\"done\"", "push_bytes_per_step");
    printf("  top-k 1%%: %lld bytes pushed a step against %lld (%.1fx fewer)\n", sent, full,
           sent > 0 ? (double)full / (double)sent : 0);
    CHECK(sent > 0 && full >= 20 * sent);
    free(dense);
    free(sparse);
    for (int j = 0; j < 3; j++) job_stop(&jobs[j]);
}

/* EASGD where its answer is known: one worker, tau = 1, alpha = 1/2, one SGD step of rate
 * lr: the center starts at the model's initial x0 and moves half way to x0 - lr g, which is
 * one SGD step of rate lr / 2 (async, one worker, --lr 0.025). */
static void test_easgd_center_moves_by_alpha(void) {
    const char *base[] = {"--model", "mlp", "--data", "synthetic", "--optimizer",    "sgd",
                          "--steps", "1",   "--seed", "3",         "--step-timeout", "60",
                          "--batch", "16",  "--sync"};
    const char *tails[2][8] = {
        {"easgd", "--elastic-alpha", "0.5", "--local-steps", "1", "--lr", "0.05", NULL},
        {"async", "--lr", "0.025", NULL}};
    job_t jobs[2];
    for (int j = 0; j < 2; j++)
        job_start_with(&jobs[j], j ? "easgd_ref" : "easgd", 1, base, sizeof base / sizeof *base,
                       tails[j]);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    bool ok = job_wait(&jobs[0], 0, deadline) == 0;
    ok &= job_wait(&jobs[1], 0, deadline) == 0;
    CHECK(ok);
    for (int j = 0; !ok && j < 2; j++) dump_logs(&jobs[j]);
    /* easgd's global step counts nothing (its steps are local) */
    CHECK(compare_variables_as(&jobs[0], &jobs[1], "easgd center (alpha 1/2) vs SGD at lr / 2",
                               "easgd/center/", 1, 1, 0) <= 1e-5);
    for (int j = 0; j < 2; j++) job_stop(&jobs[j]);
}

/* N = 2, b = 0, SGD, fixed data order: the variables after k steps equal
 * those of one worker of batch 2·B, read from the ps; and the same with
 * each worker's batch split over 2 CPU towers (B/2 a tower), whose mean
 * gradient is the worker's one gradient a variable. */
static void test_equivalence(void) {
    const char *common[] = {"--model", "mlp", "--data", "synthetic", "--optimizer",    "sgd",
                            "--steps", "4",   "--seed", "3",         "--step-timeout", "60"};
    const char *sync_args[32], *tower_args[32], *one_args[32];
    int n = 0;
    for (size_t k = 0; k < sizeof common / sizeof *common; k++)
        sync_args[n] = tower_args[n] = one_args[n] = common[k], n++;
    const char *s_tail[] = {"--batch", "16", "--sync", "sync", NULL, NULL, NULL};
    const char *t_tail[] = {"--batch", "16", "--sync", "sync", "--towers", "2", NULL};
    const char *o_tail[] = {"--batch", "32", "--sync", "async", NULL, NULL, NULL};
    for (int k = 0; k < 7; k++)
        sync_args[n + k] = s_tail[k], tower_args[n + k] = t_tail[k], one_args[n + k] = o_tail[k];
    job_t a, t, b;
    job_start(&a, "equiv_sync", 2);
    job_start(&t, "equiv_towers", 2);
    for (int i = 0; i < 2; i++) {
        job_spawn(&a, i, sync_args);
        job_spawn(&t, i, tower_args);
    }
    job_start(&b, "equiv_one", 1);
    job_spawn(&b, 0, one_args);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    int ra0 = job_wait(&a, 0, deadline), ra1 = job_wait(&a, 1, deadline),
        rt0 = job_wait(&t, 0, deadline), rt1 = job_wait(&t, 1, deadline),
        rb = job_wait(&b, 0, deadline);
    CHECK(ra0 == 0 && ra1 == 0 && rt0 == 0 && rt1 == 0 && rb == 0);
    if (ra0 || ra1 || rt0 || rt1 || rb) {
        dump_logs(&a);
        dump_logs(&t);
        dump_logs(&b);
    }
    char *lt = job_log(&t, 0), *la = job_log(&a, 0);
    CHECK(strstr(lt, "2 CPU towers") != NULL);
    /* a worker's towers pull each variable once a step, as one tower does (not twice) */
    long long pull_t = field(lt, "{\"event\":\"done\"", "pull_bytes_per_step"),
              pull_a = field(la, "{\"event\":\"done\"", "pull_bytes_per_step");
    printf("  bytes pulled a step: 2 towers %lld, 1 tower %lld\n", pull_t, pull_a);
    CHECK(pull_a > 0 && pull_t == pull_a);
    free(lt);
    free(la);
    CHECK(compare_variables(&a, &b, "2 workers x 1 tower") <= 1e-5);
    CHECK(compare_variables(&t, &b, "2 workers x 2 CPU towers") <= 1e-5);
    job_stop(&a);
    job_stop(&t);
    job_stop(&b);
}

/* N = 2, b = 1, worker 2 delayed 300 ms a step: all steps complete at the
 * others' pace, its gradients counted as dropped (by it and by the ps). */
static void test_backup_drops_the_straggler(void) {
    const char *args[] = {"--model",
                          "mlp",
                          "--data",
                          "synthetic",
                          "--steps",
                          "20",
                          "--batch",
                          "16",
                          "--sync",
                          "sync",
                          "--backup-workers",
                          "1",
                          "--straggler",
                          "worker=2,delay_ms=300",
                          "--step-timeout",
                          "60",
                          "--log-every",
                          "5",
                          NULL};
    job_t j;
    job_start(&j, "backup", 3);
    for (int i = 0; i < 3; i++) job_spawn(&j, i, args);
    double deadline = psg_test_now_sec() + (asan ? 240 : 60);
    int rc[3];
    for (int i = 0; i < 3; i++) rc[i] = job_wait(&j, i, deadline);
    CHECK(rc[0] == 0 && rc[1] == 0 && rc[2] == 0);
    char *l0 = job_log(&j, 0), *l1 = job_log(&j, 1), *l2 = job_log(&j, 2);
    const char *done = "{\"event\":\"done\"", *sum = "{\"event\":\"sync_summary\"";
    long long steps2 = field(l2, sum, "steps"), dropped2 = field(l2, sum, "gradients_dropped");
    CHECK(field(l0, done, "global_steps") == 20);
    /* Every global step uses exactly N = 2 gradients. The straggler's are
     * dropped once it runs behind; only its first step, when start-up skew
     * can leave the others just as late, may count. Then, probably, a worker that started
     * late made its last gradient for step 20, which the accumulators accepted
     * (counted used) and no take came for: 41 (once in a suite under load). */
    long long used0 = field(l0, sum, "gradients_used"), used1 = field(l1, sum, "gradients_used");
    long long used2 = field(l2, sum, "gradients_used");
    long long used = used0 + used1 + used2;
    CHECK(used >= 40 && used <= 40 + used2 && used2 <= 1 && used0 >= 19 && used1 >= 19);
    CHECK(steps2 >= 1 && dropped2 + used2 == steps2 && (dropped2 >= 1 || used2 == 1));
    CHECK(field(l0, done, "gradients_used") == used);
    char per[96];
    snprintf(per, sizeof per, "[%lld,%lld]]", used2, dropped2);
    CHECK(strstr(l0, "\"per_worker\":[[") && strstr(l0, per)); /* every worker's counts */
    CHECK(field(l0, done, "gradients_dropped") >= 1 || used2 == 1);
    double sps = field_f(l0, done, "steps_per_sec");
    printf("  backup: worker 2 ran %lld steps, %lld dropped; 20 global steps at %.1f steps/s "
           "(the straggler's pace would be < 3.4)\n",
           steps2, dropped2, sps);
    if (psg_test_failures) dump_logs(&j);
    free(l0);
    free(l1);
    free(l2);
    job_stop(&j);
}

/* Workers (b backups among them) train; worker `victim` is SIGKILLed
 * mid-run; worker `watched` fails within the step timeout with an error
 * that says what it waited for. */
static void dead_task_fails_in_time(const char *name, const char *sync, int workers, int b,
                                    int victim, int watched) {
    /* A live step must never reach the timeout, or the survivor fails before
     * the kill: CI runs two suites at once on 2 cores (the Inception test beside
     * this one stalled a healthy step 2 s), and AddressSanitizer slows it more. */
    const int timeout = asan ? 12 : 8;
    char ts[16], bs[16];
    snprintf(ts, sizeof ts, "%d", timeout);
    snprintf(bs, sizeof bs, "%d", b);
    /* the peer timeout (10 s, the default) above the waits: no loss is found, so nothing
     * follows the live workers; allreduce's ring would re-form without the dead one, so far
     * above its take's timeout for it */
    const char *pt = !strcmp(sync, "allreduce") ? "120" : "10";
    const char *args[] = {
        "--model",     "mlp", "--data",           "synthetic", "--steps",        "1000000",
        "--batch",     "16",  "--sync",           sync,        "--step-timeout", ts,
        "--log-every", "10",  "--backup-workers", bs,          "--peer-timeout", pt,
        NULL};
    job_t j;
    job_start(&j, name, workers);
    for (int i = 0; i < workers; i++) job_spawn(&j, i, args);
    bool running = job_log_wait(&j, victim, "step 20 ", psg_test_now_sec() + (asan ? 120 : 30));
    CHECK(running);
    kill(j.pids[victim], SIGKILL);
    double t0 = psg_test_now_sec();
    job_wait(&j, victim, t0 + 5);
    int rc = job_wait(&j, watched, t0 + 3 * timeout + 4);
    double took = psg_test_now_sec() - t0;
    char *l = job_log(&j, watched);
    CHECK(rc == 1);
    bool clear = strstr(l, "got no token for a step after") || strstr(l, "gradients for step");
    if (!strcmp(sync, "allreduce")) {
        /* the ring's mailbox names the worker (by rank) that did not send; or the first
         * survivor to fail names the dead one's lost connection (a send to a peer down for
         * the peer timeout fails then), and the others the survivors that stopped after it */
        char who[96], lost[96];
        snprintf(who, sizeof who, "worker%d sent nothing for step", victim);
        snprintf(lost, sizeof lost, "task /job:worker/replica:0/task:%d: ", victim);
        clear = strstr(l, who) != NULL;
        for (int i = 0; i < workers && !clear; i++) {
            char *li = i == victim ? NULL : job_log(&j, i);
            const char *at = li ? strstr(li, lost) : NULL;
            clear = at && strstr(at, "lost the connection to the peer");
            free(li);
        }
    }
    CHECK(clear);
    CHECK(took < 3 * timeout + 4); /* job_wait's deadline: the survivor did not hang */
    const char *e = strstr(l, "psgraph train: ");
    while (e && strstr(e + 1, "psgraph train: ")) e = strstr(e + 1, "psgraph train: ");
    printf("  %s (b = %d): worker %d failed %.1f s after worker %d was killed (timeout %d s): "
           "%.400s\n",
           name, b, watched, took, victim, timeout, e ? e : "?");
    if (psg_test_failures) dump_logs(&j);
    free(l);
    job_stop(&j);
}

/* b = 0: worker 1 dies; the chief fails in time. */
static void test_dead_worker_fails_in_time(void) {
    dead_task_fails_in_time("dead_worker", "sync", 2, 0, 1, 0);
}

/* b = 1: the chief dies (no recovery yet): the others fail in time, not hang. */
static void test_dead_chief_fails_in_time(void) {
    dead_task_fails_in_time("dead_chief", "sync", 3, 1, 0, 1);
}

/* Ring all-reduce, 3 workers: worker 1 dies; worker 2, whose mailboxes worker 1 fills,
 * fails in time naming it. */
static void test_allreduce_dead_worker_fails_in_time(void) {
    dead_task_fails_in_time("allreduce_dead", "allreduce", 3, 0, 1, 2);
}

/* N = 3 of 3: worker 2 straggles past the chief's take, whose short --step-timeout ends
 * the chief's runner; the runner closes the token queue with an error (abort_op), so
 * worker 1, whose own token wait is minutes (--step-timeout 300), fails now, naming the
 * chief's runner, not at its timeout ("got no token"). (The chief's own step names the
 * runner's error when the runner failed first; its own token wait is as long as the take.) */
static void test_runner_failure_ends_the_workers_waits(void) {
    const char *chief_timeout = asan ? "16" : "8";
    const char *args[3][20] = {{0}};
    const char *base[] = {"--model",       "mlp",
                          "--data",        "synthetic",
                          "--steps",       "1000",
                          "--batch",       "16",
                          "--sync",        "sync",
                          "--log-every",   "10",
                          "--straggler",   "worker=2,delay_ms=1000000",
                          "--step-timeout"};
    const char *timeouts[3] = {chief_timeout, "300", "300"};
    for (int i = 0; i < 3; i++) {
        size_t n = sizeof base / sizeof *base;
        memcpy(args[i], base, sizeof base);
        args[i][n] = timeouts[i];
        args[i][n + 1] = NULL;
    }
    job_t j;
    job_start(&j, "runner_abort", 3);
    for (int i = 0; i < 3; i++) job_spawn(&j, i, args[i]);
    /* deadlines past worker 1's own token wait (225 s): a worker still waiting is killed and
     * its log says it waited */
    double deadline = psg_test_now_sec() + 280;
    int rc0 = job_wait(&j, 0, deadline), rc1 = job_wait(&j, 1, deadline);
    char *l0 = job_log(&j, 0), *l1 = job_log(&j, 1);
    CHECK(rc0 == 1 && rc1 == 1);
    CHECK(strstr(l0, "sync replicas: the chief's runner failed at its step 1 ") != NULL);
    CHECK(strstr(l0, " of 3 gradients for step") != NULL); /* what its take waited for */
    CHECK(strstr(l1, "the chief's runner failed (the chief's output names its error): no more "
                     "tokens") != NULL);
    CHECK(strstr(l1, "got no token") == NULL);
    const char *e = strstr(l1, "psgraph train: step");
    printf("  runner abort: worker 1 (token wait 225 s) failed: %.300s\n", e ? e : "?");
    if (psg_test_failures) dump_logs(&j);
    free(l0);
    free(l1);
    job_stop(&j);
}

/* b = 1: worker 2 is SIGKILLed mid-run; the others finish, and the mlp
 * reaches the accuracy bar (Fashion-MNIST). */
static void test_killed_worker_does_not_stop_training(void) {
    if (asan) {
        printf("  skip: 3 mlp trainings on Fashion-MNIST are too slow under AddressSanitizer "
               "(runs in the release suite)\n");
        return;
    }
    if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("  skip: no Fashion-MNIST in /usr/share/datasets/fashion-mnist\n");
        return;
    }
    const char *args[] = {"--model",
                          "mlp",
                          "--epochs",
                          "3",
                          "--optimizer",
                          "adam",
                          "--lr",
                          "0.001",
                          "--batch",
                          "64",
                          "--sync",
                          "sync",
                          "--backup-workers",
                          "1",
                          "--step-timeout",
                          "60",
                          "--log-every",
                          "20",
                          NULL};
    job_t j;
    job_start(&j, "kill", 3);
    double t0 = psg_test_now_sec();
    for (int i = 0; i < 3; i++) job_spawn(&j, i, args);
    bool running = job_log_wait(&j, 2, "step 200 ", psg_test_now_sec() + 60);
    CHECK(running);
    kill(j.pids[2], SIGKILL);
    double tk = psg_test_now_sec();
    job_wait(&j, 2, tk + 5);
    int rc0 = job_wait(&j, 0, tk + 120), rc1 = job_wait(&j, 1, tk + 120);
    CHECK(rc0 == 0 && rc1 == 0);
    char *l0 = job_log(&j, 0);
    const char *done = "{\"event\":\"done\"";
    double acc = field_f(l0, done, "test_accuracy");
    long long gsteps = field(l0, done, "global_steps");
    printf("  kill (b = 1): worker 2 killed at %.1f s; %lld global steps, test accuracy %.4f, "
           "done at %.1f s\n",
           tk - t0, gsteps, acc, psg_test_now_sec() - t0);
    CHECK(gsteps > 600);
    CHECK(acc >= 0.84);
    CHECK(strstr(l0, ",null]") != NULL); /* worker 2 never reported its counts */
    if (psg_test_failures) dump_logs(&j);
    free(l0);
    job_stop(&j);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_sync_dist PATH/TO/psgraph [asan]\n");
        return 2;
    }
    psgraph_exe = argv[1];
    asan = argc > 2 && !strcmp(argv[2], "asan");
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/psg_test_sync_dist_XXXXXX");
    PSG_ASSERT(mkdtemp(tmpdir));
    /* PSG_TEST_ONLY=NAME runs the tests whose name holds NAME (to repeat one) */
    const char *only = getenv("PSG_TEST_ONLY");
#define RUN_IF(fn)                                                                                 \
    do {                                                                                           \
        if (!only || strstr(#fn, only)) RUN_TEST(fn);                                              \
    } while (0)
    RUN_IF(test_equivalence);
    RUN_IF(test_strategies_equal_sync);
    RUN_IF(test_diloco_outer_sgd_is_local_sgd);
    RUN_IF(test_diloco_starts_from_the_model);
    RUN_IF(test_allreduce_equals_sync);
    RUN_IF(test_easgd_center_moves_by_alpha);
    RUN_IF(test_topk_ratio_one_is_uncompressed);
    RUN_IF(test_topk_momentum_known_answers);
    RUN_IF(test_ssp_holds_the_fast_worker);
    RUN_IF(test_local_sgd_draws_a_delay_each_step);
    RUN_IF(test_backup_drops_the_straggler);
    RUN_IF(test_dead_worker_fails_in_time);
    RUN_IF(test_dead_chief_fails_in_time);
    RUN_IF(test_runner_failure_ends_the_workers_waits);
    RUN_IF(test_allreduce_dead_worker_fails_in_time);
    RUN_IF(test_killed_worker_does_not_stop_training);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
    return psg_test_summary();
}
