/* Straggler injection: the --straggler parser and a sampler whose draws
 * depend only on (seed, spec, worker, step), so runs repeat and processes
 * agree without sharing state. Not a model of real stragglers' causes. */
#include "core/rng.h"
#include "psgraph/straggler.h"
#include "psgraph/error.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DELAY_MS 3600e3

struct psg_straggler {
    uint64_t seed;
    psg_straggler_spec_t *specs;
    int n;
};

static int field_error(const char *text, const char *field, const char *why, const char *val) {
    return psg_error_set("--straggler '%s': %s: %s%s%s%s", text, field, why, val ? " ('" : "",
                         val ? val : "", val ? "')" : "");
}

static int parse_number(const char *text, const char *key, const char *val, double lo, double hi,
                        double *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(v))
        return field_error(text, key, "not a number", val);
    if (v < lo || v > hi) {
        char why[96];
        snprintf(why, sizeof why, "must be in [%g, %g]", lo, hi);
        return field_error(text, key, why, val);
    }
    *out = v;
    return 0;
}

enum { F_WORKER, F_DIST, F_DELAY, F_MEAN, F_MEDIAN, F_MU, F_SIGMA, F_PROB, NUM_FIELDS };
static const char *const field_names[NUM_FIELDS] = {"worker",    "dist", "delay_ms", "mean_ms",
                                                    "median_ms", "mu",   "sigma",    "prob"};

/* Which fields each distribution takes (worker, dist, prob: all). */
static bool field_allowed(psg_straggler_dist_t d, int f) {
    switch (f) {
    case F_DELAY: return d == PSG_STRAGGLER_FIXED;
    case F_MEAN: return d == PSG_STRAGGLER_EXPONENTIAL;
    case F_MEDIAN:
    case F_MU:
    case F_SIGMA: return d == PSG_STRAGGLER_LOGNORMAL;
    default: return true;
    }
}

static int parse_field(const char *text, int f, const char *val, psg_straggler_spec_t *o,
                       double *median) {
    double x = 0;
    switch (f) {
    case F_WORKER:
        if (!strcmp(val, "all")) {
            o->worker = -1;
            return 0;
        }
        if (parse_number(text, "worker", val, 0, 1e6, &x) < 0 || x != floor(x))
            return field_error(text, "worker", "not a task index or 'all'", val);
        o->worker = (int)x;
        return 0;
    case F_DIST:
        if (!strcmp(val, "fixed"))
            o->dist = PSG_STRAGGLER_FIXED;
        else if (!strcmp(val, "exponential"))
            o->dist = PSG_STRAGGLER_EXPONENTIAL;
        else if (!strcmp(val, "lognormal"))
            o->dist = PSG_STRAGGLER_LOGNORMAL;
        else
            return field_error(text, "dist", "unknown distribution (fixed, exponential, lognormal)",
                               val);
        return 0;
    case F_DELAY: return parse_number(text, "delay_ms", val, 0, MAX_DELAY_MS, &o->delay_ms);
    case F_MEAN: return parse_number(text, "mean_ms", val, 0, MAX_DELAY_MS, &o->mean_ms);
    case F_MEDIAN: return parse_number(text, "median_ms", val, 1e-3, MAX_DELAY_MS, median);
    case F_MU: return parse_number(text, "mu", val, -20, 20, &o->mu);
    case F_SIGMA: return parse_number(text, "sigma", val, 0, 10, &o->sigma);
    default: return parse_number(text, "prob", val, 1e-9, 1, &o->prob);
    }
}

int psg_straggler_parse(const char *text, psg_straggler_spec_t *out) {
    psg_straggler_spec_t o = {.worker = -2, .dist = PSG_STRAGGLER_FIXED, .prob = 1};
    bool seen[NUM_FIELDS] = {false};
    char *copy = strdup(text ? text : "");
    if (!copy) return psg_error_set("out of memory");
    double median = 0;
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            rc = field_error(text, tok, "expected key=value", NULL);
            break;
        }
        *eq = '\0';
        int f = 0;
        while (f < NUM_FIELDS && strcmp(field_names[f], tok)) f++;
        if (f == NUM_FIELDS)
            rc = field_error(text, tok,
                             "unknown field (worker, dist, delay_ms, mean_ms, median_ms, "
                             "mu, sigma, prob)",
                             NULL);
        else if (seen[f])
            rc = field_error(text, tok, "given twice", NULL);
        else {
            seen[f] = true;
            rc = parse_field(text, f, eq + 1, &o, &median);
        }
    }
    free(copy);
    if (rc < 0) return -1;
    if (!seen[F_WORKER]) return field_error(text, "worker", "missing (an index or 'all')", NULL);
    if (!seen[F_DIST] && seen[F_MEAN]) o.dist = PSG_STRAGGLER_EXPONENTIAL;
    if (!seen[F_DIST] && (seen[F_MEDIAN] || seen[F_MU])) o.dist = PSG_STRAGGLER_LOGNORMAL;
    for (int f = 0; f < NUM_FIELDS; f++)
        if (seen[f] && !field_allowed(o.dist, f))
            return field_error(text, field_names[f], "not a parameter of this distribution", NULL);
    switch (o.dist) {
    case PSG_STRAGGLER_FIXED:
        if (!seen[F_DELAY]) return field_error(text, "delay_ms", "missing", NULL);
        break;
    case PSG_STRAGGLER_EXPONENTIAL:
        if (!seen[F_MEAN]) return field_error(text, "mean_ms", "missing", NULL);
        break;
    case PSG_STRAGGLER_LOGNORMAL:
        if (seen[F_MEDIAN] == seen[F_MU])
            return field_error(text, seen[F_MU] ? "mu" : "median_ms",
                               "give exactly one of median_ms and mu", NULL);
        if (!seen[F_SIGMA]) return field_error(text, "sigma", "missing", NULL);
        if (seen[F_MEDIAN]) o.mu = log(median);
        break;
    }
    *out = o;
    return 0;
}

psg_straggler_t *psg_straggler_new(uint64_t seed) {
    psg_straggler_t *s = calloc(1, sizeof *s);
    if (!s) {
        psg_error_set("out of memory");
        return NULL;
    }
    s->seed = seed;
    return s;
}

void psg_straggler_destroy(psg_straggler_t **sp) {
    if (!sp || !*sp) return;
    free((*sp)->specs);
    free(*sp);
    *sp = NULL;
}

int psg_straggler_add(psg_straggler_t *s, const char *text) {
    psg_straggler_spec_t spec;
    if (psg_straggler_parse(text, &spec) < 0) return -1;
    psg_straggler_spec_t *n = realloc(s->specs, sizeof *n * (size_t)(s->n + 1));
    if (!n) return psg_error_set("out of memory");
    s->specs = n;
    s->specs[s->n++] = spec;
    return 0;
}

int psg_straggler_count(const psg_straggler_t *s) {
    return s ? s->n : 0;
}

const psg_straggler_spec_t *psg_straggler_at(const psg_straggler_t *s, int i) {
    return s && i >= 0 && i < s->n ? &s->specs[i] : NULL;
}

/* A uniform draw in (0, 1): splitmix64's mix (core/rng.h) of each key in turn, so each
 * (seed, spec, worker, step, k) has its own draw. */
static double uniform(uint64_t seed, int spec, int worker, int64_t step, int k) {
    uint64_t h = psg_mix64(seed);
    h = psg_mix64(h ^ (uint64_t)spec);
    h = psg_mix64(h ^ (uint64_t)(uint32_t)worker);
    h = psg_mix64(h ^ (uint64_t)step);
    h = psg_mix64(h ^ (uint64_t)k);
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double psg_straggler_delay_ms(const psg_straggler_t *s, int worker, int64_t step) {
    double total = 0;
    for (int i = 0; s && i < s->n; i++) {
        const psg_straggler_spec_t *p = &s->specs[i];
        if (p->worker >= 0 && p->worker != worker) continue;
        if (p->prob < 1 && uniform(s->seed, i, worker, step, 0) >= p->prob) continue;
        double u1 = uniform(s->seed, i, worker, step, 1), u2 = uniform(s->seed, i, worker, step, 2);
        switch (p->dist) {
        case PSG_STRAGGLER_FIXED: total += p->delay_ms; break;
        case PSG_STRAGGLER_EXPONENTIAL: total += -p->mean_ms * log(u1); break;
        case PSG_STRAGGLER_LOGNORMAL: {
            double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
            total += exp(p->mu + p->sigma * z);
            break;
        }
        }
    }
    return total < MAX_DELAY_MS ? total : MAX_DELAY_MS;
}

double psg_straggler_sleep(const psg_straggler_t *s, int worker, int64_t step) {
    double ms = psg_straggler_delay_ms(s, worker, step);
    if (ms <= 0) return 0;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
    return ms;
}
