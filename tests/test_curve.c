/* CURVE between real processes on 127.0.0.1: `psgraph keygen` writes a private key folder
 * and refuses an open one; a `psgraph server` ps task with the cluster's keys serves this
 * process (a worker with the keys), and refuses a client without keys, one with another
 * cluster's keys and one whose key is not in its allow-list: none of them gets a request
 * through (a variable keeps its value, the ps still runs, its request count moves only for
 * the good client), and each refusal is logged once with its reason. A task asked to listen
 * on 0.0.0.0 without keys refuses to start; one on loopback warns once; an ipc:// socket in
 * an open folder is refused. A request names its sender's key. Not the launcher's keys
 * (test_curve_launch.sh). */
#include "core/json.h"
#include "tests/testutil.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *psgraph_exe;
static char tmp[256];

/* Runs a shell command line; returns its exit status and its output (stdout and stderr)
 * in out. */
static int run(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t size, const char *fmt, ...) {
    char cmd[2048], log[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(log, sizeof log, "%s/run.log", tmp);
    char full[2600];
    snprintf(full, sizeof full, "(%s) >'%s' 2>&1", cmd, log);
    int st = system(full);
    out[0] = 0;
    FILE *f = fopen(log, "r");
    if (f) {
        size_t n = fread(out, 1, size - 1, f);
        out[n] = 0;
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static mode_t mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? st.st_mode & 07777 : 0;
}

static void test_keygen(void) {
    char out[4096], path[512];
    CHECK(run(out, sizeof out, "'%s' keygen '%s/keys'", psgraph_exe, tmp) == 0);
    CHECK(strstr(out, "public key "));
    snprintf(path, sizeof path, "%s/keys", tmp);
    CHECK(mode_of(path) == 0700);
    snprintf(path, sizeof path, "%s/keys/cluster.key_secret", tmp);
    CHECK(mode_of(path) == 0600);
    snprintf(path, sizeof path, "%s/keys/cluster.key", tmp);
    CHECK(mode_of(path) != 0);
    /* a folder open to others is refused, named; existing keys are never overwritten */
    CHECK(run(out, sizeof out, "mkdir -m 755 '%s/open' && '%s' keygen '%s/open'", tmp, psgraph_exe,
              tmp) == 1);
    CHECK(strstr(out, "/open is open to other users (mode 0755)"));
    snprintf(path, sizeof path, "%s/open/cluster.key_secret", tmp);
    CHECK(access(path, F_OK) != 0);
    CHECK(run(out, sizeof out, "'%s' keygen '%s/keys'", psgraph_exe, tmp) == 1);
    CHECK(strstr(out, "cluster.key_secret exists"));
    /* a secret readable by others is refused when loaded */
    CHECK(run(out, sizeof out, "'%s' keygen '%s/loose' && chmod 644 '%s/loose/cluster.key_secret'",
              psgraph_exe, tmp, tmp) == 0);
    snprintf(path, sizeof path, "%s/loose", tmp);
    CHECK(psg_curve_keys_load(path, NULL) == NULL);
    CHECK_ERROR_HAS("cluster.key_secret is readable by other users (mode 0644)");
    /* laid out as a Kubernetes Secret (files linked through ..data) but writable: refused
       (a read-only mount passes: tests/test_launch_k8s.sh); only the layout lets it be 1777 */
    CHECK(
        run(out, sizeof out,
            "'%s' keygen '%s/src' && cd '%s' && mkdir -m 1777 k8s && mkdir -m 755 k8s/..2026_01_01 && "
            "install -m 400 src/* k8s/..2026_01_01/ && ln -s ..2026_01_01 k8s/..data && "
            "ln -s ..data/cluster.key k8s/ && ln -s ..data/cluster.key_secret k8s/",
            psgraph_exe, tmp, tmp) == 0);
    snprintf(path, sizeof path, "%s/k8s", tmp);
    CHECK(psg_curve_keys_load(path, NULL) == NULL);
    CHECK_ERROR_HAS(
        "k8s is laid out as a Kubernetes Secret (..data -> ..2026_01_01) but is not on a read-only mount");
    CHECK(run(out, sizeof out, "rm '%s/k8s/..data'", tmp) == 0);
    CHECK(psg_curve_keys_load(path, NULL) == NULL);
    CHECK_ERROR_HAS("k8s is open to other users (mode 1777)");
    /* another cluster's keys; and a client's own pair beside a copy of our public key */
    CHECK(run(out, sizeof out, "'%s' keygen '%s/other'", psgraph_exe, tmp) == 0);
    CHECK(
        run(out, sizeof out,
            "mkdir -m 700 '%s/intruder' && cp '%s/keys/cluster.key' '%s/intruder/' && '%s' keygen "
            "'%s/intruder' --name intruder",
            tmp, tmp, tmp, psgraph_exe, tmp) == 0);
}

/* ---- the ps task and its attackers ---- */

typedef struct {
    psg_graph_t *g;
    psg_replica_setter_t *setter;
    psg_endpoint_t x, read;
    int add;
} model_t;

static void build(model_t *m, const psg_cluster_t *c) {
    m->g = psg_graph_new();
    m->setter = psg_dist_replica_setter_new(c, PSG_PS_GREEDY);
    psg_graph_push_replica_setter(m->g, m->setter);
    psg_shape_t s4 = psg_shape_1d(4);
    psg_endpoint_t w =
        psg_variable(m->g, "w", PSG_DT_F32, &s4, (psg_initializer_t){"zeros", 0, 0}, true);
    m->x = psg_placeholder(m->g, "x", PSG_DT_F32, &s4);
    m->add = psg_assign_add(m->g, "add", w, m->x);
    m->read = psg_read_variable(m->g, "read", w);
    psg_graph_pop_device(m->g);
    CHECK(psg_graph_error(m->g) == NULL);
}

static void model_free(model_t *m) {
    psg_graph_destroy(&m->g);
    psg_replica_setter_destroy(&m->setter);
}

/* A worker of a cluster file: its task server and a session over the model. */
typedef struct {
    psg_cluster_t *c;
    psg_task_server_t *ts;
    model_t m;
    psg_dist_session_t *s;
} worker_t;

/* Joins as worker 0 of `file` (its keys, or none); w->s is NULL on failure. */
static void worker_open(worker_t *w, const char *file, int64_t timeout_ms) {
    memset(w, 0, sizeof *w);
    if (!(w->c = psg_cluster_from_file(file, "worker", 0))) return;
    psg_task_server_options_t so = {.cluster = w->c, .recv_timeout_ms = timeout_ms};
    if (!(w->ts = psg_task_server_new(&so))) return;
    build(&w->m, w->c);
    psg_dist_session_options_t o = {
        .cluster = w->c, .server = w->ts, .step_timeout_ms = timeout_ms};
    w->s = psg_dist_session_new(w->m.g, &o);
}

static void worker_close(worker_t *w) {
    psg_dist_session_destroy(&w->s);
    model_free(&w->m);
    psg_task_server_destroy(&w->ts);
    psg_cluster_destroy(&w->c);
}

/* Adds `delta` to w on the ps as worker 0 of `file`. Returns the step's status. */
static int add_as_worker(const char *file, float delta) {
    worker_t w;
    worker_open(&w, file, 1500);
    float v[4] = {delta, delta, delta, delta};
    psg_shape_t s4 = psg_shape_1d(4);
    psg_tensor_t *x = psg_test_tensor(&s4, v);
    int rc = w.s ? psg_dist_session_run(w.s, 1, &w.m.x, &x, 0, NULL, NULL, 1, &w.m.add) : -1;
    psg_tensor_destroy(&x);
    worker_close(&w);
    return rc;
}

/* A raw Shutdown request, which would stop the ps, by a client with `keys` (NULL: none). */
static psg_msg_t *shutdown_as(int port, const psg_curve_keys_t *keys) {
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    psg_wire_opts_t o = psg_wire_opts_default();
    o.keys = keys;
    psg_client_t *cl = psg_client_new(ep, &o);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_SHUTDOWN);
    psg_msg_t *r = cl ? psg_client_call(cl, &m, 1500) : NULL;
    psg_msg_destroy(&m);
    psg_client_destroy(&cl);
    return r;
}

static double inspect_field(psg_dist_session_t *s, const char *field) {
    char *json = psg_dist_session_inspect(s, "/job:ps/task:0");
    psg_json_t *doc = json ? psg_json_parse(json) : NULL;
    const psg_json_t *f = doc ? psg_json_get(doc, field) : NULL;
    double v = f ? f->number : -1;
    psg_json_free(doc);
    free(json);
    return v;
}

static void write_cluster(const char *file, int ps_port, int worker_port, const char *keys) {
    FILE *f = fopen(file, "w");
    PSG_ASSERT(f);
    fprintf(f,
            "{\"cluster\": {\"ps\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"]}%s%s%s}\n",
            ps_port, worker_port, keys ? ", \"keys\": \"" : "", keys ? keys : "", keys ? "\"" : "");
    fclose(f);
}

static void test_refused_peers(void) {
    int ps_port = psg_test_free_port(), w_port = psg_test_free_port();
    char good[400], plain[400], other[400], log[400], path[400];
    snprintf(good, sizeof good, "%s/cluster.json", tmp);
    snprintf(plain, sizeof plain, "%s/plain.json", tmp);
    snprintf(other, sizeof other, "%s/other.json", tmp);
    snprintf(log, sizeof log, "%s/ps.log", tmp);
    write_cluster(good, ps_port, w_port, "keys"); /* relative to the file's folder */
    write_cluster(plain, ps_port, psg_test_free_port(), NULL);
    write_cluster(other, ps_port, psg_test_free_port(), "other");
    pid_t ps = fork();
    PSG_ASSERT(ps >= 0);
    if (ps == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        unsetenv(PSG_CURVE_KEYS_ENV);
        execl(psgraph_exe, psgraph_exe, "server", "--cluster", good, "--job", "ps", "--task", "0",
              "--idle-timeout", "60", "--expect-workers", "0", (char *)NULL);
        _exit(127);
    }
    worker_t wk;
    worker_open(&wk, good, 10000);
    psg_dist_session_t *s = wk.s;
    model_t m = wk.m;
    CHECK(wk.c && psg_cluster_keys(wk.c) && psg_curve_keys_allowed(psg_cluster_keys(wk.c)) == 1);
    CHECK(s != NULL);
    if (!s) goto out;
    /* the good worker: w = 1 over CURVE (the ps may still be starting: init waits for it) */
    double t0 = psg_test_now_sec();
    while (psg_dist_session_run_init(s) < 0 && psg_test_now_sec() - t0 < 10) usleep(100000);
    float ones[4] = {1, 1, 1, 1};
    psg_shape_t s4 = psg_shape_1d(4);
    psg_tensor_t *x = psg_test_tensor(&s4, ones), *w = NULL;
    CHECK(psg_dist_session_run(s, 1, &m.x, &x, 0, NULL, NULL, 1, &m.add) == 0);
    psg_tensor_destroy(&x);
    /* the ps's request count, once it is still: only Inspect moves it now */
    double received = inspect_field(s, "received"), before = -1;
    for (int i = 0; i < 50 && received != before + 1; i++, usleep(20000)) {
        before = received;
        received = inspect_field(s, "received");
    }
    CHECK(received == before + 1 && inspect_field(s, "refused") == 0);
    received += 1;

    /* the attackers: a worker without keys, one with another cluster's keys */
    CHECK(add_as_worker(plain, 100) < 0);
    CHECK(add_as_worker(other, 100) < 0);
    /* raw clients: no keys, another cluster's keys, a key not in the allow-list */
    snprintf(path, sizeof path, "%s/other", tmp);
    psg_curve_keys_t *wrong = psg_curve_keys_load(path, NULL);
    snprintf(path, sizeof path, "%s/intruder", tmp);
    psg_curve_keys_t *intruder = psg_curve_keys_load(path, "intruder");
    CHECK(wrong && intruder);
    psg_msg_t *r = shutdown_as(ps_port, NULL);
    CHECK(r == NULL);
    CHECK_ERROR_HAS("cannot reach the peer");
    psg_msg_destroy(&r);
    r = shutdown_as(ps_port, wrong);
    CHECK(r == NULL);
    psg_msg_destroy(&r);
    r = intruder ? shutdown_as(ps_port, intruder) : NULL;
    CHECK(r == NULL);
    psg_msg_destroy(&r);

    /* nothing reached the ps: one more request (this Inspect), w is still 1, it runs */
    CHECK(inspect_field(s, "received") == received + 1);
    CHECK(inspect_field(s, "refused") >= 5);
    CHECK(psg_dist_session_run(s, 0, NULL, NULL, 1, &m.read, &w, 0, NULL) == 0);
    if (w) CHECK(psg_tensor_f32(w)[0] == 1.0f && psg_tensor_f32(w)[3] == 1.0f);
    psg_tensor_destroy(&w);
    CHECK(waitpid(ps, NULL, WNOHANG) == 0);
    /* every refusal logged with its reason, once per address and reason (a peer that left
     * before the monitor saw it has its own line, "an address unknown") */
    char text[16384] = "";
    int no_keys = 0, crypto = 0, left = 0;
    /* the socket monitor logs a refused handshake on its own thread: wait for it (5 s at most) */
    for (int tries = 0; tries < 50 && !(no_keys + left >= 1 && crypto >= 1); tries++) {
        if (tries) usleep(100000);
        FILE *f = fopen(log, "r");
        if (f) {
            size_t n = fread(text, 1, sizeof text - 1, f);
            text[n] = 0;
            fclose(f);
        }
        no_keys = count(text, "it does not speak CURVE (a client without keys");
        crypto = count(text, "its hello does not decrypt with this cluster's key");
        /* a client without keys sees the mismatch too: when it hangs up first, the server
         * never reads its greeting and sees a peer that left mid-handshake */
        left = count(text, "closed its connection during the CURVE handshake");
    }
    CHECK(strstr(text, "serving on tcp://127.0.0.1:") && strstr(text, "with CURVE (keys"));
    /* both refusals logged; their reasons can swap when the two handshakes interleave */
    if (!(no_keys >= 1 && crypto >= 1))
        fprintf(stderr, "  reasons logged: plain %d, crypto %d, left %d\n", no_keys, crypto, left);
    CHECK(no_keys + crypto + left >= 2 && no_keys <= 2 && crypto <= 2 && crypto >= 1);
    CHECK(count(text, "is not in the allow-list of") == 1);
    CHECK(intruder && strstr(text, psg_curve_keys_public(intruder)));
    CHECK(strstr(text, "refused a peer at 127.0.0.1: its key"));
    if (psg_test_failures) fprintf(stderr, "ps log:\n%s\n", text);
    psg_curve_keys_destroy(&wrong);
    psg_curve_keys_destroy(&intruder);
    psg_dist_session_job_done(s);
out:
    worker_close(&wk);
    kill(ps, SIGKILL);
    waitpid(ps, NULL, 0);
}

/* ---- who sent a request ---- */

/* The peer_key of a request sent to sv by a client with keys k (NULL: none) into got. */
static void sent_key(psg_server_t *sv, const psg_curve_keys_t *k, char *got, size_t size) {
    psg_wire_opts_t o = psg_wire_opts_default();
    o.keys = k;
    psg_client_t *cl = psg_client_new(psg_server_endpoint(sv), &o);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Inspect"), *in = NULL;
    snprintf(got, size, "(nothing received)");
    if (cl && psg_client_send(cl, &m, NULL) == 0 && psg_server_recv(sv, &in, 10000) == 1)
        snprintf(got, size, "%s", in->peer_key);
    psg_msg_destroy(&in);
    psg_msg_destroy(&m);
    psg_client_destroy(&cl);
}

/* A CURVE server knows each request's sender by the name of its key: NAME of its NAME.key,
 * "cluster" for the cluster's own, the key itself for a file named as keygen never would;
 * "" without CURVE. (The task server's quotas are per key: test_hostile.) */
static void test_peer_key(void) {
    char out[4096], dir[400], alien[400];
    snprintf(dir, sizeof dir, "%s/named", tmp);
    snprintf(alien, sizeof alien, "%s/alien", tmp);
    CHECK(run(out, sizeof out,
              "'%s' keygen '%s' && '%s' keygen '%s' --name worker1 && mkdir -m 700 '%s' && "
              "cp '%s/cluster.key' '%s/' && '%s' keygen '%s' --name worker2 && "
              "cp '%s/worker2.key' '%s/odd+name.key'",
              psgraph_exe, dir, psgraph_exe, dir, alien, dir, alien, psgraph_exe, alien, alien,
              dir) == 0);
    psg_curve_keys_t *cluster = psg_curve_keys_load(dir, NULL),
                     *w1 = psg_curve_keys_load(dir, "worker1"),
                     *w2 = psg_curve_keys_load(alien, "worker2");
    PSG_ASSERT(cluster && w1 && w2);
    psg_wire_opts_t o = psg_wire_opts_default();
    o.keys = cluster;
    psg_server_t *sv = psg_server_new("tcp://127.0.0.1:0", &o);
    PSG_ASSERT(sv);
    const psg_curve_keys_t *as[] = {w1, cluster, w2};
    const char *want[] = {"worker1", PSG_CURVE_CLUSTER, psg_curve_keys_public(w2)};
    for (int i = 0; i < 3; i++) {
        char got[128];
        sent_key(sv, as[i], got, sizeof got);
        if (strcmp(got, want[i]))
            fprintf(stderr, "  key of a request: \"%s\", wanted \"%s\"\n", got, want[i]);
        CHECK(!strcmp(got, want[i]));
    }
    psg_server_destroy(&sv);
    sv = psg_server_new("tcp://127.0.0.1:0", NULL); /* loopback, plain frames */
    PSG_ASSERT(sv);
    char got[128];
    sent_key(sv, NULL, got, sizeof got);
    CHECK(!strcmp(got, ""));
    psg_server_destroy(&sv);
    psg_curve_keys_destroy(&cluster);
    psg_curve_keys_destroy(&w1);
    psg_curve_keys_destroy(&w2);
}

/* ---- the guard in this process: counts, log lines, several servers, ZAP ---- */

typedef struct {
    pthread_mutex_t lock;
    char text[32768];
} net_log_t;

static void collect(void *ctx, const char *line) {
    net_log_t *l = ctx;
    pthread_mutex_lock(&l->lock);
    size_t n = strlen(l->text);
    snprintf(l->text + n, sizeof l->text - n, "%s\n", line);
    pthread_mutex_unlock(&l->lock);
}

/* How many times needle is in the log now. */
static int logged(net_log_t *l, const char *needle) {
    pthread_mutex_lock(&l->lock);
    int n = count(l->text, needle);
    pthread_mutex_unlock(&l->lock);
    return n;
}

/* One request from a client with keys k (NULL: none) to sv, refused or not: the answer is
 * not waited for long. */
static void knock(psg_server_t *sv, const psg_curve_keys_t *k) {
    psg_wire_opts_t o = psg_wire_opts_default();
    o.keys = k;
    psg_client_t *cl = psg_client_new(psg_server_endpoint(sv), &o);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Inspect");
    psg_msg_t *r = cl ? psg_client_call(cl, &m, 300) : NULL;
    psg_msg_destroy(&r);
    psg_msg_destroy(&m);
    psg_client_destroy(&cl);
}

/* A ZAP request by hand (RFC 27); the reply's status code into code. */
static void zap_ask(const char *version, const char *domain, const char *mechanism, const void *key,
                    size_t key_len, char *code, size_t size, char *user, size_t user_size) {
    zsock_t *req = zsock_new_req(">inproc://zeromq.zap.01");
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, version);
    zmsg_addstr(m, "7");
    zmsg_addstr(m, domain);
    zmsg_addstr(m, "192.0.2.9");
    zmsg_addmem(m, "", 0);
    zmsg_addstr(m, mechanism);
    zmsg_addmem(m, key, key_len);
    snprintf(code, size, "(no reply)");
    zsock_set_rcvtimeo(req, 5000);
    zmsg_t *r = req && zmsg_send(&m, req) == 0 ? zmsg_recv(req) : NULL;
    zmsg_destroy(&m);
    char *f[5] = {NULL};
    for (int i = 0; r && i < 5; i++) f[i] = zmsg_popstr(r);
    if (f[2]) snprintf(code, size, "%s", f[2]);
    if (user) snprintf(user, user_size, "%s", f[4] ? f[4] : "");
    for (int i = 0; i < 5; i++) free(f[i]);
    zmsg_destroy(&r);
    zsock_destroy(&req);
}

/* Three CURVE servers of one process share one guard: a refusal is counted by its own server
 * and logged once per address and reason naming that server's bound endpoint and the peer's
 * address; the guard keeps watching the others when one goes; it answers ZAP requests
 * that are malformed, of another socket, of another mechanism or of a key not allowed; and a
 * process whose ZAP endpoint is taken gets a clear error, as often as it asks. */
static void test_guard_in_process(void) {
    char out[4096], dir_a[400], dir_b[400], dir_i[400];
    snprintf(dir_a, sizeof dir_a, "%s/guard_a", tmp);
    snprintf(dir_b, sizeof dir_b, "%s/guard_b", tmp);
    snprintf(dir_i, sizeof dir_i, "%s/guard_i", tmp);
    /* the intruder knows the cluster's public key, not its own in the allow-list */
    CHECK(
        run(out, sizeof out,
            "'%s' keygen '%s' && '%s' keygen '%s' && mkdir -m 700 '%s' && cp '%s/cluster.key' '%s/' && "
            "'%s' keygen '%s' --name intruder",
            psgraph_exe, dir_a, psgraph_exe, dir_b, dir_i, dir_a, dir_i, psgraph_exe, dir_i) == 0);
    psg_curve_keys_t *a = psg_curve_keys_load(dir_a, NULL), *b = psg_curve_keys_load(dir_b, NULL),
                     *in = psg_curve_keys_load(dir_i, "intruder");
    PSG_ASSERT(a && b && in);
    static net_log_t log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    psg_net_set_log(collect, &log);
    psg_wire_opts_t o = psg_wire_opts_default();
    o.keys = a;
    psg_server_t *one = psg_server_new("tcp://127.0.0.1:0", &o),
                 *two = psg_server_new("tcp://127.0.0.1:0", &o),
                 *three = psg_server_new("tcp://127.0.0.1:0", &o);
    PSG_ASSERT(one && two && three);
    char line[512];
    /* an intruder knocks at the second server three times: 3 refusals there, one log line
     * naming the server as bound (its port, not 0), the peer and the key */
    for (int i = 0; i < 3; i++) knock(two, in);
    for (int i = 0; i < 50 && psg_server_stats(two).refused < 3; i++) usleep(100000);
    CHECK(psg_server_stats(two).refused >= 3 && psg_server_stats(one).refused == 0);
    snprintf(line, sizeof line,
             "%s: refused a peer at 127.0.0.1: its key %s is not in the allow-list of %s",
             psg_server_endpoint(two), psg_curve_keys_public(in), dir_a);
    CHECK(logged(&log, line) == 1 && logged(&log, "is not in the allow-list") == 1);
    /* the last server goes, then the first: the others are still watched. Another cluster's
     * client (its hello does not decrypt) is refused by its handshake, counted, and logged
     * with its address, while a good client is connected (its connection in the guard's
     * table first) */
    psg_server_destroy(&three);
    psg_client_t *good = psg_client_new(psg_server_endpoint(one), &o);
    psg_msg_t *hello = psg_msg_new(PSG_MSG_REQUEST, "Inspect"), *got = NULL;
    CHECK(good && psg_client_send(good, &hello, NULL) == 0 &&
          psg_server_recv(one, &got, 10000) == 1);
    psg_msg_destroy(&got);
    psg_msg_destroy(&hello);
    snprintf(line, sizeof line, "%s: refused a peer at 127.0.0.1: its hello does not decrypt",
             psg_server_endpoint(one));
    for (int i = 0; i < 20 && logged(&log, line) == 0; i++) knock(one, b);
    CHECK(logged(&log, line) == 1);
    CHECK(psg_server_stats(one).refused >= 1);
    psg_client_destroy(&good);
    psg_server_destroy(&one);
    snprintf(line, sizeof line, "%s: refused a peer at 127.0.0.1: its hello does not decrypt",
             psg_server_endpoint(two));
    for (int i = 0; i < 20 && logged(&log, line) == 0; i++) knock(two, b);
    CHECK(logged(&log, line) == 1);
    CHECK(psg_server_stats(two).refused >= 4);
    /* ZAP by hand, for this server's domain (the guard answers: it never hangs libzmq) */
    char domain[64] = "", code[32], user[64];
    size_t len = sizeof domain - 1;
    CHECK(zmq_getsockopt(psg_server_socket(two), ZMQ_ZAP_DOMAIN, domain, &len) == 0 && domain[0]);
    unsigned char key[32];
    CHECK(zmq_z85_decode(key, psg_curve_keys_public(a)) != NULL);
    zap_ask("1.0", domain, "CURVE", key, 32, code, sizeof code, user, sizeof user);
    CHECK(!strcmp(code, "200") && !strcmp(user, PSG_CURVE_CLUSTER));
    zap_ask("2.0", domain, "CURVE", key, 32, code, sizeof code, NULL, 0);
    CHECK(!strcmp(code, "500"));
    zap_ask("1.0", "another-socket", "CURVE", key, 32, code, sizeof code, user, sizeof user);
    CHECK(!strcmp(code, "200") && !strcmp(user, ""));
    zap_ask("1.0", domain, "CURVE", key, 31, code, sizeof code, NULL, 0);
    CHECK(!strcmp(code, "400"));
    zap_ask("1.0", domain, "PLAIN", key, 32, code, sizeof code, NULL, 0);
    CHECK(!strcmp(code, "400"));
    snprintf(line, sizeof line, "%s: refused a peer at 192.0.2.9: it does not speak CURVE",
             psg_server_endpoint(two));
    CHECK(logged(&log, line) == 1);
    psg_server_destroy(&two);
    /* the ZAP endpoint taken by another handler: refused by name, again and again; free
     * again at once when the guard or the other handler closes */
    zsock_t *other = zsock_new_rep("@inproc://zeromq.zap.01");
    CHECK(other != NULL);
    for (int i = 0; i < 2; i++) {
        psg_server_t *sv = psg_server_new("tcp://127.0.0.1:0", &o);
        CHECK(sv == NULL);
        CHECK_ERROR_HAS(
            "cannot start the CURVE authentication handler: inproc://zeromq.zap.01 is taken");
        psg_server_destroy(&sv);
    }
    if (other) zsock_unbind(other, "inproc://zeromq.zap.01");
    zsock_destroy(&other);
    psg_server_t *sv = psg_server_new("tcp://127.0.0.1:0", &o);
    CHECK(sv != NULL);
    psg_server_destroy(&sv);
    psg_net_set_log(NULL, NULL);
    if (psg_test_failures) fprintf(stderr, "the log:\n%s", log.text);
    psg_curve_keys_destroy(&a);
    psg_curve_keys_destroy(&b);
    psg_curve_keys_destroy(&in);
}

/* ---- the guard's table of connections ---- */

/* A TCP connection to the server's port from address `from` (127.0.0.x) that speaks no ZMTP
 * unless told to; -1 when it cannot be made. */
static int raw_connect(const psg_server_t *sv, const char *from) {
    const char *colon = strrchr(psg_server_endpoint(sv), ':');
    struct sockaddr_in self = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    to.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    inet_pton(AF_INET, from, &self.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&self, sizeof self) < 0 ||
                    connect(fd, (struct sockaddr *)&to, sizeof to) < 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Whether the server closed fd (read to its end within 10 s: its greeting, then nothing). */
static bool closed_by_server(int fd) {
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
    }
    return n == 0;
}

/* Whether the server's greeting began on fd (its 10-byte signature, sent on accept): the
 * server took the connection. */
static bool greeted_by_server(int fd) {
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    unsigned char sig[10];
    size_t got = 0;
    ssize_t n = 1;
    while (got < sizeof sig && (n = read(fd, sig + got, sizeof sig - got)) > 0) got += (size_t)n;
    return got == sizeof sig && sig[0] == 0xff && sig[9] == 0x7f;
}

/* A client that has finished its handshake with sv (its request arrived). */
static psg_client_t *client_through(psg_server_t *sv, const psg_wire_opts_t *o) {
    psg_client_t *c = psg_client_new(psg_server_endpoint(sv), o);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Inspect"), *got = NULL;
    bool ok = c && psg_client_send(c, &m, NULL) == 0 && psg_server_recv(sv, &got, 10000) == 1;
    psg_msg_destroy(&m);
    psg_msg_destroy(&got);
    if (!ok) psg_client_destroy(&c);
    return c;
}

/* A CURVE server on 127.0.0.1 with new keys in tmp/name (*k, the caller's to destroy) and a
 * cap of `cap` connections (its options in *o); the guard's lines go to log from now on. */
static psg_server_t *capped_server(const char *name, int cap, net_log_t *log, psg_curve_keys_t **k,
                                   psg_wire_opts_t *o) {
    char dir[400], out[4096];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    CHECK(run(out, sizeof out, "'%s' keygen '%s'", psgraph_exe, dir) == 0);
    *k = psg_curve_keys_load(dir, NULL);
    PSG_ASSERT(*k);
    psg_net_set_log(collect, log);
    *o = psg_wire_opts_default();
    o->keys = *k;
    o->max_connections = cap;
    psg_server_t *sv = psg_server_new("tcp://127.0.0.1:0", o);
    PSG_ASSERT(sv);
    return sv;
}

/* A server's table of its connections, in process (test_hostile_graphs caps a psgraph server
 * with 100 sockets): at a cap of 2, connections past it are closed (idle sockets end, by the
 * cap or at the latest by the server's 10 s handshake limit), the cap is logged once, and the
 * clients are served after it (which ones the cap closes: test_cap_spares_clients). A
 * refused peer is logged with its own address when another connection came after it
 * (127.0.0.2 speaks plain ZMTP to a CURVE server after a client from 127.0.0.1 connected);
 * one that hangs up mid-handshake is logged as one that left, not counted. The guard watches
 * at most 256 servers. A process that makes and closes 300 servers, one open all along (its
 * guard stays), still gets a new one. */
static void test_connection_table(void) {
    char line[512];
    static net_log_t log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    psg_curve_keys_t *k = NULL;
    psg_wire_opts_t o;
    psg_server_t *sv = capped_server("table", 2, &log, &k, &o);
    psg_client_t *a = client_through(sv, &o);
    int i1 = raw_connect(sv, "127.0.0.1");
    CHECK(a && i1 >= 0);
    usleep(200000); /* i1 in the table before i2 */
    int i2 = raw_connect(sv, "127.0.0.1");
    CHECK(i2 >= 0 && closed_by_server(i1));
    psg_client_t *b = client_through(sv, &o); /* at the cap again */
    CHECK(b && closed_by_server(i2));
    int i3 = raw_connect(sv, "127.0.0.1");
    CHECK(i3 >= 0 && closed_by_server(i3));
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Inspect"), *got = NULL;
    CHECK(a && psg_client_send(a, &m, NULL) == 0 && psg_server_recv(sv, &got, 10000) == 1);
    psg_msg_destroy(&got);
    psg_msg_destroy(&m);
    snprintf(line, sizeof line, "%s: 2 connections open, at its cap of 2", psg_server_endpoint(sv));
    CHECK(logged(&log, line) == 1 && logged(&log, "at its cap of") == 1);
    int fds[] = {i1, i2, i3};
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0) close(fds[i]);
    psg_client_destroy(&a);
    psg_client_destroy(&b);
    psg_server_destroy(&sv);

    o.max_connections = 0;
    sv = psg_server_new("tcp://127.0.0.1:0", &o);
    PSG_ASSERT(sv);
    int x = raw_connect(sv, "127.0.0.2");
    usleep(200000);
    a = client_through(sv, &o);
    CHECK(x >= 0 && a);
    /* ZMTP 3.0's greeting with the NULL mechanism: signature, version, mechanism, filler */
    unsigned char greeting[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0, 'N', 'U', 'L', 'L'};
    CHECK(x >= 0 && write(x, greeting, sizeof greeting) == (ssize_t)sizeof greeting &&
          closed_by_server(x));
    snprintf(line, sizeof line, "%s: refused a peer at 127.0.0.2: it does not speak CURVE",
             psg_server_endpoint(sv));
    for (int i = 0; i < 50 && logged(&log, line) == 0; i++) usleep(100000);
    CHECK(logged(&log, line) == 1);
    if (x >= 0) close(x);
    psg_client_destroy(&a);
    /* a peer that hangs up mid-handshake (its CURVE greeting sent): logged as one that left,
     * by its address, and not counted as refused */
    unsigned char curve_greeting[64] = {0xff, 0, 0, 0,   0,   0,   0,   0,  1,
                                        0x7f, 3, 0, 'C', 'U', 'R', 'V', 'E'};
    uint64_t refused = psg_server_stats(sv).refused;
    int y = raw_connect(sv, "127.0.0.3");
    CHECK(y >= 0 && write(y, curve_greeting, 64) == 64 && greeted_by_server(y));
    /* the guard learns y's address from its ACCEPTED event, on its own thread: a y gone before
     * that is "a peer at an address unknown" (under load: 1 ASan run in 7, and a suite) */
    usleep(500000);
    if (y >= 0) close(y);
    snprintf(line, sizeof line,
             "%s: a peer at 127.0.0.3 closed its connection during the CURVE handshake",
             psg_server_endpoint(sv));
    for (int i = 0; i < 50 && logged(&log, line) == 0; i++) usleep(100000);
    CHECK(logged(&log, line) == 1 && psg_server_stats(sv).refused == refused);

    /* the guard watches 256 servers: a CURVE server past them fails (it would run open: its
     * ZAP domain unknown to the guard, every key let in), one fits again when one goes */
    static psg_server_t *open[300];
    int made = 0;
    while (made < 300 && (open[made] = psg_server_new("tcp://127.0.0.1:0", &o)) != NULL) made++;
    CHECK(made == 255);
    CHECK_ERROR_HAS("cannot watch the connections of tcp://127.0.0.1:0");
    /* a plain server there runs unwatched, and serves (no monitor left on its socket: one
     * that no one reads would stop ZeroMQ's I/O thread at the first connection) */
    psg_wire_opts_t po = psg_wire_opts_default();
    psg_server_t *plain = psg_server_new("tcp://127.0.0.1:0", &po);
    psg_client_t *pc = plain ? client_through(plain, &po) : NULL;
    CHECK(plain && pc);
    psg_client_destroy(&pc);
    psg_server_destroy(&plain);
    psg_server_destroy(&open[0]);
    CHECK((open[0] = psg_server_new("tcp://127.0.0.1:0", &o)) != NULL);
    for (int i = 0; i < made; i++) psg_server_destroy(&open[i]);
    made = 0;
    for (int i = 0; i < 300; i++) {
        psg_server_t *s = psg_server_new("tcp://127.0.0.1:0", &o);
        made += s != NULL;
        psg_server_destroy(&s);
    }
    CHECK(made == 300);
    psg_server_destroy(&sv);
    psg_net_set_log(NULL, NULL);
    if (psg_test_failures) fprintf(stderr, "the log:\n%s", log.text);
    psg_curve_keys_destroy(&k);
}

/* A TCP relay between one client and a server that passes the client's first `limit` bytes
 * and no more (the server's all): a real CURVE client through it stops mid-handshake there.
 * Its connection to the server is made first, by relay_start. */
typedef struct {
    int listen_fd, up_fd, port;
    size_t limit;
    atomic_size_t up, down; /* bytes passed to the server, from it */
    atomic_bool stop;
    pthread_t thread;
} relay_t;

static void *relay_main(void *arg) {
    relay_t *r = arg;
    int client = -1;
    struct pollfd p = {.fd = r->listen_fd, .events = POLLIN};
    while (!atomic_load(&r->stop) && client < 0)
        if (poll(&p, 1, 100) == 1) client = accept(r->listen_fd, NULL, NULL);
    close(r->listen_fd); /* the client's reconnects are refused */
    struct pollfd ps[2] = {{.fd = client, .events = POLLIN}, {.fd = r->up_fd, .events = POLLIN}};
    char buf[4096];
    while (client >= 0 && !atomic_load(&r->stop)) {
        if (poll(ps, 2, 100) <= 0) continue;
        if (ps[0].revents) {
            ssize_t n = read(client, buf, sizeof buf);
            if (n <= 0) break;
            size_t pass = atomic_load(&r->up) >= r->limit ? 0 : r->limit - atomic_load(&r->up);
            if ((size_t)n < pass) pass = (size_t)n;
            if (pass && write(r->up_fd, buf, pass) != (ssize_t)pass) break;
            atomic_fetch_add(&r->up, pass);
        }
        if (ps[1].revents) {
            ssize_t n = read(r->up_fd, buf, sizeof buf);
            if (n <= 0 || write(client, buf, (size_t)n) != n) break;
            atomic_fetch_add(&r->down, (size_t)n);
        }
    }
    if (client >= 0) close(client);
    return NULL;
}

/* Connects the relay to sv (from 127.0.0.1) and listens for its client on a port of its own;
 * -1 when it cannot. */
static int relay_start(relay_t *r, const psg_server_t *sv, size_t limit) {
    memset(r, 0, sizeof *r);
    r->limit = limit;
    r->up_fd = raw_connect(sv, "127.0.0.1");
    r->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof a;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (r->up_fd < 0 || r->listen_fd < 0 ||
        bind(r->listen_fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(r->listen_fd, 1) < 0 ||
        getsockname(r->listen_fd, (struct sockaddr *)&a, &al) < 0 ||
        pthread_create(&r->thread, NULL, relay_main, r) != 0) {
        if (r->up_fd >= 0) close(r->up_fd);
        if (r->listen_fd >= 0) close(r->listen_fd);
        return -1;
    }
    r->port = ntohs(a.sin_port);
    return 0;
}

static void relay_stop(relay_t *r) {
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    close(r->up_fd);
}

/* "127.0.0.1:port" of fd's own end (self) or its peer's. */
static void addr_of(int fd, bool self, char *out, size_t size) {
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    char host[INET_ADDRSTRLEN] = "?";
    int rc = self ? getsockname(fd, (struct sockaddr *)&a, &al)
                  : getpeername(fd, (struct sockaddr *)&a, &al);
    if (rc == 0) inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    snprintf(out, size, "%s:%u", host, rc == 0 ? (unsigned)ntohs(a.sin_port) : 0u);
}

/* One request from c that sv receives: the connection it came by. */
static psg_conn_t request_conn(psg_client_t *c, psg_server_t *sv) {
    psg_conn_t conn = {.fd = -1};
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Inspect"), *got = NULL;
    if (c && psg_client_send(c, &m, NULL) == 0 && psg_server_recv(sv, &got, 10000) == 1)
        conn = got->conn;
    psg_msg_destroy(&m);
    psg_msg_destroy(&got);
    return conn;
}

/* At the cap (CURVE, cap 4) the connections closed are the idle ones, never an authenticated
 * client: one client is served, then come a real client stopped mid-handshake (greeting,
 * HELLO, WELCOME back, a third of its INITIATE), a socket that sent only a CURVE greeting,
 * and 4 that sent nothing. The first three of those are closed, in that order, each named in
 * the log by address and port; the client's next request comes by the same connection, and
 * a new client is served at the cap. (Before, the guard never knew a handshake finished and
 * closed the oldest connection: the served client.) */
static void test_cap_spares_clients(void) {
    char line[600], name[64];
    static net_log_t log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    psg_curve_keys_t *k = NULL;
    psg_wire_opts_t o;
    psg_server_t *sv = capped_server("cap", 4, &log, &k, &o);
    const char *ep = psg_server_endpoint(sv);
    psg_client_t *a = psg_client_new(ep, &o);
    psg_conn_t first = request_conn(a, sv);
    char a_addr[64] = "none";
    if (first.fd >= 0) addr_of(first.fd, false, a_addr, sizeof a_addr);
    CHECK(first.fd >= 0);
    /* stopped mid-handshake: greeting 64 + HELLO 202 + 100 bytes of INITIATE */
    relay_t r;
    bool relayed = relay_start(&r, sv, 64 + 202 + 100) == 0;
    CHECK(relayed);
    char ep_r[64];
    snprintf(ep_r, sizeof ep_r, "tcp://127.0.0.1:%d", r.port);
    psg_client_t *mid = psg_client_new(ep_r, &o);
    for (int i = 0; i < 100 && (atomic_load(&r.up) < r.limit || atomic_load(&r.down) < 64 + 170);
         i++)
        usleep(100000);
    CHECK(atomic_load(&r.up) == r.limit && atomic_load(&r.down) == 64 + 170);
    /* a CURVE greeting (ZMTP 3.0: signature, version, mechanism, as-server 0, filler), then
     * nothing: the server's greeting read back */
    int greeted = raw_connect(sv, "127.0.0.1");
    unsigned char greeting[64] = {0xff, 0, 0, 0,   0,   0,   0,   0,  1,
                                  0x7f, 3, 0, 'C', 'U', 'R', 'V', 'E'};
    size_t back = 0;
    ssize_t n = 1;
    CHECK(greeted >= 0 && write(greeted, greeting, sizeof greeting) == (ssize_t)sizeof greeting);
    while (greeted >= 0 && back < 64 && (n = read(greeted, line, 64 - back)) > 0) back += (size_t)n;
    CHECK(back == 64);
    enum { IDLE = 4 };
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++) CHECK((idle[i] = raw_connect(sv, "127.0.0.1")) >= 0);
    /* closed at the cap: the stopped client, the greeting, the first idle socket */
    CHECK(closed_by_server(greeted) && closed_by_server(idle[0]));
    addr_of(relayed ? r.up_fd : -1, true, name, sizeof name);
    snprintf(line, sizeof line,
             "%s: closed the connection of %s at the cap: it never finished its "
             "CURVE handshake",
             ep, name);
    CHECK(logged(&log, line) == 1);
    int fds[] = {greeted, idle[0]};
    for (int i = 0; i < 2; i++) {
        addr_of(fds[i], true, name, sizeof name);
        snprintf(line, sizeof line, "closed the connection of %s at the cap", name);
        CHECK(logged(&log, line) == 1);
    }
    CHECK(logged(&log, "closed the connection of") == 3);
    /* the client's next request comes by the same connection, never closed */
    psg_conn_t again = request_conn(a, sv);
    CHECK(again.fd == first.fd && again.ino == first.ino);
    snprintf(line, sizeof line, "of %s at the cap", a_addr);
    CHECK(logged(&log, line) == 0);
    /* a new client at the cap: served, idle[1] closed for it */
    psg_client_t *b = psg_client_new(ep, &o);
    CHECK(request_conn(b, sv).fd >= 0 && closed_by_server(idle[1]));
    CHECK(request_conn(a, sv).ino == first.ino);
    if (psg_test_failures) fprintf(stderr, "the log:\n%s", log.text);
    psg_client_destroy(&mid);
    if (relayed) relay_stop(&r);
    if (greeted >= 0) close(greeted);
    for (int i = 0; i < IDLE; i++)
        if (idle[i] >= 0) close(idle[i]);
    psg_client_destroy(&a);
    psg_client_destroy(&b);
    psg_server_destroy(&sv);
    psg_net_set_log(NULL, NULL);
    psg_curve_keys_destroy(&k);
}

/* At the cap with no finished handshake among the open connections, the OLDEST is closed for
 * each new one, in the order they came (cap 2: s1 s2 open, s3 closes s1, s4 closes s2), each
 * named in the log when it is closed: not a later one that also never finished. */
static void test_cap_closes_the_oldest(void) {
    char line[600], name[4][64];
    static net_log_t log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    psg_curve_keys_t *k = NULL;
    psg_wire_opts_t o;
    psg_server_t *sv = capped_server("oldest", 2, &log, &k, &o);
    int s[4];
    for (int i = 0; i < 4; i++) {
        CHECK((s[i] = raw_connect(sv, "127.0.0.1")) >= 0);
        addr_of(s[i], true, name[i], sizeof name[i]);
        if (i < 2) CHECK(greeted_by_server(s[i])); /* accepted before the next one comes */
        if (i < 2) continue;
        CHECK(closed_by_server(s[i - 2]));
        snprintf(line, sizeof line, "%s: closed the connection of %s at the cap",
                 psg_server_endpoint(sv), name[i - 2]);
        CHECK(logged(&log, line) == 1);
        CHECK(logged(&log, "closed the connection of") == i - 1);
    }
    for (int i = 2; i < 4; i++) { /* the two newest: still open, never named */
        snprintf(line, sizeof line, "of %s at the cap", name[i]);
        CHECK(logged(&log, line) == 0);
    }
    if (psg_test_failures) fprintf(stderr, "the log:\n%s", log.text);
    for (int i = 0; i < 4; i++)
        if (s[i] >= 0) close(s[i]);
    psg_server_destroy(&sv);
    psg_net_set_log(NULL, NULL);
    psg_curve_keys_destroy(&k);
}

/* ---- refusing to run open ---- */

static void test_listen_rules(void) {
    char out[4096];
    int port = psg_test_free_port();
    /* 0.0.0.0 without keys: refused, nothing bound, the way out named */
    CHECK(
        run(out, sizeof out,
            "unset PSGRAPH_KEYS; '%s' server --task-name /job:ps/task:0 --listen tcp://0.0.0.0:%d",
            psgraph_exe, port) == 1);
    char want[96];
    snprintf(want, sizeof want, "refusing to listen on tcp://0.0.0.0:%d without keys", port);
    CHECK(strstr(out, want) && strstr(out, "psgraph keygen DIR") && strstr(out, "--insecure"));
    /* a worker whose cluster puts it on 0.0.0.0: the same */
    char file[400];
    snprintf(file, sizeof file, "%s/open.json", tmp);
    FILE *f = fopen(file, "w");
    fprintf(f, "{\"cluster\": {\"ps\": [\"127.0.0.1:%d\"], \"worker\": [\"0.0.0.0:%d\"]}}\n", port,
            port + 1);
    fclose(f);
    CHECK(
        run(out, sizeof out,
            "unset PSGRAPH_KEYS; '%s' train --model mlp --data synthetic --steps 1 --cluster '%s' "
            "--job worker --task 0",
            psgraph_exe, file) == 1);
    snprintf(want, sizeof want, "refusing to listen on tcp://0.0.0.0:%d without keys", port + 1);
    CHECK(strstr(out, want));
    /* loopback without keys: one warning */
    CHECK(run(out, sizeof out,
              "unset PSGRAPH_KEYS; '%s' server --task-name /job:ps/task:0 --listen "
              "tcp://127.0.0.1:%d --idle-timeout 0.3",
              psgraph_exe, port) == 0);
    CHECK(count(out, "warning: tcp://127.0.0.1:") == 1 &&
          strstr(out, "takes plain frames, without keys"));
    /* ipc://: plain frames in a private folder only */
    psg_server_t *sv = psg_server_new("ipc:///tmp/psg_test_curve_open.sock", NULL);
    CHECK(sv == NULL);
    CHECK_ERROR_HAS("its folder /tmp is open to other users");
    char ep[400];
    snprintf(ep, sizeof ep, "ipc://%s/ok.sock", tmp);
    sv = psg_server_new(ep, NULL);
    CHECK(sv != NULL);
    psg_server_destroy(&sv);
    CHECK(psg_curve_listen_check("tcp://[::1]:5", NULL, false) == 1);
    CHECK(psg_curve_listen_check("tcp://10.0.0.1:5", NULL, false) < 0);
    CHECK(psg_curve_listen_check("tcp://10.0.0.1:5", NULL, true) == 0);
    CHECK(psg_curve_listen_check("tcp://*:5", NULL, false) < 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_curve PATH/TO/psgraph\n");
        return 2;
    }
    psgraph_exe = argv[1];
    snprintf(tmp, sizeof tmp, "/tmp/psg_test_curve_XXXXXX");
    PSG_ASSERT(mkdtemp(tmp));
    unsetenv(PSG_CURVE_KEYS_ENV);
    /* 256 servers under the guard hold 768 sockets at once (test_connection_table), and closed
     * ones count until ZeroMQ's reaper gets to them: more room than czmq's 1024 */
    zsys_set_max_sockets(4096);
    RUN_TEST(test_keygen);
    RUN_TEST(test_refused_peers);
    RUN_TEST(test_peer_key);
    RUN_TEST(test_guard_in_process);
    RUN_TEST(test_connection_table);
    RUN_TEST(test_cap_spares_clients);
    RUN_TEST(test_cap_closes_the_oldest);
    RUN_TEST(test_listen_rules);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp);
    return psg_test_summary();
}
