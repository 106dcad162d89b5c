/* Inception's training distortions after the decoder, as TF's inception/image_processing.py
 * (distort_image, distort_color) and slim's inception_preprocessing.py do them: the crop of
 * tf.image.sample_distorted_bounding_box over the record's boxes, and the colour
 * distortion (brightness, saturation, hue, contrast in one of two orders). Not the JPEG or
 * PNG decoder (imagenet.c, png.c) and not the reader. */
#include "core/rng.h"
#include "psgraph/imagenet.h"

#include <math.h>
#include <stdlib.h>

psg_distort_options_t psg_distort_defaults(void) {
    return (psg_distort_options_t){.min_object_covered = 0.1,
                                   .aspect_lo = 0.75,
                                   .aspect_hi = 1.33,
                                   .area_lo = 0.05,
                                   .area_hi = 1.0,
                                   .max_attempts = 100};
}

static double uniform01(uint64_t *s) {
    return (double)(psg_splitmix64(s) >> 11) / 9007199254740992.0;
}

/* An integer uniform in [0, n) (n >= 1). */
static int uniform_int(uint64_t *s, int n) {
    return n > 1 ? (int)(psg_splitmix64(s) % (uint64_t)n) : 0;
}

/* One random crop of aspect ratio `aspect` whose area lies in [min_area, max_area] pixels
 * (TF's GenerateRandomCrop): false when none fits. */
static bool random_crop(int width, int height, double min_area, double max_area, double aspect,
                        uint64_t *st, int *x0, int *y0, int *cw, int *ch) {
    int min_h = (int)lrint(sqrt(min_area / aspect)), max_h = (int)lrint(sqrt(max_area / aspect));
    if (lrint(max_h * aspect) > width) max_h = (int)((width + 0.5 - 1e-7) / aspect);
    if (max_h > height) max_h = height;
    if (min_h >= max_h) min_h = max_h;
    int h = min_h + (min_h < max_h ? uniform_int(st, max_h - min_h + 1) : 0);
    int w = (int)lrint(h * aspect);
    if ((double)w * h < min_area) {
        h += 1;
        w = (int)lrint(h * aspect);
    }
    double area = (double)w * h;
    if (area < min_area || area > max_area || w > width || h > height || w <= 0 || h <= 0)
        return false;
    *y0 = h < height ? uniform_int(st, height - h) : 0;
    *x0 = w < width ? uniform_int(st, width - w) : 0;
    *cw = w;
    *ch = h;
    return true;
}

/* Whether the crop covers at least `min` of one of the boxes (pixels, x0 y0 x1 y1). */
static bool covers(const double (*px)[4], int n, int x0, int y0, int cw, int ch, double min) {
    for (int i = 0; i < n; i++) {
        double bw = px[i][2] - px[i][0], bh = px[i][3] - px[i][1];
        if (bw <= 0 || bh <= 0) continue;
        double iw = fmin(px[i][2], x0 + cw) - fmax(px[i][0], x0),
               ih = fmin(px[i][3], y0 + ch) - fmax(px[i][1], y0);
        if (iw > 0 && ih > 0 && iw * ih / (bw * bh) >= min) return true;
    }
    return false;
}

void psg_image_sample_distorted_box(int width, int height, const float (*boxes)[4], int n,
                                    const psg_distort_options_t *o, uint64_t *st, int *x0, int *y0,
                                    int *cw, int *ch) {
    double px[PSG_EXAMPLE_MAX_BOXES][4];
    int m = 0;
    for (int i = 0; i < n && m < PSG_EXAMPLE_MAX_BOXES; i++) { /* ymin xmin ymax xmax in [0, 1] */
        double y_lo = fmax(0, boxes[i][0]), x_lo = fmax(0, boxes[i][1]);
        double y_hi = fmin(1, boxes[i][2]), x_hi = fmin(1, boxes[i][3]);
        if (y_hi <= y_lo || x_hi <= x_lo) continue; /* TF refuses these; a reader skips them */
        px[m][0] = x_lo * width, px[m][1] = y_lo * height;
        px[m][2] = x_hi * width, px[m][3] = y_hi * height;
        m++;
    }
    if (m == 0) { /* use_image_if_no_bounding_boxes */
        px[0][0] = px[0][1] = 0, px[0][2] = width, px[0][3] = height;
        m = 1;
    }
    int pick = uniform_int(st, m); /* the box the crop must cover */
    double area = (double)width * height;
    for (int a = 0; a < o->max_attempts; a++) {
        double aspect = o->aspect_lo + (o->aspect_hi - o->aspect_lo) * uniform01(st);
        if (random_crop(width, height, o->area_lo * area, o->area_hi * area, aspect, st, x0, y0, cw,
                        ch) &&
            covers(&px[pick], 1, *x0, *y0, *cw, *ch, o->min_object_covered))
            return;
    }
    *x0 = *y0 = 0; /* no crop fits: the whole image */
    *cw = width;
    *ch = height;
}

/* RGB in [0, 1] to HSV (h in [0, 1)) and back, as tf.image.rgb_to_hsv. */
static void rgb_hsv(const float *rgb, float *hsv) {
    float r = rgb[0], g = rgb[1], b = rgb[2];
    float mx = fmaxf(r, fmaxf(g, b)), mn = fminf(r, fminf(g, b)), d = mx - mn;
    float h = 0;
    if (d > 0) {
        if (mx == r)
            h = (g - b) / d;
        else if (mx == g)
            h = 2 + (b - r) / d;
        else
            h = 4 + (r - g) / d;
        h /= 6;
        if (h < 0) h += 1;
    }
    hsv[0] = h;
    hsv[1] = mx > 0 ? d / mx : 0;
    hsv[2] = mx;
}

static void hsv_rgb(const float *hsv, float *rgb) {
    float h = hsv[0] * 6, s = hsv[1], v = hsv[2];
    int i = (int)floorf(h);
    float f = h - (float)i, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    switch (((i % 6) + 6) % 6) {
    case 0: rgb[0] = v, rgb[1] = t, rgb[2] = p; break;
    case 1: rgb[0] = q, rgb[1] = v, rgb[2] = p; break;
    case 2: rgb[0] = p, rgb[1] = v, rgb[2] = t; break;
    case 3: rgb[0] = p, rgb[1] = q, rgb[2] = v; break;
    case 4: rgb[0] = t, rgb[1] = p, rgb[2] = v; break;
    default: rgb[0] = v, rgb[1] = p, rgb[2] = q; break;
    }
}

static float clamp01(float x) {
    return x < 0 ? 0 : x > 1 ? 1 : x;
}

/* Saturation times s_factor and hue plus h_delta (wrapped), through HSV. */
static void adjust_hsv(float *img, int64_t pixels, float s_factor, float h_delta) {
    for (int64_t i = 0; i < pixels; i++) {
        float *p = img + 3 * i, c[3] = {clamp01(p[0]), clamp01(p[1]), clamp01(p[2])}, hsv[3];
        rgb_hsv(c, hsv);
        hsv[0] += h_delta;
        hsv[0] -= floorf(hsv[0]);
        hsv[1] = clamp01(hsv[1] * s_factor);
        hsv_rgb(hsv, p);
    }
}

/* (x - mean) * factor + mean, the mean per channel over the image (tf.image.adjust_contrast). */
static void adjust_contrast(float *img, int64_t pixels, float factor) {
    double mean[3] = {0, 0, 0};
    for (int64_t i = 0; i < pixels; i++)
        for (int k = 0; k < 3; k++) mean[k] += img[3 * i + k];
    for (int k = 0; k < 3; k++) mean[k] /= (double)(pixels > 0 ? pixels : 1);
    for (int64_t i = 0; i < pixels; i++)
        for (int k = 0; k < 3; k++)
            img[3 * i + k] = (float)((img[3 * i + k] - mean[k]) * factor + mean[k]);
}

void psg_image_distort_color(float *img, int64_t pixels, int ordering, uint64_t *st) {
    /* the draws in a fixed order, whatever the ordering applies them in */
    float bright = (float)((2 * uniform01(st) - 1) * 32.0 / 255.0);
    float sat = (float)(0.5 + uniform01(st)), hue = (float)((2 * uniform01(st) - 1) * 0.2);
    float contrast = (float)(0.5 + uniform01(st));
    for (int64_t i = 0; i < 3 * pixels; i++) img[i] += bright;
    if (ordering == 0) {
        adjust_hsv(img, pixels, sat, hue);
        adjust_contrast(img, pixels, contrast);
    } else {
        adjust_contrast(img, pixels, contrast);
        adjust_hsv(img, pixels, sat, hue);
    }
    for (int64_t i = 0; i < 3 * pixels; i++) img[i] = clamp01(img[i]);
}
