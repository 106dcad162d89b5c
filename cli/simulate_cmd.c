/* `psgraph simulate`: predicts sync-replicas scaling (steps/sec, speedup)
 * of W workers + b backups + P parameter servers from measured numbers (the
 * serial model) or from a trace of one run (the overlap model), prints its
 * assumptions and one JSON line per point. Not a measurement. */
#include "cli/commands.h"
#include "cli/options.h"
#include "psgraph/error.h"
#include "psgraph/simulate.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: psgraph simulate [options]\n");
    psg_cli_print_help(PSG_CLI_SIMULATE, f, 19);
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

/* The options (cli/option_table.c) into a->c and the lists; 0, 1 after --help (printed),
 * 2 after printing the error. */
static int simulate_parse(int argc, char **argv, psg_simulate_args_t *a, int *workers, int *nw,
                          int *backups, int *nb) {
    memset(a, 0, sizeof *a);
    a->c = psg_sim_defaults();
    a->c.overhead_ms = -1; /* not given: the serial model's 2, 0 with a trace (measured) */
    a->tail = (int)a->c.tail;
    a->cpu_speed = 1;
    int rc = psg_cli_parse(PSG_CLI_SIMULATE, argc, argv, 1, a, NULL);
    if (rc == 1) usage(stdout);
    if (rc < 0) fprintf(stderr, "psgraph simulate: %s\n", psg_error_message());
    if (rc == -2) usage(stderr);
    if (rc) return rc == 1 ? 1 : 2;
    if (a->c.overhead_ms < 0) a->c.overhead_ms = a->trace ? 0 : psg_sim_defaults().overhead_ms;
    a->c.tail = (psg_sim_tail_t)a->tail;
    if (a->workers) *nw = psg_cli_counts(a->workers, workers, 64, 1, 100000);
    if (a->backups) *nb = psg_cli_counts(a->backups, backups, 16, 0, 100000);
    if (*nw <= 0 || *nb <= 0) {
        fprintf(stderr, "psgraph simulate: %s: more than %d counts\n",
                *nw <= 0 ? "--workers" : "--backups", *nw <= 0 ? 64 : 16);
        return 2;
    }
    return 0;
}

static void print_serial_assumptions(const psg_sim_config_t *c) {
    printf("psgraph simulate: a model, not a measurement. Assumptions:\n"
           "- sync replicas: each step every one of N + b workers pulls the variables, computes,\n"
           "  pushes its gradient; the step ends when N gradients are in (the b slowest dropped),\n"
           "  then the chief applies them (overhead %.2f ms a step)\n"
           "- compute per worker and step: %s, mean %.1f ms",
           c->overhead_ms, psg_sim_tail_name(c->tail), c->step_ms);
    if (c->tail == PSG_SIM_TAIL_PARETO)
        printf(
            " (normal cv %.3f + with p %.3f a straggle of step x Pareto(0.5, alpha %.2f), capped at 50x)",
            c->cv, c->straggle_p, c->alpha);
    else if (c->tail == PSG_SIM_TAIL_NORMAL)
        printf(" (cv %.3f)", c->cv);
    else if (c->tail == PSG_SIM_TAIL_LOGNORMAL)
        printf(" (sigma %.3f)", c->sigma);
    else if (c->tail == PSG_SIM_TAIL_SAMPLES)
        printf(" (%d measured samples, drawn with replacement)", c->n_samples);
    printf(
        ", independent across workers and steps\n"
        "- transfer per direction: latency %.3f ms + max(bytes / link, (N + b) x bytes / (P x link)),\n"
        "  %.0f bytes, %.1f Gbit/s links, full duplex, no overlap of compute and transfer;\n"
        "  the ps links are shared by all N + b workers (backups' traffic counts)\n"
        "- a worker's time in a step: its compute + its pull + its push (the slow link's worker\n"
        "  is the last one in); the last worker's link %.3f Gbit/s, the ps links %.3f Gbit/s\n"
        "- P = %s; speedup = images/sec over one worker without backups (same step-time stream)\n",
        c->latency_ms, c->bytes_per_step, c->link_gbps,
        c->slow_link_gbps > 0 ? c->slow_link_gbps : c->link_gbps,
        c->ps_link_gbps > 0 ? c->ps_link_gbps : c->link_gbps,
        c->ps > 0 ? "fixed" : "ceil((N + b) / 4) parameter servers");
    if (c->ps > 0) printf("  (P = %d)\n", c->ps);
}

static void print_overlap_assumptions(const psg_sim_config_t *c, const psg_sim_profile_t *p) {
    double pull = 0, push = 0;
    for (int i = 0; i < p->n_pulls; i++) pull += p->pulls[i].bytes;
    for (int j = 0; j < p->n_pushes; j++) push += p->pushes[j].bytes;
    printf("psgraph simulate: a model, not a measurement (the overlap model). Assumptions:\n"
           "- sync replicas, event by event: a worker's step starts one latency (%.3f ms) after\n"
           "  its token, plus %.3f ms of overhead; it asks for its %d pulls (%.0f bytes) at once,\n"
           "  computes %.3f ms (x its draw: %s), waits where it needs a pull not yet in, and\n"
           "  sends each of its %d pushes (%.0f bytes) when its compute has made it\n"
           "- each message crosses its sender's uplink and its receiver's downlink, %.3f Gbit/s\n"
           "  (the last worker's %.3f, the ps's %.3f; full duplex), shared round-robin by the\n"
           "  peers in chunks of %.0f bytes; a capped link's token bucket holds %.1f ms of its\n"
           "  rate (at least %.0f bytes), drained at %.1f Gbit/s\n"
           "- a ps applies a gradient when the N-th of the step is in (one apply at a time);\n"
           "  the chief releases the next step %.2f ms after the last; late gradients are\n"
           "  dropped, their bytes still cross the links\n"
           "- P = %s; speedup = images/sec over one worker without backups\n",
           c->latency_ms, p->overhead_ms, p->n_pulls, pull, p->compute_ms,
           psg_sim_tail_name(c->tail), p->n_pushes, push, c->link_gbps,
           c->slow_link_gbps > 0 ? c->slow_link_gbps : c->link_gbps,
           c->ps_link_gbps > 0 ? c->ps_link_gbps : c->link_gbps, c->chunk_bytes, c->burst_ms,
           c->burst_min_bytes, c->line_gbps, c->overhead_ms,
           c->ps > 0 ? "fixed" : "ceil((N + b) / 4) parameter servers");
    if (c->ps > 0) printf("  (P = %d)\n", c->ps);
    if (c->window_bytes > 0 && !c->link_fifo)
        printf("- a sender's own link serves a peer a TCP window a turn (%.0f bytes, each turn's\n"
               "  drawn in +-50 %%), then the next peer\n",
               c->window_bytes);
}

static void print_cpu_assumptions(const psg_sim_config_t *c, int trace_workers) {
    int t = trace_workers > 0 ? trace_workers : 1;
    if (c->worker_cpu_ms > 0 || c->ps_cpu_ms > 0)
        printf("- the ps's critical path: a step is at least one worker's CPU (%.3f ms; where\n"
               "  more workers than shared cores, (N + b) x it over the cores) and then the ps's\n"
               "  CPU of the step, serial in a ps task (%.3f ms as measured with %d worker(s):\n"
               "  its applies once, the rest per worker served) over the P ps\n",
               c->worker_cpu_ms, c->ps_cpu_ms, t);
    if (!(c->cores > 0)) {
        printf("- each host has cores of its own: no bound from shared cores (--cores)\n");
        return;
    }
    printf("- the hosts share %g cores (processor sharing): a step is at least (N + b) x %.3f ms\n"
           "  of worker CPU + the ps's %.3f ms (its applies once, the rest per worker served,\n"
           "  as measured with %d) over %g cores (N + b: the workers that start a step)\n",
           c->cores, c->worker_cpu_ms, c->ps_cpu_ms, t, c->cores);
    printf("- the step is the largest of the model's and these bounds\n");
}

/* Which of r's steps is the predicted one. */
static const char *bound_name(const psg_sim_result_t *r) {
    if (r->step_ms <= r->link_step_ms) return "model";
    return r->path_step_ms >= r->cpu_step_ms ? "path" : "cores";
}

/* The overlap model's profile into *p: from the trace (calibrated; its JSON line printed)
 * or from the serial inputs. -1 with the error set. */
static int overlap_profile(const psg_simulate_args_t *a, const psg_sim_config_t *c,
                           psg_sim_msg_t serial[2], psg_sim_profile_t *p) {
    if (!a->trace) {
        psg_sim_profile_serial(c, serial, p);
        return 0;
    }
    const char *note = NULL;
    if (psg_sim_profile_from_trace(a->trace, p) < 0) return -1;
    if (psg_sim_calibrate(c, p, &note) < 0) {
        psg_sim_profile_free(p);
        return -1;
    }
    double pull = 0, push = 0, apply = 0;
    for (int i = 0; i < p->n_pulls; i++) pull += p->pulls[i].bytes;
    for (int j = 0; j < p->n_pushes; j++) {
        push += p->pushes[j].bytes;
        apply += p->pushes[j].apply_ms;
    }
    printf("{\"simulate\":\"calibration\",\"trace\":\"%s\",\"trace_workers\":%d,\"trace_steps\":%d,"
           "\"measured_step_ms\":%.3f,\"compute_ms\":%.3f,\"overhead_ms\":%.3f,\"pulls\":%d,"
           "\"pull_bytes\":%.0f,\"pushes\":%d,\"push_bytes\":%.0f,\"ps_apply_ms\":%.3f,"
           "\"cores_step_ms\":%.3f,\"path_step_ms\":%.3f%s%s%s}\n",
           a->trace, p->trace_workers, p->trace_steps, p->trace_step_ms, p->compute_ms,
           p->overhead_ms, p->n_pulls, pull, p->n_pushes, push, apply,
           psg_sim_cpu_step_ms(c, p->trace_workers, apply, p->trace_workers),
           psg_sim_path_step_ms(c, p->trace_workers, p->trace_workers, apply, p->trace_workers,
                                c->ps > 0 ? c->ps : (p->trace_workers + 3) / 4),
           note ? ",\"note\":\"" : "", note ? note : "", note ? "\"" : "");
    return 0;
}

int psg_cmd_simulate(int argc, char **argv) {
    psg_simulate_args_t a;
    int workers[64] = {1, 2, 4, 8, 16, 32, 50, 64, 100, 200}, nw = 10;
    int backups[16] = {0, 2, 4, 8}, nb = 4;
    int prc = simulate_parse(argc, argv, &a, workers, &nw, backups, &nb);
    if (prc) return prc == 1 ? 0 : 2;
    psg_sim_config_t c = a.c;
    double *sv = NULL;
    if (a.samples) {
        if (!(sv = read_samples(a.samples, &c.n_samples))) {
            fprintf(stderr, "psgraph simulate: %s\n", psg_error_message());
            return 1;
        }
        c.samples = sv;
        c.tail = PSG_SIM_TAIL_SAMPLES;
        double sum = 0;
        for (int i = 0; i < c.n_samples; i++) sum += sv[i];
        c.step_ms = sum / c.n_samples;
    }
    bool overlap = a.trace || a.overlap;
    psg_sim_profile_t prof = {0};
    psg_sim_msg_t serial[2];
    if (overlap && overlap_profile(&a, &c, serial, &prof) < 0) {
        fprintf(stderr, "psgraph simulate: %s\n", psg_error_message());
        free(sv);
        return 1;
    }
    if (a.cpu_speed != 1) { /* after the calibration: the trace ran at the measured speed */
        for (int i = 0; sv && i < c.n_samples; i++) sv[i] /= a.cpu_speed;
        psg_sim_scale_cpu(&c, overlap ? &prof : NULL, a.cpu_speed);
    }
    if (overlap)
        print_overlap_assumptions(&c, &prof);
    else
        print_serial_assumptions(&c);
    print_cpu_assumptions(&c, overlap ? prof.trace_workers : 0);
    if (a.cpu_speed != 1)
        printf("- CPU work %g times as fast as when measured: every compute and CPU time above\n"
               "  is the measured one / %g\n",
               a.cpu_speed, a.cpu_speed);
    int rc = 0;
    for (int i = 0; i < nw && rc == 0; i++)
        for (int j = 0; j < nb; j++) {
            psg_sim_result_t r;
            if ((overlap ? psg_sim_overlap_run(&c, &prof, workers[i], backups[j], &r)
                         : psg_sim_run(&c, workers[i], backups[j], &r)) < 0) {
                fprintf(stderr, "psgraph simulate: %s\n", psg_error_message());
                rc = 1;
                break;
            }
            printf(
                "{\"simulate\":\"sync_replicas\",\"workers\":%d,\"backups\":%d,\"ps\":%d,"
                "\"step_ms\":%.2f,\"compute_ms\":%.2f,\"transfer_ms\":%.2f,\"steps_per_sec\":%.4f,"
                "\"images_per_sec\":%.1f,\"speedup\":%.2f,\"efficiency\":%.3f,\"model\":\"%s\","
                "\"link_step_ms\":%.2f,\"cpu_step_ms\":%.2f,\"path_step_ms\":%.2f,"
                "\"workers_per_step\":%.3f,\"bound\":\"%s\"}\n",
                r.workers, r.backups, r.ps, r.step_ms, r.compute_ms, r.transfer_ms, r.steps_per_sec,
                r.images_per_sec, r.speedup, r.speedup / r.workers, overlap ? "overlap" : "serial",
                r.link_step_ms, r.cpu_step_ms, r.path_step_ms, r.workers_per_step, bound_name(&r));
        }
    if (a.trace) psg_sim_profile_free(&prof);
    free(sv);
    return rc;
}
