/* psgraph compare's curves (cli/compare_curves.c): every point of every run into one CSV,
 * and the PNG: test accuracy against wall time and against the chief's steps, training
 * loss and bytes moved against wall time, and the staleness histogram, each strategy's
 * repeats as a band (min to max) around their mean. Not the runs (cli/compare_cmd.c). */
#ifndef PSGRAPH_CLI_COMPARE_CURVES_H
#define PSGRAPH_CLI_COMPARE_CURVES_H

#include <stdbool.h>

/* One strategy's runs: their logdirs (dirs[k], k < repeats), its label, and each repeat's
 * seed. */
typedef struct {
    const char *label;
    const char *const *dirs;
    const long long *seeds;
    int repeats;
} psg_compare_curve_set_t;

/* Reads the metrics*.jsonl of every run of the n sets, writes csv (a header, then a row per
 * evaluation and per worker step of every run) and the aggregates under workdir, and draws
 * png with gnuplot (title: title; target: the accuracy's dashed line). Returns 0, or -1 with
 * the error naming the file or gnuplot. */
int psg_compare_curves(const psg_compare_curve_set_t *sets, int n, const char *workdir,
                       const char *csv, const char *png, const char *title, double target);

#endif
