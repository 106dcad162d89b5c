/* What TensorFlow users' ImageNet shards hold beyond plain TFRecords of JPEGs, all made by
 * the test itself: GZIP and ZLIB compressed files (TFRecordOptions(compression_type=...)),
 * detected from their first bytes or named, every error naming the compression; PNG
 * records and CMYK / YCCK JPEGs (Adobe's inverted samples) decoded to RGB as TensorFlow's
 * decode_image does. */
#include "tests/testutil.h"

#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

static char dir[256];

typedef struct {
    int count;
    char all[8192];
} reports_t;

static void on_report(void *ctx, const char *msg) {
    reports_t *r = ctx;
    r->count++;
    size_t used = strlen(r->all);
    snprintf(r->all + used, sizeof r->all - used, "%s\n", msg);
    printf("  reported: %s\n", msg);
}

/* A w x h RGB image whose colour says `label`: (label * 60, 128, 255 - label * 60). */
static uint8_t *colour(int w, int h, int label) {
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) {
        rgb[3 * i] = (uint8_t)(label * 60);
        rgb[3 * i + 1] = 128;
        rgb[3 * i + 2] = (uint8_t)(255 - label * 60);
    }
    return rgb;
}

/* Appends a tf.Example with the encoded image `img` and label (1-based) to w. */
static void put_example(psg_tfrecord_writer_t *w, const uint8_t *img, size_t n, int label) {
    uint8_t *ex;
    size_t en;
    CHECK(psg_example_encode("image/encoded", img, n, "image/class/label", label, &ex, &en) == 0);
    CHECK(psg_tfrecord_write(w, ex, en) == 0);
    free(ex);
}

/* A plain TFRecord file of 4 JPEG records, labels 1, 2, 3, 1; its bytes in *bytes. */
static void plain_file(const char *path, uint8_t **bytes, size_t *n) {
    psg_tfrecord_writer_t *w = psg_tfrecord_writer_new(path);
    CHECK(w != NULL);
    for (int i = 0; i < 4; i++) {
        uint8_t *rgb = colour(20, 16, i % 3), *jpeg;
        size_t jn;
        CHECK(psg_jpeg_encode(rgb, 20, 16, 95, &jpeg, &jn) == 0);
        put_example(w, jpeg, jn, 1 + i % 3);
        free(rgb);
        free(jpeg);
    }
    CHECK(psg_tfrecord_writer_close(&w) == 0);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    *bytes = malloc(*n);
    CHECK(fread(*bytes, 1, *n, f) == *n);
    fclose(f);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n);
    if (f) fclose(f);
}

/* Reads the 4 records of `path` through the ImageNet reader: labels and colours right. */
static void reads_back(const char *path, psg_tfrecord_compression_t c) {
    psg_imagenet_options_t o = psg_imagenet_defaults(false);
    o.image_size = 8;
    o.classes = 3;
    o.compression = c;
    reports_t rep = {0};
    o.report = on_report;
    o.report_ctx = &rep;
    psg_imagenet_t *r = psg_imagenet_new(path, &o);
    CHECK(r && psg_imagenet_num_records(r) == 4);
    psg_tensor_t *img = NULL, *lab = NULL;
    CHECK(r && psg_dataset_slice(psg_imagenet_dataset(r), 0, 4, &img, &lab) == 0);
    for (int i = 0; lab && i < 4; i++) {
        CHECK(psg_tensor_i32(lab)[i] == i % 3);
        CHECK_NEAR(psg_tensor_f32(img)[(size_t)i * 8 * 8 * 3], (i % 3) * 60 * 2.0 / 255 - 1, 0.05);
    }
    CHECK(rep.count == 0);
    psg_tensor_destroy(&img);
    psg_tensor_destroy(&lab);
    psg_imagenet_destroy(&r);
}

static void test_gzip_and_zlib(void) {
    char plain[512], gz[512], zl[512];
    snprintf(plain, sizeof plain, "%s/plain.tfrecord", dir);
    snprintf(gz, sizeof gz, "%s/records.tfrecord.gz", dir);
    snprintf(zl, sizeof zl, "%s/records.tfrecord.zlib", dir);
    uint8_t *bytes;
    size_t n;
    plain_file(plain, &bytes, &n);
    /* GZIP as TensorFlow writes it: one gzip member */
    gzFile g = gzopen(gz, "wb");
    CHECK(g && gzwrite(g, bytes, (unsigned)n) == (int)n);
    gzclose(g);
    /* ZLIB: one zlib stream */
    uLongf zn = compressBound(n);
    uint8_t *z = malloc(zn);
    CHECK(compress2(z, &zn, bytes, n, 6) == Z_OK);
    write_bytes(zl, z, zn);

    psg_tfrecord_compression_t found;
    char name[PSG_TFRECORD_NAME_MAX];
    const char *paths[3] = {plain, gz, zl};
    psg_tfrecord_compression_t want[3] = {PSG_TFRECORD_NONE, PSG_TFRECORD_GZIP, PSG_TFRECORD_ZLIB};
    for (int i = 0; i < 3; i++) {
        int fd = psg_tfrecord_open(paths[i], PSG_TFRECORD_AUTO, &found, name, sizeof name);
        CHECK(fd >= 0 && found == want[i]);
        psg_tfrecord_entry_t *e = NULL;
        int64_t k = 0;
        CHECK(fd >= 0 && psg_tfrecord_index_fd(fd, name, &e, &k, NULL, NULL) == 0 && k == 4);
        free(e);
        if (fd >= 0) close(fd);
        printf("  %s: detected %s, name \"%s\"\n", paths[i], psg_tfrecord_compression_name(found),
               name);
        /* the path-level index and the ImageNet reader detect it too */
        CHECK(psg_tfrecord_index(paths[i], &e, &k, NULL, NULL) == 0 && k == 4);
        free(e);
        reads_back(paths[i], PSG_TFRECORD_AUTO);
    }
    reads_back(gz, PSG_TFRECORD_GZIP); /* named by the option */
    /* named wrongly: the error names the compression expected */
    CHECK(psg_tfrecord_open(zl, PSG_TFRECORD_GZIP, &found, name, sizeof name) < 0);
    CHECK_ERROR_HAS("not a GZIP-compressed TFRecord file");
    CHECK(psg_tfrecord_open(plain, PSG_TFRECORD_ZLIB, &found, name, sizeof name) < 0);
    CHECK_ERROR_HAS("ZLIB");
    psg_tfrecord_compression_t c;
    CHECK(psg_tfrecord_compression_parse("Gzip", &c) == 0 && c == PSG_TFRECORD_GZIP);
    CHECK(psg_tfrecord_compression_parse("lz4", &c) < 0);
    CHECK_ERROR_HAS("'lz4' is not auto, none, gzip or zlib");

    /* a truncated GZIP file: its error names the file and GZIP */
    FILE *f = fopen(gz, "rb");
    fseek(f, 0, SEEK_END);
    long gn = ftell(f);
    fclose(f);
    CHECK(truncate(gz, gn / 2) == 0);
    CHECK(psg_tfrecord_open(gz, PSG_TFRECORD_AUTO, &found, name, sizeof name) < 0);
    CHECK_ERROR_HAS("GZIP: the compressed stream ends early");
    CHECK_ERROR_HAS(gz);
    /* corrupt compressed bytes */
    z[zn / 2] ^= 0x55;
    z[zn / 2 + 1] ^= 0xaa;
    write_bytes(zl, z, zn);
    CHECK(psg_tfrecord_open(zl, PSG_TFRECORD_AUTO, &found, name, sizeof name) < 0);
    CHECK_ERROR_HAS("ZLIB");
    printf("  corrupt ZLIB: %s\n", psg_error_message());
    /* a broken record inside a GZIP file: the report names GZIP and inflated offsets */
    bytes[9] ^= 0x40; /* the first record's length crc */
    g = gzopen(gz, "wb");
    CHECK(g && gzwrite(g, bytes, (unsigned)n) == (int)n);
    gzclose(g);
    reports_t rep = {0};
    psg_tfrecord_entry_t *e = NULL;
    int64_t k = 0;
    CHECK(psg_tfrecord_index(gz, &e, &k, on_report, &rep) == 1 && k == 3);
    CHECK(strstr(rep.all,
                 "(GZIP; byte offsets of the inflated records): byte 0: corrupt record header") !=
          NULL);
    free(e);
    free(z);
    free(bytes);
    unlink(plain);
    unlink(gz);
    unlink(zl);
}

static void test_png(void) {
    int w = 7, h = 5;
    uint8_t px[7 * 5 * 4];
    for (int i = 0; i < w * h * 4; i++) px[i] = (uint8_t)(i * 37 + 11);
    for (int ch = 1; ch <= 4; ch++) {
        uint8_t *png = NULL, *rgb = NULL;
        size_t n = 0;
        int ow = 0, oh = 0;
        CHECK(psg_png_encode(px, w, h, ch, &png, &n) == 0);
        CHECK(psg_png_is(png, n) && psg_image_decode(png, n, &rgb, &ow, &oh) == 0);
        CHECK(ow == w && oh == h);
        bool same = rgb != NULL;
        /* gray is replicated, alpha dropped */
        for (int i = 0; rgb && i < w * h; i++)
            for (int c = 0; c < 3; c++) same &= rgb[3 * i + c] == px[i * ch + (ch >= 3 ? c : 0)];
        CHECK(same);
        free(rgb);
        png[n / 2] ^= 0xff;
        png[20] ^= 0xff; /* the IHDR crc */
        CHECK(psg_png_decode(png, n, &rgb, &ow, &oh) < 0);
        CHECK_ERROR_HAS("corrupt PNG");
        CHECK(psg_png_decode(png, 30, &rgb, &ow, &oh) < 0);
        free(png);
    }
}

/* CMYK as Adobe writes it (inverted): K = 255 (no black) and C, M, Y = R, G, B give the
 * RGB back; a darker block (K 128) gives r = c * k / 255. */
static uint8_t *adobe_cmyk(const uint8_t *rgb, int w, int h) {
    uint8_t *cmyk = malloc((size_t)w * h * 4);
    for (int i = 0; i < w * h; i++) {
        bool dark = (i % w) >= w / 2;
        for (int c = 0; c < 3; c++) cmyk[4 * i + c] = rgb[3 * i + c];
        cmyk[4 * i + 3] = dark ? 128 : 255;
    }
    return cmyk;
}

static void test_cmyk_jpeg(void) {
    int w = 32, h = 16;
    uint8_t *rgb = colour(w, h, 2); /* (120, 128, 135) */
    uint8_t *cmyk = adobe_cmyk(rgb, w, h);
    for (int ycck = 0; ycck <= 1; ycck++) {
        uint8_t *jpeg, *out;
        size_t n;
        int ow, oh;
        CHECK(psg_jpeg_encode_cmyk(cmyk, w, h, 95, ycck, &jpeg, &n) == 0);
        CHECK(psg_image_decode(jpeg, n, &out, &ow, &oh) == 0 && ow == w && oh == h);
        double err = 0;
        for (int i = 0; out && i < w * h; i++) {
            int k = (i % w) >= w / 2 ? 128 : 255;
            for (int c = 0; c < 3; c++)
                err += fabs((double)out[3 * i + c] - rgb[3 * i + c] * k / 255);
        }
        err /= w * h * 3;
        printf("  %s JPEG: mean abs error %.2f against TensorFlow's conversion\n",
               ycck ? "YCCK" : "CMYK", err);
        CHECK(out && err < 4); /* TensorFlow's own CMYK test allows an average error of 4 */
        free(out);
        /* and as a record of an ImageNet shard */
        char path[512];
        snprintf(path, sizeof path, "%s/cmyk-%d", dir, ycck);
        psg_tfrecord_writer_t *wr = psg_tfrecord_writer_new(path);
        put_example(wr, jpeg, n, 3);
        uint8_t *png;
        size_t pn;
        CHECK(psg_png_encode(rgb, w, h, 3, &png, &pn) == 0);
        put_example(wr, png, pn, 3);
        CHECK(psg_tfrecord_writer_close(&wr) == 0);
        psg_imagenet_options_t o = psg_imagenet_defaults(false);
        o.image_size = 8;
        o.classes = 3;
        reports_t rep = {0};
        o.report = on_report;
        o.report_ctx = &rep;
        psg_imagenet_t *r = psg_imagenet_new(path, &o);
        psg_tensor_t *img = NULL, *lab = NULL;
        CHECK(r && psg_dataset_slice(psg_imagenet_dataset(r), 0, 2, &img, &lab) == 0 &&
              rep.count == 0);
        for (int i = 0; lab && i < 2; i++) {
            CHECK(psg_tensor_i32(lab)[i] == 2);
            CHECK_NEAR(psg_tensor_f32(img)[(size_t)i * 8 * 8 * 3 + 1], 128 * 2.0 / 255 - 1, 0.05);
        }
        psg_tensor_destroy(&img);
        psg_tensor_destroy(&lab);
        psg_imagenet_destroy(&r);
        free(png);
        free(jpeg);
        unlink(path);
    }
    free(cmyk);
    free(rgb);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/psg_tfrecord_formats_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN_TEST(test_gzip_and_zlib);
    RUN_TEST(test_png);
    RUN_TEST(test_cmyk_jpeg);
    rmdir(dir);
    return psg_test_summary();
}
