/* Initial values from a safetensors file (worker/init_from.h): the graph's initial-value
 * hook answers each new variable with the file's tensor of its name, or with its column
 * block of the file's whole weight when the model made the variable a shard
 * ("model/fc1/weights/part_1" from "model/fc1/weights"). Not the checkpoint reader
 * (ps/checkpoint.c), which it uses. */
#include "worker/init_from.h"

#include "psgraph/checkpoint.h"
#include "core/json.h"
#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BASES 64
#define MAX_INDEX_BYTES (64 << 20)

/* A file's tensor: which of the files, which tensor in it. */
typedef struct {
    int file, tensor;
} ref_t;

struct psg_init_from {
    char *path;             /* as given: a .safetensors file or a sharded index */
    psg_checkpoint_t **cks; /* the safetensors files (one, or an index's) */
    bool **used;            /* per file, per tensor: matched by some variable */
    int num_files;
    psg_graph_t *g;
    bool strict;
    char **served; /* names of the variables given a value */
    int num_served, cap_served;
    struct {
        ref_t whole; /* the whole weight */
        int64_t col; /* the next shard's first column */
    } bases[MAX_BASES];
    int num_bases;
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

/* The error of a tensor that does not fit its variable. */
static void mismatch(const psg_init_from_t *f, const psg_checkpoint_entry_t *e, const char *var,
                     psg_dtype_t dt, const psg_shape_t *shape, const char *how) {
    char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
    psg_error_set("--init-from %s: tensor '%s' is %s%s, variable '%s' is %s%s%s", f->path, e->name,
                  psg_dtype_name(e->dtype), psg_shape_str(&e->shape, a, sizeof a), var,
                  psg_dtype_name(dt), psg_shape_str(shape, b, sizeof b), how);
}

/* "a/part_3/b" -> "a/b" into base; false when name has no "/part_K" segment. */
static bool shard_base(const char *name, char *base, size_t size) {
    const char *p = strstr(name, "/part_");
    if (!p) return false;
    const char *q = p + 6;
    if (*q < '0' || *q > '9') return false;
    while (*q >= '0' && *q <= '9') q++;
    if (*q && *q != '/') return false;
    snprintf(base, size, "%.*s%s", (int)(p - name), name, q);
    return true;
}

/* Variable `name` (dt, shape) is a column shard of the file's whole weight `base`. */
static psg_tensor_t *column_block(psg_init_from_t *f, ref_t whole, const char *name, psg_dtype_t dt,
                                  const psg_shape_t *shape, bool *failed) {
    psg_checkpoint_entry_t e;
    psg_checkpoint_entry(f->cks[whole.file], whole.tensor, &e);
    int b = 0;
    while (b < f->num_bases &&
           (f->bases[b].whole.file != whole.file || f->bases[b].whole.tensor != whole.tensor))
        b++;
    if (b == f->num_bases) {
        if (b == MAX_BASES) {
            *failed = true;
            psg_error_set("--init-from: over %d sharded weights", MAX_BASES);
            return NULL;
        }
        f->bases[f->num_bases++].whole = whole;
        f->bases[b].col = 0;
    }
    int64_t col = f->bases[b].col;
    if (e.dtype != dt || e.shape.rank != 2 || shape->rank != 2 ||
        e.shape.dims[0] != shape->dims[0] || col + shape->dims[1] > e.shape.dims[1]) {
        *failed = true;
        mismatch(f, &e, name, dt, shape, " (a column shard of it)");
        return NULL;
    }
    psg_tensor_t *t = psg_tensor_new(dt, shape);
    if (!t) {
        *failed = true;
        return NULL;
    }
    size_t es = psg_dtype_size(dt), row = (size_t)shape->dims[1] * es;
    for (int64_t r = 0; r < shape->dims[0]; r++)
        memcpy((char *)t->data + (size_t)r * row,
               (const char *)e.data + ((size_t)r * (size_t)e.shape.dims[1] + (size_t)col) * es,
               row);
    f->bases[b].col = col + shape->dims[1];
    return t;
}

/* The tensor `name` in one of the files (file -1: none). */
static ref_t find(const psg_init_from_t *f, const char *name) {
    for (int k = 0; k < f->num_files; k++) {
        int i = psg_checkpoint_find(f->cks[k], name);
        if (i >= 0) return (ref_t){k, i};
    }
    return (ref_t){-1, -1};
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

static psg_tensor_t *initial_value(void *ctx, const char *name, psg_dtype_t dt,
                                   const psg_shape_t *shape, bool *failed) {
    psg_init_from_t *f = ctx;
    char base[512];
    ref_t r = find(f, name);
    const psg_inception3_name_t *a = r.file < 0 ? alias_of(f, name) : NULL;
    if (a && (r = find(f, a->keras)).file >= 0) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(f->cks[r.file], r.tensor, &e);
        if (a->logits && !psg_shape_equal(&e.shape, shape)) { /* 1000 against 1001 classes */
            psg_tensor_t *t = classes_adapted(&e, dt, shape);
            if (!t || note_served(f, name) < 0) {
                *failed = true;
                if (!t) mismatch(f, &e, name, dt, shape, "");
                psg_tensor_destroy(&t);
                return NULL;
            }
            f->used[r.file][r.tensor] = true;
            return t;
        }
    }
    bool shard = r.file < 0 && shard_base(name, base, sizeof base) && (r = find(f, base)).file >= 0;
    if (r.file < 0) return NULL;
    psg_tensor_t *t = NULL;
    if (shard) {
        t = column_block(f, r, name, dt, shape, failed);
    } else {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(f->cks[r.file], r.tensor, &e);
        if (e.dtype != dt || !psg_shape_equal(&e.shape, shape)) {
            *failed = true;
            mismatch(f, &e, name, dt, shape, "");
            return NULL;
        }
        t = psg_tensor_from_data(dt, shape, e.data, e.nbytes);
    }
    if (!t || note_served(f, name) < 0) {
        *failed = true;
        psg_tensor_destroy(&t);
        return NULL;
    }
    f->used[r.file][r.tensor] = true;
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
    bool skipped_step = false;
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
            n_unexpected++;
            add_name(unexpected, sizeof unexpected, e.name);
        }
    fprintf(
        out,
        "--init-from %s: %d of its %d tensors matched, %d missing (keep their initializers)%s%s, "
        "%d unexpected (no such variable)%s%s%s\n",
        f->path, n_matched, total, n_missing, n_missing ? ": " : "", missing, n_unexpected,
        n_unexpected ? ": " : "", unexpected,
        skipped_step ? "; its global_step is not loaded (the run starts at step 0)" : "");
    fflush(out);
    /* the values are in the graph now: later variables keep their own initializers */
    psg_graph_set_initial_value_fn(f->g, NULL, NULL);
    if (f->strict && (n_missing || n_unexpected))
        return psg_error_set("--init-from %s --strict: %d missing%s%s; %d unexpected%s%s", f->path,
                             n_missing, n_missing ? ": " : "", missing, n_unexpected,
                             n_unexpected ? ": " : "", unexpected);
    return 0;
}
