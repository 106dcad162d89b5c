/* TensorBoard event files behind psgraph/summary.h: CRC-32C, TFRecord
 * framing, and the few protobuf fields of Event / Summary / Summary.Value that
 * scalars need, encoded by hand. Not a general protobuf encoder. */
#include "psgraph/summary.h"

#include "psgraph/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct psg_summary_writer {
    FILE *f;
    char *path;
};

/* ---- CRC-32C, reflected polynomial 0x82f63b78, slicing by 8 ---- */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t psg_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
            crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
            crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

uint32_t psg_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- protobuf by hand ---- */

typedef struct {
    uint8_t *b;
    size_t len, cap;
    bool oom;
} pb_t;

static void pb_bytes(pb_t *p, const void *d, size_t n) {
    if (p->oom || n == 0) return;
    if (p->len + n > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + n) cap *= 2;
        uint8_t *q = realloc(p->b, cap);
        if (!q) {
            p->oom = true;
            return;
        }
        p->b = q;
        p->cap = cap;
    }
    memcpy(p->b + p->len, d, n);
    p->len += n;
}

static void pb_varint(pb_t *p, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    pb_bytes(p, tmp, (size_t)n);
}

static void pb_fixed(pb_t *p, uint64_t v, int nbytes) {
    uint8_t tmp[8];
    for (int i = 0; i < nbytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    pb_bytes(p, tmp, (size_t)nbytes);
}

/* field number and wire type: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
static void pb_tag(pb_t *p, int field, int wire) { pb_varint(p, (uint64_t)(field << 3 | wire)); }

static void pb_len_field(pb_t *p, int field, const void *d, size_t n) {
    pb_tag(p, field, 2);
    pb_varint(p, n);
    pb_bytes(p, d, n);
}

/* Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 | summary = 5} */
static void event_header(pb_t *e, int64_t step) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    uint64_t bits;
    memcpy(&bits, &wall, 8);
    pb_tag(e, 1, 1);
    pb_fixed(e, bits, 8);
    pb_tag(e, 2, 0);
    pb_varint(e, (uint64_t)step);
}

/* One TFRecord: u64 length, masked crc32c of the length, data, masked crc32c of the data. */
static int write_record(psg_summary_writer_t *w, const pb_t *data) {
    if (data->oom) return psg_error_set("%s: out of memory", w->path);
    uint8_t head[12];
    uint64_t n = data->len;
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)(n >> (8 * i));
    uint32_t lc = psg_crc32c_mask(psg_crc32c(0, head, 8));
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(lc >> (8 * i));
    uint32_t dc = psg_crc32c_mask(psg_crc32c(0, data->b, data->len));
    uint8_t tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (uint8_t)(dc >> (8 * i));
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data->b, 1, data->len, w->f) != data->len ||
        fwrite(tail, 1, 4, w->f) != 4 || fflush(w->f) != 0)
        return psg_error_set("%s: write: %s", w->path, strerror(errno));
    return 0;
}

psg_summary_writer_t *psg_summary_writer_new(const char *logdir) {
    if (mkdir(logdir, 0755) < 0 && errno != EEXIST) {
        psg_error_set("%s: %s", logdir, strerror(errno));
        return NULL;
    }
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
    snprintf(w->path, n, "%s/events.out.tfevents.%010lld.%s.%ld", logdir, (long long)time(NULL), host,
             (long)getpid());
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        psg_error_set("%s: %s", w->path, strerror(errno));
        psg_summary_writer_destroy(&w);
        return NULL;
    }
    pb_t e = {0};
    event_header(&e, 0);
    static const char version[] = "brain.Event:2";
    pb_len_field(&e, 3, version, sizeof version - 1);
    int rc = write_record(w, &e);
    free(e.b);
    if (rc < 0) psg_summary_writer_destroy(&w);
    return w;
}

void psg_summary_writer_destroy(psg_summary_writer_t **pw) {
    if (!pw || !*pw) return;
    psg_summary_writer_t *w = *pw;
    if (w->f) fclose(w->f);
    free(w->path);
    free(w);
    *pw = NULL;
}

const char *psg_summary_writer_path(const psg_summary_writer_t *w) { return w->path; }

int psg_summary_scalars(psg_summary_writer_t *w, int64_t step, int n, const char *const *tags,
                        const float *values) {
    pb_t sum = {0}, val = {0}, e = {0};
    for (int i = 0; i < n; i++) {
        /* Summary.Value{tag = 1 (string), simple_value = 2 (float)} */
        val.len = 0;
        pb_len_field(&val, 1, tags[i], strlen(tags[i]));
        uint32_t bits;
        memcpy(&bits, &values[i], 4);
        pb_tag(&val, 2, 5);
        pb_fixed(&val, bits, 4);
        if (val.oom) sum.oom = true;
        /* Summary{repeated Value value = 1} */
        pb_len_field(&sum, 1, val.b, val.len);
    }
    event_header(&e, step);
    if (sum.oom) e.oom = true;
    pb_len_field(&e, 5, sum.b, sum.len);
    int rc = write_record(w, &e);
    free(sum.b);
    free(val.b);
    free(e.b);
    return rc;
}

int psg_summary_scalar(psg_summary_writer_t *w, int64_t step, const char *tag, float value) {
    return psg_summary_scalars(w, step, 1, &tag, &value);
}
