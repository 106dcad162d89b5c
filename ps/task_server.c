/* The task server's dispatch: the ROUTER thread that decodes every request through the
 * protocol table (ps/protocol.c) and calls its handler, the runner threads that run
 * registered partitions (so the server keeps answering while a step waits), the per-peer
 * limits, and the server's life. The registered graphs are in task_graphs.c, the admin
 * requests in task_admin.c; the wire (net/) checks every frame before this file sees it. */
#include "ps/replicate.h"
#include "ps/task_server_internal.h"

#include "core/membudget.h"
#include "ops/state/sync_resources.h"
#include "ops/state/timer.h"
#include "psgraph/checkpoint.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"
#include "psgraph/op.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOOP_MS 50
/* How often the peers' connections are looked at (psg_ts_peers_sweep). */
#define SWEEP_MS 250
/* "No peer" for the ownership checks: a requester that holds nothing here owns no graph
 * (NULL would be the in-process owner). */
static const peer_t peer_none;
#define PEER_NONE (&peer_none)

/* ---- replies ---- */

void psg_ts_reply_error(psg_task_server_t *ts, const psg_msg_t *req, psg_err_code_t code,
                        const char *fmt, ...) {
    char why[PSG_WIRE_MAX_ERROR];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    /* the job's end, not a crash: what a request waited for will never come (a joiner that
     * came late stops on it, without a recovery) */
    if (atomic_load(&ts->job_done) &&
        (code == PSG_ERR_ABORTED || code == PSG_ERR_STOPPING || code == PSG_ERR_CLOSED)) {
        code = PSG_ERR_JOB_DONE; /* its reason is all there is to say ("job done: ...") */
        snprintf(why, sizeof why, "%s", ts->stop_reason);
    }
    /* the message already names this task when it comes from a task_server function */
    size_t n = strlen(ts->task);
    bool named = !strncmp(why, "task ", 5) && !strncmp(why + 5, ts->task, n);
    psg_server_reply_error_code(ts->server, req, code, "%s%s%s%s", named ? "" : "task ",
                                named ? "" : ts->task, named ? "" : ": ", why);
}

void psg_ts_reply_last_error(psg_task_server_t *ts, const psg_msg_t *req) {
    psg_ts_reply_error(ts, req, psg_error_code(), "%s", psg_error_message());
}

void psg_ts_reply_ok(psg_task_server_t *ts, const psg_msg_t *req, psg_msg_t **rep) {
    psg_msg_t *r = rep ? *rep : psg_msg_new(PSG_MSG_REPLY, req->op);
    if (rep) *rep = NULL;
    if (!r) {
        psg_ts_reply_error(ts, req, PSG_ERR_NO_MEMORY, "out of memory");
        return;
    }
    psg_server_reply(ts->server, req, &r);
}

bool psg_ts_request_stop(psg_task_server_t *ts, const char *fmt, ...) {
    pthread_mutex_lock(&ts->lock);
    bool first = !ts->stop_requested;
    if (first) {
        ts->stop_requested = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ts->stop_reason, sizeof ts->stop_reason, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&ts->lock);
    return first;
}

/* The bytes a request holds while it waits: its tensors and body. */
static size_t msg_bytes(const psg_msg_t *m) {
    size_t n = m->body ? m->body->size : 0;
    for (int i = 0; i < m->ntensors; i++) n += psg_tensor_nbytes(m->tensors[i]);
    return n;
}

/* ---- graphs ---- */

/* Queues a RegisterGraph for the runners (register_job), its peer's pending slot taken for
 * its bytes: a graph is built off the server thread, so another peer's requests never wait
 * behind it, and a peer's registrations take at most its share of the runners
 * (--max-running) and of the requests that wait (--max-pending). */
void psg_ts_on_register(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_msg_t *req = *reqp;
    job_t *j = calloc(1, sizeof *j);
    if (!j) {
        psg_ts_reply_error(ts, req, PSG_ERR_NO_MEMORY, "out of memory");
        return;
    }
    j->ts = ts;
    j->req = req;
    j->registers = true;
    j->reg = r->u.reg; /* the job's now: a runner may take it as soon as it is queued */
    r->u.reg.feeds = r->u.reg.fetches = NULL;
    r->u.reg.targets = NULL;
    j->bytes = msg_bytes(req);
    pthread_mutex_lock(&ts->lock);
    int rc = psg_ts_take_pending_locked(ts, req, j->bytes, true, false, &j->peer);
    if (rc == 0) psg_ts_queue_locked(ts, j, false);
    pthread_mutex_unlock(&ts->lock);
    if (rc < 0) {
        psg_ts_reply_last_error(ts, req);
        r->u.reg = j->reg; /* handle() clears it */
        free(j);
        return;
    }
    *reqp = NULL;
}

void psg_ts_on_deregister(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    pthread_mutex_lock(&ts->lock);
    const peer_t *peer = psg_ts_peer_find_locked(ts, *reqp); /* one that holds no graph owns none */
    pthread_mutex_unlock(&ts->lock);
    if (psg_ts_graph_deregister(ts, peer ? peer : PEER_NONE, r->u.handle) < 0)
        psg_ts_reply_last_error(ts, *reqp);
    else
        psg_ts_reply_ok(ts, *reqp, NULL);
}

/* Runners and builders wait for jobs on a stack, and a queued job wakes the thread that
 * went idle last (a condition variable wakes the one that waited longest): the jobs go to
 * as few threads as they keep busy, not round the whole pool, so the others' stacks,
 * allocator caches and malloc arenas stay cold (under AddressSanitizer each thread that
 * frees also holds its own 1 MB quarantine). All of them run when the jobs need them. */
static void wake_idle_locked(idle_thread_t **stack) {
    idle_thread_t *t = *stack;
    if (!t) return;
    *stack = t->next;
    t->woken = true;
    pthread_cond_signal(&t->wake);
}

static void wake_all_idle_locked(idle_thread_t **stack) {
    while (*stack) wake_idle_locked(stack);
}

/* Under lock: on the stack until a wake takes this thread off it. */
static void wait_idle_locked(psg_task_server_t *ts, idle_thread_t **stack, idle_thread_t *self) {
    self->woken = false;
    self->next = *stack;
    *stack = self;
    while (!self->woken) pthread_cond_wait(&self->wake, &ts->lock);
}

void psg_ts_queue_locked(psg_task_server_t *ts, job_t *j, bool cont) {
    job_t **head = cont ? &ts->cq_head : &ts->jq_head, **tail = cont ? &ts->cq_tail : &ts->jq_tail;
    j->next = NULL;
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
    if (!cont) ts->jq_len++;
    wake_idle_locked(j->registers ? &ts->idle_builders : &ts->idle_runners);
}

/* The run of j has nodes to run again, or is over: to the runners (any thread). */
static void job_wake(void *ctx) {
    job_t *j = ctx;
    pthread_mutex_lock(&j->ts->lock);
    psg_ts_queue_locked(j->ts, j, true);
    pthread_mutex_unlock(&j->ts->lock);
}

/* Gives back what j holds (its ticket, its pending slot, its graph, its request) and frees
 * it. */
static void job_free(psg_task_server_t *ts, job_t *j) {
    psg_run_ticket_release(&j->ticket);
    if (j->peer) psg_ts_put_pending(ts, j->peer, j->bytes, false);
    psg_ts_graph_put(ts, &j->rg);
    free(j->recv_keys);
    if (j->registers) {
        psg_req_t r = {.type = PSG_REQ_REGISTER_GRAPH, .u.reg = j->reg};
        psg_req_clear(&r);
    }
    psg_msg_destroy(&j->req);
    free(j);
}

/* The reply of j's run: its fetches, then for a RunGraphRecv the tensors it sent to the
 * requester, taken out of the rendezvous (the run's Sends are done: each is there, unless a
 * Recv of another peer took it). NULL with the error set. */
static psg_msg_t *run_reply(psg_task_server_t *ts, job_t *j, psg_tensor_t **fetched) {
    int nf = j->rg->n_fetches, n = nf + j->n_recv_keys;
    if (!j->n_recv_keys) {
        psg_rep_t rep = {.type = PSG_REQ_RUN_GRAPH, .u.fetched = {nf, fetched, NULL}};
        return psg_rep_encode(PSG_REQ_RUN_GRAPH, &rep);
    }
    psg_tensor_t **t = calloc((size_t)n, sizeof *t);
    char **names = calloc((size_t)n, sizeof *names);
    psg_msg_t *m = NULL;
    int rc = t && names ? 0 : psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < nf && rc == 0; i++) t[i] = fetched[i];
    for (int k = 0; k < j->n_recv_keys && rc == 0; k++) {
        names[nf + k] = j->recv_keys[k];
        rc = psg_rendezvous_recv(ts->rv, j->req->step, j->recv_keys[k], 1, &t[nf + k]);
    }
    if (rc == 0) {
        psg_rep_t rep = {.type = PSG_REQ_RUN_GRAPH_RECV, .u.fetched = {n, t, names}};
        m = psg_rep_encode(PSG_REQ_RUN_GRAPH_RECV, &rep);
    }
    for (int k = 0; t && k < j->n_recv_keys; k++) psg_tensor_destroy(&t[nf + k]);
    free(t);
    free(names);
    return m;
}

/* Replies to j (its fetches, or the error set when rc < 0) and frees it. */
static void job_end(psg_task_server_t *ts, job_t *j, int rc, psg_tensor_t **fetched) {
    psg_msg_t *req = j->req;
    reg_graph_t *rg = j->rg;
    /* the peer's slot is free before it reads the reply: its next request may take it (a
     * runner preempted between the two held a peer at --max-pending out) */
    if (j->peer) psg_ts_put_pending(ts, j->peer, j->bytes, false);
    j->peer = NULL;
    if (rc < 0) {
        psg_ts_repl_abort(ts, rg->written, &j->undo);
        /* a feed that does not fit, a node of the peer's graph that fails on its input:
         * the request's fault unless the error says otherwise */
        if (psg_error_code() == PSG_ERR_UNKNOWN) psg_error_set_code_only(PSG_ERR_BAD_REQUEST);
        psg_ts_reply_last_error(ts, req);
    } else {
        /* chain replication: the step is acknowledged once the backup holds its writes */
        psg_ts_replicate(ts, rg->written, rg->n_written, &j->undo);
        psg_msg_t *m = run_reply(ts, j, fetched);
        if (m) {
            m->step = req->step;
            psg_ts_reply_ok(ts, req, &m);
        } else {
            psg_ts_reply_last_error(ts, req);
        }
    }
    psg_run_ticket_release(&j->ticket);
    if (j->holds_graph) psg_ts_graph_release(ts, rg);
    job_free(ts, j);
}

/* A RegisterGraph on a runner: the graph built and registered to its peer, the reply. */
static void register_job(psg_task_server_t *ts, job_t *j) {
    pthread_mutex_lock(&ts->lock);
    bool stopping = ts->draining;
    pthread_mutex_unlock(&ts->lock);
    psg_rep_t rep = {.type = PSG_REQ_REGISTER_GRAPH};
    psg_msg_t *m = NULL;
    if (stopping)
        psg_error_set_code(PSG_ERR_STOPPING, "the server is stopping");
    else if (psg_ts_graph_register(ts, j->peer, &j->reg, &rep.u.handle) == 0 &&
             !(m = psg_rep_encode(PSG_REQ_REGISTER_GRAPH, &rep)))
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    /* the peer's slot is free before it reads the reply (as in job_end) */
    if (j->peer) psg_ts_put_pending(ts, j->peer, j->bytes, false);
    j->peer = NULL;
    if (m)
        psg_ts_reply_ok(ts, j->req, &m);
    else
        psg_ts_reply_last_error(ts, j->req);
    job_free(ts, j);
}

/* Starts j's run; -1 with the error set (the step aborted) when it cannot. */
static int job_start(psg_task_server_t *ts, job_t *j) {
    psg_run_env_t env;
    if (psg_ts_graph_step_start(ts, j->rg, j->req->step, &env) < 0) return -1;
    env.ticket = j->ticket;
    env.budget = ts->budget; /* a peer's step: what it allocates is the task's memory */
    if (!(j->run = psg_run_start(j->rg->plan, &env, j->req->tensors, job_wake, j))) {
        psg_rendezvous_abort_step(ts->rv, j->req->step, psg_error_message());
        return psg_error_wrap("task %s", ts->task);
    }
    pthread_mutex_lock(&ts->lock);
    ts->live_runs++;
    pthread_mutex_unlock(&ts->lock);
    return 0;
}

/* Runs j on this thread while it has nodes to run: started first (once the graph is its
 * own, for a plan that cannot overlap), ended when its run is over. A run that waits holds
 * no thread: its wake queues j again, and j is not touched here after. */
static void run_job(psg_task_server_t *ts, job_t *j) {
    if (j->registers) {
        register_job(ts, j);
        return;
    }
    if (!j->run) {
        bool stopping;
        pthread_mutex_lock(&ts->lock);
        stopping = ts->draining;
        pthread_mutex_unlock(&ts->lock);
        if (stopping) {
            psg_error_set_code(PSG_ERR_STOPPING, "the server is stopping");
            job_end(ts, j, -1, NULL);
            return;
        }
        if (!j->ticket && !j->holds_graph) {
            if (!psg_ts_graph_acquire(ts, j->rg, j)) return; /* in the graph's line */
            j->holds_graph = true;
        }
        if (psg_ts_repl_begin(ts, j->update, j->req->step, j->rg->written, j->rg->n_written,
                              &j->undo) < 0 ||
            job_start(ts, j) < 0) {
            job_end(ts, j, -1, NULL);
            return;
        }
    }
    if (psg_run_continue(j->run) == 0) return;
    int nf = j->rg->n_fetches;
    psg_tensor_t **fetched = calloc((size_t)nf + 1, sizeof *fetched);
    int64_t step = j->req->step;
    int rc = psg_run_finish(&j->run, fetched);
    if (rc == 0 && !fetched)
        rc = psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory for %d fetches", nf);
    if (rc < 0) {
        psg_rendezvous_abort_step(ts->rv, step, psg_error_message());
        psg_error_wrap("task %s", ts->task);
    }
    job_end(ts, j, rc, fetched);
    for (int i = 0; fetched && i < nf; i++) psg_tensor_destroy(&fetched[i]);
    free(fetched);
    pthread_mutex_lock(&ts->lock);
    ts->live_runs--;
    /* only a draining stop waits for the last run: a broadcast at every step woke the
     * thread in psg_task_server_wait (the ps process's main thread) for nothing, a futex
     * wake and a context switch a step */
    if (ts->draining) pthread_cond_broadcast(&ts->cond);
    pthread_mutex_unlock(&ts->lock);
}

void psg_ts_on_run(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_msg_t *req = *reqp;
    reg_graph_t *rg = psg_ts_graph_get(ts, r->u.run.handle);
    if (!rg) {
        psg_ts_reply_error(ts, req, PSG_ERR_NOT_FOUND, "unknown graph handle '%s'",
                           req->key ? req->key : "");
        return;
    }
    pthread_mutex_lock(&ts->lock);
    bool own = rg->owner && rg->owner == psg_ts_peer_find_locked(ts, req);
    pthread_mutex_unlock(&ts->lock);
    if (!own) {
        psg_ts_reply_error(ts, req, PSG_ERR_DENIED,
                           "RunGraph: graph %" PRIu64 " was registered by another peer",
                           rg->handle);
        psg_ts_graph_put(ts, &rg);
        return;
    }
    const char *unsent = NULL; /* a RunGraphRecv key this graph does not send */
    for (int k = 0; k < r->u.run.n_recv_keys && !unsent; k++)
        if (!psg_ts_graph_sends(rg, r->u.run.recv_keys[k])) unsent = r->u.run.recv_keys[k];
    if (unsent) {
        psg_ts_reply_error(ts, req, PSG_ERR_BAD_REQUEST,
                           "RunGraphRecv of graph %" PRIu64 ": it sends no '%s'", rg->handle,
                           unsent);
        psg_ts_graph_put(ts, &rg);
        return;
    }
    if (r->u.run.n_feeds != rg->n_feeds) {
        psg_ts_reply_error(ts, req, PSG_ERR_BAD_REQUEST,
                           "RunGraph of graph %" PRIu64 " got %d feeds, it takes %d", rg->handle,
                           r->u.run.n_feeds, rg->n_feeds);
        psg_ts_graph_put(ts, &rg);
        return;
    }
    job_t *j = calloc(1, sizeof *j);
    if (!j || (rg->order && !(j->ticket = psg_run_order_take(rg->order)))) {
        psg_ts_reply_error(ts, req, PSG_ERR_NO_MEMORY, "out of memory");
        psg_ts_graph_put(ts, &rg);
        free(j);
        return;
    }
    j->ts = ts;
    j->req = req;
    j->rg = rg;
    j->recv_keys = r->u.run.recv_keys; /* RunGraphRecv's: the job's now */
    j->n_recv_keys = r->u.run.n_recv_keys;
    r->u.run.recv_keys = NULL;
    r->u.run.n_recv_keys = 0;
    snprintf(j->update, sizeof j->update, "%s", r->u.run.update);
    j->bytes = msg_bytes(req);
    pthread_mutex_lock(&ts->lock);
    /* a graph that cannot wait, and is free: the server thread runs it now */
    bool inline_now = rg->run_inline && !rg->busy && !ts->draining;
    int rc = psg_ts_take_pending_locked(ts, req, j->bytes, !inline_now, false, &j->peer);
    if (rc == 0 && inline_now) rg->busy = j->holds_graph = true;
    if (rc == 0 && !inline_now) psg_ts_queue_locked(ts, j, false);
    pthread_mutex_unlock(&ts->lock);
    if (rc < 0) {
        psg_ts_reply_last_error(ts, req);
        psg_run_ticket_release(&j->ticket);
        psg_ts_graph_put(ts, &j->rg);
        free(j->recv_keys);
        free(j);
        return;
    }
    *reqp = NULL;
    if (inline_now) run_job(ts, j);
}

/* Takes from a queue the first job of the peer whose turn it is: the one the runners served
 * least recently, under its limit of jobs on them (a peer's own jobs keep their order; a
 * peer that queued many, a burst of huge RegisterGraphs, does not hold the others' behind
 * them); a RegisterGraph for a builder (`builds`), a RunGraph for a runner. NULL when there
 * is none. Under lock. */
static job_t *take_job_locked(psg_task_server_t *ts, job_t **head, job_t **tail, bool builds) {
    job_t *j = NULL, *prev = NULL;
    uint64_t turn = UINT64_MAX;
    for (job_t *q = *head, *before = NULL; q && turn > 0; before = q, q = q->next) {
        uint64_t served = q->peer ? q->peer->served : 0;
        if (served >= turn || q->registers != builds ||
            (q->peer && q->peer->running >= ts->lim.max_running_per_peer))
            continue;
        j = q, prev = before, turn = served;
    }
    if (!j) return NULL;
    if (prev)
        prev->next = j->next;
    else
        *head = j->next;
    if (*tail == j) *tail = prev;
    j->next = NULL;
    if (j->peer) j->peer->running++, j->peer->served = ++ts->served;
    return j;
}

/* The next job for a runner: a started one with nodes to run first (it holds memory and
 * maybe a graph), then the oldest not started; for a builder, the next RegisterGraph. Under
 * lock. */
static job_t *next_job_locked(psg_task_server_t *ts, bool builds) {
    job_t *j = builds ? NULL : take_job_locked(ts, &ts->cq_head, &ts->cq_tail, false);
    if (!j && (j = take_job_locked(ts, &ts->jq_head, &ts->jq_tail, builds))) ts->jq_len--;
    return j;
}

static void serve_jobs(psg_task_server_t *ts, bool builds) {
    idle_thread_t self = {.woken = false};
    pthread_cond_init(&self.wake, NULL);
    idle_thread_t **idle = builds ? &ts->idle_builders : &ts->idle_runners;
    bool ran = false;
    pthread_mutex_lock(&ts->lock);
    for (;;) {
        job_t *j = NULL;
        while (!ts->runners_stop && !(j = next_job_locked(ts, builds)))
            wait_idle_locked(ts, idle, &self);
        if (!j) break; /* stopping: stop_runners fails what is queued */
        if (!builds && !ran) ran = true, ts->runners_used++;
        peer_t *peer = j->peer; /* run_job frees j; a running peer is never pruned */
        pthread_mutex_unlock(&ts->lock);
        run_job(ts, j);
        pthread_mutex_lock(&ts->lock);
        /* a job of a peer at its --max-running was passed over: it may run now (every
         * thread woken at every job's end, 8 runners and 2 builders fought for the lock) */
        if (peer && peer->running-- >= ts->lim.max_running_per_peer) {
            wake_all_idle_locked(&ts->idle_runners);
            wake_all_idle_locked(&ts->idle_builders);
        }
    }
    pthread_mutex_unlock(&ts->lock);
    pthread_cond_destroy(&self.wake);
}

static void *runner_main(void *arg) {
    serve_jobs(arg, false);
    return NULL;
}

/* How much lower than the runners' the builders' CPU priority is (nice). */
#define BUILDER_NICE 10

/* A builder: parses, infers and plans the RegisterGraphs, at a lower CPU priority than the
 * server thread and the runners (Linux's nice is a thread's own), so that on a busy machine
 * a peer's huge graphs take the CPU the steps leave. Lowering it needs no privilege; where
 * it fails anyway the builder runs at the runners' priority, as it would elsewhere. */
static void *builder_main(void *arg) {
    id_t self = (id_t)gettid();
    errno = 0;
    int now = getpriority(PRIO_PROCESS, self);
    if (errno == 0 && setpriority(PRIO_PROCESS, self, now + BUILDER_NICE) < 0) errno = 0;
    serve_jobs(arg, true);
    return NULL;
}

/* ---- Recv, steps, shutdown ---- */

void psg_ts_on_abort_step(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    char why[PSG_WIRE_MAX_KEY + 128];
    snprintf(why, sizeof why, "aborted by %s: %s", (*reqp)->peer,
             r->u.reason[0] ? r->u.reason : "no reason given");
    psg_task_server_abort_step(ts, r->step, why);
    psg_ts_reply_ok(ts, *reqp, NULL);
}

void psg_ts_on_cleanup_step(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_task_server_cleanup_step(ts, r->step);
    psg_ts_reply_ok(ts, *reqp, NULL);
}

void psg_ts_on_shutdown(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    (void)r;
    psg_ts_reply_ok(ts, *reqp, NULL);
    psg_ts_request_stop(ts, "shutdown requested by %s", (*reqp)->peer);
}

void psg_task_server_abort_step(psg_task_server_t *ts, int64_t step, const char *why) {
    psg_rendezvous_abort_step(ts->rv, step, why);
}

void psg_task_server_set_node_hook(psg_task_server_t *ts, psg_node_timing_fn fn, void *ctx) {
    pthread_mutex_lock(&ts->lock);
    ts->on_node = fn;
    ts->on_node_ctx = ctx;
    pthread_mutex_unlock(&ts->lock);
}

/* Decodes req through the protocol table and calls its handler. */
static void handle(psg_task_server_t *ts, psg_msg_t **reqp) {
    psg_req_t r;
    if (psg_req_decode(*reqp, &r) < 0) {
        psg_ts_reply_last_error(ts, *reqp);
        return;
    }
    psg_ts_repl_before(ts, &r); /* a backup's forwards taken before r applied first */
    psg_proto_entry(r.type)->handler(ts, reqp, &r);
    psg_req_clear(&r);
}

/* ---- the server thread ---- */

static void stop_runners(psg_task_server_t *ts) {
    pthread_mutex_lock(&ts->lock);
    /* what started ends (its waits fail now: the rendezvous and the sync resources are
     * closed), what did not is refused */
    ts->draining = true;
    wake_all_idle_locked(&ts->idle_runners);
    wake_all_idle_locked(&ts->idle_builders);
    while (ts->live_runs > 0 || ts->cq_head || ts->jq_head) pthread_cond_wait(&ts->cond, &ts->lock);
    ts->runners_stop = true;
    wake_all_idle_locked(&ts->idle_runners);
    wake_all_idle_locked(&ts->idle_builders);
    pthread_mutex_unlock(&ts->lock);
    for (int i = 0; i < ts->n_runners; i++) pthread_join(ts->runners[i], NULL);
    ts->n_runners = 0;
    /* steps queued but never started */
    while (ts->jq_head) {
        job_t *j = ts->jq_head;
        ts->jq_head = j->next;
        psg_ts_reply_error(ts, j->req, PSG_ERR_STOPPING, "the server is stopping");
        job_free(ts, j);
    }
    ts->jq_tail = NULL;
    ts->jq_len = 0;
}

/* Closes every accumulator, token queue, ssp clock and mailbox: a step waiting in one fails at
 * once, told why. */
static void end_sync_waits(psg_task_server_t *ts, const char *why) {
    int na = psg_resource_count(ts->rm, "accumulator"),
        nq = psg_resource_count(ts->rm, "token queue");
    for (int i = 0; i < na; i++) {
        psg_accumulator_t *a = psg_resource_at(ts->rm, "accumulator", i, NULL);
        if (a) psg_accumulator_close(a);
    }
    for (int i = 0; i < nq; i++) {
        psg_token_queue_t *q = psg_resource_at(ts->rm, "token queue", i, NULL);
        if (q) psg_token_queue_close(q, why);
    }
    for (int i = 0, nc = psg_resource_count(ts->rm, "ssp clock"); i < nc; i++) {
        psg_ssp_clock_t *k = psg_resource_at(ts->rm, "ssp clock", i, NULL);
        if (k) psg_ssp_clock_close(k, why);
    }
    for (int i = 0, nm = psg_resource_count(ts->rm, "mailbox"); i < nm; i++) {
        psg_mailbox_t *m = psg_resource_at(ts->rm, "mailbox", i, NULL);
        if (m) psg_mailbox_close(m, why);
    }
}

static void serve(psg_task_server_t *ts) {
    ts->last_request_ms = psg_codec_now_ms();
    int64_t last_sweep = ts->last_request_ms;
    for (;;) {
        psg_msg_t *m = NULL;
        int r = psg_server_recv(ts->server, &m, LOOP_MS);
        if (r < 0) {
            psg_ts_request_stop(ts, "socket failure: %s", psg_error_message());
        } else if (r == 1) {
            ts->last_request_ms = psg_codec_now_ms();
            handle(ts, &m);
            psg_msg_destroy(&m);
        }
        psg_ts_check_waiters(ts, false);
        bool sweep = psg_codec_now_ms() - last_sweep >= SWEEP_MS;
        if (sweep) {
            psg_ts_peers_sweep(ts);
            last_sweep = psg_codec_now_ms();
        }
        if (ts->idle_timeout_ms > 0 &&
            psg_codec_now_ms() - ts->last_request_ms > ts->idle_timeout_ms)
            psg_ts_request_stop(ts, "idle: no request for %" PRId64 " ms", ts->idle_timeout_ms);
        pthread_mutex_lock(&ts->lock);
        bool stop = ts->stop_requested;
        /* with the sweep, not at every request: a walk of every peer (one that holds nothing
         * counts against no limit meanwhile) */
        if (sweep) psg_ts_peers_prune_locked(ts);
        pthread_mutex_unlock(&ts->lock);
        if (stop) break;
    }
}

static void *server_main(void *arg) {
    psg_task_server_t *ts = arg;
    psg_wire_opts_t wo = psg_wire_opts_default();
    wo.max_msg_bytes = (size_t)2 << 30;
    wo.keys = ts->keys;
    wo.insecure = ts->insecure;
    wo.peer_timeout_ms = ts->peer_timeout_ms;
    wo.max_connections = ts->lim.max_connections;
    ts->server = psg_server_new(ts->bind, &wo);
    pthread_mutex_lock(&ts->lock);
    if (!ts->server) {
        snprintf(ts->start_error, sizeof ts->start_error, "task %s: %s", ts->task,
                 psg_error_message());
        ts->stopped = true;
    } else {
        snprintf(ts->endpoint, sizeof ts->endpoint, "%s", psg_server_endpoint(ts->server));
        ts->port = psg_server_port(ts->server);
    }
    ts->ready = true;
    pthread_cond_broadcast(&ts->cond);
    pthread_mutex_unlock(&ts->lock);
    if (!ts->server) return NULL;
    serve(ts);
    /* Fail what waits, end what runs (its takes and dequeues fail now, not at their
     * deadline), and give the replies a moment to leave. */
    psg_ts_check_waiters(ts, true);
    char why[sizeof ts->stop_reason + 64] = "the task server is stopping";
    if (atomic_load(&ts->job_done)) /* the waits' errors say so */
        snprintf(why, sizeof why, "the task server is stopping: %s", ts->stop_reason);
    psg_rendezvous_abort(ts->rv, why);
    end_sync_waits(ts, why);
    stop_runners(ts);
    psg_remote_rv_destroy(&ts->remote);
    int64_t until = psg_codec_now_ms() + 100;
    while (psg_codec_now_ms() < until) {
        psg_msg_t *m = NULL;
        if (psg_server_recv(ts->server, &m, (int)(until - psg_codec_now_ms())) == 1)
            psg_ts_reply_error(ts, m, PSG_ERR_STOPPING, "the server is stopping");
        psg_msg_destroy(&m);
    }
    psg_server_destroy(&ts->server);
    free(ts->wait_init.v);
    free(ts->wait_done.v);
    pthread_mutex_lock(&ts->lock);
    ts->stopped = true;
    pthread_cond_broadcast(&ts->cond);
    pthread_mutex_unlock(&ts->lock);
    return NULL;
}

/* ---- limits and logdirs ---- */

/* Makes each logdir (and its parents) when absent and keeps its real path. */
static int set_logdirs(psg_task_server_t *ts, const char *const *dirs) {
    for (int i = 0; i < PSG_TS_MAX_LOGDIRS && dirs[i]; i++) {
        if (psg_logdir_make(dirs[i]) < 0) return psg_error_wrap("logdir");
        char real[PATH_MAX];
        if (!realpath(dirs[i], real))
            return psg_error_set("logdir '%s': %s", dirs[i], strerror(errno));
        snprintf(ts->logdirs[ts->n_logdirs++], sizeof ts->logdirs[0], "%s", real);
    }
    return 0;
}
/* Where to bind a task's address "host:port": an IP or localhost as given, a host name on
 * every interface (ZeroMQ binds interfaces, not names); "ipc://path" as given. */
static void bind_address(const char *addr, char *out, size_t size) {
    const char *colon = strrchr(addr, ':');
    if (!colon || !strncmp(addr, "ipc://", 6)) {
        snprintf(out, size, "%s", addr);
        return;
    }
    int hl = (int)(colon - addr);
    bool numeric = hl > 0 && strspn(addr, "0123456789.") == (size_t)hl;
    if (!strncmp(addr, "localhost:", 10))
        snprintf(out, size, "tcp://127.0.0.1%s", colon);
    else if (numeric)
        snprintf(out, size, "tcp://%s", addr);
    else
        snprintf(out, size, "tcp://*%s", colon);
}

/* The task's canonical name and where it binds. */
static int set_identity(psg_task_server_t *ts, const psg_task_server_options_t *opt,
                        const char **taskp) {
    const char *task = opt->task_name;
    static _Thread_local char from_cluster[PSG_DEVICE_NAME_MAX]; /* *taskp may point here */
    psg_task_t me = {0};
    if (!task && opt->cluster) {
        me = psg_cluster_task(opt->cluster);
        if (me.job)
            task = psg_device_name(me.job, me.index, NULL, from_cluster, sizeof from_cluster);
    }
    if (!task) task = "/job:localhost/task:0";
    *taskp = task;
    if (psg_device_name_parse(task, &ts->task_dn) < 0) return -1;
    if (!ts->task_dn.has_job || !ts->task_dn.has_task) {
        psg_error_set("task '%s' must name a job and a task", task);
        return -1;
    }
    if (!ts->task_dn.has_replica) {
        ts->task_dn.has_replica = true;
        ts->task_dn.replica = 0;
    }
    ts->task_dn.has_type = ts->task_dn.has_id = false;
    psg_device_name_task_str(&ts->task_dn, ts->task, sizeof ts->task);
    if (opt->endpoint) {
        snprintf(ts->bind, sizeof ts->bind, "%s", opt->endpoint);
    } else if (opt->cluster) {
        const char *addr = psg_cluster_address(opt->cluster, ts->task_dn.job, ts->task_dn.task);
        if (!addr) return -1;
        bind_address(addr, ts->bind, sizeof ts->bind);
    } else {
        snprintf(ts->bind, sizeof ts->bind, "tcp://127.0.0.1:*");
    }
    return 0;
}

psg_task_server_t *psg_task_server_new(const psg_task_server_options_t *opt) {
    psg_task_server_t *ts = calloc(1, sizeof *ts);
    if (!ts) {
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&ts->lock, NULL);
    psg_wire_random(&ts->peer_seed, sizeof ts->peer_seed);
    pthread_cond_init(&ts->cond, NULL);
    pthread_cond_init(&ts->graph_idle, NULL);
    ts->cluster = opt->cluster;
    ts->keys = opt->keys ? opt->keys : psg_cluster_keys(opt->cluster);
    ts->insecure = opt->insecure;
    ts->num_threads = opt->num_threads;
    ts->max_steps = opt->max_steps > 0 ? opt->max_steps : 8;
    ts->recv_timeout_ms = opt->recv_timeout_ms > 0 ? opt->recv_timeout_ms : 60000;
    ts->idle_timeout_ms = opt->idle_timeout_ms;
    ts->peer_timeout_ms =
        opt->peer_timeout_ms ? opt->peer_timeout_ms : psg_cluster_peer_timeout_ms(opt->cluster);
    ts->expect_workers = opt->expect_workers;
    ts->lim = psg_task_limits_resolve(&opt->limits);
    if (ts->lim.max_running_per_peer <= 0)
        ts->lim.max_running_per_peer = ts->max_steps > 1 ? ts->max_steps / 2 : 1;
    const char *task = NULL;
    if (set_identity(ts, opt, &task) < 0) goto fail;
    if (set_logdirs(ts, opt->logdirs) < 0) goto fail;
    ts->rm = psg_resource_mgr_new();
    if (!ts->rm || psg_ts_repl_new(ts, &ts->repl) < 0) goto fail; /* it logs ts->rm's updates */
    ts->rv = psg_rendezvous_new(ts->recv_timeout_ms);
    ts->remote = ts->rv ? psg_remote_rv_new(ts->rv, 2000) : NULL;
    psg_timer_t *timer = ts->rm ? psg_timer_of(ts->rm) : NULL;
    if (!ts->rm || !ts->remote || !timer) goto fail;
    psg_remote_rv_set_keys(ts->remote, ts->keys);
    psg_remote_rv_set_peer_timeout(ts->remote, ts->peer_timeout_ms);
    psg_timer_set_max_wait(timer, ts->lim.max_wait_ms);
    if (!(ts->budget =
              psg_membudget_new(ts->lim.memory_bytes, "the task's memory (--memory-limit)")))
        goto fail;
    if (ts->num_threads > 1 && !(ts->pool = psg_threadpool_new(ts->num_threads))) goto fail;
    /* a quarter as many builders as runners: a peer's graphs take at most their CPU */
    int builders = ts->max_steps >= 4 ? ts->max_steps / 4 : 1;
    ts->runners = calloc((size_t)(ts->max_steps + builders), sizeof *ts->runners);
    if (!ts->runners) {
        psg_error_set("out of memory");
        goto fail;
    }
    for (int i = 0; i < ts->max_steps + builders; i++) {
        if (pthread_create(&ts->runners[i], NULL, i < ts->max_steps ? runner_main : builder_main,
                           ts) != 0) {
            psg_error_set("cannot start a step runner thread");
            goto fail;
        }
        ts->n_runners++;
    }
    if (pthread_create(&ts->thread, NULL, server_main, ts) != 0) {
        psg_error_set("cannot start the server thread");
        goto fail;
    }
    ts->thread_started = true;
    pthread_mutex_lock(&ts->lock);
    while (!ts->ready) pthread_cond_wait(&ts->cond, &ts->lock);
    bool failed = ts->start_error[0] != 0;
    pthread_mutex_unlock(&ts->lock);
    if (failed) {
        psg_error_set("%s", ts->start_error);
        goto fail;
    }
    return ts;
fail:
    if (!ts->thread_started) psg_error_wrap("task server %s", task ? task : "");
    {
        char keep[2048];
        snprintf(keep, sizeof keep, "%s", psg_error_message());
        psg_task_server_destroy(&ts);
        psg_error_set("%s", keep);
    }
    return NULL;
}

void psg_task_server_destroy(psg_task_server_t **tsp) {
    if (!tsp || !*tsp) return;
    psg_task_server_t *ts = *tsp;
    *tsp = NULL;
    if (ts->thread_started) {
        psg_ts_request_stop(ts, "destroyed by its owner");
        pthread_join(ts->thread, NULL);
    }
    if (ts->rv) psg_rendezvous_abort(ts->rv, "the task server is stopping");
    /* without a server thread (a failed start), the runners still need stopping */
    if (ts->n_runners) {
        pthread_mutex_lock(&ts->lock);
        ts->runners_stop = true;
        wake_all_idle_locked(&ts->idle_runners);
        wake_all_idle_locked(&ts->idle_builders);
        pthread_mutex_unlock(&ts->lock);
        for (int i = 0; i < ts->n_runners; i++) pthread_join(ts->runners[i], NULL);
    }
    free(ts->runners);
    psg_ts_repl_destroy(&ts->repl);
    psg_remote_rv_destroy(&ts->remote);
    psg_ts_graphs_free_all(ts);
    while (ts->peers) {
        peer_t *p = ts->peers;
        ts->peers = p->next;
        free(p);
    }
    for (int i = 0; i < ts->n_workers_done; i++) free(ts->workers_done[i]);
    psg_threadpool_destroy(&ts->pool);
    psg_rendezvous_destroy(&ts->rv);
    psg_resource_mgr_destroy(&ts->rm);
    psg_trace_destroy(&ts->trace);
    psg_membudget_unref(&ts->budget);
    pthread_cond_destroy(&ts->cond);
    pthread_cond_destroy(&ts->graph_idle);
    pthread_mutex_destroy(&ts->lock);
    free(ts);
}

int psg_task_server_wait(psg_task_server_t *ts, int64_t timeout_ms) {
    int64_t deadline = timeout_ms < 0 ? -1 : psg_codec_now_ms() + timeout_ms;
    pthread_mutex_lock(&ts->lock);
    while (!ts->stopped) {
        if (deadline >= 0) {
            int64_t left = deadline - psg_codec_now_ms();
            if (left <= 0) break;
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            int64_t ns = t.tv_nsec + (left % 1000) * 1000000;
            t.tv_sec += left / 1000 + ns / 1000000000;
            t.tv_nsec = ns % 1000000000;
            pthread_cond_timedwait(&ts->cond, &ts->lock, &t);
        } else {
            pthread_cond_wait(&ts->cond, &ts->lock);
        }
    }
    int stopped = ts->stopped;
    pthread_mutex_unlock(&ts->lock);
    return stopped;
}

const char *psg_task_server_stop_reason(psg_task_server_t *ts) {
    return ts->stop_reason;
}
const char *psg_task_server_endpoint(const psg_task_server_t *ts) {
    return ts->endpoint;
}
int psg_task_server_port(const psg_task_server_t *ts) {
    return ts->port;
}
const char *psg_task_server_task(const psg_task_server_t *ts) {
    return ts->task;
}
psg_resource_mgr_t *psg_task_server_resources(psg_task_server_t *ts) {
    return ts->rm;
}
psg_rendezvous_t *psg_task_server_rendezvous(psg_task_server_t *ts) {
    return ts->rv;
}

void psg_task_server_fail_pulls_from(psg_task_server_t *ts, const char *task, const char *why) {
    if (ts) psg_remote_rv_fail_task(ts->remote, task, why);
}

void psg_task_server_tensor_bytes(psg_task_server_t *ts, int64_t *served, int64_t *pulled) {
    *served = ts ? atomic_load(&ts->bytes_served) : 0;
    *pulled = ts ? psg_remote_rv_bytes_pulled(ts->remote) : 0;
}
