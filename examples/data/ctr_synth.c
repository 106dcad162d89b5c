/* A synthetic click log in the Criteo format, drawn from a planted wide-and-deep model
 * with a fixed seed: Zipf ids per field, log-normal counts, a click probability from wide
 * weights, a linear term and pairwise interactions of planted embeddings. The planted
 * model's own AUC on the held-out tail is the best a learner can reach. Not the reader. */
#include "psgraph/criteo.h"
#include "psgraph/error.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define EMB 4 /* the planted embeddings' dim */
/* Only the ids of this rank or below (by frequency) carry planted weight: the rarer ones
 * are too rare in 10^6 rows for any learner, so the planted AUC stays reachable. */
#define SIGNAL_RANK 300

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in (0, 1) from a 64-bit value */
static double unit(uint64_t h) { return ((double)(h >> 11) + 0.5) / 9007199254740992.0; }

/* A standard normal that is a pure function of (seed, a, b, c): the planted weights are
 * never stored. */
static double gauss(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t h = mix64(seed ^ mix64(a * 0x100000001b3ull ^ mix64(b * 31 + c)));
    return sqrt(-2.0 * log(unit(h))) * cos(6.283185307179586 * unit(mix64(h)));
}

typedef struct {
    uint64_t s;
} rng_t;

static double rng_unit(rng_t *r) { return unit(mix64(r->s++)); }

static double rng_gauss(rng_t *r) {
    double u = rng_unit(r), v = rng_unit(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Field f's vocabulary: 10 to 10^5 ids, by field. */
static int64_t vocab(int f) {
    static const int64_t v[] = {10, 100, 1000, 10000, 100000, 30000, 300, 3000};
    return v[f % 8];
}

typedef struct {
    double *cdf[PSG_CTR_FIELDS];
} zipf_t;

static int zipf_init(zipf_t *z) {
    memset(z, 0, sizeof *z);
    for (int f = 0; f < PSG_CTR_FIELDS; f++) {
        int64_t n = vocab(f);
        if (!(z->cdf[f] = malloc(sizeof(double) * (size_t)n))) return psg_error_set("out of memory");
        double s = 0;
        for (int64_t i = 0; i < n; i++) z->cdf[f][i] = s += pow((double)(i + 1), -1.1);
        for (int64_t i = 0; i < n; i++) z->cdf[f][i] /= s;
    }
    return 0;
}

static void zipf_free(zipf_t *z) {
    for (int f = 0; f < PSG_CTR_FIELDS; f++) free(z->cdf[f]);
}

static int64_t zipf_draw(const zipf_t *z, int f, double u) {
    int64_t lo = 0, hi = vocab(f) - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (z->cdf[f][mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* One row: writes its line into buf and returns the planted click probability. */
static double draw_row(uint64_t seed, rng_t *r, const zipf_t *z, char *buf, size_t size, int *label) {
    double logit = -1.3;
    int64_t id[PSG_CTR_FIELDS];
    char dense[PSG_CTR_DENSE][24], cat[PSG_CTR_FIELDS][12];
    for (int j = 0; j < PSG_CTR_DENSE; j++) {
        dense[j][0] = '\0';
        if (rng_unit(r) < 0.1) continue; /* empty */
        double x = floor(exp(0.5 + 0.25 * j + rng_gauss(r))) - 1;
        snprintf(dense[j], sizeof dense[j], "%.0f", x);
        logit += 0.25 * gauss(seed, 1000 + (uint64_t)j, 0, 0) * log1p(x > 0 ? x : 0);
    }
    for (int f = 0; f < PSG_CTR_FIELDS; f++) {
        id[f] = -1;
        cat[f][0] = '\0';
        if (rng_unit(r) < 0.02) continue; /* empty: bucket 0, no weight */
        id[f] = zipf_draw(z, f, rng_unit(r));
        uint32_t hex = (uint32_t)mix64(((uint64_t)f << 40) ^ (uint64_t)id[f] ^ 0x5bd1e995u);
        snprintf(cat[f], sizeof cat[f], "%08x", hex);
        if (id[f] < SIGNAL_RANK) logit += 0.5 * gauss(seed, (uint64_t)f, (uint64_t)id[f], 99);
    }
    /* interactions of neighbouring fields: what the deep part can learn beyond the wide */
    for (int f = 0; f + 1 < PSG_CTR_FIELDS; f += 2) {
        if (id[f] < 0 || id[f + 1] < 0 || id[f] >= SIGNAL_RANK || id[f + 1] >= SIGNAL_RANK) continue;
        double dot = 0;
        for (int k = 0; k < EMB; k++)
            dot += gauss(seed, (uint64_t)f, (uint64_t)id[f], (uint64_t)k) *
                   gauss(seed, (uint64_t)f + 1, (uint64_t)id[f + 1], (uint64_t)k);
        logit += 0.35 * dot;
    }
    double p = 1.0 / (1.0 + exp(-logit));
    *label = rng_unit(r) < p;
    int at = snprintf(buf, size, "%d", *label);
    for (int j = 0; j < PSG_CTR_DENSE; j++) at += snprintf(buf + at, size - (size_t)at, "\t%s", dense[j]);
    for (int f = 0; f < PSG_CTR_FIELDS; f++) at += snprintf(buf + at, size - (size_t)at, "\t%s", cat[f]);
    snprintf(buf + at, size - (size_t)at, "\n");
    return p;
}

int psg_ctr_synthesize(const char *path, int64_t rows, uint64_t seed, FILE *out, double *planted_auc) {
    if (rows < 10) return psg_error_set("--rows %lld: at least 10", (long long)rows);
    size_t plen = strlen(path);
    bool gz = plen > 3 && !strcmp(path + plen - 3, ".gz");
    gzFile w = gzopen(path, gz ? "wb6" : "wT");
    if (!w) return psg_error_set("%s: %s", path, strerror(errno ? errno : EIO));
    zipf_t z;
    int64_t held = rows - rows * 9 / 10;
    float *p = malloc(sizeof(float) * (size_t)held), *y = malloc(sizeof(float) * (size_t)held);
    int rc = p && y ? zipf_init(&z) : psg_error_set("out of memory");
    rng_t r = {mix64(seed) ^ 0x243f6a8885a308d3ull};
    double clicks = 0, ll = 0;
    char line[1024];
    for (int64_t i = 0; rc == 0 && i < rows; i++) {
        int label;
        double pi = draw_row(seed, &r, &z, line, sizeof line, &label);
        clicks += label;
        if (gzputs(w, line) < 0) rc = psg_error_set("%s: write failed", path);
        int64_t k = i - (rows - held);
        if (k >= 0) {
            p[k] = (float)pi;
            y[k] = (float)label;
            ll -= label ? log(pi) : log(1 - pi);
        }
    }
    if (gzclose(w) != Z_OK && rc == 0) rc = psg_error_set("%s: write failed", path);
    if (rc == 0) {
        double auc = psg_auc(p, y, held);
        if (planted_auc) *planted_auc = auc;
        if (out)
            fprintf(out, "{\"event\":\"ctr_data\",\"file\":\"%s\",\"rows\":%lld,\"seed\":%llu,\"click_rate\":%.4f,"
                         "\"held_out_rows\":%lld,\"planted_auc\":%.4f,\"planted_logloss\":%.4f}\n",
                    path, (long long)rows, (unsigned long long)seed, clicks / (double)rows, (long long)held, auc,
                    ll / (double)held);
    }
    if (p && y) zipf_free(&z);
    free(p);
    free(y);
    return rc;
}
