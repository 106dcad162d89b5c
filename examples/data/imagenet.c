/* ImageNet TFRecord shards as a psg_dataset_t: index the records once,
 * then per batch read, parse, decode (libjpeg-turbo) and distort each image
 * on a pool of decode threads. Bad records and images are reported and
 * replaced, never fatal. Not a general image library. */
#include "core/rng.h"
#include "psgraph/imagenet.h"

#include "psgraph/error.h"
#include "psgraph/threadpool.h"

#include "core/checked.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <jpeglib.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- JPEG through libjpeg, errors by longjmp, nothing printed ---- */

#define JPEG_MAX_SIDE 20000
#define JPEG_MAX_PIXELS (64 << 20)            /* 192 MiB of RGB */
#define JPEG_MAX_WORK_BYTES ((long)512 << 20) /* libjpeg's own (progressive coefficients) */

typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err_t;

static void on_jpeg_error(j_common_ptr c) {
    jpeg_err_t *e = (jpeg_err_t *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

/* warnings (corrupt data libjpeg recovers from) are kept quiet */
static void on_jpeg_message(j_common_ptr c, int level) {
    (void)c;
    (void)level;
}

/* CMYK to RGB as TensorFlow's decode_jpeg (jpeg_mem.cc): with an Adobe marker the samples
 * are inverted (255: no ink), r = c * k / 255; without, r = (255 - c) * (255 - k) / 255.
 * in is (w, 4), out (w, 3); out may start where in starts (it is written left to right
 * and never passes the pixel being read). */
static void cmyk_row_to_rgb(const uint8_t *in, uint8_t *out, int w, bool adobe) {
    for (int i = 0; i < w; i++) {
        int c = in[4 * i], m = in[4 * i + 1], y = in[4 * i + 2], k = in[4 * i + 3];
        if (!adobe) {
            c = 255 - c;
            m = 255 - m;
            y = 255 - y;
            k = 255 - k;
        }
        out[3 * i] = (uint8_t)(c * k / 255);
        out[3 * i + 1] = (uint8_t)(m * k / 255);
        out[3 * i + 2] = (uint8_t)(y * k / 255);
    }
}

int psg_jpeg_dct_parse(const char *s, psg_jpeg_dct_t *out) {
    if (!strcmp(s, "INTEGER_FAST") || !*s)
        *out = PSG_JPEG_DCT_INTEGER_FAST;
    else if (!strcmp(s, "INTEGER_ACCURATE"))
        *out = PSG_JPEG_DCT_INTEGER_ACCURATE;
    else
        return psg_error_set(
            "'%s' is not a dct_method (INTEGER_FAST, TensorFlow's default, or INTEGER_ACCURATE)",
            s);
    return 0;
}

const char *psg_jpeg_dct_name(psg_jpeg_dct_t dct) {
    return dct == PSG_JPEG_DCT_INTEGER_ACCURATE ? "INTEGER_ACCURATE" : "INTEGER_FAST";
}

int psg_image_decode(const uint8_t *data, size_t n, uint8_t **rgb, int *width, int *height) {
    return psg_image_decode_with(data, n, PSG_JPEG_DCT_INTEGER_FAST, rgb, width, height);
}

int psg_image_decode_with(const uint8_t *data, size_t n, psg_jpeg_dct_t dct, uint8_t **rgb,
                          int *width, int *height) {
    if (psg_png_is(data, n)) return psg_png_decode(data, n, rgb, width, height);
    return psg_jpeg_decode_with(data, n, dct, rgb, width, height);
}

int psg_jpeg_decode(const uint8_t *jpeg, size_t n, uint8_t **rgb, int *width, int *height) {
    return psg_jpeg_decode_with(jpeg, n, PSG_JPEG_DCT_INTEGER_FAST, rgb, width, height);
}

int psg_jpeg_decode_with(const uint8_t *jpeg, size_t n, psg_jpeg_dct_t dct, uint8_t **rgb,
                         int *width, int *height) {
    struct jpeg_decompress_struct d;
    jpeg_err_t err;
    /* volatile: read after longjmp */
    uint8_t *volatile out = NULL;
    *rgb = NULL;
    if (n == 0 || n > (size_t)0x7fffffff) return psg_error_set("corrupt JPEG: %zu bytes", n);
    d.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = on_jpeg_error;
    err.mgr.emit_message = on_jpeg_message;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&d);
        free(out);
        return psg_error_set("corrupt JPEG: %s", err.msg);
    }
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, jpeg, (unsigned long)n);
    jpeg_read_header(&d, TRUE);
    /* a decompression bomb (a 292-byte progressive 65500x65500 took 8.4 GB) is refused
     * from its header, before libjpeg allocates; its own buffers are capped too */
    if (d.image_width == 0 || d.image_height == 0 || d.image_width > JPEG_MAX_SIDE ||
        d.image_height > JPEG_MAX_SIDE ||
        (uint64_t)d.image_width * d.image_height > JPEG_MAX_PIXELS) {
        snprintf(err.msg, sizeof err.msg, "image %ux%u over the limit (%d per side, %d Mpixels)",
                 d.image_width, d.image_height, JPEG_MAX_SIDE, JPEG_MAX_PIXELS >> 20);
        longjmp(err.jump, 1);
    }
    d.mem->max_memory_to_use = JPEG_MAX_WORK_BYTES;
    /* grayscale and YCbCr convert to RGB in libjpeg; CMYK and YCCK come out as CMYK and are
     * converted below, as TensorFlow's decode_jpeg does */
    bool cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
    d.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    /* TensorFlow's decode_jpeg (jpeg_mem.cc): fast integer IDCT unless INTEGER_ACCURATE, fancy
     * upsampling (libjpeg's default) */
    d.dct_method = dct == PSG_JPEG_DCT_INTEGER_ACCURATE ? JDCT_ISLOW : JDCT_IFAST;
    d.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&d);
    if (d.output_components != (cmyk ? 4 : 3) || d.output_width == 0 || d.output_height == 0 ||
        d.output_width > JPEG_MAX_SIDE || d.output_height > JPEG_MAX_SIDE) {
        snprintf(err.msg, sizeof err.msg, "unsupported image %ux%u with %d components",
                 d.output_width, d.output_height, d.output_components);
        longjmp(err.jump, 1);
    }
    size_t stride = (size_t)d.output_width * 3;
    /* a CMYK row is read into its RGB row's place, spilling w bytes into the next row's (not
     * read yet; past the last row, the w bytes more allocated), and converted in place */
    out = malloc(stride * d.output_height + (cmyk ? (size_t)d.output_width : 0));
    if (!out) {
        snprintf(err.msg, sizeof err.msg, "out of memory");
        longjmp(err.jump, 1);
    }
    while (d.output_scanline < d.output_height) {
        uint8_t *rgb_row = out + (size_t)d.output_scanline * stride;
        JSAMPROW row = rgb_row;
        jpeg_read_scanlines(&d, &row, 1);
        if (cmyk) cmyk_row_to_rgb(row, rgb_row, (int)d.output_width, d.saw_Adobe_marker);
    }
    jpeg_finish_decompress(&d);
    *width = (int)d.output_width;
    *height = (int)d.output_height;
    jpeg_destroy_decompress(&d);
    *rgb = out;
    return 0;
}

/* pixels (h, w, 3 RGB or 4 CMYK) into a JPEG of color space `space` (JCS_YCbCr from RGB,
 * JCS_CMYK or JCS_YCCK from CMYK, with an Adobe marker). */
static int encode(const uint8_t *pixels, int width, int height, int quality, int components,
                  J_COLOR_SPACE space, uint8_t **out, size_t *out_len) {
    struct jpeg_compress_struct c;
    jpeg_err_t err;
    unsigned char *volatile mem = NULL;
    unsigned long size = 0;
    c.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = on_jpeg_error;
    err.mgr.emit_message = on_jpeg_message;
    if (setjmp(err.jump)) {
        jpeg_destroy_compress(&c);
        free(mem);
        return psg_error_set("JPEG encode: %s", err.msg);
    }
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    jpeg_mem_dest(&c, &buf, &size);
    c.image_width = (JDIMENSION)width;
    c.image_height = (JDIMENSION)height;
    c.input_components = components;
    c.in_color_space = components == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, space);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row =
            (JSAMPROW)(pixels + (size_t)c.next_scanline * (size_t)width * (size_t)components);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    mem = buf;
    jpeg_destroy_compress(&c);
    *out = mem;
    *out_len = size;
    return 0;
}

int psg_jpeg_encode(const uint8_t *rgb, int width, int height, int quality, uint8_t **out,
                    size_t *out_len) {
    return encode(rgb, width, height, quality, 3, JCS_YCbCr, out, out_len);
}

int psg_jpeg_encode_cmyk(const uint8_t *cmyk, int width, int height, int quality, bool ycck,
                         uint8_t **out, size_t *out_len) {
    return encode(cmyk, width, height, quality, 4, ycck ? JCS_YCCK : JCS_CMYK, out, out_len);
}

/* ---- preprocessing ---- */

void psg_image_crop_resize(const uint8_t *rgb, int width, int height, int x0, int y0, int cw,
                           int ch, bool flip, int size, float *out) {
    /* rgb is (height, width, 3); out is (size, size, 3); pixel centres aligned */
    double sy = (double)ch / size, sx = (double)cw / size;
    for (int oy = 0; oy < size; oy++) {
        double fy = y0 + (oy + 0.5) * sy - 0.5;
        fy = fmin(fmax(fy, 0.0), height - 1.0);
        int y1 = (int)fy, y2 = y1 + 1 < height ? y1 + 1 : y1;
        float wy = (float)(fy - y1);
        for (int ox = 0; ox < size; ox++) {
            double fx = x0 + (ox + 0.5) * sx - 0.5;
            fx = fmin(fmax(fx, 0.0), width - 1.0);
            int x1 = (int)fx, x2 = x1 + 1 < width ? x1 + 1 : x1;
            float wx = (float)(fx - x1);
            const uint8_t *a = rgb + ((size_t)y1 * width + x1) * 3,
                          *b = rgb + ((size_t)y1 * width + x2) * 3;
            const uint8_t *c = rgb + ((size_t)y2 * width + x1) * 3,
                          *d = rgb + ((size_t)y2 * width + x2) * 3;
            float *o = out + ((size_t)oy * size + (flip ? size - 1 - ox : ox)) * 3;
            for (int k = 0; k < 3; k++) {
                float top = a[k] + (b[k] - a[k]) * wx, bot = c[k] + (d[k] - c[k]) * wx;
                o[k] = (top + (bot - top) * wy) * (2.0f / 255.0f) - 1.0f;
            }
        }
    }
}

static double uniform01(uint64_t *s) {
    return (double)(psg_splitmix64(s) >> 11) / 9007199254740992.0;
}

void psg_image_random_crop(int width, int height, uint64_t *state, int *x0, int *y0, int *cw,
                           int *ch) {
    double area = (double)width * height;
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (0.05 + 0.95 * uniform01(state));
        double log_lo = log(3.0 / 4.0), log_hi = log(4.0 / 3.0);
        double aspect = exp(log_lo + (log_hi - log_lo) * uniform01(state));
        int w = (int)lround(sqrt(target * aspect)), h = (int)lround(sqrt(target / aspect));
        if (w >= 1 && h >= 1 && w <= width && h <= height) {
            *cw = w;
            *ch = h;
            *x0 = (int)(uniform01(state) * (width - w + 1));
            *y0 = (int)(uniform01(state) * (height - h + 1));
            if (*x0 > width - w) *x0 = width - w;
            if (*y0 > height - h) *y0 = height - h;
            return;
        }
    }
    *x0 = *y0 = 0;
    *cw = width;
    *ch = height;
}

/* ---- the reader ---- */

typedef struct {
    char *path;
    int fd;
} shard_t;

typedef struct {
    int shard;
    psg_tfrecord_entry_t e;
} record_t;

struct psg_imagenet {
    psg_imagenet_options_t o;
    shard_t *shards;
    int n_shards;
    record_t *records;
    int64_t n_records;
    atomic_uchar *bad; /* per record: reported once, then passed over */
    atomic_llong skipped;
    atomic_ullong fills;
    pthread_mutex_t report_lock;
    psg_threadpool_t *pool;
    psg_dataset_t *ds;
};

psg_imagenet_options_t psg_imagenet_defaults(bool train) {
    return (psg_imagenet_options_t){.image_size = 299,
                                    .train = train,
                                    .label_offset = 1,
                                    .classes = 1000,
                                    .threads = 2,
                                    .seed = 1};
}

static void tell(psg_imagenet_t *r, const char *msg) {
    atomic_fetch_add(&r->skipped, 1);
    if (!r->o.report) return;
    pthread_mutex_lock(&r->report_lock);
    r->o.report(r->o.report_ctx, msg);
    pthread_mutex_unlock(&r->report_lock);
}

static void tell_index(void *ctx, const char *msg) {
    tell(ctx, msg);
}

/* Loads record i into out (size x size x 3) and its label. -1 with the
 * error "file: byte N: why" when the record or its image is bad. */
static int load(psg_imagenet_t *r, int64_t i, uint64_t rng, float *out, int32_t *label) {
    const record_t *rec = &r->records[i];
    const shard_t *sh = &r->shards[rec->shard];
    uint8_t *buf = malloc(rec->e.length > 0 ? (size_t)rec->e.length : 1);
    if (!buf)
        return psg_error_set("%s: byte %lld: out of memory", sh->path, (long long)rec->e.offset);
    int rc = psg_tfrecord_read(sh->fd, sh->path, &rec->e, buf);
    psg_example_image_t ex;
    if (rc == 0 && psg_example_parse(buf, (size_t)rec->e.length, "image/encoded",
                                     "image/class/label", &ex) < 0)
        rc = psg_error_wrap("%s: byte %lld", sh->path, (long long)rec->e.offset);
    if (rc == 0 && (!ex.has_encoded || !ex.has_label))
        rc = psg_error_set("%s: byte %lld: tf.Example lacks %s", sh->path, (long long)rec->e.offset,
                           ex.has_encoded ? "image/class/label" : "image/encoded");
    int64_t y = 0; /* a label of INT64_MIN minus the offset overflowed once */
    if (rc == 0 && (psg_ckd_sub_i64(&y, ex.label, r->o.label_offset) || y < 0 || y >= r->o.classes))
        rc = psg_error_set("%s: byte %lld: label %lld outside [%d, %d)", sh->path,
                           (long long)rec->e.offset, (long long)ex.label, r->o.label_offset,
                           r->o.label_offset + r->o.classes);
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    if (rc == 0 &&
        psg_image_decode_with(ex.encoded, ex.encoded_len, r->o.dct_method, &rgb, &w, &h) < 0)
        rc = psg_error_wrap("%s: byte %lld", sh->path, (long long)rec->e.offset);
    if (rc == 0) {
        int x0, y0, cw, ch;
        bool flip = false;
        if (r->o.train) { /* TF's image_processing.py: the record's boxes, the crop, a flip */
            float boxes[PSG_EXAMPLE_MAX_BOXES][4];
            for (int b = 0; b < ex.n_boxes; b++)
                for (int k = 0; k < 4; k++) boxes[b][k] = ex.box[k][b];
            psg_distort_options_t d = psg_distort_defaults();
            psg_image_sample_distorted_box(w, h, (const float(*)[4])boxes, ex.n_boxes, &d, &rng,
                                           &x0, &y0, &cw, &ch);
            flip = psg_splitmix64(&rng) & 1;
        } else {
            cw = (int)lround(w * 0.875);
            ch = (int)lround(h * 0.875);
            cw = cw < 1 ? 1 : cw;
            ch = ch < 1 ? 1 : ch;
            x0 = (w - cw) / 2;
            y0 = (h - ch) / 2;
        }
        psg_image_crop_resize(rgb, w, h, x0, y0, cw, ch, flip, r->o.image_size, out);
        if (r->o.train && !r->o.no_color) { /* in [0, 1], as distort_color takes it */
            int64_t px = (int64_t)r->o.image_size * r->o.image_size;
            for (int64_t k = 0; k < 3 * px; k++) out[k] = (out[k] + 1.0f) * 0.5f;
            psg_image_distort_color(out, px, (int)(psg_splitmix64(&rng) & 1), &rng);
            for (int64_t k = 0; k < 3 * px; k++) out[k] = out[k] * 2.0f - 1.0f;
        }
        *label = (int32_t)y;
    }
    free(rgb);
    free(buf);
    return rc;
}

typedef struct {
    psg_imagenet_t *r;
    const int64_t *indices;
    float *images;
    int32_t *labels;
    uint64_t fill;
    atomic_int failed;
} fill_job_t;

static void fill_range(void *ctx, int64_t begin, int64_t end) {
    fill_job_t *j = ctx;
    psg_imagenet_t *r = j->r;
    size_t per = (size_t)r->o.image_size * r->o.image_size * 3;
    for (int64_t k = begin; k < end; k++) {
        int64_t i = j->indices[k];
        uint64_t rng = r->o.seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull ^
                       j->fill * 0x94d049bb133111ebull;
        bool ok = false;
        /* a bad record is replaced by the next good one */
        for (int64_t t = 0; t < r->n_records && t < 64 && !ok; t++) {
            int64_t at = (i + t) % r->n_records;
            if (atomic_load(&r->bad[at])) continue;
            if (load(r, at, rng, j->images + (size_t)k * per, &j->labels[k]) == 0) {
                ok = true;
            } else if (!atomic_exchange(&r->bad[at], 1)) {
                tell(r, psg_error_message());
            }
        }
        if (!ok) atomic_store(&j->failed, 1);
    }
}

static int fill(void *ctx, int n, const int64_t *indices, float *images, int32_t *labels) {
    psg_imagenet_t *r = ctx;
    fill_job_t j = {.r = r,
                    .indices = indices,
                    .images = images,
                    .labels = labels,
                    .fill = atomic_fetch_add(&r->fills, 1)};
    atomic_init(&j.failed, 0);
    psg_parallel_for(r->pool, n, 1, fill_range, &j);
    if (atomic_load(&j.failed))
        return psg_error_set(
            "imagenet: no readable record among 64 after one of the batch's (%lld skipped so far)",
            (long long)atomic_load(&r->skipped));
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files a glob pattern names, sorted (glob's order); *n set. NULL with the
 * error set when none does. */
static char **list_pattern(const char *pattern, int *n) {
    glob_t gl;
    char **v = NULL;
    if (glob(pattern, 0, NULL, &gl) == 0) {
        v = calloc(gl.gl_pathc, sizeof *v);
        for (size_t i = 0; v && i < gl.gl_pathc; i++) {
            struct stat st;
            if (stat(gl.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode) &&
                (v[*n] = strdup(gl.gl_pathv[i])))
                (*n)++;
        }
    }
    globfree(&gl);
    if (*n == 0) {
        free(v);
        psg_error_set("%s: no file matches", pattern);
        return NULL;
    }
    return v;
}

/* The shard files at path, sorted; *n set. NULL with the error set. */
static char **list_files(const char *path, bool train, int *n) {
    struct stat st;
    *n = 0;
    if (strpbrk(path, "*?[")) return list_pattern(path, n);
    if (stat(path, &st) < 0) {
        psg_error_set("%s: %s", path, strerror(errno));
        return NULL;
    }
    char **v = NULL;
    if (!S_ISDIR(st.st_mode)) {
        v = malloc(sizeof *v);
        if (v && (v[0] = strdup(path))) *n = 1;
        return v;
    }
    const char *prefix = train ? "train-" : "validation-";
    for (int pass = 0; pass < 2 && *n == 0; pass++) {
        DIR *d = opendir(path);
        if (!d) {
            psg_error_set("%s: %s", path, strerror(errno));
            return NULL;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.' || (pass == 0 && strncmp(de->d_name, prefix, strlen(prefix))))
                continue;
            char full[4096];
            snprintf(full, sizeof full, "%s/%s", path, de->d_name);
            if (stat(full, &st) < 0 || !S_ISREG(st.st_mode)) continue;
            char **nv = realloc(v, (size_t)(*n + 1) * sizeof *nv);
            if (!nv) break;
            v = nv;
            if ((v[*n] = strdup(full))) (*n)++;
        }
        closedir(d);
    }
    if (*n == 0) {
        free(v);
        psg_error_set("%s: no TFRecord files", path);
        return NULL;
    }
    qsort(v, (size_t)*n, sizeof *v, cmp_str);
    return v;
}

psg_imagenet_t *psg_imagenet_new(const char *path, const psg_imagenet_options_t *o) {
    if (o->image_size < 1 || o->classes < 1 || o->threads < 1) {
        psg_error_set("imagenet: image size, classes and threads must be >= 1");
        return NULL;
    }
    int nf;
    char **files = list_files(path, o->train, &nf);
    if (!files) return NULL;
    psg_imagenet_t *r = calloc(1, sizeof *r);
    if (!r) {
        for (int i = 0; i < nf; i++) free(files[i]);
        free(files);
        psg_error_set("out of memory");
        return NULL;
    }
    r->o = *o;
    pthread_mutex_init(&r->report_lock, NULL);
    r->shards = calloc((size_t)nf, sizeof *r->shards);
    for (int i = 0; r->shards && i < nf; i++) r->shards[i] = (shard_t){files[i], -1};
    if (!r->shards)
        for (int i = 0; i < nf; i++) free(files[i]);
    r->n_shards = r->shards ? nf : 0;
    free(files);
    int64_t cap = 0;
    for (int s = 0; s < r->n_shards; s++) {
        psg_tfrecord_entry_t *e;
        int64_t n;
        /* a GZIP or ZLIB shard is inflated first; its name in every report says so */
        psg_tfrecord_compression_t found;
        char name[PSG_TFRECORD_NAME_MAX];
        int fd = psg_tfrecord_open(r->shards[s].path, o->compression, &found, name, sizeof name);
        char *named = fd >= 0 ? strdup(name) : NULL;
        if (fd < 0 || !named || psg_tfrecord_index_fd(fd, named, &e, &n, tell_index, r) < 0) {
            if (fd >= 0) close(fd);
            tell(r, named ? psg_error_message() : fd < 0 ? psg_error_message() : "out of memory");
            free(named);
            continue;
        }
        free(r->shards[s].path);
        r->shards[s].path = named;
        r->shards[s].fd = fd;
        if (r->n_records + n > cap) {
            cap = (r->n_records + n) * 2;
            record_t *nv = realloc(r->records, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(e);
                break;
            }
            r->records = nv;
        }
        for (int64_t k = 0; k < n; k++) r->records[r->n_records++] = (record_t){s, e[k]};
        free(e);
    }
    if (r->n_records == 0) {
        psg_error_set("%s: no readable records (%lld problems)", path,
                      (long long)atomic_load(&r->skipped));
        psg_imagenet_destroy(&r);
        return NULL;
    }
    r->bad = calloc((size_t)r->n_records, sizeof *r->bad);
    r->pool = psg_threadpool_new(o->threads);
    psg_shape_t ex = psg_shape_make(3, (int64_t[]){o->image_size, o->image_size, 3});
    r->ds = r->bad && r->pool ? psg_dataset_from_fn(r->n_records, &ex, o->classes, fill, r) : NULL;
    if (!r->ds) {
        psg_imagenet_destroy(&r);
        return NULL;
    }
    return r;
}

void psg_imagenet_destroy(psg_imagenet_t **rp) {
    if (!rp || !*rp) return;
    psg_imagenet_t *r = *rp;
    *rp = NULL;
    psg_dataset_destroy(&r->ds);
    psg_threadpool_destroy(&r->pool);
    for (int i = 0; i < r->n_shards; i++) {
        if (r->shards[i].fd >= 0) close(r->shards[i].fd);
        free(r->shards[i].path);
    }
    free(r->shards);
    free(r->records);
    free(r->bad);
    pthread_mutex_destroy(&r->report_lock);
    free(r);
}

const psg_dataset_t *psg_imagenet_dataset(const psg_imagenet_t *r) {
    return r->ds;
}

static void destroy_reader(void *ctx) {
    psg_imagenet_t *r = ctx;
    psg_imagenet_destroy(&r);
}

psg_dataset_t *psg_imagenet_take_dataset(psg_imagenet_t **rp) {
    psg_imagenet_t *r = *rp;
    psg_dataset_t *ds = r->ds;
    *rp = NULL;
    r->ds = NULL; /* the reader is the data set's now */
    psg_dataset_own_ctx(ds, destroy_reader);
    return ds;
}
int64_t psg_imagenet_num_records(const psg_imagenet_t *r) {
    return r->n_records;
}
int64_t psg_imagenet_num_skipped(const psg_imagenet_t *r) {
    return atomic_load(&r->skipped);
}
