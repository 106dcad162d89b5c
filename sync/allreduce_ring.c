/* Ring all-reduce's step over the live workers (docs/sync.md "allreduce"). The chief's
 * membership writes the ring's record on the ps (a generation and the members) each time the
 * live workers change; every worker reads it with each step's gradient. A worker steps in the
 * ring of the generation it last joined: it cuts the gradient into n chunks (n members, in
 * rank order), and for each of the 2 (n - 1) phases puts one into the next member's mailbox
 * and takes one from its own, keyed by (generation, step, phase). A take waits at most
 * PSG_RING_SLICE_MS at a time and reads the record between two: when the generation moved on
 * (a member lost, or one admitted), the worker drops the step and re-forms: the chief shares
 * its variables and optimizer slots on the ps with its next step number, each other member
 * loads them, and all redo the step in the new ring (the same batch). So the members start
 * each generation equal to the chief, bitwise, whatever step each of them had got to. */
#include "sync/allreduce_ring.h"

#include "psgraph/clock.h"
#include "psgraph/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int64_t gen, step; /* the ring's generation this worker steps in, its next step */
    int n, pos, next;  /* the members, this worker's position among them, the next's rank */
    int fresh;         /* steps of this generation whose digest is said still */
    bool fast;         /* the next step runs the whole ring in one call (PSG_SYNC_FAST_STEP) */
    int members[PSG_RING_MAX_WORKERS];
    int64_t m;   /* floats of the gradient */
    float sum[]; /* [m] the chunks as the ring sums them */
} ring_t;

typedef struct {
    int64_t gen, ready_gen, ready_step;
    bool over;
    bool member[PSG_RING_MAX_WORKERS];
} record_t;

enum { RING_STEPPED, RING_CHANGED, RING_OVER };

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The longest a wait for another worker may take, in seconds (the strategy's timeout). */
static double timeout_sec(const psg_sync_worker_t *w) {
    int64_t ms = w->cfg->timeout_ms ? w->cfg->timeout_ms : 60000;
    return ms < 0 ? 1e9 : (double)ms / 1000.0;
}

static int parse_record(const psg_sync_worker_t *w, const psg_tensor_t *rec,
                        const psg_tensor_t *ready, record_t *r) {
    int nw = w->cfg->num_workers;
    if (!rec || rec->dtype != PSG_DT_F32 || psg_tensor_numel(rec) != 1 + nw || !ready ||
        ready->dtype != PSG_DT_F32 || psg_tensor_numel(ready) != 2)
        return psg_error_set("allreduce: the ring's record on the ps is not f32 [%d] and "
                             "f32 [2]",
                             1 + nw);
    const float *f = psg_tensor_f32(rec);
    memset(r, 0, sizeof *r);
    r->over = f[0] < 0;
    r->gen = r->over ? -1 : (int64_t)f[0];
    r->ready_gen = (int64_t)psg_tensor_f32(ready)[0];
    r->ready_step = (int64_t)psg_tensor_f32(ready)[1];
    for (int i = 0; i < nw; i++) r->member[i] = r->gen == 0 || f[1 + i] != 0;
    return 0;
}

static int read_record(psg_sync_worker_t *w, record_t *r) {
    psg_tensor_t *got[2] = {0};
    int rc = w->run(w->ctx, PSG_RING_RECORD, NULL, got);
    if (rc == 0) rc = parse_record(w, got[0], got[1], r);
    for (int i = 0; i < 2; i++) psg_tensor_destroy(&got[i]);
    return rc < 0 ? psg_error_wrap("allreduce: reading the ring's record") : 0;
}

/* RING_CHANGED when the record moved on from rs's generation (or training is over), else 0;
 * -1 when it cannot be read. */
static int moved_on(psg_sync_worker_t *w, const ring_t *rs) {
    record_t r;
    if (read_record(w, &r) < 0) return -1;
    return r.over || r.gen != rs->gen ? RING_CHANGED : 0;
}

static void form(ring_t *rs, const record_t *r, int me, int nw) {
    rs->n = 0;
    for (int i = 0; i < nw; i++)
        if (r->member[i]) {
            if (i == me) rs->pos = rs->n;
            rs->members[rs->n++] = i;
        }
    rs->next = rs->members[(rs->pos + 1) % rs->n];
}

/* This worker into the ring of the record r: the chief shares its variables and says the
 * step the ring goes on from; another member waits for that and loads them. RING_OVER when
 * training ended meanwhile, 0, or -1 (not admitted, or the chief did not share, within the
 * timeout). */
static int reform(psg_sync_worker_t *w, ring_t *rs, record_t r) {
    int me = w->cfg->worker_index, nw = w->cfg->num_workers;
    double limit = timeout_sec(w), deadline = psg_now_sec() + limit;
    for (;;) {
        if (r.over) return RING_OVER;
        if (r.member[me] && me == 0) {
            psg_shape_t two = psg_shape_1d(2);
            psg_tensor_t *ready = psg_tensor_new(PSG_DT_F32, &two);
            if (!ready) return psg_error_set("out of memory");
            psg_tensor_f32(ready)[0] = (float)r.gen; /* exact below 2^24 */
            psg_tensor_f32(ready)[1] = (float)rs->step;
            int rc = w->run(w->ctx, PSG_RING_SHARE, NULL, NULL);
            if (rc == 0) rc = w->run(w->ctx, PSG_RING_READY, &ready, NULL);
            psg_tensor_destroy(&ready);
            if (rc < 0) return psg_error_wrap("allreduce: sharing the chief's variables");
            break;
        }
        if (r.member[me] && r.ready_gen == r.gen) {
            if (w->run(w->ctx, PSG_RING_SHARE, NULL, NULL) < 0)
                return psg_error_wrap("allreduce: loading the chief's variables");
            rs->step = r.ready_step;
            break;
        }
        if (psg_now_sec() > deadline) {
            if (!r.member[me])
                return psg_error_set("allreduce: worker%d is not among the live workers of the "
                                     "ring (generation %lld) after %.0f s: the chief found it "
                                     "lost, or has not admitted it",
                                     me, (long long)r.gen, limit);
            return psg_error_set("allreduce: the chief did not share its variables for the "
                                 "ring of generation %lld within %.0f s",
                                 (long long)r.gen, limit);
        }
        sleep_ms(20);
        if (read_record(w, &r) < 0) return -1;
    }
    rs->gen = r.gen;
    rs->fresh = 2;
    rs->fast = false;
    form(rs, &r, me, nw);
    char who[8 * PSG_RING_MAX_WORKERS] = "";
    for (int i = 0; i < rs->n; i++)
        snprintf(who + strlen(who), sizeof who - strlen(who), "%s%d", i ? ", " : "",
                 rs->members[i]);
    printf("allreduce: worker%d steps in the ring of generation %lld from step %lld: "
           "workers %s\n",
           me, (long long)rs->gen, (long long)rs->step, who);
    fflush(stdout);
    return 0;
}

static int64_t key_of(const ring_t *rs, int phase) {
    return (rs->gen << 40) | (rs->step << 8) | phase;
}

/* len floats at x into the next member's mailbox for phase, once (0), or -1. */
static int put_once(psg_sync_worker_t *w, const ring_t *rs, int phase, const float *x,
                    int64_t len) {
    int me = w->cfg->worker_index;
    psg_shape_t ls = psg_shape_1d(len);
    psg_tensor_t *feeds[2] = {psg_tensor_new(PSG_DT_F32, &ls),
                              psg_tensor_scalar_i64(key_of(rs, phase))};
    int rc = feeds[0] && feeds[1] ? 0 : psg_error_set("out of memory");
    if (rc == 0) {
        memcpy(psg_tensor_f32(feeds[0]), x, sizeof *x * (size_t)len);
        rc = w->run(w->ctx, PSG_RING_PUT0 + (rs->next < me ? rs->next : rs->next - 1), feeds, NULL);
    }
    for (int i = 0; i < 2; i++) psg_tensor_destroy(&feeds[i]);
    return rc;
}

/* The put of phase: 0, RING_CHANGED (it failed and the record moved on: the next member is
 * gone), or -1. A failed put is tried again while the record stays (a slow next member, not
 * a dead one); "a second put" then says the first one landed. */
static int put_chunk(psg_sync_worker_t *w, const ring_t *rs, int phase, const float *x,
                     int64_t len) {
    if (put_once(w, rs, phase, x, len) == 0) return 0;
    char why[1024];
    snprintf(why, sizeof why, "%s", psg_error_message());
    double deadline = psg_now_sec() + timeout_sec(w);
    for (;;) {
        int c = moved_on(w, rs);
        if (c != 0) return c;
        if (psg_now_sec() > deadline)
            return psg_error_set("allreduce: step %lld: the chunk for worker%d: %s",
                                 (long long)rs->step, rs->next, why);
        sleep_ms(50);
        if (put_once(w, rs, phase, x, len) == 0 || strstr(psg_error_message(), "a second put"))
            return 0;
    }
}

/* This worker's chunk of phase (len floats) added to x (add) or into it. 0, RING_CHANGED, or
 * -1 when the previous member sent nothing within the timeout. */
static int take_chunk(psg_sync_worker_t *w, const ring_t *rs, int phase, float *x, int64_t len,
                      bool add) {
    double start = psg_now_sec();
    int prev = rs->members[(rs->pos + rs->n - 1) % rs->n];
    for (;;) {
        psg_tensor_t *key = psg_tensor_scalar_i64(key_of(rs, phase)), *got = NULL;
        if (!key) return psg_error_set("out of memory");
        int rc = w->run(w->ctx, PSG_RING_TAKE, &key, &got);
        psg_tensor_destroy(&key);
        if (rc == 0) {
            if (got->dtype != PSG_DT_F32 || psg_tensor_numel(got) != len) {
                psg_tensor_destroy(&got);
                return psg_error_set("allreduce: step %lld: worker%d's chunk of phase %d is not "
                                     "%lld floats",
                                     (long long)rs->step, prev, phase, (long long)len);
            }
            const float *y = psg_tensor_f32(got);
            for (int64_t i = 0; i < len; i++) x[i] = add ? x[i] + y[i] : y[i];
            psg_tensor_destroy(&got);
            return 0;
        }
        if (!strstr(psg_error_message(), "sent nothing for step")) return -1;
        int c = moved_on(w, rs);
        if (c != 0) return c;
        double waited = psg_now_sec() - start;
        if (waited > timeout_sec(w))
            return psg_error_set("mailbox 'allreduce/ring/w%d': worker%d sent nothing for step "
                                 "%lld (phase %d, ring generation %lld) within %.0f ms (that "
                                 "worker is dead, or slower than the timeout)",
                                 w->cfg->worker_index, prev, (long long)rs->step, phase,
                                 (long long)rs->gen, waited * 1000);
    }
}

/* The ring over rs's members on grad: rs->sum holds the sum over them after it. */
static int exchange(psg_sync_worker_t *w, ring_t *rs, const float *grad) {
    int n = rs->n, p = rs->pos;
    int64_t m = rs->m;
    memcpy(rs->sum, grad, sizeof *grad * (size_t)m);
    if (n == 1) return 0;
    if (m < n)
        return psg_error_set("allreduce: %lld floats cannot be cut into %d chunks", (long long)m,
                             n);
    for (int k = 0; k < 2 * (n - 1); k++) {
        bool scatter = k < n - 1; /* reduce-scatter, then all-gather */
        int j = scatter ? k : k - (n - 1);
        int s = ((p - j + (scatter ? 0 : 1)) % n + n) % n,
            c = ((p - j - (scatter ? 1 : 0)) % n + n) % n;
        int64_t so = m * s / n, sl = m * (s + 1) / n - so, co = m * c / n,
                cl = m * (c + 1) / n - co;
        int rc = put_chunk(w, rs, k, rs->sum + so, sl);
        if (rc == 0) rc = take_chunk(w, rs, k, rs->sum + co, cl, scatter);
        if (rc != 0) return rc;
    }
    return 0;
}

static int apply_mean(psg_sync_worker_t *w, const ring_t *rs) {
    psg_shape_t ms = psg_shape_1d(rs->m);
    psg_tensor_t *mean = psg_tensor_new(PSG_DT_F32, &ms);
    if (!mean) return psg_error_set("out of memory");
    float *f = psg_tensor_f32(mean), scale = (float)(1.0 / rs->n);
    for (int64_t i = 0; i < rs->m; i++) f[i] = rs->sum[i] * scale;
    int rc = w->run(w->ctx, PSG_RING_APPLY, &mean, NULL);
    psg_tensor_destroy(&mean);
    return rc;
}

/* The state on the first step, once the gradient's size is known: generation 0, every
 * worker. */
static ring_t *ring_state(psg_sync_worker_t *w, const psg_tensor_t *grad) {
    if (!grad || grad->dtype != PSG_DT_F32) {
        psg_error_set("allreduce: the step's gradient is not f32");
        return NULL;
    }
    int64_t m = psg_tensor_numel(grad);
    ring_t *rs = w->state;
    if (rs) {
        if (rs->m == m) return rs;
        psg_error_set("allreduce: the gradient has %lld floats, %lld before", (long long)m,
                      (long long)rs->m);
        return NULL;
    }
    if (!(rs = calloc(1, sizeof *rs + sizeof(float) * (size_t)m))) {
        psg_error_set("out of memory");
        return NULL;
    }
    rs->m = m;
    rs->step = w->steps;
    record_t all = {.gen = 0};
    for (int i = 0; i < w->cfg->num_workers; i++) all.member[i] = true;
    form(rs, &all, w->cfg->worker_index, w->cfg->num_workers);
    return w->state = rs;
}

/* The model's digest as the step read it (its sum and sum of squares, exact in hex), on the
 * first two steps of each generation (as it was shared, and after its first step) and every
 * 50th: a user compares the workers' copies with it. */
static int say_digest(psg_sync_worker_t *w, ring_t *rs) {
    if (!(rs->fresh > 0 || rs->step % 50 == 0)) return 0;
    psg_tensor_t *digest = NULL;
    if (w->run(w->ctx, PSG_RING_DIGEST, NULL, &digest) < 0)
        return psg_error_wrap("allreduce: the model's digest");
    if (digest->dtype == PSG_DT_F32 && psg_tensor_numel(digest) == 2) {
        const float *d = psg_tensor_f32(digest);
        printf("allreduce: worker%d at step %lld (generation %lld): model digest %a %a\n",
               w->cfg->worker_index, (long long)rs->step, (long long)rs->gen, (double)d[0],
               (double)d[1]);
        fflush(stdout);
    }
    psg_tensor_destroy(&digest);
    if (rs->fresh > 0) rs->fresh--;
    return 0;
}

/* The one-call ring failed (a member lost, or training ended by another): RING_CHANGED once
 * the record moved on (the calls then re-form the ring and redo the step), -1 when it stays
 * past the timeout from start. */
static int fast_failed(psg_sync_worker_t *w, const ring_t *rs, double start) {
    char why[1024];
    snprintf(why, sizeof why, "%s", psg_error_message());
    for (;;) {
        int c = moved_on(w, rs);
        if (c != 0) return c;
        if (psg_now_sec() - start > timeout_sec(w))
            return psg_error_set("allreduce: step %lld of the ring of generation %lld (all its "
                                 "workers, in one call): %s; the ring's members did not change "
                                 "within %.0f s",
                                 (long long)rs->step, (long long)rs->gen, why, timeout_sec(w));
        sleep_ms(50);
    }
}

/* One try of the step as one call: the gradient and the whole ring (while rs->fast), then the
 * apply; RING_STEPPED, RING_CHANGED (try again by the calls), or -1. */
static int fast_step(psg_sync_worker_t *w, ring_t *rs, psg_tensor_t **loss) {
    double start = psg_now_sec();
    if (say_digest(w, rs) < 0) return -1;
    psg_tensor_t *fetched[2 + 8 + PSG_SYNC_CALL_MAX] = {0},
                                  *key = psg_tensor_scalar_i64(rs->gen << 40 | rs->step);
    if (!key) return psg_error_set("out of memory");
    int rc = w->run(w->ctx, PSG_SYNC_FAST_STEP, &key, fetched);
    psg_tensor_destroy(&key);
    rs->fast = false;
    record_t r;
    if (rc < 0) {
        rc = fast_failed(w, rs, start);
    } else if ((rc = parse_record(w, fetched[2], fetched[3], &r)) == 0) {
        const psg_tensor_t *sum = fetched[4];
        if (!sum || sum->dtype != PSG_DT_F32 || psg_tensor_numel(sum) != rs->m)
            rc = psg_error_set("allreduce: the one-call ring's sum is not f32 [%lld]",
                               (long long)rs->m);
        else
            memcpy(rs->sum, psg_tensor_f32(sum), sizeof *rs->sum * (size_t)rs->m);
        if (rc == 0) rc = apply_mean(w, rs) < 0 ? -1 : RING_STEPPED;
        /* the record as the step read it: a change goes to the calls, which re-form */
        rs->fast = rc == RING_STEPPED && !r.over && r.gen == rs->gen;
    }
    *loss = fetched[0];
    fetched[0] = NULL;
    for (int i = 0; i < 2 + 8 + PSG_SYNC_CALL_MAX; i++) psg_tensor_destroy(&fetched[i]);
    return rc;
}

/* One try of the step: RING_STEPPED (applied), RING_CHANGED (try again), RING_OVER, -1. */
static int try_step(psg_sync_worker_t *w, psg_tensor_t **loss) {
    if (w->state && ((ring_t *)w->state)->fast) return fast_step(w, w->state, loss);
    psg_tensor_t *fetched[1 + 8 + PSG_SYNC_CALL_MAX] = {0};
    int rc = w->run(w->ctx, 0, NULL, fetched);
    ring_t *rs = rc == 0 ? ring_state(w, fetched[1]) : NULL;
    record_t r;
    if (rs && parse_record(w, fetched[2], fetched[3], &r) == 0) {
        int me = w->cfg->worker_index;
        if (r.over)
            rc = RING_OVER;
        else if (r.gen != rs->gen || !r.member[me])
            rc = (rc = reform(w, rs, r)) < 0 ? -1 : rc == RING_OVER ? RING_OVER : RING_CHANGED;
        else {
            if ((rc = say_digest(w, rs)) == 0 &&
                (rc = exchange(w, rs, psg_tensor_f32(fetched[1]))) == 0)
                rc = apply_mean(w, rs) < 0 ? -1 : RING_STEPPED;
            /* a step of this generation done by the calls: the next ones in one call while
             * the members are every worker and the record stays */
            rs->fast =
                rc == RING_STEPPED && rs->n == w->cfg->num_workers && w->sg->fast_step_op >= 0;
        }
    } else {
        rc = -1;
    }
    *loss = fetched[0];
    fetched[0] = NULL;
    for (int i = 0; i < 1 + 8 + PSG_SYNC_CALL_MAX; i++) psg_tensor_destroy(&fetched[i]);
    return rc;
}

int psg_ring_step(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    double t0 = psg_now_sec();
    int rc;
    for (*loss = NULL;; psg_tensor_destroy(loss))
        if ((rc = try_step(w, loss)) != RING_CHANGED) break;
    if (rc < 0) {
        psg_tensor_destroy(loss);
        return -1;
    }
    ring_t *rs = w->state;
    memset(st, 0, sizeof *st);
    st->num_vars = st->num_accepted = w->sg->num_vars;
    st->step_sec = psg_now_sec() - t0;
    st->local_step = rs->step;
    if (rc == RING_OVER) { /* another worker ended training: the chief's copy is the model */
        st->next_step = -1;
        st->staleness = -1;
        if (w->cfg->worker_index == 0 && w->run(w->ctx, PSG_RING_SHARE, NULL, NULL) < 0) {
            psg_tensor_destroy(loss);
            return psg_error_wrap("allreduce: the chief's copy of the model at the end");
        }
        return 0;
    }
    st->used = true;
    st->staleness = 0; /* every gradient is the step's */
    st->next_step = w->local_step = rs->step + 1;
    w->steps = rs->step++; /* the caller counts it: the ring's steps, the chief's */
    return 0;
}
