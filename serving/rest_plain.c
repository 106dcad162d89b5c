/* The plain predict body (serving/rest_plain.h): {"instances": [row, ...]} read straight into
 * the tensor, and a big body read by two threads, each from one end of a split point. */
#include "serving/rest_plain.h"

#include "core/json.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Bodies from this size are read by two threads (an image of 299 x 299 x 3 is ~2.3 MB of
 * text and ~2.6 ms of reading: on the path of every request of one connection). The fuzz
 * build sets it low, so that its harness checks the two readers against the JSON tree. */
#ifndef PSG_REST_SPLIT_BYTES
#define PSG_REST_SPLIT_BYTES ((size_t)1 << 20)
#endif

static atomic_llong split_reads;

int64_t psg_rest_plain_split_reads(void) {
    return atomic_load(&split_reads);
}

/* A reader of nested arrays of numbers in the input's shape from p: the layout nearly every
 * client sends, read without building a JSON tree (the tree's nodes and the walk over them
 * were most of a served image's parsing). The numbers are read as psg_json_parse reads them,
 * so the tensor is the same. */
typedef struct {
    const char *p;
    const int64_t *dims;
    int rank;
    int64_t row;      /* floats an instance (dims[1..rank) multiplied) */
    float *v;         /* the floats read so far */
    int64_t at, cap;  /* elements in v, and its room */
    const char *stop; /* where another thread reads on from: an instance's element (dims[1]) */
    bool stopped;     /* this reader came to stop, after `stop_row` of that instance's elements */
    int64_t stop_row;
    bool oom;
} plain_t;

static void plain_ws(plain_t *x) {
    while (*x->p == ' ' || *x->p == '\t' || *x->p == '\n' || *x->p == '\r') x->p++;
}

static bool plain_char(plain_t *x, char c) {
    plain_ws(x);
    if (*x->p != c) return false;
    x->p++;
    return true;
}

/* Room for n more floats. */
static bool plain_room(plain_t *x, int64_t n) {
    if (x->at + n <= x->cap) return true;
    int64_t cap = x->cap ? 2 * x->cap : n;
    while (cap < x->at + n) cap *= 2;
    float *v = cap <= ((int64_t)1 << 31) ? realloc(x->v, sizeof(float) * (size_t)cap) : NULL;
    if (!v) {
        x->oom = cap <= ((int64_t)1 << 31); /* too many: the general reader says so */
        return false;
    }
    x->v = v;
    x->cap = cap;
    return true;
}

/* A value of shape dims[d..rank) at x->p, into v[at...] (room already made); at an
 * instance's element that starts at x->stop, it stops (x->stopped) instead. */
static bool plain_value(plain_t *x, int d) {
    plain_ws(x);
    if (d == x->rank) {
        bool integral;
        double v;
        const char *why, *end = psg_json_read_number(x->p, &v, &integral, &why);
        if (!end) return false;
        x->v[x->at++] = (float)v;
        x->p = end;
        return true;
    }
    if (!plain_char(x, '[')) return false;
    for (int64_t i = 0; i < x->dims[d]; i++) {
        if (i > 0 && !plain_char(x, ',')) return false;
        if (d == 1 && x->stop) {
            plain_ws(x);
            if (x->p == x->stop) {
                x->stopped = true;
                x->stop_row = i;
                return true;
            }
        }
        if (!plain_value(x, d + 1)) return false;
    }
    return plain_char(x, ']');
}

/* Instances from x->p (after the list's '[' or a ','): "inst, inst, ...] }" to the end,
 * counted in *rows; with x->stop, until it stops there. */
static bool plain_instances(plain_t *x, int64_t *rows) {
    do {
        if (!plain_room(x, x->row) || !plain_value(x, 1)) return false;
        if (x->stopped) return true;
        (*rows)++;
    } while (plain_char(x, ','));
    if (!plain_char(x, ']') || !plain_char(x, '}')) return false;
    plain_ws(x);
    return *x->p == 0;
}

/* The second reader: from an instance's element at x->p, the rest of that instance
 * (`elements` of them), then the instances after it to the end (*rows of them). */
typedef struct {
    plain_t x;
    int64_t elements, rows;
    bool ok;
} tail_t;

static void *read_tail(void *arg) {
    tail_t *t = arg;
    plain_t *x = &t->x;
    int64_t elem = x->row / x->dims[1];
    bool ok = true;
    do { /* at most an instance's count: the first reader checks that the two add up */
        ok = t->elements < x->dims[1] && plain_room(x, elem) && plain_value(x, 2);
        t->elements += ok;
    } while (ok && plain_char(x, ','));
    t->ok =
        ok && plain_char(x, ']') &&
        (plain_char(x, ',') ? plain_instances(x, &t->rows)
                            : plain_char(x, ']') && plain_char(x, '}') && (plain_ws(x), !*x->p));
    return NULL;
}

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* Where a second reader can start: the first '[' at or after `from` (within 64 KiB) that
 * opens an instance's element of a body of rank `rank`, told by what follows it: rank - 2
 * brackets, then a number. NULL when there is none. Only the brackets are looked at: the
 * readers check the grammar. */
static const char *split_point(const char *from, int rank) {
    for (const char *p = from; *p && p < from + (64 << 10); p++) {
        if (*p == '"') return NULL; /* a string inside the list: not a plain body */
        if (*p != '[') continue;
        const char *q = p;
        int run = 0;
        while (*q == '[') q = skip_ws(q + 1), run++;
        if (run == rank - 2 && (*q == '-' || (*q >= '0' && *q <= '9'))) return p;
        p = q - 1; /* the brackets of this run all open deeper or shallower */
    }
    return NULL;
}

/* The body from the list's first instance at x->p, read by this thread up to a split point
 * near the middle and by a second from there; the floats of both, in order, in x->v.
 * 1: read (*rows instances); 0: not plain (or not split: *tried false); -1: out of memory. */
static int read_split(plain_t *x, const char *text, size_t len, int64_t *rows, bool *tried) {
    *tried = false;
    if (x->rank < 3 || len < PSG_REST_SPLIT_BYTES) return 0;
    const char *at = split_point(text + len / 2, x->rank);
    if (!at) return 0;
    tail_t t = {.x = *x};
    t.x.p = at;
    t.x.v = NULL;
    t.x.at = t.x.cap = 0;
    pthread_t th;
    if (pthread_create(&th, NULL, read_tail, &t) != 0) return 0;
    *tried = true;
    x->stop = at;
    bool ok = plain_instances(x, rows);
    pthread_join(th, NULL);
    int rc = 0;
    if (x->oom || t.x.oom) {
        rc = -1;
    } else if (ok && t.ok && x->stopped && x->stop_row + t.elements == x->dims[1] &&
               plain_room(x, t.x.at)) {
        memcpy(x->v + x->at, t.x.v, sizeof(float) * (size_t)t.x.at);
        x->at += t.x.at;
        *rows += 1 + t.rows; /* the instance split in two, and those after it */
        atomic_fetch_add(&split_reads, 1);
        rc = 1;
    } else if (x->oom) {
        rc = -1;
    }
    free(t.x.v);
    return rc;
}

int psg_rest_parse_plain(const psg_rest_signature_t *sig, const char *text, size_t len,
                         psg_rest_request_t *r) {
    const psg_servable_tensor_t *in = &sig->in[0];
    int64_t row = 1;
    for (int d = 1; d < in->shape.rank; d++) row *= in->shape.dims[d] > 0 ? in->shape.dims[d] : 0;
    if (sig->n_in != 1 || in->dtype != PSG_DT_F32 || in->shape.rank < 1 || row <= 0 ||
        len > PSG_JSON_MAX_BYTES)
        return 0;
    plain_t x = {.p = text, .dims = in->shape.dims, .rank = in->shape.rank, .row = row};
    if (!plain_char(&x, '{') || !plain_char(&x, '"') || strncmp(x.p, "instances\"", 10)) return 0;
    x.p += 10;
    if (!plain_char(&x, ':') || !plain_char(&x, '[')) return 0;
    const char *first = x.p;
    int64_t rows = 0;
    bool tried;
    int rc = read_split(&x, text, len, &rows, &tried);
    if (rc == 0 && tried) { /* not read in two: from the start again, in one */
        x = (plain_t){.p = first,
                      .dims = in->shape.dims,
                      .rank = in->shape.rank,
                      .row = row,
                      .v = x.v,
                      .cap = x.cap};
        rows = 0;
    }
    if (rc == 0) rc = plain_instances(&x, &rows) ? 1 : x.oom ? -1 : 0;
    if (rc == 1) {
        psg_shape_t s = in->shape;
        s.dims[0] = rows;
        if ((r->inputs[0] = psg_tensor_new(PSG_DT_F32, &s))) {
            memcpy(r->inputs[0]->data, x.v, sizeof(float) * (size_t)x.at);
            r->batch = rows;
        } else {
            rc = -1;
        }
    }
    free(x.v);
    return rc;
}
