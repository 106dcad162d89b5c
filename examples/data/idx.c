/* The IDX reader (LeCun's format of MNIST and Fashion-MNIST), gzip or plain
 * through zlib: header checked, data read whole into a u8 tensor, with
 * loaders for images (f32 [N, R, C, 1] in [0, 1]) and labels (i32 [N]).
 * Not a dataset (examples/data/dataset.c). */
#include "psgraph/data.h"
#include "psgraph/error.h"

#include "core/checked.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

#define IDX_MAX_BYTES ((int64_t)1 << 34) /* a header promising more is corrupt */

/* Reads exactly n bytes; -1 with the error naming path on a short read. */
static int read_full(gzFile f, const char *path, void *dst, int64_t n, const char *what) {
    int64_t got = 0;
    while (got < n) {
        int64_t want = n - got;
        if (want > (1 << 30)) want = 1 << 30;
        int r = gzread(f, (char *)dst + got, (unsigned)want);
        if (r < 0) {
            int code;
            const char *msg = gzerror(f, &code);
            return psg_error_set("'%s': corrupt gzip stream reading the %s: %s", path, what, msg);
        }
        if (r == 0) break;
        got += r;
    }
    if (got < n)
        return psg_error_set("'%s': truncated: the %s needs %lld bytes, the file has %lld", path,
                             what, (long long)n, (long long)got);
    return 0;
}

psg_tensor_t *psg_idx_read(const char *path) {
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        psg_error_set("'%s': cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        return NULL;
    }
    psg_tensor_t *t = NULL;
    unsigned char magic[4], raw[4 * 4];
    if (read_full(f, path, magic, 4, "magic number") < 0) goto out;
    if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4) {
        psg_error_set("'%s': bad magic 0x%02x%02x%02x%02x: not an unsigned-byte IDX file "
                      "(0x000008nn, 1 <= nn <= 4)",
                      path, magic[0], magic[1], magic[2], magic[3]);
        goto out;
    }
    int nd = magic[3];
    if (read_full(f, path, raw, 4 * nd, "header") < 0) goto out;
    psg_shape_t shape = {.rank = nd};
    int64_t total = 1;
    for (int i = 0; i < nd; i++) {
        const unsigned char *p = raw + 4 * i;
        shape.dims[i] = ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | p[3];
        if (shape.dims[i] == 0 || psg_ckd_mul_i64(&total, total, shape.dims[i]) ||
            total > IDX_MAX_BYTES) {
            psg_error_set("'%s': corrupt header: dim %d is %lld", path, i,
                          (long long)shape.dims[i]);
            goto out;
        }
    }
    t = psg_tensor_new(PSG_DT_U8, &shape);
    if (!t) {
        psg_error_wrap("'%s'", path);
        goto out;
    }
    if (read_full(f, path, t->data, total, "data") < 0) {
        psg_tensor_destroy(&t);
        goto out;
    }
    unsigned char extra;
    if (gzread(f, &extra, 1) > 0) {
        psg_error_set("'%s': corrupt: bytes after the %lld the header announces", path,
                      (long long)total);
        psg_tensor_destroy(&t);
    }
out:
    gzclose(f);
    return t;
}

/* Reads path and checks its rank (3 for images, 1 for labels). */
static psg_tensor_t *read_rank(const char *path, int rank, const char *what) {
    psg_tensor_t *t = psg_idx_read(path);
    if (t && t->shape.rank != rank) {
        psg_error_set("'%s': magic 0x%08x is not IDX %s (expected 0x%08x)", path,
                      0x800 + t->shape.rank, what, 0x800 + rank);
        psg_tensor_destroy(&t);
    }
    return t;
}

psg_tensor_t *psg_idx_load_images(const char *path) {
    psg_tensor_t *raw = read_rank(path, 3, "images");
    if (!raw) return NULL;
    psg_shape_t s = psg_shape_4d(raw->shape.dims[0], raw->shape.dims[1], raw->shape.dims[2], 1);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &s);
    if (t) {
        const uint8_t *src = raw->data;
        float *dst = psg_tensor_f32(t);
        for (int64_t i = 0, n = psg_tensor_numel(t); i < n; i++)
            dst[i] = (float)src[i] * (1.0f / 255.0f);
    }
    psg_tensor_destroy(&raw);
    return t;
}

psg_tensor_t *psg_idx_load_labels(const char *path) {
    psg_tensor_t *raw = read_rank(path, 1, "labels");
    if (!raw) return NULL;
    psg_tensor_t *t = psg_tensor_new(PSG_DT_I32, &raw->shape);
    if (t) {
        const uint8_t *src = raw->data;
        for (int64_t i = 0, n = psg_tensor_numel(t); i < n; i++) psg_tensor_i32(t)[i] = src[i];
    }
    psg_tensor_destroy(&raw);
    return t;
}
