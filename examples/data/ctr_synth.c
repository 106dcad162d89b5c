/* A synthetic click log in the Criteo format, drawn from a planted wide-and-deep model
 * with a fixed seed: Zipf ids per field (the rare ones folded into one value), log-normal
 * counts, a click probability from wide weights, a linear term and an MLP over planted
 * embeddings. The planted model's own AUC on the held-out tail is the best a learner can
 * reach. Not the reader. */
#include "psgraph/criteo.h"
#include "psgraph/error.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in (0, 1) from a 64-bit value */
static double unit(uint64_t h) {
    return ((double)(h >> 11) + 0.5) / 9007199254740992.0;
}

/* A standard normal that is a pure function of (seed, a, b, c): the planted weights are
 * never stored. */
static double gauss(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t h = mix64(seed ^ mix64(a * 0x100000001b3ull ^ mix64(b * 31 + c)));
    return sqrt(-2.0 * log(unit(h))) * cos(6.283185307179586 * unit(mix64(h)));
}

typedef struct {
    uint64_t s;
} rng_t;

static double rng_unit(rng_t *r) {
    return unit(mix64(r->s++));
}

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
        if (!(z->cdf[f] = malloc(sizeof(double) * (size_t)n)))
            return psg_error_set("out of memory");
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
        if (z->cdf[f][mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The planted wide-and-deep model: one the trained model (examples/wide_deep.c) can
 * represent exactly, at a smaller size (docs/sparse.md, "Synthetic data"). Wide: a weight
 * per value of each field and a linear term of log(1 + x) of the integers. Deep: each
 * value's EMB-dim embedding (the trained model's 16 dims hold it and zeros) into an MLP
 * concat(embeddings) -> HIDDEN (ReLU) -> 1, which the trained 256 -> 128 -> 1 holds (its
 * first HIDDEN units of each layer, the second passing the first's non-negative outputs
 * through: ReLU(h) = h). */
#define EMB 4
#define HIDDEN 8
/* A field keeps its FREQUENT most frequent ids; the rarer ones are written as one "rare"
 * value of the field (id FREQUENT), as Criteo preprocessing folds categories seen fewer
 * than a threshold of times into one: the least frequent value kept is seen about 2 900
 * times in 900 000 training rows, so every planted parameter can be learned in 2 epochs. */
#define FREQUENT 30
#define WIDE_SCALE 0.5 /* the wide weights' standard deviation */
#define BIAS -1.3

typedef struct {
    float wide[PSG_CTR_FIELDS][FREQUENT + 1];
    float emb[PSG_CTR_FIELDS][FREQUENT + 1][EMB];
    float dense[PSG_CTR_DENSE];
    float w1[HIDDEN][PSG_CTR_FIELDS][EMB], b1[HIDDEN], w2[HIDDEN];
} planted_t;

/* The planted weights, pure functions of the seed. */
static void planted_init(planted_t *m, uint64_t seed) {
    for (int f = 0; f < PSG_CTR_FIELDS; f++)
        for (int i = 0; i <= FREQUENT; i++) {
            m->wide[f][i] = (float)(WIDE_SCALE * gauss(seed, (uint64_t)f, (uint64_t)i, 99));
            for (int k = 0; k < EMB; k++)
                m->emb[f][i][k] = (float)gauss(seed, (uint64_t)f, (uint64_t)i, (uint64_t)k);
        }
    for (int j = 0; j < PSG_CTR_DENSE; j++)
        m->dense[j] = (float)(0.25 * gauss(seed, 1000 + (uint64_t)j, 0, 0));
    /* a hidden unit's input has a variance of about 2 */
    double s = 1.0 / sqrt((double)(PSG_CTR_FIELDS * EMB) / 2.0);
    for (int h = 0; h < HIDDEN; h++) {
        for (int f = 0; f < PSG_CTR_FIELDS; f++)
            for (int k = 0; k < EMB; k++)
                m->w1[h][f][k] =
                    (float)(s * gauss(seed, 2000 + (uint64_t)h, (uint64_t)f, (uint64_t)k));
        m->b1[h] = (float)(0.5 * gauss(seed, 3000 + (uint64_t)h, 0, 0));
        m->w2[h] = (float)gauss(seed, 4000 + (uint64_t)h, 0, 0);
    }
}

/* The planted logit of one row: id[f] is the field's rank, -1 when empty. */
static double planted_logit(const planted_t *m, const double *lx, const int64_t *id) {
    double logit = BIAS;
    for (int j = 0; j < PSG_CTR_DENSE; j++) logit += m->dense[j] * lx[j];
    double h[HIDDEN];
    for (int k = 0; k < HIDDEN; k++) h[k] = m->b1[k];
    for (int f = 0; f < PSG_CTR_FIELDS; f++) {
        if (id[f] < 0) continue; /* empty: bucket 0, no weight */
        logit += m->wide[f][id[f]];
        for (int k = 0; k < HIDDEN; k++)
            for (int e = 0; e < EMB; e++) h[k] += m->w1[k][f][e] * m->emb[f][id[f]][e];
    }
    for (int k = 0; k < HIDDEN; k++) logit += m->w2[k] * (h[k] > 0 ? h[k] : 0);
    return logit;
}

/* One row: writes its line into buf and returns the planted click probability. */
static double draw_row(const planted_t *m, rng_t *r, const zipf_t *z, char *buf, size_t size,
                       int *label) {
    int64_t id[PSG_CTR_FIELDS];
    double lx[PSG_CTR_DENSE];
    char dense[PSG_CTR_DENSE][24], cat[PSG_CTR_FIELDS][12];
    for (int j = 0; j < PSG_CTR_DENSE; j++) {
        dense[j][0] = '\0';
        lx[j] = 0;
        if (rng_unit(r) < 0.1) continue; /* empty */
        double x = floor(exp(0.5 + 0.25 * j + rng_gauss(r))) - 1;
        snprintf(dense[j], sizeof dense[j], "%.0f", x);
        lx[j] = log1p(x > 0 ? x : 0);
    }
    for (int f = 0; f < PSG_CTR_FIELDS; f++) {
        id[f] = -1;
        cat[f][0] = '\0';
        if (rng_unit(r) < 0.02) continue; /* empty: bucket 0, no weight */
        id[f] = zipf_draw(z, f, rng_unit(r));
        if (id[f] > FREQUENT) id[f] = FREQUENT; /* the rare value */
        uint32_t hex = (uint32_t)mix64(((uint64_t)f << 40) ^ (uint64_t)id[f] ^ 0x5bd1e995u);
        snprintf(cat[f], sizeof cat[f], "%08x", hex);
    }
    double p = 1.0 / (1.0 + exp(-planted_logit(m, lx, id)));
    *label = rng_unit(r) < p;
    int at = snprintf(buf, size, "%d", *label);
    for (int j = 0; j < PSG_CTR_DENSE; j++)
        at += snprintf(buf + at, size - (size_t)at, "\t%s", dense[j]);
    for (int f = 0; f < PSG_CTR_FIELDS; f++)
        at += snprintf(buf + at, size - (size_t)at, "\t%s", cat[f]);
    snprintf(buf + at, size - (size_t)at, "\n");
    return p;
}

int psg_ctr_synthesize(const char *path, int64_t rows, uint64_t seed, FILE *out,
                       double *planted_auc) {
    if (rows < 10) return psg_error_set("--rows %lld: at least 10", (long long)rows);
    size_t plen = strlen(path);
    bool gz = plen > 3 && !strcmp(path + plen - 3, ".gz");
    gzFile w = gzopen(path, gz ? "wb6" : "wT");
    if (!w) return psg_error_set("%s: %s", path, strerror(errno ? errno : EIO));
    zipf_t z;
    planted_t *m = malloc(sizeof *m);
    if (m) planted_init(m, seed);
    int64_t held = rows - rows * 9 / 10;
    float *p = malloc(sizeof(float) * (size_t)held), *y = malloc(sizeof(float) * (size_t)held);
    int rc = p && y && m ? zipf_init(&z) : psg_error_set("out of memory");
    rng_t r = {mix64(seed) ^ 0x243f6a8885a308d3ull};
    double clicks = 0, ll = 0;
    char line[1024];
    for (int64_t i = 0; rc == 0 && i < rows; i++) {
        int label;
        double pi = draw_row(m, &r, &z, line, sizeof line, &label);
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
        char auc_s[32] =
            "null"; /* no AUC when the held-out rows are all of one label (JSON has no NaN) */
        if (isfinite(auc)) snprintf(auc_s, sizeof auc_s, "%.4f", auc);
        if (out)
            fprintf(
                out,
                "{\"event\":\"ctr_data\",\"file\":\"%s\",\"rows\":%lld,\"seed\":%llu,\"click_rate\":%.4f,"
                "\"held_out_rows\":%lld,\"planted_auc\":%s,\"planted_logloss\":%.4f}\n",
                path, (long long)rows, (unsigned long long)seed, clicks / (double)rows,
                (long long)held, auc_s, ll / (double)held);
    }
    if (p && y) zipf_free(&z);
    free(p);
    free(y);
    free(m);
    return rc;
}
