/* `psgraph compare`: runs several strategies (sync/strategies.c) on the same workload,
 * local cluster and straggler model, each repeat with its seed, the strategies
 * interleaved (repeat 0 of each, then repeat 1 of each, ...; each run a `psgraph launch
 * ... -- psgraph train` with its own --logdir), then prints one JSON line per run (time to
 * a target test accuracy, pace, bytes per step, staleness, final accuracy, gradients
 * dropped, the machine's load and the CPU others took) and one per strategy over its
 * repeats (cli/compare_stats.c), and draws the curves into one PNG with gnuplot. Not a
 * scheduler: the runs share this machine one at a time. */
#include "cli/commands.h"
#include "cli/compare_curves.h"
#include "cli/compare_stats.h"
#include "cli/options.h"
#include "core/json.h"
#include "psgraph/error.h"
#include "psgraph/sync_replicas.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_STRATEGIES PSG_CLI_LIST_MAX
#define MAX_REPEATS 64

static const char *const default_strategies[] = {
    "async", "sync", "sync --backup-workers 1", "ssp --staleness 2", "local --local-steps 4",
};

typedef psg_compare_args_t compare_opts_t; /* cli/options.h */

/* What a strategy's run gave, from its metrics.jsonl. */
typedef struct {
    double time_to_target, steps_to_target, final_accuracy, steps_per_sec, push, pull, wall;
    double stale_min, stale_mean, stale_max, dropped, global_steps, chief_steps;
    int evals, rc, repeat;
    /* local SGD, DiLoCo: the rounds of the averages (every 0: none), and the evaluations of
     * the chief's own copy between them (the epochs' ones off the rounds), left out of the
     * time to the target: they are one worker's model, not the average */
    long long avg_every, avg_after;
    int evals_between;
    char sync[32];
    long long seed;
    /* the machine during the run, sampled every 0.25 s: the mean number of runnable tasks
     * (the load, as it is while the run runs) and the mean 1-minute load average (which lags
     * it by up to a minute); the CPU time this run's processes took, the CPU time every
     * other process took, the hypervisor's steal */
    double load, load1, cpu_sec, others_cpu_sec, steal_sec;
    /* the mean runnable tasks not of this run (load less its own threads runnable): what
     * flags it, not the load, whose own part differs by strategy (async's workers never
     * wait, local SGD's do) */
    double others_load;
    bool flagged; /* its others' load differs from the other runs' median by the margin */
} result_t;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: psgraph compare [options] [-- more psgraph train options for every strategy]\n"
        "       psgraph compare --script FILE.py [options] [-- the script's arguments]\n"
        "  --strategy 'NAME [OPTIONS]'  a strategy and its options, as psgraph train's --sync\n"
        "                      NAME OPTIONS (repeatable; --variant, its older name, is the same;\n"
        "                      default: async; sync; sync --backup-workers 1; ssp --staleness 2;\n"
        "                      local --local-steps 4)\n"
        "  --model M           (default mlp)      --data D (default: the model's)\n"
        "  --ps P --workers W  the local cluster of every run (default 1 ps + 4 workers)\n"
        "  --launch-arg A      one more psgraph launch option for every run (repeatable), e.g.\n"
        "                      --launch-arg --ssh --launch-arg --hosts-file --launch-arg F: the\n"
        "                      cluster on hosts whose links are capped (bench/compare_hosts.sh)\n"
        "  --straggler SPEC    the straggler model of every run (default\n"
        "                      worker=all,dist=lognormal,median_ms=20,sigma=1; 'none': no delay)\n"
        "  --target A          the test accuracy whose time is reported (default 0.85);\n"
        "                      --target-top1 A the same (inception3's top-1 of the moving\n"
        "                      average, docs/inception3.md)\n"
        "  --epochs E          (default 6)    --eval-every N  the chief's steps between\n"
        "                      evaluations (default 20)    --seed S (default 1)  --batch B\n"
        "  --repeats N         runs of each strategy, interleaved round-robin (default 1)\n"
        "  --seeds S1,S2,...   the seed of each repeat (default: --seed, --seed + 1, ...)\n"
        "  --load-margin L     flag a run whose others' load (runnable tasks not of the run,\n"
        "                      its mean) differs from the other runs' median by more than\n"
        "                      L x max(that median, 1) (default 0.25)\n"
        "  --outdir DIR        each run's logdir and log under DIR (default ./compare)\n"
        "  --png FILE          the plot (default DIR/compare.png; needs gnuplot)\n"
        "  --script FILE.py    every worker runs python3 FILE.py instead of psgraph train,\n"
        "                      its strategy in $PSGRAPH_STRATEGY (psgraph.train.Strategy.\n"
        "                      from_env()), its stragglers in $PSGRAPH_STRAGGLERS, its logdir\n"
        "                      (metrics.jsonl) in $PSGRAPH_LOGDIR, --seed, --epochs and\n"
        "                      --eval-every in $PSGRAPH_SEED, $PSGRAPH_EPOCHS and\n"
        "                      $PSGRAPH_EVAL_EVERY (docs/python.md)\n"
        "  --python P          the script's interpreter (default python3, found on PATH)\n");
}

/* The train options after "--" as every run's psgraph train will read them, before anything
 * starts: an unknown one, a value out of range, one of another model's. */
static int check_train_options(const compare_opts_t *o) {
    char *argv[PSG_COMPARE_MAX_EXTRA + 1] = {"psgraph"};
    for (int k = 0; k < o->n_extra; k++) argv[k + 1] = (char *)o->extra[k];
    psg_train_args_t *t = calloc(1, sizeof *t);
    if (!t) return psg_error_set("out of memory");
    int rc = psg_cli_parse(PSG_CLI_TRAIN, o->n_extra + 1, argv, 1, t, NULL);
    if (rc == 1) rc = psg_error_set("--help is not a train option for every run");
    if (rc == 0)
        rc = psg_cli_check_scope(PSG_CLI_TRAIN, o->n_extra + 1, argv, 1, o->model,
                                 o->data ? o->data : t->c.data);
    free(t);
    return rc < 0 ? psg_error_wrap("after --, the train options of every run") : 0;
}

static int parse(int argc, char **argv, compare_opts_t *o) {
    *o = (compare_opts_t){.model = "mlp",
                          .straggler = "worker=all,dist=lognormal,median_ms=20,sigma=1",
                          .outdir = "compare",
                          .python = "python3",
                          .epochs = "6",
                          .eval_every = "20",
                          .seed = "1",
                          .ps = 1,
                          .workers = 4,
                          .repeats = 0,
                          .load_margin = 0.25,
                          .target = 0.85};
    int rest;
    int rc = psg_cli_parse(PSG_CLI_COMPARE, argc, argv, 1, o, &rest);
    if (rc) return rc;
    for (int i = rest; i < argc && o->n_extra < PSG_COMPARE_MAX_EXTRA; i++)
        o->extra[o->n_extra++] = argv[i];
    for (int k = 0; k < o->launch.n; k++) {
        size_t len = strlen(o->launch_text);
        snprintf(o->launch_text + len, sizeof o->launch_text - len, "%s%s", len ? " " : "",
                 o->launch.v[k]);
        for (char *q = o->launch_text + len; *q; q++) /* a JSON string as is */
            if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '_';
    }
    if (o->ps < 1) return psg_error_set("--ps and --workers must be >= 1");
    if (o->script && access(o->script, R_OK) < 0)
        return psg_error_set("--script %s: %s", o->script, strerror(errno));
    if (o->script) o->model = o->script; /* what the JSON lines and the plot name */
    if (o->strategies.n == 0)
        for (size_t k = 0; k < sizeof default_strategies / sizeof *default_strategies; k++)
            o->strategies.v[o->strategies.n++] = default_strategies[k];
    if (o->seeds) {
        int v[MAX_REPEATS], n = psg_cli_counts(o->seeds, v, MAX_REPEATS, 0, 2147483647);
        if (n < 1)
            return psg_error_set("--seeds '%s': not a list of 1 to %d seeds (0 to 2147483647) "
                                 "separated by commas",
                                 o->seeds, MAX_REPEATS);
        if (o->repeats && o->repeats != n)
            return psg_error_set("--repeats %d but --seeds '%s' gives %d seeds", o->repeats,
                                 o->seeds, n);
        o->repeats = n;
        for (int k = 0; k < n; k++) o->seed_of[k] = v[k];
    } else {
        if (!o->repeats) o->repeats = 1;
        if (o->repeats > MAX_REPEATS)
            return psg_error_set("--repeats %d: at most %d", o->repeats, MAX_REPEATS);
        for (int k = 0; k < o->repeats; k++) o->seed_of[k] = atoll(o->seed) + k;
    }
    for (int i = 0; i < o->strategies.n; i++) /* every one before anything starts */
        if (psg_sync_spec_check(o->strategies.v[i]) < 0)
            return psg_error_wrap("--strategy '%s'", o->strategies.v[i]);
    return o->script ? 0 : check_train_options(o);
}

/* Waits for the run pid, sampling the machine's load every 0.25 s meanwhile, into r's
 * load, others_load, cpu_sec, others_cpu_sec and steal_sec (-1 where /proc cannot say). Returns its
 * exit code (or -1). */
static int wait_measured(pid_t pid, result_t *r) {
    psg_machine_sample_t m0, m1, now;
    bool have = psg_machine_sample(&m0) == 0;
    double load_sum = 0, load1_sum = 0, own_sum = 0;
    int samples = 0, st = 0;
    struct rusage ru;
    for (;;) {
        pid_t got = wait4(pid, &st, WNOHANG, &ru);
        if (got < 0 && errno != EINTR) return -1;
        if (got == pid) break;
        int own = have ? psg_tree_runnable(pid) : -1;
        if (own >= 0 && psg_machine_sample(&now) == 0)
            load_sum += now.runnable, load1_sum += now.load1, own_sum += own, samples++;
        nanosleep(&(struct timespec){.tv_nsec = 250000000}, NULL);
    }
    /* wait4's usage is the run's: launch and every process it waited for */
    r->cpu_sec = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    if (have && psg_machine_sample(&m1) == 0) {
        r->load = samples ? load_sum / samples : m1.runnable;
        r->load1 = samples ? load1_sum / samples : m1.load1;
        /* the two counts are read a moment apart: never below 0 */
        r->others_load = samples ? fmax(0, (load_sum - own_sum) / samples) : -1;
        r->others_cpu_sec = m1.busy_sec - m0.busy_sec - r->cpu_sec;
        if (r->others_cpu_sec < 0) r->others_cpu_sec = 0; /* the clocks' ticks differ */
        r->steal_sec = m1.steal_sec - m0.steal_sec;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs self argv, its output into log, the environment of a --script run when o is given;
 * waits for it (wait_measured). Returns its exit code (or -1). */
static int spawn_run(const char *self, const char **argv, const char *log, const compare_opts_t *o,
                     const char *strategy, const char *dir, const char *seed, result_t *r);

/* The environment of a --script run's workers (the launcher passes its own on to the
 * tasks it starts here): what `psgraph train` would get as flags. */
static void script_env(const compare_opts_t *o, const char *strategy, const char *dir,
                       const char *seed) {
    setenv("PSGRAPH_STRATEGY", strategy, 1);
    setenv("PSGRAPH_STRAGGLERS", strcmp(o->straggler, "none") ? o->straggler : "", 1);
    setenv("PSGRAPH_LOGDIR", dir, 1);
    setenv("PSGRAPH_SEED", seed, 1);
    setenv("PSGRAPH_EPOCHS", o->epochs, 1);
    setenv("PSGRAPH_EVAL_EVERY", o->eval_every, 1);
    if (o->batch) setenv("PSGRAPH_BATCH", o->batch, 1);
}

/* The run of one strategy: psgraph launch ... -- psgraph train ... --logdir dir (or, with
 * --script, python3 FILE.py ARGS with script_env), its output into dir/run.log. Returns the
 * launch's exit code (or -1). */
static int run_strategy(const compare_opts_t *o, const char *self, const char *strategy,
                        const char *dir, result_t *r) {
    char spec[512], ps[16], workers[16], log[4200], seed[24];
    snprintf(seed, sizeof seed, "%lld", r->seed);
    snprintf(spec, sizeof spec, "%s", strategy);
    snprintf(ps, sizeof ps, "%d", o->ps);
    snprintf(workers, sizeof workers, "%d", o->workers);
    snprintf(log, sizeof log, "%s/run.log", dir);
    const char *argv[200] = {self, "launch"};
    int n = 2;
    for (int k = 0; k < o->launch.n; k++) argv[n++] = o->launch.v[k];
    if (o->script) {
        const char *py[] = {"--ps", ps, "--workers", workers, "--", o->python, o->script};
        for (size_t k = 0; k < sizeof py / sizeof *py; k++) argv[n++] = py[k];
        for (int k = 0; k < o->n_extra && n < 158; k++) argv[n++] = o->extra[k];
        argv[n] = NULL;
        return spawn_run(self, argv, log, o, strategy, dir, seed, r);
    }
    const char *fixed[] = {
        "--ps",    ps,         "--workers", workers,       "--",           self,          "train",
        "--model", o->model,   "--epochs",  o->epochs,     "--eval-every", o->eval_every, "--seed",
        seed,      "--logdir", dir,         "--log-every", "1000000"};
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++) argv[n++] = fixed[k];
    if (o->data) argv[n++] = "--data", argv[n++] = o->data;
    argv[n++] = "--sync";
    for (char *save = NULL, *w = strtok_r(spec, " ", &save); w && n < 120;
         w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    if (strcmp(o->straggler, "none")) argv[n++] = "--straggler", argv[n++] = o->straggler;
    if (o->batch) argv[n++] = "--batch", argv[n++] = o->batch;
    for (int k = 0; k < o->n_extra && n < 158; k++) argv[n++] = o->extra[k];
    argv[n] = NULL;
    return spawn_run(self, argv, log, NULL, strategy, dir, seed, r);
}

static int spawn_run(const char *self, const char **argv, const char *log, const compare_opts_t *o,
                     const char *strategy, const char *dir, const char *seed, result_t *r) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        if (o) script_env(o, strategy, dir, seed);
        execv(self, (char *const *)argv);
        _exit(127);
    }
    return wait_measured(pid, r);
}

static double num_or(const psg_json_t *j, const char *key, double dflt) {
    const psg_json_t *v = j ? psg_json_get(j, key) : NULL;
    return v && v->type == PSG_JSON_NUMBER ? v->number : dflt;
}

/* One line of metrics.jsonl into r (and the eval points into dat). */
static void read_event(const psg_json_t *j, double target, result_t *r, FILE *dat) {
    const psg_json_t *ev = psg_json_get(j, "event");
    if (!ev || ev->type != PSG_JSON_STRING) return;
    if (!strcmp(ev->string, "eval")) {
        double step = num_or(j, "step", -1), acc = num_or(j, "test_accuracy", -1),
               wall = num_or(j, "wall_sec", -1);
        if (step < 0 || acc < 0 || wall < 0) return;
        fprintf(dat, "%.3f %.0f %.6f\n", wall, step, acc);
        r->evals++;
        r->final_accuracy = acc;
        if (!psg_compare_averaged_at(step, r->avg_every, r->avg_after)) {
            r->evals_between++;
            return;
        }
        if (acc >= target && r->time_to_target < 0) {
            r->time_to_target = wall;
            r->steps_to_target = step;
        }
    } else if (!strcmp(ev->string, "done")) {
        const psg_json_t *s = psg_json_get(j, "sync"), *st = psg_json_get(j, "staleness");
        if (s && s->type == PSG_JSON_STRING) snprintf(r->sync, sizeof r->sync, "%s", s->string);
        r->final_accuracy = num_or(j, "test_accuracy", r->final_accuracy);
        r->steps_per_sec = num_or(j, "steps_per_sec", -1);
        r->global_steps = num_or(j, "global_steps", -1);
        r->chief_steps = num_or(j, "steps", -1);
        r->push = num_or(j, "push_bytes_per_step", -1);
        r->pull = num_or(j, "pull_bytes_per_step", -1);
        r->dropped = num_or(j, "gradients_dropped", -1);
        r->wall = num_or(j, "wall_sec", -1);
        r->stale_min = num_or(st, "min", -1);
        r->stale_mean = num_or(st, "mean", -1);
        r->stale_max = num_or(st, "max", -1);
    }
}

/* dir/metrics.jsonl into r, the eval points into dir/eval.dat. */
static int read_metrics(const char *dir, double target, result_t *r) {
    char path[4200], dat[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(dat, sizeof dat, "%s/eval.dat", dir);
    FILE *in = fopen(path, "r"), *out = fopen(dat, "w");
    if (!in || !out) {
        if (in) fclose(in);
        if (out) fclose(out);
        return psg_error_set("%s: %s", in ? dat : path, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        psg_json_t *j = psg_json_parse(line);
        if (j) read_event(j, target, r, out);
        psg_json_free(j);
    }
    free(line);
    fclose(in);
    fclose(out);
    return 0;
}

/* The rounds of a strategy spec that averages workers' own copies (local, diloco:
 * --local-steps H, --local-after A) into r's avg_every and avg_after; 0 for the rest. */
static void averaging_rounds(const char *spec, result_t *r) {
    char words[512];
    snprintf(words, sizeof words, "%s", spec);
    char *save = NULL, *name = strtok_r(words, " ", &save);
    r->avg_every = r->avg_after = 0;
    if (!name || (strcmp(name, "local") && strcmp(name, "diloco"))) return;
    psg_sync_options_t opt;
    psg_sync_options_defaults(&opt);
    for (char *flag = strtok_r(NULL, " ", &save), *value; flag; flag = strtok_r(NULL, " ", &save))
        if ((value = strtok_r(NULL, " ", &save)))
            (void)psg_sync_option_parse(&opt, flag, value); /* checked before the runs */
    r->avg_every = opt.local_steps;
    r->avg_after = opt.local_after;
}

/* -1 as JSON's null. */
static const char *jnum(char *buf, size_t n, double v, const char *fmt) {
    if (v < 0) return "null";
    snprintf(buf, n, fmt, v);
    return buf;
}

static double chief_pace(const result_t *r);

static void print_result(const char *strategy, const compare_opts_t *o, const result_t *r) {
    char b[18][32];
    printf(
        "{\"compare\":\"%s\",\"sync\":\"%s\",\"exit\":%d,\"target\":%.4f,\"time_to_target_sec\":%s,"
        "\"steps_to_target\":%s,\"steps_per_sec\":%s,\"global_steps_per_sec\":%s,\"global_steps\":%s,\"push_bytes_per_step\":%s,"
        "\"pull_bytes_per_step\":%s,\"staleness\":{\"min\":%s,\"mean\":%s,\"max\":%s},"
        "\"final_accuracy\":%s,\"gradients_dropped\":%s,\"evaluations\":%d,"
        "\"evaluations_between_averages\":%d,\"wall_sec\":%s,"
        "\"ps\":%d,\"workers\":%d,\"model\":\"%s\",\"straggler\":\"%s\",\"launch_args\":\"%s\","
        "\"repeat\":%d,\"seed\":%lld,\"load\":%s,\"others_load\":%s,\"load1\":%s,\"cpu_sec\":%.2f,"
        "\"others_cpu_sec\":%s,\"steal_sec\":%s}\n",
        strategy, r->sync, r->rc, o->target, jnum(b[0], 32, r->time_to_target, "%.3f"),
        jnum(b[1], 32, r->steps_to_target, "%.0f"), jnum(b[12], 32, chief_pace(r), "%.3f"),
        jnum(b[2], 32, r->steps_per_sec, "%.3f"), jnum(b[3], 32, r->global_steps, "%.0f"),
        jnum(b[4], 32, r->push, "%.0f"), jnum(b[5], 32, r->pull, "%.0f"),
        jnum(b[6], 32, r->stale_min, "%.0f"), jnum(b[7], 32, r->stale_mean, "%.4f"),
        jnum(b[8], 32, r->stale_max, "%.0f"), jnum(b[9], 32, r->final_accuracy, "%.4f"),
        jnum(b[10], 32, r->dropped, "%.0f"), r->evals, r->evals_between,
        jnum(b[11], 32, r->wall, "%.3f"), o->ps, o->workers, o->model, o->straggler, o->launch_text,
        r->repeat, r->seed, jnum(b[13], 32, r->load, "%.2f"),
        jnum(b[17], 32, r->others_load, "%.2f"), jnum(b[16], 32, r->load1, "%.2f"), r->cpu_sec,
        jnum(b[14], 32, r->others_cpu_sec, "%.2f"), jnum(b[15], 32, r->steal_sec, "%.2f"));
    fflush(stdout);
}

/* The chief's own steps a second of run r (-1: unknown). */
static double chief_pace(const result_t *r) {
    return r->chief_steps > 0 && r->wall > 0 ? r->chief_steps / r->wall : -1;
}

/* One line for strategy i over its n repeats rs[0..n): time to the target, final accuracy
 * and the chief's steps/s (mean, min, max, 95 % interval over the runs that measured it),
 * the load, and the runs flagged for their load. */
static void print_summary(const char *strategy, const compare_opts_t *o, const result_t *rs,
                          int n) {
    double x[3][MAX_REPEATS], load[MAX_REPEATS], others[MAX_REPEATS];
    int reached = 0, ok = 0;
    char flagged[MAX_REPEATS * 64] = "", part[5][320];
    size_t fl = 0;
    for (int k = 0; k < n; k++) {
        const result_t *r = &rs[k];
        x[0][k] = r->rc == 0 ? r->time_to_target : -1;
        x[1][k] = r->rc == 0 ? r->final_accuracy : -1;
        x[2][k] = r->rc == 0 ? chief_pace(r) : -1;
        load[k] = r->load;
        others[k] = r->others_load;
        reached += r->rc == 0 && r->time_to_target >= 0;
        ok += r->rc == 0;
        if (r->flagged)
            fl += (size_t)snprintf(flagged + fl, sizeof flagged - fl,
                                   "%s{\"repeat\":%d,\"seed\":%lld,\"others_load\":%.2f}",
                                   fl ? "," : "", r->repeat, r->seed, r->others_load);
    }
    const char *keys[3] = {"time_to_target_sec", "final_accuracy", "steps_per_sec"},
               *fmts[3] = {"%.3f", "%.4f", "%.3f"};
    for (int m = 0; m < 3; m++) {
        psg_compare_stat_t st = psg_compare_stat(x[m], n);
        psg_compare_stat_json(part[m], sizeof part[m], keys[m], &st, fmts[m]);
    }
    psg_compare_stat_t ls = psg_compare_stat(load, n);
    psg_compare_stat_json(part[3], sizeof part[3], "load", &ls, "%.2f");
    psg_compare_stat_t os = psg_compare_stat(others, n);
    psg_compare_stat_json(part[4], sizeof part[4], "others_load", &os, "%.2f");
    printf("{\"compare\":\"%s\",\"summary\":true,\"runs\":%d,\"exit_0\":%d,\"reached_target\":%d,"
           "\"target\":%.4f,%s,%s,%s,%s,%s,\"flagged\":[%s],\"load_margin\":%.2f,\"model\":\"%s\","
           "\"ps\":%d,\"workers\":%d}\n",
           strategy, n, ok, reached, o->target, part[0], part[1], part[2], part[3], part[4],
           flagged, o->load_margin, o->model, o->ps, o->workers);
    fflush(stdout);
}

int psg_cmd_compare(int argc, char **argv) {
    compare_opts_t o;
    int prc = parse(argc, argv, &o);
    if (prc == 1) usage(stdout);
    if (prc < 0) fprintf(stderr, "psgraph compare: %s\n", psg_error_message());
    if (prc == -2) usage(stderr);
    if (prc) return prc == 1 ? 0 : 2;
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0 || (mkdir(o.outdir, 0755) < 0 && errno != EEXIST)) {
        fprintf(stderr, "psgraph compare: %s: %s\n", sl <= 0 ? "/proc/self/exe" : o.outdir,
                strerror(errno));
        return 1;
    }
    self[sl] = 0;
    static char dirs[MAX_STRATEGIES][MAX_REPEATS][4096];
    static result_t res[MAX_STRATEGIES][MAX_REPEATS];
    int worst = 0, nv = o.strategies.n, nr = o.repeats;
    for (int k = 0; k < nr; k++) /* round-robin: repeat k of every strategy, then k + 1 */
        for (int i = 0; i < nv; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s", o.strategies.v[i]);
            for (char *c = name; *c; c++)
                if (*c == ' ' || *c == '/') *c = '_';
            if (nr == 1)
                snprintf(dirs[i][k], sizeof dirs[i][k], "%s/%d-%s", o.outdir, i, name);
            else
                snprintf(dirs[i][k], sizeof dirs[i][k], "%s/%d-%s/r%d", o.outdir, i, name, k);
            char cmd[4200];
            snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dirs[i][k], dirs[i][k]);
            if (system(cmd) != 0) { /* a fresh run, not a resumed one */
                fprintf(stderr, "psgraph compare: cannot make %s afresh\n", dirs[i][k]);
                return 1;
            }
            fprintf(stderr, "psgraph compare: %s, repeat %d, seed %lld (%s/run.log)\n",
                    o.strategies.v[i], k, o.seed_of[k], dirs[i][k]);
            result_t *r = &res[i][k];
            *r = (result_t){.time_to_target = -1,
                            .steps_to_target = -1,
                            .final_accuracy = -1,
                            .steps_per_sec = -1,
                            .push = -1,
                            .pull = -1,
                            .wall = -1,
                            .stale_min = -1,
                            .stale_mean = -1,
                            .stale_max = -1,
                            .dropped = -1,
                            .global_steps = -1,
                            .load = -1,
                            .load1 = -1,
                            .others_load = -1,
                            .others_cpu_sec = -1,
                            .steal_sec = -1,
                            .repeat = k,
                            .seed = o.seed_of[k]};
            averaging_rounds(o.strategies.v[i], r);
            r->rc = run_strategy(&o, self, o.strategies.v[i], dirs[i][k], r);
            if (read_metrics(dirs[i][k], o.target, r) < 0)
                fprintf(stderr, "psgraph compare: %s\n", psg_error_message());
            if (r->rc != 0) worst = 1;
            print_result(o.strategies.v[i], &o, r);
        }
    /* a run beside other work: its others' load stands out from the other runs' */
    static double loads[MAX_STRATEGIES * MAX_REPEATS];
    static bool flags[MAX_STRATEGIES * MAX_REPEATS];
    for (int i = 0; i < nv; i++)
        for (int k = 0; k < nr; k++) loads[i * nr + k] = res[i][k].others_load;
    psg_compare_flag_loads(loads, nv * nr, o.load_margin, flags);
    for (int i = 0; i < nv; i++) {
        for (int k = 0; k < nr; k++) {
            res[i][k].flagged = flags[i * nr + k];
            if (res[i][k].flagged)
                fprintf(stderr,
                        "psgraph compare: %s, repeat %d ran beside %.2f runnable tasks of "
                        "other processes, more than %.0f %% from the other runs' median: "
                        "flagged\n",
                        o.strategies.v[i], k, res[i][k].others_load, 100 * o.load_margin);
        }
        print_summary(o.strategies.v[i], &o, res[i], nr);
    }
    char png[4200], csv[4300], title[512];
    snprintf(png, sizeof png, "%s", o.png ? o.png : "");
    if (!o.png) snprintf(png, sizeof png, "%s/compare.png", o.outdir);
    size_t pl = strlen(png); /* the CSV beside the PNG: its name, .csv for .png */
    snprintf(csv, sizeof csv, "%.*s.csv",
             (int)(pl > 4 && !strcmp(png + pl - 4, ".png") ? pl - 4 : pl), png);
    snprintf(title, sizeof title, "psgraph compare: %s, %d ps + %d workers, %d repeat%s", o.model,
             o.ps, o.workers, nr, nr > 1 ? "s" : "");
    static psg_compare_curve_set_t sets[MAX_STRATEGIES];
    static const char *dir_of[MAX_STRATEGIES][MAX_REPEATS];
    for (int i = 0; i < nv; i++) {
        for (int k = 0; k < nr; k++) dir_of[i][k] = dirs[i][k];
        sets[i] = (psg_compare_curve_set_t){o.strategies.v[i], dir_of[i], o.seed_of, nr};
    }
    if (psg_compare_curves(sets, nv, o.outdir, csv, png, title, o.target) < 0) {
        fprintf(stderr, "psgraph compare: %s (is gnuplot installed? Debian: gnuplot-nox)\n",
                psg_error_message());
        return 1;
    }
    fprintf(stderr, "psgraph compare: %s\n", csv);
    fprintf(stderr, "psgraph compare: %s\n", png);
    return worst;
}
