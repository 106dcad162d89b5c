/* Internal to psgraph: TensorFlow Serving's REST API as text, with no socket: a request's
 * route (GET /v1/models/NAME[/versions/N][/metadata], POST ...:predict), a predict body
 * ({"instances": ...} row format or {"inputs": ...} columnar, read by core/json.c) into
 * tensors checked against a signature, and the answers ({"predictions": ...},
 * {"outputs": ...}, status, metadata, {"error": ...}). The HTTP server is
 * cli/serve_http.c; tests/fuzz/fuzz_rest.c feeds this file untrusted bytes. */
#ifndef PSGRAPH_SERVING_REST_H
#define PSGRAPH_SERVING_REST_H

#include "core/strbuf.h"
#include "psgraph/servable.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { PSG_REST_STATUS, PSG_REST_METADATA, PSG_REST_PREDICT } psg_rest_kind_t;

typedef struct {
    psg_rest_kind_t kind;
    char model[128];
    int64_t version; /* -1: none named (the newest) */
} psg_rest_route_t;

/* The route of `method` and the URL's path. 0, or the HTTP status to answer (404 for a
 * path of no endpoint, 405 for a wrong method) with the error set. */
int psg_rest_route(const char *method, const char *path, psg_rest_route_t *r);

/* A signature: what a body is checked against. */
typedef struct {
    int n_in, n_out;
    const psg_servable_tensor_t *in, *out; /* n_in, n_out tensors */
} psg_rest_signature_t;

/* The signature of a servable (borrowing its tensors). */
psg_rest_signature_t psg_rest_signature_of(const psg_servable_t *s);

/* A parsed predict request: one tensor per input, all of `batch` rows. */
typedef struct {
    bool columnar; /* "inputs" (answer "outputs"), else "instances" (answer "predictions") */
    int64_t batch;
    int n;
    psg_tensor_t *inputs[PSG_SERVABLE_MAX_IO];
} psg_rest_request_t;

/* Parses a predict body of len bytes (need not be NUL-terminated) into r. -1 with the
 * error naming the field, the expected dtype and shape, and what was found (the server
 * answers 400). r holds nothing on failure; else psg_rest_request_clear it. */
int psg_rest_parse_predict(const psg_rest_signature_t *sig, const char *body, size_t len,
                           psg_rest_request_t *r);
void psg_rest_request_clear(psg_rest_request_t *r);

/* Appends the answer to a predict of r's format: rows [row0, row0 + rows) of each output
 * tensor outputs[j] (of sig's outputs). */
void psg_rest_format_predict(const psg_rest_signature_t *sig, bool columnar,
                             psg_tensor_t *const *outputs, int64_t row0, int64_t rows,
                             psg_strbuf_t *out);
/* GET /v1/models/NAME: the versions (n of them, newest first), each AVAILABLE. */
void psg_rest_format_status(const int64_t *versions, int n, psg_strbuf_t *out);
/* GET /v1/models/NAME/metadata: the signature "serving_default" of `version`. */
void psg_rest_format_metadata(const char *name, int64_t version, const psg_rest_signature_t *sig,
                              psg_strbuf_t *out);
/* {"error": "msg"} */
void psg_rest_format_error(const char *msg, psg_strbuf_t *out);

#endif
