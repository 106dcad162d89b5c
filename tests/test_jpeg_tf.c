/* JPEG decode against TensorFlow 2.21's own pixels (issue 37): JPEGs made with PIL
 * (baseline 4:2:0, progressive, 4:4:4, gray, Adobe CMYK) and what TensorFlow's
 * decode_jpeg(channels=3) gives for them, committed in tests/data/jpeg_tf (make.py there made
 * them): psg_jpeg_decode must give the default's (dct_method "", INTEGER_FAST) pixels exactly,
 * psg_jpeg_decode_with INTEGER_ACCURATE the accurate method's, and the ImageNet reader its
 * option's. Not the other image tests (test_tfrecord_formats.c). */
#include "testutil.h"

#include "psgraph/imagenet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;
static const char *const names[] = {"baseline", "progressive", "s444", "gray", "cmyk"};

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = len > 0 ? malloc((size_t)len) : NULL;
    *n = b && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

/* A binary PPM (P6, maxval 255) as TensorFlow's pixels were written: *w x *h x 3 bytes. */
static uint8_t *read_ppm(const char *path, int *w, int *h) {
    size_t n = 0;
    uint8_t *b = read_all(path, &n);
    int off = 0;
    if (!b || sscanf((const char *)b, "P6 %d %d 255%n", w, h, &off) != 2 || off <= 0 ||
        (size_t)off + 1 + (size_t)*w * *h * 3 != n) {
        free(b);
        return NULL;
    }
    memmove(b, b + off + 1, n - (size_t)off - 1);
    return b;
}

/* The largest difference between psgraph's decode with `dct` and TensorFlow's pixels. */
static int max_diff(const char *name, psg_jpeg_dct_t dct, const char *ref_kind) {
    char path[1024];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s.jpg", dir, name);
    uint8_t *jpeg = read_all(path, &n);
    snprintf(path, sizeof path, "%s/%s.%s.ppm", dir, name, ref_kind);
    int rw = 0, rh = 0, w = 0, h = 0;
    uint8_t *ref = read_ppm(path, &rw, &rh), *rgb = NULL;
    CHECK(jpeg && ref);
    int worst = -1;
    if (jpeg && ref && psg_jpeg_decode_with(jpeg, n, dct, &rgb, &w, &h) == 0 && w == rw &&
        h == rh) {
        worst = 0;
        for (size_t i = 0; i < (size_t)w * h * 3; i++) {
            int d = abs((int)rgb[i] - (int)ref[i]);
            if (d > worst) worst = d;
        }
    }
    free(jpeg);
    free(ref);
    free(rgb);
    return worst;
}

static void test_default_is_tensorflows(void) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int fast = max_diff(names[i], PSG_JPEG_DCT_INTEGER_FAST, "fast");
        int accurate = max_diff(names[i], PSG_JPEG_DCT_INTEGER_ACCURATE, "accurate");
        /* the two methods differ on these files: a decode that ignored the choice would fail */
        int crossed = max_diff(names[i], PSG_JPEG_DCT_INTEGER_FAST, "accurate");
        printf(
            "  %-12s max |psgraph - TF 2.21|: default %d, INTEGER_ACCURATE %d (the methods differ by %d)\n",
            names[i], fast, accurate, crossed);
        CHECK(fast == 0 && accurate == 0 && crossed > 0);
    }
    /* psg_jpeg_decode and psg_image_decode are the default's */
    char path[1024];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/baseline.jpg", dir);
    uint8_t *jpeg = read_all(path, &n), *a = NULL, *b = NULL, *c = NULL;
    int w, h;
    CHECK(jpeg && psg_jpeg_decode(jpeg, n, &a, &w, &h) == 0 &&
          psg_image_decode(jpeg, n, &b, &w, &h) == 0 &&
          psg_jpeg_decode_with(jpeg, n, PSG_JPEG_DCT_INTEGER_FAST, &c, &w, &h) == 0);
    CHECK(a && b && c && !memcmp(a, c, (size_t)w * h * 3) && !memcmp(b, c, (size_t)w * h * 3));
    free(jpeg);
    free(a);
    free(b);
    free(c);
}

static void test_names(void) {
    psg_jpeg_dct_t d = PSG_JPEG_DCT_INTEGER_ACCURATE;
    CHECK(psg_jpeg_dct_parse("INTEGER_FAST", &d) == 0 && d == PSG_JPEG_DCT_INTEGER_FAST);
    CHECK(psg_jpeg_dct_parse("INTEGER_ACCURATE", &d) == 0 && d == PSG_JPEG_DCT_INTEGER_ACCURATE);
    CHECK(psg_jpeg_dct_parse("", &d) == 0 && d == PSG_JPEG_DCT_INTEGER_FAST); /* TensorFlow's "" */
    CHECK(psg_jpeg_dct_parse("FLOAT", &d) < 0 &&
          strstr(psg_error_message(), "'FLOAT' is not a dct_method"));
    CHECK(!strcmp(psg_jpeg_dct_name(PSG_JPEG_DCT_INTEGER_ACCURATE), "INTEGER_ACCURATE"));
    CHECK(psg_imagenet_defaults(true).dct_method == PSG_JPEG_DCT_INTEGER_FAST);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_jpeg_tf DIR (tests/data/jpeg_tf)\n");
        return 2;
    }
    dir = argv[1];
    RUN_TEST(test_default_is_tensorflows);
    RUN_TEST(test_names);
    return psg_test_summary();
}
