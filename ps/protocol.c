/* The task server's protocol table (ps/protocol.h): one row per request with its fields,
 * its reply, the typed encoders and decoders of both that the two ends use, and its
 * handler; and the rows a program adds (psg_proto_register). A decoder trusts nothing:
 * every number is range-checked and every error names the op and field. Not the handlers
 * (ps/task_*.c) and not the wire (net/). */
#include "ps/protocol.h"

#include "ps/replicate.h"
#include "ps/task_server_internal.h"
#include "psgraph/error.h"
#include "psgraph/op.h"
#include "psgraph/rendezvous.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(const psg_msg_t *m, const char *fmt, ...) PSG_PRINTF(2, 3);
static int bad(const psg_msg_t *m, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return psg_error_set_code(PSG_ERR_BAD_REQUEST, "%s: %s", m->op ? m->op : "?", why);
}

/* ---- fields ---- */

static int get_handle(const psg_msg_t *m, uint64_t *h) {
    const char *k = m->key;
    char *end = NULL;
    if (!k || !*k || k[0] == '-' || k[0] == '+' || k[0] == ' ')
        return psg_error_set_code(PSG_ERR_NOT_FOUND, "unknown graph handle '%.64s'", k ? k : "");
    unsigned long long v = strtoull(k, &end, 10);
    if (*end) return psg_error_set_code(PSG_ERR_NOT_FOUND, "unknown graph handle '%.64s'", k);
    *h = v;
    return 0;
}

/* The handle in decimal, written out by hand: every RunGraph carries one (issue 33: snprintf
 * on every step's critical path). */
static int set_handle(psg_msg_t *m, uint64_t h) {
    char key[24], *d = key + sizeof key;
    *--d = 0;
    do {
        *--d = (char)('0' + h % 10);
        h /= 10;
    } while (h);
    return psg_msg_set_key(m, d);
}

static int set_body(psg_msg_t *m, const void *p, size_t n) {
    return psg_msg_set_body(m, p, n);
}

/* The body as a NUL-terminated path of at most PSG_PROTO_MAX_PATH - 1 bytes, no NUL inside. */
static int get_path(const psg_msg_t *m, const char *what, char *out) {
    if (!m->body || m->body->size == 0) return bad(m, "no %s (the body)", what);
    if (m->body->size >= PSG_PROTO_MAX_PATH)
        return bad(m, "%s of %zu bytes (the limit is %d)", what, m->body->size,
                   PSG_PROTO_MAX_PATH - 1);
    if (memchr(m->body->data, 0, m->body->size)) return bad(m, "%s contains a NUL byte", what);
    memcpy(out, m->body->data, m->body->size);
    out[m->body->size] = 0;
    return 0;
}

/* An i64 tensor of shape [n, cols] (cols 2) or [n] (cols 1) named `name`, absent: n = 0. */
static int get_ids(const psg_msg_t *m, const char *name, int cols, int *n, const int64_t **out) {
    psg_tensor_t *t = psg_msg_tensor(m, name);
    *n = 0;
    *out = NULL;
    if (!t || (t->dtype == PSG_DT_I64 && psg_tensor_numel(t) == 0)) return 0;
    if (t->dtype != PSG_DT_I64 || t->shape.rank != cols || (cols == 2 && t->shape.dims[1] != 2) ||
        t->shape.dims[0] > PSG_PROTO_MAX_ENDPOINTS) {
        char sh[PSG_SHAPE_STR_MAX];
        return bad(m, "'%s' must be i64 [n%s] with n <= %d, got %s%s", name, cols == 2 ? ", 2" : "",
                   PSG_PROTO_MAX_ENDPOINTS, psg_dtype_name(t->dtype),
                   psg_shape_str(&t->shape, sh, sizeof sh));
    }
    *n = (int)t->shape.dims[0];
    *out = psg_tensor_i64(t);
    return 0;
}

static int add_ids(psg_msg_t *m, const char *name, int n, int cols, const int64_t *v) {
    if (n == 0) return 0;
    psg_shape_t s = cols == 2 ? psg_shape_2d(n, 2) : psg_shape_1d(n);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_I64, &s);
    if (!t) return -1;
    memcpy(t->data, v, (size_t)n * (size_t)cols * sizeof *v);
    int rc = psg_msg_add_tensor(m, name, t);
    psg_tensor_destroy(&t);
    return rc;
}

/* An endpoint from untrusted numbers: out of range becomes (-1, -1), which registration
 * then rejects by its index. */
static psg_endpoint_t to_endpoint(int64_t node, int64_t index) {
    return (psg_endpoint_t){node < 0 || node > INT32_MAX ? -1 : (int)node,
                            index < 0 || index > PSG_MAX_OUTPUTS ? -1 : (int)index};
}

/* ---- RegisterGraph ---- */

static int enc_register(const psg_req_t *r, psg_msg_t *m) {
    const psg_req_register_t *g = &r->u.reg;
    int64_t *v = malloc(((size_t)g->n_feeds + g->n_fetches + g->n_targets + 1) * 2 * sizeof *v);
    if (!v) return psg_error_set("out of memory");
    int rc = set_body(m, g->graph, g->len);
    for (int i = 0; i < g->n_feeds; i++)
        v[2 * i] = g->feeds[i].node, v[2 * i + 1] = g->feeds[i].index;
    if (rc == 0) rc = add_ids(m, "feeds", g->n_feeds, 2, v);
    for (int i = 0; i < g->n_fetches; i++)
        v[2 * i] = g->fetches[i].node, v[2 * i + 1] = g->fetches[i].index;
    if (rc == 0) rc = add_ids(m, "fetches", g->n_fetches, 2, v);
    for (int i = 0; i < g->n_targets; i++) v[i] = g->targets[i];
    if (rc == 0) rc = add_ids(m, "targets", g->n_targets, 1, v);
    free(v);
    return rc;
}

static int dec_register(const psg_msg_t *m, psg_req_t *r) {
    psg_req_register_t *g = &r->u.reg;
    const int64_t *f, *x, *t;
    if (!m->body || m->body->size == 0) return bad(m, "no graph (the body)");
    if (get_ids(m, "feeds", 2, &g->n_feeds, &f) < 0 ||
        get_ids(m, "fetches", 2, &g->n_fetches, &x) < 0 ||
        get_ids(m, "targets", 1, &g->n_targets, &t) < 0)
        return -1;
    g->graph = m->body->data;
    g->len = m->body->size;
    g->feeds = calloc((size_t)g->n_feeds + 1, sizeof *g->feeds);
    g->fetches = calloc((size_t)g->n_fetches + 1, sizeof *g->fetches);
    g->targets = calloc((size_t)g->n_targets + 1, sizeof *g->targets);
    if (!g->feeds || !g->fetches || !g->targets)
        return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < g->n_feeds; i++) g->feeds[i] = to_endpoint(f[2 * i], f[2 * i + 1]);
    for (int i = 0; i < g->n_fetches; i++) g->fetches[i] = to_endpoint(x[2 * i], x[2 * i + 1]);
    for (int i = 0; i < g->n_targets; i++)
        g->targets[i] = t[i] < 0 || t[i] > INT32_MAX ? -1 : (int)t[i];
    return 0;
}

static void clear_register(psg_req_t *r) {
    free(r->u.reg.feeds);
    free(r->u.reg.fetches);
    free(r->u.reg.targets);
    r->u.reg.feeds = r->u.reg.fetches = NULL;
    r->u.reg.targets = NULL;
}

/* ---- the small ones ---- */

static int enc_handle(const psg_req_t *r, psg_msg_t *m) {
    return set_handle(m, r->u.handle);
}
static int dec_handle(const psg_msg_t *m, psg_req_t *r) {
    return get_handle(m, &r->u.handle);
}

static int enc_run(const psg_req_t *r, psg_msg_t *m) {
    if (set_handle(m, r->u.run.handle) < 0) return -1;
    if (r->u.run.update[0] && set_body(m, r->u.run.update, strlen(r->u.run.update)) < 0) return -1;
    for (int i = 0; i < r->u.run.n_feeds; i++)
        if (psg_msg_add_tensor(m, NULL, r->u.run.feeds[i]) < 0) return -1;
    return 0;
}

static int dec_run(const psg_msg_t *m, psg_req_t *r) {
    if (get_handle(m, &r->u.run.handle) < 0) return -1;
    r->u.run.update[0] = 0;
    if (m->body && m->body->size) { /* the update id: printable, "WRITER SEQ" */
        size_t n = m->body->size;
        const char *d = (const char *)m->body->data;
        if (n >= PSG_PROTO_MAX_UPDATE)
            return bad(m, "update id of %zu bytes (the limit is %d)", n, PSG_PROTO_MAX_UPDATE - 1);
        for (size_t i = 0; i < n; i++)
            if (d[i] < 0x20 || d[i] > 0x7e)
                return bad(m, "the update id has a byte 0x%02x", (unsigned char)d[i]);
        memcpy(r->u.run.update, d, n);
        r->u.run.update[n] = 0;
    }
    r->u.run.n_feeds = m->ntensors;
    r->u.run.feeds = m->tensors;
    return 0;
}

/* RunGraphRecv: RunGraph's fields, the body the update id's line ("" when none) and then
 * one rendezvous key a line. */
static int enc_run_recv(const psg_req_t *r, psg_msg_t *m) {
    psg_req_t plain = *r;
    plain.u.run.update[0] = 0; /* the update id goes into this body, not RunGraph's */
    if (enc_run(&plain, m) < 0) return -1;
    size_t n = strlen(r->u.run.update) + 1;
    for (int i = 0; i < r->u.run.n_recv_keys; i++) n += strlen(r->u.run.recv_keys[i]) + 1;
    char *body = malloc(n), *at = body;
    if (!body) return psg_error_set("out of memory");
    at += sprintf(at, "%s", r->u.run.update);
    for (int i = 0; i < r->u.run.n_recv_keys; i++) at += sprintf(at, "\n%s", r->u.run.recv_keys[i]);
    int rc = set_body(m, body, (size_t)(at - body));
    free(body);
    return rc;
}

static void clear_run_recv(psg_req_t *r) {
    free(r->u.run.recv_keys);
    r->u.run.recv_keys = NULL;
    r->u.run.n_recv_keys = 0;
}

/* Splits n bytes of text into its lines, one rendezvous key each: 1 to max keys, every
 * byte printable, each key 1 to PSG_RENDEZVOUS_KEY_MAX - 1 bytes. *out: the pointers, then
 * the keys' bytes, in one block (NULL when n is 0). -1 naming the field. */
static int split_keys(const psg_msg_t *m, const char *what, const char *d, size_t n, int max,
                      char ***out, int *count) {
    *out = NULL;
    *count = 0;
    if (n == 0) return 0;
    int lines = 1;
    for (size_t i = 0; i < n; i++) {
        if (d[i] == '\n') {
            if (++lines > max) return bad(m, "more than %d keys in %s", max, what);
        } else if (d[i] < 0x20 || d[i] > 0x7e) {
            return bad(m, "%s has a byte 0x%02x", what, (unsigned char)d[i]);
        }
    }
    char **v = malloc((size_t)lines * sizeof *v + n + 1);
    if (!v) return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    char *blk = (char *)(v + lines);
    memcpy(blk, d, n);
    blk[n] = 0;
    for (int k = 0; k < lines; k++) {
        v[k] = blk;
        char *end = strchr(blk, '\n');
        if (end) *end = 0;
        size_t kl = strlen(blk);
        if (kl == 0 || kl >= PSG_RENDEZVOUS_KEY_MAX) {
            free(v);
            return bad(m, "key %d of %zu bytes (1 to %d) in %s", k, kl, PSG_RENDEZVOUS_KEY_MAX - 1,
                       what);
        }
        blk += kl + 1;
    }
    *out = v;
    *count = lines;
    return 0;
}

/* Checks and splits RunGraphRecv's body: the update id's line, then 1 to
 * PSG_PROTO_MAX_RECV_KEYS keys, every byte printable. */
static int dec_run_recv(const psg_msg_t *m, psg_req_t *r) {
    psg_msg_t plain = *m;
    plain.body = NULL;
    if (dec_run(&plain, r) < 0) return -1;
    r->u.run.recv_keys = NULL;
    r->u.run.n_recv_keys = 0;
    size_t n = m->body ? m->body->size : 0;
    const char *d = n ? (const char *)m->body->data : "";
    const char *nl = memchr(d, '\n', n);
    if (!nl) return bad(m, "no key to send back (the body's lines after the update id)");
    size_t ul = (size_t)(nl - d);
    if (ul + 1 == n)
        return bad(m, "key 0 of 0 bytes (1 to %d) in the body", PSG_RENDEZVOUS_KEY_MAX - 1);
    for (size_t i = 0; i < ul; i++)
        if (d[i] < 0x20 || d[i] > 0x7e)
            return bad(m, "the body has a byte 0x%02x", (unsigned char)d[i]);
    if (ul >= PSG_PROTO_MAX_UPDATE)
        return bad(m, "update id of %zu bytes (the limit is %d)", ul, PSG_PROTO_MAX_UPDATE - 1);
    memcpy(r->u.run.update, d, ul);
    r->u.run.update[ul] = 0;
    return split_keys(m, "the body", nl + 1, n - ul - 1, PSG_PROTO_MAX_RECV_KEYS,
                      &r->u.run.recv_keys, &r->u.run.n_recv_keys);
}

/* Recv: the first key, then the body's keys, one a line. */
static int enc_recv(const psg_req_t *r, psg_msg_t *m) {
    if (psg_msg_set_key(m, r->u.recv.first) < 0) return -1;
    if (r->u.recv.n_more == 0) return 0;
    size_t n = 0;
    for (int i = 0; i < r->u.recv.n_more; i++) n += strlen(r->u.recv.more[i]) + 1;
    char *body = malloc(n), *at = body;
    if (!body) return psg_error_set("out of memory");
    for (int i = 0; i < r->u.recv.n_more; i++)
        at += sprintf(at, "%s%s", i ? "\n" : "", r->u.recv.more[i]);
    int rc = set_body(m, body, (size_t)(at - body));
    free(body);
    return rc;
}

static int dec_recv(const psg_msg_t *m, psg_req_t *r) {
    r->u.recv.more = NULL;
    r->u.recv.n_more = 0;
    if (!m->key || !*m->key) return bad(m, "no rendezvous key (the key)");
    r->u.recv.first = m->key;
    size_t n = m->body ? m->body->size : 0;
    return split_keys(m, "the body", n ? (const char *)m->body->data : "", n,
                      PSG_PROTO_MAX_RECV_KEYS - 1, &r->u.recv.more, &r->u.recv.n_more);
}

static void clear_recv(psg_req_t *r) {
    free(r->u.recv.more);
    r->u.recv.more = NULL;
    r->u.recv.n_more = 0;
}

static int enc_key(const psg_req_t *r, psg_msg_t *m) {
    return psg_msg_set_key(m, r->u.key);
}

/* Replicate: the kind, and a name on every tensor (the values themselves are checked
 * against the variables by the handler, ps/replicate.c). */
static int dec_replicate(const psg_msg_t *m, psg_req_t *r) {
    if (!m->key || (strcmp(m->key, "update") && strcmp(m->key, "full") && strcmp(m->key, "undo") &&
                    strcmp(m->key, "lost")))
        return bad(m, "key '%.64s' is not \"update\", \"full\", \"undo\" or \"lost\"",
                   m->key ? m->key : "");
    for (int i = 0; i < m->ntensors; i++)
        if (!m->names[i] || !*m->names[i]) return bad(m, "tensor %d has no name", i);
    r->u.key = m->key;
    return 0;
}

static int enc_none(const psg_req_t *r, psg_msg_t *m) {
    (void)r, (void)m;
    return 0;
}

static int dec_none(const psg_msg_t *m, psg_req_t *r) {
    (void)m, (void)r;
    return 0;
}

/* Inspect: no key (the whole report), or "brief" (psg_proto_inspect_brief). */
static int enc_inspect(const psg_req_t *r, psg_msg_t *m) {
    return r->u.key ? psg_msg_set_key(m, r->u.key) : 0;
}

static int dec_inspect(const psg_msg_t *m, psg_req_t *r) {
    if (m->key && strcmp(m->key, "brief"))
        return bad(m, "key '%.64s' is not \"brief\" (or none: the whole report)", m->key);
    r->u.key = m->key;
    return 0;
}

bool psg_proto_inspect_brief(const psg_req_t *r) {
    return r->type == PSG_REQ_INSPECT && r->u.key && !strcmp(r->u.key, "brief");
}

static int dec_abort(const psg_msg_t *m, psg_req_t *r) {
    r->u.reason = m->key ? m->key : "";
    return 0;
}

static int enc_abort(const psg_req_t *r, psg_msg_t *m) {
    return r->u.reason && *r->u.reason ? psg_msg_set_key(m, r->u.reason) : 0;
}

static int enc_wait_init(const psg_req_t *r, psg_msg_t *m) {
    size_t n = 0;
    for (int i = 0; i < r->u.init.n; i++) n += strlen(r->u.init.names[i]) + 1;
    char *b = malloc(n + 1), *p = b;
    if (!b) return psg_error_set("out of memory");
    for (int i = 0; i < r->u.init.n; i++) p += sprintf(p, "%s\n", r->u.init.names[i]);
    int rc = set_body(m, b, n);
    free(b);
    return rc;
}

/* The names, parsed once into one block (the request's bytes are not kept). */
static int dec_wait_init(const psg_msg_t *m, psg_req_t *r) {
    if (!m->body) return bad(m, "no variable names (the body)");
    size_t len = m->body->size;
    if (len > PSG_PROTO_MAX_NAMES_BYTES)
        return psg_error_set_code(PSG_ERR_LIMIT, "WaitInit: names of %zu bytes (the limit is %zu)",
                                  len, PSG_PROTO_MAX_NAMES_BYTES);
    const char *d = (const char *)m->body->data;
    if (memchr(d, 0, len)) return bad(m, "the names contain a NUL byte");
    int n = 0;
    for (size_t i = 0; i < len; i++) n += d[i] == '\n';
    n += len > 0 && d[len - 1] != '\n';
    char **v = malloc(((size_t)n + 1) * sizeof *v + len + 1);
    if (!v) return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    char *block = (char *)(v + n + 1);
    memcpy(block, d, len);
    block[len] = 0;
    int k = 0;
    for (char *p = block; *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        if (*p) v[k++] = p;
        if (!nl) break;
        p = nl + 1;
    }
    r->u.init.names = v;
    r->u.init.n = k;
    return 0;
}

static void clear_wait_init(psg_req_t *r) {
    free(r->u.init.names);
    r->u.init.names = NULL;
    r->u.init.n = 0;
}

static int enc_step_count(const psg_req_t *r, psg_msg_t *m) {
    m->step = r->u.workers;
    return 0;
}

static int dec_wait_done(const psg_msg_t *m, psg_req_t *r) {
    if (m->step < 0 || m->step > MAX_WORKERS_DONE)
        return bad(m, "step (the count of workers) %" PRId64 " is outside [0, %d]", m->step,
                   MAX_WORKERS_DONE);
    r->u.workers = m->step;
    return 0;
}

static int enc_job_done(const psg_req_t *r, psg_msg_t *m) {
    return r->u.worker && *r->u.worker ? psg_msg_set_key(m, r->u.worker) : 0;
}

static int dec_job_done(const psg_msg_t *m, psg_req_t *r) {
    r->u.worker = m->key ? m->key : "";
    return 0;
}

static int enc_shard(const psg_req_t *r, psg_msg_t *m) {
    char key[32];
    snprintf(key, sizeof key, "%d/%d", r->u.shard.shard, r->u.shard.num_shards);
    return psg_msg_set_key(m, key) < 0 ? -1 : set_body(m, r->u.shard.dir, strlen(r->u.shard.dir));
}

static int dec_shard(const psg_msg_t *m, psg_req_t *r) {
    int k, n, used = 0;
    if (!m->key || sscanf(m->key, "%d/%d%n", &k, &n, &used) != 2 || m->key[used] || k < 0 ||
        n <= k || n > PSG_PROTO_MAX_SHARDS)
        return bad(m, "key '%.64s' is not \"k/N\" with 0 <= k < N <= %d", m->key ? m->key : "",
                   PSG_PROTO_MAX_SHARDS);
    if (m->step < 0) return bad(m, "step %" PRId64 " is negative", m->step);
    r->u.shard.shard = k;
    r->u.shard.num_shards = n;
    return get_path(m, "directory", r->u.shard.dir);
}

static int enc_trace(const psg_req_t *r, psg_msg_t *m) {
    char key[64];
    if (r->u.trace.start) {
        snprintf(key, sizeof key, "start %d %" PRId64, r->u.trace.pid, r->step);
        return psg_msg_set_key(m, key);
    }
    return psg_msg_set_key(m, "stop") < 0 ? -1
                                          : set_body(m, r->u.trace.path, strlen(r->u.trace.path));
}

static int dec_trace(const psg_msg_t *m, psg_req_t *r) {
    long long step = 0;
    int used = 0;
    if (m->key && sscanf(m->key, "start %d %lld%n", &r->u.trace.pid, &step, &used) == 2 &&
        !m->key[used]) {
        r->u.trace.start = true;
        r->step = step;
        return 0;
    }
    if (!m->key || strcmp(m->key, "stop"))
        return bad(m, "key '%.64s' is not \"start PID STEP\" or \"stop\"", m->key ? m->key : "");
    return get_path(m, "trace file", r->u.trace.path);
}

/* ---- replies ---- */

static int rep_enc_none(const psg_rep_t *rep, psg_msg_t *m) {
    (void)rep, (void)m;
    return 0;
}

static int rep_dec_none(const psg_msg_t *m, psg_rep_t *rep) {
    (void)m, (void)rep;
    return 0;
}

static int rep_enc_handle(const psg_rep_t *rep, psg_msg_t *m) {
    return set_handle(m, rep->u.handle);
}

static int rep_dec_handle(const psg_msg_t *m, psg_rep_t *rep) {
    char *end = NULL;
    if (!m->key || !*m->key || (rep->u.handle = strtoull(m->key, &end, 10), *end))
        return psg_error_set("key '%.64s' is not a handle", m->key ? m->key : "");
    return 0;
}

static int rep_enc_tensors(const psg_rep_t *rep, psg_msg_t *m) {
    for (int i = 0; i < rep->u.fetched.n; i++)
        if (psg_msg_add_tensor(m, rep->u.fetched.names ? rep->u.fetched.names[i] : NULL,
                               rep->u.fetched.t[i]) < 0)
            return -1;
    return 0;
}

static int rep_dec_tensors(const psg_msg_t *m, psg_rep_t *rep) {
    rep->u.fetched.n = m->ntensors;
    rep->u.fetched.t = m->tensors;
    rep->u.fetched.names = m->names;
    return 0;
}

static int rep_enc_tensor(const psg_rep_t *rep, psg_msg_t *m) {
    return psg_msg_add_tensor(m, NULL, rep->u.tensor);
}

static int rep_dec_tensor(const psg_msg_t *m, psg_rep_t *rep) {
    if (m->ntensors != 1) return psg_error_set("%d tensors, not 1", m->ntensors);
    rep->u.tensor = m->tensors[0];
    return 0;
}

static int rep_enc_json(const psg_rep_t *rep, psg_msg_t *m) {
    return set_body(m, rep->u.json.text, rep->u.json.len);
}

static int rep_dec_json(const psg_msg_t *m, psg_rep_t *rep) {
    if (!m->body) return psg_error_set("no body");
    rep->u.json.text = (const char *)m->body->data;
    rep->u.json.len = m->body->size;
    return 0;
}

static int rep_enc_saved(const psg_rep_t *rep, psg_msg_t *m) {
    if (psg_msg_set_key(m, rep->u.saved.line) < 0) return -1;
    return set_body(m, rep->u.saved.names, rep->u.saved.names_len);
}

static int rep_dec_saved(const psg_msg_t *m, psg_rep_t *rep) {
    if (!m->key) return psg_error_set("no key");
    rep->u.saved.line = m->key;
    rep->u.saved.names = m->body ? (const char *)m->body->data : "";
    rep->u.saved.names_len = m->body ? m->body->size : 0;
    return 0;
}

static int rep_enc_count(const psg_rep_t *rep, psg_msg_t *m) {
    char key[32];
    snprintf(key, sizeof key, "%" PRId64, rep->u.count);
    return psg_msg_set_key(m, key);
}

static int rep_dec_count(const psg_msg_t *m, psg_rep_t *rep) {
    char *end = NULL;
    if (!m->key || !*m->key || (rep->u.count = strtoll(m->key, &end, 10), *end))
        return psg_error_set("key '%.64s' is not a count", m->key ? m->key : "");
    return 0;
}

/* ---- the table ---- */

/* A row's reply coders, by the reply's shape. */
#define REPLY(kind) rep_enc_##kind, rep_dec_##kind

static const psg_proto_entry_t table[PSG_REQ_COUNT] = {
    {PSG_REQ_REGISTER_GRAPH, PSG_TS_REGISTER_GRAPH,
     "body: graph (psg_graph_serialize); tensors feeds i64 [n,2], fetches i64 [n,2], targets i64 [n]",
     "key: handle (u64)", enc_register, dec_register, clear_register, REPLY(handle),
     psg_ts_on_register},
    {PSG_REQ_DEREGISTER_GRAPH, PSG_TS_DEREGISTER_GRAPH, "key: handle (u64)", "empty", enc_handle,
     dec_handle, NULL, REPLY(none), psg_ts_on_deregister},
    {PSG_REQ_RUN_GRAPH, PSG_TS_RUN_GRAPH,
     "key: handle (u64); step; tensors: the feeds; body (optional): update id \"WRITER SEQ\"",
     "step; tensors: the fetches", enc_run, dec_run, NULL, REPLY(tensors), psg_ts_on_run},
    {PSG_REQ_RECV, PSG_TS_RECV,
     "key: rendezvous key; step; body (optional): more keys of the step, one a line",
     "step; one tensor; key: its rendezvous key when the request named several (a reply each)",
     enc_recv, dec_recv, clear_recv, REPLY(tensor), psg_ts_on_recv},
    {PSG_REQ_INSPECT, PSG_TS_INSPECT,
     "key (optional): \"brief\", a liveness answer: no variables, no accumulators",
     "body: JSON report", enc_inspect, dec_inspect, NULL, REPLY(json), psg_ts_on_inspect},
    {PSG_REQ_ABORT_STEP, PSG_TS_ABORT_STEP, "step; key: reason (optional)", "empty", enc_abort,
     dec_abort, NULL, REPLY(none), psg_ts_on_abort_step},
    {PSG_REQ_CLEANUP_STEP, PSG_TS_CLEANUP_STEP, "step", "empty", enc_none, dec_none, NULL,
     REPLY(none), psg_ts_on_cleanup_step},
    {PSG_REQ_WAIT_INIT, PSG_TS_WAIT_INIT, "body: variable names, one a line",
     "empty, once all initialized", enc_wait_init, dec_wait_init, clear_wait_init, REPLY(none),
     psg_ts_on_wait},
    {PSG_REQ_WAIT_DONE, PSG_TS_WAIT_DONE, "step: count of workers",
     "empty, once that many sent JobDone", enc_step_count, dec_wait_done, NULL, REPLY(none),
     psg_ts_on_wait},
    {PSG_REQ_JOB_DONE, PSG_TS_JOB_DONE, "key: worker (optional; the sender)", "empty", enc_job_done,
     dec_job_done, NULL, REPLY(none), psg_ts_on_job_done},
    {PSG_REQ_SAVE_SHARD, PSG_TS_SAVE_SHARD,
     "step; key: \"k/N\"; body: directory (under the task's logdir)",
     "key: \"FILE SIZE CRC32 TENSOR_BYTES\"; body: tensor names", enc_shard, dec_shard, NULL,
     REPLY(saved), psg_ts_on_save_shard},
    {PSG_REQ_RESTORE_SHARD, PSG_TS_RESTORE_SHARD, "step; key: \"k/N\"; body: directory",
     "key: tensors restored", enc_shard, dec_shard, NULL, REPLY(count), psg_ts_on_restore_shard},
    {PSG_REQ_TRACE, PSG_TS_TRACE,
     "key: \"start PID STEP\" | \"stop\"; body (stop): file under the task's logdir",
     "key (stop): events written", enc_trace, dec_trace, NULL, REPLY(count), psg_ts_on_trace},
    {PSG_REQ_SHUTDOWN, PSG_TS_SHUTDOWN, "none", "empty", enc_none, dec_none, NULL, REPLY(none),
     psg_ts_on_shutdown},
    {PSG_REQ_REPLICATE, PSG_TS_REPLICATE,
     "key: \"update\" | \"full\"; tensors: the values, named by their variables, and the "
     "inputs (\"@\") of the updates to replay, body \"!OP\\tATTRS\\tINPUTS\" lines; key "
     "\"undo\", body \"#WRITER SEQ\": that update taken back where it is the last; key \"lost\", "
     "body \"PS INCARNATION\" lines: failovers to this task (none: a question)",
     "empty, once taken (held, applied in order before the backup serves anything that reads "
     "its copies; a \"full\" drops those held before it); \"lost\": body, every failover kept",
     enc_key, dec_replicate, NULL, REPLY(none), psg_ts_on_replicate},
    {PSG_REQ_RUN_GRAPH_RECV, PSG_TS_RUN_GRAPH_RECV,
     "RunGraph's, but body: the update id's line (\"\" when none), then the rendezvous keys of "
     "tensors the graph sends to the requester, one a line (Sends of this graph)",
     "step; tensors: the fetches, then those tensors, each named by its key (the requester "
     "does not pull them)",
     enc_run_recv, dec_run_recv, clear_run_recv, REPLY(tensors), psg_ts_on_run},
};

/* The rows added by psg_proto_register, type PSG_REQ_COUNT + i: written under the lock,
 * published by num_added (a reader sees only rows complete). */
static psg_proto_entry_t added[PSG_PROTO_MAX_ADDED];
static atomic_int num_added;
static pthread_mutex_t added_lock = PTHREAD_MUTEX_INITIALIZER;

int psg_proto_register(const psg_proto_entry_t *row) {
    if (!row || !row->op || !*row->op) return psg_error_set("protocol: a request needs an op");
    if (!row->encode || !row->decode || !row->encode_reply || !row->decode_reply || !row->handler)
        return psg_error_set("protocol: request '%.64s' needs its encoder, decoder, reply encoder, "
                             "reply decoder and handler",
                             row->op);
    if (strlen(row->op) > PSG_WIRE_MAX_OP)
        return psg_error_set("protocol: op '%.64s...' is over %d bytes", row->op, PSG_WIRE_MAX_OP);
    pthread_mutex_lock(&added_lock);
    int n = atomic_load(&num_added), rc;
    if (psg_proto_find(row->op)) {
        rc = psg_error_set("protocol: request '%s' is in the table already", row->op);
    } else if (n == PSG_PROTO_MAX_ADDED) {
        rc = psg_error_set("protocol: request '%s': %d requests were added already (the limit)",
                           row->op, PSG_PROTO_MAX_ADDED);
    } else {
        added[n] = *row;
        added[n].type = (psg_req_type_t)(PSG_REQ_COUNT + n);
        rc = added[n].type;
        atomic_store(&num_added, n + 1);
    }
    pthread_mutex_unlock(&added_lock);
    return rc;
}

const psg_proto_entry_t *psg_proto_find(const char *op) {
    for (int i = 0; op && i < PSG_REQ_COUNT; i++)
        if (!strcmp(table[i].op, op)) return &table[i];
    for (int i = 0, n = atomic_load(&num_added); op && i < n; i++)
        if (!strcmp(added[i].op, op)) return &added[i];
    return NULL;
}

const psg_proto_entry_t *psg_proto_entry(psg_req_type_t t) {
    if (t >= PSG_REQ_COUNT) {
        PSG_ASSERT((int)t - PSG_REQ_COUNT < atomic_load(&num_added));
        return &added[t - PSG_REQ_COUNT];
    }
    PSG_ASSERT(t >= 0 && table[t].type == t);
    return &table[t];
}

psg_msg_t *psg_req_encode(const psg_req_t *r) {
    const psg_proto_entry_t *e = psg_proto_entry(r->type);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, e->op);
    if (!m) {
        psg_error_set("out of memory");
        return NULL;
    }
    m->step = r->step;
    if (e->encode(r, m) < 0) {
        psg_error_wrap("%s", e->op);
        psg_msg_destroy(&m);
    }
    return m;
}

int psg_req_decode(const psg_msg_t *m, psg_req_t *r) {
    memset(r, 0, sizeof *r);
    const psg_proto_entry_t *e = psg_proto_find(m->op);
    if (!e)
        return psg_error_set_code(PSG_ERR_NOT_FOUND, "unknown request '%.64s'", m->op ? m->op : "");
    r->type = e->type;
    r->step = m->step;
    if (e->decode(m, r) < 0) {
        psg_req_clear(r);
        return -1;
    }
    return 0;
}

void psg_req_clear(psg_req_t *r) {
    if (!r) return;
    const psg_proto_entry_t *e = psg_proto_entry(r->type);
    if (e->clear) e->clear(r);
}

/* ---- replies, by the row ---- */

psg_msg_t *psg_rep_encode(psg_req_type_t t, const psg_rep_t *rep) {
    const psg_proto_entry_t *e = psg_proto_entry(t);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REPLY, e->op);
    if (!m) {
        psg_error_set("out of memory");
        return NULL;
    }
    if (e->encode_reply(rep, m) < 0) psg_msg_destroy(&m);
    return m;
}

int psg_rep_decode(const psg_msg_t *m, psg_req_type_t t, psg_rep_t *rep) {
    memset(rep, 0, sizeof *rep);
    rep->type = t;
    const psg_proto_entry_t *e = psg_proto_entry(t);
    return e->decode_reply(m, rep) < 0 ? psg_error_wrap("%s reply", e->op) : 0;
}
