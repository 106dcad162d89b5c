/* psg_msg_t, the logical wire message: construction, ownership and the transport defaults.
 * Not its encoding (net/header.c, net/codec.c). */
#include "psgraph/wire.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t incarnation_once = PTHREAD_ONCE_INIT;
static uint64_t incarnation;

void psg_wire_random(void *buf, size_t n) {
    if (getrandom(buf, n, 0) == (ssize_t)n) return;
    /* no entropy source: time, pid and a counter, through a 64-bit mix */
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint8_t *b = buf;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
                     ((uint64_t)getpid() << 40) ^ (counter++ * 0x9e3779b97f4a7c15u);
        v ^= v >> 31, v *= 0xbf58476d1ce4e5b9u, v ^= v >> 29;
        memcpy(b + i, &v, n - i < 8 ? n - i : 8);
    }
}

bool psg_conn_open(const psg_conn_t *c) {
    struct stat st;
    if (c->fd < 0) return true;
    if (fstat(c->fd, &st) < 0 || !S_ISSOCK(st.st_mode) || (uint64_t)st.st_ino != c->ino)
        return false;
    /* the peer closed it, though ZeroMQ's I/O thread, busy or starved of the CPU, did not
     * close its descriptor yet: a peer that closes its connections has none open here
     * (a peer never half-closes a ZeroMQ connection: POLLRDHUP is its end) */
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 0 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void draw_incarnation(void) {
    uint64_t v = 0;
    psg_wire_random(&v, sizeof v);
    incarnation = v ? v : 1;
}

uint64_t psg_wire_incarnation(void) {
    pthread_once(&incarnation_once, draw_incarnation);
    return incarnation;
}

void psg_wire_heartbeat(int peer_timeout_ms, int *ivl_ms, int *timeout_ms) {
    int t = peer_timeout_ms == 0 ? PSG_WIRE_PEER_TIMEOUT_MS : peer_timeout_ms;
    if (t < 0) {
        *ivl_ms = *timeout_ms = 0;
        return;
    }
    if (t < 200) t = 200; /* ZeroMQ's timers tick in milliseconds; below this it only churns */
    *ivl_ms = t / 4;
    *timeout_ms = t - *ivl_ms;
}

psg_wire_opts_t psg_wire_opts_default(void) {
    return (psg_wire_opts_t){
        .chunk_above = (size_t)24 << 20,
        .chunk_bytes = (size_t)4 << 20,
        .max_msg_bytes = (size_t)4 << 30,
        .timeout_ms = 30000,
    };
}

psg_msg_t *psg_msg_new(psg_msg_kind_t kind, const char *op) {
    psg_msg_t *m = calloc(1, sizeof *m);
    if (!m) {
        psg_error_set("out of memory");
        return NULL;
    }
    m->kind = kind;
    m->conn.fd = -1;
    if (op && !(m->op = strdup(op))) {
        free(m);
        psg_error_set("out of memory");
        return NULL;
    }
    return m;
}

void psg_msg_destroy(psg_msg_t **mp) {
    if (!mp || !*mp) return;
    psg_msg_t *m = *mp;
    *mp = NULL;
    for (int i = 0; i < m->ntensors; i++) {
        psg_tensor_destroy(&m->tensors[i]);
        free(m->names[i]);
    }
    free(m->tensors);
    free(m->names);
    free(m->op);
    free(m->key);
    free(m->error);
    psg_buffer_unref(&m->body);
    free(m);
}

int psg_msg_add_tensor(psg_msg_t *m, const char *name, psg_tensor_t *t) {
    if (!t) return psg_error_set("psg_msg_add_tensor: NULL tensor");
    if (m->ntensors >= PSG_WIRE_MAX_TENSORS)
        return psg_error_set("a message holds at most %d tensors", PSG_WIRE_MAX_TENSORS);
    if (t->dtype <= PSG_DT_INVALID || t->dtype >= PSG_DT_COUNT || t->dtype == PSG_DT_RESOURCE)
        return psg_error_set("a %s tensor cannot cross the wire", psg_dtype_name(t->dtype));
    if (name && strlen(name) > PSG_WIRE_MAX_KEY)
        return psg_error_set("tensor name over %d bytes", PSG_WIRE_MAX_KEY);
    /* Grow by powers of two: n is a power of two exactly when the arrays are full. */
    int n = m->ntensors;
    if ((n & (n - 1)) == 0) {
        int cap = n ? 2 * n : 1;
        psg_tensor_t **ts = realloc(m->tensors, (size_t)cap * sizeof *ts);
        if (!ts) return psg_error_set("out of memory");
        m->tensors = ts;
        char **ns = realloc(m->names, (size_t)cap * sizeof *ns);
        if (!ns) return psg_error_set("out of memory");
        m->names = ns;
    }
    char *copy = NULL;
    if (name && !(copy = strdup(name))) return psg_error_set("out of memory");
    m->tensors[n] = psg_tensor_ref(t);
    m->names[n] = copy;
    m->ntensors = n + 1;
    return 0;
}

int psg_msg_set_key(psg_msg_t *m, const char *key) {
    if (key && strlen(key) > PSG_WIRE_MAX_KEY)
        return psg_error_set("key over %d bytes", PSG_WIRE_MAX_KEY);
    char *copy = NULL;
    if (key && !(copy = strdup(key))) return psg_error_set("out of memory");
    free(m->key);
    m->key = copy;
    return 0;
}

int psg_msg_set_error(psg_msg_t *m, const char *fmt, ...) {
    char *text = malloc(PSG_WIRE_MAX_ERROR + 1);
    if (!text) return psg_error_set("out of memory");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, PSG_WIRE_MAX_ERROR + 1, fmt, ap);
    va_end(ap);
    free(m->error);
    m->error = text;
    return 0;
}

int psg_msg_set_body(psg_msg_t *m, const void *data, size_t size) {
    psg_buffer_t *b = psg_buffer_new(size);
    if (!b) return -1;
    if (size) memcpy(b->data, data, size);
    psg_buffer_unref(&m->body);
    m->body = b;
    return 0;
}

psg_tensor_t *psg_msg_tensor(const psg_msg_t *m, const char *name) {
    for (int i = 0; i < m->ntensors; i++)
        if (m->names[i] && name && strcmp(m->names[i], name) == 0) return m->tensors[i];
    return NULL;
}
