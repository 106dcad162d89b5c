/* The ONNX writer behind psgraph/onnx.h: the walk from the outputs back to the inputs,
 * the values' names and layouts, initializers, and the model written by protobuf-c
 * (onnx.pb-c.c, compiled at build time from Debian's onnx.proto). The per-op forms are
 * in serving/onnx_nodes.c. Not a reader. */
#include "serving/onnx_internal.h"

#include "psgraph/error.h"
#include "psgraph/op.h"
#include "psgraph/ops_train.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OX_IR_VERSION 8                       /* ONNX 1.12's, which opset 17 came with */
#define OX_MAX_INIT_BYTES ((uint64_t)2 << 30) /* protobuf's 2 GiB message limit */

/* ---- the arena ---- */

struct ox_block {
    ox_block_t *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

void *ox_alloc(ox_t *x, size_t n) {
    n = (n + 15) & ~(size_t)15;
    ox_block_t *b = x->arena;
    if (!b || b->size - b->used < n) {
        size_t size = n > 65536 ? n : 65536;
        b = calloc(1, sizeof *b + size);
        if (!b) {
            x->oom = true;
            return NULL;
        }
        b->size = size;
        b->next = x->arena;
        x->arena = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

char *ox_strdup(ox_t *x, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = ox_alloc(x, n);
    if (d) memcpy(d, s, n);
    return d;
}

const char *ox_fresh(ox_t *x, const char *base, const char *suffix) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s/%s_%d", base, suffix, x->fresh++);
    return ox_strdup(x, buf);
}

static bool grow(ox_t *x, void ***v, size_t n, size_t *cap) {
    if (n < *cap) return true;
    size_t c = *cap ? 2 * *cap : 64;
    void **nv = realloc(*v, c * sizeof *nv);
    if (!nv) {
        x->oom = true;
        return false;
    }
    *v = nv;
    *cap = c;
    return true;
}

int ox_elem_type(psg_dtype_t dt) {
    switch (dt) {
    case PSG_DT_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    case PSG_DT_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    case PSG_DT_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    case PSG_DT_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    case PSG_DT_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
    case PSG_DT_F16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    case PSG_DT_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    case PSG_DT_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    default: return 0;
    }
}

/* ---- nodes, attributes, initializers ---- */

Onnx__NodeProto *ox_node(ox_t *x, const char *op_type, const char *name, int n_in,
                         const char *const *in, int n_out, const char *const *out) {
    Onnx__NodeProto *n = ox_alloc(x, sizeof *n);
    char **ins = ox_alloc(x, (size_t)(n_in + 1) * sizeof *ins);
    char **outs = ox_alloc(x, (size_t)(n_out + 1) * sizeof *outs);
    if (!n || !ins || !outs || !grow(x, (void ***)&x->nodes, x->n_nodes, &x->cap_nodes))
        return NULL;
    onnx__node_proto__init(n);
    for (int i = 0; i < n_in; i++) ins[i] = ox_strdup(x, in[i] ? in[i] : "");
    for (int i = 0; i < n_out; i++) outs[i] = ox_strdup(x, out[i]);
    n->n_input = (size_t)n_in;
    n->input = ins;
    n->n_output = (size_t)n_out;
    n->output = outs;
    n->op_type = ox_strdup(x, op_type);
    n->name = ox_strdup(x, name);
    x->nodes[x->n_nodes++] = n;
    return n;
}

static Onnx__AttributeProto *attr(ox_t *x, Onnx__NodeProto *node, const char *key,
                                  Onnx__AttributeProto__AttributeType type) {
    if (!node) return NULL;
    Onnx__AttributeProto *a = ox_alloc(x, sizeof *a);
    Onnx__AttributeProto **v = ox_alloc(x, (node->n_attribute + 1) * sizeof *v);
    if (!a || !v) return NULL;
    onnx__attribute_proto__init(a);
    a->name = ox_strdup(x, key);
    a->has_type = 1;
    a->type = type;
    if (node->n_attribute) memcpy(v, node->attribute, node->n_attribute * sizeof *v);
    v[node->n_attribute++] = a;
    node->attribute = v;
    return a;
}

void ox_attr_int(ox_t *x, Onnx__NodeProto *node, const char *key, int64_t v) {
    Onnx__AttributeProto *a = attr(x, node, key, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (!a) return;
    a->has_i = 1;
    a->i = v;
}

void ox_attr_float(ox_t *x, Onnx__NodeProto *node, const char *key, float v) {
    Onnx__AttributeProto *a = attr(x, node, key, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (!a) return;
    a->has_f = 1;
    a->f = v;
}

void ox_attr_ints(ox_t *x, Onnx__NodeProto *node, const char *key, int n, const int64_t *v) {
    Onnx__AttributeProto *a = attr(x, node, key, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *copy = ox_alloc(x, (size_t)(n + 1) * sizeof *copy);
    if (!a || !copy) return;
    if (n) memcpy(copy, v, (size_t)n * sizeof *copy);
    a->n_ints = (size_t)n;
    a->ints = copy;
}

const char *ox_initializer(ox_t *x, const char *name, psg_dtype_t dt, const psg_shape_t *shape,
                           const void *data) {
    Onnx__TensorProto *t = ox_alloc(x, sizeof *t);
    int64_t *dims = ox_alloc(x, (size_t)(shape->rank + 1) * sizeof *dims);
    if (!t || !dims || !grow(x, (void ***)&x->inits, x->n_inits, &x->cap_inits)) return NULL;
    int64_t numel = psg_shape_numel(shape);
    size_t bytes = numel < 0 ? 0 : (size_t)numel * psg_dtype_size(dt);
    x->init_bytes += bytes;
    if (x->init_bytes >= OX_MAX_INIT_BYTES) {
        psg_error_set("the initializers pass 2 GiB at '%s' (protobuf's limit for one model file)",
                      name);
        return NULL;
    }
    onnx__tensor_proto__init(t);
    for (int d = 0; d < shape->rank; d++) dims[d] = shape->dims[d];
    t->n_dims = (size_t)shape->rank;
    t->dims = dims;
    t->has_data_type = 1;
    t->data_type = ox_elem_type(dt);
    t->name = ox_strdup(x, name);
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = (uint8_t *)data;
    x->inits[x->n_inits++] = t;
    return t->name;
}

const char *ox_const_i64(ox_t *x, const char *base, int n, const int64_t *v) {
    int64_t *copy = ox_alloc(x, (size_t)(n + 1) * sizeof *copy);
    if (!copy) return NULL;
    if (n) memcpy(copy, v, (size_t)n * sizeof *copy);
    psg_shape_t s = psg_shape_1d(n);
    return ox_initializer(x, ox_fresh(x, base, "const"), PSG_DT_I64, &s, copy);
}

const char *ox_const_f32(ox_t *x, const char *base, float v) {
    float *copy = ox_alloc(x, sizeof *copy);
    if (!copy) return NULL;
    *copy = v;
    psg_shape_t s = psg_shape_scalar();
    return ox_initializer(x, ox_fresh(x, base, "const"), PSG_DT_F32, &s, copy);
}

/* ---- values and layouts ---- */

static ox_value_t *value(ox_t *x, psg_endpoint_t e) {
    return &x->vals[e.node * PSG_MAX_OUTPUTS + e.index];
}

const char *ox_out_name(ox_t *x, const psg_node_t *n, int out) {
    if (out == 0) return ox_strdup(x, psg_node_name(n));
    char buf[512];
    snprintf(buf, sizeof buf, "%s:%d", psg_node_name(n), out);
    return ox_strdup(x, buf);
}

void ox_set_out(ox_t *x, const psg_node_t *n, int out, const char *name, bool nchw) {
    ox_value_t *v = value(x, (psg_endpoint_t){psg_node_id(n), out});
    if (nchw)
        v->nchw = name;
    else
        v->nhwc = name;
}

static const char *transposed(ox_t *x, const char *from, const int64_t perm[4],
                              const char *suffix) {
    const char *to = ox_fresh(x, from, suffix);
    Onnx__NodeProto *t = ox_node(x, "Transpose", to, 1, &from, 1, &to);
    ox_attr_ints(x, t, "perm", 4, perm);
    return to;
}

const char *ox_in(ox_t *x, const psg_node_t *n, int i) {
    ox_value_t *v = value(x, psg_node_input(n, i));
    if (!v->nhwc && v->nchw)
        v->nhwc = transposed(x, v->nchw, (const int64_t[]){0, 2, 3, 1}, "nhwc");
    return v->nhwc;
}

const char *ox_in_nchw(ox_t *x, const psg_node_t *n, int i) {
    ox_value_t *v = value(x, psg_node_input(n, i));
    if (!v->nchw && v->nhwc)
        v->nchw = transposed(x, v->nhwc, (const int64_t[]){0, 3, 1, 2}, "nchw");
    return v->nchw;
}

bool ox_in_is_nchw(ox_t *x, const psg_node_t *n, int i) {
    ox_value_t *v = value(x, psg_node_input(n, i));
    return v->nchw && !v->nhwc;
}

/* ---- the walk ---- */

/* Marks in need[] every node the outputs depend on through data inputs, stopping at the
 * spec's inputs (control inputs do not matter to inference). */
static int mark(ox_t *x, bool *need) {
    int n = psg_graph_num_nodes(x->g);
    int *stack = malloc((size_t)n * sizeof *stack), top = 0;
    if (!stack) return psg_error_set("out of memory");
    for (int i = 0; i < x->spec->num_outputs; i++) {
        int id = x->spec->outputs[i].endpoint.node;
        if (id < 0 || id >= n) {
            free(stack);
            return psg_error_set("output '%s' names no node of the graph",
                                 x->spec->outputs[i].name);
        }
        if (!need[id]) need[id] = true, stack[top++] = id;
    }
    while (top > 0) {
        const psg_node_t *nd = psg_graph_node(x->g, stack[--top]);
        if (value(x, (psg_endpoint_t){psg_node_id(nd), 0})->nhwc) continue; /* an input */
        for (int i = 0; i < psg_node_num_inputs(nd); i++) {
            int in = psg_node_input(nd, i).node;
            if (!need[in]) need[in] = true, stack[top++] = in;
        }
    }
    free(stack);
    return 0;
}

static Onnx__ValueInfoProto *value_info(ox_t *x, const char *name, psg_dtype_t dt,
                                        const psg_shape_t *s) {
    Onnx__ValueInfoProto *vi = ox_alloc(x, sizeof *vi);
    Onnx__TypeProto *tp = ox_alloc(x, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = ox_alloc(x, sizeof *tt);
    Onnx__TensorShapeProto *sp = ox_alloc(x, sizeof *sp);
    int rank = s->rank < 0 ? 0 : s->rank;
    Onnx__TensorShapeProto__Dimension **dims = ox_alloc(x, (size_t)(rank + 1) * sizeof *dims);
    if (!vi || !tp || !tt || !sp || !dims) return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    for (int d = 0; d < rank; d++) {
        Onnx__TensorShapeProto__Dimension *dim = ox_alloc(x, sizeof *dim);
        if (!dim) return NULL;
        onnx__tensor_shape_proto__dimension__init(dim);
        if (s->dims[d] >= 0) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dim->dim_value = s->dims[d];
        } else {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dim->dim_param = ox_strdup(x, d == 0 ? "batch" : "?");
        }
        dims[d] = dim;
    }
    sp->n_dim = (size_t)rank;
    sp->dim = dims;
    tt->has_elem_type = 1;
    tt->elem_type = ox_elem_type(dt);
    if (s->rank >= 0) tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = ox_strdup(x, name);
    vi->type = tp;
    return vi;
}

/* The signature's inputs: each a Placeholder, its value named as the input. */
static int bind_inputs(ox_t *x, Onnx__ValueInfoProto **vis) {
    for (int i = 0; i < x->spec->num_inputs; i++) {
        const psg_onnx_io_t *io = &x->spec->inputs[i];
        if (io->endpoint.node < 0 || io->endpoint.node >= psg_graph_num_nodes(x->g))
            return psg_error_set("input '%s' names no node of the graph", io->name);
        const psg_node_t *n = psg_graph_node(x->g, io->endpoint.node);
        psg_dtype_t dt = psg_node_output_dtype(n, io->endpoint.index);
        if (!ox_elem_type(dt))
            return psg_error_set("input '%s' (node '%s') is of dtype %s, which ONNX has no form of",
                                 io->name, psg_node_name(n), psg_dtype_name(dt));
        value(x, io->endpoint)->nhwc = ox_strdup(x, io->name);
        vis[i] = value_info(x, io->name, dt, psg_node_output_shape(n, io->endpoint.index));
    }
    return 0;
}

/* The signature's outputs: an Identity from each endpoint's value to the output's name. */
static int bind_outputs(ox_t *x, Onnx__ValueInfoProto **vis) {
    for (int i = 0; i < x->spec->num_outputs; i++) {
        const psg_onnx_io_t *io = &x->spec->outputs[i];
        ox_value_t *v = value(x, io->endpoint);
        const char *from = v->nhwc;
        if (!from && v->nchw)
            from = v->nhwc = transposed(x, v->nchw, (const int64_t[]){0, 2, 3, 1}, "nhwc");
        if (!from)
            return psg_error_set("output '%s': node '%s' has no output %d", io->name,
                                 psg_node_name(psg_graph_node(x->g, io->endpoint.node)),
                                 io->endpoint.index);
        if (strcmp(from, io->name)) ox_node(x, "Identity", io->name, 1, &from, 1, &io->name);
        vis[i] = value_info(x, io->name, psg_graph_dtype(x->g, io->endpoint),
                            psg_graph_shape(x->g, io->endpoint));
    }
    return 0;
}

/* ---- writing ---- */

typedef struct {
    ProtobufCBuffer base;
    FILE *f;
    bool failed;
} file_buffer_t;

static void file_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
    file_buffer_t *fb = (file_buffer_t *)b;
    if (!fb->failed && len && fwrite(data, 1, len, fb->f) != len) fb->failed = true;
}

static int write_model(ox_t *x, Onnx__GraphProto *graph, const char *path) {
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    Onnx__OperatorSetIdProto *opsets[1] = {&opset};
    opset.domain = "";
    opset.has_version = 1;
    opset.version = PSG_ONNX_OPSET;
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = OX_IR_VERSION;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = "psgraph";
    model.producer_version = "0.1.0";
    model.has_model_version = 1;
    model.model_version = x->spec->model_version;
    model.doc_string = (char *)(x->spec->doc ? x->spec->doc : "");
    model.graph = graph;

    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return psg_error_set("%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return psg_error_set("%s: cannot create: %s", tmp, strerror(errno));
    file_buffer_t fb = {.base = {.append = file_append}, .f = f};
    onnx__model_proto__pack_to_buffer(&model, &fb.base);
    bool ok = !fb.failed && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) err = errno;
        unlink(tmp);
        return psg_error_set("%s: cannot write: %s", path, strerror(err));
    }
    return 0;
}

static void ox_free(ox_t *x) {
    while (x->arena) {
        ox_block_t *next = x->arena->next;
        free(x->arena);
        x->arena = next;
    }
    free(x->nodes);
    free(x->inits);
    free(x->vals);
}

static int export_graph(ox_t *x, const char *path) {
    int n = psg_graph_num_nodes(x->g), ni = x->spec->num_inputs, no = x->spec->num_outputs;
    bool *need = calloc((size_t)n + 1, sizeof *need);
    x->vals = calloc((size_t)n * PSG_MAX_OUTPUTS + 1, sizeof *x->vals);
    Onnx__ValueInfoProto **ins = ox_alloc(x, (size_t)(ni + 1) * sizeof *ins);
    Onnx__ValueInfoProto **outs = ox_alloc(x, (size_t)(no + 1) * sizeof *outs);
    int rc = -1;
    if (!need || !x->vals || !ins || !outs) {
        psg_error_set("out of memory");
        goto out;
    }
    if (bind_inputs(x, ins) < 0 || mark(x, need) < 0) goto out;
    /* node ids are a topological order: a node is built after its inputs */
    for (int id = 0; id < n; id++) {
        const psg_node_t *nd = psg_graph_node(x->g, id);
        if (!need[id] || value(x, (psg_endpoint_t){id, 0})->nhwc) continue;
        if (ox_emit(x, nd) < 0) {
            psg_error_wrap("node '%s' (%s)", psg_node_name(nd), psg_node_op(nd));
            goto out;
        }
        if (x->oom) break;
    }
    if (x->oom || bind_outputs(x, outs) < 0) goto out;
    if (x->oom) {
        psg_error_set("out of memory");
        goto out;
    }
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    graph.name = (char *)(x->spec->graph_name ? x->spec->graph_name : "psgraph");
    graph.n_node = x->n_nodes;
    graph.node = x->nodes;
    graph.n_initializer = x->n_inits;
    graph.initializer = x->inits;
    graph.n_input = (size_t)ni;
    graph.input = ins;
    graph.n_output = (size_t)no;
    graph.output = outs;
    rc = write_model(x, &graph, path);
out:
    free(need);
    return rc;
}

int psg_onnx_export(const psg_graph_t *g, const psg_onnx_spec_t *spec, const char *path) {
    if (!g || !spec || !path) return psg_error_set("onnx export: no graph, spec or path");
    if (spec->num_outputs < 1) return psg_error_set("onnx export: no output");
    if (psg_graph_error(g))
        return psg_error_set("onnx export: the graph failed to build: %s", psg_graph_error(g));
    ox_t x = {.g = g, .spec = spec};
    int rc = export_graph(&x, path);
    if (rc < 0 && x.oom) psg_error_set("onnx export: out of memory");
    ox_free(&x);
    if (rc < 0) return psg_error_wrap("onnx export to %s", path);
    return 0;
}
