/* Internal to psgraph: the model side of `psgraph serve`: the versions of one model (a
 * training log directory's checkpoints, the newest served, a new one loaded while the
 * old answers and swapped in between two batches, so no request fails for it) and
 * TensorFlow Serving's batching (concurrent requests run as one batch of at most
 * max_batch rows, waiting at most batch_timeout_us for it to fill). Not HTTP
 * (cli/serve_http.c) and not JSON (serving/rest.c). */
#ifndef PSGRAPH_SERVING_MODEL_SERVER_H
#define PSGRAPH_SERVING_MODEL_SERVER_H

#include "psgraph/servable.h"

#include <stdint.h>

typedef struct psg_model_server psg_model_server_t;

typedef struct {
    const char *dir;             /* the log directory whose checkpoints are the versions */
    psg_servable_options_t load; /* how each version is loaded */
    int max_batch;               /* rows a batch may hold (a bigger request runs alone); <= 0: 32 */
    int64_t batch_timeout_us;    /* how long a batch waits to fill; < 0: 1000 */
    double poll_secs;            /* how often dir is looked at for a new checkpoint; <= 0: 1 */
    /* a line to log (a version loaded, one that failed to load), or NULL */
    void (*log)(void *ctx, const char *line);
    void *log_ctx;
} psg_model_server_config_t;

/* Loads the newest checkpoint of c->dir that verifies and starts the batcher and the
 * watcher of dir. NULL with the error set (no checkpoint, one that does not load). */
psg_model_server_t *psg_model_server_new(const psg_model_server_config_t *c);
/* Stops the threads; waits for the requests under way. NULL-safe. */
void psg_model_server_destroy(psg_model_server_t **ms);

/* A reference to version `version` (-1: the newest), or NULL with the error set ("no
 * version N of the model; it serves M"). Give it back with psg_model_server_release. */
psg_servable_t *psg_model_server_acquire(psg_model_server_t *ms, int64_t version);
void psg_model_server_release(psg_model_server_t *ms, psg_servable_t *s);

/* The versions served, newest first, into v (at most max); their number. */
int psg_model_server_versions(psg_model_server_t *ms, int64_t *v, int max);

/* Runs inputs (s's signature, `batch` rows) in a batch with other requests for s, and
 * sets outputs[j] to a new reference to the batch's output j and *row0 to this request's
 * first row in it (its rows are [*row0, *row0 + batch)). 0, or -1 with the error set. */
int psg_model_server_predict(psg_model_server_t *ms, psg_servable_t *s, psg_tensor_t *const *inputs,
                             int64_t batch, psg_tensor_t **outputs, int64_t *row0);

/* What the batcher did so far: requests answered, batches run, rows run. */
typedef struct {
    int64_t requests, batches, rows;
} psg_model_server_stats_t;
void psg_model_server_stats(psg_model_server_t *ms, psg_model_server_stats_t *st);

#endif
