/* The Criteo-format reader: lines of 40 tab-separated fields through zlib (plain or gzip),
 * a file or a folder of files, into label, dense and hashed-id arrays; and the AUC the
 * trainer and the generator report. Not the generator (examples/data/ctr_synth.c). */
#include "psgraph/criteo.h"
#include "psgraph/error.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define FIELDS (1 + PSG_CTR_DENSE + PSG_CTR_FIELDS)

int64_t psg_ctr_hash(const char *s, size_t len, int64_t buckets) {
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        int c = s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        /* (v * 16 + d) mod buckets, exact for any length: v < buckets <= 2^40 */
        v = (v * 16 + (uint64_t)d) % (uint64_t)buckets;
    }
    return (int64_t)v;
}

typedef struct {
    psg_ctr_data_t *d;
    int64_t cap;
} grow_t;

static int grow(grow_t *g) {
    int64_t cap = g->cap ? g->cap * 2 : 65536;
    float *l = realloc(g->d->labels, (size_t)cap * sizeof(float));
    if (l) g->d->labels = l;
    float *x = realloc(g->d->dense, (size_t)cap * PSG_CTR_DENSE * sizeof(float));
    if (x) g->d->dense = x;
    int64_t *ids = realloc(g->d->ids, (size_t)cap * PSG_CTR_FIELDS * sizeof(int64_t));
    if (ids) g->d->ids = ids;
    if (!l || !x || !ids) return psg_error_set("out of memory (%lld rows)", (long long)cap);
    g->cap = cap;
    return 0;
}

/* Parses one line (without its newline) into row r. */
static int parse_line(char *line, psg_ctr_data_t *d, int64_t r, const char *path, int64_t ln) {
    char *f[FIELDS];
    int n = 0;
    for (char *p = line;; p++) {
        if (n < FIELDS) f[n] = p;
        n++;
        p = strchr(p, '\t');
        if (!p) break;
        *p = '\0';
    }
    if (n != FIELDS)
        return psg_error_set("%s:%lld: %d fields, expected %d", path, (long long)ln, n, FIELDS);
    if (strcmp(f[0], "0") && strcmp(f[0], "1"))
        return psg_error_set("%s:%lld: label '%s' is not 0 or 1", path, (long long)ln, f[0]);
    d->labels[r] = f[0][0] == '1' ? 1.0f : 0.0f;
    for (int j = 0; j < PSG_CTR_DENSE; j++) {
        const char *s = f[1 + j];
        double x = 0;
        if (*s) {
            char *end;
            errno = 0;
            x = strtod(s, &end);
            if (errno || *end || !isfinite(x))
                return psg_error_set("%s:%lld: integer feature %d '%s' is not a number", path,
                                     (long long)ln, j + 1, s);
        }
        d->dense[r * PSG_CTR_DENSE + j] = (float)log1p(x > 0 ? x : 0);
    }
    for (int k = 0; k < PSG_CTR_FIELDS; k++) {
        const char *s = f[1 + PSG_CTR_DENSE + k];
        int64_t h = psg_ctr_hash(s, strlen(s), d->buckets);
        if (h < 0)
            return psg_error_set("%s:%lld: categorical feature %d '%s' is not hexadecimal", path,
                                 (long long)ln, k + 1, s);
        d->ids[r * PSG_CTR_FIELDS + k] = h + (int64_t)k * d->buckets;
    }
    return 0;
}

static int read_file(const char *path, grow_t *g) {
    gzFile z = gzopen(path, "rb");
    if (!z) return psg_error_set("%s: %s", path, strerror(errno ? errno : ENOENT));
    gzbuffer(z, 1 << 20);
    size_t cap = 4096;
    char *line = malloc(cap);
    int rc = line ? 0 : psg_error_set("out of memory");
    int64_t ln = 0;
    while (rc == 0) {
        size_t len = 0;
        int c = -1;
        while ((c = gzgetc(z)) >= 0 && c != '\n') {
            if (len + 1 >= cap) {
                char *nl = realloc(line, cap *= 2);
                if (!nl) {
                    rc = psg_error_set("out of memory");
                    break;
                }
                line = nl;
            }
            line[len++] = (char)c;
        }
        if (rc < 0 || (c < 0 && len == 0)) break;
        ln++;
        if (len && line[len - 1] == '\r') len--;
        line[len] = '\0';
        if (g->d->rows == g->cap && grow(g) < 0)
            rc = -1;
        else if (parse_line(line, g->d, g->d->rows, path, ln) < 0)
            rc = -1;
        else
            g->d->rows++;
    }
    int err = 0;
    const char *msg = gzerror(z, &err);
    if (rc == 0 && err != Z_OK && err != Z_STREAM_END) rc = psg_error_set("%s: %s", path, msg);
    gzclose(z);
    free(line);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_dir(const char *dir, grow_t *g) {
    DIR *dp = opendir(dir);
    if (!dp) return psg_error_set("%s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(dp)) && rc == 0) {
        if (e->d_name[0] == '.') continue;
        char **nn = realloc(names, sizeof *names * (size_t)(n + 1));
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = nn ? malloc(len) : NULL;
        if (!p) {
            if (nn) names = nn;
            rc = psg_error_set("out of memory");
            break;
        }
        names = nn;
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            names[n++] = p;
        else
            free(p);
    }
    closedir(dp);
    if (rc == 0 && n == 0) rc = psg_error_set("%s: no data files in the folder", dir);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        if (rc == 0) rc = read_file(names[i], g);
        free(names[i]);
    }
    free(names);
    return rc;
}

psg_ctr_data_t *psg_ctr_load(const char *path, int64_t buckets) {
    if (buckets < 1 || buckets > ((int64_t)1 << 40)) {
        psg_error_set("buckets %lld: must be in [1, 2^40]", (long long)buckets);
        return NULL;
    }
    psg_ctr_data_t *d = calloc(1, sizeof *d);
    if (!d) {
        psg_error_set("out of memory");
        return NULL;
    }
    d->buckets = buckets;
    grow_t g = {d, 0};
    struct stat st;
    int rc;
    if (!path || stat(path, &st) < 0)
        rc = psg_error_set("%s: %s", path ? path : "(null)", strerror(errno));
    else
        rc = S_ISDIR(st.st_mode) ? read_dir(path, &g) : read_file(path, &g);
    if (rc == 0 && d->rows == 0) rc = psg_error_set("%s: no rows", path);
    if (rc < 0) psg_ctr_destroy(&d);
    return d;
}

void psg_ctr_destroy(psg_ctr_data_t **d) {
    if (!d || !*d) return;
    free((*d)->labels);
    free((*d)->dense);
    free((*d)->ids);
    free(*d);
    *d = NULL;
}

typedef struct {
    float s, y;
} scored_t;

static int cmp_scored(const void *a, const void *b) {
    float x = ((const scored_t *)a)->s, y = ((const scored_t *)b)->s;
    return (x > y) - (x < y);
}

double psg_auc(const float *scores, const float *labels, int64_t n) {
    scored_t *v = malloc(sizeof *v * (size_t)(n + 1));
    if (!v) return NAN;
    for (int64_t i = 0; i < n; i++) v[i] = (scored_t){scores[i], labels[i]};
    qsort(v, (size_t)n, sizeof *v, cmp_scored);
    double pos_rank = 0, npos = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j + 1 < n && v[j + 1].s == v[i].s) j++;
        double rank = (double)(i + j + 2) / 2.0; /* the average of ranks i+1 .. j+1 */
        for (int64_t k = i; k <= j; k++)
            if (v[k].y > 0.5f) pos_rank += rank, npos++;
        i = j + 1;
    }
    free(v);
    double nneg = (double)n - npos;
    if (npos == 0 || nneg == 0) return NAN;
    return (pos_rank - npos * (npos + 1) / 2) / (npos * nneg);
}
