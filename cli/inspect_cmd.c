/* `psgraph inspect CHECKPOINT`: verifies a checkpoint (an index, one shard
 * file, or a directory's newest: sizes, offsets, checksums where the files carry
 * them) and lists its tensors with dtype, shape, bytes and min / max / mean / NaN
 * and Inf counts. Not an editor of checkpoints. */
#include "cli/commands.h"
#include "ps/client.h"
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

/* A tensor's statistics over its finite values, and its NaN and Inf counts. */
typedef struct {
    double lo, hi, sum;
    int64_t finite, nans, infs;
} stats_t;

static stats_t stats_of(const psg_checkpoint_entry_t *e) {
    /* the elements the bytes hold, never more than the shape claims (the reader checks both agree)
     */
    size_t es = psg_dtype_size(e->dtype);
    int64_t n = es ? (int64_t)(e->nbytes / es) : 0;
    if (psg_shape_numel(&e->shape) < n) n = psg_shape_numel(&e->shape);
    stats_t s = {.lo = INFINITY, .hi = -INFINITY};
    for (int64_t i = 0; i < n; i++) {
        double v = element(e, i);
        if (isnan(v)) {
            s.nans++;
        } else if (isinf(v)) {
            s.infs++;
        } else {
            s.lo = v < s.lo ? v : s.lo;
            s.hi = v > s.hi ? v : s.hi;
            s.sum += v;
            s.finite++;
        }
    }
    return s;
}

static void print_entry(const psg_checkpoint_entry_t *e) {
    char shape[PSG_SHAPE_STR_MAX];
    psg_shape_str(&e->shape, shape, sizeof shape);
    stats_t s = stats_of(e);
    if (s.finite)
        printf("%-40s %-5s %-18s %12zu %12.6g %12.6g %12.6g %6lld %6lld\n", e->name,
               psg_dtype_name(e->dtype), shape, e->nbytes, s.lo, s.hi, s.sum / (double)s.finite,
               (long long)s.nans, (long long)s.infs);
    else
        printf("%-40s %-5s %-18s %12zu %12s %12s %12s %6lld %6lld\n", e->name,
               psg_dtype_name(e->dtype), shape, e->nbytes, "-", "-", "-", (long long)s.nans,
               (long long)s.infs);
}

/* The summary line's checks: the checksums verified, or that the files carry none (sizes,
 * offsets and layout were checked all the same), and the non-finite values. */
static void print_checks(const psg_checkpoint_t *ck) {
    int files = 0, verified = psg_checkpoint_num_verified(ck, &files), bad = 0;
    int64_t nans = 0, infs = 0;
    for (int i = 0; i < psg_checkpoint_num_tensors(ck); i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        stats_t s = stats_of(&e);
        nans += s.nans;
        infs += s.infs;
        bad += s.nans + s.infs > 0;
    }
    if (verified == files)
        printf("checksums ok");
    else if (verified == 0)
        printf(
            "no checksums (%s carries no data_crc32: sizes and offsets checked, the values cannot be)",
            files == 1 ? "the file" : "no file");
    else
        printf("checksums ok in %d of %d files, none in the others (sizes and offsets checked)",
               verified, files);
    if (nans + infs)
        printf(", %lld NaN and %lld Inf in %d tensor%s\n", (long long)nans, (long long)infs, bad,
               bad == 1 ? "" : "s");
    else
        printf(", no NaN or Inf\n");
}

static void skipped(void *ctx, const char *path, const char *why) {
    (void)ctx;
    fprintf(stderr, "psgraph inspect: skipping %s: %s\n", path, why);
}

/* `psgraph inspect --task HOST:PORT`: a live task's Inspect report, one JSON line (its
 * variables with their crc32, which are backup copies, its backup task). */
static int inspect_task(const char *address) {
    psg_ts_client_t *c = psg_ts_client_new("task", address, 5000, 0, NULL);
    psg_req_t r = {.type = PSG_REQ_INSPECT};
    psg_rep_t rep;
    psg_msg_t *m = c ? psg_ts_call(c, &r, &rep, 5000) : NULL;
    psg_ts_client_destroy(&c);
    if (!m) {
        fprintf(stderr, "psgraph inspect: %s\n", psg_error_message());
        return 1;
    }
    printf("%.*s\n", (int)rep.u.json.len, rep.u.json.text);
    psg_msg_destroy(&m);
    return 0;
}

int psg_cmd_inspect(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--task")) return inspect_task(argv[2]);
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc == 2 ? stdout : stderr;
        fprintf(
            f,
            "usage: psgraph inspect CHECKPOINT | --task HOST:PORT\n"
            "  CHECKPOINT: an index (model.ckpt-S.index.json), one shard file (.safetensors),\n"
            "  or a directory (its newest complete checkpoint). Verifies sizes, offsets and\n"
            "  checksums (a safetensors file without psgraph's data_crc32 has none: said so),\n"
            "  then lists each tensor: dtype, shape, bytes, min, max, mean, NaN and Inf counts.\n"
            "  --task HOST:PORT: a running task's report as JSON (its variables with their\n"
            "  crc32, which are backup copies of another ps's shard, its backup task).\n");
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
    char step[32] = "no global step";
    if (psg_checkpoint_step(ck) >= 0)
        snprintf(step, sizeof step, "global step %lld", (long long)psg_checkpoint_step(ck));
    printf("%s: %s, %d tensors, %zu bytes, ", psg_checkpoint_path(ck), step, n, total);
    print_checks(ck);
    printf("%-40s %-5s %-18s %12s %12s %12s %12s %6s %6s\n", "tensor", "dtype", "shape", "bytes",
           "min", "max", "mean", "NaN", "Inf");
    for (int i = 0; i < n; i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        print_entry(&e);
    }
    psg_checkpoint_destroy(&ck);
    return 0;
}
