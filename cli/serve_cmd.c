/* `psgraph serve --model-dir DIR`: a trained model behind TensorFlow Serving's REST API
 * (docs/serving.md) until SIGINT or SIGTERM: the newest checkpoint of DIR served, newer
 * ones picked up while serving, concurrent requests batched. Loopback unless --listen;
 * off loopback only with TLS (--tls-key, --tls-cert) or --insecure, as the task servers'
 * rule. `--k8s` writes it as Kubernetes objects instead (cli/serve_k8s.c). Not HTTP
 * (cli/serve_http.c). */
#include "cli/serve_http.h"
#include "cli/serving_cmds.h"
#include "psgraph/error.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
    "usage: psgraph serve --model-dir DIR [options]\n"
    "  --model-dir DIR       a training log directory: its newest checkpoint is served, a newer one\n"
    "                        replaces it while serving (each checkpoint's step is its version)\n"
    "  --name NAME           the model's name in /v1/models/NAME (default: the model's, e.g. cnn)\n"
    "  --port P              (default 8501, TensorFlow Serving's REST port; 0: a free one)\n"
    "  --listen ADDR         the IPv4 address to listen on (default 127.0.0.1); another than\n"
    "                        loopback needs --tls-key and --tls-cert, or --insecure\n"
    "  --tls-key FILE --tls-cert FILE  HTTPS with this PEM key and certificate\n"
    "  --insecure            allow plain HTTP off loopback\n"
    "  --max-batch N         rows a batch of concurrent requests may hold (default 32)\n"
    "  --batch-timeout-us U  how long a batch waits to fill (default 1000; 0: no wait)\n"
    "  --max-body BYTES      a larger request body is refused with 413 (default 16777216, the most)\n"
    "  --max-connections N   (default 64)\n"
    "  --poll-secs S         how often DIR is looked at for a new checkpoint (default 1)\n"
    "  --k8s [--image IMG --namespace NS --replicas R --model-volume CLAIM --out DIR]\n"
    "                        write a Deployment and a Service for it instead (docs/serving.md)\n" PSG_CLI_SERVABLE_HELP;

#define MAX_BODY_LIMIT ((size_t)16 << 20) /* core/json.c's largest document */

static void log_line(void *ctx, const char *line) {
    (void)ctx;
    fprintf(stderr, "psgraph serve: %s\n", line);
    fflush(stderr);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *s = malloc(65537);
    size_t n = s ? fread(s, 1, 65536, f) : 0;
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

static bool loopback(const char *addr) {
    return !strncmp(addr, "127.", 4);
}

static int number(const char *opt, const char *v, double lo, double hi, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || x < lo || x > hi) {
        fprintf(stderr, "psgraph serve: %s '%s' (%g to %g)\n", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

typedef struct {
    const char *dir, *name, *listen, *tls_key, *tls_cert;
    bool insecure;
    double port, max_batch, timeout_us, max_body, max_conn, poll;
} serve_opts_t;

static int parse(int argc, char **argv, serve_opts_t *s, psg_servable_options_t *o) {
    for (int i = 1; i < argc; i++) {
        int r = psg_cli_servable_option(argc, argv, &i, o);
        if (r < 0) return -1;
        if (r > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--insecure")) {
            s->insecure = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "psgraph serve: %s '%s'\n%s",
                    a[0] == '-' ? "no value for" : "unexpected", a, usage);
            return -1;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--model-dir"))
            s->dir = v;
        else if (!strcmp(a, "--name"))
            s->name = v;
        else if (!strcmp(a, "--listen"))
            s->listen = v;
        else if (!strcmp(a, "--tls-key"))
            s->tls_key = v;
        else if (!strcmp(a, "--tls-cert"))
            s->tls_cert = v;
        else if (!strcmp(a, "--port"))
            rc = number(a, v, 0, 65535, &s->port);
        else if (!strcmp(a, "--max-batch"))
            rc = number(a, v, 1, 65536, &s->max_batch);
        else if (!strcmp(a, "--batch-timeout-us"))
            rc = number(a, v, 0, 1e7, &s->timeout_us);
        else if (!strcmp(a, "--max-body"))
            rc = number(a, v, 1, (double)MAX_BODY_LIMIT, &s->max_body);
        else if (!strcmp(a, "--max-connections"))
            rc = number(a, v, 1, 100000, &s->max_conn);
        else if (!strcmp(a, "--poll-secs"))
            rc = number(a, v, 0.01, 86400, &s->poll);
        else {
            fprintf(stderr, "psgraph serve: unknown option '%s'\n%s", a, usage);
            return -1;
        }
        if (rc < 0) return -1;
    }
    if (!s->dir) {
        fprintf(stderr, "psgraph serve: --model-dir is required\n%s", usage);
        return -1;
    }
    if (!s->tls_key != !s->tls_cert) {
        fprintf(stderr, "psgraph serve: --tls-key and --tls-cert go together\n");
        return -1;
    }
    if (!loopback(s->listen) && !s->tls_key && !s->insecure) {
        fprintf(
            stderr,
            "psgraph serve: refusing plain HTTP on %s, off loopback: give --tls-key and --tls-cert, "
            "or --insecure\n",
            s->listen);
        return -1;
    }
    return 0;
}

static int serve(serve_opts_t *s, const psg_servable_options_t *o) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL); /* before any thread starts: they inherit it */
    char *key = s->tls_key ? read_text(s->tls_key) : NULL,
         *cert = s->tls_cert ? read_text(s->tls_cert) : NULL;
    if (s->tls_key && (!key || !cert)) {
        fprintf(stderr, "psgraph serve: cannot read %s\n", !key ? s->tls_key : s->tls_cert);
        free(key);
        free(cert);
        return 1;
    }
    psg_model_server_config_t mc = {.dir = s->dir,
                                    .load = *o,
                                    .max_batch = (int)s->max_batch,
                                    .batch_timeout_us = (int64_t)s->timeout_us,
                                    .poll_secs = s->poll,
                                    .log = log_line};
    psg_model_server_t *ms = psg_model_server_new(&mc);
    psg_http_t *h = NULL;
    psg_servable_t *first = ms ? psg_model_server_acquire(ms, -1) : NULL;
    if (first) {
        const char *name = s->name ? s->name : psg_servable_model(first);
        psg_http_config_t hc = {.models = ms,
                                .name = name,
                                .listen = s->listen,
                                .port = (int)s->port,
                                .max_body = (size_t)s->max_body,
                                .max_connections = (int)s->max_conn,
                                .idle_timeout = 60,
                                .tls_key = key,
                                .tls_cert = cert};
        if ((h = psg_http_start(&hc)))
            printf(
                "{\"event\":\"serving\",\"model\":\"%s\",\"name\":\"%s\",\"version\":%lld,\"checkpoint\":\"%s\","
                "\"url\":\"%s://%s:%d/v1/models/%s\",\"max_batch\":%d,\"batch_timeout_us\":%lld}\n",
                psg_servable_model(first), name, (long long)psg_servable_step(first),
                psg_servable_checkpoint(first), key ? "https" : "http", s->listen, psg_http_port(h),
                name, (int)s->max_batch, (long long)s->timeout_us);
        fflush(stdout);
        psg_model_server_release(ms, first);
    }
    int rc = 0;
    if (!h) {
        fprintf(stderr, "psgraph serve: %s\n", psg_error_message());
        rc = 1;
    } else {
        int sig = 0;
        sigwait(&stop, &sig);
        fprintf(stderr, "psgraph serve: stopping (signal %d)\n", sig);
    }
    psg_http_stop(&h);
    psg_model_server_destroy(&ms);
    free(key);
    free(cert);
    return rc;
}

int psg_cmd_serve(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--k8s")) return psg_serve_k8s(argc, argv);
    }
    serve_opts_t s = {.listen = "127.0.0.1",
                      .port = 8501,
                      .max_batch = 32,
                      .timeout_us = 1000,
                      .max_body = (double)MAX_BODY_LIMIT,
                      .max_conn = 64,
                      .poll = 1};
    psg_servable_options_t o = {.spin_us = PSG_CLI_SPIN_US_DEFAULT};
    if (parse(argc, argv, &s, &o) < 0) return 2;
    return serve(&s, &o);
}
