/* The HTTP server of `psgraph serve` (cli/serve_http.c): TensorFlow Serving's REST API
 * over libmicrohttpd, answering from a model server. */
#ifndef PSGRAPH_CLI_SERVE_HTTP_H
#define PSGRAPH_CLI_SERVE_HTTP_H

#include "serving/model_server.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct psg_http psg_http_t;

typedef struct {
    psg_model_server_t *models; /* borrowed */
    const char *name;           /* the model's name in the URLs */
    const char *listen;         /* an IPv4 address: 127.0.0.1 unless --listen */
    int port;                   /* 0: a free one (psg_http_port tells it) */
    size_t max_body;            /* bytes a request body may hold */
    int max_connections;
    int idle_timeout;               /* seconds a quiet connection is kept */
    const char *tls_key, *tls_cert; /* PEM text, both or neither (HTTPS) */
} psg_http_config_t;

/* Starts serving (threads of its own). NULL with the error set (the address is taken, a
 * bad key). */
psg_http_t *psg_http_start(const psg_http_config_t *c);
int psg_http_port(const psg_http_t *h);
/* Stops accepting, waits for the connections' threads. NULL-safe. */
void psg_http_stop(psg_http_t **h);

#endif
