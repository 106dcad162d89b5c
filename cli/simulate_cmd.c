/* `psgraph simulate`: predicts sync-replicas scaling (steps/sec, speedup)
 * of W workers + b backups + P parameter servers from measured numbers,
 * prints its assumptions and one JSON line per point. Not a measurement. */
#include "cli/commands.h"
#include "psgraph/error.h"
#include "psgraph/simulate.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: psgraph simulate [options]\n"
            "  --step-ms X         one worker's mean compute time per step (default 1300)\n"
            "  --tail none|normal|lognormal|pareto   spread of step times (default pareto)\n"
            "  --cv X --sigma X --straggle-p X --alpha X   tail parameters (0.03, 0.1, 0.02, 1.5)\n"
            "  --samples FILE      measured step times in ms, one a line (psgraph bench\n"
            "                      inception3 --step-times FILE); sets --tail samples\n"
            "  --bytes N           bytes pulled and pushed per worker and step (default 95269408:\n"
            "                      Inception-v3's trainable variables in f32)\n"
            "  --link-gbps X       each machine's link, per direction (default 10)\n"
            "  --slow-link-gbps X  the last worker's link instead (one capped worker; default: as the others)\n"
            "  --ps-link-gbps X    each ps's link instead (default: as the others)\n"
            "  --latency-ms X      per message (default 0.07)\n"
            "  --ps P              parameter servers (default: (W + b) / 4, rounded up)\n"
            "  --overhead-ms X     per step: chief's apply, tokens (default 2)\n"
            "  --batch B           per worker (default 32)\n"
            "  --steps N           Monte Carlo steps per point (default 2000)\n"
            "  --workers LIST      e.g. 1,2,4,8,16,32,50,64,100,200 (default)\n"
            "  --backups LIST      e.g. 0,1,2,4,8 (default 0,2,4,8)\n"
            "  --seed S\n");
}

/* "1,2,50" into v (at most cap); returns the count or -1. */
static int parse_list(const char *s, int *v, int cap, int lo, int hi) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < lo || x > hi || n == cap) return -1;
        v[n++] = (int)x;
        p = end;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return n;
}

static double *read_samples(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        psg_error_set("--samples %s: %s", path, strerror(errno));
        return NULL;
    }
    double *v = NULL, x;
    int cap = 0;
    *n = 0;
    while (fscanf(f, "%lf", &x) == 1) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            double *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) break;
            v = nv;
        }
        v[(*n)++] = x;
    }
    fclose(f);
    if (*n == 0) {
        free(v);
        psg_error_set("--samples %s: no numbers", path);
        return NULL;
    }
    return v;
}

int psg_cmd_simulate(int argc, char **argv) {
    psg_sim_config_t c = psg_sim_defaults();
    int workers[64] = {1, 2, 4, 8, 16, 32, 50, 64, 100, 200}, nw = 10;
    int backups[16] = {0, 2, 4, 8}, nb = 4;
    const char *samples = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "psgraph simulate: %s '%s'\n", i + 1 >= argc ? "missing value for" : "unexpected argument", a);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        double x = strtod(v, &end);
        bool isnum = end != v && *end == 0;
        if (!strcmp(a, "--tail")) {
            int t = psg_sim_tail_from_name(v);
            if (t < 0 || t == PSG_SIM_TAIL_SAMPLES) {
                fprintf(stderr, "psgraph simulate: --tail: unknown '%s'\n", v);
                return 2;
            }
            c.tail = (psg_sim_tail_t)t;
            continue;
        }
        if (!strcmp(a, "--samples")) { samples = v; continue; }
        if (!strcmp(a, "--workers") || !strcmp(a, "--backups")) {
            bool w = !strcmp(a, "--workers");
            int n = parse_list(v, w ? workers : backups, w ? 64 : 16, w ? 1 : 0, 100000);
            if (n <= 0) {
                fprintf(stderr, "psgraph simulate: %s: '%s' is not a list of counts\n", a, v);
                return 2;
            }
            *(w ? &nw : &nb) = n;
            continue;
        }
        if (!isnum) {
            fprintf(stderr, "psgraph simulate: %s: '%s' is not a number\n", a, v);
            return 2;
        }
        if (!strcmp(a, "--step-ms")) c.step_ms = x;
        else if (!strcmp(a, "--cv")) c.cv = x;
        else if (!strcmp(a, "--sigma")) c.sigma = x;
        else if (!strcmp(a, "--straggle-p")) c.straggle_p = x;
        else if (!strcmp(a, "--alpha")) c.alpha = x;
        else if (!strcmp(a, "--bytes")) c.bytes_per_step = x;
        else if (!strcmp(a, "--link-gbps")) c.link_gbps = x;
        else if (!strcmp(a, "--slow-link-gbps")) c.slow_link_gbps = x;
        else if (!strcmp(a, "--ps-link-gbps")) c.ps_link_gbps = x;
        else if (!strcmp(a, "--latency-ms")) c.latency_ms = x;
        else if (!strcmp(a, "--ps")) c.ps = (int)x;
        else if (!strcmp(a, "--overhead-ms")) c.overhead_ms = x;
        else if (!strcmp(a, "--batch")) c.batch = (int)x;
        else if (!strcmp(a, "--steps")) c.steps = (int)x;
        else if (!strcmp(a, "--seed")) c.seed = (uint64_t)x;
        else {
            fprintf(stderr, "psgraph simulate: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    double *sv = NULL;
    if (samples) {
        if (!(sv = read_samples(samples, &c.n_samples))) {
            fprintf(stderr, "psgraph simulate: %s\n", psg_error_message());
            return 1;
        }
        c.samples = sv;
        c.tail = PSG_SIM_TAIL_SAMPLES;
        double sum = 0;
        for (int i = 0; i < c.n_samples; i++) sum += sv[i];
        c.step_ms = sum / c.n_samples;
    }
    printf("psgraph simulate: a model, not a measurement. Assumptions:\n"
           "- sync replicas: each step every one of N + b workers pulls the variables, computes,\n"
           "  pushes its gradient; the step ends when N gradients are in (the b slowest dropped),\n"
           "  then the chief applies them (overhead %.2f ms a step)\n"
           "- compute per worker and step: %s, mean %.1f ms",
           c.overhead_ms, psg_sim_tail_name(c.tail), c.step_ms);
    if (c.tail == PSG_SIM_TAIL_PARETO)
        printf(" (normal cv %.3f + with p %.3f a straggle of step x Pareto(0.5, alpha %.2f), capped at 50x)", c.cv, c.straggle_p, c.alpha);
    else if (c.tail == PSG_SIM_TAIL_NORMAL) printf(" (cv %.3f)", c.cv);
    else if (c.tail == PSG_SIM_TAIL_LOGNORMAL) printf(" (sigma %.3f)", c.sigma);
    else if (c.tail == PSG_SIM_TAIL_SAMPLES) printf(" (%d measured samples, drawn with replacement)", c.n_samples);
    printf(", independent across workers and steps\n"
           "- transfer per direction: latency %.3f ms + max(bytes / link, (N + b) x bytes / (P x link)),\n"
           "  %.0f bytes, %.1f Gbit/s links, full duplex, no overlap of compute and transfer;\n"
           "  the ps links are shared by all N + b workers (backups' traffic counts)\n"
           "- a worker's time in a step: its compute + its pull + its push (the slow link's worker\n"
           "  is the last one in); the last worker's link %.3f Gbit/s, the ps links %.3f Gbit/s\n"
           "- P = %s; speedup = images/sec over one worker without backups (same step-time stream)\n",
           c.latency_ms, c.bytes_per_step, c.link_gbps,
           c.slow_link_gbps > 0 ? c.slow_link_gbps : c.link_gbps, c.ps_link_gbps > 0 ? c.ps_link_gbps : c.link_gbps,
           c.ps > 0 ? "fixed" : "ceil((N + b) / 4) parameter servers");
    if (c.ps > 0) printf("  (P = %d)\n", c.ps);
    int rc = 0;
    for (int i = 0; i < nw && rc == 0; i++)
        for (int j = 0; j < nb; j++) {
            psg_sim_result_t r;
            if (psg_sim_run(&c, workers[i], backups[j], &r) < 0) {
                fprintf(stderr, "psgraph simulate: %s\n", psg_error_message());
                rc = 1;
                break;
            }
            printf("{\"simulate\":\"sync_replicas\",\"workers\":%d,\"backups\":%d,\"ps\":%d,"
                   "\"step_ms\":%.1f,\"compute_ms\":%.1f,\"transfer_ms\":%.1f,\"steps_per_sec\":%.4f,"
                   "\"images_per_sec\":%.1f,\"speedup\":%.2f,\"efficiency\":%.3f}\n",
                   r.workers, r.backups, r.ps, r.step_ms, r.compute_ms, r.transfer_ms, r.steps_per_sec,
                   r.images_per_sec, r.speedup, r.speedup / r.workers);
        }
    free(sv);
    return rc;
}
