/* psgraph compare's numbers over repeats (cli/compare_stats.c): mean, min, max and a 95 %
 * interval of a sample; the machine's load and the CPU time others took during a run; the
 * runs whose load stands out. Not the runs themselves (cli/compare_cmd.c). */
#ifndef PSGRAPH_CLI_COMPARE_STATS_H
#define PSGRAPH_CLI_COMPARE_STATS_H

#include <stdbool.h>
#include <stddef.h>

/* A sample's summary: n values, their mean, min, max, and the 95 % interval of the mean
 * (Student's t: mean -+ t(0.975, n - 1) s / sqrt(n); lo = hi = mean when n = 1). */
typedef struct {
    int n;
    double mean, min, max, lo, hi;
} psg_compare_stat_t;

/* The summary of the n values of x that are finite and >= 0 (the others: not measured). */
psg_compare_stat_t psg_compare_stat(const double *x, int n);
/* t(0.975, df), the two-sided 95 % quantile of Student's t with df >= 1 degrees of freedom. */
double psg_compare_t975(int df);
/* "\"key\":{\"n\":N,\"mean\":M,\"min\":A,\"max\":B,\"ci95\":[L,H]}" (key:null when n = 0), as
 * snprintf; fmt prints one number ("%.3f"). */
int psg_compare_stat_json(char *buf, size_t size, const char *key, const psg_compare_stat_t *s,
                          const char *fmt);

/* The machine at one moment: /proc/loadavg's 1-minute load and its tasks runnable now (the
 * instantaneous load the average smooths over a minute), and /proc/stat's CPU times. */
typedef struct {
    double load1;
    double runnable;
    double busy_sec;  /* every CPU's user, nice, system, irq, softirq time */
    double steal_sec; /* the hypervisor's steal time (0 on bare metal) */
} psg_machine_sample_t;

/* Reads the machine now into *out. Returns 0, or -1 with the error naming the file. */
int psg_machine_sample(psg_machine_sample_t *out);

/* The threads runnable now in the process root and its descendants (a run's own part of
 * the machine's runnable tasks). Returns the count, or -1 with the error. */
int psg_tree_runnable(long root);

/* Whether the chief of a strategy that trains each worker's own copy and averages the copies
 * every `every` steps (local SGD, DiLoCo: --local-steps H, --local-after A) evaluated the
 * average at `step` (its evaluation after that many of its own steps): after step j the
 * copies were averaged and the average copied back when j <= after (post-local SGD's sync
 * steps) or (j - after) is a multiple of every; between averages the chief's copy is its
 * own, one worker's model. Always true when every <= 0 (no averaging rounds: every
 * evaluation is of the model). */
bool psg_compare_averaged_at(double step, long long every, long long after);

/* flagged[i] = load[i] differs from the median of the other n - 1 loads by more than margin
 * times that median (times 1 when the median is under 1: an idle machine); none when n < 2.
 * compare passes each run's others' load (the runnable tasks not of the run). Returns how
 * many it flagged. */
int psg_compare_flag_loads(const double *load, int n, double margin, bool *flagged);

#endif
