/* Inception's training distortions (examples/data/inception_preprocess.c), the boxes of a
 * tf.Example, and the synthetic ImageNet-format set (examples/data/imagenet_synth.c) read
 * back through the reader: what a user checks of TF's image_processing.py's inputs. */
#include "psgraph/error.h"
#include "psgraph/imagenet.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every crop lies in the image, has an aspect ratio and area in range or is the whole
 * image, and covers at least 10% of the box it was drawn for (one box here). */
static void test_distorted_box(void) {
    psg_distort_options_t o = psg_distort_defaults();
    CHECK(o.max_attempts == 100 && o.min_object_covered == 0.1 && o.area_lo == 0.05);
    const float box[1][4] = {{0.6f, 0.1f, 0.9f, 0.3f}}; /* ymin xmin ymax xmax */
    int W = 200, H = 120, whole = 0, n = 2000;
    double mean_area = 0;
    uint64_t st = 7;
    for (int i = 0; i < n; i++) {
        int x0, y0, cw, ch;
        psg_image_sample_distorted_box(W, H, box, 1, &o, &st, &x0, &y0, &cw, &ch);
        CHECK(x0 >= 0 && y0 >= 0 && cw >= 1 && ch >= 1 && x0 + cw <= W && y0 + ch <= H);
        if (cw == W && ch == H) {
            whole++;
            continue;
        }
        double aspect = (double)cw / ch, area = (double)cw * ch / (W * H);
        CHECK(aspect > 0.75 - 0.05 && aspect < 1.33 + 0.05);
        CHECK(area >= 0.05 - 1e-9 && area <= 1.0);
        double iw = fmin(x0 + cw, 0.3 * W) - fmax(x0, 0.1 * W),
               ih = fmin(y0 + ch, 0.9 * H) - fmax(y0, 0.6 * H);
        CHECK(iw > 0 && ih > 0 && iw * ih >= 0.1 * (0.2 * W) * (0.3 * H) - 1e-6);
        mean_area += area;
    }
    CHECK(whole < n / 10); /* a crop is found nearly always */
    printf("  distorted crops: %d of %d whole images, mean area %.3f\n", whole, n,
           mean_area / (n - whole));
    /* no box: any crop of the image (use_image_if_no_bounding_boxes) */
    int x0, y0, cw, ch;
    psg_image_sample_distorted_box(W, H, NULL, 0, &o, &st, &x0, &y0, &cw, &ch);
    CHECK(x0 + cw <= W && y0 + ch <= H);
    /* an impossible constraint gives the whole image */
    o.min_object_covered = 1.0;
    o.area_hi = 0.06;
    const float tiny[1][4] = {{0, 0, 1, 1}};
    psg_image_sample_distorted_box(W, H, tiny, 1, &o, &st, &x0, &y0, &cw, &ch);
    CHECK(x0 == 0 && y0 == 0 && cw == W && ch == H);
}

/* The colour distortion keeps values in [0, 1], changes a gray image's mean by at most the
 * brightness delta and the contrast (which keeps the mean), and keeps a flat image flat. */
static void test_distort_color(void) {
    enum { P = 64 };
    for (int ordering = 0; ordering < 2; ordering++) {
        uint64_t st = 3 + (uint64_t)ordering;
        float img[3 * P];
        for (int i = 0; i < 3 * P; i++) img[i] = (float)(i % 7) / 6.0f;
        psg_image_distort_color(img, P, ordering, &st);
        bool in = true;
        for (int i = 0; i < 3 * P; i++) in &= img[i] >= 0 && img[i] <= 1;
        CHECK(in);
        float flat[3 * P];
        for (int i = 0; i < 3 * P; i++) flat[i] = 0.5f;
        psg_image_distort_color(flat, P, ordering, &st);
        double mean = 0;
        bool same = true;
        for (int i = 0; i < 3 * P; i++) mean += flat[i], same &= fabsf(flat[i] - flat[0]) < 1e-6f;
        mean /= 3 * P;
        CHECK(same); /* gray stays gray: no saturation or hue to change */
        CHECK(fabs(mean - 0.5) <= 32.0 / 255.0 + 1e-6);
    }
}

/* A tf.Example's boxes survive encode and parse. */
static void test_boxes_round_trip(void) {
    uint8_t jpeg[3] = {1, 2, 3};
    psg_example_image_t ex = {.encoded = jpeg, .encoded_len = 3, .label = 7, .n_boxes = 2};
    float want[4][2] = {{0.1f, 0.5f}, {0.2f, 0.25f}, {0.9f, 0.75f}, {0.8f, 1.0f}};
    for (int k = 0; k < 4; k++) ex.box[k][0] = want[k][0], ex.box[k][1] = want[k][1];
    uint8_t *buf = NULL;
    size_t n = 0;
    CHECK(psg_example_encode_boxes("image/encoded", "image/class/label", &ex, &buf, &n) == 0);
    psg_example_image_t got;
    CHECK(psg_example_parse(buf, n, "image/encoded", "image/class/label", &got) == 0);
    CHECK(got.has_encoded && got.encoded_len == 3 && got.has_label && got.label == 7);
    CHECK(got.n_boxes == 2);
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 2; b++) CHECK(got.box[k][b] == want[k][b]);
    free(buf);
    /* an Example without boxes has none */
    CHECK(psg_example_encode("image/encoded", jpeg, 3, "image/class/label", 1, &buf, &n) == 0);
    CHECK(psg_example_parse(buf, n, "image/encoded", "image/class/label", &got) == 0);
    CHECK(got.n_boxes == 0);
    free(buf);
}

/* The synthetic set: the files TF's script names, every label 1..C read at offset 0 as
 * 1..C of C + 1 classes, the training images distorted (two reads differ), the
 * evaluation's the same each time. */
static void test_synthetic_set(void) {
    char dir[] = "/tmp/psg_inet_synth_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    psg_imagenet_synth_t s = psg_imagenet_synth_defaults();
    s.train = 24, s.validation = 8, s.classes = 4, s.image_size = 40;
    CHECK(psg_imagenet_synthesize(dir, &s, NULL) == 0);
    char path[256];
    snprintf(path, sizeof path, "%s/train-00001-of-00002", dir);
    CHECK(access(path, R_OK) == 0);
    for (int train = 0; train < 2; train++) {
        psg_imagenet_options_t o = psg_imagenet_defaults(train);
        o.image_size = 32, o.classes = s.classes + 1, o.label_offset = 0, o.threads = 2;
        psg_imagenet_t *r = psg_imagenet_new(dir, &o);
        CHECK(r != NULL);
        if (!r) continue;
        CHECK(psg_imagenet_num_records(r) == (train ? 24 : 8));
        const psg_dataset_t *ds = psg_imagenet_dataset(r);
        int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        psg_tensor_t *a = NULL, *la = NULL, *b = NULL, *lb = NULL;
        CHECK(psg_dataset_gather(ds, 8, idx, &a, &la) == 0);
        CHECK(psg_dataset_gather(ds, 8, idx, &b, &lb) == 0);
        bool labels = true, range = true;
        for (int i = 0; la && i < 8; i++)
            labels &= psg_tensor_i32(la)[i] >= 1 && psg_tensor_i32(la)[i] <= 4;
        double diff = 0;
        for (int64_t i = 0; a && b && i < psg_tensor_numel(a); i++) {
            range &= fabsf(psg_tensor_f32(a)[i]) <= 1.0f;
            diff += fabsf(psg_tensor_f32(a)[i] - psg_tensor_f32(b)[i]);
        }
        CHECK(labels && range);
        CHECK(train ? diff > 0 : diff == 0);
        CHECK(psg_imagenet_num_skipped(r) == 0);
        psg_tensor_destroy(&a), psg_tensor_destroy(&la), psg_tensor_destroy(&b),
            psg_tensor_destroy(&lb);
        psg_imagenet_destroy(&r);
    }
    /* a glob pattern names the shards too */
    snprintf(path, sizeof path, "%s/validation-*", dir);
    psg_imagenet_options_t o = psg_imagenet_defaults(false);
    o.image_size = 32, o.classes = 5, o.label_offset = 0;
    psg_imagenet_t *r = psg_imagenet_new(path, &o);
    CHECK(r && psg_imagenet_num_records(r) == 8);
    psg_imagenet_destroy(&r);
    snprintf(path, sizeof path, "%s/nothing-*", dir);
    CHECK(psg_imagenet_new(path, &o) == NULL);
    CHECK_ERROR_HAS("no file matches");
    s.classes = 11;
    CHECK(psg_imagenet_synthesize(dir, &s, NULL) < 0);
    CHECK_ERROR_HAS("--classes 11");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    RUN_TEST(test_distorted_box);
    RUN_TEST(test_distort_color);
    RUN_TEST(test_boxes_round_trip);
    RUN_TEST(test_synthetic_set);
    return psg_test_summary();
}
