/* `psgraph inspect CHECKPOINT`: verifies a checkpoint (an index, one shard
 * file, or a directory's newest) and lists its tensors with dtype, shape,
 * bytes and min / max / mean / NaN count. Not an editor of checkpoints. */
#include "cli/commands.h"
#include "psgraph/checkpoint.h"
#include "psgraph/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0    ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(m | 0x400), e - 25);
    return h & 0x8000 ? -v : v;
}

/* Element i of a tensor as a double. */
static double element(const psg_checkpoint_entry_t *e, int64_t i) {
    const void *d = e->data;
    switch (e->dtype) {
    case PSG_DT_F32: return ((const float *)d)[i];
    case PSG_DT_F64: return ((const double *)d)[i];
    case PSG_DT_I32: return ((const int32_t *)d)[i];
    case PSG_DT_I64: return (double)((const int64_t *)d)[i];
    case PSG_DT_U8:
    case PSG_DT_BOOL: return ((const uint8_t *)d)[i];
    case PSG_DT_F16: return half_to_float(((const uint16_t *)d)[i]);
    case PSG_DT_BF16: {
        uint32_t bits = (uint32_t)((const uint16_t *)d)[i] << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    default: return NAN;
    }
}

static void print_entry(const psg_checkpoint_entry_t *e) {
    char shape[PSG_SHAPE_STR_MAX];
    psg_shape_str(&e->shape, shape, sizeof shape);
    /* the elements the bytes hold, never more than the shape claims (the reader checks both agree)
     */
    size_t es = psg_dtype_size(e->dtype);
    int64_t n = es ? (int64_t)(e->nbytes / es) : 0, nans = 0, counted = 0;
    if (psg_shape_numel(&e->shape) < n) n = psg_shape_numel(&e->shape);
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = element(e, i);
        if (isnan(v)) {
            nans++;
            continue;
        }
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
        counted++;
    }
    if (counted)
        printf("%-40s %-5s %-18s %12zu %12.6g %12.6g %12.6g %6lld\n", e->name,
               psg_dtype_name(e->dtype), shape, e->nbytes, lo, hi, sum / (double)counted,
               (long long)nans);
    else
        printf("%-40s %-5s %-18s %12zu %12s %12s %12s %6lld\n", e->name, psg_dtype_name(e->dtype),
               shape, e->nbytes, "-", "-", "-", (long long)nans);
}

static void skipped(void *ctx, const char *path, const char *why) {
    (void)ctx;
    fprintf(stderr, "psgraph inspect: skipping %s: %s\n", path, why);
}

int psg_cmd_inspect(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc == 2 ? stdout : stderr;
        fprintf(f,
                "usage: psgraph inspect CHECKPOINT\n"
                "  CHECKPOINT: an index (model.ckpt-S.index.json), one shard file (.safetensors),\n"
                "  or a directory (its newest complete checkpoint). Verifies sizes and checksums,\n"
                "  then lists each tensor: dtype, shape, bytes, min, max, mean, NaN count.\n");
        return argc == 2 ? 0 : 2;
    }
    struct stat st;
    psg_checkpoint_t *ck = NULL;
    if (stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode)) {
        int rc = psg_checkpoint_open_latest(argv[1], -1, skipped, NULL, &ck);
        if (rc == 0) fprintf(stderr, "psgraph inspect: %s: no complete checkpoint\n", argv[1]);
        if (rc < 0) fprintf(stderr, "psgraph inspect: %s\n", psg_error_message());
        if (rc <= 0) return 1;
    } else if (!(ck = psg_checkpoint_open(argv[1], -1))) {
        fprintf(stderr, "psgraph inspect: %s\n", psg_error_message());
        return 1;
    }
    size_t total = 0;
    int n = psg_checkpoint_num_tensors(ck);
    for (int i = 0; i < n; i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        total += e.nbytes;
    }
    printf("%s: global step %lld, %d tensors, %zu bytes, checksums ok\n", psg_checkpoint_path(ck),
           (long long)psg_checkpoint_step(ck), n, total);
    printf("%-40s %-5s %-18s %12s %12s %12s %12s %6s\n", "tensor", "dtype", "shape", "bytes", "min",
           "max", "mean", "NaN");
    for (int i = 0; i < n; i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        print_entry(&e);
    }
    psg_checkpoint_destroy(&ck);
    return 0;
}
