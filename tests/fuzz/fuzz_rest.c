/* libFuzzer: TensorFlow Serving's REST requests as `psgraph serve` reads them
 * (serving/rest.c over core/json.c): the first line of the input is "METHOD PATH" (the
 * route), the rest a :predict body, checked against a one-input image signature and the
 * two-input wide-and-deep one. What parses is answered (formatted) as the server does. */
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
            psg_rest_request_clear(&req);
        }
    }
    return 0;
}
