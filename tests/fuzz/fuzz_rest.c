/* libFuzzer: TensorFlow Serving's REST requests as `psgraph serve` reads them
 * (serving/rest.c over core/json.c): the first line of the input is "METHOD PATH" (the
 * route), the rest a :predict body, checked against a one-input image signature and the
 * two-input wide-and-deep one. What parses is answered (formatted) as the server does, and
 * read again through the JSON tree: the direct reader of row bodies must agree with it. */
#include "fuzz_util.h"
#include "serving/rest.h"

#include <stdlib.h>
#include <string.h>

static const psg_servable_tensor_t image_in[] = {
    {"images", PSG_DT_F32, {4, {-1, 3, 2, 1}}, {0, 0}}};
static const psg_servable_tensor_t wd_in[] = {{"dense", PSG_DT_F32, {2, {-1, 2}}, {0, 0}},
                                              {"ids", PSG_DT_I64, {2, {-1, 3}}, {0, 0}}};
static const psg_servable_tensor_t outs[] = {{"logits", PSG_DT_F32, {2, {-1, 2}}, {0, 0}},
                                             {"probabilities", PSG_DT_F32, {2, {-1, 2}}, {0, 0}}};

static void answer(const psg_rest_signature_t *sig, const psg_rest_request_t *r) {
    psg_tensor_t *o[2];
    psg_shape_t s = {2, {r->batch, 2}};
    o[0] = psg_tensor_zeros(PSG_DT_F32, &s);
    o[1] = psg_tensor_zeros(PSG_DT_F32, &s);
    if (!o[0] || !o[1]) abort();
    psg_strbuf_t t = {0};
    psg_rest_format_predict(sig, r->columnar, o, 0, r->batch, &t);
    if (!t.oom && (!t.s || t.s[0] != '{')) abort(); /* every answer is a JSON object */
    free(t.s);
    psg_tensor_destroy(&o[0]);
    psg_tensor_destroy(&o[1]);
}

/* The body read again with "signature_name" as its first member, which sends it through
 * the JSON tree rather than the direct reader of {"instances": ...}: the two readers must
 * agree, both refusing or giving the same rows bit for bit. (Not for a body that names a
 * signature itself, or may in escapes: the key would then be there twice.) */
static void same_both_ways(const psg_rest_signature_t *sig, const char *body, size_t len,
                           const psg_rest_request_t *got) {
    static const char key[] = "\"signature_name\":\"serving_default\",";
    if (memchr(body, '\\', len) || memmem(body, len, "signature_name", 14)) return;
    size_t at = 0;
    while (at < len && strchr(" \t\n\r", body[at]) && body[at]) at++;
    if (at == len || body[at] != '{') return;
    char *tree = malloc(len + sizeof key);
    if (!tree) abort();
    memcpy(tree, body, at + 1);
    memcpy(tree + at + 1, key, sizeof key - 1);
    memcpy(tree + at + sizeof key, body + at + 1, len - at - 1);
    psg_rest_request_t other;
    int rc = psg_rest_parse_predict(sig, tree, len + sizeof key - 1, &other);
    free(tree);
    if ((rc == 0) != (got != NULL)) abort();
    if (rc != 0) return;
    for (int i = 0; i < sig->n_in; i++)
        if (other.batch != got->batch || other.columnar != got->columnar ||
            psg_tensor_nbytes(other.inputs[i]) != psg_tensor_nbytes(got->inputs[i]) ||
            memcmp(other.inputs[i]->data, got->inputs[i]->data, psg_tensor_nbytes(got->inputs[i])))
            abort();
    psg_rest_request_clear(&other);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *nl = memchr(data, '\n', size);
    size_t head = nl ? (size_t)(nl - (const char *)data) : size;
    char line[512];
    if (head < sizeof line) {
        memcpy(line, data, head);
        line[head] = 0;
        char *sp = strchr(line, ' ');
        psg_rest_route_t r;
        if (sp) *sp = 0, psg_rest_route(line, sp + 1, &r);
    }
    const char *body = nl ? nl + 1 : (const char *)data + size;
    size_t len = size - (size_t)(body - (const char *)data);
    const psg_rest_signature_t sigs[2] = {{1, 2, image_in, outs}, {2, 2, wd_in, outs}};
    for (int k = 0; k < 2; k++) {
        psg_rest_request_t req;
        if (psg_rest_parse_predict(&sigs[k], body, len, &req) == 0) {
            if (req.batch < 1 || !req.inputs[0] || req.inputs[0]->shape.dims[0] != req.batch)
                abort();
            answer(&sigs[k], &req);
            same_both_ways(&sigs[k], body, len, &req);
            psg_rest_request_clear(&req);
        } else {
            same_both_ways(&sigs[k], body, len, NULL);
        }
    }
    return 0;
}
