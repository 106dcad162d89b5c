/* psgraph's Inception-v3 against Keras's InceptionV3 on the same weights and image
 * (tests/test_inception3_keras.sh makes them with TF 2.21 in a venv): Keras's
 * safetensors weights go in through --init-from's name map (slim names <- Keras's,
 * examples/inception3_names.c), the inference logits must be Keras's within 1e-4 of their
 * largest magnitude, every model variable must have come from the file, and the variables
 * are written back as a psgraph checkpoint for the script to load into Keras.
 * usage: test_inception3_keras DIR SIZE CLASSES */
#include "psgraph/checkpoint.h"
#include "psgraph/error.h"
#include "psgraph/inception3.h"
#include "psgraph/session.h"
#include "tests/testutil.h"
#include "worker/init_from.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n floats of a raw little-endian file (NULL when it is not n floats). */
static float *read_f32(const char *path, int64_t n) {
    FILE *f = fopen(path, "rb");
    float *v = f ? malloc(sizeof(float) * (size_t)n) : NULL;
    bool ok = v && fread(v, sizeof(float), (size_t)n, f) == (size_t)n && fgetc(f) == EOF;
    if (f) fclose(f);
    if (!ok) free(v);
    return ok ? v : NULL;
}

/* A model of `logits` classes for size x size images, its variables from Keras's file by
 * the name map (strict: every variable from the file, every tensor of the file used). */
typedef struct {
    psg_graph_t *g;
    psg_session_t *s;
    psg_inception3_t m;
} loaded_t;

static bool load_keras(loaded_t *l, const char *dir, int size, int logits) {
    char path[4096];
    snprintf(path, sizeof path, "%s/keras.safetensors", dir);
    l->g = psg_graph_new();
    psg_init_from_t *f = psg_init_from_new(path, true, l->g);
    psg_inception3_config_t cfg = psg_inception3_defaults();
    cfg.image_size = size;
    cfg.classes = logits;
    cfg.is_training = false;
    psg_inception3_name_t *pairs = NULL;
    int n = psg_inception3_keras_names(&cfg, &pairs);
    CHECK(n == 378); /* 94 convolutions x 4 + the classifier's 2 */
    CHECK(f && n > 0 && psg_init_from_alias(f, n, pairs) == 0);
    free(pairs);
    CHECK(psg_inception3_build(l->g, &cfg, &l->m) == 0);
    CHECK(f && psg_init_from_report(f, stdout) == 0);
    psg_init_from_destroy(&f);
    l->s = psg_session_new(l->g, &(psg_session_options_t){2}, NULL);
    return l->s && psg_session_run_init(l->s) == 0;
}

static void unload(loaded_t *l) {
    psg_session_destroy(&l->s);
    psg_graph_destroy(&l->g);
}

/* l's logits of the image, new (NULL on failure). */
static psg_tensor_t *logits_of(loaded_t *l, int size, const float *img) {
    psg_tensor_t *x = psg_test_tensor(&(psg_shape_t){4, {1, size, size, 3}}, img), *out = NULL;
    CHECK(psg_session_run(l->s, 1, &l->m.images, &x, 1, &l->m.logits, &out, 0, NULL) == 0);
    psg_tensor_destroy(&x);
    return out;
}

/* max |got[off + i] - want[i]| over max |want[i]|, i < n */
static double rel_diff(const psg_tensor_t *got, int off, const float *want, int n) {
    double diff = 0, scale = 1e-6;
    for (int i = 0; i < n; i++) {
        diff = fmax(diff, fabs(psg_tensor_f32(got)[off + i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    return diff / scale;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    const char *dir = argv[1];
    int size = atoi(argv[2]), classes = atoi(argv[3]);
    char path[4096];
    snprintf(path, sizeof path, "%s/image.f32", dir);
    float *img = read_f32(path, (int64_t)size * size * 3);
    snprintf(path, sizeof path, "%s/keras_logits.f32", dir);
    float *want = read_f32(path, classes);
    CHECK(img && want);
    loaded_t l = {0};
    if (img && want && load_keras(&l, dir, size, classes)) {
        psg_tensor_t *out = logits_of(&l, size, img);
        double rel = out ? rel_diff(out, 0, want, classes) : INFINITY;
        printf("{\"forward\":\"inception3\",\"size\":%d,\"classes\":%d,"
               "\"max_relative_difference\":%.3g,\"logit0_psgraph\":%.6f,\"logit0_keras\":%.6f}\n",
               size, classes, rel, out ? psg_tensor_f32(out)[0] : NAN, want[0]);
        CHECK(rel <= 1e-4);
        psg_tensor_destroy(&out);
        /* the variables as a checkpoint, for Keras to load back through the map */
        snprintf(path, sizeof path, "%s/psgraph", dir);
        psg_resource_mgr_t *rm = psg_session_resources(l.s);
        CHECK(psg_checkpoint_save(path, 0, 1, &rm, 0, NULL) == 0);
    }
    unload(&l);
    /* classes + 1 logits (TF's background class, as slim's 1001): the file's classifier
     * gets a zero column 0, so logit 0 is 0 and the others are Keras's */
    if (img && want && load_keras(&l, dir, size, classes + 1)) {
        psg_tensor_t *out = logits_of(&l, size, img);
        double rel = out ? rel_diff(out, 1, want, classes) : INFINITY;
        CHECK(out && psg_tensor_f32(out)[0] == 0.0f && rel <= 1e-4);
        printf("  %d logits with the background class: logit 0 %g, the others within %.3g\n",
               classes + 1, out ? psg_tensor_f32(out)[0] : NAN, rel);
        psg_tensor_destroy(&out);
    }
    unload(&l);
    free(img);
    free(want);
    return psg_test_summary();
}
