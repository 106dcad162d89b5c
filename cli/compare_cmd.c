/* `psgraph compare`: runs several strategies (sync/strategies.c) one after the
 * other on the same workload, local cluster, data order and straggler model
 * (each a `psgraph launch ... -- psgraph train` with its own --logdir), then
 * prints one JSON line per strategy (time to a target test accuracy, pace,
 * bytes per step, staleness, final accuracy, gradients dropped) and draws the
 * test accuracy of all against wall time and against steps into one PNG with
 * gnuplot. Not a scheduler: the runs share this machine one at a time. */
#include "cli/commands.h"
#include "cli/options.h"
#include "core/json.h"
#include "psgraph/error.h"
#include "psgraph/sync_replicas.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_STRATEGIES PSG_CLI_LIST_MAX

static const char *const default_strategies[] = {
    "async", "sync", "sync --backup-workers 1", "ssp --staleness 2", "local --local-steps 4",
};

typedef psg_compare_args_t compare_opts_t; /* cli/options.h */

/* What a strategy's run gave, from its metrics.jsonl. */
typedef struct {
    double time_to_target, steps_to_target, final_accuracy, steps_per_sec, push, pull, wall;
    double stale_min, stale_mean, stale_max, dropped, global_steps, chief_steps;
    int evals, rc;
    char sync[32];
} result_t;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: psgraph compare [options] [-- more psgraph train options for every strategy]\n"
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
        "  --outdir DIR        each strategy's logdir and log under DIR (default ./compare)\n"
        "  --png FILE          the plot (default DIR/compare.png; needs gnuplot)\n");
}

static int parse(int argc, char **argv, compare_opts_t *o) {
    *o = (compare_opts_t){.model = "mlp",
                          .straggler = "worker=all,dist=lognormal,median_ms=20,sigma=1",
                          .outdir = "compare",
                          .epochs = "6",
                          .eval_every = "20",
                          .seed = "1",
                          .ps = 1,
                          .workers = 4,
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
    if (o->strategies.n == 0)
        for (size_t k = 0; k < sizeof default_strategies / sizeof *default_strategies; k++)
            o->strategies.v[o->strategies.n++] = default_strategies[k];
    for (int i = 0; i < o->strategies.n; i++) /* every one before anything starts */
        if (psg_sync_spec_check(o->strategies.v[i]) < 0)
            return psg_error_wrap("--strategy '%s'", o->strategies.v[i]);
    return 0;
}

/* The run of one strategy: psgraph launch ... -- psgraph train ... --logdir dir, its
 * output into dir/run.log. Returns the launch's exit code (or -1). */
static int run_strategy(const compare_opts_t *o, const char *self, const char *strategy,
                        const char *dir) {
    char spec[512], ps[16], workers[16], log[4200];
    snprintf(spec, sizeof spec, "%s", strategy);
    snprintf(ps, sizeof ps, "%d", o->ps);
    snprintf(workers, sizeof workers, "%d", o->workers);
    snprintf(log, sizeof log, "%s/run.log", dir);
    const char *argv[200] = {self, "launch"};
    int n = 2;
    for (int k = 0; k < o->launch.n; k++) argv[n++] = o->launch.v[k];
    const char *fixed[] = {
        "--ps",    ps,         "--workers", workers,       "--",           self,          "train",
        "--model", o->model,   "--epochs",  o->epochs,     "--eval-every", o->eval_every, "--seed",
        o->seed,   "--logdir", dir,         "--log-every", "1000000"};
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
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(self, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
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

/* -1 as JSON's null. */
static const char *jnum(char *buf, size_t n, double v, const char *fmt) {
    if (v < 0) return "null";
    snprintf(buf, n, fmt, v);
    return buf;
}

static void print_result(const char *strategy, const compare_opts_t *o, const result_t *r) {
    char b[13][32];
    printf(
        "{\"compare\":\"%s\",\"sync\":\"%s\",\"exit\":%d,\"target\":%.4f,\"time_to_target_sec\":%s,"
        "\"steps_to_target\":%s,\"steps_per_sec\":%s,\"global_steps_per_sec\":%s,\"global_steps\":%s,\"push_bytes_per_step\":%s,"
        "\"pull_bytes_per_step\":%s,\"staleness\":{\"min\":%s,\"mean\":%s,\"max\":%s},"
        "\"final_accuracy\":%s,\"gradients_dropped\":%s,\"evaluations\":%d,\"wall_sec\":%s,"
        "\"ps\":%d,\"workers\":%d,\"model\":\"%s\",\"straggler\":\"%s\",\"launch_args\":\"%s\"}\n",
        strategy, r->sync, r->rc, o->target, jnum(b[0], 32, r->time_to_target, "%.3f"),
        jnum(b[1], 32, r->steps_to_target, "%.0f"),
        jnum(b[12], 32, r->chief_steps > 0 && r->wall > 0 ? r->chief_steps / r->wall : -1, "%.3f"),
        jnum(b[2], 32, r->steps_per_sec, "%.3f"), jnum(b[3], 32, r->global_steps, "%.0f"),
        jnum(b[4], 32, r->push, "%.0f"), jnum(b[5], 32, r->pull, "%.0f"),
        jnum(b[6], 32, r->stale_min, "%.0f"), jnum(b[7], 32, r->stale_mean, "%.4f"),
        jnum(b[8], 32, r->stale_max, "%.0f"), jnum(b[9], 32, r->final_accuracy, "%.4f"),
        jnum(b[10], 32, r->dropped, "%.0f"), r->evals, jnum(b[11], 32, r->wall, "%.3f"), o->ps,
        o->workers, o->model, o->straggler, o->launch_text);
    fflush(stdout);
}

/* Test accuracy against wall time and against steps, one line per strategy. */
static int draw(const compare_opts_t *o, char dirs[][4096], int n, const char *png) {
    FILE *g = popen("gnuplot 2>/dev/null", "w");
    if (!g) return psg_error_set("cannot start gnuplot: %s", strerror(errno));
    fprintf(
        g,
        "set terminal pngcairo noenhanced size 1000,900 font 'sans,10'\nset output '%s'\n"
        "set multiplot layout 2,1 title 'psgraph compare: %s, %d ps + %d workers, target %.3f'\n"
        "set grid\nset key bottom right\nset ylabel 'test accuracy'\n",
        png, o->model, o->ps, o->workers, o->target);
    for (int axis = 0; axis < 2; axis++) {
        fprintf(g, "set xlabel '%s'\nplot %.4f title 'target' with lines dt 2 lc rgb 'gray'",
                axis ? "steps of the chief" : "wall time (s)", o->target);
        for (int i = 0; i < n; i++)
            fprintf(g, ", '%s/eval.dat' using %d:3 title '%s' with linespoints lw 2 pt 7 ps 0.5",
                    dirs[i], axis ? 2 : 1, o->strategies.v[i]);
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    int st = pclose(g);
    return st == 0 ? 0 : psg_error_set("gnuplot failed drawing %s (status %d)", png, st);
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
    static char dirs[MAX_STRATEGIES][4096];
    int worst = 0;
    for (int i = 0; i < o.strategies.n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s", o.strategies.v[i]);
        for (char *c = name; *c; c++)
            if (*c == ' ' || *c == '/') *c = '_';
        snprintf(dirs[i], sizeof dirs[i], "%s/%d-%s", o.outdir, i, name);
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dirs[i]); /* a fresh run, not a resumed one */
        if (system(cmd) != 0 || mkdir(dirs[i], 0755) < 0) {
            fprintf(stderr, "psgraph compare: %s: %s\n", dirs[i], strerror(errno));
            return 1;
        }
        fprintf(stderr, "psgraph compare: %s (%s/run.log)\n", o.strategies.v[i], dirs[i]);
        result_t r = {.time_to_target = -1,
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
                      .global_steps = -1};
        r.rc = run_strategy(&o, self, o.strategies.v[i], dirs[i]);
        if (read_metrics(dirs[i], o.target, &r) < 0)
            fprintf(stderr, "psgraph compare: %s\n", psg_error_message());
        if (r.rc != 0) worst = 1;
        print_result(o.strategies.v[i], &o, &r);
    }
    char png[4200];
    snprintf(png, sizeof png, "%s", o.png ? o.png : "");
    if (!o.png) snprintf(png, sizeof png, "%s/compare.png", o.outdir);
    if (draw(&o, dirs, o.strategies.n, png) < 0) {
        fprintf(stderr, "psgraph compare: %s (is gnuplot installed? Debian: gnuplot-nox)\n",
                psg_error_message());
        return 1;
    }
    fprintf(stderr, "psgraph compare: %s\n", png);
    return worst;
}
