/* TensorFlow Serving's REST API as text, behind serving/rest.h: routes, predict bodies
 * into tensors (strictly: every shape, dtype and integer checked, every error naming the
 * field, the expected dtype and shape and what was found), answers out. Untrusted bytes
 * come in here: nothing is assumed of a body. Not HTTP (cli/serve_http.c). */
#include "serving/rest.h"

#include "core/json.h"
#include "psgraph/error.h"
#include "serving/float_text.h"
#include "serving/rest_plain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- routes ---- */

/* Reads a decimal version (1 to 18 digits) at *p, advancing it. */
static bool read_version(const char **p, int64_t *v) {
    const char *s = *p;
    int64_t x = 0;
    int k = 0;
    while (*s >= '0' && *s <= '9' && k < 18) x = x * 10 + (*s++ - '0'), k++;
    if (k == 0 || (*s >= '0' && *s <= '9')) return false;
    *v = x;
    *p = s;
    return true;
}

int psg_rest_route(const char *method, const char *path, psg_rest_route_t *r) {
    static const char prefix[] = "/v1/models/";
    memset(r, 0, sizeof *r);
    r->version = -1;
    if (strncmp(path, prefix, sizeof prefix - 1)) {
        psg_error_set("no endpoint at '%.200s' (the API is under /v1/models/NAME)", path);
        return 404;
    }
    const char *p = path + sizeof prefix - 1;
    size_t n = strcspn(p, "/:");
    if (n == 0 || n >= sizeof r->model) {
        psg_error_set("a model name of 1 to %zu characters after /v1/models/", sizeof r->model - 1);
        return 404;
    }
    memcpy(r->model, p, n);
    p += n;
    if (!strncmp(p, "/versions/", 10)) {
        p += 10;
        if (!read_version(&p, &r->version)) {
            psg_error_set("a version number after /versions/ in '%.200s'", path);
            return 404;
        }
    }
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(p, "")) {
        r->kind = PSG_REST_STATUS;
    } else if (!strcmp(p, "/metadata")) {
        r->kind = PSG_REST_METADATA;
    } else if (!strcmp(p, ":predict")) {
        r->kind = PSG_REST_PREDICT;
        if (!post) {
            psg_error_set("%s: :predict takes POST, not %s", path, method);
            return 405;
        }
        return 0;
    } else {
        psg_error_set("no endpoint at '%.200s' (:predict, /metadata, or the model's status)", path);
        return 404;
    }
    if (!get) {
        psg_error_set("%s takes GET, not %s", path, method);
        return 405;
    }
    return 0;
}

psg_rest_signature_t psg_rest_signature_of(const psg_servable_t *s) {
    return (psg_rest_signature_t){psg_servable_num_inputs(s), psg_servable_num_outputs(s),
                                  psg_servable_input(s, 0), psg_servable_output(s, 0)};
}

/* ---- tensors from JSON ---- */

typedef struct {
    const psg_servable_tensor_t *sig;
    psg_tensor_t *t;
    int64_t at;      /* elements written */
    const char *top; /* "instances" or "inputs" */
    /* the item at hand is top[idx[0]]...[idx[depth - 1]]: the path is written only for an
     * error (formatting it for every number was a fifth of a served request's CPU) */
    int depth;
    int idx[PSG_MAX_RANK + 1];
} fill_t;

static int expected(const fill_t *f, const char *what) {
    char s[128], path[160];
    int n = snprintf(path, sizeof path, "%s", f->top);
    for (int d = 0; d < f->depth && n < (int)sizeof path - 24; d++)
        n += snprintf(path + n, sizeof path - (size_t)n, "[%d]", f->idx[d]);
    return psg_error_set("'%s' must be %s%s: %s at %s", f->sig->name, psg_dtype_name(f->sig->dtype),
                         psg_shape_str(&f->sig->shape, s, sizeof s), what, path);
}

/* Writes the number j as element f->at. */
static int fill_number(fill_t *f, const psg_json_t *j) {
    char what[96];
    if (j->type != PSG_JSON_NUMBER) {
        snprintf(what, sizeof what, "%s where a number belongs", psg_json_type_name(j->type));
        return expected(f, what);
    }
    double v = j->number;
    switch (f->t->dtype) {
    case PSG_DT_F32: psg_tensor_f32(f->t)[f->at++] = (float)v; return 0;
    case PSG_DT_I64:
    case PSG_DT_I32:
        if (!j->integral || v != floor(v) || fabs(v) > 9007199254740992.0 ||
            (f->t->dtype == PSG_DT_I32 && fabs(v) > 2147483647.0)) {
            snprintf(what, sizeof what, "%.17g is not an integer it can hold", v);
            return expected(f, what);
        }
        if (f->t->dtype == PSG_DT_I64)
            ((int64_t *)f->t->data)[f->at++] = (int64_t)v;
        else
            ((int32_t *)f->t->data)[f->at++] = (int32_t)v;
        return 0;
    default: return expected(f, "a dtype the server does not read");
    }
}

/* Writes j, which must be of shape dims[d..rank), into f->t. */
static int fill(fill_t *f, const psg_json_t *j, const int64_t *dims, int d, int rank) {
    f->depth = d;
    if (d == rank) return fill_number(f, j);
    char what[96];
    if (j->type != PSG_JSON_ARRAY) {
        snprintf(what, sizeof what, "%s where an array of %lld belongs",
                 psg_json_type_name(j->type), (long long)dims[d]);
        return expected(f, what);
    }
    if (j->count != dims[d]) {
        snprintf(what, sizeof what, "an array of %d where %lld belong", j->count,
                 (long long)dims[d]);
        return expected(f, what);
    }
    for (int i = 0; i < j->count; i++) {
        f->idx[d] = i;
        if (fill(f, j->items[i], dims, d + 1, rank) < 0) return -1;
    }
    return 0;
}

/* The tensor of input `sig` for `batch` rows (new, zeroed). */
static psg_tensor_t *new_input(const psg_servable_tensor_t *sig, int64_t batch) {
    psg_shape_t s = sig->shape;
    s.dims[0] = batch;
    for (int d = 1; d < s.rank; d++)
        if (s.dims[d] < 0) {
            psg_error_set(
                "input '%s' has an unknown dim %d: the server needs every dim but the batch",
                sig->name, d);
            return NULL;
        }
    int64_t n = psg_shape_numel(&s);
    if (n < 0 || n > ((int64_t)1 << 31)) {
        psg_error_set("input '%s': %lld rows are too many", sig->name, (long long)batch);
        return NULL;
    }
    return psg_tensor_zeros(sig->dtype, &s);
}

/* Input i of a columnar request: the value j is the whole batch. */
static int parse_column(const psg_rest_signature_t *sig, int i, const psg_json_t *j,
                        psg_rest_request_t *r) {
    fill_t f = {.sig = &sig->in[i], .top = "inputs"};
    if (j->type != PSG_JSON_ARRAY) return expected(&f, "not an array of rows");
    if (r->batch >= 0 && j->count != r->batch) {
        char what[96];
        snprintf(what, sizeof what, "%d rows where the other inputs have %lld", j->count,
                 (long long)r->batch);
        return expected(&f, what);
    }
    r->batch = j->count;
    if (j->count == 0) return expected(&f, "no rows");
    if (!(f.t = r->inputs[i] = new_input(f.sig, r->batch))) return -1;
    return fill(&f, j, f.t->shape.dims, 0, f.t->shape.rank);
}

/* The value of input i in instance j (an object of the inputs, or with one input, the value). */
static const psg_json_t *instance_value(const psg_rest_signature_t *sig, int i,
                                        const psg_json_t *inst) {
    if (inst->type == PSG_JSON_OBJECT) {
        const psg_json_t *v = psg_json_get(inst, sig->in[i].name);
        if (v || sig->n_in > 1 || sig->in[i].shape.rank > 1) return v;
    }
    return sig->n_in == 1 ? inst : NULL;
}

static int parse_instances(const psg_rest_signature_t *sig, const psg_json_t *list,
                           psg_rest_request_t *r) {
    if (list->type != PSG_JSON_ARRAY || list->count == 0)
        return psg_error_set("'instances' must be a non-empty array (one item a row), got %s",
                             list->type == PSG_JSON_ARRAY ? "an empty array"
                                                          : psg_json_type_name(list->type));
    r->batch = list->count;
    for (int i = 0; i < sig->n_in; i++) {
        fill_t f = {.sig = &sig->in[i], .top = "instances"};
        if (!(f.t = r->inputs[i] = new_input(f.sig, r->batch))) return -1;
        for (int k = 0; k < list->count; k++) {
            const psg_json_t *v = instance_value(sig, i, list->items[k]);
            f.idx[0] = k;
            f.depth = 1;
            if (!v)
                return psg_error_set(
                    "instances[%d] has no input '%s' (an object naming every input: %s%s%s)", k,
                    sig->in[i].name, sig->in[0].name, sig->n_in > 1 ? ", " : "",
                    sig->n_in > 1 ? sig->in[1].name : "");
            if (fill(&f, v, f.t->shape.dims, 1, f.t->shape.rank) < 0) return -1;
        }
    }
    return 0;
}

static int parse_inputs(const psg_rest_signature_t *sig, const psg_json_t *in,
                        psg_rest_request_t *r) {
    r->columnar = true;
    r->batch = -1;
    bool named = in->type == PSG_JSON_OBJECT;
    if (!named && sig->n_in > 1)
        return psg_error_set("'inputs' must be an object naming each input (%s, %s), got %s",
                             sig->in[0].name, sig->in[1].name, psg_json_type_name(in->type));
    for (int i = 0; i < sig->n_in; i++) {
        const psg_json_t *v = named ? psg_json_get(in, sig->in[i].name) : in;
        if (!v) return psg_error_set("'inputs' has no '%s'", sig->in[i].name);
        if (parse_column(sig, i, v, r) < 0) return -1;
    }
    if (named && in->count > sig->n_in)
        for (int k = 0; k < in->count; k++) {
            bool known = false;
            for (int i = 0; i < sig->n_in; i++)
                known = known || !strcmp(in->items[k]->key, sig->in[i].name);
            if (!known)
                return psg_error_set("'inputs' has '%.100s', which is no input of the model",
                                     in->items[k]->key);
        }
    return 0;
}

static int parse_body(const psg_rest_signature_t *sig, const psg_json_t *doc,
                      psg_rest_request_t *r) {
    if (doc->type != PSG_JSON_OBJECT)
        return psg_error_set("the body must be a JSON object, got %s",
                             psg_json_type_name(doc->type));
    const psg_json_t *sn = psg_json_get(doc, "signature_name");
    if (sn && (sn->type != PSG_JSON_STRING || strcmp(sn->string, "serving_default")))
        return psg_error_set("'signature_name': the model has only \"serving_default\"");
    const psg_json_t *inst = psg_json_get(doc, "instances"), *in = psg_json_get(doc, "inputs");
    if (inst && in) return psg_error_set("the body has both 'instances' and 'inputs': one of them");
    for (int k = 0; k < doc->count; k++) {
        const char *key = doc->items[k]->key;
        if (strcmp(key, "instances") && strcmp(key, "inputs") && strcmp(key, "signature_name"))
            return psg_error_set("unknown field '%.100s' (instances, inputs, signature_name)", key);
    }
    if (inst) return parse_instances(sig, inst, r);
    if (in) return parse_inputs(sig, in, r);
    return psg_error_set(
        "the body must hold 'instances' (row format) or 'inputs' (columnar format)");
}

int psg_rest_parse_predict(const psg_rest_signature_t *sig, const char *body, size_t len,
                           psg_rest_request_t *r) {
    memset(r, 0, sizeof *r);
    r->n = sig->n_in;
    if (sig->n_in < 1 || sig->n_in > PSG_SERVABLE_MAX_IO)
        return psg_error_set("a signature of %d inputs", sig->n_in);
    if (memchr(body, 0, len)) return psg_error_set("the body holds a NUL byte");
    char *text = malloc(len + 1);
    if (!text) return psg_error_set("out of memory for a body of %zu bytes", len);
    memcpy(text, body, len);
    text[len] = 0;
    int plain = psg_rest_parse_plain(sig, text, len, r);
    if (plain != 0) {
        free(text);
        return plain > 0 ? 0 : psg_error_set("out of memory for a body of %zu bytes", len);
    }
    psg_json_t *doc = psg_json_parse(text);
    free(text);
    if (!doc) return psg_error_wrap("the body is not JSON");
    int rc = parse_body(sig, doc, r);
    psg_json_free(doc);
    if (rc < 0) psg_rest_request_clear(r);
    return rc;
}

void psg_rest_request_clear(psg_rest_request_t *r) {
    for (int i = 0; i < PSG_SERVABLE_MAX_IO; i++) psg_tensor_destroy(&r->inputs[i]);
    r->batch = 0;
}

/* ---- answers ---- */

static void number(psg_strbuf_t *b, const psg_tensor_t *t, int64_t i) {
    switch (t->dtype) {
    case PSG_DT_F32: {
        float v = psg_tensor_f32(t)[i];
        char text[PSG_FLOAT_TEXT_MAX];
        int n = psg_float_text_g9(v, text); /* "%.9g" without printf's cost */
        if (n > 0)
            psg_strbuf_add(b, text, (size_t)n);
        else if (isfinite(v))
            psg_strbuf_printf(b, "%.9g", (double)v);
        else
            psg_strbuf_str(b, "null");
        return;
    }
    case PSG_DT_I64: psg_strbuf_printf(b, "%lld", (long long)((const int64_t *)t->data)[i]); return;
    case PSG_DT_I32: psg_strbuf_printf(b, "%d", ((const int32_t *)t->data)[i]); return;
    default: psg_strbuf_str(b, "null");
    }
}

/* The nested array of t's dims [d, rank) from element *at. */
static void nested(psg_strbuf_t *b, const psg_tensor_t *t, int d, int64_t *at) {
    if (d == t->shape.rank) {
        number(b, t, (*at)++);
        return;
    }
    psg_strbuf_str(b, "[");
    for (int64_t i = 0; i < t->shape.dims[d]; i++) {
        if (i) psg_strbuf_str(b, ",");
        nested(b, t, d + 1, at);
    }
    psg_strbuf_str(b, "]");
}

static int64_t row_size(const psg_tensor_t *t) {
    int64_t n = 1;
    for (int d = 1; d < t->shape.rank; d++) n *= t->shape.dims[d];
    return n;
}

void psg_rest_format_predict(const psg_rest_signature_t *sig, bool columnar,
                             psg_tensor_t *const *outputs, int64_t row0, int64_t rows,
                             psg_strbuf_t *out) {
    bool named = sig->n_out > 1;
    if (columnar) {
        psg_strbuf_str(out, named ? "{\"outputs\":{" : "{\"outputs\":");
        for (int j = 0; j < sig->n_out; j++) {
            if (named) psg_strbuf_printf(out, "%s\"%s\":", j ? "," : "", sig->out[j].name);
            int64_t at = row0 * row_size(outputs[j]);
            psg_strbuf_str(out, "[");
            for (int64_t r = 0; r < rows; r++) {
                if (r) psg_strbuf_str(out, ",");
                nested(out, outputs[j], 1, &at);
            }
            psg_strbuf_str(out, "]");
        }
        psg_strbuf_str(out, named ? "}}" : "}");
        return;
    }
    psg_strbuf_str(out, "{\"predictions\":[");
    for (int64_t r = 0; r < rows; r++) {
        psg_strbuf_str(out, r ? (named ? ",{" : ",") : (named ? "{" : ""));
        for (int j = 0; j < sig->n_out; j++) {
            if (named) psg_strbuf_printf(out, "%s\"%s\":", j ? "," : "", sig->out[j].name);
            int64_t at = (row0 + r) * row_size(outputs[j]);
            nested(out, outputs[j], 1, &at);
        }
        if (named) psg_strbuf_str(out, "}");
    }
    psg_strbuf_str(out, "]}");
}

void psg_rest_format_status(const int64_t *versions, int n, psg_strbuf_t *out) {
    psg_strbuf_str(out, "{\"model_version_status\":[");
    for (int i = 0; i < n; i++)
        psg_strbuf_printf(
            out,
            "%s{\"version\":\"%lld\",\"state\":\"AVAILABLE\",\"status\":{\"error_code\":\"OK\","
            "\"error_message\":\"\"}}",
            i ? "," : "", (long long)versions[i]);
    psg_strbuf_str(out, "]}");
}

static const char *tf_dtype(psg_dtype_t dt) {
    switch (dt) {
    case PSG_DT_F32: return "DT_FLOAT";
    case PSG_DT_I64: return "DT_INT64";
    case PSG_DT_I32: return "DT_INT32";
    default: return "DT_INVALID";
    }
}

static void tensor_info(psg_strbuf_t *out, const psg_servable_tensor_t *t, int n) {
    for (int i = 0; i < n; i++) {
        psg_strbuf_printf(out, "%s\"%s\":{\"dtype\":\"%s\",\"tensor_shape\":{\"dim\":[",
                          i ? "," : "", t[i].name, tf_dtype(t[i].dtype));
        for (int d = 0; d < t[i].shape.rank; d++)
            psg_strbuf_printf(out, "%s{\"size\":\"%lld\",\"name\":\"\"}", d ? "," : "",
                              (long long)t[i].shape.dims[d]);
        psg_strbuf_printf(out, "],\"unknown_rank\":false},\"name\":\"%s:0\"}", t[i].name);
    }
}

void psg_rest_format_metadata(const char *name, int64_t version, const psg_rest_signature_t *sig,
                              psg_strbuf_t *out) {
    psg_strbuf_str(out, "{\"model_spec\":{\"name\":");
    psg_strbuf_json_str(out, name);
    psg_strbuf_printf(
        out,
        ",\"signature_name\":\"\",\"version\":\"%lld\"},\"metadata\":{\"signature_def\":"
        "{\"signature_def\":{\"serving_default\":{\"inputs\":{",
        (long long)version);
    tensor_info(out, sig->in, sig->n_in);
    psg_strbuf_str(out, "},\"outputs\":{");
    tensor_info(out, sig->out, sig->n_out);
    psg_strbuf_str(out, "},\"method_name\":\"tensorflow/serving/predict\"}}}}}");
}

void psg_rest_format_error(const char *msg, psg_strbuf_t *out) {
    psg_strbuf_str(out, "{\"error\":");
    psg_strbuf_json_str(out, msg);
    psg_strbuf_str(out, "}");
}
