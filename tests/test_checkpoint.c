/* Checkpoints: save and restore over two shards, a shard alone, an
 * independent Python reader of the files, corrupt / truncated / missing
 * shards and the fallback, keep-K, the interval, the cnn's timing, and a
 * training run that resumes from its logdir. Not the multi-process runtime. */
#include "core/json.h"
#include "psgraph/checkpoint.h"
#include "tests/testutil.h"

#include <dirent.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *reader_script; /* tests/read_safetensors.py, from argv[1] */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_rf(const char *dir) {
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *make_tmpdir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/psg_ckpt_XXXXXX");
    return mkdtemp(buf);
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A variable `name` of rm filled with value(i) = seed + i * 0.25 (cast to its dtype). */
static psg_variable_t *make_var(psg_resource_mgr_t *rm, const char *name, psg_dtype_t dt,
                                psg_shape_t shape, double seed) {
    psg_variable_t *v = psg_resource_variable(rm, name, dt, &shape);
    if (!v) return NULL;
    int64_t n = psg_shape_numel(&shape);
    for (int64_t i = 0; i < n; i++) {
        double x = seed + (double)i * 0.25;
        switch (dt) {
        case PSG_DT_F32: ((float *)v->value->data)[i] = (float)x; break;
        case PSG_DT_F64: ((double *)v->value->data)[i] = x; break;
        case PSG_DT_I32: ((int32_t *)v->value->data)[i] = (int32_t)(seed + (double)i); break;
        case PSG_DT_I64: ((int64_t *)v->value->data)[i] = (int64_t)(seed + (double)i); break;
        case PSG_DT_U8: ((uint8_t *)v->value->data)[i] = (uint8_t)(i + 1); break;
        case PSG_DT_BOOL: ((uint8_t *)v->value->data)[i] = (uint8_t)(i % 2); break;
        default: break;
        }
    }
    v->initialized = true;
    return v;
}

/* Two ps shards' worth of variables: every dtype the trainer uses and some. */
static void fill_shards(psg_resource_mgr_t *rm0, psg_resource_mgr_t *rm1, double seed) {
    make_var(rm0, "model/w", PSG_DT_F32, psg_shape_2d(3, 4), seed);
    make_var(rm0, "model/w/Momentum", PSG_DT_F32, psg_shape_2d(3, 4), -seed);
    make_var(rm0, "global_step", PSG_DT_I64, psg_shape_scalar(), seed);
    make_var(rm0, "model/b", PSG_DT_F64, psg_shape_1d(2), seed * 2);
    make_var(rm1, "model/emb", PSG_DT_F32, psg_shape_4d(2, 1, 3, 1), seed + 1);
    make_var(rm1, "model/count", PSG_DT_I32, psg_shape_1d(4), seed);
    make_var(rm1, "model/mask", PSG_DT_U8, psg_shape_1d(3), 0);
    make_var(rm1, "model/flag", PSG_DT_BOOL, psg_shape_1d(2), 0);
}

/* True when every initialized variable of a equals the one of that name in b. */
static bool same_vars(psg_resource_mgr_t *a, psg_resource_mgr_t *b) {
    for (int i = 0; i < psg_resource_num_variables(a); i++) {
        psg_variable_t *x = psg_resource_variable_at(a, i),
                       *y = psg_resource_find_variable(b, x->name);
        if (!y || !y->initialized || x->dtype != y->dtype ||
            !psg_shape_equal(&x->shape, &y->shape) ||
            memcmp(x->value->data, y->value->data, psg_tensor_nbytes(x->value))) {
            fprintf(stderr, "variable '%s' differs\n", x->name);
            return false;
        }
    }
    return true;
}

/* Writes the expected tensors of rms as JSON for the Python reader. */
static void write_expected(const char *path, int64_t step, psg_resource_mgr_t *const *rms, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"global_step\": %lld, \"tensors\": {", (long long)step);
    bool first = true;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < psg_resource_num_variables(rms[r]); i++) {
            psg_variable_t *v = psg_resource_variable_at(rms[r], i);
            fprintf(f, "%s\"%s\": {\"shard\": %d, \"dtype\": \"%s\", \"shape\": [",
                    first ? "" : ", ", v->name, n > 1 ? r : 0, psg_dtype_name(v->dtype));
            first = false;
            for (int d = 0; d < v->shape.rank; d++)
                fprintf(f, "%s%lld", d ? ", " : "", (long long)v->shape.dims[d]);
            fprintf(f, "], \"values\": [");
            for (int64_t k = 0; k < psg_tensor_numel(v->value); k++) {
                const char *sep = k ? ", " : "";
                switch (v->dtype) {
                case PSG_DT_F32:
                    fprintf(f, "%s%.9g", sep, (double)psg_tensor_f32(v->value)[k]);
                    break;
                case PSG_DT_F64: fprintf(f, "%s%.17g", sep, ((double *)v->value->data)[k]); break;
                case PSG_DT_I32: fprintf(f, "%s%d", sep, psg_tensor_i32(v->value)[k]); break;
                case PSG_DT_I64:
                    fprintf(f, "%s%lld", sep, (long long)psg_tensor_i64(v->value)[k]);
                    break;
                default: fprintf(f, "%s%d", sep, ((uint8_t *)v->value->data)[k]); break;
                }
            }
            fprintf(f, "]}");
        }
    fprintf(f, "}}\n");
    fclose(f);
}

static void run_reader(const char *dir, const char *target, int64_t step,
                       psg_resource_mgr_t *const *rms, int n) {
    if (!reader_script) return;
    char exp[512], cmd[2048];
    snprintf(exp, sizeof exp, "%s/expected.json", dir);
    write_expected(exp, step, rms, n);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s'", reader_script, target, exp);
    fflush(stdout);
    CHECK(system(cmd) == 0);
    unlink(exp);
}

static void test_two_shards_roundtrip(void) {
    char dir[64];
    CHECK(make_tmpdir(dir, sizeof dir));
    psg_resource_mgr_t *rm0 = psg_resource_mgr_new(), *rm1 = psg_resource_mgr_new();
    fill_shards(rm0, rm1, 1.5);
    psg_resource_mgr_t *rms[2] = {rm0, rm1};
    double secs = -1;
    CHECK(psg_checkpoint_save(dir, 30, 2, rms, 0, &secs) == 0);
    CHECK(secs >= 0);
    char path[256];
    snprintf(path, sizeof path, "%s/model.ckpt-30.index.json", dir);
    psg_checkpoint_t *ck = psg_checkpoint_open(path, -1);
    CHECK(ck);
    if (ck) {
        CHECK(psg_checkpoint_step(ck) == 30);
        CHECK(psg_checkpoint_num_tensors(ck) == 8);
        psg_checkpoint_entry_t e;
        int i = psg_checkpoint_find(ck, "model/emb");
        CHECK(i >= 0);
        if (i >= 0) {
            psg_checkpoint_entry(ck, i, &e);
            CHECK(e.dtype == PSG_DT_F32 && e.shape.rank == 4 && e.shape.dims[2] == 3 &&
                  e.nbytes == 24);
            CHECK(!strcmp(e.file, "model.ckpt-30-00001-of-00002.safetensors"));
            CHECK(((const float *)e.data)[1] == 2.75f);
        }
        /* every tensor aligned to its element size inside the file */
        for (int k = 0; k < psg_checkpoint_num_tensors(ck); k++) {
            psg_checkpoint_entry(ck, k, &e);
            CHECK((uintptr_t)e.data % psg_dtype_size(e.dtype) == 0);
        }
        psg_tensor_t *gs = psg_checkpoint_read(ck, "global_step");
        CHECK(gs && gs->dtype == PSG_DT_I64 && psg_tensor_i64(gs)[0] == 1);
        psg_tensor_destroy(&gs);
        CHECK(!psg_checkpoint_read(ck, "nope"));
        CHECK_ERROR_HAS("no tensor 'nope'");
        /* a fresh process restores everything */
        psg_resource_mgr_t *fresh = psg_resource_mgr_new();
        CHECK(psg_checkpoint_restore(ck, fresh, true) == 0);
        CHECK(same_vars(rm0, fresh) && same_vars(rm1, fresh));
        bool match = false;
        CHECK(psg_checkpoint_verify_restored(ck, fresh, &match) == 0 && match);
        psg_resource_mgr_destroy(&fresh);
    }
    psg_checkpoint_destroy(&ck);
    CHECK(!ck);
    /* a restarted ps 1 reloads only its shard */
    ck = psg_checkpoint_open(path, 1);
    CHECK(ck && psg_checkpoint_num_tensors(ck) == 4);
    if (ck) {
        psg_resource_mgr_t *ps1 = psg_resource_mgr_new();
        CHECK(psg_checkpoint_restore(ck, ps1, true) == 0);
        CHECK(psg_resource_num_variables(ps1) == 4 && same_vars(rm1, ps1));
        CHECK(!psg_resource_find_variable(ps1, "model/w"));
        psg_resource_mgr_destroy(&ps1);
    }
    psg_checkpoint_destroy(&ck);
    CHECK(!psg_checkpoint_open(path, 2));
    CHECK_ERROR_HAS("no shard 2");
    /* one shard file alone (as psgraph inspect opens it) */
    snprintf(path, sizeof path, "%s/model.ckpt-30-00000-of-00002.safetensors", dir);
    ck = psg_checkpoint_open(path, -1);
    CHECK(ck && psg_checkpoint_num_tensors(ck) == 4 && psg_checkpoint_step(ck) == 30);
    psg_checkpoint_destroy(&ck);
    /* the independent reader */
    snprintf(path, sizeof path, "%s/model.ckpt-30.index.json", dir);
    run_reader(dir, path, 30, rms, 2);
    /* an index whose weight_map lost a tensor its shard holds, and one that is not JSON */
    FILE *f = fopen(path, "rb");
    char text[4096] = "";
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    char *entry = strstr(text, "\"model/emb\": ");
    char *end = entry ? strchr(entry, '\n') : NULL;
    CHECK(entry && end);
    if (entry && end) {
        memmove(entry, end + 1, strlen(end + 1) + 1);
        f = fopen(path, "wb");
        fputs(text, f);
        fclose(f);
        CHECK(!psg_checkpoint_open(path, -1));
        CHECK_ERROR_HAS(
            "model.ckpt-30-00001-of-00002.safetensors: tensor 'model/emb' is not mapped to this "
            "file in the index's weight_map");
    }
    f = fopen(path, "wb");
    fputs("{\"metadata\": ", f);
    fclose(f);
    CHECK(!psg_checkpoint_open(path, -1));
    CHECK_ERROR_HAS("model.ckpt-30.index.json: ");
    psg_resource_mgr_destroy(&rm0);
    psg_resource_mgr_destroy(&rm1);
    rm_rf(dir);
}

/* Flips one byte at `offset` from the end (or truncates when truncate). */
static void damage(const char *path, long from_end, bool truncate_it) {
    FILE *f = fopen(path, "r+b");
    CHECK(f);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (truncate_it) {
        fclose(f);
        CHECK(truncate(path, size - from_end) == 0);
        return;
    }
    fseek(f, size - from_end, SEEK_SET);
    int c = fgetc(f);
    fseek(f, size - from_end, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

typedef struct {
    int count;
    char last_path[512], last_why[1024];
} skips_t;

static void on_skip(void *ctx, const char *path, const char *why) {
    skips_t *s = ctx;
    s->count++;
    snprintf(s->last_path, sizeof s->last_path, "%s", path);
    snprintf(s->last_why, sizeof s->last_why, "%s", why);
}

/* A safetensors file: the header's length (8 bytes, little-endian), the header, the data. */
static void write_st(const char *path, const char *header, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    PSG_ASSERT(f);
    uint64_t n = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(n >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, n, f);
    if (len) fwrite(data, 1, len, f);
    fclose(f);
}

/* A shard file of that header and data is refused, with an error that has `want`. */
static void check_refused(const char *path, const char *header, const void *data, size_t len,
                          const char *want) {
    write_st(path, header, data, len);
    psg_checkpoint_t *ck = psg_checkpoint_open(path, -1);
    CHECK(!ck);
    psg_checkpoint_destroy(&ck);
    CHECK_ERROR_HAS(want);
}

static void test_corrupt_falls_back(void) {
    char dir[64], path[256];
    CHECK(make_tmpdir(dir, sizeof dir));
    psg_resource_mgr_t *rm0 = psg_resource_mgr_new(), *rm1 = psg_resource_mgr_new();
    psg_resource_mgr_t *rms[2] = {rm0, rm1};
    for (int s = 10; s <= 30; s += 10) {
        fill_shards(rm0, rm1, s);
        CHECK(psg_checkpoint_save(dir, s, 2, rms, 0, NULL) == 0);
    }
    psg_checkpoint_t *ck = NULL;
    skips_t sk = {0};
    CHECK(psg_checkpoint_open_latest(dir, -1, on_skip, &sk, &ck) == 1 &&
          psg_checkpoint_step(ck) == 30);
    CHECK(sk.count == 0);
    psg_checkpoint_destroy(&ck);

    /* a flipped data byte in shard 1 of step 30: crc mismatch, fall back to 20 */
    snprintf(path, sizeof path, "%s/model.ckpt-30-00001-of-00002.safetensors", dir);
    damage(path, 3, false);
    CHECK(psg_checkpoint_open_latest(dir, -1, on_skip, &sk, &ck) == 1 && ck &&
          psg_checkpoint_step(ck) == 20);
    CHECK(sk.count == 1 && strstr(sk.last_path, "model.ckpt-30.index.json"));
    CHECK(strstr(sk.last_why, "model.ckpt-30-00001-of-00002.safetensors") &&
          strstr(sk.last_why, "corrupt"));
    psg_checkpoint_destroy(&ck);
    /* ps 0's shard of step 30 is intact: a restarted ps 0 takes it */
    sk.count = 0;
    CHECK(psg_checkpoint_open_latest(dir, 0, on_skip, &sk, &ck) == 1 && ck &&
          psg_checkpoint_step(ck) == 30);
    CHECK(sk.count == 0);
    psg_checkpoint_destroy(&ck);

    /* a truncated shard 0 of step 20: size mismatch, fall back to 10 */
    snprintf(path, sizeof path, "%s/model.ckpt-20-00000-of-00002.safetensors", dir);
    damage(path, 10, true);
    sk.count = 0;
    CHECK(psg_checkpoint_open_latest(dir, -1, on_skip, &sk, &ck) == 1 && ck &&
          psg_checkpoint_step(ck) == 10);
    CHECK(sk.count == 2 && strstr(sk.last_why, "truncated") &&
          strstr(sk.last_why, "model.ckpt-20-00000"));
    if (ck) {
        psg_resource_mgr_t *fresh = psg_resource_mgr_new();
        CHECK(psg_checkpoint_restore(ck, fresh, false) == 0);
        psg_variable_t *gs = psg_resource_find_variable(fresh, "global_step");
        CHECK(gs && psg_tensor_i64(gs->value)[0] == 10);
        psg_resource_mgr_destroy(&fresh);
    }
    psg_checkpoint_destroy(&ck);

    /* a missing shard of step 10: nothing left */
    snprintf(path, sizeof path, "%s/model.ckpt-10-00001-of-00002.safetensors", dir);
    CHECK(unlink(path) == 0);
    sk.count = 0;
    CHECK(psg_checkpoint_open_latest(dir, -1, on_skip, &sk, &ck) == 0 && !ck);
    CHECK(sk.count == 3 &&
          strstr(sk.last_why, "missing shard model.ckpt-10-00001-of-00002.safetensors"));

    /* a garbage header in a lone file */
    snprintf(path, sizeof path, "%s/junk.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite("\x10\0\0\0\0\0\0\0{\"a\":{\"dtype\":1}}", 1, 24, f);
        fclose(f);
    }
    CHECK(!psg_checkpoint_open(path, -1));
    CHECK_ERROR_HAS("junk.safetensors");
    /* a header length past the end */
    f = fopen(path, "wb");
    if (f) {
        fwrite("\xff\xff\0\0\0\0\0\0{}", 1, 10, f);
        fclose(f);
    }
    CHECK(!psg_checkpoint_open(path, -1));
    CHECK_ERROR_HAS("does not fit the file");
    /* issue 20: [2^40, 2^22] f32 with data_offsets [0, 0]: numel * 4 wrapped to 0 */
    check_refused(
        path,
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[1099511627776,4194304],\"data_offsets\":[0,0]}}",
        NULL, 0, "tensor 't': shape of 4611686018427387904 elements overflows its byte size");
    /* issue 37: [2^40, 2^40, 2^40] with data_offsets [0, 0]: the dims' product wraps to 0 */
    check_refused(path,
                  "{\"t\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,1099511627776],"
                  "\"data_offsets\":[0,0]}}",
                  NULL, 0, "tensor 't': bad dimension 1"); /* 2^80 elements already */
    /* a dim over 2^40 on its own; 2^40 itself in a tensor of 0 elements is one */
    check_refused(path,
                  "{\"t\":{\"dtype\":\"F32\",\"shape\":[0,1099511627777],\"data_offsets\":[0,0]}}",
                  NULL, 0, "tensor 't': bad dimension 1");
    write_st(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[0,1099511627776],\"data_offsets\":[0,0]}}",
             NULL, 0);
    ck = psg_checkpoint_open(path, -1);
    CHECK(ck && psg_checkpoint_num_tensors(ck) == 1);
    psg_checkpoint_destroy(&ck);
    /* a `{}` header: no tensors, no data (NULL + 0 once) */
    f = fopen(path, "wb");
    if (f) {
        fwrite("\x02\0\0\0\0\0\0\0{}", 1, 10, f);
        fclose(f);
    }
    ck = psg_checkpoint_open(path, -1);
    CHECK(ck && psg_checkpoint_num_tensors(ck) == 0);
    psg_checkpoint_destroy(&ck);
    /* no directory at all */
    CHECK(psg_checkpoint_open_latest("/nonexistent/psg", -1, NULL, NULL, &ck) == 0);
    psg_resource_mgr_destroy(&rm0);
    psg_resource_mgr_destroy(&rm1);
    rm_rf(dir);
}

/* An index that lacks a field of its metadata is no psgraph index, whatever its shards say:
 * without global_step (not step 0), without num_shards. */
static void test_index_fields(void) {
    char dir[64], path[256], bad[256], *text = NULL;
    CHECK(make_tmpdir(dir, sizeof dir));
    psg_resource_mgr_t *rm0 = psg_resource_mgr_new(), *rm1 = psg_resource_mgr_new();
    psg_resource_mgr_t *rms[2] = {rm0, rm1};
    fill_shards(rm0, rm1, 2.5);
    CHECK(psg_checkpoint_save(dir, 7, 2, rms, 0, NULL) == 0);
    snprintf(path, sizeof path, "%s/model.ckpt-7.index.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.index.json", dir);
    FILE *in = fopen(path, "rb");
    PSG_ASSERT(in && (text = calloc(1, 65536)));
    size_t n = fread(text, 1, 65535, in);
    fclose(in);
    const char *fields[] = {"\"global_step\": 7, ", "\"num_shards\": 2, "};
    for (int i = 0; i < 2; i++) {
        char *at = strstr(text, fields[i]);
        CHECK(at != NULL);
        FILE *f = fopen(bad, "wb");
        PSG_ASSERT(f);
        fwrite(text, 1, (size_t)(at - text), f); /* the index without that field */
        fwrite(at + strlen(fields[i]), 1, n - (size_t)(at - text) - strlen(fields[i]), f);
        fclose(f);
        psg_checkpoint_t *ck = psg_checkpoint_open(bad, -1);
        CHECK(!ck);
        CHECK_ERROR_HAS("bad.index.json: not a psgraph checkpoint index");
        psg_checkpoint_destroy(&ck);
    }
    free(text);
    psg_resource_mgr_destroy(&rm0);
    psg_resource_mgr_destroy(&rm1);
    rm_rf(dir);
}

/* The header's limit: the JSON parser's 16 MiB (PSG_JSON_MAX_BYTES; a header of spaces after
 * its JSON, as safetensors pads it): exactly that opens, a byte more is refused, by name. */
static void test_header_limit(void) {
    char dir[64], path[128];
    CHECK(make_tmpdir(dir, sizeof dir));
    snprintf(path, sizeof path, "%s/big_header.safetensors", dir);
    const char *json = "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    size_t limit = PSG_JSON_MAX_BYTES;
    char *header = malloc(limit + 2);
    PSG_ASSERT(header);
    float one = 1.5f;
    for (size_t extra = 0; extra < 2; extra++) {
        memset(header, ' ', limit + extra);
        memcpy(header, json, strlen(json));
        header[limit + extra] = 0;
        write_st(path, header, &one, sizeof one);
        psg_checkpoint_t *ck = psg_checkpoint_open(path, -1);
        psg_tensor_t *t = ck ? psg_checkpoint_read(ck, "t") : NULL;
        if (extra == 0) CHECK(t && psg_tensor_f32(t)[0] == 1.5f);
        if (extra == 1) CHECK(!ck);
        if (extra == 1)
            CHECK_ERROR_HAS("big_header.safetensors: header: JSON text over 16777216 bytes");
        psg_tensor_destroy(&t);
        psg_checkpoint_destroy(&ck);
    }
    free(header);
    rm_rf(dir);
}

/* What a safetensors writer may do that psgraph's does not (the header's tensors in another
 * order than their data), what no writer may (offsets that are not whole bytes, dims past 2^40,
 * a dtype of none), and writes that fail: -1 naming the file, no temporary file left. */
static void test_header_and_write_edges(void) {
    char dir[64], path[128];
    CHECK(make_tmpdir(dir, sizeof dir));
    snprintf(path, sizeof path, "%s/edges.safetensors", dir);
    /* "a" listed first, its data second */
    float data[2] = {1.5f, -2.5f};
    write_st(path,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             data, sizeof data);
    psg_checkpoint_t *ck = psg_checkpoint_open(path, -1);
    CHECK(ck && psg_checkpoint_num_tensors(ck) == 2);
    psg_tensor_t *a = ck ? psg_checkpoint_read(ck, "a") : NULL,
                 *b = ck ? psg_checkpoint_read(ck, "b") : NULL;
    CHECK(a && b && psg_tensor_f32(a)[0] == -2.5f && psg_tensor_f32(b)[0] == 1.5f);
    psg_tensor_destroy(&a);
    psg_tensor_destroy(&b);
    psg_checkpoint_destroy(&ck);
    check_refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4]}}", data,
                  4, "tensor 'a': needs dtype, shape and data_offsets [begin, end]");
    check_refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,4]}}", data,
                  4, "tensor 'a': needs dtype, shape and data_offsets [begin, end]");
    /* the first bad dimension is named */
    check_refused(
        path,
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2199023255552,2199023255552],\"data_offsets\":[0,0]}}",
        NULL, 0, "tensor 'a': bad dimension 0");
    check_refused(path, "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                  data, 1, "tensor 'a': unsupported dtype 'F8_E4M3'");
    /* a folder named like a shard is not read as one */
    char folder[160];
    snprintf(folder, sizeof folder, "%s/folder.safetensors", dir);
    CHECK(mkdir(folder, 0755) == 0);
    CHECK(!psg_checkpoint_open(folder, -1));
    CHECK_ERROR_HAS("folder.safetensors: not a regular file");
    /* a shard written into no directory, and one whose name is taken by a directory */
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    make_var(rm, "w", PSG_DT_F32, psg_shape_1d(3), 1);
    psg_checkpoint_shard_t shard;
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none", dir);
    CHECK(psg_checkpoint_write_shard(rm, missing, 3, 0, 1, &shard) < 0);
    CHECK_ERROR_HAS("/none/.model.ckpt-3-00000-of-00001.safetensors.tmp.");
    CHECK_ERROR_HAS("No such file or directory");
    snprintf(path, sizeof path, "%s/model.ckpt-3-00000-of-00001.safetensors", dir);
    CHECK(mkdir(path, 0755) == 0);
    CHECK(psg_checkpoint_write_shard(rm, dir, 3, 0, 1, &shard) < 0);
    CHECK_ERROR_HAS("model.ckpt-3-00000-of-00001.safetensors: rename");
    DIR *d = opendir(dir);
    int tmp_files = 0;
    for (struct dirent *e; d && (e = readdir(d));) tmp_files += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    CHECK(tmp_files == 0);
    CHECK(psg_checkpoint_write_shard(rm, dir, 3, 1, 1, &shard) < 0);
    CHECK_ERROR_HAS("bad shard 1 of 1 or step 3");
    psg_resource_mgr_destroy(&rm);
    rm_rf(dir);
}

static bool exists(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void test_keep_last_k(void) {
    char dir[64];
    CHECK(make_tmpdir(dir, sizeof dir));
    psg_resource_mgr_t *rm0 = psg_resource_mgr_new(), *rm1 = psg_resource_mgr_new();
    psg_resource_mgr_t *rms[2] = {rm0, rm1};
    fill_shards(rm0, rm1, 1);
    for (int s = 1; s <= 4; s++) CHECK(psg_checkpoint_save(dir, s, 2, rms, 2, NULL) == 0);
    /* leftovers of a crashed old save and a save under way for a later step */
    char p[256];
    snprintf(p, sizeof p, "%s/.model.ckpt-2-00000-of-00002.safetensors.tmp.99", dir);
    fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/model.ckpt-9-00001-of-00002.safetensors", dir);
    fclose(fopen(p, "w"));
    CHECK(psg_checkpoint_save(dir, 5, 2, rms, 2, NULL) == 0);
    CHECK(exists(dir, "model.ckpt-5.index.json") && exists(dir, "model.ckpt-4.index.json"));
    CHECK(exists(dir, "model.ckpt-4-00001-of-00002.safetensors"));
    CHECK(!exists(dir, "model.ckpt-3.index.json") &&
          !exists(dir, "model.ckpt-3-00000-of-00002.safetensors"));
    CHECK(!exists(dir, "model.ckpt-1-00001-of-00002.safetensors"));
    CHECK(!exists(dir, ".model.ckpt-2-00000-of-00002.safetensors.tmp.99"));
    CHECK(exists(dir, "model.ckpt-9-00001-of-00002.safetensors"));
    psg_resource_mgr_destroy(&rm0);
    psg_resource_mgr_destroy(&rm1);
    rm_rf(dir);
}

static void test_restore_errors(void) {
    char dir[64];
    CHECK(make_tmpdir(dir, sizeof dir));
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    make_var(rm, "w", PSG_DT_F32, psg_shape_2d(2, 2), 0);
    CHECK(psg_checkpoint_save(dir, 7, 1, &rm, 0, NULL) == 0);
    psg_checkpoint_t *ck = NULL;
    CHECK(psg_checkpoint_open_latest(dir, -1, NULL, NULL, &ck) == 1);
    psg_resource_mgr_t *other = psg_resource_mgr_new();
    psg_variable_t *w = make_var(other, "w", PSG_DT_F32, psg_shape_2d(4, 1), 9);
    CHECK(ck && psg_checkpoint_restore(ck, other, true) < 0);
    CHECK_ERROR_HAS("tensor 'w' is f32[2, 2], the variable is f32[4, 1]");
    CHECK(w && psg_tensor_f32(w->value)[0] == 9.0f); /* untouched */
    psg_resource_mgr_t *more = psg_resource_mgr_new();
    make_var(more, "w", PSG_DT_F32, psg_shape_2d(2, 2), 9);
    make_var(more, "v", PSG_DT_F32, psg_shape_1d(1), 9);
    CHECK(ck && psg_checkpoint_restore(ck, more, true) < 0);
    CHECK_ERROR_HAS("no tensor for variable 'v'");
    CHECK(ck && psg_checkpoint_restore(ck, more, false) == 0);
    psg_checkpoint_destroy(&ck);
    psg_resource_mgr_destroy(&more);
    psg_resource_mgr_destroy(&other);
    /* a folder that cannot be made: its parent is a file (not /nonexistent, which a run that
     * makes its logdir's parents would make) */
    char file[128], bad[160];
    snprintf(file, sizeof file, "%s/file", dir);
    FILE *f = fopen(file, "w");
    CHECK(f && fclose(f) == 0);
    snprintf(bad, sizeof bad, "%s/a/b", file);
    CHECK(psg_checkpoint_save(bad, 1, 1, &rm, 0, NULL) < 0);
    CHECK_ERROR_HAS(bad);
    psg_resource_mgr_destroy(&rm);
    rm_rf(dir);
}

static void test_policy(void) {
    psg_checkpoint_policy_t p = {0};
    CHECK(psg_checkpoint_policy_parse("20", &p) == 0 && p.every_steps == 20 && p.every_secs == 0);
    CHECK(psg_checkpoint_policy_parse("30s", &p) == 0 && p.every_steps == 0 && p.every_secs == 30);
    CHECK(psg_checkpoint_policy_parse("2m", &p) == 0 && p.every_secs == 120);
    CHECK(psg_checkpoint_policy_parse("often", &p) < 0);
    CHECK_ERROR_HAS("'often'");
    CHECK(psg_checkpoint_policy_parse("0", &p) < 0);
    CHECK(psg_checkpoint_policy_parse("1.5", &p) < 0);
    p = (psg_checkpoint_policy_t){.every_steps = 20};
    CHECK(psg_checkpoint_policy_due(&p, 40, 20, 0, 0) &&
          !psg_checkpoint_policy_due(&p, 41, 40, 0, 0));
    CHECK(!psg_checkpoint_policy_due(&p, 40, 40, 0, 0));
    p = (psg_checkpoint_policy_t){.every_secs = 30};
    CHECK(psg_checkpoint_policy_due(&p, 5, 2, 100, 60) &&
          !psg_checkpoint_policy_due(&p, 5, 2, 80, 60));
}

/* A SaveShard reply's report, as the chief (C or Python) reads it for the index. */
static void test_shard_report_parse(void) {
    psg_checkpoint_shard_t s = {0};
    const char names[] = "w\nw/Momentum\nglobal_step\n";
    CHECK(psg_checkpoint_shard_parse(&s,
                                     "model.ckpt-5-00000-of-00002.safetensors 4096 0badf00d 4000",
                                     names, sizeof names - 1) == 0);
    CHECK(!strcmp(s.file, "model.ckpt-5-00000-of-00002.safetensors"));
    CHECK(s.size == 4096 && s.crc32 == 0x0badf00du && s.tensor_bytes == 4000);
    CHECK(s.num_tensors == 3 && !strcmp(s.names[1], "w/Momentum") &&
          !strcmp(s.names[2], "global_step"));
    psg_checkpoint_shard_clear(&s);
    CHECK(psg_checkpoint_shard_parse(&s, "model.ckpt-5 4096", "", 0) < 0);
    CHECK_ERROR_HAS("'model.ckpt-5 4096'");
    psg_checkpoint_shard_clear(&s);
    CHECK(psg_checkpoint_shard_parse(&s, NULL, "", 0) < 0);
    psg_checkpoint_shard_clear(&s);
}

/* The cnn (3.3 M parameters) with its momentum slots: one save, one restore. */
static void test_cnn_timing(void) {
    char dir[64];
    CHECK(make_tmpdir(dir, sizeof dir));
    psg_graph_t *g = psg_graph_new();
    psg_model_t m;
    CHECK(psg_model_build(g, "cnn", 28, 28, 1, 10, 1, &m) == 0);
    psg_optimizer_config_t oc = psg_optimizer_defaults("momentum");
    psg_optimizer_t *opt = psg_optimizer_new(&oc);
    int train_op;
    CHECK(opt && psg_optimizer_minimize(opt, g, m.loss, &train_op) == 0);
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    CHECK(s && psg_session_run_init(s) == 0);
    psg_resource_mgr_t *rm = psg_session_resources(s);
    int64_t values = 0, slots = 0;
    for (int i = 0; i < psg_resource_num_variables(rm); i++) {
        psg_variable_t *v = psg_resource_variable_at(rm, i);
        values += psg_tensor_numel(v->value);
        if (strstr(v->name, "/Momentum")) slots += psg_tensor_numel(v->value);
    }
    double t0 = now_sec(), save_s = 0;
    CHECK(psg_checkpoint_save(dir, 1, 1, &rm, 0, &save_s) == 0);
    double t1 = now_sec();
    psg_checkpoint_t *ck = NULL;
    psg_resource_mgr_t *fresh = psg_resource_mgr_new();
    CHECK(psg_checkpoint_open_latest(dir, -1, NULL, NULL, &ck) == 1);
    CHECK(ck && psg_checkpoint_restore(ck, fresh, true) == 0);
    double t2 = now_sec();
    CHECK(same_vars(rm, fresh));
    printf("cnn checkpoint: %lld values (%lld parameters, %lld momentum slot values, global_step), "
           "%.1f MB: write %.3f s, open+verify+restore %.3f s\n",
           (long long)values, (long long)(values - slots - 1), (long long)slots,
           (double)values * 4 / 1e6, t1 - t0, t2 - t1);
    CHECK(values > 3000000 && slots > 1500000);
    CHECK(t1 - t0 < 10 && t2 - t1 < 10); /* loose: sanitizers; the < 1 s target is in the docs */
    psg_checkpoint_destroy(&ck);
    psg_resource_mgr_destroy(&fresh);
    psg_session_destroy(&s);
    psg_optimizer_destroy(&opt);
    psg_graph_destroy(&g);
    rm_rf(dir);
}

/* Reads the whole of a FILE opened with tmpfile(). */
static char *slurp(FILE *f) {
    fflush(f);
    long n = ftell(f);
    char *s = calloc((size_t)n + 1, 1);
    rewind(f);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
    fseek(f, 0, SEEK_END);
    return s;
}

static bool fresh_start; /* run_train's --fresh-start */

static int run_train(const char *dir, int64_t steps, psg_train_result_t *r, char **output) {
    psg_train_config_t c;
    psg_train_config_defaults(&c);
    c.fresh_start = fresh_start;
    c.model = "mlp";
    c.data = "synthetic";
    c.steps = steps;
    c.log_every = 20;
    c.logdir = dir;
    c.checkpoint_every = "20";
    c.keep = 3;
    c.out = tmpfile();
    int rc = psg_train(&c, r);
    *output = slurp(c.out);
    fclose(c.out);
    return rc;
}

static void test_train_resumes(void) {
    char dir[64], path[256];
    CHECK(make_tmpdir(dir, sizeof dir));
    psg_train_result_t r;
    char *out = NULL;
    CHECK(run_train(dir, 60, &r, &out) == 0 && r.steps == 60);
    CHECK(out && !strstr(out, "restored") && strstr(out, "model.ckpt-60.index.json written"));
    free(out);
    /* the values the second run must start from */
    snprintf(path, sizeof path, "%s/model.ckpt-60.index.json", dir);
    psg_checkpoint_t *at60 = psg_checkpoint_open(path, -1);
    CHECK(at60);
    CHECK(run_train(dir, 100, &r, &out) == 0 && r.steps == 100);
    CHECK(out && strstr(out, "restored") &&
          strstr(out, "model.ckpt-60.index.json: global step 60"));
    CHECK(out && strstr(out, "values verified"));
    CHECK(out && !strstr(out, "\nstep 20 ") && strstr(out, "\nstep 80 ") &&
          strstr(out, "\nstep 100 "));
    free(out);
    /* metrics.jsonl: progress steps 20, 40, 60 then 80, 100: the count went on */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    char line[2048];
    int64_t seq[16], n = 0;
    while (f && fgets(line, sizeof line, f) && n < 16) {
        long long s;
        if (strstr(line, "\"event\":\"progress\"") &&
            sscanf(strstr(line, "\"step\":"), "\"step\":%lld", &s) == 1)
            seq[n++] = s;
    }
    if (f) fclose(f);
    CHECK(n == 5 && seq[0] == 20 && seq[2] == 60 && seq[3] == 80 && seq[4] == 100);
    /* the final checkpoint holds global_step 100; the one at 60 was kept (keep 3) */
    psg_checkpoint_t *ck = NULL;
    CHECK(psg_checkpoint_open_latest(dir, -1, NULL, NULL, &ck) == 1 && ck &&
          psg_checkpoint_step(ck) == 100);
    psg_tensor_t *gs = ck ? psg_checkpoint_read(ck, "global_step") : NULL;
    CHECK(gs && psg_tensor_i64(gs)[0] == 100);
    psg_tensor_destroy(&gs);
    psg_checkpoint_destroy(&ck);
    gs = at60 ? psg_checkpoint_read(at60, "global_step") : NULL;
    CHECK(gs && psg_tensor_i64(gs)[0] == 60);
    psg_tensor_destroy(&gs);
    psg_checkpoint_destroy(&at60);
    /* resuming is exact: the same variables as one run of 100 steps (the batches went on
     * from step 60, the momentum slots were restored) */
    char straight[64];
    CHECK(make_tmpdir(straight, sizeof straight));
    CHECK(run_train(straight, 100, &r, &out) == 0 && r.steps == 100);
    free(out);
    psg_checkpoint_t *one = NULL, *two = NULL;
    CHECK(psg_checkpoint_open_latest(straight, -1, NULL, NULL, &one) == 1 && one);
    CHECK(psg_checkpoint_open_latest(dir, -1, NULL, NULL, &two) == 1 && two);
    const char *names[] = {"model/fc1/weights", "model/fc3/biases", "model/fc1/weights/Momentum"};
    for (int i = 0; one && two && i < 3; i++) {
        psg_tensor_t *a = psg_checkpoint_read(one, names[i]),
                     *b = psg_checkpoint_read(two, names[i]);
        CHECK(a && b && psg_tensor_nbytes(a) == psg_tensor_nbytes(b));
        if (a && b) CHECK(memcmp(a->data, b->data, psg_tensor_nbytes(a)) == 0);
        psg_tensor_destroy(&a);
        psg_tensor_destroy(&b);
    }
    psg_checkpoint_destroy(&one);
    psg_checkpoint_destroy(&two);
    rm_rf(straight);
    /* a corrupt newest checkpoint: reported by name, the previous one used */
    snprintf(path, sizeof path, "%s/model.ckpt-100-00000-of-00001.safetensors", dir);
    damage(path, 100, false);
    CHECK(run_train(dir, 100, &r, &out) == 0 && r.steps == 100);
    CHECK(out && strstr(out, "model.ckpt-100.index.json is incomplete or corrupt"));
    CHECK(out && strstr(out, "model.ckpt-80.index.json: global step 80") &&
          strstr(out, "\nstep 100 "));
    free(out);
    rm_rf(dir);
}

/* A logdir whose every checkpoint fails verification: the run stops naming each file and
 * why, writes nothing; with --fresh-start it says so and trains from step 0. */
static void test_all_corrupt_stops(void) {
    char dir[64], path[256];
    CHECK(make_tmpdir(dir, sizeof dir));
    psg_train_result_t r;
    char *out = NULL;
    CHECK(run_train(dir, 40, &r, &out) == 0 && r.steps == 40);
    free(out);
    for (int s = 20; s <= 40; s += 20) {
        snprintf(path, sizeof path, "%s/model.ckpt-%d-00000-of-00001.safetensors", dir, s);
        damage(path, 100, false);
    }
    CHECK(run_train(dir, 60, &r, &out) < 0);
    const char *e = psg_error_message();
    printf("the error: %s\n", e);
    CHECK(strstr(e, "none verifies") && strstr(e, "--fresh-start"));
    CHECK(strstr(e, "model.ckpt-40.index.json") && strstr(e, "model.ckpt-20.index.json") &&
          strstr(e, "corrupt"));
    CHECK(out && !strstr(out, "\nstep 20 "));
    free(out);
    snprintf(path, sizeof path, "%s/model.ckpt-60.index.json", dir);
    CHECK(access(path, F_OK) != 0);
    fresh_start = true;
    CHECK(run_train(dir, 60, &r, &out) == 0 && r.steps == 60);
    fresh_start = false;
    CHECK(out && strstr(out, "--fresh-start: none of the 2 checkpoints") &&
          strstr(out, "\nstep 20 "));
    CHECK(access(path, F_OK) == 0);
    free(out);
    rm_rf(dir);
}

int main(int argc, char **argv) {
    reader_script = argc > 1 ? argv[1] : NULL;
    RUN_TEST(test_two_shards_roundtrip);
    RUN_TEST(test_corrupt_falls_back);
    RUN_TEST(test_header_and_write_edges);
    RUN_TEST(test_header_limit);
    RUN_TEST(test_index_fields);
    RUN_TEST(test_keep_last_k);
    RUN_TEST(test_restore_errors);
    RUN_TEST(test_policy);
    RUN_TEST(test_shard_report_parse);
    RUN_TEST(test_cnn_timing);
    RUN_TEST(test_train_resumes);
    RUN_TEST(test_all_corrupt_stops);
    return psg_test_summary();
}
