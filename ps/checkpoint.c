/* Checkpoint files: writing one ps shard as a safetensors file and the JSON
 * index that commits a checkpoint, reading and verifying them back, restoring
 * into a resource manager. Not the directory policy (latest, prune, the saver
 * interval: ps/checkpoint_dir.c) and not the transport between tasks. */
#include "ps/checkpoint_internal.h"

#include "core/checked.h"
#include "core/json.h"
#include "core/strbuf.h"
#include "psgraph/device.h"
#include "psgraph/error.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "psgraph checkpoints write tensors in host order, which must be little-endian"
#endif

/* safetensors' limit on the header, which its readers enforce too */
#define MAX_HEADER_BYTES ((uint64_t)100 << 20)

static const struct {
    psg_dtype_t dt;
    const char *name;
} st_dtypes[] = {
    {PSG_DT_F32, "F32"}, {PSG_DT_F64, "F64"}, {PSG_DT_I32, "I32"},   {PSG_DT_I64, "I64"},
    {PSG_DT_U8, "U8"},   {PSG_DT_F16, "F16"}, {PSG_DT_BF16, "BF16"}, {PSG_DT_BOOL, "BOOL"},
};

const char *psg_ckpt_dtype_name(psg_dtype_t dt) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return NULL;
}

static psg_dtype_t dtype_from_st(const char *s) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(st_dtypes[i].name, s)) return st_dtypes[i].dt;
    return PSG_DT_INVALID;
}

uint32_t psg_ckpt_crc32(uint32_t crc, const void *data, size_t n) {
    return (uint32_t)crc32_z(crc, data, n);
}

void psg_ckpt_shard_name(char *buf, size_t size, int64_t step, int shard, int num_shards) {
    snprintf(buf, size, "%s-%lld-%05d-of-%05d.safetensors", PSG_CKPT_PREFIX, (long long)step, shard,
             num_shards);
}

void psg_ckpt_index_name(char *buf, size_t size, int64_t step) {
    snprintf(buf, size, "%s-%lld.index.json", PSG_CKPT_PREFIX, (long long)step);
}

/* ---- a growable string: core/strbuf.h ---- */

typedef psg_strbuf_t sbuf_t;
#define sb_add psg_strbuf_add
#define sb_str psg_strbuf_str
#define sb_printf psg_strbuf_printf
#define sb_json_str psg_strbuf_json_str

/* ---- file helpers ---- */

static int write_all(int fd, const void *data, size_t n, const char *path) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return psg_error_set("%s: write: %s", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return psg_error_set("%s: %s", dir, strerror(errno));
    int rc =
        fsync(fd) < 0 && errno != EINVAL ? psg_error_set("%s: fsync: %s", dir, strerror(errno)) : 0;
    close(fd);
    return rc;
}

int psg_ckpt_write_atomic(const char *dir, const char *name, const void *data, size_t n) {
    char path[PATH_MAX], tmp[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, name, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return psg_error_set("%s: %s", tmp, strerror(errno));
    int rc = write_all(fd, data, n, tmp);
    if (rc == 0 && fsync(fd) < 0) rc = psg_error_set("%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) < 0 && rc == 0) rc = psg_error_set("%s: close: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) < 0)
        rc = psg_error_set("%s: rename: %s", path, strerror(errno));
    if (rc < 0) {
        unlink(tmp);
        return -1;
    }
    return fsync_dir(dir);
}

int psg_ckpt_read_file(const char *path, uint8_t **bytes, size_t *size) {
    *bytes = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return psg_error_set("%s: %s", path, errno == ENOENT ? "missing" : strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return psg_error_set("%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) {
        close(fd);
        return psg_error_set("%s: out of memory for %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(b);
            close(fd);
            return psg_error_set("%s: read: %s", path, r < 0 ? strerror(errno) : "file shrank");
        }
        got += (size_t)r;
    }
    close(fd);
    *bytes = b;
    *size = n;
    return 0;
}

/* ---- writing a shard ---- */

void psg_checkpoint_shard_clear(psg_checkpoint_shard_t *s) {
    if (!s) return;
    for (int i = 0; i < s->num_tensors; i++) free(s->names[i]);
    free(s->names);
    memset(s, 0, sizeof *s);
}

int psg_checkpoint_shard_parse(psg_checkpoint_shard_t *s, const char *line, const char *names,
                               size_t len) {
    unsigned crc = 0;
    unsigned long long size = 0, bytes = 0;
    if (!line || sscanf(line, "%127s %llu %x %llu", s->file, &size, &crc, &bytes) != 4)
        return psg_error_set("a shard's report '%.64s' is not \"FILE SIZE CRC32 TENSOR_BYTES\"",
                             line ? line : "");
    s->size = size;
    s->crc32 = crc;
    s->tensor_bytes = bytes;
    int count = 0;
    for (size_t k = 0; k < len; k++) count += names[k] == '\n';
    if (!(s->names = calloc((size_t)count + 1, sizeof *s->names)))
        return psg_error_set("out of memory");
    for (size_t k = 0, at = 0; k < len; k++)
        if (names[k] == '\n') {
            if (!(s->names[s->num_tensors] = strndup(names + at, k - at)))
                return psg_error_set("out of memory");
            s->num_tensors++;
            at = k + 1;
        }
    return 0;
}

/* Variables to write, sorted by element size (largest first, creation order
 * within): with no padding between tensors, every tensor is then aligned to
 * its element size, since the data starts on a multiple of 8. */
static int collect_vars(psg_resource_mgr_t *rm, psg_variable_t ***out, const char *path) {
    int n = psg_resource_num_variables(rm), k = 0;
    psg_variable_t **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) return psg_error_set("%s: out of memory", path);
    static const size_t sizes[] = {8, 4, 2, 1};
    for (size_t s = 0; s < 4; s++)
        for (int i = 0; i < n; i++) {
            psg_variable_t *var = psg_resource_variable_at(rm, i);
            if (!var->initialized || var->backup || psg_dtype_size(var->dtype) != sizes[s])
                continue;
            if (!psg_ckpt_dtype_name(var->dtype)) {
                free(v);
                return psg_error_set(
                    "%s: variable '%s' has dtype %s, which safetensors cannot hold", path,
                    var->name, psg_dtype_name(var->dtype));
            }
            v[k++] = var;
        }
    *out = v;
    return k;
}

/* The header with a placeholder "00000000" for the data crc; *crc_pos gets
 * its offset in the header text. Padded with spaces to a multiple of 8. */
static int build_header(sbuf_t *h, psg_variable_t **vars, int n, int64_t step, int shard,
                        int num_shards, size_t *crc_pos, uint64_t *data_len) {
    sb_printf(h,
              "{\"__metadata__\":{\"format\":\"psgraph\",\"global_step\":\"%lld\",\"shard\":\"%d\","
              "\"num_shards\":\"%d\",\"data_crc32\":\"",
              (long long)step, shard, num_shards);
    *crc_pos = h->len;
    sb_str(h, "00000000\"}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        psg_variable_t *v = vars[i];
        uint64_t nb = (uint64_t)psg_tensor_nbytes(v->value);
        sb_str(h, ",");
        sb_json_str(h, v->name);
        sb_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", psg_ckpt_dtype_name(v->dtype));
        for (int d = 0; d < v->value->shape.rank; d++)
            sb_printf(h, "%s%lld", d ? "," : "", (long long)v->value->shape.dims[d]);
        sb_printf(h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
        off += nb;
    }
    sb_str(h, "}");
    while ((h->len + 8) % 8) sb_str(h, " ");
    *data_len = off;
    return h->oom ? -1 : 0;
}

/* Host copies of the variables being written, taken a group at a time: a variable and the
 * slots its update writes, under that variable's lock (psg_variable_lock_update), so the
 * shard holds each variable with its slots at one update, and the bytes a crc covers are
 * the bytes written. A copy is freed once written: the memory held is about a group's. */
typedef struct {
    psg_variable_t **vars, **guard; /* (n) each */
    psg_tensor_t **copy;            /* (n), NULL until taken */
    bool *taken;
    int n;
} snapshot_t;

static int snapshot_new(snapshot_t *s, psg_variable_t **vars, int n) {
    s->vars = vars;
    s->n = n;
    s->guard = calloc((size_t)n + 1, sizeof *s->guard);
    s->copy = calloc((size_t)n + 1, sizeof *s->copy);
    s->taken = calloc((size_t)n + 1, sizeof *s->taken);
    if (!s->guard || !s->copy || !s->taken) return psg_error_set("out of memory");
    for (int i = 0; i < n; i++) s->guard[i] = psg_variable_guard(vars[i]);
    return 0;
}

static psg_tensor_t *host_copy(const psg_variable_t *v) {
    /* a variable on a GPU (docs/gpu.md) is copied to the host */
    return psg_tensor_on_host(v->value) ? psg_tensor_copy(v->value) : psg_tensor_to_host(v->value);
}

/* The copy of variable i (the caller owns it), its group copied first when not yet. */
static psg_tensor_t *snapshot_take(snapshot_t *s, int i) {
    if (!s->taken[i]) {
        psg_variable_t *g = s->guard[i];
        pthread_mutex_lock(&g->lock);
        for (int j = i; j < s->n; j++)
            if (s->guard[j] == g && !s->taken[j]) {
                s->copy[j] = host_copy(s->vars[j]);
                s->taken[j] = true;
            }
        pthread_mutex_unlock(&g->lock);
    }
    psg_tensor_t *t = s->copy[i];
    s->copy[i] = NULL;
    if (!t) psg_error_set("out of memory for a copy of variable '%s'", s->vars[i]->name);
    return t;
}

static void snapshot_free(snapshot_t *s) {
    for (int i = 0; s->copy && i < s->n; i++) psg_tensor_destroy(&s->copy[i]);
    free(s->guard);
    free(s->copy);
    free(s->taken);
    memset(s, 0, sizeof *s);
}

int psg_checkpoint_write_shard(psg_resource_mgr_t *rm, const char *dir, int64_t step, int shard,
                               int num_shards, psg_checkpoint_shard_t *out) {
    memset(out, 0, sizeof *out);
    char name[PSG_CKPT_NAME_MAX], path[PATH_MAX], tmp[PATH_MAX];
    psg_ckpt_shard_name(name, sizeof name, step, shard, num_shards);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, name, (long)getpid());
    if (shard < 0 || shard >= num_shards || step < 0)
        return psg_error_set("%s: bad shard %d of %d or step %lld", path, shard, num_shards,
                             (long long)step);
    psg_variable_t **vars = NULL;
    int n = collect_vars(rm, &vars, path);
    if (n < 0) return -1;
    sbuf_t h = {0};
    size_t crc_pos = 0;
    uint64_t data_len = 0;
    int rc = build_header(&h, vars, n, step, shard, num_shards, &crc_pos, &data_len);
    if (rc < 0) {
        free(vars);
        free(h.s);
        return psg_error_set("%s: out of memory", path);
    }
    out->names = calloc((size_t)n + 1, sizeof *out->names);
    int fd = out->names ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    if (fd < 0) {
        rc = out->names ? psg_error_set("%s: %s", tmp, strerror(errno))
                        : psg_error_set("out of memory");
        goto fail;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    rc = write_all(fd, len8, 8, tmp);
    if (rc == 0) rc = write_all(fd, h.s, h.len, tmp);
    uint32_t dcrc = psg_ckpt_crc32(0, NULL, 0);
    snapshot_t snap = {0};
    if (rc == 0 && snapshot_new(&snap, vars, n) < 0) rc = psg_error_wrap("%s", tmp);
    for (int i = 0; rc == 0 && i < n; i++) {
        psg_variable_t *v = vars[i];
        psg_tensor_t *hv = snapshot_take(&snap, i);
        size_t nb = hv ? psg_tensor_nbytes(hv) : 0;
        if (hv) dcrc = psg_ckpt_crc32(dcrc, hv->data, nb);
        rc = hv ? write_all(fd, hv->data, nb, tmp) : psg_error_wrap("%s", tmp);
        psg_tensor_destroy(&hv);
        if (rc == 0 && !(out->names[i] = strdup(v->name))) rc = psg_error_set("out of memory");
        out->num_tensors = i + 1;
    }
    snapshot_free(&snap);
    if (rc == 0) {
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", (unsigned)dcrc);
        memcpy(h.s + crc_pos, hex, 8);
        if (pwrite(fd, hex, 8, (off_t)(8 + crc_pos)) != 8)
            rc = psg_error_set("%s: write: %s", tmp, strerror(errno));
    }
    if (rc == 0 && fsync(fd) < 0) rc = psg_error_set("%s: fsync: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) < 0 && rc == 0)
        rc = psg_error_set("%s: close: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) < 0)
        rc = psg_error_set("%s: rename: %s", path, strerror(errno));
    if (rc == 0) rc = fsync_dir(dir);
    if (rc < 0) goto fail;
    uint32_t hcrc = psg_ckpt_crc32(psg_ckpt_crc32(0, NULL, 0), len8, 8);
    hcrc = psg_ckpt_crc32(hcrc, h.s, h.len);
    snprintf(out->file, sizeof out->file, "%s", name);
    out->size = 8 + h.len + data_len;
    out->crc32 = (uint32_t)crc32_combine(hcrc, dcrc, (z_off_t)data_len);
    out->tensor_bytes = data_len;
    free(vars);
    free(h.s);
    return 0;
fail:
    unlink(tmp);
    free(vars);
    free(h.s);
    psg_checkpoint_shard_clear(out);
    return -1;
}

/* ---- the index ---- */

int psg_checkpoint_write_index(const char *dir, int64_t step, int num_shards,
                               const psg_checkpoint_shard_t *shards) {
    char name[PSG_CKPT_NAME_MAX];
    psg_ckpt_index_name(name, sizeof name, step);
    uint64_t total = 0;
    for (int s = 0; s < num_shards; s++) total += shards[s].tensor_bytes;
    sbuf_t b = {0};
    sb_printf(&b,
              "{\n  \"metadata\": {\"format\": \"psgraph-checkpoint-1\", \"global_step\": %lld, "
              "\"num_shards\": %d, \"total_size\": %" PRIu64 "},\n  \"shards\": [",
              (long long)step, num_shards, total);
    for (int s = 0; s < num_shards; s++)
        sb_printf(&b,
                  "%s\n    {\"file\": \"%s\", \"size\": %" PRIu64
                  ", \"crc32\": \"%08x\", \"tensors\": %d}",
                  s ? "," : "", shards[s].file, shards[s].size, (unsigned)shards[s].crc32,
                  shards[s].num_tensors);
    sb_str(&b, "\n  ],\n  \"weight_map\": {");
    bool first = true;
    for (int s = 0; s < num_shards; s++)
        for (int i = 0; i < shards[s].num_tensors; i++) {
            for (int t = 0; t <= s; t++)
                for (int j = 0; j < (t == s ? i : shards[t].num_tensors); j++)
                    if (num_shards > 1 && !strcmp(shards[t].names[j], shards[s].names[i])) {
                        free(b.s);
                        return psg_error_set("%s/%s: tensor '%s' is in both %s and %s", dir, name,
                                             shards[s].names[i], shards[t].file, shards[s].file);
                    }
            sb_str(&b, first ? "\n    " : ",\n    ");
            first = false;
            sb_json_str(&b, shards[s].names[i]);
            sb_printf(&b, ": \"%s\"", shards[s].file);
        }
    sb_str(&b, "\n  }\n}\n");
    if (b.oom) {
        free(b.s);
        return psg_error_set("%s/%s: out of memory", dir, name);
    }
    int rc = psg_ckpt_write_atomic(dir, name, b.s, b.len);
    free(b.s);
    return rc;
}

/* ---- reading ---- */

typedef struct {
    char *name;
    psg_dtype_t dtype;
    psg_shape_t shape;
    size_t nbytes;
    int shard; /* index in ck->shards */
    const uint8_t *data;
} ck_tensor_t;

typedef struct {
    char *file;
    uint8_t *bytes;
    size_t size;
    uint32_t data_crc;
    bool has_data_crc;
    size_t first_tensor, num_tensors; /* this shard's run in ck->tensors */
} ck_shard_t;

struct psg_checkpoint {
    char *path;
    int64_t step;
    bool indexed; /* opened through its index, which holds each file's crc32 */
    int num_shards;
    ck_shard_t *shards;
    int num_tensors, cap_tensors;
    ck_tensor_t *tensors;
};

void psg_checkpoint_destroy(psg_checkpoint_t **pck) {
    if (!pck || !*pck) return;
    psg_checkpoint_t *ck = *pck;
    for (int i = 0; i < ck->num_tensors; i++) free(ck->tensors[i].name);
    free(ck->tensors);
    for (int s = 0; s < ck->num_shards; s++) {
        free(ck->shards[s].file);
        free(ck->shards[s].bytes);
    }
    free(ck->shards);
    free(ck->path);
    free(ck);
    *pck = NULL;
}

static bool json_uint(const psg_json_t *j, uint64_t *v) {
    if (!j || j->type != PSG_JSON_NUMBER || !j->integral || j->number < 0 ||
        j->number > 9007199254740992.0)
        return false;
    *v = (uint64_t)j->number;
    return true;
}

static int cmp_begin(const void *a, const void *b) {
    const ck_tensor_t *x = a, *y = b;
    return x->data < y->data ? -1 : x->data > y->data;
}

/* The header's "__metadata__": the global step and the data's crc32, both optional. */
static int parse_metadata(ck_shard_t *sh, const psg_json_t *m, const char *path, int64_t *step) {
    const psg_json_t *gs = m->type == PSG_JSON_OBJECT ? psg_json_get(m, "global_step") : NULL;
    const psg_json_t *dc = m->type == PSG_JSON_OBJECT ? psg_json_get(m, "data_crc32") : NULL;
    char *end = NULL;
    if (gs && gs->type == PSG_JSON_STRING) {
        long long v = strtoll(gs->string, &end, 10);
        if (*end || v < 0) return psg_error_set("%s: bad global_step '%s'", path, gs->string);
        *step = v;
    }
    if (dc && dc->type == PSG_JSON_STRING) {
        unsigned long v = strtoul(dc->string, &end, 16);
        if (*end || strlen(dc->string) != 8)
            return psg_error_set("%s: bad data_crc32 '%s'", path, dc->string);
        sh->data_crc = (uint32_t)v;
        sh->has_data_crc = true;
    }
    return 0;
}

/* The shard's tensors in file order cover its data exactly (safetensors' own rule), and
 * the data has the crc32 the header says. A `{}` header has no tensors and maybe no
 * array yet (NULL + 0 is undefined). */
static int check_coverage(psg_checkpoint_t *ck, ck_shard_t *sh, const uint8_t *data,
                          uint64_t data_len, const char *path) {
    ck_tensor_t *ts = sh->num_tensors ? ck->tensors + sh->first_tensor : NULL;
    if (ts) qsort(ts, sh->num_tensors, sizeof *ts, cmp_begin);
    const uint8_t *at = data;
    for (size_t i = 0; i < sh->num_tensors; i++) {
        if (ts[i].data != at)
            return psg_error_set("%s: tensor '%s' does not start where the previous one ends", path,
                                 ts[i].name);
        at += ts[i].nbytes;
    }
    if (at != data + data_len)
        return psg_error_set("%s: %" PRIu64 " data bytes, the tensors cover %zu", path, data_len,
                             (size_t)(at - data));
    if (sh->has_data_crc) {
        uint32_t c = psg_ckpt_crc32(psg_ckpt_crc32(0, NULL, 0), data, (size_t)data_len);
        if (c != sh->data_crc)
            return psg_error_set("%s: data crc32 %08x, the header says %08x (corrupt)", path,
                                 (unsigned)c, (unsigned)sh->data_crc);
    }
    return 0;
}

/* Parses the shard's bytes (already read into sh) and appends its tensors.
 * *step receives the header's global step (-1 when absent). */
static int parse_shard(psg_checkpoint_t *ck, int si, const char *path, int64_t *step) {
    ck_shard_t *sh = &ck->shards[si];
    if (sh->size < 8)
        return psg_error_set("%s: %zu bytes, too short for a safetensors file", path, sh->size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)sh->bytes[i] << (8 * i);
    if (hlen > MAX_HEADER_BYTES || hlen > sh->size - 8)
        return psg_error_set("%s: header length %" PRIu64 " does not fit the file (%zu bytes)",
                             path, hlen, sh->size);
    char *text = malloc(hlen + 1);
    if (!text) return psg_error_set("%s: out of memory", path);
    memcpy(text, sh->bytes + 8, hlen);
    text[hlen] = 0;
    psg_json_t *j = psg_json_parse(text);
    free(text);
    if (!j) return psg_error_wrap("%s: header", path);
    int rc = 0;
    const uint8_t *data = sh->bytes + 8 + hlen;
    uint64_t data_len = sh->size - 8 - hlen;
    *step = -1;
    sh->first_tensor = (size_t)ck->num_tensors;
    if (j->type != PSG_JSON_OBJECT) rc = psg_error_set("%s: header is not a JSON object", path);
    for (int i = 0; rc == 0 && i < j->count; i++) {
        const psg_json_t *m = j->items[i];
        if (!strcmp(m->key, "__metadata__")) {
            rc = parse_metadata(sh, m, path, step);
            continue;
        }
        const psg_json_t *dt = psg_json_get(m, "dtype"), *shp = psg_json_get(m, "shape"),
                         *off = psg_json_get(m, "data_offsets");
        ck_tensor_t t = {0};
        uint64_t b = 0, e = 0;
        if (m->type != PSG_JSON_OBJECT || !dt || dt->type != PSG_JSON_STRING || !shp ||
            shp->type != PSG_JSON_ARRAY || !off || off->type != PSG_JSON_ARRAY || off->count != 2 ||
            !json_uint(off->items[0], &b) || !json_uint(off->items[1], &e)) {
            rc = psg_error_set("%s: tensor '%s': needs dtype, shape and data_offsets [begin, end]",
                               path, m->key);
            break;
        }
        t.dtype = dtype_from_st(dt->string);
        if (t.dtype == PSG_DT_INVALID) {
            rc = psg_error_set("%s: tensor '%s': unsupported dtype '%s'", path, m->key, dt->string);
            break;
        }
        if (shp->count > PSG_MAX_RANK) {
            rc = psg_error_set("%s: tensor '%s': rank %d over %d", path, m->key, shp->count,
                               PSG_MAX_RANK);
            break;
        }
        t.shape.rank = shp->count;
        uint64_t numel = 1;
        for (int d = 0; d < shp->count; d++) {
            uint64_t v;
            if (!json_uint(shp->items[d], &v) || v > ((uint64_t)1 << 40) ||
                psg_ckd_mul_u64(&numel, numel, v)) {
                rc = psg_error_set("%s: tensor '%s': bad dimension %d", path, m->key, d);
                break;
            }
            t.shape.dims[d] = (int64_t)v;
        }
        if (rc < 0) break;
        /* numel * dtype size wrapped to 0 once ([2^40, 2^22] f32): checked, and then bound by the
         * file */
        uint64_t nbytes = 0;
        if (psg_ckd_mul_u64(&nbytes, numel, psg_dtype_size(t.dtype)) || nbytes > INT64_MAX) {
            rc = psg_error_set("%s: tensor '%s': shape of %" PRIu64
                               " elements overflows its byte size",
                               path, m->key, numel);
            break;
        }
        if (b > e || e > data_len || e - b != nbytes) {
            rc = psg_error_set("%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                               "] do not match its "
                               "shape and the %" PRIu64 " data bytes",
                               path, m->key, b, e, data_len);
            break;
        }
        if (ck->num_tensors == ck->cap_tensors) {
            int cap = ck->cap_tensors ? 2 * ck->cap_tensors : 64;
            ck_tensor_t *p = realloc(ck->tensors, (size_t)cap * sizeof *p);
            if (!p) {
                rc = psg_error_set("out of memory");
                break;
            }
            ck->tensors = p;
            ck->cap_tensors = cap;
        }
        t.name = strdup(m->key);
        if (!t.name) {
            rc = psg_error_set("out of memory");
            break;
        }
        t.nbytes = (size_t)(e - b);
        t.shard = si;
        t.data = data + b;
        ck->tensors[ck->num_tensors++] = t;
    }
    psg_json_free(j);
    if (rc < 0) return -1;
    sh->num_tensors = (size_t)ck->num_tensors - sh->first_tensor;
    return check_coverage(ck, sh, data, data_len, path);
}

static psg_checkpoint_t *ck_new(const char *path, int num_shards) {
    psg_checkpoint_t *ck = calloc(1, sizeof *ck);
    if (ck) ck->shards = calloc((size_t)num_shards, sizeof *ck->shards);
    if (ck) ck->path = strdup(path);
    if (!ck || !ck->shards || !ck->path) {
        if (ck) free(ck->shards);
        if (ck) free(ck->path);
        free(ck);
        psg_error_set("out of memory");
        return NULL;
    }
    ck->num_shards = num_shards;
    return ck;
}

static psg_checkpoint_t *open_file(const char *path) {
    psg_checkpoint_t *ck = ck_new(path, 1);
    if (!ck) return NULL;
    const char *base = strrchr(path, '/');
    ck->shards[0].file = strdup(base ? base + 1 : path);
    int64_t step = -1;
    if (!ck->shards[0].file ||
        psg_ckpt_read_file(path, &ck->shards[0].bytes, &ck->shards[0].size) < 0 ||
        parse_shard(ck, 0, path, &step) < 0) {
        if (!ck->shards[0].file) psg_error_set("out of memory");
        psg_checkpoint_destroy(&ck);
        return NULL;
    }
    ck->step = step;
    return ck;
}

/* A base name from an index: no directories, no hidden or parent names. */
static bool plain_name(const char *s) {
    return s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < PSG_CKPT_NAME_MAX;
}

static int check_shard_against_index(psg_checkpoint_t *ck, int si, const psg_json_t *entry,
                                     const psg_json_t *wmap, int64_t step, const char *dir) {
    ck_shard_t *sh = &ck->shards[si];
    char path[PATH_MAX + PSG_CKPT_NAME_MAX + 2];
    snprintf(path, sizeof path, "%s/%s", dir, sh->file);
    uint64_t want_size = 0, want_tensors = 0;
    const psg_json_t *crc = psg_json_get(entry, "crc32");
    if (!json_uint(psg_json_get(entry, "size"), &want_size) || !crc ||
        crc->type != PSG_JSON_STRING || !json_uint(psg_json_get(entry, "tensors"), &want_tensors))
        return psg_error_set("%s: the entry of %s lacks size, crc32 or tensors", ck->path,
                             sh->file);
    struct stat st;
    if (stat(path, &st) < 0)
        return psg_error_set("%s: missing shard %s (%s)", ck->path, sh->file, strerror(errno));
    if ((uint64_t)st.st_size != want_size)
        return psg_error_set("%s: %lld bytes, the index says %" PRIu64 " (truncated or incomplete)",
                             path, (long long)st.st_size, want_size);
    if (psg_ckpt_read_file(path, &sh->bytes, &sh->size) < 0) return -1;
    if (sh->size != want_size) return psg_error_set("%s: changed while being read", path);
    int64_t fstep = -1;
    if (parse_shard(ck, si, path, &fstep) < 0) return -1;
    /* the whole file's crc from the header's and the (already checked) data's */
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)sh->bytes[i] << (8 * i);
    uint32_t c = psg_ckpt_crc32(psg_ckpt_crc32(0, NULL, 0), sh->bytes, (size_t)(8 + hlen));
    size_t dlen = sh->size - 8 - (size_t)hlen;
    uint32_t dc = sh->has_data_crc
                      ? sh->data_crc
                      : psg_ckpt_crc32(psg_ckpt_crc32(0, NULL, 0), sh->bytes + 8 + hlen, dlen);
    c = (uint32_t)crc32_combine(c, dc, (z_off_t)dlen);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)c);
    if (strcmp(hex, crc->string))
        return psg_error_set("%s: crc32 %s, the index says %s (corrupt)", path, hex, crc->string);
    if (fstep != step)
        return psg_error_set("%s: global step %lld, the index says %lld", path, (long long)fstep,
                             (long long)step);
    if (sh->num_tensors != want_tensors)
        return psg_error_set("%s: %zu tensors, the index says %" PRIu64, path, sh->num_tensors,
                             want_tensors);
    for (size_t i = 0; i < sh->num_tensors; i++) {
        const ck_tensor_t *t = &ck->tensors[sh->first_tensor + i];
        const psg_json_t *f = psg_json_get(wmap, t->name);
        if (!f || f->type != PSG_JSON_STRING || strcmp(f->string, sh->file))
            return psg_error_set(
                "%s: tensor '%s' is not mapped to this file in the index's weight_map", path,
                t->name);
    }
    return 0;
}

static psg_checkpoint_t *open_index(const char *path, int shard) {
    uint8_t *bytes = NULL;
    size_t size = 0;
    if (psg_ckpt_read_file(path, &bytes, &size) < 0) return NULL;
    char *text = realloc(bytes, size + 1);
    if (!text) {
        free(bytes);
        psg_error_set("out of memory");
        return NULL;
    }
    text[size] = 0;
    psg_json_t *j = psg_json_parse(text);
    free(text);
    if (!j) {
        psg_error_wrap("%s", path);
        return NULL;
    }
    psg_checkpoint_t *ck = NULL;
    const psg_json_t *meta = psg_json_get(j, "metadata"), *shards = psg_json_get(j, "shards"),
                     *wmap = psg_json_get(j, "weight_map");
    uint64_t step = 0, nsh = 0;
    if (j->type != PSG_JSON_OBJECT || !meta ||
        !json_uint(psg_json_get(meta, "global_step"), &step) ||
        !json_uint(psg_json_get(meta, "num_shards"), &nsh) || !shards ||
        shards->type != PSG_JSON_ARRAY || (uint64_t)shards->count != nsh || nsh == 0 || !wmap ||
        wmap->type != PSG_JSON_OBJECT) {
        psg_error_set(
            "%s: not a psgraph checkpoint index (metadata.global_step, metadata.num_shards, "
            "shards, weight_map)",
            path);
        goto done;
    }
    if (shard >= (int)nsh) {
        psg_error_set("%s: has %d shards, no shard %d", path, (int)nsh, shard);
        goto done;
    }
    ck = ck_new(path, shard >= 0 ? 1 : (int)nsh);
    if (!ck) goto done;
    ck->step = (int64_t)step;
    ck->indexed = true;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    for (int s = 0; s < ck->num_shards; s++) {
        const psg_json_t *e = shards->items[shard >= 0 ? shard : s];
        const psg_json_t *f = psg_json_get(e, "file");
        if (!f || f->type != PSG_JSON_STRING || !plain_name(f->string)) {
            psg_error_set("%s: shard %d has no plain file name", path, shard >= 0 ? shard : s);
            psg_checkpoint_destroy(&ck);
            goto done;
        }
        ck->shards[s].file = strdup(f->string);
        if (!ck->shards[s].file || check_shard_against_index(ck, s, e, wmap, ck->step, dir) < 0) {
            if (!ck->shards[s].file) psg_error_set("out of memory");
            psg_checkpoint_destroy(&ck);
            goto done;
        }
    }
    if (shard < 0) {
        /* every mapped tensor found in its shard (the shards' own names are checked above) */
        int mapped = wmap->count;
        if (mapped != ck->num_tensors) {
            psg_error_set("%s: the weight_map names %d tensors, the shards hold %d", path, mapped,
                          ck->num_tensors);
            psg_checkpoint_destroy(&ck);
        }
    }
done:
    psg_json_free(j);
    return ck;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

psg_checkpoint_t *psg_checkpoint_open(const char *path, int shard) {
    if (ends_with(path, ".json")) return open_index(path, shard);
    return open_file(path);
}

int64_t psg_checkpoint_step(const psg_checkpoint_t *ck) {
    return ck->step;
}
const char *psg_checkpoint_path(const psg_checkpoint_t *ck) {
    return ck->path;
}

int psg_checkpoint_num_verified(const psg_checkpoint_t *ck, int *num_files) {
    int n = 0;
    for (int s = 0; s < ck->num_shards; s++) n += ck->indexed || ck->shards[s].has_data_crc;
    if (num_files) *num_files = ck->num_shards;
    return n;
}
int psg_checkpoint_num_tensors(const psg_checkpoint_t *ck) {
    return ck->num_tensors;
}

void psg_checkpoint_entry(const psg_checkpoint_t *ck, int i, psg_checkpoint_entry_t *e) {
    PSG_ASSERT(i >= 0 && i < ck->num_tensors);
    const ck_tensor_t *t = &ck->tensors[i];
    *e = (psg_checkpoint_entry_t){t->name, t->dtype, t->shape, t->nbytes, ck->shards[t->shard].file,
                                  t->data};
}

int psg_checkpoint_find(const psg_checkpoint_t *ck, const char *name) {
    for (int i = 0; i < ck->num_tensors; i++)
        if (!strcmp(ck->tensors[i].name, name)) return i;
    return -1;
}

psg_tensor_t *psg_checkpoint_read(const psg_checkpoint_t *ck, const char *name) {
    int i = psg_checkpoint_find(ck, name);
    if (i < 0) {
        psg_error_set("%s: no tensor '%s'", ck->path, name);
        return NULL;
    }
    const ck_tensor_t *t = &ck->tensors[i];
    return psg_tensor_from_data(t->dtype, &t->shape, t->data, t->nbytes);
}

int psg_checkpoint_restore(const psg_checkpoint_t *ck, psg_resource_mgr_t *rm, bool require_all) {
    /* check everything before writing anything */
    for (int i = 0; i < ck->num_tensors; i++) {
        const ck_tensor_t *t = &ck->tensors[i];
        psg_variable_t *v = psg_resource_find_variable(rm, t->name);
        if (v && (v->dtype != t->dtype || !psg_shape_equal(&v->shape, &t->shape))) {
            char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
            return psg_error_set("%s: tensor '%s' is %s%s, the variable is %s%s", ck->path, t->name,
                                 psg_dtype_name(t->dtype), psg_shape_str(&t->shape, a, sizeof a),
                                 psg_dtype_name(v->dtype), psg_shape_str(&v->shape, b, sizeof b));
        }
    }
    if (require_all) {
        for (int i = 0; i < psg_resource_num_variables(rm); i++) {
            psg_variable_t *v = psg_resource_variable_at(rm, i);
            if (v->initialized && !v->backup && psg_checkpoint_find(ck, v->name) < 0)
                return psg_error_set(
                    "%s: has no tensor for variable '%s' (a checkpoint of another model?)",
                    ck->path, v->name);
        }
    }
    for (int i = 0; i < ck->num_tensors; i++) {
        const ck_tensor_t *t = &ck->tensors[i];
        psg_variable_t *v = psg_resource_variable(rm, t->name, t->dtype, &t->shape);
        if (!v) return psg_error_wrap("%s: tensor '%s'", ck->path, t->name);
        pthread_mutex_lock(&v->lock);
        if (psg_tensor_on_host(v->value)) {
            memcpy(v->value->data, t->data, t->nbytes);
        } else {
            /* on a GPU: a host value, moved back by the next GPU kernel using it */
            psg_tensor_t *h = psg_tensor_from_data(t->dtype, &t->shape, t->data, t->nbytes);
            if (!h) {
                pthread_mutex_unlock(&v->lock);
                return psg_error_wrap("%s: tensor '%s'", ck->path, t->name);
            }
            psg_tensor_t *old = psg_variable_swap_value(v, h);
            psg_tensor_destroy(&old);
        }
        v->initialized = true;
        v->backup = false; /* restored as this task's shard (a fallback of failover) */
        psg_variable_note_unlogged(v);
        pthread_mutex_unlock(&v->lock);
    }
    return 0;
}

int psg_checkpoint_verify_restored(const psg_checkpoint_t *ck, psg_resource_mgr_t *rm,
                                   bool *match) {
    *match = true;
    for (int s = 0; s < ck->num_shards; s++) {
        const ck_shard_t *sh = &ck->shards[s];
        uint32_t c = psg_ckpt_crc32(0, NULL, 0), want = psg_ckpt_crc32(0, NULL, 0);
        for (size_t i = 0; i < sh->num_tensors; i++) {
            const ck_tensor_t *t = &ck->tensors[sh->first_tensor + i];
            psg_variable_t *v = psg_resource_find_variable(rm, t->name);
            if (!v) return psg_error_set("%s: no variable '%s' after restore", ck->path, t->name);
            pthread_mutex_lock(&v->lock);
            c = psg_ckpt_crc32(c, v->value->data, psg_tensor_nbytes(v->value));
            pthread_mutex_unlock(&v->lock);
            if (!sh->has_data_crc) want = psg_ckpt_crc32(want, t->data, t->nbytes);
        }
        if (sh->has_data_crc) want = sh->data_crc;
        if (c != want) *match = false;
    }
    return 0;
}
