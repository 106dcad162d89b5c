/* TensorBoard event files behind psgraph/summary.h: the few protobuf fields
 * of Event / Summary / Summary.Value that scalars need, encoded by hand, each
 * Event one TFRecord (psgraph/tfrecord.h). Not a general protobuf encoder. */
#include "core/protobuf.h"
#include "psgraph/checkpoint.h"
#include "psgraph/summary.h"

#include "psgraph/error.h"
#include "psgraph/tfrecord.h"

#include <errno.h>
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
