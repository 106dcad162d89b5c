/* A servable's batch cut over lanes (serving/servable_lanes.h): L single-threaded plans of
 * the same inference graph and values, lane 0 on the caller's thread and lanes 1..L-1 on
 * threads of their own, each running its share of the batch's rows from start to end.
 * Why, against one plan with L intra-op threads: the cnn's plan splits ~13 kernels a batch
 * over its pool, a wake-up and a join each (futex, scheduler), where lanes hand off twice
 * a batch (the lane's go and its done); every row is computed by the same kernels on the
 * same values either way (a model's inference is row by row: batch norm on its moving
 * statistics), so the answers are the same. */
#include "serving/servable_lanes.h"

#include "psgraph/error.h"
#include "psgraph/session.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IO PSG_SERVABLE_MAX_IO

typedef struct {
    psg_servable_lanes_t *ls;
    psg_session_t *session; /* one thread: no pool */
    psg_callable_t *callable;
    pthread_t thread; /* lanes 1..L-1 */
    bool started;
    sem_t go, done;
    psg_tensor_t *in[MAX_IO], *out[MAX_IO];
    int rc;
    psg_err_code_t code;
    char error[1024];
} lane_t;

struct psg_servable_lanes {
    int n, n_in, n_out;
    bool stopping;
    lane_t *lane;
};

static void lane_run(lane_t *l) {
    for (int j = 0; j < MAX_IO; j++) l->out[j] = NULL;
    l->rc = psg_callable_run(l->callable, l->in, l->out);
    if (l->rc < 0) {
        l->code = psg_error_code();
        snprintf(l->error, sizeof l->error, "%s", psg_error_message());
    }
}

static void *lane_main(void *arg) {
    lane_t *l = arg;
    for (;;) {
        while (sem_wait(&l->go) != 0) continue; /* EINTR: wait on */
        if (l->ls->stopping) break;
        lane_run(l);
        sem_post(&l->done);
    }
    return NULL;
}

psg_servable_lanes_t *psg_servable_lanes_new(psg_graph_t *g, psg_resource_mgr_t *rm, int lanes,
                                             int n_in, const psg_endpoint_t *feeds, int n_out,
                                             const psg_endpoint_t *fetches) {
    psg_servable_lanes_t *ls = calloc(1, sizeof *ls);
    if (!ls || !(ls->lane = calloc((size_t)lanes, sizeof *ls->lane))) {
        free(ls);
        psg_error_set("out of memory for %d lanes", lanes);
        return NULL;
    }
    ls->n_in = n_in;
    ls->n_out = n_out;
    for (int k = 0; k < lanes; k++) {
        lane_t *l = &ls->lane[k];
        l->ls = ls;
        ls->n = k + 1; /* what destroy undoes */
        sem_init(&l->go, 0, 0);
        sem_init(&l->done, 0, 0);
        if (!(l->session = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, rm)) ||
            !(l->callable =
                  psg_session_make_callable(l->session, n_in, feeds, n_out, fetches, 0, NULL))) {
            psg_error_wrap("lane %d", k);
            psg_servable_lanes_destroy(&ls);
            return NULL;
        }
        if (k > 0) {
            if (pthread_create(&l->thread, NULL, lane_main, l) != 0) {
                psg_error_set("cannot start the thread of lane %d", k);
                psg_servable_lanes_destroy(&ls);
                return NULL;
            }
            l->started = true;
        }
    }
    return ls;
}

void psg_servable_lanes_destroy(psg_servable_lanes_t **lsp) {
    if (!lsp || !*lsp) return;
    psg_servable_lanes_t *ls = *lsp;
    *lsp = NULL;
    ls->stopping = true;
    for (int k = 0; k < ls->n; k++) {
        lane_t *l = &ls->lane[k];
        if (l->started) {
            sem_post(&l->go);
            pthread_join(l->thread, NULL);
        }
        psg_callable_destroy(&l->callable);
        psg_session_destroy(&l->session);
        sem_destroy(&l->go);
        sem_destroy(&l->done);
    }
    free(ls->lane);
    free(ls);
}

int psg_servable_lanes_count(const psg_servable_lanes_t *ls) {
    return ls ? ls->n : 0;
}

/* Rows [r0, r1) of t: a new tensor over t's buffer (no copy). */
static psg_tensor_t *rows_of(psg_tensor_t *t, int64_t r0, int64_t r1) {
    psg_shape_t s = t->shape;
    int64_t rows = s.dims[0];
    s.dims[0] = r1 - r0;
    size_t row_bytes = rows > 0 ? psg_tensor_nbytes(t) / (size_t)rows : 0;
    size_t offset = (size_t)((char *)t->data - (char *)t->buf->data) + (size_t)r0 * row_bytes;
    return psg_tensor_from_buffer(t->dtype, &s, t->buf, offset);
}

/* The lanes' outputs j, joined along dim 0 into a new tensor. */
static psg_tensor_t *join_rows(psg_servable_lanes_t *ls, int parts, int j) {
    psg_tensor_t **outs = malloc((size_t)parts * sizeof *outs);
    if (!outs) {
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    for (int k = 0; k < parts; k++) outs[k] = ls->lane[k].out[j];
    psg_tensor_t *t = psg_tensor_concat_rows(outs, parts);
    free(outs);
    return t;
}

int psg_servable_lanes_run(psg_servable_lanes_t *ls, psg_tensor_t *const *inputs,
                           psg_tensor_t **outputs) {
    int64_t batch = inputs[0]->shape.dims[0];
    int parts = batch < ls->n ? (int)batch : ls->n;
    int rc = 0;
    for (int k = 0; k < parts; k++) {
        lane_t *l = &ls->lane[k];
        int64_t r0 = batch * k / parts, r1 = batch * (k + 1) / parts;
        for (int i = 0; i < ls->n_in; i++)
            if (!(l->in[i] = rows_of(inputs[i], r0, r1))) rc = -1;
    }
    for (int k = 1; rc == 0 && k < parts; k++) sem_post(&ls->lane[k].go);
    if (rc == 0) lane_run(&ls->lane[0]);
    for (int k = 1; rc == 0 && k < parts; k++)
        while (sem_wait(&ls->lane[k].done) != 0) continue;
    for (int k = 0; rc == 0 && k < parts; k++) /* the first lane's error, as one plan's would be */
        if (ls->lane[k].rc < 0) rc = psg_error_set_code(ls->lane[k].code, "%s", ls->lane[k].error);
    for (int j = 0; rc == 0 && j < ls->n_out; j++)
        if (!(outputs[j] = join_rows(ls, parts, j))) rc = -1;
    for (int j = 0; rc < 0 && j < ls->n_out; j++) psg_tensor_destroy(&outputs[j]);
    for (int k = 0; k < parts; k++) {
        for (int i = 0; i < MAX_IO; i++) psg_tensor_destroy(&ls->lane[k].in[i]);
        for (int j = 0; j < MAX_IO; j++) psg_tensor_destroy(&ls->lane[k].out[j]);
    }
    return rc;
}
