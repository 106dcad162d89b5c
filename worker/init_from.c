/* Initial values from a safetensors file (worker/init_from.h): the graph's initial-value
 * hook answers each new variable with the file's tensor of its name, or, when the file
 * holds it in another layout, with its block of the file's whole ("model/fc1/weights/part_1"
 * from "model/fc1/weights") or the file's parts put together ("model/fc1/weights" from
 * "model/fc1/weights/part_0", "part_1"; n parts into m: both). Not the checkpoint reader
 * (ps/checkpoint.c), which it uses. */
#include "worker/init_from.h"

#include "psgraph/checkpoint.h"
#include "core/json.h"
#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INDEX_BYTES (64 << 20)
#define PSG_INIT_NAME_MAX 512
/* the per-worker counters a cluster's job keeps beside the model (worker/sync_train.c) */
#define PSG_INIT_JOB_COUNTS "sync_replicas/worker_counts"

/* A file's tensor: which of the files, which tensor in it. */
typedef struct {
    int file, tensor;
} ref_t;

/* A variable as the file has it, whole: one tensor of that name, or its parts
 * ("NAME/part_K", K = 0..m-1) put together. The variable's own parts take their blocks of
 * it in order along `axis`, from `next` on. */
typedef struct {
    char base[PSG_INIT_NAME_MAX];
    psg_dtype_t dtype;
    psg_shape_t shape;
    const char *data; /* the file's tensor, or buf */
    char *buf;        /* owned: the file's parts put together */
    ref_t *refs;      /* the file's tensors it is made of */
    int num_refs;
    int axis;      /* the axis the variable's parts split; -1: none taken yet */
    int next_part; /* the variable's next part_K */
    int64_t next;  /* that part's first index along axis */
} source_t;

struct psg_init_from {
    char *path;             /* as given: a .safetensors file or a sharded index */
    psg_checkpoint_t **cks; /* the safetensors files (one, or an index's) */
    bool **used;            /* per file, per tensor: matched by some variable */
    int num_files;
    psg_graph_t *g;
    bool strict;
    char **served; /* names of the variables given a value */
    int num_served, cap_served;
    source_t *sources; /* the file's variables taken apart or put together */
    int num_sources;
    psg_inception3_name_t *alias; /* psg_init_from_alias: other names of the variables */
    int num_alias;
};

void psg_init_from_destroy(psg_init_from_t **pf) {
    if (!pf || !*pf) return;
    psg_init_from_t *f = *pf;
    if (f->g) psg_graph_set_initial_value_fn(f->g, NULL, NULL);
    for (int i = 0; i < f->num_files; i++) {
        psg_checkpoint_destroy(&f->cks[i]);
        free(f->used[i]);
    }
    free(f->cks);
    free(f->path);
    for (int i = 0; i < f->num_served; i++) free(f->served[i]);
    free(f->served);
    free(f->used);
    for (int i = 0; i < f->num_sources; i++) {
        free(f->sources[i].buf);
        free(f->sources[i].refs);
    }
    free(f->sources);
    free(f->alias);
    free(f);
    *pf = NULL;
}

static int note_served(psg_init_from_t *f, const char *name) {
    if (f->num_served == f->cap_served) {
        int cap = f->cap_served ? 2 * f->cap_served : 32;
        char **p = realloc(f->served, (size_t)cap * sizeof *p);
        if (!p) return psg_error_set("out of memory");
        f->served = p;
        f->cap_served = cap;
    }
    if (!(f->served[f->num_served] = strdup(name))) return psg_error_set("out of memory");
    f->num_served++;
    return 0;
}

static bool was_served(const psg_init_from_t *f, const char *name) {
    for (int i = 0; i < f->num_served; i++)
        if (!strcmp(f->served[i], name)) return true;
    return false;
}

/* The error of a tensor (name, dt, shape) that does not fit its variable, with a hint when
 * it is the variable's transpose (PyTorch's nn.Linear keeps a weight as [out, in]). */
static void mismatch(const psg_init_from_t *f, const char *name, psg_dtype_t edt,
                     const psg_shape_t *eshape, const char *var, psg_dtype_t dt,
                     const psg_shape_t *shape, const char *how) {
    char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
    bool transposed = edt == dt && eshape->rank == 2 && shape->rank == 2 &&
                      eshape->dims[0] == shape->dims[1] && eshape->dims[1] == shape->dims[0];
    psg_error_set("--init-from %s: tensor '%s' is %s%s, variable '%s' is %s%s%s%s", f->path, name,
                  psg_dtype_name(edt), psg_shape_str(eshape, a, sizeof a), var, psg_dtype_name(dt),
                  psg_shape_str(shape, b, sizeof b), how,
                  transposed
                      ? "; it is the variable's transpose: psgraph keeps a weight as [in, out], "
                        "PyTorch's nn.Linear as [out, in]: save it transposed (w.T)"
                      : "");
}

/* "a/part_3/b" -> "a/b" into base and 3 into *k; false when name has no "/part_K" segment. */
static bool shard_base(const char *name, char *base, size_t size, int *k) {
    const char *p = strstr(name, "/part_");
    if (!p) return false;
    const char *q = p + 6;
    if (*q < '0' || *q > '9') return false;
    long v = 0;
    while (*q >= '0' && *q <= '9' && v < 1000000) v = v * 10 + (*q++ - '0');
    if (*q && *q != '/') return false;
    if ((size_t)snprintf(base, size, "%.*s%s", (int)(p - name), name, q) >= size) return false;
    *k = (int)v;
    return true;
}

/* The tensor `name` in one of the files (file -1: none). */
static ref_t find(const psg_init_from_t *f, const char *name) {
    for (int k = 0; k < f->num_files; k++) {
        int i = psg_checkpoint_find(f->cks[k], name);
        if (i >= 0) return (ref_t){k, i};
    }
    return (ref_t){-1, -1};
}

static void entry_of(const psg_init_from_t *f, ref_t r, psg_checkpoint_entry_t *e) {
    psg_checkpoint_entry(f->cks[r.file], r.tensor, e);
}

/* Copies the block [at, at + len) along axis of a tensor of shape `whole` (es-byte
 * elements) between w and b, the block's own buffer: into b (to_block) or back into w. */
static void copy_block(const psg_shape_t *whole, int axis, int64_t at, int64_t len, size_t es,
                       char *w, char *b, bool to_block) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= whole->dims[d];
    for (int d = axis + 1; d < whole->rank; d++) inner *= whole->dims[d];
    size_t run = (size_t)(len * inner) * es;
    for (int64_t o = 0; o < outer; o++) {
        char *wp = w + ((size_t)(o * whole->dims[axis] + at) * (size_t)inner) * es;
        char *bp = b + (size_t)o * run;
        if (to_block)
            memcpy(bp, wp, run);
        else
            memcpy(wp, bp, run);
    }
}

/* The axis along which shapes a (the whole) and b (a part) differ, the other dimensions
 * equal; `prefer` when they differ on none; -1 when no one axis. */
static int split_axis(const psg_shape_t *a, const psg_shape_t *b, int prefer) {
    if (a->rank != b->rank || a->rank < 1) return -1;
    int axis = -1;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) {
            if (axis >= 0) return -1;
            axis = d;
        }
    return axis >= 0 ? axis : prefer;
}

/* The file's parts of `base` (NAME/part_K, K = 0..m-1, all there) put together into s,
 * along the one axis on which they differ (columns when they differ on none: the models'
 * column shards; `want`, when given, the whole's shape, picks the axis that gives it).
 * 0: s is made; 1: the file has not all of base's parts (none, or a gap); -1 with the error. */
static int join_parts(psg_init_from_t *f, const char *base, const psg_shape_t *want, source_t *s) {
    int m = 0, cap = 0;
    for (int k = 0; k < f->num_files; k++)
        for (int i = 0; i < psg_checkpoint_num_tensors(f->cks[k]); i++) {
            psg_checkpoint_entry_t e;
            psg_checkpoint_entry(f->cks[k], i, &e);
            char b[PSG_INIT_NAME_MAX];
            int part = 0;
            if (!shard_base(e.name, b, sizeof b, &part) || strcmp(b, base)) continue;
            if (part >= cap) {
                int nc = part + 8;
                ref_t *p = realloc(s->refs, (size_t)nc * sizeof *p);
                if (!p) return psg_error_set("out of memory");
                for (int j = cap; j < nc; j++) p[j] = (ref_t){-1, -1};
                s->refs = p;
                cap = nc;
            }
            s->refs[part] = (ref_t){k, i};
            if (part + 1 > m) m = part + 1;
        }
    if (m == 0) return 1;
    s->num_refs = m;
    psg_checkpoint_entry_t e0;
    for (int k = 0; k < m; k++)
        if (s->refs[k].file < 0) return 1; /* not all of them: no whole (by name, then) */
    entry_of(f, s->refs[0], &e0);
    int prefer = e0.shape.rank >= 2 ? 1 : 0, axis = -1;
    for (int pass = 0; pass < 2 && axis < 0; pass++) {
        int a = pass == 0 ? prefer : 1 - prefer;
        if (a >= e0.shape.rank) continue;
        psg_shape_t sum = e0.shape;
        bool ok = true;
        for (int k = 1; k < m && ok; k++) {
            psg_checkpoint_entry_t e;
            entry_of(f, s->refs[k], &e);
            ok = e.dtype == e0.dtype && e.shape.rank == e0.shape.rank;
            for (int d = 0; ok && d < e0.shape.rank; d++)
                ok = d == a || e.shape.dims[d] == e0.shape.dims[d];
            if (ok) sum.dims[a] += e.shape.dims[a];
        }
        if (ok && (!want || psg_shape_equal(want, &sum))) {
            axis = a;
            s->shape = sum;
        }
    }
    if (axis < 0) {
        char a[PSG_SHAPE_STR_MAX];
        return psg_error_set(
            "--init-from %s: the %d parts of '%s' (part_0 %s%s) do not put together along "
            "one axis%s",
            f->path, m, base, psg_dtype_name(e0.dtype), psg_shape_str(&e0.shape, a, sizeof a),
            want ? " into its variable's shape" : "");
    }
    s->dtype = e0.dtype;
    size_t es = psg_dtype_size(e0.dtype);
    if (!(s->buf = malloc((size_t)psg_shape_numel(&s->shape) * es + 1)))
        return psg_error_set("out of memory");
    int64_t at = 0;
    for (int k = 0; k < m; k++) {
        psg_checkpoint_entry_t e;
        entry_of(f, s->refs[k], &e);
        copy_block(&s->shape, axis, at, e.shape.dims[axis], es, s->buf, (char *)e.data, false);
        at += e.shape.dims[axis];
    }
    s->data = s->buf;
    return 0;
}

/* The file's variable `base` whole (want: the shape a whole variable needs, NULL for a part),
 * made once. NULL with *failed false when the file has none of it. */
static source_t *source_of(psg_init_from_t *f, const char *base, const psg_shape_t *want,
                           bool *failed) {
    for (int i = 0; i < f->num_sources; i++)
        if (!strcmp(f->sources[i].base, base)) return &f->sources[i];
    source_t s = {.axis = -1};
    snprintf(s.base, sizeof s.base, "%s", base);
    ref_t r =
        want ? (ref_t){-1, -1} : find(f, base); /* a whole variable's own name was looked up */
    int rc = 0;
    if (r.file >= 0) {
        psg_checkpoint_entry_t e;
        entry_of(f, r, &e);
        s.dtype = e.dtype;
        s.shape = e.shape;
        s.data = e.data;
        s.num_refs = 1;
        if (!(s.refs = malloc(sizeof *s.refs)))
            rc = psg_error_set("out of memory");
        else
            s.refs[0] = r;
    } else {
        rc = join_parts(f, base, want, &s);
    }
    source_t *p = rc == 0 ? realloc(f->sources, (size_t)(f->num_sources + 1) * sizeof *p) : NULL;
    if (rc == 0 && !p) rc = psg_error_set("out of memory");
    if (rc != 0) {
        free(s.buf);
        free(s.refs);
        *failed = rc < 0;
        return NULL;
    }
    f->sources = p;
    f->sources[f->num_sources] = s;
    return &f->sources[f->num_sources++];
}

/* Part k of variable `name` (dt, shape): its block of the file's whole s, the next one along
 * the axis the parts split. */
static psg_tensor_t *block_of(psg_init_from_t *f, source_t *s, const char *name, int k,
                              psg_dtype_t dt, const psg_shape_t *shape, bool *failed) {
    int axis = s->axis >= 0 ? s->axis : split_axis(&s->shape, shape, s->shape.rank >= 2 ? 1 : 0);
    const char *how = " (a part of it)";
    if (k != s->next_part) {
        how = " (its parts are not created in order)";
        axis = -1;
    }
    if (s->dtype != dt || axis < 0 || split_axis(&s->shape, shape, axis) != axis ||
        s->next + shape->dims[axis] > s->shape.dims[axis]) {
        *failed = true;
        mismatch(f, s->base, s->dtype, &s->shape, name, dt, shape, how);
        return NULL;
    }
    psg_tensor_t *t = psg_tensor_new(dt, shape);
    if (!t) {
        *failed = true;
        return NULL;
    }
    copy_block(&s->shape, axis, s->next, shape->dims[axis], psg_dtype_size(dt), (char *)s->data,
               t->data, true);
    s->axis = axis;
    s->next += shape->dims[axis];
    s->next_part++;
    return t;
}

int psg_init_from_alias(psg_init_from_t *f, int n, const psg_inception3_name_t *pairs) {
    free(f->alias);
    f->num_alias = 0;
    if (!(f->alias = malloc(sizeof *f->alias * (size_t)(n > 0 ? n : 1))))
        return psg_error_set("out of memory");
    memcpy(f->alias, pairs, sizeof *pairs * (size_t)n);
    f->num_alias = n;
    return 0;
}

/* The alias of variable `name` (NULL: none). */
static const psg_inception3_name_t *alias_of(const psg_init_from_t *f, const char *name) {
    for (int i = 0; i < f->num_alias; i++)
        if (f->alias[i].keras[0] && !strcmp(f->alias[i].slim, name)) return &f->alias[i];
    return NULL;
}

/* A classifier's weight e (..., C') as the variable's (..., C) when C = C' + 1 (column 0,
 * TF's background class, added as zeros) or C = C' - 1 (column 0 dropped); NULL when the
 * shapes differ otherwise. */
static psg_tensor_t *classes_adapted(const psg_checkpoint_entry_t *e, psg_dtype_t dt,
                                     const psg_shape_t *shape) {
    int r = shape->rank;
    if (e->dtype != dt || dt != PSG_DT_F32 || e->shape.rank != r || r < 1) return NULL;
    for (int d = 0; d + 1 < r; d++)
        if (e->shape.dims[d] != shape->dims[d]) return NULL;
    int64_t c = shape->dims[r - 1], cf = e->shape.dims[r - 1];
    if (c != cf + 1 && c != cf - 1) return NULL;
    psg_tensor_t *t = psg_tensor_zeros(dt, shape);
    if (!t) return NULL;
    int64_t rows = psg_shape_numel(shape) / c;
    const float *in = (const float *)e->data;
    float *out = psg_tensor_f32(t);
    for (int64_t i = 0; i < rows; i++)
        if (c == cf + 1)
            memcpy(out + i * c + 1, in + i * cf, sizeof(float) * (size_t)cf);
        else
            memcpy(out + i * c, in + i * cf + 1, sizeof(float) * (size_t)c);
    return t;
}

/* Variable `name` from the file's tensor r of its other name (a->keras). */
static psg_tensor_t *aliased(psg_init_from_t *f, const psg_inception3_name_t *a, ref_t r,
                             const char *name, psg_dtype_t dt, const psg_shape_t *shape,
                             bool *failed) {
    psg_checkpoint_entry_t e;
    entry_of(f, r, &e);
    psg_tensor_t *t = NULL;
    if (e.dtype == dt && psg_shape_equal(&e.shape, shape))
        t = psg_tensor_from_data(dt, shape, e.data, e.nbytes);
    else if (a->logits) /* 1000 against 1001 classes */
        t = classes_adapted(&e, dt, shape);
    if (!t) {
        *failed = true;
        mismatch(f, e.name, e.dtype, &e.shape, name, dt, shape, "");
        return NULL;
    }
    if (note_served(f, name) < 0) {
        *failed = true;
        psg_tensor_destroy(&t);
        return NULL;
    }
    f->used[r.file][r.tensor] = true;
    return t;
}

static psg_tensor_t *initial_value(void *ctx, const char *name, psg_dtype_t dt,
                                   const psg_shape_t *shape, bool *failed) {
    psg_init_from_t *f = ctx;
    char base[PSG_INIT_NAME_MAX];
    int k = 0;
    bool part = shard_base(name, base, sizeof base, &k);
    ref_t r = find(f, name);
    const psg_inception3_name_t *a = r.file < 0 && !part ? alias_of(f, name) : NULL;
    ref_t ra = a ? find(f, a->keras) : (ref_t){-1, -1};
    if (ra.file >= 0) return aliased(f, a, ra, name, dt, shape, failed);
    source_t *s = NULL;
    /* a part takes its block of the variable the file holds, whole or in any number of parts
     * (the same layout gives the file's part back); a whole variable the file holds in parts
     * is put together; parts the file does not hold all of (one shard file of a cluster's
     * checkpoint) go by name */
    if (part || r.file < 0) s = source_of(f, part ? base : name, part ? NULL : shape, failed);
    if (*failed || (!s && r.file < 0)) return NULL;
    psg_tensor_t *t = NULL;
    if (!s) { /* the same name, the same layout */
        psg_checkpoint_entry_t e;
        entry_of(f, r, &e);
        if (e.dtype != dt || !psg_shape_equal(&e.shape, shape)) {
            *failed = true;
            mismatch(f, e.name, e.dtype, &e.shape, name, dt, shape, "");
            return NULL;
        }
        t = psg_tensor_from_data(dt, shape, e.data, e.nbytes);
        if (t) f->used[r.file][r.tensor] = true;
    } else {
        if (part) {
            t = block_of(f, s, name, k, dt, shape, failed);
        } else if (s->dtype != dt || !psg_shape_equal(&s->shape, shape)) {
            *failed = true;
            mismatch(f, name, s->dtype, &s->shape, name, dt, shape, " (its parts put together)");
            return NULL;
        } else {
            t = psg_tensor_from_data(dt, shape, s->data,
                                     (size_t)psg_shape_numel(shape) * psg_dtype_size(dt));
        }
        for (int i = 0; t && i < s->num_refs; i++)
            f->used[s->refs[i].file][s->refs[i].tensor] = true;
    }
    if (!t || note_served(f, name) < 0) {
        *failed = true;
        psg_tensor_destroy(&t);
        return NULL;
    }
    return t;
}

/* Adds the safetensors file at path to f's files. */
static int add_file(psg_init_from_t *f, const char *path) {
    psg_checkpoint_t **c = realloc(f->cks, (size_t)(f->num_files + 1) * sizeof *c);
    bool **u = c ? realloc(f->used, (size_t)(f->num_files + 1) * sizeof *u) : NULL;
    if (c) f->cks = c;
    if (u) f->used = u;
    if (!c || !u) return psg_error_set("out of memory");
    psg_checkpoint_t *ck = psg_checkpoint_open(path, -1);
    if (!ck) return -1;
    bool *used = calloc((size_t)psg_checkpoint_num_tensors(ck) + 1, sizeof *used);
    if (!used) {
        psg_checkpoint_destroy(&ck);
        return psg_error_set("out of memory");
    }
    f->cks[f->num_files] = ck;
    f->used[f->num_files++] = used;
    return 0;
}

/* A sharded index as Hugging Face and safetensors' tools write it (model.safetensors.index.json:
 * {"metadata": {...}, "weight_map": {"name": "model-00001-of-00002.safetensors", ...}}): each
 * file it names, once. */
static int add_index(psg_init_from_t *f, const char *path) {
    FILE *in = fopen(path, "rb");
    if (!in) return psg_error_set("%s: %s", path, strerror(errno));
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *p = cap <= MAX_INDEX_BYTES ? realloc(text, cap) : NULL;
            if (!p) {
                free(text);
                fclose(in);
                return psg_error_set("%s: over %d bytes, or out of memory", path, MAX_INDEX_BYTES);
            }
            text = p;
        }
        size_t got = fread(text + n, 1, cap - n - 1, in);
        n += got;
        if (got == 0) break;
    }
    fclose(in);
    text[n] = 0;
    psg_json_t *j = psg_json_parse(text);
    free(text);
    if (!j) return psg_error_wrap("%s", path);
    const psg_json_t *map = psg_json_get(j, "weight_map");
    int rc = map && map->type == PSG_JSON_OBJECT && map->count > 0
                 ? 0
                 : psg_error_set("%s: no \"weight_map\" of tensor names to files", path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    for (int i = 0; rc == 0 && i < map->count; i++) {
        const psg_json_t *file = map->items[i];
        if (file->type != PSG_JSON_STRING || !file->string[0] || strchr(file->string, '/') ||
            file->string[0] == '.') {
            rc = psg_error_set("%s: weight_map[\"%s\"] is not a file name beside the index", path,
                               file->key);
            break;
        }
        bool seen = false;
        for (int k = 0; k < i && !seen; k++) seen = !strcmp(map->items[k]->string, file->string);
        char fp[8192];
        snprintf(fp, sizeof fp, "%s/%s", dir, file->string);
        if (!seen && add_file(f, fp) < 0) rc = -1;
    }
    psg_json_free(j);
    return rc;
}

psg_init_from_t *psg_init_from_new(const char *path, bool strict, psg_graph_t *g) {
    psg_init_from_t *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        psg_error_set("out of memory");
        return NULL;
    }
    f->strict = strict;
    size_t n = strlen(path);
    bool index = n > 5 && !strcmp(path + n - 5, ".json");
    /* a psgraph checkpoint index opens as one checkpoint; another index is a sharded one's */
    psg_checkpoint_t *ck = index ? psg_checkpoint_open(path, -1) : NULL;
    int rc = 0;
    if (ck) {
        psg_checkpoint_destroy(&ck);
        rc = add_file(f, path);
    } else {
        rc = index ? add_index(f, path) : add_file(f, path);
    }
    if (rc < 0) {
        psg_error_wrap("--init-from");
        psg_init_from_destroy(&f);
        return NULL;
    }
    f->g = g;
    psg_graph_set_initial_value_fn(g, initial_value, f);
    return f;
}

/* Appends ", name" to buf (cut at its size). */
static void add_name(char *buf, size_t size, const char *name) {
    size_t n = strlen(buf);
    if (n + 4 < size) snprintf(buf + n, size - n, "%s%s", n ? ", " : "", name);
}

int psg_init_from_report(psg_init_from_t *f, FILE *out) {
    char missing[2048] = "", unexpected[2048] = "";
    int n_missing = 0, n_unexpected = 0, n_matched = 0;
    int nt = 0;
    const int *trainable = psg_graph_collection(f->g, "trainable_variables", &nt);
    for (int i = 0; i < nt; i++) {
        const char *name = psg_node_name(psg_graph_node(f->g, trainable[i]));
        if (was_served(f, name)) continue;
        n_missing++;
        add_name(missing, sizeof missing, name);
    }
    int total = 0;
    bool skipped_step = false, skipped_counts = false;
    for (int k = 0; k < f->num_files; k++)
        for (int i = 0; i < psg_checkpoint_num_tensors(f->cks[k]); i++) {
            psg_checkpoint_entry_t e;
            psg_checkpoint_entry(f->cks[k], i, &e);
            total++;
            if (f->used[k][i]) {
                n_matched++;
                continue;
            }
            if (!strcmp(e.name, "global_step")) { /* a warm start, not a resume: step 0 */
                skipped_step = true;
                continue;
            }
            if (!strcmp(e.name, PSG_INIT_JOB_COUNTS)) { /* a cluster job's, not the model's */
                skipped_counts = true;
                continue;
            }
            n_unexpected++;
            add_name(unexpected, sizeof unexpected, e.name);
        }
    fprintf(
        out,
        "--init-from %s: %d of its %d tensors matched, %d missing (keep their initializers)%s%s, "
        "%d unexpected (no such variable)%s%s%s%s\n",
        f->path, n_matched, total, n_missing, n_missing ? ": " : "", missing, n_unexpected,
        n_unexpected ? ": " : "", unexpected,
        skipped_step ? "; its global_step is not loaded (the run starts at step 0)" : "",
        skipped_counts ? "; its " PSG_INIT_JOB_COUNTS " (a cluster job's counters) is not loaded"
                       : "");
    fflush(out);
    /* the values are in the graph now: later variables keep their own initializers */
    psg_graph_set_initial_value_fn(f->g, NULL, NULL);
    /* a whole split into the variable's parts: they must cover it, or the shapes differ */
    for (int i = 0; i < f->num_sources; i++) {
        const source_t *s = &f->sources[i];
        if (s->next_part == 0 || s->next == s->shape.dims[s->axis]) continue;
        char a[PSG_SHAPE_STR_MAX];
        return psg_error_set("--init-from %s: tensor '%s' is %s%s, and the variable's %d parts "
                             "cover %lld of its %lld %s",
                             f->path, s->base, psg_dtype_name(s->dtype),
                             psg_shape_str(&s->shape, a, sizeof a), s->next_part,
                             (long long)s->next, (long long)s->shape.dims[s->axis],
                             s->axis == 1   ? "columns"
                             : s->axis == 0 ? "rows"
                                            : "indices");
    }
    if (f->strict && (n_missing || n_unexpected))
        return psg_error_set("--init-from %s --strict: %d missing%s%s; %d unexpected%s%s", f->path,
                             n_missing, n_missing ? ": " : "", missing, n_unexpected,
                             n_unexpected ? ": " : "", unexpected);
    return 0;
}
