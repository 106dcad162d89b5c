/* Servables behind psgraph/servable.h: a checkpoint's model rebuilt for inference by the
 * code that trained it (examples/models.c, inception3.c, wide_deep.c with is_training
 * false), its values from the checkpoint, one prepared callable and the signature.
 * Not the values' merging (serving/servable_values.c) nor HTTP (cli/serve_http.c). */
#include "serving/servable_internal.h"
#include "serving/servable_lanes.h"

#include "psgraph/error.h"
#include "psgraph/inception3.h"
#include "psgraph/models.h"
#include "psgraph/ops_math.h"
#include "psgraph/servable.h"
#include "psgraph/session.h"
#include "psgraph/wide_deep.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_IO PSG_SERVABLE_MAX_IO

struct psg_servable {
    char model[32];
    char checkpoint[4096];
    int64_t step;
    bool ema;
    psg_graph_t *g;
    psg_resource_mgr_t *rm;
    psg_session_t *session;
    psg_callable_t *callable;    /* one plan, its kernels over the session's threads */
    psg_servable_lanes_t *lanes; /* batches of 2 rows or more cut over single-threaded plans
                                    (--lanes); NULL: none */
    pthread_mutex_t lock;        /* one run at a time: a callable's plan is not reentrant */
    int spin_us;                 /* the pool's threads poll for work this long, in a run only */
    int n_in, n_out;
    psg_servable_tensor_t in[MAX_IO], out[MAX_IO];
    int64_t id_limit; /* wide-deep: the table's rows, what an i64 input's ids must be under */
};

static void add_io(psg_servable_t *s, bool input, const char *name, psg_endpoint_t e) {
    psg_servable_tensor_t *t = input ? &s->in[s->n_in++] : &s->out[s->n_out++];
    t->name = name;
    t->endpoint = e;
    t->dtype = psg_graph_dtype(s->g, e);
    t->shape = *psg_graph_shape(s->g, e);
}

/* The side of a square image of `pixels` / channels pixels, or 0. */
static int square_side(int64_t pixels, int channels) {
    if (channels < 1 || pixels % channels) return 0;
    int64_t side = (int64_t)llround(sqrt((double)(pixels / channels)));
    return side * side * channels == pixels ? (int)side : 0;
}

static int shape_of(const psg_checkpoint_t *ck, const char *name, int rank, psg_shape_t *s) {
    if (psg_serving_tensor_shape(ck, name, s) < 0 || s->rank != rank)
        return psg_error_set("%s: no rank-%d tensor '%s' (nor its shards)", psg_checkpoint_path(ck),
                             rank, name);
    return 0;
}

/* mlp and cnn: the image size from the first dense layer's rows (28 x 28 x 1 when it
 * fits), the classes from the last layer's columns. */
static int build_image_model(psg_servable_t *s, const psg_checkpoint_t *ck,
                             const psg_servable_options_t *o) {
    bool cnn = !strcmp(s->model, "cnn");
    psg_shape_t fc1, last, conv1;
    if (shape_of(ck, "model/fc1/weights", 2, &fc1) < 0 ||
        shape_of(ck, cnn ? "model/fc2/weights" : "model/fc3/weights", 2, &last) < 0 ||
        (cnn && shape_of(ck, "model/conv1/weights", 4, &conv1) < 0))
        return -1;
    int c = o->channels > 0 ? o->channels : cnn ? (int)conv1.dims[2] : 1;
    int64_t pixels = cnn ? fc1.dims[0] / 64 * 16 * c : fc1.dims[0];
    int h = o->height, w = o->width;
    if (h <= 0 || w <= 0) h = w = square_side(pixels, c);
    if (h <= 0)
        return psg_error_set("%s: the %s's first layer takes %lld values: give --image-size H,W,C",
                             s->checkpoint, s->model, (long long)fc1.dims[0]);
    psg_model_t m;
    psg_model_options_t mo = {.fused_conv = true}; /* inference only: one pass a conv layer */
    if (psg_model_build_with(s->g, s->model, h, w, c, (int)last.dims[1], 1, &mo, &m) < 0) return -1;
    add_io(s, true, "images", m.images);
    add_io(s, false, "logits", m.logits);
    add_io(s, false, "probabilities", psg_softmax(s->g, "probabilities", m.logits));
    return psg_graph_status(s->g);
}

static int build_inception3(psg_servable_t *s, const psg_checkpoint_t *ck,
                            const psg_servable_options_t *o) {
    psg_shape_t logits;
    if (shape_of(ck, "InceptionV3/Logits/Conv2d_1c_1x1/weights", 2, &logits) < 0) return -1;
    psg_inception3_config_t cfg = psg_inception3_defaults();
    cfg.image_size = o->height > 0 ? o->height : 299;
    if (o->width > 0 && o->width != cfg.image_size)
        return psg_error_set("inception3 takes square images (--image-size %d,%d)", o->height,
                             o->width);
    cfg.classes = (int)logits.dims[1];
    cfg.is_training = false;
    cfg.aux_logits = false;
    cfg.read_ema = s->ema;
    cfg.fused_conv = true; /* inference only: one pass a conv layer */
    psg_inception3_t m;
    if (psg_inception3_build(s->g, &cfg, &m) < 0) return -1;
    add_io(s, true, "images", m.images);
    add_io(s, false, "logits", m.logits);
    add_io(s, false, "probabilities", psg_softmax(s->g, "probabilities", m.logits));
    return psg_graph_status(s->g);
}

static int build_wide_deep(psg_servable_t *s, const psg_checkpoint_t *ck) {
    psg_shape_t table;
    if (shape_of(ck, "wide_deep/embeddings", 2, &table) < 0) return -1;
    psg_wide_deep_config_t cfg = psg_wide_deep_defaults();
    cfg.buckets = table.dims[0] / 26;
    cfg.dim = (int)table.dims[1] - 1;
    cfg.table_shards = 1;
    s->id_limit = table.dims[0];
    psg_wide_deep_t m;
    if (psg_wide_deep_build(s->g, &cfg, &m) < 0) return -1;
    add_io(s, true, "dense", m.dense);
    add_io(s, true, "ids", m.ids);
    add_io(s, false, "logits", m.logits);
    add_io(s, false, "probabilities", m.prob);
    return psg_graph_status(s->g);
}

static int build(psg_servable_t *s, const psg_checkpoint_t *ck, const psg_servable_options_t *o) {
    if (!strcmp(s->model, "mlp") || !strcmp(s->model, "cnn")) return build_image_model(s, ck, o);
    if (!strcmp(s->model, "inception3")) return build_inception3(s, ck, o);
    if (!strcmp(s->model, "wide-deep")) return build_wide_deep(s, ck);
    return psg_error_set("model '%s' cannot be served (mlp, cnn, inception3, wide-deep)", s->model);
}

static psg_checkpoint_t *open_checkpoint(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        psg_error_set("%s: no such file or directory", path);
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) return psg_checkpoint_open(path, -1);
    psg_checkpoint_t *ck = NULL;
    int rc = psg_checkpoint_open_latest(path, -1, NULL, NULL, &ck);
    if (rc == 0) psg_error_set("%s: no checkpoint that verifies (model.ckpt-*.index.json)", path);
    return rc == 1 ? ck : NULL;
}

static int load(psg_servable_t *s, const char *path, const psg_servable_options_t *o) {
    psg_checkpoint_t *ck = open_checkpoint(path);
    if (!ck) return -1;
    snprintf(s->checkpoint, sizeof s->checkpoint, "%s", psg_checkpoint_path(ck));
    s->step = psg_checkpoint_step(ck);
    int rc = -1;
    if (o->model)
        snprintf(s->model, sizeof s->model, "%s", o->model);
    else if (psg_serving_detect_model(ck, s->model, sizeof s->model) < 0)
        goto out;
    s->ema = !o->no_ema && psg_serving_has_ema(ck);
    psg_session_options_t so = {.num_threads = o->threads > 0 ? o->threads : 1};
    if (!(s->g = psg_graph_new()) || !(s->rm = psg_resource_mgr_new())) {
        psg_error_set("out of memory");
        goto out;
    }
    if (build(s, ck, o) < 0) {
        psg_error_wrap("%s: the %s's inference graph", s->checkpoint, s->model);
        goto out;
    }
    if (psg_serving_fill_values(s->g, ck, s->rm, o->partition_strategy) < 0) goto out;
    if (!(s->session = psg_session_new(s->g, &so, s->rm))) goto out;
    s->spin_us = o->spin_us > 0 ? o->spin_us : 0;
    psg_endpoint_t feeds[MAX_IO], fetches[MAX_IO];
    for (int i = 0; i < s->n_in; i++) feeds[i] = s->in[i].endpoint;
    for (int i = 0; i < s->n_out; i++) fetches[i] = s->out[i].endpoint;
    s->callable = psg_session_make_callable(s->session, s->n_in, feeds, s->n_out, fetches, 0, NULL);
    if (!s->callable) goto out;
    int lanes = o->lanes > 0 ? o->lanes : 1;
    if (lanes > 1 &&
        !(s->lanes = psg_servable_lanes_new(s->g, s->rm, lanes, s->n_in, feeds, s->n_out, fetches)))
        goto out;
    rc = 0;
out:
    psg_checkpoint_destroy(&ck);
    return rc;
}

psg_servable_t *psg_servable_load(const char *path, const psg_servable_options_t *opt) {
    psg_servable_options_t none = {0};
    psg_servable_t *s = calloc(1, sizeof *s);
    if (!s) {
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    if (load(s, path, opt ? opt : &none) < 0) {
        psg_servable_destroy(&s);
        return NULL;
    }
    return s;
}

void psg_servable_destroy(psg_servable_t **sp) {
    if (!sp || !*sp) return;
    psg_servable_t *s = *sp;
    psg_servable_lanes_destroy(&s->lanes);
    psg_callable_destroy(&s->callable);
    psg_session_destroy(&s->session);
    psg_resource_mgr_destroy(&s->rm);
    psg_graph_destroy(&s->g);
    pthread_mutex_destroy(&s->lock);
    free(s);
    *sp = NULL;
}

const char *psg_servable_model(const psg_servable_t *s) {
    return s->model;
}
const char *psg_servable_checkpoint(const psg_servable_t *s) {
    return s->checkpoint;
}
int64_t psg_servable_step(const psg_servable_t *s) {
    return s->step;
}
bool psg_servable_uses_ema(const psg_servable_t *s) {
    return s->ema;
}
int psg_servable_num_inputs(const psg_servable_t *s) {
    return s->n_in;
}
int psg_servable_num_outputs(const psg_servable_t *s) {
    return s->n_out;
}
const psg_graph_t *psg_servable_graph(const psg_servable_t *s) {
    return s->g;
}
psg_resource_mgr_t *psg_servable_values(const psg_servable_t *s) {
    return s->rm;
}

const psg_servable_tensor_t *psg_servable_input(const psg_servable_t *s, int i) {
    return i >= 0 && i < s->n_in ? &s->in[i] : NULL;
}

const psg_servable_tensor_t *psg_servable_output(const psg_servable_t *s, int i) {
    return i >= 0 && i < s->n_out ? &s->out[i] : NULL;
}

int psg_servable_find_output(const psg_servable_t *s, const char *name) {
    for (int i = 0; i < s->n_out; i++)
        if (!strcmp(s->out[i].name, name)) return i;
    return -1;
}

/* Input i's tensor t against the signature: dtype, rank, every dim but the batch; ids in
 * the table's range. */
static int check_input(const psg_servable_t *s, int i, const psg_tensor_t *t, int64_t batch) {
    const psg_servable_tensor_t *in = &s->in[i];
    char want[128], got[128];
    bool ok =
        t && t->dtype == in->dtype && t->shape.rank == in->shape.rank && t->shape.dims[0] == batch;
    for (int d = 1; ok && d < in->shape.rank; d++)
        ok = in->shape.dims[d] < 0 || t->shape.dims[d] == in->shape.dims[d];
    if (!t) return psg_error_set_code(PSG_ERR_BAD_REQUEST, "input '%s' is missing", in->name);
    if (!ok)
        return psg_error_set_code(
            PSG_ERR_BAD_REQUEST, "input '%s' must be %s%s, got %s%s", in->name,
            psg_dtype_name(in->dtype), psg_shape_str(&in->shape, want, sizeof want),
            psg_dtype_name(t->dtype), psg_shape_str(&t->shape, got, sizeof got));
    if (t->dtype == PSG_DT_I64 && s->id_limit > 0) {
        const int64_t *v = t->data;
        for (int64_t k = 0; k < psg_tensor_numel(t); k++)
            if (v[k] < 0 || v[k] >= s->id_limit)
                return psg_error_set_code(
                    PSG_ERR_BAD_REQUEST,
                    "input '%s': its value %lld is %lld, no row of the table (0 to %lld)", in->name,
                    (long long)k, (long long)v[k], (long long)s->id_limit - 1);
    }
    return 0;
}

int psg_servable_check_inputs(const psg_servable_t *s, psg_tensor_t *const *inputs) {
    int64_t batch = inputs[0] && inputs[0]->shape.rank > 0 ? inputs[0]->shape.dims[0] : -1;
    for (int i = 0; i < s->n_in; i++)
        if (check_input(s, i, inputs[i], batch) < 0) return -1;
    return 0;
}

int psg_servable_run(psg_servable_t *s, psg_tensor_t *const *inputs, psg_tensor_t **outputs) {
    if (psg_servable_check_inputs(s, inputs) < 0) return -1;
    pthread_mutex_lock(&s->lock);
    int rc;
    if (s->lanes && inputs[0]->shape.dims[0] > 1) {
        rc = psg_servable_lanes_run(s->lanes, inputs, outputs);
    } else {
        /* between two kernels the helpers poll; between two runs (the server answering,
         * parsing the next batch) they sleep, leaving the cores to the server's threads */
        psg_session_set_spin(s->session, s->spin_us);
        rc = psg_callable_run(s->callable, inputs, outputs);
        psg_session_set_spin(s->session, 0);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int psg_servable_export_onnx(const psg_servable_t *s, const char *path) {
    psg_onnx_io_t in[MAX_IO], out[MAX_IO];
    for (int i = 0; i < s->n_in; i++) in[i] = (psg_onnx_io_t){s->in[i].name, s->in[i].endpoint};
    for (int i = 0; i < s->n_out; i++) out[i] = (psg_onnx_io_t){s->out[i].name, s->out[i].endpoint};
    char doc[4500];
    snprintf(doc, sizeof doc, "psgraph %s from %s (global step %lld%s), inference graph", s->model,
             s->checkpoint, (long long)s->step, s->ema ? ", moving averages of the weights" : "");
    psg_onnx_spec_t spec = {.num_inputs = s->n_in,
                            .inputs = in,
                            .num_outputs = s->n_out,
                            .outputs = out,
                            .values = s->rm,
                            .graph_name = s->model,
                            .doc = doc,
                            .model_version = s->step};
    return psg_onnx_export(s->g, &spec, path);
}
