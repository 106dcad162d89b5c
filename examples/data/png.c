/* PNG images through libpng, as TensorFlow's decode_png(channels=3) gives them: palette
 * and low-bit gray expanded, gray replicated to RGB, 16-bit samples cut to their high
 * byte, alpha dropped; errors by longjmp, nothing printed. Not JPEG (imagenet.c). */
#include "psgraph/error.h"
#include "psgraph/imagenet.h"

#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIDE 20000

typedef struct {
    const uint8_t *p;
    size_t n, at;
    char msg[200];
} png_src_t;

static void on_png_error(png_structp png, png_const_charp msg) {
    png_src_t *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void read_mem(png_structp png, png_bytep out, png_size_t n) {
    png_src_t *s = png_get_io_ptr(png);
    if (n > s->n - s->at) png_error(png, "the data ends early (truncated)");
    memcpy(out, s->p + s->at, n);
    s->at += n;
}

bool psg_png_is(const uint8_t *data, size_t n) {
    return n >= 8 && !png_sig_cmp(data, 0, 8);
}

int psg_png_decode(const uint8_t *data, size_t n, uint8_t **rgb, int *width, int *height) {
    *rgb = NULL;
    if (!psg_png_is(data, n)) return psg_error_set("corrupt PNG: no PNG signature (%zu bytes)", n);
    png_src_t src = {.p = data, .n = n};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_png_error, on_png_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile out = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return psg_error_set("out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(out);
        free(rows);
        return psg_error_set("corrupt PNG: %s", src.msg);
    }
    png_set_read_fn(png, &src, read_mem);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE) {
        snprintf(src.msg, sizeof src.msg, "unsupported image %ux%u", (unsigned)w, (unsigned)h);
        png_longjmp(png, 1);
    }
    int type = png_get_color_type(png, info);
    png_set_expand(png); /* palette to RGB, gray below 8 bits to 8, tRNS to alpha */
    png_set_strip_16(png);
    if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8) {
        snprintf(src.msg, sizeof src.msg, "%d channels of %d bits after conversion",
                 png_get_channels(png, info), png_get_bit_depth(png, info));
        png_longjmp(png, 1);
    }
    size_t stride = (size_t)w * 3;
    out = malloc(stride * h);
    rows = malloc(sizeof *rows * h);
    if (!out || !rows) {
        snprintf(src.msg, sizeof src.msg, "out of memory");
        png_longjmp(png, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = out + (size_t)y * stride;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    *width = (int)w;
    *height = (int)h;
    *rgb = out;
    return 0;
}

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} png_dst_t;

static void write_mem(png_structp png, png_bytep data, png_size_t n) {
    png_dst_t *d = png_get_io_ptr(png);
    if (d->n + n > d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4096;
        while (cap < d->n + n) cap *= 2;
        uint8_t *q = realloc(d->p, cap);
        if (!q) png_error(png, "out of memory");
        d->p = q;
        d->cap = cap;
    }
    memcpy(d->p + d->n, data, n);
    d->n += n;
}

static void flush_mem(png_structp png) {
    (void)png;
}

int psg_png_encode(const uint8_t *pixels, int width, int height, int channels, uint8_t **out,
                   size_t *out_len) {
    static const int types[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
    *out = NULL;
    if (channels < 1 || channels > 4 || width <= 0 || height <= 0)
        return psg_error_set("PNG encode: %dx%d with %d channels", width, height, channels);
    png_src_t err = {0};
    png_dst_t dst = {0};
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return psg_error_set("out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(dst.p);
        return psg_error_set("PNG encode: %s", err.msg);
    }
    png_set_write_fn(png, &dst, write_mem, flush_mem);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, types[channels],
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; y++) png_write_row(png, pixels + (size_t)y * width * channels);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    *out = dst.p;
    *out_len = dst.n;
    return 0;
}
