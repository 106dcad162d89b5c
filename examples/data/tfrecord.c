/* TFRecord framing with CRC-32C, a resynchronizing index of a file's
 * records, and tf.Example's protobuf read and written by hand. Not a
 * protobuf library: only Example / Features / Feature / BytesList /
 * Int64List are understood; other fields are skipped by wire type. */
#include "core/protobuf.h"
#include "psgraph/tfrecord.h"

#include "psgraph/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CRC-32C: slicing by 8 over the reflected polynomial 0x82f63b78 ---- */

static uint32_t crc_table[8][256];
static uint32_t crc_roll_out[256]; /* crc_roll's term for the byte leaving an 8-byte window */
static int crc_ready;

/* One byte into the CRC register (no inversion). */
static uint32_t crc_step(uint32_t reg, uint8_t byte) {
    return (reg >> 8) ^ crc_table[0][(reg ^ byte) & 0xff];
}

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    /* The register without inversion is linear in the bytes: raw(b1..b8) = step(raw(b0..b7), b8)
     * ^ raw(b0, 8 zeros), and the CRC of 8 bytes is raw ^ zeros8 (the CRC of 8 zero bytes). */
    uint32_t zeros8 = ~0u;
    for (int k = 0; k < 8; k++) zeros8 = crc_step(zeros8, 0);
    zeros8 = ~zeros8;
    for (int b = 0; b < 256; b++) {
        uint32_t r = crc_step(0, (uint8_t)b);
        for (int k = 0; k < 8; k++) r = crc_step(r, 0);
        crc_roll_out[b] = r ^ crc_step(zeros8, 0) ^ zeros8;
    }
    __atomic_store_n(&crc_ready, 1, __ATOMIC_RELEASE);
}

/* The CRC-32C of the 8 bytes after `out`, from crc, the CRC of the 8 bytes starting at `out`
 * (psg_crc32c(0, p, 8) -> psg_crc32c(0, p + 1, 8) with p[0] = out, p[8] = in): two table
 * lookups where computing it afresh takes eight. Only after psg_crc32c has set the tables. */
static uint32_t crc_roll(uint32_t crc, uint8_t out, uint8_t in) {
    return crc_step(crc, in) ^ crc_roll_out[out];
}

uint32_t psg_crc32c(uint32_t crc, const void *data, size_t n) {
    if (!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE))
        crc_init(); /* idempotent: a race writes equal tables */
    const uint8_t *p = data;
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
              crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

uint32_t psg_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* ---- writer ---- */

struct psg_tfrecord_writer {
    FILE *f;
    char *path;
    int failed;
};

psg_tfrecord_writer_t *psg_tfrecord_writer_new(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        psg_error_set("%s: %s", path, strerror(errno));
        return NULL;
    }
    psg_tfrecord_writer_t *w = calloc(1, sizeof *w);
    char *p = strdup(path);
    if (!w || !p) {
        fclose(f);
        free(w);
        free(p);
        psg_error_set("out of memory");
        return NULL;
    }
    w->f = f;
    w->path = p;
    return w;
}

int psg_tfrecord_write(psg_tfrecord_writer_t *w, const void *data, size_t n) {
    uint8_t head[12], foot[4];
    put_u64(head, (uint64_t)n);
    put_u32(head + 8, psg_crc32c_mask(psg_crc32c(0, head, 8)));
    put_u32(foot, psg_crc32c_mask(psg_crc32c(0, data, n)));
    if (fwrite(head, 1, 12, w->f) != 12 || (n && fwrite(data, 1, n, w->f) != n) ||
        fwrite(foot, 1, 4, w->f) != 4) {
        w->failed = 1;
        return psg_error_set("%s: write failed: %s", w->path, strerror(errno));
    }
    return 0;
}

int psg_tfrecord_writer_flush(psg_tfrecord_writer_t *w) {
    if (fflush(w->f) != 0) {
        w->failed = 1;
        return psg_error_set("%s: write failed: %s", w->path, strerror(errno));
    }
    return 0;
}

int psg_tfrecord_writer_close(psg_tfrecord_writer_t **w) {
    if (!w || !*w) return 0;
    int rc = (*w)->failed ? -1 : 0;
    if (fclose((*w)->f) != 0 && rc == 0)
        rc = psg_error_set("%s: close failed: %s", (*w)->path, strerror(errno));
    free((*w)->path);
    free(*w);
    *w = NULL;
    return rc;
}

/* ---- index ---- */

static void report(psg_report_fn fn, void *ctx, const char *path, int64_t off, const char *why) {
    if (!fn) return;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: byte %lld: %s", path, (long long)off, why);
    fn(ctx, msg);
}

int psg_tfrecord_index(const char *path, psg_tfrecord_entry_t **entries, int64_t *n,
                       psg_report_fn fn, void *ctx) {
    *entries = NULL;
    *n = 0;
    psg_tfrecord_compression_t found;
    char name[PSG_TFRECORD_NAME_MAX];
    int fd = psg_tfrecord_open(path, PSG_TFRECORD_AUTO, &found, name, sizeof name);
    if (fd < 0) return -1;
    int rc = psg_tfrecord_index_fd(fd, name, entries, n, fn, ctx);
    close(fd);
    return rc;
}

/* Record headers read through a window of the file: a resync after a corrupt header moves
 * one byte at a time, and a read call per byte made a corrupt region of N bytes N calls. */
typedef struct {
    int fd;
    uint8_t buf[1 << 16];
    int64_t start; /* the file offset of buf[0] */
    size_t len;    /* valid bytes in buf */
} header_window_t;

/* The 12 bytes at off (off + 12 <= the file's size); NULL when the read fails. */
static const uint8_t *window_at(header_window_t *w, int64_t off) {
    if (off >= w->start && off + 12 <= w->start + (int64_t)w->len) return w->buf + (off - w->start);
    ssize_t got = pread(w->fd, w->buf, sizeof w->buf, off);
    if (got < 12) return NULL;
    w->start = off;
    w->len = (size_t)got;
    return w->buf;
}

/* Moves *off (a header whose length CRC failed) to the next offset whose 8 bytes' masked
 * CRC-32C matches the 4 after them, or to the first with fewer than 12 bytes left. The CRC is
 * rolled along a byte at a time through the window rather than computed afresh at each offset;
 * it finds the offsets the per-offset check finds. -1 when a read fails (*off: where). */
static int next_valid_header(header_window_t *w, int64_t *off, int64_t size) {
    int64_t at = *off + 1;
    while (at + 12 <= size) {
        const uint8_t *first = window_at(w, at);
        if (!first) {
            *off = at;
            return -1;
        }
        int64_t end = w->start + (int64_t)w->len < size ? w->start + (int64_t)w->len : size;
        const uint8_t *p = first, *last = first + (end - 12 - at); /* the window's last header */
        uint32_t crc = psg_crc32c(0, p, 8);
        while (psg_crc32c_mask(crc) != get_u32(p + 8) && p != last) {
            crc = crc_roll(crc, p[0], p[8]);
            p++;
        }
        at += p - first;
        if (p != last || psg_crc32c_mask(crc) == get_u32(p + 8)) break;
        at++;
    }
    *off = at;
    return 0;
}

int psg_tfrecord_index_fd(int fd, const char *path, psg_tfrecord_entry_t **entries, int64_t *n,
                          psg_report_fn fn, void *ctx) {
    *entries = NULL;
    *n = 0;
    struct stat st;
    if (fstat(fd, &st) < 0) return psg_error_set("%s: %s", path, strerror(errno));
    int64_t size = st.st_size, off = 0, cap = 0;
    int problems = 0;
    bool resyncing = false;
    psg_tfrecord_entry_t *v = NULL;
    header_window_t *w = malloc(sizeof *w);
    if (!w) return psg_error_set("out of memory indexing %s", path);
    w->fd = fd;
    w->start = 0;
    w->len = 0;
    while (off + 12 <= size) {
        const uint8_t *head = window_at(w, off);
        if (!head) {
            free(v);
            free(w);
            return psg_error_set("%s: byte %lld: read failed", path, (long long)off);
        }
        uint64_t len = get_u64(head);
        if (psg_crc32c_mask(psg_crc32c(0, head, 8)) != get_u32(head + 8)) {
            report(
                fn, ctx, path, off,
                "corrupt record header (length CRC mismatch): skipping to the next valid header");
            problems++;
            resyncing = true;
            if (next_valid_header(w, &off, size) < 0) {
                free(v);
                free(w);
                return psg_error_set("%s: byte %lld: read failed", path, (long long)off);
            }
            continue;
        }
        if (size - off < 16 || len > (uint64_t)(size - off - 16)) {
            report(fn, ctx, path, off, "record runs past the end of the file (truncated): skipped");
            problems++;
            break;
        }
        resyncing = false;
        if (*n == cap) {
            cap = cap ? 2 * cap : 256;
            psg_tfrecord_entry_t *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(v);
                free(w);
                return psg_error_set("out of memory indexing %s", path);
            }
            v = nv;
        }
        v[(*n)++] = (psg_tfrecord_entry_t){off, (int64_t)len};
        off += 16 + (int64_t)len;
    }
    if (off < size && off + 12 > size && !resyncing) {
        report(fn, ctx, path, off, "trailing bytes shorter than a record header: ignored");
        problems++;
    }
    free(w);
    *entries = v;
    return problems;
}

int psg_tfrecord_read(int fd, const char *path, const psg_tfrecord_entry_t *e, uint8_t *buf) {
    size_t len = (size_t)e->length;
    uint8_t foot[4];
    ssize_t got = pread(fd, buf, len, e->offset + 12);
    if (got != (ssize_t)len || pread(fd, foot, 4, e->offset + 12 + (int64_t)len) != 4)
        return psg_error_set("%s: byte %lld: record cut short", path, (long long)e->offset);
    if (psg_crc32c_mask(psg_crc32c(0, buf, len)) != get_u32(foot))
        return psg_error_set("%s: byte %lld: corrupt record data (CRC mismatch)", path,
                             (long long)e->offset);
    return 0;
}

/* ---- protobuf wire format ---- */

typedef struct {
    const uint8_t *p, *end;
} pb_t;

static int varint(pb_t *b, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return psg_error_set("malformed tf.Example: varint runs past the end");
        uint8_t c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return 0;
    }
    return psg_error_set("malformed tf.Example: varint longer than 10 bytes");
}

/* The next field: its number, wire type, and for length-delimited fields
 * the sub-buffer; other types are consumed (value in *v for varints). */
static int field(pb_t *b, int *num, int *type, pb_t *sub, uint64_t *v) {
    uint64_t key;
    if (varint(b, &key) < 0) return -1;
    *num = (int)(key >> 3);
    *type = (int)(key & 7);
    switch (*type) {
    case 0: return varint(b, v);
    case 1:
    case 5: {
        size_t k = *type == 1 ? 8 : 4;
        if ((size_t)(b->end - b->p) < k)
            return psg_error_set("malformed tf.Example: fixed field past the end");
        b->p += k;
        return 0;
    }
    case 2: {
        uint64_t len;
        if (varint(b, &len) < 0) return -1;
        if (len > (uint64_t)(b->end - b->p))
            return psg_error_set("malformed tf.Example: field of %llu bytes past the end",
                                 (unsigned long long)len);
        sub->p = b->p;
        sub->end = b->p + len;
        b->p += len;
        return 0;
    }
    default: return psg_error_set("malformed tf.Example: wire type %d", *type);
    }
}

static const char *const box_keys[4] = {"image/object/bbox/ymin", "image/object/bbox/xmin",
                                        "image/object/bbox/ymax", "image/object/bbox/xmax"};

static float f32_le(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Feature { float_list = 2 { repeated float value = 1 (packed or fixed32) } } into
 * out->box[k]. */
static int parse_floats(pb_t f, int k, psg_example_image_t *out) {
    while (f.p < f.end) {
        int num, type;
        pb_t list = {0};
        uint64_t v;
        if (field(&f, &num, &type, &list, &v) < 0) return -1;
        if (type != 2 || num != 2) continue;
        while (list.p < list.end) {
            int n2, t2;
            pb_t packed = {0};
            if (field(&list, &n2, &t2, &packed, &v) < 0) return -1;
            if (n2 != 1) continue;
            if (t2 == 2) { /* packed: 4 bytes a value */
                for (const uint8_t *q = packed.p; q + 4 <= packed.end; q += 4)
                    if (out->n_box[k] < PSG_EXAMPLE_MAX_BOXES)
                        out->box[k][out->n_box[k]++] = f32_le(q);
            } else if (t2 == 5 && out->n_box[k] < PSG_EXAMPLE_MAX_BOXES) {
                out->box[k][out->n_box[k]++] = f32_le(list.p - 4); /* field() passed it */
            }
        }
    }
    return 0;
}

/* Feature { bytes_list = 1 | float_list = 2 | int64_list = 3 } */
static int parse_feature(pb_t f, bool want_bytes, psg_example_image_t *out) {
    while (f.p < f.end) {
        int num, type;
        pb_t list = {0};
        uint64_t v;
        if (field(&f, &num, &type, &list, &v) < 0) return -1;
        if (type != 2) continue;
        if (want_bytes && num == 1) {
            while (list.p < list.end) { /* BytesList { repeated bytes value = 1 } */
                int n2, t2;
                pb_t val = {0};
                if (field(&list, &n2, &t2, &val, &v) < 0) return -1;
                if (n2 == 1 && t2 == 2 && !out->has_encoded) {
                    out->encoded = val.p;
                    out->encoded_len = (size_t)(val.end - val.p);
                    out->has_encoded = true;
                }
            }
        } else if (!want_bytes && num == 3) {
            while (list.p < list.end) { /* Int64List { repeated int64 value = 1 (packed or not) } */
                int n2, t2;
                pb_t packed = {0};
                if (field(&list, &n2, &t2, &packed, &v) < 0) return -1;
                if (n2 != 1) continue;
                if (t2 == 2) {
                    if (packed.p < packed.end && !out->has_label) {
                        if (varint(&packed, &v) < 0) return -1;
                        out->label = (int64_t)v;
                        out->has_label = true;
                    }
                } else if (t2 == 0 && !out->has_label) {
                    out->label = (int64_t)v;
                    out->has_label = true;
                }
            }
        }
    }
    return 0;
}

int psg_example_parse(const uint8_t *buf, size_t n, const char *bytes_key, const char *int64_key,
                      psg_example_image_t *out) {
    memset(out, 0, sizeof *out);
    pb_t ex = {buf, buf + n};
    size_t bk = strlen(bytes_key), ik = strlen(int64_key);
    while (ex.p < ex.end) { /* Example { Features features = 1 } */
        int num, type;
        pb_t feats = {0};
        uint64_t v;
        if (field(&ex, &num, &type, &feats, &v) < 0) return -1;
        if (num != 1 || type != 2) continue;
        while (feats.p < feats.end) { /* Features { map<string, Feature> feature = 1 } */
            pb_t entry = {0};
            if (field(&feats, &num, &type, &entry, &v) < 0) return -1;
            if (num != 1 || type != 2) continue;
            pb_t key = {0}, value = {0};
            bool has_key = false, has_value = false;
            while (entry.p < entry.end) { /* MapEntry { string key = 1; Feature value = 2 } */
                pb_t s = {0};
                if (field(&entry, &num, &type, &s, &v) < 0) return -1;
                if (type != 2) continue;
                if (num == 1) key = s, has_key = true;
                if (num == 2) value = s, has_value = true;
            }
            if (!has_key || !has_value) continue;
            size_t kl = (size_t)(key.end - key.p);
            if (kl == bk && !memcmp(key.p, bytes_key, bk)) {
                if (parse_feature(value, true, out) < 0) return -1;
            } else if (kl == ik && !memcmp(key.p, int64_key, ik)) {
                if (parse_feature(value, false, out) < 0) return -1;
            } else {
                for (int k = 0; k < 4; k++)
                    if (kl == strlen(box_keys[k]) && !memcmp(key.p, box_keys[k], kl) &&
                        parse_floats(value, k, out) < 0)
                        return -1;
            }
        }
    }
    out->n_boxes = PSG_EXAMPLE_MAX_BOXES;
    for (int k = 0; k < 4; k++)
        if (out->n_box[k] < out->n_boxes) out->n_boxes = out->n_box[k];
    return 0;
}

/* ---- writing a tf.Example ---- */

/* key (num, LEN) and the length */
static void put_len(psg_pb_t *o, int num, size_t len) {
    psg_pb_tag(o, num, PSG_PB_LEN);
    psg_pb_varint(o, len);
}

static size_t len_field(size_t len) {
    return 1 + psg_pb_varint_len(len) + len;
}

/* A Features map entry { key, Feature { <list> { value: payload } } }: its
 * length, and its head written up to the payload (list 1: bytes_list, 3:
 * int64_list; the value field is 1 in both). */
static size_t entry_len(size_t klen, size_t payload) {
    return len_field(klen) + len_field(len_field(len_field(payload)));
}

static void put_entry_head(psg_pb_t *o, const char *key, size_t klen, int list, size_t payload) {
    size_t value = len_field(payload), feature = len_field(value);
    put_len(o, 1, entry_len(klen, payload));
    put_len(o, 1, klen);
    psg_pb_bytes(o, key, klen);
    put_len(o, 2, feature);
    put_len(o, list, value);
    put_len(o, 1, payload);
}

int psg_example_encode_boxes(const char *bytes_key, const char *int64_key,
                             const psg_example_image_t *ex, uint8_t **out, size_t *out_len) {
    size_t bk = strlen(bytes_key), ik = strlen(int64_key), fl = 4 * (size_t)ex->n_boxes;
    size_t packed = psg_pb_varint_len((uint64_t)ex->label);
    size_t total = len_field(entry_len(bk, ex->encoded_len)) + len_field(entry_len(ik, packed));
    for (int k = 0; k < 4 && ex->n_boxes > 0; k++)
        total += len_field(entry_len(strlen(box_keys[k]), fl));
    psg_pb_t o = {0};
    put_len(&o, 1, total);
    put_entry_head(&o, bytes_key, bk, 1, ex->encoded_len);
    psg_pb_bytes(&o, ex->encoded, ex->encoded_len);
    put_entry_head(&o, int64_key, ik, 3, packed);
    psg_pb_varint(&o, (uint64_t)ex->label);
    for (int k = 0; k < 4 && ex->n_boxes > 0; k++) { /* Feature { float_list { packed } } */
        put_entry_head(&o, box_keys[k], strlen(box_keys[k]), 2, fl);
        for (int i = 0; i < ex->n_boxes; i++) {
            uint32_t u;
            memcpy(&u, &ex->box[k][i], sizeof u);
            uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
            psg_pb_bytes(&o, le, 4);
        }
    }
    if (o.oom) {
        free(o.b);
        return psg_error_set("out of memory encoding a tf.Example");
    }
    *out = o.b;
    *out_len = o.len;
    return 0;
}

int psg_example_encode(const char *bytes_key, const uint8_t *bytes, size_t bytes_len,
                       const char *int64_key, int64_t value, uint8_t **out, size_t *out_len) {
    size_t bk = strlen(bytes_key), ik = strlen(int64_key);
    size_t packed = psg_pb_varint_len((uint64_t)value);
    psg_pb_t o = {0};
    put_len(&o, 1, len_field(entry_len(bk, bytes_len)) + len_field(entry_len(ik, packed)));
    /* feature 1: { key, Feature { bytes_list { value } } } */
    put_entry_head(&o, bytes_key, bk, 1, bytes_len);
    psg_pb_bytes(&o, bytes, bytes_len);
    /* feature 2: { key, Feature { int64_list { packed value } } } */
    put_entry_head(&o, int64_key, ik, 3, packed);
    psg_pb_varint(&o, (uint64_t)value);
    if (o.oom) {
        free(o.b);
        return psg_error_set("out of memory encoding a tf.Example");
    }
    *out = o.b;
    *out_len = o.len;
    return 0;
}
