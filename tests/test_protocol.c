/* The task server's protocol table (ps/protocol.c) as a program extends it: a test-only
 * request, TestScale, added through psg_proto_register with its own coders both ways and
 * its handler, served by a task server in a forked process over TCP and called through
 * the client half, beside the built-in rows; the table's checks on what is added. Not
 * the built-in requests' behaviour (test_dist, test_hostile). */
#include "ps/client.h"
#include "ps/task_server_internal.h"
#include "tests/testutil.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FACTOR 1000

/* TestScale's fields: key the factor (1..MAX_FACTOR, decimal), tensors the f32 values.
 * The reply: the values times the factor, in order. */
typedef struct {
    int64_t factor;
    int n;
    psg_tensor_t *const *values; /* the message's */
} scale_req_t;

static int scale_encode(const psg_req_t *r, psg_msg_t *m) {
    const scale_req_t *s = r->u.ext;
    char key[32];
    snprintf(key, sizeof key, "%" PRId64, s->factor);
    if (psg_msg_set_key(m, key) < 0) return -1;
    for (int i = 0; i < s->n; i++)
        if (psg_msg_add_tensor(m, NULL, s->values[i]) < 0) return -1;
    return 0;
}

/* Every tensor of m is f32, or the error names the first that is not. */
static int all_f32(const psg_msg_t *m, psg_err_code_t code) {
    for (int i = 0; i < m->ntensors; i++)
        if (m->tensors[i]->dtype != PSG_DT_F32)
            return psg_error_set_code(code, "tensor %d is %s, not f32", i,
                                      psg_dtype_name(m->tensors[i]->dtype));
    return 0;
}

static int scale_decode(const psg_msg_t *m, psg_req_t *r) {
    char *end = NULL;
    long long f = m->key ? strtoll(m->key, &end, 10) : 0;
    if (!m->key || !*m->key || *end || f < 1 || f > MAX_FACTOR)
        return psg_error_set_code(PSG_ERR_BAD_REQUEST,
                                  "TestScale: key '%.64s' is not a factor in [1, %d]",
                                  m->key ? m->key : "", MAX_FACTOR);
    if (all_f32(m, PSG_ERR_BAD_REQUEST) < 0) return psg_error_wrap("TestScale");
    scale_req_t *s = calloc(1, sizeof *s);
    if (!s) return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    *s = (scale_req_t){f, m->ntensors, m->tensors};
    r->u.ext = s;
    return 0;
}

static void scale_clear(psg_req_t *r) {
    free(r->u.ext);
    r->u.ext = NULL;
}

static int scale_encode_reply(const psg_rep_t *rep, psg_msg_t *m) {
    for (int i = 0; i < rep->u.fetched.n; i++)
        if (psg_msg_add_tensor(m, NULL, rep->u.fetched.t[i]) < 0) return -1;
    return 0;
}

static int scale_decode_reply(const psg_msg_t *m, psg_rep_t *rep) {
    if (all_f32(m, PSG_ERR_UNKNOWN) < 0) return -1;
    rep->u.fetched.n = m->ntensors;
    rep->u.fetched.t = m->tensors;
    return 0;
}

/* On the server thread: scales each value and replies through the row's reply encoder. */
static void scale_handler(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    const scale_req_t *s = r->u.ext;
    psg_tensor_t *out[8] = {0};
    if (s->n > 8) {
        psg_ts_reply_error(ts, *reqp, PSG_ERR_LIMIT, "TestScale: %d tensors (at most 8)", s->n);
        return;
    }
    int ok = 1;
    for (int i = 0; i < s->n && ok; i++) {
        out[i] = psg_tensor_new(PSG_DT_F32, &s->values[i]->shape);
        ok = out[i] != NULL;
        for (int64_t k = 0; ok && k < psg_tensor_numel(out[i]); k++)
            psg_tensor_f32(out[i])[k] =
                psg_tensor_f32((psg_tensor_t *)s->values[i])[k] * (float)s->factor;
    }
    psg_rep_t rep = {.type = r->type, .u.fetched = {s->n, out}};
    psg_msg_t *m = ok ? psg_rep_encode(r->type, &rep) : NULL;
    if (m)
        psg_ts_reply_ok(ts, *reqp, &m);
    else
        psg_ts_reply_error(ts, *reqp, PSG_ERR_NO_MEMORY, "TestScale: out of memory");
    for (int i = 0; i < s->n; i++) psg_tensor_destroy(&out[i]);
}

static const psg_proto_entry_t scale_row = {
    .op = "TestScale",
    .fields = "key: factor (1..1000); tensors: f32 values",
    .reply = "tensors: the values times the factor",
    .encode = scale_encode,
    .decode = scale_decode,
    .clear = scale_clear,
    .encode_reply = scale_encode_reply,
    .decode_reply = scale_decode_reply,
    .handler = scale_handler,
};

static int scale_type = -1;

/* The server's process (this binary again, run with --serve FD): it adds the same row to
 * its own table, runs a task server on a free port (written to fd) and serves until
 * Shutdown. */
static int serve(int fd) {
    int rc = 1;
    if (psg_proto_register(&scale_row) == PSG_REQ_COUNT) {
        psg_task_server_options_t o = {.task_name = "/job:ps/task:0",
                                       .endpoint = "tcp://127.0.0.1:*",
                                       .idle_timeout_ms = 60000};
        psg_task_server_t *ts = psg_task_server_new(&o);
        int port = ts ? psg_task_server_port(ts) : -1;
        if (write(fd, &port, sizeof port) == (ssize_t)sizeof port && ts &&
            psg_task_server_wait(ts, 60000) == 1 &&
            strstr(psg_task_server_stop_reason(ts), "shutdown"))
            rc = 0;
        psg_task_server_destroy(&ts);
    }
    close(fd);
    return rc;
}

static psg_tensor_t *f32(psg_shape_t s, const float *v) {
    return psg_test_tensor(&s, v);
}

static void test_table(void) {
    /* every built-in row, from the table itself: its own op and all its coders */
    for (int t = 0; t < PSG_REQ_COUNT; t++) {
        const psg_proto_entry_t *e = psg_proto_entry((psg_req_type_t)t);
        CHECK(e->type == (psg_req_type_t)t && psg_proto_find(e->op) == e);
        CHECK(e->encode && e->decode && e->encode_reply && e->decode_reply && e->handler);
    }
    scale_type = psg_proto_register(&scale_row);
    CHECK(scale_type == PSG_REQ_COUNT);
    CHECK(psg_proto_find("TestScale") == psg_proto_entry((psg_req_type_t)scale_type));
    CHECK(psg_proto_find("TestScale")->type == (psg_req_type_t)scale_type);

    psg_proto_entry_t dup = scale_row;
    CHECK(psg_proto_register(&dup) < 0);
    CHECK_ERROR_HAS("request 'TestScale' is in the table already");
    dup.op = PSG_TS_RUN_GRAPH;
    CHECK(psg_proto_register(&dup) < 0);
    CHECK_ERROR_HAS("request 'RunGraph' is in the table already");
    dup.op = "TestNoReply";
    dup.decode_reply = NULL;
    CHECK(psg_proto_register(&dup) < 0);
    CHECK_ERROR_HAS("request 'TestNoReply' needs its encoder, decoder, reply encoder");
    CHECK(psg_proto_find("TestNoReply") == NULL);

    /* the row's own coders, both ways, without a server */
    float v[3] = {1, 2, 3};
    psg_tensor_t *x = f32(psg_shape_1d(3), v);
    scale_req_t s = {7, 1, &x};
    psg_req_t r = {.type = (psg_req_type_t)scale_type, .u.ext = &s}, back;
    psg_msg_t *m = psg_req_encode(&r);
    CHECK(m && !strcmp(m->op, "TestScale") && !strcmp(m->key, "7") && m->ntensors == 1);
    CHECK(m && psg_req_decode(m, &back) == 0 && back.type == (psg_req_type_t)scale_type);
    if (m && back.u.ext) {
        const scale_req_t *d = back.u.ext;
        CHECK(d->factor == 7 && d->n == 1 && d->values[0] == m->tensors[0]);
    }
    psg_req_clear(&back);
    CHECK(back.u.ext == NULL);
    psg_msg_destroy(&m);

    /* its reply decoder refuses what its reply does not carry, under its op's name */
    int64_t iv[1] = {5};
    psg_shape_t one = psg_shape_1d(1);
    psg_tensor_t *i64 = psg_tensor_new(PSG_DT_I64, &one);
    memcpy(i64->data, iv, sizeof iv);
    psg_msg_t *rm = psg_msg_new(PSG_MSG_REPLY, "TestScale");
    psg_msg_add_tensor(rm, NULL, i64);
    psg_rep_t rep;
    CHECK(psg_rep_decode(rm, (psg_req_type_t)scale_type, &rep) < 0);
    CHECK_ERROR_HAS("TestScale reply: tensor 0 is i64, not f32");
    psg_msg_destroy(&rm);
    psg_tensor_destroy(&i64);
    psg_tensor_destroy(&x);
}

/* m with each body bad[i][0] is refused by its decoder as a bad request naming bad[i][1]. */
static void expect_bodies_refused(psg_msg_t *m, const char *const (*bad)[2], int n) {
    psg_req_t back;
    for (int i = 0; m && i < n; i++) {
        psg_msg_set_body(m, bad[i][0], strlen(bad[i][0]));
        CHECK(psg_req_decode(m, &back) < 0);
        CHECK_ERROR_HAS(bad[i][1]);
        CHECK(psg_error_code() == PSG_ERR_BAD_REQUEST);
    }
}

/* RunGraphRecv's coders: the update id and the keys through the body, both ways; a
 * body without a key, with an empty key or a byte not printable is refused by name. */
static void test_run_graph_recv_coders(void) {
    char *keys[2] = {"a;0000000000000001;b;n:0;0:0", "a;0000000000000001;b;m:1;0:0"};
    psg_req_t r = {.type = PSG_REQ_RUN_GRAPH_RECV, .step = 9};
    r.u.run.handle = 42;
    snprintf(r.u.run.update, sizeof r.u.run.update, "w 3");
    r.u.run.n_recv_keys = 2;
    r.u.run.recv_keys = keys;
    psg_msg_t *m = psg_req_encode(&r);
    psg_req_t back;
    CHECK(m && !strcmp(m->op, PSG_TS_RUN_GRAPH_RECV) && psg_req_decode(m, &back) == 0);
    if (m && back.type == PSG_REQ_RUN_GRAPH_RECV) {
        CHECK(back.u.run.handle == 42 && !strcmp(back.u.run.update, "w 3"));
        CHECK(back.u.run.n_recv_keys == 2 && !strcmp(back.u.run.recv_keys[0], keys[0]) &&
              !strcmp(back.u.run.recv_keys[1], keys[1]));
        psg_req_clear(&back);
        CHECK(back.u.run.recv_keys == NULL);
    }
    const char *const bad[4][2] = {{"w 3", "no key to send back"},
                                   {"\nk\n", "key 1 of 0 bytes"},
                                   {"\nk\x01", "the body has a byte 0x01"},
                                   {"\n\n", "key 0 of 0 bytes"}};
    expect_bodies_refused(m, bad, 4);
    psg_msg_destroy(&m);
}

/* Recv's coders: the first key in the key, the step's further keys through the body, both
 * ways; a Recv of one key has no body; an empty key, a byte not printable or too many keys
 * in the body are refused by name. */
static void test_recv_coders(void) {
    char *more[2] = {"a;0000000000000001;b;m:1;0:0", "a;0000000000000001;b;k:2;0:0"};
    psg_req_t r = {.type = PSG_REQ_RECV, .step = 7};
    r.u.recv.first = "a;0000000000000001;b;n:0;0:0";
    r.u.recv.n_more = 2;
    r.u.recv.more = more;
    psg_msg_t *m = psg_req_encode(&r);
    psg_req_t back;
    CHECK(m && !strcmp(m->op, PSG_TS_RECV) && psg_req_decode(m, &back) == 0);
    if (m && back.type == PSG_REQ_RECV) {
        CHECK(back.step == 7 && !strcmp(back.u.recv.first, r.u.recv.first));
        CHECK(back.u.recv.n_more == 2 && !strcmp(back.u.recv.more[0], more[0]) &&
              !strcmp(back.u.recv.more[1], more[1]));
        psg_req_clear(&back);
        CHECK(back.u.recv.more == NULL);
    }
    psg_msg_destroy(&m);
    r.u.recv.n_more = 0;
    m = psg_req_encode(&r);
    CHECK(m && !m->body && psg_req_decode(m, &back) == 0 && back.u.recv.n_more == 0);
    if (m) psg_req_clear(&back);
    const char *const bad[3][2] = {{"k\n", "key 1 of 0 bytes"},
                                   {"k\x01", "the body has a byte 0x01"},
                                   {"\n", "key 0 of 0 bytes"}};
    expect_bodies_refused(m, bad, 3);
    /* PSG_PROTO_MAX_RECV_KEYS in all: the first and that many less one in the body */
    size_t len = 0;
    char *body = malloc((size_t)PSG_PROTO_MAX_RECV_KEYS * 2);
    for (int i = 0; body && i < PSG_PROTO_MAX_RECV_KEYS; i++) {
        body[len++] = 'k';
        body[len++] = '\n';
    }
    for (int over = 0; m && body && over < 2; over++) {
        /* 1023 keys fit beside the first, 1024 do not */
        size_t n = over ? len - 1 : len - 3;
        psg_msg_set_body(m, body, n);
        int rc = psg_req_decode(m, &back);
        CHECK(over ? rc < 0 : rc == 0);
        if (rc == 0) {
            CHECK(back.u.recv.n_more == PSG_PROTO_MAX_RECV_KEYS - 1);
            psg_req_clear(&back);
        } else {
            CHECK_ERROR_HAS("more than 1023 keys in the body");
        }
    }
    free(body);
    psg_msg_destroy(&m);
}

/* Whether an Inspect reply's JSON holds s. */
static bool has(const psg_rep_t *rep, const char *s) {
    return memmem(rep->u.json.text, rep->u.json.len, s, strlen(s)) != NULL;
}

static void test_served(void) {
    int fds[2];
    PSG_ASSERT(pipe(fds) == 0);
    pid_t pid = fork();
    PSG_ASSERT(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", fds[1]);
        execl("/proc/self/exe", "test_protocol", "--serve", fd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    int port = -1;
    CHECK(read(fds[0], &port, sizeof port) == (ssize_t)sizeof port && port > 0);
    close(fds[0]);
    if (port <= 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return;
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    psg_ts_client_t *c = psg_ts_client_new("/job:ps/task:0", addr, 20000, 0, NULL);
    CHECK(c != NULL);

    /* the added request, through the client half and the server's dispatch */
    float a[3] = {1, 2, 3}, b[1] = {0.5f};
    psg_tensor_t *in[2] = {f32(psg_shape_1d(3), a), f32(psg_shape_2d(1, 1), b)};
    scale_req_t s = {3, 2, in};
    psg_req_t r = {.type = (psg_req_type_t)scale_type, .u.ext = &s};
    psg_rep_t rep;
    psg_msg_t *m = psg_ts_call(c, &r, &rep, 20000);
    CHECK(m && rep.u.fetched.n == 2);
    if (m && rep.u.fetched.n == 2) {
        const float *y = psg_tensor_f32(rep.u.fetched.t[0]),
                    *z = psg_tensor_f32(rep.u.fetched.t[1]);
        CHECK(psg_tensor_numel(rep.u.fetched.t[0]) == 3 && y[0] == 3 && y[1] == 6 && y[2] == 9);
        CHECK(rep.u.fetched.t[1]->shape.rank == 2 && z[0] == 1.5f);
    }
    psg_msg_destroy(&m);

    /* its decoder's refusals come back as errors naming the op and the field */
    s.factor = 0;
    CHECK(psg_ts_call(c, &r, &rep, 20000) == NULL);
    CHECK(psg_error_code() == PSG_ERR_BAD_REQUEST);
    CHECK_ERROR_HAS("TestScale: key '0' is not a factor in [1, 1000]");
    int64_t iv[1] = {4};
    psg_shape_t one = psg_shape_1d(1);
    psg_tensor_t *i64 = psg_tensor_new(PSG_DT_I64, &one);
    memcpy(i64->data, iv, sizeof iv);
    psg_tensor_t *bad_in[1] = {i64};
    s = (scale_req_t){2, 1, bad_in};
    CHECK(psg_ts_call(c, &r, &rep, 20000) == NULL);
    CHECK(psg_error_code() == PSG_ERR_BAD_REQUEST);
    CHECK_ERROR_HAS("TestScale: tensor 0 is i64, not f32");

    /* the built-in rows still answer beside it */
    psg_req_t in_req = {.type = PSG_REQ_INSPECT};
    m = psg_ts_call(c, &in_req, &rep, 20000);
    CHECK(m && rep.u.json.len > 0 && rep.u.json.text[0] == '{');
    CHECK(m && has(&rep, "\"variables\":["));
    psg_msg_destroy(&m);
    /* the brief report: the task and its incarnation, no variables (a liveness probe) */
    psg_req_t brief = {.type = PSG_REQ_INSPECT, .u.key = "brief"};
    m = psg_ts_call(c, &brief, &rep, 20000);
    CHECK(m && rep.u.json.len > 0 && has(&rep, "\"brief\":true"));
    CHECK(m && has(&rep, "\"incarnation\":\""));
    CHECK(m && has(&rep, "\"workers_done_tasks\":["));
    CHECK(m && !has(&rep, "\"variables\""));
    psg_msg_destroy(&m);
    psg_req_t stop = {.type = PSG_REQ_SHUTDOWN};
    m = psg_ts_call(c, &stop, &rep, 20000);
    CHECK(m != NULL);
    psg_msg_destroy(&m);
    int status = -1;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    psg_ts_client_destroy(&c);
    psg_tensor_destroy(&i64);
    psg_tensor_destroy(&in[0]);
    psg_tensor_destroy(&in[1]);
}

/* The table holds PSG_PROTO_MAX_ADDED added rows, and says so past them. */
static void test_limit(void) {
    static char ops[PSG_PROTO_MAX_ADDED + 1][32];
    int added = 1; /* TestScale */
    for (int i = 0; i < PSG_PROTO_MAX_ADDED; i++) {
        psg_proto_entry_t row = scale_row;
        snprintf(ops[i], sizeof ops[i], "TestFill%d", i);
        row.op = ops[i];
        int t = psg_proto_register(&row);
        if (added < PSG_PROTO_MAX_ADDED) {
            CHECK(t == PSG_REQ_COUNT + added);
            added++;
        } else {
            CHECK(t < 0);
            CHECK_ERROR_HAS("requests were added already (the limit)");
        }
    }
}

/* Replicate's keys: "update", "full", "undo" (a sync chief's failed step taken back) and
 * "lost" (the failovers to a task, docs/replication.md); any other refused, naming it. */
static void test_replicate_keys(void) {
    const char *keys[] = {"update", "full", "undo", "lost", "rollback"};
    for (int i = 0; i < 5; i++) {
        psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_REPLICATE);
        CHECK(m && psg_msg_set_key(m, keys[i]) == 0);
        psg_req_t r;
        int rc = m ? psg_req_decode(m, &r) : -1;
        if (i < 4) {
            CHECK(rc == 0 && r.type == PSG_REQ_REPLICATE && !strcmp(r.u.key, keys[i]));
        } else {
            CHECK(rc < 0);
            CHECK_ERROR_HAS("key 'rollback' is not \"update\", \"full\", \"undo\" or \"lost\"");
        }
        if (rc == 0) psg_req_clear(&r);
        psg_msg_destroy(&m);
    }
}

/* Inspect's key: none (the whole report) or "brief" (a liveness answer); any other refused. */
static void test_inspect_keys(void) {
    const char *keys[] = {NULL, "brief", "short"};
    for (int i = 0; i < 3; i++) {
        psg_req_t in = {.type = PSG_REQ_INSPECT, .u.key = keys[i]}, r;
        psg_msg_t *m = psg_req_encode(&in);
        int rc = m ? psg_req_decode(m, &r) : -1;
        if (i < 2) {
            CHECK(rc == 0 && r.type == PSG_REQ_INSPECT && psg_proto_inspect_brief(&r) == (i == 1));
        } else {
            CHECK(rc < 0);
            CHECK_ERROR_HAS("key 'short' is not \"brief\"");
        }
        if (rc == 0) psg_req_clear(&r);
        psg_msg_destroy(&m);
    }
}

/* Replicate "lost" (docs/replication.md) to a ps task of a cluster with backups: a verdict
 * kept and listed (once however often told), a question answers the list, a malformed line
 * refused naming it, the task serving on. */
static char *lost_call(psg_ts_client_t *c, const char *body) {
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_REPLICATE);
    CHECK(m && psg_msg_set_key(m, "lost") == 0);
    if (body) CHECK(psg_msg_set_body(m, body, strlen(body)) == 0);
    psg_msg_t *r = psg_ts_call_msg(c, &m, 5000);
    if (!r) return NULL;
    size_t n = r->body ? r->body->size : 0;
    char *out = calloc(1, n + 1);
    if (out && n) memcpy(out, r->body->data, n);
    psg_msg_destroy(&r);
    return out;
}

static void test_lost_verdicts(void) {
    psg_cluster_t *cl = psg_cluster_parse(
        "{\"cluster\": {\"ps\": [\"127.0.0.1:1\", \"127.0.0.1:2\"], \"worker\": [\"127.0.0.1:3\"]}, "
        "\"ps_replicas\": 2}",
        "test");
    CHECK(cl != NULL);
    psg_task_server_options_t o = {
        .cluster = cl, .task_name = "/job:ps/task:1", .endpoint = "tcp://127.0.0.1:*"};
    psg_task_server_t *ts = cl ? psg_task_server_new(&o) : NULL;
    CHECK(ts != NULL);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ts ? psg_task_server_port(ts) : 1);
    psg_ts_client_t *c = ts ? psg_ts_client_new("/job:ps/task:1", addr, 5000, 0, NULL) : NULL;
    char *got = c ? lost_call(c, NULL) : NULL;
    CHECK(got && !strcmp(got, "")); /* none yet */
    free(got);
    got = c ? lost_call(c, "0 00000000000000ab\n") : NULL;
    CHECK(got && !strcmp(got, "0 00000000000000ab\n"));
    free(got);
    got = c ? lost_call(c, "0 ab") : NULL; /* the same again: kept once */
    CHECK(got && !strcmp(got, "0 00000000000000ab\n"));
    free(got);
    const char *bad[] = {"zero ab\n", "0 ab\n2 cd\n", "0 0\n", "0 12345678901234567\n", "0  ab\n"};
    for (int i = 0; i < 5 && c; i++) {
        CHECK(lost_call(c, bad[i]) == NULL);
        CHECK(psg_error_code() == PSG_ERR_BAD_REQUEST);
        CHECK_ERROR_HAS("is not \"PS INCARNATION\" (a ps task below 2, a hexadecimal incarnation)");
    }
    CHECK_ERROR_HAS("Replicate lost: line 1 '0  ab'");
    got = c ? lost_call(c, NULL) : NULL; /* still serving, the verdict kept */
    CHECK(got && !strcmp(got, "0 00000000000000ab\n"));
    free(got);
    psg_ts_client_destroy(&c);
    psg_task_server_destroy(&ts);
    psg_cluster_destroy(&cl);
}

/* Registers g on c (feeds/fetches/targets as given); its handle, 0 on failure. */
static uint64_t reg(psg_ts_client_t *c, psg_graph_t *g, psg_endpoint_t *feed, psg_endpoint_t *fetch,
                    int *target) {
    char *bytes = NULL;
    size_t len = 0;
    CHECK(psg_graph_serialize(g, &bytes, &len) == 0);
    psg_req_t r = {.type = PSG_REQ_REGISTER_GRAPH};
    r.u.reg = (psg_req_register_t){.graph = bytes,
                                   .len = len,
                                   .n_feeds = feed != NULL,
                                   .n_fetches = fetch != NULL,
                                   .n_targets = target != NULL,
                                   .feeds = feed,
                                   .fetches = fetch,
                                   .targets = target};
    psg_rep_t rep;
    psg_msg_t *m = psg_ts_call(c, &r, &rep, 20000);
    uint64_t h = m ? rep.u.handle : 0;
    psg_msg_destroy(&m);
    free(bytes);
    return h;
}

/* A RunGraph of handle h as step `step` with update id `update` (may be ""): its first fetch
 * (a new reference, NULL when none or the run failed). *ok: the run succeeded. */
static psg_tensor_t *run_graph(psg_ts_client_t *c, uint64_t h, int64_t step, const char *update,
                               psg_tensor_t *feed, bool *ok) {
    psg_req_t r = {.type = PSG_REQ_RUN_GRAPH, .step = step};
    r.u.run.handle = h;
    r.u.run.n_feeds = feed != NULL;
    r.u.run.feeds = &feed;
    snprintf(r.u.run.update, sizeof r.u.run.update, "%s", update);
    psg_rep_t rep;
    psg_msg_t *m = psg_ts_call(c, &r, &rep, 20000);
    *ok = m != NULL;
    psg_tensor_t *t = m && rep.u.fetched.n > 0 ? psg_tensor_ref(rep.u.fetched.t[0]) : NULL;
    psg_msg_destroy(&m);
    return t;
}

/* A step of a ps with a backup (--ps-replicas 2) that applied its update and then failed (a
 * node after the update): its variable is put back, and the retry with the same update id
 * applies the update once. The update is recorded as it is applied (ps/repl_log.c): the put
 * back must forget that record, else the retry finds the update held and leaves the
 * variable alone (found by test_replication's kills, 41cb775). */
static void test_retry_after_failed_step(void) {
    psg_cluster_t *cl = psg_cluster_parse(
        "{\"cluster\": {\"ps\": [\"127.0.0.1:1\", \"127.0.0.1:2\"], \"worker\": [\"127.0.0.1:3\"]}, "
        "\"ps_replicas\": 2, \"peer_timeout\": 1}",
        "test");
    CHECK(cl != NULL);
    psg_task_server_options_t o = {
        .cluster = cl, .task_name = "/job:ps/task:0", .endpoint = "tcp://127.0.0.1:*"};
    psg_task_server_t *ts = cl ? psg_task_server_new(&o) : NULL;
    CHECK(ts != NULL);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ts ? psg_task_server_port(ts) : 1);
    psg_ts_client_t *c = ts ? psg_ts_client_new("/job:ps/task:0", addr, 20000, 0, NULL) : NULL;
    psg_shape_t s4 = psg_shape_1d(4), s2 = psg_shape_1d(2), sx = psg_shape_1d(-1);
    float w0[4] = {1, 2, 3, 4}, ones[4] = {1, 1, 1, 1};
    /* w = w0 */
    psg_graph_t *gi = psg_graph_new();
    psg_tensor_t *t = psg_test_tensor(&s4, w0);
    int set =
        psg_assign(gi, "set", psg_var_handle(gi, "w", PSG_DT_F32, &s4), psg_const(gi, "w0", &t));
    /* w -= 0.5 * 1, then Reshape(x, [2]) after it: fails unless x has 2 elements */
    psg_graph_t *gt = psg_graph_new();
    psg_endpoint_t w = psg_var_handle(gt, "w", PSG_DT_F32, &s4);
    t = psg_test_tensor(&s4, ones);
    int apply = psg_apply_gradient_descent(gt, "apply", w, psg_const_scalar(gt, "lr", 0.5f),
                                           psg_const(gt, "grad", &t));
    psg_endpoint_t x = psg_placeholder(gt, "x", PSG_DT_F32, &sx);
    psg_graph_push_control(gt, 1, &apply, false);
    psg_endpoint_t y = psg_reshape(gt, "y", x, &s2);
    psg_graph_pop_control(gt);
    psg_graph_t *gr = psg_graph_new();
    psg_endpoint_t read = psg_read_variable(gr, "read", psg_var_handle(gr, "w", PSG_DT_F32, &s4));
    uint64_t hi = c ? reg(c, gi, NULL, NULL, &set) : 0, ht = c ? reg(c, gt, &x, &y, NULL) : 0,
             hr = c ? reg(c, gr, NULL, &read, NULL) : 0;
    CHECK(hi && ht && hr);
    bool ok = false;
    psg_tensor_destroy(&t);
    (void)run_graph(c, hi, 11, "", NULL, &ok);
    CHECK(ok);
    float bad[3] = {0, 0, 0}, good[2] = {0, 0};
    psg_shape_t s3 = psg_shape_1d(3);
    psg_tensor_t *xb = psg_test_tensor(&s3, bad), *xg = psg_test_tensor(&s2, good);
    psg_tensor_t *out = run_graph(c, ht, 12, "/job:worker/replica:0/task:0@1 1", xb, &ok);
    CHECK(!ok); /* the update ran, the Reshape after it failed */
    psg_tensor_destroy(&out);
    out = run_graph(c, hr, 13, "", NULL, &ok);
    CHECK(ok && out && !memcmp(psg_tensor_f32(out), w0, sizeof w0)); /* put back */
    psg_tensor_destroy(&out);
    out = run_graph(c, ht, 14, "/job:worker/replica:0/task:0@1 1", xg, &ok); /* the retry */
    CHECK(ok);
    psg_tensor_destroy(&out);
    out = run_graph(c, hr, 15, "", NULL, &ok);
    float want[4] = {0.5f, 1.5f, 2.5f, 3.5f};
    bool once = ok && out && !memcmp(psg_tensor_f32(out), want, sizeof want);
    if (!once && out)
        fprintf(stderr, "  w after the retry: %g %g %g %g (want 0.5 1.5 2.5 3.5)\n",
                psg_tensor_f32(out)[0], psg_tensor_f32(out)[1], psg_tensor_f32(out)[2],
                psg_tensor_f32(out)[3]);
    CHECK(once);
    psg_tensor_destroy(&out);
    psg_tensor_destroy(&xb);
    psg_tensor_destroy(&xg);
    psg_graph_destroy(&gi);
    psg_graph_destroy(&gt);
    psg_graph_destroy(&gr);
    psg_ts_client_destroy(&c);
    psg_task_server_destroy(&ts);
    psg_cluster_destroy(&cl);
}

/* JobDone counts each worker once, however its name is spelt: the chief's verdict on a lost
 * worker ("/job:worker/task:1") after that worker's own ("/job:worker/replica:0/task:1") does
 * not stop a ps that expects two workers. */
static void test_job_done_counts_each_worker_once(void) {
    psg_task_server_options_t so = {.endpoint = "tcp://127.0.0.1:*", .expect_workers = 2};
    psg_task_server_t *ts = psg_task_server_new(&so);
    CHECK(ts != NULL);
    if (!ts) return;
    psg_ts_client_t *c =
        psg_ts_client_new("/job:ps/task:0", psg_task_server_endpoint(ts), 20000, 0, NULL);
    CHECK(c != NULL);
    const char *names[] = {"/job:worker/replica:0/task:1", "/job:worker/task:1",
                           "/job:worker/task:0"};
    for (int i = 0; c && i < 3; i++) {
        psg_req_t r = {.type = PSG_REQ_JOB_DONE, .u.worker = names[i]};
        psg_rep_t rep;
        psg_msg_t *m = psg_ts_call(c, &r, &rep, 20000);
        CHECK(m != NULL);
        psg_msg_destroy(&m);
        /* serving after the same worker twice; stopped after the second worker */
        CHECK(psg_task_server_wait(ts, i < 2 ? 300 : 10000) == (i < 2 ? 0 : 1));
    }
    CHECK(strstr(psg_task_server_stop_reason(ts), "job done: 2 workers finished") != NULL);
    psg_ts_client_destroy(&c);
    psg_task_server_destroy(&ts);
}

/* A task that stops because the job is done (every expected worker said JobDone) answers
 * what waited with PSG_ERR_JOB_DONE and the reason, not as a crash: a worker left out of the
 * job (one that joined at its end) stops on it without a recovery. */
static void test_job_done_reply(void) {
    psg_task_server_options_t o = {
        .task_name = "/job:ps/task:0", .endpoint = "tcp://127.0.0.1:*", .expect_workers = 1};
    psg_task_server_t *ts = psg_task_server_new(&o);
    CHECK(ts != NULL);
    if (!ts) return;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", psg_task_server_port(ts));
    psg_ts_client_t *waiter = psg_ts_client_new("/job:ps/task:0", addr, 20000, 0, NULL),
                    *done = psg_ts_client_new("/job:ps/task:0", addr, 20000, 0, NULL);
    psg_req_t in = {.type = PSG_REQ_INSPECT}, wd = {.type = PSG_REQ_WAIT_DONE, .u.workers = 2},
              jd = {.type = PSG_REQ_JOB_DONE, .u.worker = "/job:worker/task:0"};
    psg_rep_t rep;
    psg_msg_t *r = psg_ts_call(waiter, &in, &rep, 20000); /* connected */
    CHECK(r != NULL);
    psg_msg_destroy(&r);
    uint64_t id = 0;
    CHECK(psg_ts_send(waiter, &wd, &id) == 0); /* waits for 2 workers: 1 comes, the job ends */
    r = psg_ts_call(done, &jd, &rep, 20000);
    CHECK(r != NULL);
    psg_msg_destroy(&r);
    psg_msg_t *m = NULL;
    bool ready = false;
    for (int64_t t0 = psg_ts_now_ms(); !m && psg_ts_now_ms() - t0 < 20000;)
        if (psg_ts_client_poll(&waiter, 1, &ready, 100) > 0) psg_ts_client_recv(waiter, &m);
    CHECK(m && m->id == id && m->kind == PSG_MSG_ERROR && m->code == PSG_ERR_JOB_DONE);
    CHECK(m && m->error && strstr(m->error, "job done: 1 workers finished"));
    if (m && m->error)
        printf("  the waiter's reply: %s (%s)\n", m->error, psg_error_code_name(m->code));
    psg_msg_destroy(&m);
    psg_ts_client_destroy(&waiter);
    psg_ts_client_destroy(&done);
    psg_task_server_destroy(&ts);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--serve")) return serve(atoi(argv[2]));
    RUN_TEST(test_table);
    RUN_TEST(test_run_graph_recv_coders);
    RUN_TEST(test_recv_coders);
    RUN_TEST(test_served);
    RUN_TEST(test_limit);
    RUN_TEST(test_replicate_keys);
    RUN_TEST(test_inspect_keys);
    RUN_TEST(test_lost_verdicts);
    RUN_TEST(test_retry_after_failed_step);
    RUN_TEST(test_job_done_counts_each_worker_once);
    RUN_TEST(test_job_done_reply);
    return psg_test_summary();
}
