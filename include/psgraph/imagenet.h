/* ImageNet as TensorFlow's build_imagenet_data.py writes it (TFRecord shards
 * of tf.Example with image/encoded JPEG and image/class/label), read into a
 * psg_dataset_t: JPEG decoding with libjpeg-turbo on a pool of decode
 * threads, Inception's training distortions (the distorted bounding-box crop
 * and resize, flip, colour distortion) or the evaluation's central crop. */
#ifndef PSGRAPH_IMAGENET_H
#define PSGRAPH_IMAGENET_H

#include "psgraph/data.h"
#include "psgraph/tfrecord.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- JPEG ---- */

/* The inverse DCT of a JPEG decode, as TensorFlow's decode_jpeg names it (dct_method). */
typedef enum {
    PSG_JPEG_DCT_INTEGER_FAST = 0, /* libjpeg's JDCT_IFAST: TensorFlow's default (dct_method "") */
    PSG_JPEG_DCT_INTEGER_ACCURATE = 1, /* JDCT_ISLOW: dct_method="INTEGER_ACCURATE" */
} psg_jpeg_dct_t;

/* "INTEGER_FAST" or "INTEGER_ACCURATE" (TensorFlow's names; "" is INTEGER_FAST, as there)
 * into *out; -1 with the error quoting s otherwise. */
int psg_jpeg_dct_parse(const char *s, psg_jpeg_dct_t *out);
/* The method's TensorFlow name. */
const char *psg_jpeg_dct_name(psg_jpeg_dct_t dct);

/* Decodes a JPEG (baseline or progressive; grayscale is expanded; CMYK and YCCK are
 * converted to RGB with TensorFlow's formula, Adobe's inverted CMYK included) into
 * *rgb, h x w x 3 bytes, malloc'ed (the caller frees), with the pixels of TensorFlow's
 * default decode_jpeg(channels=3) (INTEGER_FAST; fancy upsampling). Returns 0, or -1
 * with the error "corrupt JPEG: why" (libjpeg's message); never prints. */
int psg_jpeg_decode(const uint8_t *jpeg, size_t n, uint8_t **rgb, int *width, int *height);
/* The same with the inverse DCT `dct`: INTEGER_ACCURATE gives decode_jpeg(...,
 * dct_method="INTEGER_ACCURATE")'s pixels. */
int psg_jpeg_decode_with(const uint8_t *jpeg, size_t n, psg_jpeg_dct_t dct, uint8_t **rgb,
                         int *width, int *height);

/* Encodes h x w x 3 RGB bytes as a JPEG of `quality` (1-100) into *out
 * (malloc'ed). For tests and tools. Returns 0 or -1 with the error set. */
int psg_jpeg_encode(const uint8_t *rgb, int width, int height, int quality, uint8_t **out,
                    size_t *out_len);
/* Encodes h x w x 4 samples (CMYK as Adobe writes them, inverted: 255 is no ink; or, with
 * ycck, stored as YCCK) as a JPEG with an Adobe marker, as Photoshop does. For tests. */
int psg_jpeg_encode_cmyk(const uint8_t *cmyk, int width, int height, int quality, bool ycck,
                         uint8_t **out, size_t *out_len);

/* ---- PNG (examples/data/png.c) ---- */

/* True when data starts with the PNG signature. */
bool psg_png_is(const uint8_t *data, size_t n);
/* Decodes a PNG into *rgb (h x w x 3 bytes, malloc'ed) as TensorFlow's decode_png with
 * channels=3 does: palette and gray expanded, 16-bit samples cut to 8, alpha dropped.
 * -1 with the error "corrupt PNG: why"; never prints. */
int psg_png_decode(const uint8_t *data, size_t n, uint8_t **rgb, int *width, int *height);
/* Encodes h x w x channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) 8-bit samples as a PNG
 * into *out (malloc'ed). For tests and tools. */
int psg_png_encode(const uint8_t *pixels, int width, int height, int channels, uint8_t **out,
                   size_t *out_len);

/* An encoded image of a record, PNG or JPEG (told apart by the first bytes, as
 * TensorFlow's decode_image), into h x w x 3 RGB bytes: psg_png_decode or psg_jpeg_decode. */
int psg_image_decode(const uint8_t *data, size_t n, uint8_t **rgb, int *width, int *height);
/* The same, a JPEG decoded with the inverse DCT `dct`. */
int psg_image_decode_with(const uint8_t *data, size_t n, psg_jpeg_dct_t dct, uint8_t **rgb,
                          int *width, int *height);

/* ---- preprocessing ---- */

/* Crops the box (x0, y0, cw, ch) of an h x w x 3 image, resizes it
 * bilinearly to size x size, flips it left-right when `flip`, and writes
 * floats scaled to [-1, 1] into out (size * size * 3, HWC). */
void psg_image_crop_resize(const uint8_t *rgb, int width, int height, int x0, int y0, int cw,
                           int ch, bool flip, int size, float *out);

/* Inception's random crop, as tf.image.sample_distorted_bounding_box with
 * the whole image as the box: area in [0.05, 1] of the image, aspect ratio in
 * [3/4, 4/3], up to 10 tries, else the whole image. *state: a PRNG state. */
void psg_image_random_crop(int width, int height, uint64_t *state, int *x0, int *y0, int *cw,
                           int *ch);

/* ---- Inception's training distortions (examples/data/inception_preprocess.c) ---- */

/* tf.image.sample_distorted_bounding_box's arguments as TF's image_processing.py gives them. */
typedef struct {
    double min_object_covered;   /* 0.1 of the chosen box */
    double aspect_lo, aspect_hi; /* 0.75, 1.33 */
    double area_lo, area_hi;     /* 0.05, 1.0 of the image */
    int max_attempts;            /* 100 */
} psg_distort_options_t;

psg_distort_options_t psg_distort_defaults(void);

/* A crop (x0, y0, cw, ch) of a width x height image as sample_distorted_bounding_box: one of
 * the n boxes (ymin, xmin, ymax, xmax in [0, 1]; none or only empty ones: the whole image)
 * drawn, then crops of an aspect ratio and area drawn in o's ranges until one covers at least
 * o->min_object_covered of that box (o->max_attempts tries; else the whole image).
 * *state: a PRNG state. */
void psg_image_sample_distorted_box(int width, int height, const float (*boxes)[4], int n,
                                    const psg_distort_options_t *o, uint64_t *state, int *x0,
                                    int *y0, int *cw, int *ch);

/* TF's distort_color on pixels x 3 floats in [0, 1], in place: brightness +-32/255, then
 * (ordering 0) saturation x[0.5, 1.5], hue +-0.2, contrast x[0.5, 1.5], or (ordering 1)
 * brightness, contrast, saturation, hue; clipped to [0, 1]. */
void psg_image_distort_color(float *img, int64_t pixels, int ordering, uint64_t *state);

/* ---- the data set ---- */

typedef struct {
    int image_size;   /* 299 */
    bool train;       /* the distorted bounding-box crop, flip and colour distortion;
                       * false: central 87.5% crop */
    bool no_color;    /* train without the colour distortion */
    int label_offset; /* subtracted from image/class/label: 1 (the script's labels
                       * run 1..1000, 0 being "background") */
    int classes;      /* labels must fall in [0, classes): 1000 */
    int threads;      /* decode threads: 2 */
    uint64_t seed;    /* distortions: 1 */
    psg_tfrecord_compression_t compression; /* of the shards: AUTO (0, the default) detects
                                               GZIP or ZLIB from each file's first bytes */
    psg_jpeg_dct_t dct_method; /* INTEGER_FAST (0, the default: TensorFlow's decode_jpeg's) */
    psg_report_fn report;      /* told of each skipped record or image (NULL: counted only) */
    void *report_ctx;
} psg_imagenet_options_t;

psg_imagenet_options_t psg_imagenet_defaults(bool train);

typedef struct psg_imagenet psg_imagenet_t;

/* Indexes the TFRecord shards at `path`: a file, a glob pattern ("dir/validation-*"), or a
 * directory whose files named "<prefix>-*" are read in name order (prefix "train" or
 * "validation" by o->train; every regular file when none matches). A corrupt header is
 * reported and skipped at indexing; a record with bad data, a bad tf.Example,
 * a missing feature, a label out of range or a corrupt JPEG is reported when
 * first read ("file: byte N: why") and replaced by the next good record, so
 * a batch is always full. NULL with the error set when nothing is readable. */
psg_imagenet_t *psg_imagenet_new(const char *path, const psg_imagenet_options_t *o);
void psg_imagenet_destroy(psg_imagenet_t **r);

/* The data set over the records (borrowed: valid until destroy): examples
 * f32 [size, size, 3] in [-1, 1], labels i32. */
const psg_dataset_t *psg_imagenet_dataset(const psg_imagenet_t *r);
/* The data set, which takes the reader (*r set NULL): destroying the data set destroys
 * the reader. */
psg_dataset_t *psg_imagenet_take_dataset(psg_imagenet_t **r);
/* Records indexed, and problems reported so far (index + reads). */
int64_t psg_imagenet_num_records(const psg_imagenet_t *r);
int64_t psg_imagenet_num_skipped(const psg_imagenet_t *r);

/* ---- a synthetic ImageNet-format set (examples/data/imagenet_synth.c) ---- */

typedef struct {
    int classes;    /* 2..10 shapes: 10 */
    int train;      /* images: 400 */
    int validation; /* 100 */
    int image_size; /* 75 */
    int shards;     /* per split: 2 */
    uint64_t seed;  /* 1 */
} psg_imagenet_synth_t;

psg_imagenet_synth_t psg_imagenet_synth_defaults(void);

/* Writes under dir (made if absent) TFRecord shards as build_imagenet_data.py writes
 * ImageNet: train-NNNNN-of-NNNNN and validation-NNNNN-of-NNNNN, tf.Examples of a JPEG
 * (quality 90), a label in 1..classes and the object's box; class c is a shape (square,
 * disc, ring, plus, X, triangle up, triangle down, horizontal bar, vertical bar, frame) of
 * random place, size and colour over a noisy background. A JSON line of what was written
 * goes to out (NULL: none). Returns 0, or -1 with the error set. */
int psg_imagenet_synthesize(const char *dir, const psg_imagenet_synth_t *o, FILE *out);

#endif
