/* Initial values from a safetensors file (worker/init_from.h): the graph's initial-value
 * hook answers each new variable with the file's tensor of its name, or with its column
 * block of the file's whole weight when the model made the variable a shard
 * ("model/fc1/weights/part_1" from "model/fc1/weights"). Not the checkpoint reader
 * (ps/checkpoint.c), which it uses. */
#include "worker/init_from.h"

#include "psgraph/checkpoint.h"
#include "psgraph/error.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BASES 64

struct psg_init_from {
    psg_checkpoint_t *ck;
    psg_graph_t *g;
    bool strict;
    bool *used;     /* (tensors of ck) matched by some variable */
    char **served;  /* names of the variables given a value */
    int num_served, cap_served;
    struct {
        int tensor;  /* the whole weight in ck */
        int64_t col; /* the next shard's first column */
    } bases[MAX_BASES];
    int num_bases;
};

void psg_init_from_destroy(psg_init_from_t **pf) {
    if (!pf || !*pf) return;
    psg_init_from_t *f = *pf;
    if (f->g) psg_graph_set_initial_value_fn(f->g, NULL, NULL);
    psg_checkpoint_destroy(&f->ck);
    for (int i = 0; i < f->num_served; i++) free(f->served[i]);
    free(f->served);
    free(f->used);
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
    psg_error_set("--init-from %s: tensor '%s' is %s%s, variable '%s' is %s%s%s", psg_checkpoint_path(f->ck),
                  e->name, psg_dtype_name(e->dtype), psg_shape_str(&e->shape, a, sizeof a), var,
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
static psg_tensor_t *column_block(psg_init_from_t *f, int ti, const char *name, psg_dtype_t dt,
                                  const psg_shape_t *shape, bool *failed) {
    psg_checkpoint_entry_t e;
    psg_checkpoint_entry(f->ck, ti, &e);
    int b = 0;
    while (b < f->num_bases && f->bases[b].tensor != ti) b++;
    if (b == f->num_bases) {
        if (b == MAX_BASES) {
            *failed = true;
            psg_error_set("--init-from: over %d sharded weights", MAX_BASES);
            return NULL;
        }
        f->bases[f->num_bases++].tensor = ti;
        f->bases[b].col = 0;
    }
    int64_t col = f->bases[b].col;
    if (e.dtype != dt || e.shape.rank != 2 || shape->rank != 2 || e.shape.dims[0] != shape->dims[0] ||
        col + shape->dims[1] > e.shape.dims[1]) {
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
               (const char *)e.data + ((size_t)r * (size_t)e.shape.dims[1] + (size_t)col) * es, row);
    f->bases[b].col = col + shape->dims[1];
    return t;
}

static psg_tensor_t *initial_value(void *ctx, const char *name, psg_dtype_t dt, const psg_shape_t *shape,
                                   bool *failed) {
    psg_init_from_t *f = ctx;
    char base[512];
    int i = psg_checkpoint_find(f->ck, name);
    bool shard = i < 0 && shard_base(name, base, sizeof base) && (i = psg_checkpoint_find(f->ck, base)) >= 0;
    if (i < 0) return NULL;
    psg_tensor_t *t = NULL;
    if (shard) {
        t = column_block(f, i, name, dt, shape, failed);
    } else {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(f->ck, i, &e);
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
    f->used[i] = true;
    return t;
}

psg_init_from_t *psg_init_from_new(const char *path, bool strict, psg_graph_t *g) {
    psg_init_from_t *f = calloc(1, sizeof *f);
    if (!f) {
        psg_error_set("out of memory");
        return NULL;
    }
    f->strict = strict;
    if (!(f->ck = psg_checkpoint_open(path, -1))) {
        psg_error_wrap("--init-from");
        psg_init_from_destroy(&f);
        return NULL;
    }
    if (!(f->used = calloc((size_t)psg_checkpoint_num_tensors(f->ck) + 1, sizeof *f->used))) {
        psg_error_set("out of memory");
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
    for (int i = 0; i < psg_checkpoint_num_tensors(f->ck); i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(f->ck, i, &e);
        if (f->used[i]) {
            n_matched++;
            continue;
        }
        n_unexpected++;
        add_name(unexpected, sizeof unexpected, e.name);
    }
    fprintf(out, "--init-from %s: %d of its %d tensors matched, %d missing (keep their initializers)%s%s, "
                 "%d unexpected (no such variable)%s%s\n",
            psg_checkpoint_path(f->ck), n_matched, psg_checkpoint_num_tensors(f->ck), n_missing,
            n_missing ? ": " : "", missing, n_unexpected, n_unexpected ? ": " : "", unexpected);
    fflush(out);
    /* the values are in the graph now: later variables keep their own initializers */
    psg_graph_set_initial_value_fn(f->g, NULL, NULL);
    if (f->strict && (n_missing || n_unexpected))
        return psg_error_set("--init-from %s --strict: %d missing%s%s; %d unexpected%s%s", psg_checkpoint_path(f->ck),
                             n_missing, n_missing ? ": " : "", missing, n_unexpected, n_unexpected ? ": " : "",
                             unexpected);
    return 0;
}
