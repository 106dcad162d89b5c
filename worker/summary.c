/* TensorBoard event files behind psgraph/summary.h: the few protobuf fields
 * of Event / Summary / Summary.Value / HistogramProto that scalars and histograms
 * need, encoded by hand, each Event one TFRecord (psgraph/tfrecord.h). Not a general
 * protobuf encoder. */
#include "core/protobuf.h"
#include "psgraph/checkpoint.h"
#include "psgraph/summary.h"

#include "psgraph/error.h"
#include "psgraph/tfrecord.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct psg_summary_writer {
    psg_tfrecord_writer_t *rec;
    char *path;
};

/* ---- protobuf by hand (core/protobuf.h) ---- */

/* Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 | summary = 5} */
static void event_header(psg_pb_t *e, int64_t step) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    uint64_t bits;
    memcpy(&bits, &wall, 8);
    psg_pb_tag(e, 1, 1);
    psg_pb_fixed(e, bits, 8);
    psg_pb_tag(e, 2, 0);
    psg_pb_varint(e, (uint64_t)step);
}

/* One Event as one TFRecord, flushed so that TensorBoard sees it. */
static int write_record(psg_summary_writer_t *w, const psg_pb_t *data) {
    if (data->oom) return psg_error_set("%s: out of memory", w->path);
    if (psg_tfrecord_write(w->rec, data->b, data->len) < 0) return -1;
    return psg_tfrecord_writer_flush(w->rec);
}

psg_summary_writer_t *psg_summary_writer_new(const char *logdir) {
    if (psg_logdir_make(logdir) < 0) return NULL;
    psg_summary_writer_t *w = calloc(1, sizeof *w);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    size_t n = strlen(logdir) + strlen(host) + 96;
    if (w) w->path = malloc(n);
    if (!w || !w->path) {
        free(w);
        psg_error_set("out of memory");
        return NULL;
    }
    snprintf(w->path, n, "%s/events.out.tfevents.%010lld.%s.%ld", logdir, (long long)time(NULL),
             host, (long)getpid());
    if (!(w->rec = psg_tfrecord_writer_new(w->path))) {
        psg_summary_writer_destroy(&w);
        return NULL;
    }
    psg_pb_t e = {0};
    event_header(&e, 0);
    static const char version[] = "brain.Event:2";
    psg_pb_len_field(&e, 3, version, sizeof version - 1);
    int rc = write_record(w, &e);
    free(e.b);
    if (rc < 0) psg_summary_writer_destroy(&w);
    return w;
}

void psg_summary_writer_destroy(psg_summary_writer_t **pw) {
    if (!pw || !*pw) return;
    psg_summary_writer_t *w = *pw;
    psg_tfrecord_writer_close(&w->rec);
    free(w->path);
    free(w);
    *pw = NULL;
}

const char *psg_summary_writer_path(const psg_summary_writer_t *w) {
    return w->path;
}

int psg_summary_scalars(psg_summary_writer_t *w, int64_t step, int n, const char *const *tags,
                        const float *values) {
    psg_pb_t sum = {0}, val = {0}, e = {0};
    for (int i = 0; i < n; i++) {
        /* Summary.Value{tag = 1 (string), simple_value = 2 (float)} */
        val.len = 0;
        psg_pb_len_field(&val, 1, tags[i], strlen(tags[i]));
        uint32_t bits;
        memcpy(&bits, &values[i], 4);
        psg_pb_tag(&val, 2, 5);
        psg_pb_fixed(&val, bits, 4);
        if (val.oom) sum.oom = true;
        /* Summary{repeated Value value = 1} */
        psg_pb_len_field(&sum, 1, val.b, val.len);
    }
    event_header(&e, step);
    if (sum.oom) e.oom = true;
    psg_pb_len_field(&e, 5, sum.b, sum.len);
    int rc = write_record(w, &e);
    free(sum.b);
    free(val.b);
    free(e.b);
    return rc;
}

int psg_summary_scalar(psg_summary_writer_t *w, int64_t step, const char *tag, float value) {
    return psg_summary_scalars(w, step, 1, &tag, &value);
}

/* TensorFlow's default histogram buckets (core/lib/histogram): limits 1e-12 * 1.1^k up to
 * 1e20, mirrored below 0, then DBL_MAX; a value goes to the first limit above it. */
#define HIST_MAX_LIMITS 1600

static int default_limits(double *lim) {
    double pos[HIST_MAX_LIMITS / 2];
    int np = 0;
    for (double v = 1e-12; v < 1e20; v *= 1.1) pos[np++] = v;
    pos[np++] = DBL_MAX;
    int n = 0;
    for (int i = np - 1; i >= 0; i--) lim[n++] = -pos[i];
    lim[n++] = 0.0;
    for (int i = 0; i < np; i++) lim[n++] = pos[i];
    return n;
}

/* The first limit above v (upper_bound). */
static int bucket_of(const double *lim, int n, double v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (lim[mid] > v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo < n ? lo : n - 1;
}

static void pb_double(psg_pb_t *p, int field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    psg_pb_tag(p, field, 1);
    psg_pb_fixed(p, bits, 8);
}

/* HistogramProto{min 1, max 2, num 3, sum 4, sum_squares 5, bucket_limit 6, bucket 7},
 * runs of empty buckets folded into one, as TensorFlow's EncodeToProto. */
static void histogram_proto(psg_pb_t *h, const float *values, int64_t n, double *lim, int nl,
                            double *count) {
    double mn = DBL_MAX, mx = -DBL_MAX, sum = 0, sq = 0;
    int64_t num = 0;
    for (int i = 0; i < nl; i++) count[i] = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = values[i];
        if (isnan(v)) continue; /* TensorFlow's summary refuses NaN; it is left out here */
        count[bucket_of(lim, nl, v)] += 1;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        sum += v;
        sq += v * v;
        num++;
    }
    pb_double(h, 1, mn);
    pb_double(h, 2, mx);
    pb_double(h, 3, (double)num);
    pb_double(h, 4, sum);
    pb_double(h, 5, sq);
    psg_pb_t limits = {0}, buckets = {0};
    for (int i = 0; i < nl;) {
        double end = lim[i], c = count[i++];
        while (c <= 0 && i < nl && count[i] <= 0) end = lim[i++];
        uint64_t b;
        memcpy(&b, &end, 8);
        psg_pb_fixed(&limits, b, 8);
        memcpy(&b, &c, 8);
        psg_pb_fixed(&buckets, b, 8);
    }
    if (limits.oom || buckets.oom) h->oom = true;
    psg_pb_len_field(h, 6, limits.b, limits.len); /* packed */
    psg_pb_len_field(h, 7, buckets.b, buckets.len);
    free(limits.b);
    free(buckets.b);
}

int psg_summary_histogram(psg_summary_writer_t *w, int64_t step, const char *tag,
                          const float *values, int64_t n) {
    double *lim = malloc(sizeof(double) * HIST_MAX_LIMITS * 2);
    if (!lim) return psg_error_set("out of memory");
    int nl = default_limits(lim);
    double *count = lim + HIST_MAX_LIMITS;
    psg_pb_t h = {0}, val = {0}, sum = {0}, e = {0};
    histogram_proto(&h, values, n, lim, nl, count);
    /* Summary.Value{tag = 1, histo = 5} */
    psg_pb_len_field(&val, 1, tag, strlen(tag));
    psg_pb_len_field(&val, 5, h.b, h.len);
    psg_pb_len_field(&sum, 1, val.b, val.len);
    event_header(&e, step);
    if (h.oom || val.oom || sum.oom) e.oom = true;
    psg_pb_len_field(&e, 5, sum.b, sum.len);
    int rc = write_record(w, &e);
    free(lim);
    free(h.b);
    free(val.b);
    free(sum.b);
    free(e.b);
    return rc;
}
