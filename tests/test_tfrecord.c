/* TFRecord and ImageNet input: CRC-32C against its published check values,
 * tf.Example round trips and malformed bytes, and shards the test writes
 * itself (small JPEGs encoded with libjpeg) read back through the decode
 * pool, with corrupt records, headers and JPEGs reported by file and byte
 * offset and skipped. */
#include "tests/testutil.h"

#include <stdlib.h>
#include <unistd.h>

static char dir[256];

static void test_crc32c(void) {
    CHECK(psg_crc32c(0, "123456789", 9) == 0xe3069283u);
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof ones);
    CHECK(psg_crc32c(0, zeros, 32) == 0x8a9136aau); /* RFC 3720 B.4 */
    CHECK(psg_crc32c(0, ones, 32) == 0x62a8ab43u);
    /* continuing a CRC gives the CRC of the concatenation */
    CHECK(psg_crc32c(psg_crc32c(0, "12345", 5), "6789", 4) == 0xe3069283u);
    CHECK(psg_crc32c_mask(0) == 0xa282ead8u);
}

static void test_example_round_trip(void) {
    const uint8_t img[5] = {1, 2, 3, 0, 255};
    uint8_t *buf;
    size_t n;
    CHECK(psg_example_encode("image/encoded", img, 5, "image/class/label", 417, &buf, &n) == 0);
    psg_example_image_t ex;
    CHECK(psg_example_parse(buf, n, "image/encoded", "image/class/label", &ex) == 0);
    CHECK(ex.has_encoded && ex.encoded_len == 5 && !memcmp(ex.encoded, img, 5));
    CHECK(ex.has_label && ex.label == 417);
    /* other keys: absent, not an error */
    CHECK(psg_example_parse(buf, n, "image/other", "image/class/other", &ex) == 0);
    CHECK(!ex.has_encoded && !ex.has_label);
    /* every truncation fails cleanly or parses a prefix, never reads past the end */
    for (size_t k = 0; k < n; k++) {
        uint8_t *cut = malloc(k ? k : 1);
        memcpy(cut, buf, k);
        int rc = psg_example_parse(cut, k, "image/encoded", "image/class/label", &ex);
        CHECK(rc == 0 || strstr(psg_error_message(), "malformed tf.Example"));
        free(cut);
    }
    free(buf);
    /* an unpacked int64 list, as older writers emit: Features{feature{key, Feature{int64_list{1:
     * 7}}}} */
    const uint8_t unpacked[] = {0x0a, 0x0f, 0x0a, 0x0d, 0x0a, 0x01, 'k',  0x12, 0x08,
                                0x1a, 0x06, 0x08, 0x07, 0x08, 0x09, 0x08, 0x0b};
    CHECK(psg_example_parse(unpacked, sizeof unpacked, "x", "k", &ex) == 0);
    CHECK(ex.has_label && ex.label == 7);
    const uint8_t bad_type[] = {0x0b, 0x00};
    CHECK(psg_example_parse(bad_type, sizeof bad_type, "x", "k", &ex) < 0);
    CHECK_ERROR_HAS("wire type 3");
}

/* A w x h JPEG of one colour, for label `label`. */
static void colour_jpeg(int w, int h, int label, uint8_t **jpeg, size_t *n) {
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) {
        rgb[3 * i] = (uint8_t)(label * 60);
        rgb[3 * i + 1] = 128;
        rgb[3 * i + 2] = (uint8_t)(255 - label * 60);
    }
    CHECK(psg_jpeg_encode(rgb, w, h, 95, jpeg, n) == 0);
    free(rgb);
}

/* One record: a tf.Example with a JPEG of label (1-based as the script writes). */
static void write_example(psg_tfrecord_writer_t *w, int label, int wd, int ht) {
    uint8_t *jpeg, *ex;
    size_t jn, en;
    colour_jpeg(wd, ht, label - 1, &jpeg, &jn);
    CHECK(psg_example_encode("image/encoded", jpeg, jn, "image/class/label", label, &ex, &en) == 0);
    CHECK(psg_tfrecord_write(w, ex, en) == 0);
    free(jpeg);
    free(ex);
}

typedef struct {
    int count;
    char last[1024];
    char all[8192]; /* every message, one a line */
} reports_t;

static void on_report(void *ctx, const char *msg) {
    reports_t *r = ctx;
    r->count++;
    snprintf(r->last, sizeof r->last, "%s", msg);
    size_t used = strlen(r->all);
    snprintf(r->all + used, sizeof r->all - used, "%s\n", msg);
    printf("  reported: %s\n", msg);
}

static void test_jpeg(void) {
    uint8_t *jpeg, *rgb;
    size_t n;
    int w, h;
    colour_jpeg(24, 10, 2, &jpeg, &n);
    CHECK(psg_jpeg_decode(jpeg, n, &rgb, &w, &h) == 0);
    CHECK(w == 24 && h == 10);
    if (rgb) CHECK(abs(rgb[0] - 120) <= 3 && abs(rgb[1] - 128) <= 3 && abs(rgb[2] - 135) <= 3);
    free(rgb);
    jpeg[n / 2] ^= 0xff; /* damage in the entropy-coded data may decode; the header may not */
    memset(jpeg, 0, 4);
    CHECK(psg_jpeg_decode(jpeg, n, &rgb, &w, &h) < 0);
    CHECK_ERROR_HAS("corrupt JPEG");
    CHECK(psg_jpeg_decode(jpeg, 0, &rgb, &w, &h) < 0);
    free(jpeg);
}

/* Issue 20: a decompression bomb (a few hundred bytes whose header says 65500x65500) is
 * refused from its header, before libjpeg allocates the image (once 8.4 GB and 31 s). */
static void test_jpeg_bomb(void) {
    uint8_t *jpeg, *rgb = NULL;
    size_t n;
    int w = 0, h = 0;
    colour_jpeg(16, 16, 1, &jpeg, &n);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < n && !sof; i++)
        if (jpeg[i] == 0xff && (jpeg[i + 1] == 0xc0 || jpeg[i + 1] == 0xc2)) sof = i;
    CHECK(sof > 0);
    if (sof) {
        jpeg[sof + 5] = 0xff, jpeg[sof + 6] = 0xdc; /* height 65500 */
        jpeg[sof + 7] = 0xff, jpeg[sof + 8] = 0xdc; /* width 65500 */
        CHECK(psg_jpeg_decode(jpeg, n, &rgb, &w, &h) < 0);
        CHECK_ERROR_HAS("image 65500x65500 over the limit");
        CHECK(!rgb);
        jpeg[sof + 5] = 0x00, jpeg[sof + 6] = 0x00; /* height 0 */
        CHECK(psg_jpeg_decode(jpeg, n, &rgb, &w, &h) < 0);
    }
    free(jpeg);
}

/* The records of dir as 3 classes of size x size images, problems reported into rep. */
static psg_imagenet_t *open_dir(int size, reports_t *rep) {
    psg_imagenet_options_t o = psg_imagenet_defaults(false);
    o.image_size = size;
    o.classes = 3;
    o.report = on_report;
    o.report_ctx = rep;
    psg_imagenet_t *r = psg_imagenet_new(dir, &o);
    CHECK(r != NULL);
    return r;
}

/* Issue 20: a label of INT64_MIN minus the label offset overflowed; now a clear report. */
static void test_extreme_label(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/train-00000-of-00001", dir);
    psg_tfrecord_writer_t *w = psg_tfrecord_writer_new(path);
    uint8_t *jpeg, *ex;
    size_t jn, en;
    colour_jpeg(20, 20, 0, &jpeg, &jn);
    CHECK(psg_example_encode("image/encoded", jpeg, jn, "image/class/label", INT64_MIN, &ex, &en) ==
          0);
    CHECK(psg_tfrecord_write(w, ex, en) == 0);
    free(ex);
    free(jpeg);
    write_example(w, 1, 20, 20);
    CHECK(psg_tfrecord_writer_close(&w) == 0);
    reports_t rep = {0};
    psg_imagenet_t *r = open_dir(8, &rep);
    psg_tensor_t *img = NULL, *lab = NULL;
    if (r) CHECK(psg_dataset_slice(psg_imagenet_dataset(r), 0, 2, &img, &lab) == 0);
    CHECK(rep.count >= 1 && strstr(rep.all, "label -9223372036854775808 outside [1, 4)"));
    psg_tensor_destroy(&img);
    psg_tensor_destroy(&lab);
    psg_imagenet_destroy(&r);
    unlink(path);
}

static void test_shards_read_back(void) {
    char path[512];
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/train-0000%d-of-00002", dir, s);
        psg_tfrecord_writer_t *w = psg_tfrecord_writer_new(path);
        CHECK(w != NULL);
        for (int i = 0; i < 4; i++) write_example(w, 1 + (s * 4 + i) % 3, 32 + 8 * i, 24 + 4 * s);
        CHECK(psg_tfrecord_writer_close(&w) == 0);
    }
    psg_imagenet_options_t o = psg_imagenet_defaults(false);
    o.image_size = 16;
    o.classes = 3;
    reports_t rep = {0};
    o.report = on_report;
    o.report_ctx = &rep;
    psg_imagenet_t *r = psg_imagenet_new(dir, &o);
    CHECK(r != NULL);
    if (!r) return;
    CHECK(psg_imagenet_num_records(r) == 8);
    const psg_dataset_t *ds = psg_imagenet_dataset(r);
    psg_tensor_t *img = NULL, *lab = NULL;
    CHECK(psg_dataset_slice(ds, 0, 8, &img, &lab) == 0);
    for (int i = 0; img && i < 8; i++) {
        int label = i % 3;
        CHECK(psg_tensor_i32(lab)[i] == label);
        const float *p = psg_tensor_f32(img) + (size_t)i * 16 * 16 * 3 + (8 * 16 + 8) * 3;
        CHECK_NEAR(p[0], label * 60 * 2.0 / 255 - 1, 0.05);
        CHECK_NEAR(p[1], 128 * 2.0 / 255 - 1, 0.05);
    }
    psg_tensor_destroy(&img);
    psg_tensor_destroy(&lab);
    CHECK(rep.count == 0);
    psg_imagenet_destroy(&r);

    /* training distortions through a prefetching batch iterator: values stay in [-1, 1] */
    o.train = true;
    r = psg_imagenet_new(dir, &o);
    psg_batch_iter_options_t io = psg_batch_iter_train_options(4, 3);
    psg_batch_iter_t *it = r ? psg_batch_iter_new(psg_imagenet_dataset(r), &io) : NULL;
    CHECK(it != NULL);
    for (int b = 0; it && b < 3; b++) {
        CHECK(psg_batch_iter_next(it, &img, &lab) == 1);
        if (!img) break;
        float lo = 1e9f, hi = -1e9f;
        for (int64_t k = 0; k < psg_tensor_numel(img); k++) {
            lo = fminf(lo, psg_tensor_f32(img)[k]);
            hi = fmaxf(hi, psg_tensor_f32(img)[k]);
        }
        CHECK(lo >= -1.0f && hi <= 1.0f);
        psg_tensor_destroy(&img);
        psg_tensor_destroy(&lab);
    }
    psg_batch_iter_destroy(&it);
    psg_imagenet_destroy(&r);
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/train-0000%d-of-00002", dir, s);
        unlink(path);
    }
}

static void test_crop(void) {
    uint64_t st = 5;
    for (int i = 0; i < 200; i++) {
        int x0, y0, cw, ch;
        psg_image_random_crop(40, 30, &st, &x0, &y0, &cw, &ch);
        CHECK(x0 >= 0 && y0 >= 0 && cw >= 1 && ch >= 1 && x0 + cw <= 40 && y0 + ch <= 30);
    }
    /* a left-right ramp flipped becomes a right-left ramp */
    uint8_t rgb[4 * 1 * 3];
    for (int x = 0; x < 4; x++) rgb[3 * x] = rgb[3 * x + 1] = rgb[3 * x + 2] = (uint8_t)(x * 85);
    float out[4 * 4 * 3], flipped[4 * 4 * 3];
    psg_image_crop_resize(rgb, 4, 1, 0, 0, 4, 1, false, 4, out);
    psg_image_crop_resize(rgb, 4, 1, 0, 0, 4, 1, true, 4, flipped);
    CHECK_NEAR(out[0], -1.0, 1e-6);
    CHECK_NEAR(out[3 * 3], 1.0, 1e-6);
    CHECK_NEAR(flipped[0], 1.0, 1e-6);
}

static void test_corrupt_records_are_skipped(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/train-bad", dir);
    psg_tfrecord_writer_t *w = psg_tfrecord_writer_new(path);
    write_example(w, 1, 20, 20); /* 0: good */
    write_example(w, 2, 20, 20); /* 1: data CRC broken below */
    const char junk[] = "not a jpeg at all";
    uint8_t *ex;
    size_t en;
    CHECK(psg_example_encode("image/encoded", (const uint8_t *)junk, sizeof junk,
                             "image/class/label", 2, &ex, &en) == 0);
    CHECK(psg_tfrecord_write(w, ex, en) == 0); /* 2: not a JPEG */
    free(ex);
    write_example(w, 3, 20, 20); /* 3: header CRC broken below */
    write_example(w, 3, 20, 20); /* 4: good */
    write_example(w, 9, 20, 20); /* 5: label out of range */
    CHECK(psg_tfrecord_writer_close(&w) == 0);

    psg_tfrecord_entry_t *e;
    int64_t n;
    CHECK(psg_tfrecord_index(path, &e, &n, NULL, NULL) == 0 && n == 6);
    int64_t data1 = e[1].offset + 12 + 5, head3 = e[3].offset + 9;
    int64_t off1 = e[1].offset, off3 = e[3].offset;
    free(e);
    FILE *f = fopen(path, "r+b");
    fseek(f, (long)data1, SEEK_SET);
    fputc(0x5a, f);
    fseek(f, (long)head3, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);

    reports_t rep = {0};
    CHECK(psg_tfrecord_index(path, &e, &n, on_report, &rep) == 1);
    CHECK(n == 5); /* the broken header is skipped, the scan finds the next */
    char want[600];
    snprintf(want, sizeof want, "%s: byte %lld: corrupt record header", path, (long long)off3);
    CHECK(strstr(rep.last, want) != NULL);
    free(e);

    psg_imagenet_options_t o = psg_imagenet_defaults(true);
    o.image_size = 8;
    o.classes = 3;
    o.threads = 2;
    rep = (reports_t){0};
    o.report = on_report;
    o.report_ctx = &rep;
    psg_imagenet_t *r = psg_imagenet_new(path, &o);
    CHECK(r && psg_imagenet_num_records(r) == 5);
    if (!r) return;
    psg_tensor_t *img = NULL, *lab = NULL;
    for (int epoch = 0; epoch < 2; epoch++) {
        CHECK(psg_dataset_slice(psg_imagenet_dataset(r), 0, 5, &img, &lab) == 0);
        for (int i = 0; lab && i < 5; i++)
            CHECK(psg_tensor_i32(lab)[i] >= 0 && psg_tensor_i32(lab)[i] < 3);
        psg_tensor_destroy(&img);
        psg_tensor_destroy(&lab);
    }
    /* header (1) + data CRC + not a JPEG + label, each reported once */
    CHECK(rep.count == 4);
    CHECK(psg_imagenet_num_skipped(r) == 4);
    snprintf(want, sizeof want, "%s: byte %lld: corrupt record data", path, (long long)off1);
    psg_imagenet_destroy(&r);
    /* the data-CRC message names the file and offset */
    rep = (reports_t){0};
    o.threads = 1;
    r = psg_imagenet_new(path, &o);
    CHECK(r && psg_dataset_slice(psg_imagenet_dataset(r), 1, 1, &img, &lab) == 0);
    CHECK(strstr(rep.all, want) != NULL);
    CHECK(strstr(rep.all, "corrupt JPEG") != NULL); /* the next record, tried in its place */
    psg_tensor_destroy(&img);
    psg_tensor_destroy(&lab);
    psg_imagenet_destroy(&r);

    /* a file cut inside its last record */
    CHECK(truncate(path, (off_t)(off3 - 3)) == 0);
    rep = (reports_t){0};
    CHECK(psg_tfrecord_index(path, &e, &n, on_report, &rep) == 1);
    CHECK(strstr(rep.last, "truncated") != NULL);
    free(e);
    unlink(path);
    CHECK(psg_imagenet_new("/nonexistent/imagenet", &o) == NULL);
    CHECK_ERROR_HAS("/nonexistent/imagenet");
}

/* The index as first written, over bytes in memory: the length CRC computed afresh at every
 * byte offset of a resync. The reader's rolled CRC must find the same records and report the
 * same problems, in the same words, at the same bytes. */
static int reference_index(const uint8_t *b, int64_t size, const char *path, int64_t *offs,
                           int64_t *n, reports_t *rep) {
    int64_t off = 0;
    int problems = 0;
    bool resyncing = false;
    char msg[1024];
    *n = 0;
    while (off + 12 <= size) {
        const uint8_t *h = b + off;
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = len << 8 | h[i];
        uint32_t want =
            (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
        if (psg_crc32c_mask(psg_crc32c(0, h, 8)) != want) {
            if (!resyncing) {
                snprintf(
                    msg, sizeof msg,
                    "%s: byte %lld: corrupt record header (length CRC mismatch): skipping to the next valid header",
                    path, (long long)off);
                on_report(rep, msg);
                problems++;
                resyncing = true;
            }
            off++;
            continue;
        }
        if (size - off < 16 || len > (uint64_t)(size - off - 16)) {
            snprintf(msg, sizeof msg,
                     "%s: byte %lld: record runs past the end of the file (truncated): skipped",
                     path, (long long)off);
            on_report(rep, msg);
            problems++;
            break;
        }
        resyncing = false;
        offs[(*n)++] = off;
        off += 16 + (int64_t)len;
    }
    if (off < size && off + 12 > size && !resyncing) {
        snprintf(msg, sizeof msg,
                 "%s: byte %lld: trailing bytes shorter than a record header: ignored", path,
                 (long long)off);
        on_report(rep, msg);
        problems++;
    }
    return problems;
}

/* A record header of length len at p: 8 bytes of length, their masked CRC. */
static void put_header(uint8_t *p, uint64_t len) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(len >> (8 * i));
    uint32_t c = psg_crc32c_mask(psg_crc32c(0, p, 8));
    for (int i = 0; i < 4; i++) p[8 + i] = (uint8_t)(c >> (8 * i));
}

/* Indexes b (written to a file) and checks it against reference_index: same records, same
 * problems and reports. Returns the number of records. */
static int64_t index_like_reference(const uint8_t *b, int64_t size, const char *path) {
    FILE *f = fopen(path, "wb");
    CHECK(f && (size == 0 || fwrite(b, 1, (size_t)size, f) == (size_t)size));
    if (f) fclose(f);
    int64_t *offs = malloc((size_t)(size / 16 + 1) * sizeof *offs), want_n = 0, n = -1;
    reports_t want = {0}, got = {0};
    int want_rc = reference_index(b, size, path, offs, &want_n, &want);
    psg_tfrecord_entry_t *e = NULL;
    CHECK(psg_tfrecord_index(path, &e, &n, on_report, &got) == want_rc);
    CHECK(n == want_n);
    for (int64_t i = 0; i < n && i < want_n; i++) CHECK(e[i].offset == offs[i]);
    CHECK(got.count == want.count && !strcmp(got.all, want.all));
    free(e);
    free(offs);
    return want_n;
}

/* Garbage between records, headers whose CRC is broken, a CRC-valid header whose length runs
 * past the end met while resyncing, a header straddling the 64 KiB read window: the records
 * recovered and the reports are those of the per-offset scan. */
static void test_resync_finds_what_a_scan_of_every_offset_finds(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/resync", dir);
    enum { SIZE = 200000 };
    uint8_t *b = malloc(SIZE);
    /* records of 20 bytes, then garbage, then records again; one header's CRC broken */
    int64_t at = 0;
    for (int i = 0; i < 3; i++, at += 36) put_header(b + at, 20), memset(b + at + 12, 'a' + i, 24);
    b[36 + 9] ^= 0x40; /* the second record's CRC */
    memset(b + at, 0xee, 1000);
    at += 1000;
    put_header(b + at, 5), memset(b + at + 12, 'z', 9);
    at += 21;
    CHECK(index_like_reference(b, at, path) == 3); /* 0, 2 and the one after the garbage */
    reports_t rep = {0};
    psg_tfrecord_entry_t *e = NULL;
    int64_t n = 0;
    CHECK(psg_tfrecord_index(path, &e, &n, on_report, &rep) == 2 && n == 3);
    CHECK(n == 3 && e[1].offset == 72 && e[2].offset == 1108);
    free(e);
    char want[700];
    snprintf(want, sizeof want, "%s: byte 36: corrupt record header (length CRC mismatch)", path);
    CHECK(strstr(rep.all, want) != NULL);
    snprintf(want, sizeof want, "%s: byte 108: corrupt record header (length CRC mismatch)", path);
    CHECK(strstr(rep.all, want) != NULL);

    /* while resyncing, a header whose CRC holds but whose length runs past the end stops the scan
     */
    memset(b, 0x11, 500);
    put_header(b + 300, 1u << 20);
    put_header(b + 400, 3);
    CHECK(index_like_reference(b, 500, path) == 0);
    rep = (reports_t){0};
    CHECK(psg_tfrecord_index(path, &e, &n, on_report, &rep) == 2 && n == 0);
    free(e);
    snprintf(want, sizeof want, "%s: byte 300: record runs past the end of the file (truncated)",
             path);
    CHECK(strstr(rep.all, want) != NULL);

    /* garbage ending inside a header's 12 bytes; a file of garbage; files of 0 to 12 bytes */
    CHECK(index_like_reference(b, 310, path) == 0);
    for (int64_t k = 0; k <= 13; k++) index_like_reference(b, k, path);

    /* valid records at random places in random garbage, across read windows (64 KiB), some
     * at a window's end; and garbage of one byte value repeated */
    srand(20);
    for (int round = 0; round < 40; round++) {
        int64_t size = 1000 + rand() % (SIZE - 1000);
        for (int64_t i = 0; i < size; i++) b[i] = round % 8 == 7 ? 0x5a : (uint8_t)rand();
        int records = rand() % 12;
        for (int r = 0; r < records; r++) {
            int64_t where = r == 0 ? (65536 - 14 + rand() % 6) % (size - 40) : rand() % (size - 40);
            put_header(b + where, (uint64_t)(rand() % 24));
        }
        index_like_reference(b, size, path);
    }
    unlink(path);
    free(b);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/psg_tfrecord_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN_TEST(test_crc32c);
    RUN_TEST(test_example_round_trip);
    RUN_TEST(test_jpeg);
    RUN_TEST(test_jpeg_bomb);
    RUN_TEST(test_extreme_label);
    RUN_TEST(test_crop);
    RUN_TEST(test_shards_read_back);
    RUN_TEST(test_corrupt_records_are_skipped);
    RUN_TEST(test_resync_finds_what_a_scan_of_every_offset_finds);
    rmdir(dir);
    return psg_test_summary();
}
