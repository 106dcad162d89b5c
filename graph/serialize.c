/* msgpack form of a graph: {"format": "psgraph.graph", "version": 1,
 * "nodes": [{"name", "op", "inputs": [[id, index]...], "controls": [id...],
 * "device", "assigned_device", "attrs": {key: [type, value]}}...],
 * "collections": {name: [id...]}}. Node ids are positions in "nodes", which
 * are in topological order (every input refers to an earlier node). */
#include "graph/graph_internal.h"
#include "psgraph/error.h"
#include "core/msgpack_check.h"
#include "psgraph/serialize.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_NAME "psgraph.graph"
#define FORMAT_VERSION 1

static void pack_cstr(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_shape(msgpack_packer *pk, const psg_shape_t *s) {
    if (s->rank < 0) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_array(pk, (size_t)s->rank);
    for (int i = 0; i < s->rank; i++) msgpack_pack_int64(pk, s->dims[i]);
}

static void pack_attr(msgpack_packer *pk, const psg_attr_t *a) {
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, (int)a->type);
    switch (a->type) {
    case PSG_ATTR_INT: msgpack_pack_int64(pk, a->u.i); break;
    case PSG_ATTR_FLOAT: msgpack_pack_double(pk, a->u.f); break;
    case PSG_ATTR_BOOL: a->u.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case PSG_ATTR_STR: pack_cstr(pk, a->u.s); break;
    case PSG_ATTR_INTS:
        msgpack_pack_array(pk, (size_t)a->u.ints.n);
        for (int i = 0; i < a->u.ints.n; i++) msgpack_pack_int64(pk, a->u.ints.v[i]);
        break;
    case PSG_ATTR_FLOATS:
        msgpack_pack_array(pk, (size_t)a->u.floats.n);
        for (int i = 0; i < a->u.floats.n; i++) msgpack_pack_double(pk, a->u.floats.v[i]);
        break;
    case PSG_ATTR_SHAPE: pack_shape(pk, &a->u.shape); break;
    case PSG_ATTR_DTYPE: msgpack_pack_int(pk, (int)a->u.dtype); break;
    case PSG_ATTR_TENSOR: {
        const psg_tensor_t *t = a->u.tensor;
        size_t nbytes = psg_tensor_nbytes(t);
        msgpack_pack_array(pk, 3);
        msgpack_pack_int(pk, (int)t->dtype);
        pack_shape(pk, &t->shape);
        msgpack_pack_bin(pk, nbytes);
        msgpack_pack_bin_body(pk, t->data, nbytes);
        break;
    }
    }
}

int psg_graph_serialize(const psg_graph_t *g, char **out, size_t *len) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    pack_cstr(&pk, "format");
    pack_cstr(&pk, FORMAT_NAME);
    pack_cstr(&pk, "version");
    msgpack_pack_int(&pk, FORMAT_VERSION);
    pack_cstr(&pk, "nodes");
    msgpack_pack_array(&pk, (size_t)g->num_nodes);
    for (int id = 0; id < g->num_nodes; id++) {
        const psg_node_t *n = g->nodes[id];
        msgpack_pack_map(&pk, 7);
        pack_cstr(&pk, "name");
        pack_cstr(&pk, n->name);
        pack_cstr(&pk, "op");
        pack_cstr(&pk, n->def->name);
        pack_cstr(&pk, "inputs");
        msgpack_pack_array(&pk, (size_t)n->num_inputs);
        for (int i = 0; i < n->num_inputs; i++) {
            msgpack_pack_array(&pk, 2);
            msgpack_pack_int(&pk, n->inputs[i].node);
            msgpack_pack_int(&pk, n->inputs[i].index);
        }
        pack_cstr(&pk, "controls");
        msgpack_pack_array(&pk, (size_t)n->num_controls);
        for (int i = 0; i < n->num_controls; i++) msgpack_pack_int(&pk, n->controls[i]);
        pack_cstr(&pk, "device");
        pack_cstr(&pk, n->device);
        pack_cstr(&pk, "assigned_device");
        pack_cstr(&pk, n->assigned_device);
        pack_cstr(&pk, "attrs");
        msgpack_pack_map(&pk, (size_t)n->num_attrs);
        for (int i = 0; i < n->num_attrs; i++) {
            pack_cstr(&pk, n->attrs[i].key);
            pack_attr(&pk, &n->attrs[i]);
        }
    }
    pack_cstr(&pk, "collections");
    msgpack_pack_map(&pk, (size_t)g->num_collections);
    for (int c = 0; c < g->num_collections; c++) {
        pack_cstr(&pk, g->collections[c].name);
        msgpack_pack_array(&pk, (size_t)g->collections[c].n);
        for (int i = 0; i < g->collections[c].n; i++)
            msgpack_pack_int(&pk, g->collections[c].ids[i]);
    }
    *out = sb.data; /* the sbuffer's malloc'd block becomes the caller's */
    *len = sb.size;
    if (!*out) return psg_error_set("out of memory serializing the graph");
    return 0;
}

/* ---- reading: every access is checked; errors name the field ---- */

static const msgpack_object *map_get(const msgpack_object *m, const char *key) {
    if (m->type != MSGPACK_OBJECT_MAP) return NULL;
    size_t klen = strlen(key);
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            !memcmp(k->via.str.ptr, key, klen))
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

/* A NUL-terminated copy of a msgpack string (caller frees), or NULL. */
static char *str_dup(const msgpack_object *o) {
    if (!o || o->type != MSGPACK_OBJECT_STR) return NULL;
    if (memchr(o->via.str.ptr, 0, o->via.str.size)) return NULL;
    char *s = malloc(o->via.str.size + 1);
    if (!s) return NULL;
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    return s;
}

static bool get_int(const msgpack_object *o, int64_t *v) {
    if (!o) return false;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > INT64_MAX) return false;
        *v = (int64_t)o->via.u64;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *v = o->via.i64;
        return true;
    }
    return false;
}

static bool get_double(const msgpack_object *o, double *v) {
    if (!o) return false;
    if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32) {
        *v = o->via.f64;
        return true;
    }
    int64_t i;
    if (get_int(o, &i)) {
        *v = (double)i;
        return true;
    }
    return false;
}

static bool get_shape(const msgpack_object *o, psg_shape_t *s) {
    if (o->type == MSGPACK_OBJECT_NIL) {
        *s = psg_shape_unknown();
        return true;
    }
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PSG_MAX_RANK) return false;
    s->rank = (int)o->via.array.size;
    for (int i = 0; i < s->rank; i++) {
        int64_t d;
        if (!get_int(&o->via.array.ptr[i], &d) || d < -1) return false;
        s->dims[i] = d;
    }
    return true;
}

static bool valid_dtype(int64_t v) {
    return v > 0 && v < PSG_DT_COUNT;
}

/* Adds attribute `key` from its [type, value] form to the builder. */
static int read_attr(psg_node_builder_t *b, const char *key, const msgpack_object *o) {
    int64_t type;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        !get_int(&o->via.array.ptr[0], &type))
        return psg_error_set("attribute '%s' is not [type, value]", key);
    const msgpack_object *v = &o->via.array.ptr[1];
    int64_t i;
    double f;
    psg_shape_t s;
    switch (type) {
    case PSG_ATTR_INT:
        if (!get_int(v, &i)) break;
        psg_node_attr_int(b, key, i);
        return 0;
    case PSG_ATTR_FLOAT:
        if (!get_double(v, &f)) break;
        psg_node_attr_float(b, key, f);
        return 0;
    case PSG_ATTR_BOOL:
        if (v->type != MSGPACK_OBJECT_BOOLEAN) break;
        psg_node_attr_bool(b, key, v->via.boolean);
        return 0;
    case PSG_ATTR_STR: {
        char *sv = str_dup(v);
        if (!sv) break;
        psg_node_attr_str(b, key, sv);
        free(sv);
        return 0;
    }
    case PSG_ATTR_INTS:
    case PSG_ATTR_FLOATS: {
        if (v->type != MSGPACK_OBJECT_ARRAY) break;
        uint32_t n = v->via.array.size;
        int64_t *iv = malloc(sizeof(int64_t) * (n + 1));
        double *fv = malloc(sizeof(double) * (n + 1));
        bool ok = iv && fv;
        for (uint32_t k = 0; ok && k < n; k++)
            ok = type == PSG_ATTR_INTS ? get_int(&v->via.array.ptr[k], &iv[k])
                                       : get_double(&v->via.array.ptr[k], &fv[k]);
        if (ok && type == PSG_ATTR_INTS) psg_node_attr_ints(b, key, (int)n, iv);
        if (ok && type == PSG_ATTR_FLOATS) psg_node_attr_floats(b, key, (int)n, fv);
        free(iv);
        free(fv);
        if (!ok) break;
        return 0;
    }
    case PSG_ATTR_SHAPE:
        if (!get_shape(v, &s)) break;
        psg_node_attr_shape(b, key, &s);
        return 0;
    case PSG_ATTR_DTYPE:
        if (!get_int(v, &i) || !valid_dtype(i)) break;
        psg_node_attr_dtype(b, key, (psg_dtype_t)i);
        return 0;
    case PSG_ATTR_TENSOR: {
        int64_t dt;
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size != 3 ||
            !get_int(&v->via.array.ptr[0], &dt) || !valid_dtype(dt) || dt == PSG_DT_RESOURCE ||
            !get_shape(&v->via.array.ptr[1], &s) || !psg_shape_is_complete(&s) ||
            v->via.array.ptr[2].type != MSGPACK_OBJECT_BIN)
            break;
        const msgpack_object *bin = &v->via.array.ptr[2];
        psg_tensor_t *t =
            psg_tensor_from_data((psg_dtype_t)dt, &s, bin->via.bin.ptr, bin->via.bin.size);
        if (!t) return psg_error_wrap("attribute '%s'", key);
        psg_node_attr_tensor(b, key, &t);
        return 0;
    }
    default: return psg_error_set("attribute '%s' has unknown type %lld", key, (long long)type);
    }
    return psg_error_set("attribute '%s' has a malformed value", key);
}

static int read_node(psg_graph_t *g, const msgpack_object *o, int pos) {
    char *name = str_dup(map_get(o, "name"));
    char *op = str_dup(map_get(o, "op"));
    char *device = str_dup(map_get(o, "device"));
    char *assigned = str_dup(map_get(o, "assigned_device"));
    const msgpack_object *inputs = map_get(o, "inputs"), *controls = map_get(o, "controls"),
                         *attrs = map_get(o, "attrs");
    int rc = -1;
    if (!name || !op || !device || !assigned) {
        psg_error_set("node %d: missing or malformed name, op or device", pos);
        goto done;
    }
    if (!inputs || inputs->type != MSGPACK_OBJECT_ARRAY || !controls ||
        controls->type != MSGPACK_OBJECT_ARRAY || !attrs || attrs->type != MSGPACK_OBJECT_MAP) {
        psg_error_set("node '%s': malformed inputs, controls or attrs", name);
        goto done;
    }
    if (psg_graph_find(g, name) >= 0) {
        psg_error_set("node '%s': duplicate name", name);
        goto done;
    }
    if (!psg_op_lookup(op)) {
        psg_error_set("node '%s': unknown op '%s'", name, op);
        goto done;
    }
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    for (uint32_t i = 0; i < inputs->via.array.size; i++) {
        const msgpack_object *e = &inputs->via.array.ptr[i];
        int64_t node, index;
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 ||
            !get_int(&e->via.array.ptr[0], &node) || !get_int(&e->via.array.ptr[1], &index) ||
            node < 0 || node >= pos || index < 0 || index >= PSG_MAX_OUTPUTS) {
            psg_error_set("node '%s': input %u is not an earlier node's output", name, i);
            goto abandon;
        }
        psg_node_add_input(b, (psg_endpoint_t){(int)node, (int)index});
    }
    for (uint32_t i = 0; i < controls->via.array.size; i++) {
        int64_t node;
        if (!get_int(&controls->via.array.ptr[i], &node) || node < 0 || node >= pos) {
            psg_error_set("node '%s': control input %u is not an earlier node", name, i);
            goto abandon;
        }
        psg_node_add_control(b, (int)node);
    }
    for (uint32_t i = 0; i < attrs->via.map.size; i++) {
        char *key = str_dup(&attrs->via.map.ptr[i].key);
        int arc = key ? read_attr(b, key, &attrs->via.map.ptr[i].val)
                      : psg_error_set("an attribute key is not a string");
        free(key);
        if (arc < 0) {
            psg_error_wrap("node '%s'", name);
            goto abandon;
        }
    }
    psg_node_set_device(b, device);
    int id = psg_node_finish(b);
    if (id < 0) goto done;
    if (id != pos) {
        psg_error_set("node '%s': was renamed on rebuild", name);
        goto done;
    }
    rc = psg_graph_set_assigned_device(g, id, assigned);
    goto done;
abandon:
    /* finish with an invalid input: frees the builder, adds nothing; the
     * message set above is what the caller sees */
    {
        char saved[1024];
        snprintf(saved, sizeof saved, "%s", psg_error_message());
        psg_node_add_input(b, PSG_NO_ENDPOINT);
        psg_node_finish(b);
        psg_error_set("%s", saved);
    }
done:
    free(name);
    free(op);
    free(device);
    free(assigned);
    return rc;
}

psg_graph_t *psg_graph_deserialize(const void *data, size_t len) {
    return psg_graph_deserialize_within(data, len, SIZE_MAX);
}

psg_graph_t *psg_graph_deserialize_within(const void *data, size_t len, size_t max_bytes) {
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    psg_graph_t *g = NULL;
    if (psg_msgpack_check(data, len, 16) < 0) {
        psg_error_wrap("graph");
        goto fail;
    }
    if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS) {
        psg_error_set("graph: not a complete msgpack object");
        goto fail;
    }
    if (off != len) {
        psg_error_set("graph: %zu trailing bytes", len - off);
        goto fail;
    }
    const msgpack_object *root = &up.data;
    const msgpack_object *fmt = map_get(root, "format");
    int64_t version;
    if (!fmt || fmt->type != MSGPACK_OBJECT_STR || fmt->via.str.size != strlen(FORMAT_NAME) ||
        memcmp(fmt->via.str.ptr, FORMAT_NAME, fmt->via.str.size)) {
        psg_error_set("graph: field 'format' is not \"%s\"", FORMAT_NAME);
        goto fail;
    }
    if (!get_int(map_get(root, "version"), &version) || version != FORMAT_VERSION) {
        psg_error_set("graph: unsupported 'version' (this build reads %d)", FORMAT_VERSION);
        goto fail;
    }
    const msgpack_object *nodes = map_get(root, "nodes"), *colls = map_get(root, "collections");
    if (!nodes || nodes->type != MSGPACK_OBJECT_ARRAY) {
        psg_error_set("graph: field 'nodes' is missing or not an array");
        goto fail;
    }
    /* a node takes ~700 bytes as built whatever it holds (its outputs' shapes): its count
     * alone says whether the graph can fit, before any is built */
    if ((size_t)nodes->via.array.size > max_bytes / sizeof(psg_node_t)) {
        psg_error_set_code(
            PSG_ERR_LIMIT,
            "graph: %u nodes take at least %zu bytes as built, over the %zu bytes left",
            nodes->via.array.size, (size_t)nodes->via.array.size * sizeof(psg_node_t), max_bytes);
        goto fail;
    }
    g = psg_graph_new();
    if (!g) goto fail;
    for (uint32_t i = 0; i < nodes->via.array.size; i++) {
        if (nodes->via.array.ptr[i].type != MSGPACK_OBJECT_MAP) {
            psg_error_set("graph: node %u is not a map", i);
            goto fail;
        }
        if (read_node(g, &nodes->via.array.ptr[i], (int)i) < 0) {
            psg_error_wrap("graph");
            goto fail;
        }
    }
    if (colls) {
        if (colls->type != MSGPACK_OBJECT_MAP) {
            psg_error_set("graph: field 'collections' is not a map");
            goto fail;
        }
        for (uint32_t c = 0; c < colls->via.map.size; c++) {
            char *cname = str_dup(&colls->via.map.ptr[c].key);
            const msgpack_object *ids = &colls->via.map.ptr[c].val;
            bool ok = cname && ids->type == MSGPACK_OBJECT_ARRAY;
            for (uint32_t k = 0; ok && k < ids->via.array.size; k++) {
                int64_t id;
                ok = get_int(&ids->via.array.ptr[k], &id) && id >= 0 && id < g->num_nodes &&
                     psg_graph_add_to_collection(g, cname, (int)id) == 0;
            }
            if (!ok) psg_error_set("graph: collection '%s' is malformed", cname ? cname : "?");
            free(cname);
            if (!ok) goto fail;
        }
    }
    msgpack_unpacked_destroy(&up);
    return g;
fail:
    msgpack_unpacked_destroy(&up);
    psg_graph_destroy(&g);
    return NULL;
}
