/* The overlap model behind `psgraph simulate --trace`: an event simulation of sync steps
 * in which each worker's pulls, compute and pushes overlap as the runtime runs them (pulls
 * asked for at once, the forward waiting per variable, each gradient sent when backprop
 * makes it), over links that are shared queues (round-robin chunks, tc tbf's token bucket).
 * Not a packet simulator: no TCP, no losses; a chunk crosses two links store-and-forward. */
#include "core/rng.h"
#include "examples/simulate_internal.h"
#include "psgraph/simulate.h"

#include "psgraph/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { EV_MSG_START, EV_LINK_DONE, EV_HOP1, EV_DELIVER, EV_WORKER, EV_START, EV_RELEASE };

typedef struct {
    double t;
    long seq; /* ties in insertion order: the same run gives the same answer */
    int type, a;
} event_t;

/* A message: hop 0 is its sender's uplink, hop 1 its receiver's downlink. A chunk reaches
 * hop 1 so that, at hop 1's nominal rate, it would end there when it ends at hop 0 (cut
 * through: a message over two equal links takes one link's time), and it never ends at hop
 * 1 before it did at hop 0. */
typedef struct {
    int src, dst, k, idx; /* nodes; the worker; the pull's or push's index */
    bool push;
    double bytes, hop0_end; /* when the chunk on hop 0 ends there */
    int chunks, sent0, avail1, sent1;
    int next[2];
    bool inq[2], delivered;
    int gstep; /* a push: the global step its gradient is for */
} msg_t;

typedef struct {
    double rate, line; /* bytes per ms: the cap (0: none) and the wire under it */
    double burst, tokens, t_tok;
    bool busy;
    int cur;            /* the message whose chunk is on the wire */
    double turn, quota; /* bytes the peer at the ring's head was sent in its turn; its window */
    int *qh, *qt;       /* per peer node: the first and last message queued */
    int *ring, rh, rn;  /* the peers with something queued, served in turn */
} link_t;

typedef struct {
    int gstep, pos, waiting, pending;
    double t0, off0, f;
    bool done, idle, starting; /* starting: its next start is an event already */
    uint64_t stream;
} worker_t;

/* an entry of a worker's compute: a pull needed, a push ready, the end */
typedef struct {
    double off;
    int kind, idx; /* 0 pull, 1 push, 2 end */
} cev_t;

typedef struct {
    const psg_sim_config_t *c;
    const psg_sim_profile_t *p;
    int m, n, ps, nodes;
    event_t *heap;
    int nheap, capheap;
    long seq;
    msg_t *msg;
    link_t *link;
    worker_t *w;
    cev_t *cev;
    int ncev;
    double *ps_free, mean_draw;
    int *acc, applied, gstep, releases;
    double last_apply, *release_t, compute_sum;
    long compute_n;
    uint64_t link_stream; /* the links' windows */
    bool failed;
} sim_t;

static void push_ev(sim_t *s, double t, int type, int a) {
    if (s->nheap == s->capheap) {
        int cap = s->capheap ? 2 * s->capheap : 1024;
        event_t *h = realloc(s->heap, (size_t)cap * sizeof *h);
        if (!h) {
            s->failed = true;
            return;
        }
        s->heap = h;
        s->capheap = cap;
    }
    event_t e = {t, s->seq++, type, a};
    int i = s->nheap++;
    while (i > 0) {
        int up = (i - 1) / 2;
        event_t *q = &s->heap[up];
        if (q->t < e.t || (q->t == e.t && q->seq < e.seq)) break;
        s->heap[i] = *q;
        i = up;
    }
    s->heap[i] = e;
}

static event_t pop_ev(sim_t *s) {
    event_t top = s->heap[0], last = s->heap[--s->nheap];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const event_t *best = &last;
        if (l < s->nheap &&
            (s->heap[l].t < best->t || (s->heap[l].t == best->t && s->heap[l].seq < best->seq))) {
            m = l;
            best = &s->heap[l];
        }
        if (r < s->nheap &&
            (s->heap[r].t < best->t || (s->heap[r].t == best->t && s->heap[r].seq < best->seq)))
            m = r;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (s->nheap > 0) s->heap[i] = last;
    return top;
}

static int uplink(int node) {
    return 2 * node;
}
static int downlink(int node) {
    return 2 * node + 1;
}

static double chunk_of(const sim_t *s, const msg_t *m, int sent) {
    double c = s->c->chunk_bytes;
    return sent < m->chunks - 1 ? c : m->bytes - c * (m->chunks - 1);
}

/* A TCP flow's window for its next turn: window_bytes, spread evenly over +-50 % (the
 * congestion window moves from turn to turn: ss on the emulated hosts' ps at 1 Gbit/s gave
 * medians of 452-495 KB, 10-90 % of 195-718 KB; docs/hosts.md); 0: a chunk a turn. */
static double window_draw(sim_t *s) {
    double w = s->c->window_bytes;
    return w > 0 ? w * (0.5 + psg_uniform01(&s->link_stream)) : 0;
}

/* The time a chunk of `bytes` takes on l from now: the wire's, or the token bucket's wait. */
static double service_ms(link_t *l, double bytes, double now) {
    double wire = bytes / l->line;
    if (!(l->rate > 0)) return wire;
    l->tokens = fmin(l->burst, l->tokens + (now - l->t_tok) * l->rate);
    double dt = l->tokens >= bytes ? wire : fmax(wire, (bytes - l->tokens) / l->rate);
    l->tokens = fmax(0, fmin(l->burst, l->tokens + dt * l->rate) - bytes);
    l->t_tok = now + dt;
    return dt;
}

static void serve(sim_t *s, int li, double now) {
    link_t *l = &s->link[li];
    if (l->rn == 0) {
        l->busy = false;
        return;
    }
    int peer = l->ring[l->rh], mi = l->qh[peer];
    msg_t *m = &s->msg[mi];
    int hop = li == uplink(m->src) ? 0 : 1;
    double bytes = chunk_of(s, m, hop ? m->sent1 : m->sent0);
    double end = now + service_ms(l, bytes, now);
    if (hop == 0) {
        m->hop0_end = end;
        const link_t *next = &s->link[downlink(m->dst)];
        double at = end - bytes / (next->rate > 0 ? next->rate : next->line);
        push_ev(s, at > now ? at : now, EV_HOP1, mi);
    } else if (m->sent1 == m->sent0) { /* the chunk is still on hop 0 */
        end = fmax(end, m->hop0_end);
    }
    l->busy = true;
    l->cur = mi;
    push_ev(s, end, EV_LINK_DONE, li);
}

static void enqueue(sim_t *s, int li, int peer, int mi, int hop, double now) {
    link_t *l = &s->link[li];
    msg_t *m = &s->msg[mi];
    if (!m->inq[hop]) {
        m->inq[hop] = true;
        m->next[hop] = -1;
        if (l->qh[peer] < 0) {
            l->qh[peer] = mi;
            l->ring[(l->rh + l->rn++) % s->nodes] = peer;
        } else {
            s->msg[l->qt[peer]].next[hop] = mi;
        }
        l->qt[peer] = mi;
    }
    if (!l->busy) serve(s, li, now);
}

static void link_done(sim_t *s, int li, double now) {
    link_t *l = &s->link[li];
    int mi = l->cur, peer = l->ring[l->rh];
    msg_t *m = &s->msg[mi];
    int hop = li == uplink(m->src) ? 0 : 1;
    bool finished;
    if (hop == 0) {
        m->sent0++;
        finished = m->sent0 == m->chunks;
    } else {
        m->avail1--;
        m->sent1++;
        if (m->sent1 == m->chunks) push_ev(s, now + s->c->latency_ms, EV_DELIVER, mi);
        finished = m->avail1 == 0;
    }
    if (finished) { /* m is its peer's head: it leaves the queue */
        m->inq[hop] = false;
        l->qh[peer] = m->next[hop];
        if (l->qh[peer] < 0) l->qt[peer] = -1;
    }
    /* a sender's own link (hop 0) takes a window of each TCP flow at once: the peer keeps
     * its turn for window_bytes; on hop 1 the flows arrive at their links' rates, and
     * interleave chunk by chunk */
    l->turn += chunk_of(s, m, (hop ? m->sent1 : m->sent0) - 1);
    bool turn_over = s->c->link_fifo ? false : hop == 1 || l->turn >= l->quota;
    if (turn_over || l->qh[peer] < 0) { /* fifo: the same peer until its queue is out */
        l->turn = 0;
        l->quota = window_draw(s);
        l->rh = (l->rh + 1) % s->nodes;
        l->rn--;
        if (l->qh[peer] >= 0) l->ring[(l->rh + l->rn++) % s->nodes] = peer;
    }
    serve(s, li, now);
}

static void send_msg(sim_t *s, int mi, double t) {
    msg_t *m = &s->msg[mi];
    m->sent0 = m->avail1 = m->sent1 = 0;
    m->delivered = false;
    push_ev(s, t, EV_MSG_START, mi);
}

static int pull_id(const sim_t *s, int k, int i) {
    return k * s->p->n_pulls + i;
}
static int push_id(const sim_t *s, int k, int j) {
    return s->m * s->p->n_pulls + k * s->p->n_pushes + j;
}

static void worker_start(sim_t *s, int k, double t) {
    worker_t *w = &s->w[k];
    w->gstep = s->gstep;
    w->pos = 0;
    w->waiting = -1;
    w->pending = 0;
    w->done = w->idle = w->starting = false;
    w->t0 = t;
    w->off0 = 0;
    w->f = psg_sim_draw(s->c, &w->stream) / s->mean_draw;
    s->compute_sum += w->f * s->p->compute_ms;
    s->compute_n++;
    for (int i = 0; i < s->p->n_pulls; i++) send_msg(s, pull_id(s, k, i), t + s->c->latency_ms);
    push_ev(s, t, EV_WORKER, k);
}

/* Worker k has sent all it made and its compute is done: it takes the next token. */
static void worker_check(sim_t *s, int k, double now) {
    worker_t *w = &s->w[k];
    if (!w->done || w->pending > 0 || w->idle || w->starting) return;
    if (s->gstep > w->gstep) {
        w->starting = true;
        push_ev(s, now + s->c->latency_ms + s->p->overhead_ms, EV_START, k);
    } else {
        w->idle = true;
    }
}

/* Runs worker k's compute up to `now`: passes each entry due, waits at a pull not in. */
static void worker_run(sim_t *s, int k, double now) {
    worker_t *w = &s->w[k];
    while (w->waiting < 0 && !w->done) {
        const cev_t *e = &s->cev[w->pos];
        double te = w->t0 + (e->off - w->off0) * w->f;
        if (te > now) {
            push_ev(s, te, EV_WORKER, k);
            return;
        }
        w->t0 = te;
        w->off0 = e->off;
        if (e->kind == 0 && !s->msg[pull_id(s, k, e->idx)].delivered) {
            w->waiting = e->idx;
            return;
        }
        w->pos++;
        if (e->kind == 1) {
            int mi = push_id(s, k, e->idx);
            s->msg[mi].gstep = w->gstep;
            w->pending++;
            send_msg(s, mi, te);
        } else if (e->kind == 2) {
            w->done = true;
            worker_check(s, k, te);
        }
    }
}

static void deliver(sim_t *s, int mi, double now) {
    msg_t *m = &s->msg[mi];
    m->delivered = true;
    worker_t *w = &s->w[m->k];
    if (!m->push) {
        if (w->waiting == m->idx) {
            w->waiting = -1;
            w->t0 = now;
            w->pos++;
            worker_run(s, m->k, now);
        }
        return;
    }
    w->pending--;
    int j = m->idx;
    if (m->gstep == s->gstep && s->acc[j] < s->n && ++s->acc[j] == s->n) {
        int ps = s->p->pushes[j].ps % s->ps;
        double start = fmax(now, s->ps_free[ps]);
        s->ps_free[ps] = start + s->p->pushes[j].apply_ms;
        s->last_apply = fmax(s->last_apply, s->ps_free[ps]);
        if (++s->applied == s->p->n_pushes)
            push_ev(s, s->last_apply + s->c->overhead_ms, EV_RELEASE, 0);
    }
    worker_check(s, m->k, now);
}

static void release(sim_t *s, double now) {
    s->gstep++;
    s->release_t[s->releases++] = now;
    memset(s->acc, 0, (size_t)s->p->n_pushes * sizeof *s->acc);
    s->applied = 0;
    s->last_apply = 0;
    for (int k = 0; k < s->m; k++)
        if (s->w[k].idle) {
            s->w[k].idle = false;
            s->w[k].starting = true;
            push_ev(s, now + s->c->latency_ms + s->p->overhead_ms, EV_START, k);
        }
}

static int cmp_cev(const void *a, const void *b) {
    const cev_t *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->kind != y->kind ? x->kind - y->kind : x->idx - y->idx;
}

static int check_profile(const psg_sim_profile_t *p) {
    if (!p || p->n_pulls < 0 || p->n_pushes < 1 || (p->n_pulls && !p->pulls) || !p->pushes)
        return psg_error_set("simulate: the profile has no pushes (a step must send a gradient)");
    if (!(p->compute_ms >= 0) || !(p->overhead_ms >= 0) || !isfinite(p->compute_ms) ||
        !isfinite(p->overhead_ms))
        return psg_error_set("simulate: profile compute %g ms, overhead %g ms (must be >= 0)",
                             p->compute_ms, p->overhead_ms);
    for (int i = 0; i < p->n_pulls + p->n_pushes; i++) {
        const psg_sim_msg_t *q = i < p->n_pulls ? &p->pulls[i] : &p->pushes[i - p->n_pulls];
        if (!(q->bytes >= 0) || !(q->at_ms >= 0) || !(q->apply_ms >= 0) || q->ps < -1 ||
            !isfinite(q->bytes) || !isfinite(q->at_ms) || !isfinite(q->apply_ms))
            return psg_error_set("simulate: profile %s %d: bytes %g, at %g ms, apply %g ms, ps %d "
                                 "(must be >= 0)",
                                 i < p->n_pulls ? "pull" : "push",
                                 i < p->n_pulls ? i : i - p->n_pulls, q->bytes, q->at_ms,
                                 q->apply_ms, q->ps);
    }
    return 0;
}

static void set_link(const sim_t *s, link_t *l, double gbps) {
    double cap = gbps * 1e9 / 8.0 / 1000.0;
    l->line = s->c->line_gbps * 1e9 / 8.0 / 1000.0;
    l->rate = cap < l->line ? cap : 0;
    l->burst = l->rate > 0 ? fmax(s->c->burst_min_bytes, l->rate * s->c->burst_ms) : 0;
    l->tokens = l->burst;
}

static int setup(sim_t *s) {
    const psg_sim_config_t *c = s->c;
    const psg_sim_profile_t *p = s->p;
    int nmsg = s->m * (p->n_pulls + p->n_pushes);
    s->nodes = s->m + s->ps;
    s->msg = calloc((size_t)nmsg, sizeof *s->msg);
    s->link = calloc((size_t)(2 * s->nodes), sizeof *s->link);
    s->w = calloc((size_t)s->m, sizeof *s->w);
    s->cev = calloc((size_t)(p->n_pulls + p->n_pushes + 1), sizeof *s->cev);
    s->ps_free = calloc((size_t)s->ps, sizeof *s->ps_free);
    s->acc = calloc((size_t)p->n_pushes, sizeof *s->acc);
    s->release_t = calloc((size_t)c->steps + 1, sizeof *s->release_t);
    if (!s->msg || !s->link || !s->w || !s->cev || !s->ps_free || !s->acc || !s->release_t)
        return psg_error_set("simulate: out of memory");
    s->link_stream = c->seed * 0x2545f4914f6cdd1dull + 0x9e3779b97f4a7c15ull;
    for (int li = 0; li < 2 * s->nodes; li++) {
        link_t *l = &s->link[li];
        l->qh = malloc((size_t)s->nodes * sizeof *l->qh);
        l->qt = malloc((size_t)s->nodes * sizeof *l->qt);
        l->ring = malloc((size_t)s->nodes * sizeof *l->ring);
        if (!l->qh || !l->qt || !l->ring) return psg_error_set("simulate: out of memory");
        for (int i = 0; i < s->nodes; i++) l->qh[i] = l->qt[i] = -1;
        int node = li / 2;
        bool slow = node == s->m - 1 && c->slow_link_gbps > 0;
        double gbps = node >= s->m ? (c->ps_link_gbps > 0 ? c->ps_link_gbps : c->link_gbps)
                                   : (slow ? c->slow_link_gbps : c->link_gbps);
        set_link(s, l, gbps);
        l->quota = window_draw(s);
    }
    for (int k = 0; k < s->m; k++) {
        s->w[k].stream = c->seed * 0x9e3779b97f4a7c15ull + (uint64_t)k * 0x632be59bd9b4e019ull;
        for (int i = 0; i < p->n_pulls + p->n_pushes; i++) {
            bool push = i >= p->n_pulls;
            int idx = push ? i - p->n_pulls : i;
            const psg_sim_msg_t *q = push ? &p->pushes[idx] : &p->pulls[idx];
            msg_t *m = &s->msg[push ? push_id(s, k, idx) : pull_id(s, k, idx)];
            int ps = s->m + q->ps % s->ps;
            *m = (msg_t){.src = push ? k : ps,
                         .dst = push ? ps : k,
                         .k = k,
                         .idx = idx,
                         .push = push,
                         .bytes = q->bytes,
                         .chunks =
                             q->bytes > c->chunk_bytes ? (int)ceil(q->bytes / c->chunk_bytes) : 1};
        }
    }
    for (int i = 0; i < p->n_pulls + p->n_pushes; i++) {
        bool push = i >= p->n_pulls;
        int idx = push ? i - p->n_pulls : i;
        double at = push ? p->pushes[idx].at_ms : p->pulls[idx].at_ms;
        s->cev[i] = (cev_t){fmin(at, p->compute_ms), push ? 1 : 0, idx};
    }
    s->ncev = p->n_pulls + p->n_pushes + 1;
    s->cev[s->ncev - 1] = (cev_t){p->compute_ms, 2, 0};
    qsort(s->cev, (size_t)s->ncev, sizeof *s->cev, cmp_cev);
    if (c->tail == PSG_SIM_TAIL_SAMPLES) {
        double sum = 0;
        for (int i = 0; i < c->n_samples; i++) sum += c->samples[i];
        s->mean_draw = sum / c->n_samples;
    } else {
        s->mean_draw = c->step_ms;
    }
    return 0;
}

static void teardown(sim_t *s) {
    if (s->link)
        for (int li = 0; li < 2 * s->nodes; li++) {
            free(s->link[li].qh);
            free(s->link[li].qt);
            free(s->link[li].ring);
        }
    free(s->link);
    free(s->msg);
    free(s->w);
    free(s->cev);
    free(s->ps_free);
    free(s->acc);
    free(s->release_t);
    free(s->heap);
}

/* Simulates n + b workers on ps parameter servers: the mean step and compute in ms, the
 * workers' step starts per step (*starts may be NULL). */
static int simulate(const psg_sim_config_t *c, const psg_sim_profile_t *p, int n, int b, int ps,
                    double *step_ms, double *compute_ms, double *starts) {
    sim_t s = {.c = c, .p = p, .m = n + b, .n = n, .ps = ps};
    int rc = setup(&s);
    for (int k = 0; rc == 0 && k < s.m; k++) push_ev(&s, p->overhead_ms, EV_START, k);
    while (rc == 0 && s.nheap > 0 && s.releases < c->steps && !s.failed) {
        event_t e = pop_ev(&s);
        switch (e.type) {
        case EV_MSG_START: {
            msg_t *m = &s.msg[e.a];
            enqueue(&s, uplink(m->src), m->dst, e.a, 0, e.t);
            break;
        }
        case EV_LINK_DONE: link_done(&s, e.a, e.t); break;
        case EV_HOP1: {
            msg_t *m = &s.msg[e.a];
            m->avail1++;
            enqueue(&s, downlink(m->dst), m->src, e.a, 1, e.t);
            break;
        }
        case EV_DELIVER: deliver(&s, e.a, e.t); break;
        case EV_WORKER: worker_run(&s, e.a, e.t); break;
        case EV_START: worker_start(&s, e.a, e.t); break;
        case EV_RELEASE: release(&s, e.t); break;
        }
    }
    if (rc == 0 && s.failed) rc = psg_error_set("simulate: out of memory");
    if (rc == 0 && s.releases < c->steps)
        rc =
            psg_error_set("simulate: the model stalled after %d of %d steps", s.releases, c->steps);
    if (rc == 0) {
        int warm = c->steps / 5 < 10 ? c->steps / 5 : 10;
        double t0 = warm > 0 ? s.release_t[warm - 1] : 0;
        *step_ms = (s.release_t[c->steps - 1] - t0) / (c->steps - warm);
        *compute_ms = s.compute_sum / (double)s.compute_n;
        if (starts) *starts = (double)s.compute_n / c->steps;
    }
    teardown(&s);
    return rc;
}

/* p with each message of ps -1 split into ps equal ones, one per ps (the caller frees
 * out->pulls and out->pushes); -1 on out of memory. */
static int spread(const psg_sim_profile_t *p, int ps, psg_sim_profile_t *out) {
    *out = *p;
    out->pulls = calloc((size_t)(p->n_pulls + 1) * (size_t)ps, sizeof *out->pulls);
    out->pushes = calloc((size_t)p->n_pushes * (size_t)ps, sizeof *out->pushes);
    if (!out->pulls || !out->pushes) {
        free(out->pulls);
        free(out->pushes);
        return psg_error_set("simulate: out of memory");
    }
    out->n_pulls = out->n_pushes = 0;
    for (int i = 0; i < p->n_pulls + p->n_pushes; i++) {
        bool push = i >= p->n_pulls;
        const psg_sim_msg_t *q = push ? &p->pushes[i - p->n_pulls] : &p->pulls[i];
        int parts = q->ps < 0 ? ps : 1;
        for (int k = 0; k < parts; k++) {
            psg_sim_msg_t m = *q;
            if (q->ps < 0) m = (psg_sim_msg_t){q->bytes / ps, q->at_ms, q->apply_ms / ps, k};
            if (push)
                out->pushes[out->n_pushes++] = m;
            else
                out->pulls[out->n_pulls++] = m;
        }
    }
    return 0;
}

/* The mean step and compute of n + b workers on ps parameter servers. */
static int simulate_spread(const psg_sim_config_t *c, const psg_sim_profile_t *p, int n, int b,
                           int ps, double *step_ms, double *compute_ms, double *starts) {
    psg_sim_profile_t q;
    if (spread(p, ps, &q) < 0) return -1;
    int rc = simulate(c, &q, n, b, ps, step_ms, compute_ms, starts);
    free(q.pulls);
    free(q.pushes);
    return rc;
}

int psg_sim_overlap_run(const psg_sim_config_t *c, const psg_sim_profile_t *p, int workers,
                        int backups, psg_sim_result_t *r) {
    if (psg_sim_check(c, workers, backups) < 0 || check_profile(p) < 0) return -1;
    int ps = c->ps > 0 ? c->ps : (workers + backups + 3) / 4;
    memset(r, 0, sizeof *r);
    r->workers = workers;
    r->backups = backups;
    r->ps = ps;
    double one, one_compute;
    int one_ps = c->ps > 0 ? c->ps : 1;
    if (simulate_spread(c, p, workers, backups, ps, &r->step_ms, &r->compute_ms,
                        &r->workers_per_step) < 0 ||
        simulate_spread(c, p, 1, 0, one_ps, &one, &one_compute, NULL) < 0)
        return -1;
    r->transfer_ms = r->step_ms - r->compute_ms;
    double apply = 0;
    for (int j = 0; j < p->n_pushes; j++) apply += p->pushes[j].apply_ms;
    psg_sim_finish(c, r, apply, p->trace_workers, one, one_ps);
    return 0;
}

void psg_sim_profile_serial(const psg_sim_config_t *c, psg_sim_msg_t msgs[2],
                            psg_sim_profile_t *p) {
    msgs[0] = (psg_sim_msg_t){c->bytes_per_step, 0, 0, -1};
    msgs[1] = (psg_sim_msg_t){c->bytes_per_step, c->step_ms, 0, -1};
    *p = (psg_sim_profile_t){.pulls = &msgs[0],
                             .pushes = &msgs[1],
                             .n_pulls = 1,
                             .n_pushes = 1,
                             .compute_ms = c->step_ms};
}

int psg_sim_calibrate(const psg_sim_config_t *c, psg_sim_profile_t *p, const char **note) {
    if (note) *note = NULL;
    if (p->trace_workers < 1 || !(p->trace_step_ms > 0))
        return psg_error_set("simulate: calibration needs a profile from a trace (its workers "
                             "and measured step)");
    psg_sim_config_t u = *c;
    u.link_gbps = u.line_gbps; /* the traced run's links: uncapped */
    u.slow_link_gbps = u.ps_link_gbps = 0;
    u.tail = PSG_SIM_TAIL_NONE;
    p->overhead_ms = 0;
    if (check_profile(p) < 0 || psg_sim_check(&u, p->trace_workers, 0) < 0) return -1;
    int ps = c->ps > 0 ? c->ps : (p->trace_workers + 3) / 4;
    double step, compute;
    if (simulate(&u, p, p->trace_workers, 0, ps, &step, &compute, NULL) < 0) return -1;
    if (step >= p->trace_step_ms) {
        if (note) *note = "the model of the traced run is already as slow as measured: overhead 0";
        return 0;
    }
    /* a worker's overhead is serial with its step: the step grows by it, one for one, when
     * the workers run in lockstep (b = 0), so one correction is exact up to the links' queues;
     * a second one takes those in */
    for (int it = 0; it < 3; it++) {
        p->overhead_ms = fmax(0, p->overhead_ms + p->trace_step_ms - step);
        if (simulate(&u, p, p->trace_workers, 0, ps, &step, &compute, NULL) < 0) return -1;
    }
    return 0;
}

int psg_sim_scale_cpu(psg_sim_config_t *c, psg_sim_profile_t *p, double speed) {
    if (!(speed > 0) || !isfinite(speed))
        return psg_error_set("simulate: CPU speed %g (must be > 0: 1 is the calibration's)", speed);
    double k = 1 / speed;
    c->step_ms *= k;
    c->overhead_ms *= k;
    c->worker_cpu_ms *= k;
    c->ps_cpu_ms *= k;
    if (!p) return 0;
    p->compute_ms *= k;
    p->overhead_ms *= k;
    for (int i = 0; i < p->n_pulls; i++) p->pulls[i].at_ms *= k;
    for (int j = 0; j < p->n_pushes; j++) {
        p->pushes[j].at_ms *= k;
        p->pushes[j].apply_ms *= k;
    }
    return 0;
}
