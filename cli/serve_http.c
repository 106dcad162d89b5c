/* The HTTP side of `psgraph serve`: libmicrohttpd (a thread per connection, keep-alive,
 * TLS through its GnuTLS when a key is given) in front of the model server
 * (serving/model_server.c) and TensorFlow Serving's REST text (serving/rest.c). A body
 * over --max-body is read and dropped, never held; every answer is JSON, errors as
 * {"error": "..."}. Not the options or the process (cli/serve_cmd.c). */
#include "cli/serve_http.h"
#include "psgraph/error.h"
#include "serving/rest.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#if MHD_VERSION < 0x00097002
typedef int mhd_result_t;
#else
typedef enum MHD_Result mhd_result_t;
#endif

struct psg_http {
    struct MHD_Daemon *d;
    psg_http_config_t c;
    char name[128]; /* c.name's copy: the caller's may be a version's, freed at a swap */
    int port;
};

/* One request's state between libmicrohttpd's calls. */
typedef struct {
    psg_strbuf_t body;
    size_t seen; /* bytes of body received, kept or not */
    bool too_big;
} conn_t;

static mhd_result_t answer(struct MHD_Connection *conn, unsigned status, psg_strbuf_t *text) {
    if (text->oom) {
        free(text->s);
        *text = (psg_strbuf_t){0};
        status = 500;
        psg_strbuf_str(text, "{\"error\":\"out of memory\"}");
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(text->len, text->s, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text->s);
        return MHD_NO;
    }
    text->s = NULL;
    MHD_add_response_header(r, "Content-Type", "application/json");
    mhd_result_t rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static mhd_result_t error(struct MHD_Connection *conn, unsigned status, const char *msg) {
    psg_strbuf_t t = {0};
    psg_rest_format_error(msg, &t);
    return answer(conn, status, &t);
}

static mhd_result_t predict(psg_http_t *h, struct MHD_Connection *conn, psg_servable_t *s,
                            conn_t *cc) {
    psg_rest_signature_t sig = psg_rest_signature_of(s);
    psg_rest_request_t req;
    if (psg_rest_parse_predict(&sig, cc->body.s ? cc->body.s : "", cc->body.len, &req) < 0)
        return error(conn, 400, psg_error_message());
    psg_tensor_t *outs[PSG_SERVABLE_MAX_IO] = {0};
    int64_t row0 = 0;
    int rc = psg_model_server_predict(h->c.models, s, req.inputs, req.batch, outs, &row0);
    mhd_result_t r;
    if (rc < 0) {
        r = error(conn, psg_error_code() == PSG_ERR_BAD_REQUEST ? 400 : 500, psg_error_message());
    } else {
        psg_strbuf_t t = {0};
        psg_rest_format_predict(&sig, req.columnar, outs, row0, req.batch, &t);
        r = answer(conn, 200, &t);
    }
    for (int j = 0; j < PSG_SERVABLE_MAX_IO; j++) psg_tensor_destroy(&outs[j]);
    psg_rest_request_clear(&req);
    return r;
}

static mhd_result_t dispatch(psg_http_t *h, struct MHD_Connection *conn, const char *method,
                             const char *url, conn_t *cc) {
    psg_rest_route_t route;
    int status = psg_rest_route(method, url, &route);
    if (status) return error(conn, (unsigned)status, psg_error_message());
    if (strcmp(route.model, h->c.name)) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "Servable not found for request: Latest(%s) (this server serves '%s')",
                 route.model, h->c.name);
        return error(conn, 404, msg);
    }
    if (cc->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body has more than %zu bytes (--max-body)", h->c.max_body);
        return error(conn, 413, msg);
    }
    psg_servable_t *s = psg_model_server_acquire(h->c.models, route.version);
    if (!s) {
        char msg[1024];
        snprintf(msg, sizeof msg, "Servable not found for request: Specific(%s, %lld): %s",
                 route.model, (long long)route.version, psg_error_message());
        return error(conn, 404, msg);
    }
    mhd_result_t r;
    psg_strbuf_t t = {0};
    if (route.kind == PSG_REST_STATUS) {
        int64_t v = psg_servable_step(s);
        psg_rest_format_status(&v, 1, &t);
        r = answer(conn, 200, &t);
    } else if (route.kind == PSG_REST_METADATA) {
        psg_rest_signature_t sig = psg_rest_signature_of(s);
        psg_rest_format_metadata(h->c.name, psg_servable_step(s), &sig, &t);
        r = answer(conn, 200, &t);
    } else {
        r = predict(h, conn, s, cc);
    }
    psg_model_server_release(h->c.models, s);
    return r;
}

static mhd_result_t on_request(void *ctx, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *data,
                               size_t *size, void **state) {
    (void)version;
    psg_http_t *h = ctx;
    conn_t *cc = *state;
    if (!cc) { /* the headers: the body comes in the next calls */
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        *state = cc;
        return MHD_YES;
    }
    if (*size > 0) {
        cc->seen += *size;
        if (cc->seen > h->c.max_body) {
            cc->too_big = true;
            free(cc->body.s);
            cc->body = (psg_strbuf_t){0};
        } else {
            psg_strbuf_add(&cc->body, data, *size);
        }
        *size = 0;
        return MHD_YES;
    }
    return dispatch(h, conn, method, url, cc);
}

static void on_done(void *ctx, struct MHD_Connection *conn, void **state,
                    enum MHD_RequestTerminationCode why) {
    (void)ctx, (void)conn, (void)why;
    conn_t *cc = *state;
    if (!cc) return;
    free(cc->body.s);
    free(cc);
    *state = NULL;
}

psg_http_t *psg_http_start(const psg_http_config_t *c) {
    psg_http_t *h = calloc(1, sizeof *h);
    if (!h) {
        psg_error_set("out of memory");
        return NULL;
    }
    h->c = *c;
    snprintf(h->name, sizeof h->name, "%s", c->name);
    h->c.name = h->name;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    if (inet_pton(AF_INET, c->listen, &addr.sin_addr) != 1) {
        free(h);
        psg_error_set("--listen '%s' is not an IPv4 address", c->listen);
        return NULL;
    }
    /* poll(2), not select(2): no FD_SETSIZE limit on a connection's descriptor */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (c->tls_key) flags |= MHD_USE_TLS;
    h->d = MHD_start_daemon(
        flags, (uint16_t)c->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->idle_timeout, MHD_OPTION_NOTIFY_COMPLETED,
        on_done, h, c->tls_key ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, c->tls_key,
        MHD_OPTION_HTTPS_MEM_CERT, c->tls_cert, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        psg_error_set("cannot listen on %s:%d (in use, or a bad TLS key or certificate)", c->listen,
                      c->port);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : c->port;
    return h;
}

int psg_http_port(const psg_http_t *h) {
    return h->port;
}

void psg_http_stop(psg_http_t **hp) {
    if (!hp || !*hp) return;
    MHD_stop_daemon((*hp)->d);
    free(*hp);
    *hp = NULL;
}
