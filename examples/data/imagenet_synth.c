/* A small ImageNet-format data set with learnable classes, written as TF's
 * build_imagenet_data.py writes ImageNet (imagenet.h): TFRecord shards train-NNNNN-of-NNNNN
 * and validation-NNNNN-of-NNNNN of tf.Examples with image/encoded (JPEG),
 * image/class/label (1..C, 0 being the background) and one image/object/bbox box: the
 * object's. Class c is a shape drawn at a random place, size and colour over a noisy
 * background; the shapes are symmetric left to right, so a flip keeps the class. Not a
 * reader and not a model of ImageNet's statistics. */
#include "core/rng.h"
#include "psgraph/error.h"
#include "psgraph/imagenet.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

psg_imagenet_synth_t psg_imagenet_synth_defaults(void) {
    return (psg_imagenet_synth_t){
        .classes = 10, .train = 400, .validation = 100, .image_size = 75, .shards = 2, .seed = 1};
}

static double uniform01(uint64_t *s) {
    return (double)(psg_splitmix64(s) >> 11) / 9007199254740992.0;
}

/* Whether (u, v) in [-1, 1]^2 of the object's box is inside shape c. */
static bool inside(int c, double u, double v) {
    double au = fabs(u), av = fabs(v), r2 = u * u + v * v;
    switch (c) {
    case 0: return true;                  /* square */
    case 1: return r2 < 1;                /* disc */
    case 2: return r2 < 1 && r2 > 0.45;   /* ring */
    case 3: return au < 0.3 || av < 0.3;  /* plus */
    case 4: return fabs(au - av) < 0.3;   /* X */
    case 5: return au < (1 + v) / 2;      /* triangle, apex up */
    case 6: return au < (1 - v) / 2;      /* triangle, apex down */
    case 7: return av < 0.35;             /* horizontal bar */
    case 8: return au < 0.35;             /* vertical bar */
    default: return au > 0.6 || av > 0.6; /* frame */
    }
}

/* One image of class c (0-based) into rgb (S x S x 3) and its box (ymin xmin ymax xmax). */
static void draw(int c, int S, uint64_t *st, uint8_t *rgb, float box[4]) {
    double bg[3], fg[3], gx = uniform01(st) - 0.5, gy = uniform01(st) - 0.5;
    bool dark = uniform01(st) < 0.5;
    for (int k = 0; k < 3; k++) {
        bg[k] = dark ? 20 + 90 * uniform01(st) : 145 + 90 * uniform01(st);
        fg[k] = dark ? 150 + 100 * uniform01(st) : 10 + 100 * uniform01(st);
    }
    double side = S * (0.35 + 0.4 * uniform01(st)), aspect = 0.8 + 0.45 * uniform01(st);
    double w = fmin(side * sqrt(aspect), S - 2.0), h = fmin(side / sqrt(aspect), S - 2.0);
    double x0 = uniform01(st) * (S - w), y0 = uniform01(st) * (S - h);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            double u = 2 * (x + 0.5 - x0) / w - 1, v = 2 * (y + 0.5 - y0) / h - 1;
            bool in = fabs(u) <= 1 && fabs(v) <= 1 && inside(c % 10, u, v);
            for (int k = 0; k < 3; k++) {
                double base = in ? fg[k] : bg[k] + 40 * (gx * x + gy * y) / S;
                double px = base + 24 * (uniform01(st) - 0.5);
                rgb[((size_t)y * S + x) * 3 + k] = (uint8_t)(px < 0 ? 0 : px > 255 ? 255 : px);
            }
        }
    box[0] = (float)(y0 / S), box[1] = (float)(x0 / S);
    box[2] = (float)((y0 + h) / S), box[3] = (float)((x0 + w) / S);
}

/* `count` images of the split `name` in o->shards shards under dir. */
static int write_split(const char *dir, const char *name, int count, const psg_imagenet_synth_t *o,
                       uint64_t *st, int64_t *per_class) {
    int S = o->image_size;
    uint8_t *rgb = malloc((size_t)S * S * 3);
    if (!rgb) return psg_error_set("out of memory");
    int rc = 0;
    for (int s = 0; s < o->shards && rc == 0; s++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s-%05d-of-%05d", dir, name, s, o->shards);
        psg_tfrecord_writer_t *f = psg_tfrecord_writer_new(path);
        if (!f) {
            rc = -1;
            break;
        }
        for (int i = s; i < count && rc == 0; i += o->shards) {
            int c = (int)(psg_splitmix64(st) % (uint64_t)o->classes);
            psg_example_image_t ex = {.label = c + 1, .n_boxes = 1};
            float box[4];
            draw(c, S, st, rgb, box);
            for (int k = 0; k < 4; k++) ex.box[k][0] = box[k];
            uint8_t *jpeg = NULL, *rec = NULL;
            size_t jn = 0, rn = 0;
            rc = psg_jpeg_encode(rgb, S, S, 90, &jpeg, &jn);
            ex.encoded = jpeg, ex.encoded_len = jn;
            if (rc == 0)
                rc = psg_example_encode_boxes("image/encoded", "image/class/label", &ex, &rec, &rn);
            if (rc == 0) rc = psg_tfrecord_write(f, rec, rn);
            if (rc == 0 && per_class) per_class[c]++;
            free(jpeg);
            free(rec);
        }
        if (psg_tfrecord_writer_close(&f) < 0 && rc == 0) rc = -1;
    }
    free(rgb);
    return rc;
}

int psg_imagenet_synthesize(const char *dir, const psg_imagenet_synth_t *o, FILE *out) {
    if (o->classes < 2 || o->classes > 10)
        return psg_error_set("--classes %d: the synthetic set has 2 to 10 classes (shapes)",
                             o->classes);
    if (o->image_size < 16 || o->train < 1 || o->validation < 1 || o->shards < 1)
        return psg_error_set("imagenet synth: image size >= 16, >= 1 train and validation "
                             "images, >= 1 shard");
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return psg_error_set("%s: %s", dir, strerror(errno));
    uint64_t st = o->seed * 0x9e3779b97f4a7c15ull + 7;
    int64_t per_class[10] = {0};
    if (write_split(dir, "train", o->train, o, &st, per_class) < 0 ||
        write_split(dir, "validation", o->validation, o, &st, NULL) < 0)
        return -1;
    if (out) {
        fprintf(out,
                "{\"data\":\"imagenet-synthetic\",\"dir\":\"%s\",\"classes\":%d,\"train\":%d,"
                "\"validation\":%d,\"image_size\":%d,\"shards\":%d,\"seed\":%llu,"
                "\"labels\":\"1..%d (0: background)\",\"train_per_class\":[",
                dir, o->classes, o->train, o->validation, o->image_size, o->shards,
                (unsigned long long)o->seed, o->classes);
        for (int c = 0; c < o->classes; c++)
            fprintf(out, "%s%lld", c ? "," : "", (long long)per_class[c]);
        fprintf(out, "]}\n");
    }
    return 0;
}
