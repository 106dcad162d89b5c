/* The graph IR: nodes, names and scopes, attributes, collections, device
 * functions, and the node builder that infers shapes as nodes are added.
 * Not execution (executor.c) and not the wire form (serialize.c). */
#include "graph/graph_internal.h"
#include "graph/cast_memo.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static char *xstrdup(const char *s) {
    char *d = strdup(s ? s : "");
    PSG_ASSERT(d);
    return d;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    PSG_ASSERT(q); /* out of memory while growing graph metadata: no sane recovery */
    return q;
}

/* ---- attributes ---- */

void psg_attr_free(psg_attr_t *a) {
    free(a->key);
    switch (a->type) {
    case PSG_ATTR_STR: free(a->u.s); break;
    case PSG_ATTR_INTS: free(a->u.ints.v); break;
    case PSG_ATTR_FLOATS: free(a->u.floats.v); break;
    case PSG_ATTR_TENSOR: psg_tensor_destroy(&a->u.tensor); break;
    default: break;
    }
    memset(a, 0, sizeof *a);
}

int psg_attr_copy(psg_attr_t *dst, const psg_attr_t *src) {
    *dst = *src;
    dst->key = xstrdup(src->key);
    switch (src->type) {
    case PSG_ATTR_STR: dst->u.s = xstrdup(src->u.s); break;
    case PSG_ATTR_INTS:
        dst->u.ints.v = xrealloc(NULL, sizeof(int64_t) * (size_t)src->u.ints.n);
        if (src->u.ints.n)
            memcpy(dst->u.ints.v, src->u.ints.v, sizeof(int64_t) * (size_t)src->u.ints.n);
        break;
    case PSG_ATTR_FLOATS:
        dst->u.floats.v = xrealloc(NULL, sizeof(double) * (size_t)src->u.floats.n);
        if (src->u.floats.n)
            memcpy(dst->u.floats.v, src->u.floats.v, sizeof(double) * (size_t)src->u.floats.n);
        break;
    case PSG_ATTR_TENSOR: dst->u.tensor = psg_tensor_ref(src->u.tensor); break;
    default: break;
    }
    return 0;
}

/* ---- names ---- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int psg_graph_find(const psg_graph_t *g, const char *name) {
    if (!g->num_slots) return -1;
    size_t mask = (size_t)g->num_slots - 1;
    for (size_t i = hash_str(name) & mask;; i = (i + 1) & mask) {
        int slot = g->name_slots[i];
        if (!slot) return -1;
        if (strcmp(g->nodes[slot - 1]->name, name) == 0) return slot - 1;
    }
}

static void name_insert(psg_graph_t *g, int id) {
    if ((g->num_nodes + 1) * 2 > g->num_slots) {
        int old_n = g->num_slots;
        int *old = g->name_slots;
        g->num_slots = old_n ? old_n * 2 : 64;
        g->name_slots = calloc((size_t)g->num_slots, sizeof(int));
        PSG_ASSERT(g->name_slots);
        for (int i = 0; i < old_n; i++) {
            if (!old[i]) continue;
            size_t mask = (size_t)g->num_slots - 1;
            size_t j = hash_str(g->nodes[old[i] - 1]->name) & mask;
            while (g->name_slots[j]) j = (j + 1) & mask;
            g->name_slots[j] = old[i];
        }
        free(old);
    }
    size_t mask = (size_t)g->num_slots - 1;
    size_t j = hash_str(g->nodes[id]->name) & mask;
    while (g->name_slots[j]) j = (j + 1) & mask;
    g->name_slots[j] = id + 1;
}

static bool valid_name_part(const char *s) {
    if (!*s) return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.' || c == '/'))
            return false;
    }
    return true;
}

/* ---- the graph ---- */

psg_graph_t *psg_graph_new(void) {
    psg_graph_t *g = calloc(1, sizeof *g);
    if (!g) psg_error_set("out of memory");
    return g;
}

static void node_free(psg_node_t *n) {
    if (!n) return;
    free(n->name);
    free(n->inputs);
    free(n->controls);
    for (int i = 0; i < n->num_attrs; i++) psg_attr_free(&n->attrs[i]);
    free(n->attrs);
    free(n->device);
    free(n->assigned_device);
    free(n);
}

/* Device functions, innermost first, as TensorFlow applies them: each sees the
 * device the node has so far and may replace it (NULL: keep). */
void psg_graph_apply_device_fns(const psg_graph_t *g, psg_node_t *n) {
    for (int f = g->num_devices - 1; f >= 0; f--) {
        const char *d = g->devices[f].fn(g->devices[f].ctx, g, n);
        if (d && d != n->device) {
            char *copy = xstrdup(d);
            free(n->device);
            n->device = copy;
        }
    }
}

void psg_graph_destroy(psg_graph_t **gp) {
    if (!gp || !*gp) return;
    psg_graph_t *g = *gp;
    *gp = NULL;
    for (int i = 0; i < g->num_nodes; i++) node_free(g->nodes[i]);
    free(g->nodes);
    free(g->name_slots);
    for (int i = 0; i < g->num_scopes; i++) free(g->scopes[i]);
    free(g->scopes);
    for (int i = 0; i < g->num_devices; i++) free(g->devices[i].fixed);
    free(g->devices);
    for (int i = 0; i < g->num_collections; i++) {
        free(g->collections[i].name);
        free(g->collections[i].ids);
    }
    free(g->collections);
    free(g->casts);
    for (int i = 0; i < g->num_control_frames; i++) free(g->control_frames[i].ids);
    free(g->control_frames);
    free(g->error);
    free(g);
}

int psg_graph_num_nodes(const psg_graph_t *g) {
    return g->num_nodes;
}

/* A heap block of n bytes as malloc holds it: its header, rounded to 16. */
static size_t heap_bytes(size_t n) {
    return (n + 8 + 15) & ~(size_t)15;
}

static size_t str_bytes(const char *s) {
    return s ? heap_bytes(strlen(s) + 1) : 0;
}

size_t psg_graph_footprint(const psg_graph_t *g) {
    size_t n = heap_bytes(sizeof *g) + heap_bytes(sizeof(psg_node_t *) * (size_t)g->cap_nodes) +
               heap_bytes(sizeof(int) * (size_t)g->num_slots);
    for (int i = 0; i < g->num_nodes; i++) {
        const psg_node_t *nd = g->nodes[i];
        n += heap_bytes(sizeof *nd) + str_bytes(nd->name) + str_bytes(nd->device) +
             str_bytes(nd->assigned_device) +
             heap_bytes(sizeof *nd->inputs * (size_t)nd->num_inputs) +
             heap_bytes(sizeof *nd->controls * (size_t)nd->num_controls) +
             heap_bytes(sizeof *nd->attrs * (size_t)nd->num_attrs);
        for (int k = 0; k < nd->num_attrs; k++) {
            const psg_attr_t *a = &nd->attrs[k];
            n += str_bytes(a->key);
            if (a->type == PSG_ATTR_STR) n += str_bytes(a->u.s);
            if (a->type == PSG_ATTR_INTS) n += heap_bytes(sizeof(int64_t) * (size_t)a->u.ints.n);
            if (a->type == PSG_ATTR_FLOATS) n += heap_bytes(sizeof(double) * (size_t)a->u.floats.n);
            if (a->type == PSG_ATTR_TENSOR && a->u.tensor) n += heap_bytes(sizeof *a->u.tensor);
        }
    }
    return n;
}

const psg_node_t *psg_graph_node(const psg_graph_t *g, int id) {
    return (id >= 0 && id < g->num_nodes) ? g->nodes[id] : NULL;
}

const char *psg_graph_error(const psg_graph_t *g) {
    return g->error;
}

int psg_graph_status(const psg_graph_t *g) {
    return g->error ? psg_error_set("%s", g->error) : 0;
}

int psg_graph_wrap_error(const psg_graph_t *g) {
    if (g && g->error && !strstr(psg_error_message(), g->error)) psg_error_wrap("%s", g->error);
    return -1;
}

void psg_graph_clear_error(psg_graph_t *g) {
    free(g->error);
    g->error = NULL;
}

int psg_graph_push_control(psg_graph_t *g, int n, const int *ids, bool clear) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= g->num_nodes)
            return psg_error_set("control dependency on a missing node %d", ids[i]);
    if (g->num_control_frames == g->cap_control_frames) {
        g->cap_control_frames = g->cap_control_frames ? g->cap_control_frames * 2 : 4;
        g->control_frames = xrealloc(g->control_frames,
                                     sizeof(psg_control_frame_t) * (size_t)g->cap_control_frames);
    }
    psg_control_frame_t *f = &g->control_frames[g->num_control_frames++];
    f->n = n;
    f->ids = n ? xrealloc(NULL, sizeof(int) * (size_t)n) : NULL;
    if (n) memcpy(f->ids, ids, sizeof(int) * (size_t)n);
    f->clear = clear;
    return 0;
}

void psg_graph_pop_control(psg_graph_t *g) {
    PSG_ASSERT(g->num_control_frames > 0);
    free(g->control_frames[--g->num_control_frames].ids);
}

/* The pushed control dependencies that apply, added to n's control inputs once each. */
static void add_control_frames(const psg_graph_t *g, psg_node_t *n) {
    for (int f = g->num_control_frames - 1; f >= 0; f--) {
        const psg_control_frame_t *fr = &g->control_frames[f];
        for (int i = 0; i < fr->n; i++) {
            bool seen = false;
            for (int k = 0; k < n->num_controls && !seen; k++) seen = n->controls[k] == fr->ids[i];
            if (seen) continue;
            n->controls = xrealloc(n->controls, sizeof(int) * (size_t)(n->num_controls + 1));
            n->controls[n->num_controls++] = fr->ids[i];
        }
        if (fr->clear) break;
    }
}

void psg_graph_set_initial_value_fn(psg_graph_t *g, psg_initial_value_fn fn, void *ctx) {
    g->initial_value_fn = fn;
    g->initial_value_ctx = ctx;
}

/* ---- mixed precision's setting and casts (the graph keeps them; ops/precision.c decides) ---- */

int psg_graph_set_compute_dtype(psg_graph_t *g, psg_dtype_t dt) {
    if (dt != PSG_DT_F32 && dt != PSG_DT_BF16 && dt != PSG_DT_F16)
        return psg_error_set("compute dtype must be f32, bf16 or f16, got %s", psg_dtype_name(dt));
    g->compute_dtype = dt;
    return 0;
}

psg_dtype_t psg_graph_compute_dtype(const psg_graph_t *g) {
    return g->compute_dtype == PSG_DT_INVALID ? PSG_DT_F32 : g->compute_dtype;
}

int psg_graph_cast_memo_find(const psg_graph_t *g, psg_endpoint_t src, psg_dtype_t dtype) {
    /* the device functions' verdict for a Cast of src now */
    psg_node_t probe = {
        .id = -1, .name = "", .def = psg_op_lookup("Cast"), .num_inputs = 1, .inputs = &src};
    probe.device = strdup("");
    if (!probe.device) return -1;
    psg_graph_apply_device_fns(g, &probe);
    int found = -1;
    for (int i = 0; i < g->num_casts && found < 0; i++) {
        const psg_cast_memo_t *m = &g->casts[i];
        if (m->src.node == src.node && m->src.index == src.index && m->dtype == dtype &&
            !strcmp(g->nodes[m->cast]->device, probe.device))
            found = m->cast;
    }
    free(probe.device);
    return found;
}

void psg_graph_cast_memo_add(psg_graph_t *g, psg_endpoint_t src, psg_dtype_t dtype, int cast) {
    if (g->num_casts == g->cap_casts) {
        int cap = g->cap_casts ? 2 * g->cap_casts : 64;
        psg_cast_memo_t *v = realloc(g->casts, (size_t)cap * sizeof *v);
        if (!v) return; /* not remembered: a later product casts again */
        g->casts = v;
        g->cap_casts = cap;
    }
    g->casts[g->num_casts++] = (psg_cast_memo_t){src, dtype, cast};
}

static void graph_record_error(psg_graph_t *g) {
    if (!g->error) g->error = xstrdup(psg_error_message());
}

psg_tensor_t *psg_graph_initial_value(psg_graph_t *g, const char *name, psg_dtype_t dt,
                                      const psg_shape_t *shape, bool *failed) {
    *failed = false;
    if (!g->initial_value_fn) return NULL;
    psg_tensor_t *t = g->initial_value_fn(g->initial_value_ctx, name, dt, shape, failed);
    if (*failed) graph_record_error(g); /* the build error users see first */
    return t;
}

int psg_graph_push_scope(psg_graph_t *g, const char *scope) {
    if (!scope || !valid_name_part(scope) || scope[0] == '/')
        return psg_error_set("invalid name scope '%s'", scope ? scope : "(null)");
    if (g->num_scopes == g->cap_scopes) {
        g->cap_scopes = g->cap_scopes ? g->cap_scopes * 2 : 8;
        g->scopes = xrealloc(g->scopes, sizeof(char *) * (size_t)g->cap_scopes);
    }
    const char *outer = g->num_scopes ? g->scopes[g->num_scopes - 1] : NULL;
    size_t len = (outer ? strlen(outer) + 1 : 0) + strlen(scope) + 1;
    char *full = xrealloc(NULL, len);
    snprintf(full, len, "%s%s%s", outer ? outer : "", outer ? "/" : "", scope);
    g->scopes[g->num_scopes++] = full;
    return 0;
}

const char *psg_graph_scope(const psg_graph_t *g) {
    return g->num_scopes ? g->scopes[g->num_scopes - 1] : "";
}

void psg_graph_pop_scope(psg_graph_t *g) {
    PSG_ASSERT(g->num_scopes > 0);
    free(g->scopes[--g->num_scopes]);
}

/* A fixed spec, as tf.device("..."): fills what the node's device leaves
 * open (its own fields win). A name that does not parse is returned as is,
 * so that placement reports it with the node. */
static const char *fixed_device_fn(void *ctx, const psg_graph_t *g, const psg_node_t *n) {
    static _Thread_local char merged[PSG_DEVICE_NAME_MAX];
    (void)g;
    if (!n->device[0]) return ctx;
    psg_device_name_t outer, inner;
    if (psg_device_name_parse(n->device, &inner) < 0) return n->device;
    if (psg_device_name_parse(ctx, &outer) < 0) return ctx;
    psg_device_name_merge(&outer, &inner, &outer);
    return psg_device_name_str(&outer, merged, sizeof merged);
}

void psg_graph_push_device_fn(psg_graph_t *g, psg_device_fn fn, void *ctx) {
    if (g->num_devices == g->cap_devices) {
        g->cap_devices = g->cap_devices ? g->cap_devices * 2 : 4;
        g->devices = xrealloc(g->devices, sizeof *g->devices * (size_t)g->cap_devices);
    }
    g->devices[g->num_devices++] = (psg_device_frame_t){fn, ctx, NULL};
}

void psg_graph_push_device(psg_graph_t *g, const char *device) {
    char *copy = xstrdup(device);
    psg_graph_push_device_fn(g, fixed_device_fn, copy);
    g->devices[g->num_devices - 1].fixed = copy;
}

void psg_graph_pop_device(psg_graph_t *g) {
    PSG_ASSERT(g->num_devices > 0);
    free(g->devices[--g->num_devices].fixed);
}

static psg_collection_t *collection_get(const psg_graph_t *g, const char *name) {
    for (int i = 0; i < g->num_collections; i++)
        if (strcmp(g->collections[i].name, name) == 0) return &g->collections[i];
    return NULL;
}

int psg_graph_add_to_collection(psg_graph_t *g, const char *collection, int id) {
    if (id < 0 || id >= g->num_nodes)
        return psg_error_set("collection '%s': node id %d out of range", collection, id);
    psg_collection_t *c = collection_get(g, collection);
    if (!c) {
        g->collections = xrealloc(g->collections, sizeof *c * (size_t)(g->num_collections + 1));
        c = &g->collections[g->num_collections++];
        *c = (psg_collection_t){.name = xstrdup(collection)};
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 8;
        c->ids = xrealloc(c->ids, sizeof(int) * (size_t)c->cap);
    }
    c->ids[c->n++] = id;
    return 0;
}

const int *psg_graph_collection(const psg_graph_t *g, const char *collection, int *n) {
    psg_collection_t *c = collection_get(g, collection);
    *n = c ? c->n : 0;
    return c ? c->ids : NULL;
}

/* ---- the builder ---- */

struct psg_node_builder {
    psg_graph_t *g;
    psg_node_t *node;
    int cap_inputs, cap_controls, cap_attrs;
    bool bad_input; /* an input came from a failed build: keep its error */
};

psg_node_builder_t *psg_node_begin(psg_graph_t *g, const char *op, const char *name) {
    psg_node_builder_t *b = calloc(1, sizeof *b);
    psg_node_t *n = calloc(1, sizeof *n);
    PSG_ASSERT(b && n);
    b->g = g;
    b->node = n;
    n->def = psg_op_lookup(op);
    const char *outer = g->num_scopes ? g->scopes[g->num_scopes - 1] : NULL;
    const char *base = name ? name : op;
    size_t len = (outer ? strlen(outer) + 1 : 0) + strlen(base) + 1;
    n->name = xrealloc(NULL, len);
    snprintf(n->name, len, "%s%s%s", outer ? outer : "", outer ? "/" : "", base);
    n->device = xstrdup("");
    n->assigned_device = xstrdup("");
    /* remember the op name for the error if it is unknown */
    if (!n->def) psg_node_attr_str(b, "_unknown_op", op);
    return b;
}

void psg_node_add_input(psg_node_builder_t *b, psg_endpoint_t in) {
    psg_node_t *n = b->node;
    if (!psg_endpoint_valid(in)) b->bad_input = true;
    if (n->num_inputs == b->cap_inputs) {
        b->cap_inputs = b->cap_inputs ? b->cap_inputs * 2 : 4;
        n->inputs = xrealloc(n->inputs, sizeof(psg_endpoint_t) * (size_t)b->cap_inputs);
    }
    n->inputs[n->num_inputs++] = in;
}

void psg_node_add_control(psg_node_builder_t *b, int node_id) {
    psg_node_t *n = b->node;
    if (node_id < 0) b->bad_input = true;
    if (n->num_controls == b->cap_controls) { /* doubled: a peer's node may list 200,000 */
        b->cap_controls = b->cap_controls ? b->cap_controls * 2 : 4;
        n->controls = xrealloc(n->controls, sizeof(int) * (size_t)b->cap_controls);
    }
    n->controls[n->num_controls++] = node_id;
}

void psg_node_set_device(psg_node_builder_t *b, const char *device) {
    free(b->node->device);
    b->node->device = xstrdup(device);
}

static psg_attr_t *attr_slot(psg_node_builder_t *b, const char *key, psg_attr_type_t type) {
    psg_node_t *n = b->node;
    for (int i = 0; i < n->num_attrs; i++) {
        if (strcmp(n->attrs[i].key, key) == 0) {
            psg_attr_free(&n->attrs[i]);
            n->attrs[i].key = xstrdup(key);
            n->attrs[i].type = type;
            return &n->attrs[i];
        }
    }
    if (n->num_attrs == b->cap_attrs) {
        b->cap_attrs = b->cap_attrs ? b->cap_attrs * 2 : 4;
        n->attrs = xrealloc(n->attrs, sizeof(psg_attr_t) * (size_t)b->cap_attrs);
    }
    psg_attr_t *a = &n->attrs[n->num_attrs++];
    memset(a, 0, sizeof *a);
    a->key = xstrdup(key);
    a->type = type;
    return a;
}

void psg_node_attr_int(psg_node_builder_t *b, const char *key, int64_t v) {
    attr_slot(b, key, PSG_ATTR_INT)->u.i = v;
}
void psg_node_attr_float(psg_node_builder_t *b, const char *key, double v) {
    attr_slot(b, key, PSG_ATTR_FLOAT)->u.f = v;
}
void psg_node_attr_bool(psg_node_builder_t *b, const char *key, bool v) {
    attr_slot(b, key, PSG_ATTR_BOOL)->u.b = v;
}
void psg_node_attr_str(psg_node_builder_t *b, const char *key, const char *v) {
    attr_slot(b, key, PSG_ATTR_STR)->u.s = xstrdup(v);
}
void psg_node_attr_ints(psg_node_builder_t *b, const char *key, int n, const int64_t *v) {
    psg_attr_t *a = attr_slot(b, key, PSG_ATTR_INTS);
    a->u.ints.n = n;
    a->u.ints.v = xrealloc(NULL, sizeof(int64_t) * (size_t)n);
    if (n) memcpy(a->u.ints.v, v, sizeof(int64_t) * (size_t)n);
}
void psg_node_attr_floats(psg_node_builder_t *b, const char *key, int n, const double *v) {
    psg_attr_t *a = attr_slot(b, key, PSG_ATTR_FLOATS);
    a->u.floats.n = n;
    a->u.floats.v = xrealloc(NULL, sizeof(double) * (size_t)n);
    if (n) memcpy(a->u.floats.v, v, sizeof(double) * (size_t)n);
}
void psg_node_attr_shape(psg_node_builder_t *b, const char *key, const psg_shape_t *v) {
    attr_slot(b, key, PSG_ATTR_SHAPE)->u.shape = *v;
}
void psg_node_attr_dtype(psg_node_builder_t *b, const char *key, psg_dtype_t v) {
    attr_slot(b, key, PSG_ATTR_DTYPE)->u.dtype = v;
}
void psg_node_attr_tensor(psg_node_builder_t *b, const char *key, psg_tensor_t **t) {
    psg_attr_t *a = attr_slot(b, key, PSG_ATTR_TENSOR);
    a->u.tensor = *t;
    *t = NULL;
    if (!a->u.tensor) b->bad_input = true;
}

/* Picks the final name: the requested one, or with "_1", "_2"... if taken. */
static void uniquify_name(psg_graph_t *g, psg_node_t *n) {
    if (psg_graph_find(g, n->name) < 0) return;
    size_t len = strlen(n->name) + 24;
    char *cand = xrealloc(NULL, len);
    for (int k = 1;; k++) {
        snprintf(cand, len, "%s_%d", n->name, k);
        if (psg_graph_find(g, cand) < 0) break;
    }
    free(n->name);
    n->name = cand;
}

/* A node of at most this many inputs infers with its arrays on the stack. */
#define FEW_INPUTS 8

static int check_and_infer(psg_graph_t *g, psg_node_t *n) {
    const psg_op_def_t *def = n->def;
    if (!def) return psg_error_set("unknown op '%s'", psg_node_get_str(n, "_unknown_op", "?"));
    if (def->num_inputs >= 0 && n->num_inputs != def->num_inputs)
        return psg_error_set("takes %d inputs, given %d", def->num_inputs, n->num_inputs);
    if (def->num_inputs < 0 && n->num_inputs < 1)
        return psg_error_set("takes at least one input, given none");
    for (int i = 0; i < n->num_inputs; i++) {
        psg_endpoint_t e = n->inputs[i];
        if (e.node < 0 || e.node >= g->num_nodes || e.index < 0 ||
            e.index >= g->nodes[e.node]->num_outputs)
            return psg_error_set("input %d refers to a missing output %d:%d", i, e.node, e.index);
    }
    for (int i = 0; i < n->num_controls; i++)
        if (n->controls[i] < 0 || n->controls[i] >= g->num_nodes)
            return psg_error_set("control input %d refers to a missing node %d", i, n->controls[i]);
    /* the inputs' dtypes and shapes: on the stack for a few, else on the heap (a graph
     * from a peer may give a node 200,000 inputs: nothing it sizes goes on the stack) */
    psg_dtype_t few_dt[FEW_INPUTS], *in_dt = few_dt;
    psg_shape_t few_sh[FEW_INPUTS], *in_sh = few_sh;
    if (n->num_inputs > FEW_INPUTS) {
        in_dt = malloc(sizeof *in_dt * (size_t)n->num_inputs);
        in_sh = malloc(sizeof *in_sh * (size_t)n->num_inputs);
        if (!in_dt || !in_sh) {
            free(in_dt);
            free(in_sh);
            return psg_error_set("out of memory for %d inputs", n->num_inputs);
        }
    }
    for (int i = 0; i < n->num_inputs; i++) {
        psg_endpoint_t e = n->inputs[i];
        in_dt[i] = g->nodes[e.node]->out_dtypes[e.index];
        in_sh[i] = g->nodes[e.node]->out_shapes[e.index];
    }
    n->num_outputs = def->num_outputs;
    PSG_ASSERT(n->num_outputs <= PSG_MAX_OUTPUTS);
    for (int i = 0; i < n->num_outputs; i++) {
        n->out_dtypes[i] = PSG_DT_INVALID;
        n->out_shapes[i] = psg_shape_unknown();
    }
    psg_infer_ctx_t c = {
        n, n->num_inputs, in_dt, in_sh, n->num_outputs, n->out_dtypes, n->out_shapes};
    int rc = def->infer(&c);
    if (in_dt != few_dt) {
        free(in_dt);
        free(in_sh);
    }
    if (rc < 0) return -1;
    for (int i = 0; i < n->num_outputs; i++)
        PSG_ASSERT(n->out_dtypes[i] != PSG_DT_INVALID); /* an infer fn that forgot an output */
    return 0;
}

int psg_node_finish(psg_node_builder_t *b) {
    psg_graph_t *g = b->g;
    psg_node_t *n = b->node;
    bool bad_input = b->bad_input;
    free(b);
    if (n->def && n->num_attrs && strcmp(n->attrs[n->num_attrs - 1].key, "_unknown_op") == 0)
        psg_attr_free(&n->attrs[--n->num_attrs]);
    int rc;
    if (bad_input) {
        /* An input came from a failed build: the graph already holds that error. */
        if (!g->error) {
            psg_error_set("node '%s' (%s): an input is invalid", n->name,
                          n->def ? n->def->name : "?");
            graph_record_error(g);
        } else {
            psg_error_set("%s", g->error);
        }
        node_free(n);
        return -1;
    }
    uniquify_name(g, n);
    add_control_frames(g, n);
    rc = check_and_infer(g, n);
    if (rc < 0) {
        psg_error_wrap("node '%s' (%s)", n->name,
                       n->def ? n->def->name : psg_node_get_str(n, "_unknown_op", "?"));
        graph_record_error(g);
        node_free(n);
        return -1;
    }
    n->id = g->num_nodes;
    psg_graph_apply_device_fns(g, n);
    if (g->num_nodes == g->cap_nodes) {
        g->cap_nodes = g->cap_nodes ? g->cap_nodes * 2 : 64;
        g->nodes = xrealloc(g->nodes, sizeof(psg_node_t *) * (size_t)g->cap_nodes);
    }
    g->nodes[g->num_nodes] = n;
    name_insert(g, n->id);
    g->num_nodes++;
    return n->id;
}

psg_endpoint_t psg_node_finish_ep(psg_node_builder_t *b) {
    int id = psg_node_finish(b);
    return id < 0 ? PSG_NO_ENDPOINT : (psg_endpoint_t){id, 0};
}

psg_endpoint_t psg_op_inputs(psg_graph_t *g, const char *op, const char *name, int n,
                             const psg_endpoint_t *inputs) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    for (int i = 0; i < n; i++) psg_node_add_input(b, inputs[i]);
    return psg_node_finish_ep(b);
}

/* ---- reading ---- */

int psg_node_id(const psg_node_t *n) {
    return n->id;
}
const char *psg_node_name(const psg_node_t *n) {
    return n->name;
}
const char *psg_node_op(const psg_node_t *n) {
    return n->def ? n->def->name : "?";
}
const psg_op_def_t *psg_node_def(const psg_node_t *n) {
    return n->def;
}
int psg_node_num_inputs(const psg_node_t *n) {
    return n->num_inputs;
}
psg_endpoint_t psg_node_input(const psg_node_t *n, int i) {
    return n->inputs[i];
}
int psg_node_num_controls(const psg_node_t *n) {
    return n->num_controls;
}
int psg_node_control(const psg_node_t *n, int i) {
    return n->controls[i];
}
int psg_node_num_outputs(const psg_node_t *n) {
    return n->num_outputs;
}
psg_dtype_t psg_node_output_dtype(const psg_node_t *n, int i) {
    return n->out_dtypes[i];
}
const psg_shape_t *psg_node_output_shape(const psg_node_t *n, int i) {
    return &n->out_shapes[i];
}
const char *psg_node_device(const psg_node_t *n) {
    return n->device;
}
const char *psg_node_assigned_device(const psg_node_t *n) {
    return n->assigned_device;
}
int psg_node_num_attrs(const psg_node_t *n) {
    return n->num_attrs;
}
const psg_attr_t *psg_node_attr_at(const psg_node_t *n, int i) {
    return &n->attrs[i];
}

const psg_attr_t *psg_node_attr(const psg_node_t *n, const char *key) {
    for (int i = 0; i < n->num_attrs; i++)
        if (strcmp(n->attrs[i].key, key) == 0) return &n->attrs[i];
    return NULL;
}

int64_t psg_node_get_int(const psg_node_t *n, const char *key, int64_t dflt) {
    const psg_attr_t *a = psg_node_attr(n, key);
    if (!a) return dflt;
    if (a->type == PSG_ATTR_INT) return a->u.i;
    if (a->type == PSG_ATTR_BOOL) return a->u.b;
    return dflt;
}

double psg_node_get_float(const psg_node_t *n, const char *key, double dflt) {
    const psg_attr_t *a = psg_node_attr(n, key);
    if (!a) return dflt;
    if (a->type == PSG_ATTR_FLOAT) return a->u.f;
    if (a->type == PSG_ATTR_INT) return (double)a->u.i;
    return dflt;
}

bool psg_node_get_bool(const psg_node_t *n, const char *key, bool dflt) {
    const psg_attr_t *a = psg_node_attr(n, key);
    if (!a) return dflt;
    if (a->type == PSG_ATTR_BOOL) return a->u.b;
    if (a->type == PSG_ATTR_INT) return a->u.i != 0;
    return dflt;
}

const char *psg_node_get_str(const psg_node_t *n, const char *key, const char *dflt) {
    const psg_attr_t *a = psg_node_attr(n, key);
    return (a && a->type == PSG_ATTR_STR) ? a->u.s : dflt;
}

int psg_graph_set_assigned_device(psg_graph_t *g, int node_id, const char *device) {
    if (node_id < 0 || node_id >= g->num_nodes)
        return psg_error_set("node id %d out of range", node_id);
    psg_node_t *n = g->nodes[node_id];
    free(n->assigned_device);
    n->assigned_device = xstrdup(device);
    return 0;
}

const psg_shape_t *psg_graph_shape(const psg_graph_t *g, psg_endpoint_t e) {
    PSG_ASSERT(e.node >= 0 && e.node < g->num_nodes);
    return &g->nodes[e.node]->out_shapes[e.index];
}

psg_dtype_t psg_graph_dtype(const psg_graph_t *g, psg_endpoint_t e) {
    PSG_ASSERT(e.node >= 0 && e.node < g->num_nodes);
    return g->nodes[e.node]->out_dtypes[e.index];
}
