/* The records of which update of each writer every variable holds (ps/applied.h): a table of
 * (variable, writer) -> SEQ with an index by pair and a chain per variable, under one lock.
 * Not the forward that carries them (ps/replicate.c). */
#include "ps/applied.h"

#include "core/strmap.h"
#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *pair; /* "VAR\x1fWRITER", the index's key */
    size_t var_len;
    int64_t seq;
    int next; /* the next record of the same variable, -1: none */
} record_t;

typedef struct {
    char *var;
    int first;
    char *last_writer; /* the update that wrote the variable last (NULL: not known) */
    int64_t last_seq;
    psg_tensor_t *pre; /* the variable's value before it */
} head_t;

struct psg_applied {
    pthread_mutex_t lock;
    psg_strmap_t *by_pair, *by_var; /* -> index into recs, heads */
    record_t *recs;
    int n, cap;
    head_t *heads;
    int n_heads, cap_heads;
};

psg_applied_t *psg_applied_new(void) {
    psg_applied_t *a = calloc(1, sizeof *a);
    if (!a || !(a->by_pair = psg_strmap_new()) || !(a->by_var = psg_strmap_new())) {
        if (a) psg_strmap_destroy(&a->by_pair);
        free(a);
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&a->lock, NULL);
    return a;
}

void psg_applied_destroy(psg_applied_t **ap) {
    if (!ap || !*ap) return;
    psg_applied_t *a = *ap;
    *ap = NULL;
    psg_strmap_destroy(&a->by_pair);
    psg_strmap_destroy(&a->by_var);
    for (int i = 0; i < a->n; i++) free(a->recs[i].pair);
    for (int i = 0; i < a->n_heads; i++) {
        free(a->heads[i].var);
        free(a->heads[i].last_writer);
        psg_tensor_destroy(&a->heads[i].pre);
    }
    free(a->recs);
    free(a->heads);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

static char *make_pair(const char *var, const char *writer) {
    size_t lv = strlen(var), lw = strlen(writer);
    char *p = malloc(lv + lw + 2);
    if (!p) return NULL;
    memcpy(p, var, lv);
    p[lv] = 0x1f;
    memcpy(p + lv + 1, writer, lw + 1);
    return p;
}

/* The record of (var, writer), made when absent; -1 on out of memory. Under lock. */
static int find_locked(psg_applied_t *a, const char *var, const char *writer, bool make) {
    char *pair = make_pair(var, writer);
    if (!pair) return -1;
    int i = psg_strmap_get(a->by_pair, pair);
    if (i >= 0 || !make) {
        free(pair);
        return i;
    }
    int h = psg_strmap_get(a->by_var, var);
    if (h < 0) {
        if (a->n_heads == a->cap_heads) {
            int cap = a->cap_heads ? 2 * a->cap_heads : 16;
            head_t *v = realloc(a->heads, (size_t)cap * sizeof *v);
            if (!v) goto oom;
            a->heads = v;
            a->cap_heads = cap;
        }
        char *name = strdup(var);
        if (!name) goto oom;
        if (psg_strmap_put(a->by_var, name, a->n_heads) == -2) {
            free(name);
            goto oom;
        }
        a->heads[a->n_heads] = (head_t){name, -1, NULL, 0, NULL};
        h = a->n_heads++;
    }
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        record_t *v = realloc(a->recs, (size_t)cap * sizeof *v);
        if (!v) goto oom;
        a->recs = v;
        a->cap = cap;
    }
    if (psg_strmap_put(a->by_pair, pair, a->n) == -2) goto oom;
    a->recs[a->n] = (record_t){pair, strlen(var), -1, a->heads[h].first};
    a->heads[h].first = a->n;
    return a->n++;
oom:
    free(pair);
    return -1;
}

int64_t psg_applied_get(psg_applied_t *a, const char *var, const char *writer) {
    pthread_mutex_lock(&a->lock);
    int i = find_locked(a, var, writer, false);
    int64_t seq = i >= 0 ? a->recs[i].seq : -1;
    pthread_mutex_unlock(&a->lock);
    return seq;
}

int psg_applied_set(psg_applied_t *a, const char *var, const char *writer, int64_t seq) {
    pthread_mutex_lock(&a->lock);
    int i = find_locked(a, var, writer, true);
    if (i >= 0 && seq > a->recs[i].seq) a->recs[i].seq = seq;
    pthread_mutex_unlock(&a->lock);
    return i >= 0 ? 0 : psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
}

static void dump_one(const record_t *r, psg_strbuf_t *b) {
    if (!r->pair[r->var_len + 1]) return; /* a head's placeholder */
    psg_strbuf_printf(b, "%.*s\t%s\t%" PRId64 "\n", (int)r->var_len, r->pair,
                      r->pair + r->var_len + 1, r->seq);
}

void psg_applied_dump(psg_applied_t *a, const char *var, psg_strbuf_t *b) {
    pthread_mutex_lock(&a->lock);
    if (!var) {
        for (int i = 0; i < a->n; i++) dump_one(&a->recs[i], b);
    } else {
        int h = psg_strmap_get(a->by_var, var);
        for (int i = h >= 0 ? a->heads[h].first : -1; i >= 0; i = a->recs[i].next)
            dump_one(&a->recs[i], b);
    }
    pthread_mutex_unlock(&a->lock);
}

int psg_applied_forget(psg_applied_t *a, const char *var, const char *writer, int64_t seq) {
    pthread_mutex_lock(&a->lock);
    int i = find_locked(a, var, writer, true);
    if (i >= 0) a->recs[i].seq = seq;
    pthread_mutex_unlock(&a->lock);
    return i >= 0 ? 0 : psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
}

/* The head of var, made when absent (through a record of writer ""). Under lock. */
static head_t *head_locked(psg_applied_t *a, const char *var) {
    int h = psg_strmap_get(a->by_var, var);
    if (h < 0 && find_locked(a, var, "", true) >= 0) h = psg_strmap_get(a->by_var, var);
    return h >= 0 ? &a->heads[h] : NULL;
}

int psg_applied_set_last(psg_applied_t *a, const char *var, const char *writer, int64_t seq,
                         psg_tensor_t **pre) {
    pthread_mutex_lock(&a->lock);
    head_t *h = head_locked(a, var);
    char *w = writer && h ? strdup(writer) : NULL;
    if (h && (!writer || w)) {
        free(h->last_writer);
        psg_tensor_destroy(&h->pre);
        h->last_writer = w;
        h->last_seq = seq;
        if (w && pre) h->pre = *pre, *pre = NULL;
    }
    pthread_mutex_unlock(&a->lock);
    if (pre) psg_tensor_destroy(pre);
    return h && (!writer || w) ? 0 : psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
}

psg_tensor_t *psg_applied_pre_of(psg_applied_t *a, const char *var, const char *writer,
                                 int64_t seq) {
    pthread_mutex_lock(&a->lock);
    int h = psg_strmap_get(a->by_var, var);
    const head_t *hd = h >= 0 ? &a->heads[h] : NULL;
    psg_tensor_t *pre =
        hd && hd->pre && hd->last_writer && hd->last_seq == seq && !strcmp(hd->last_writer, writer)
            ? psg_tensor_ref(hd->pre)
            : NULL;
    pthread_mutex_unlock(&a->lock);
    return pre;
}

int psg_applied_merge(psg_applied_t *a, const char *text, size_t len) {
    char var[1024], writer[PSG_APPLIED_WRITER_MAX];
    int line = 0;
    for (size_t at = 0; at < len; line++) {
        const char *s = text + at, *nl = memchr(s, '\n', len - at);
        size_t n = nl ? (size_t)(nl - s) : len - at;
        at += n + 1;
        if (n && (s[0] == '#' || s[0] == '!')) continue; /* the update id, a replay line */
        const char *t1 = memchr(s, '\t', n),
                   *t2 = t1 ? memchr(t1 + 1, '\t', n - (size_t)(t1 + 1 - s)) : NULL;
        if (!t2 || (size_t)(t1 - s) >= sizeof var || (size_t)(t2 - t1 - 1) >= sizeof writer ||
            t1 == s || t2 == t1 + 1)
            return psg_error_set_code(PSG_ERR_BAD_REQUEST,
                                      "applied updates, line %d: not VAR\\tWRITER\\tSEQ", line + 1);
        memcpy(var, s, (size_t)(t1 - s));
        var[t1 - s] = 0;
        memcpy(writer, t1 + 1, (size_t)(t2 - t1 - 1));
        writer[t2 - t1 - 1] = 0;
        char num[24];
        size_t ln = n - (size_t)(t2 + 1 - s);
        if (ln == 0 || ln >= sizeof num)
            return psg_error_set_code(PSG_ERR_BAD_REQUEST, "applied updates, line %d: bad SEQ",
                                      line + 1);
        memcpy(num, t2 + 1, ln);
        num[ln] = 0;
        char *end = NULL;
        errno = 0;
        long long seq = strtoll(num, &end, 10);
        if (*end || seq < 0 || errno == ERANGE)
            return psg_error_set_code(PSG_ERR_BAD_REQUEST, "applied updates, line %d: bad SEQ '%s'",
                                      line + 1, num);
        if (psg_applied_set(a, var, writer, seq) < 0) return -1;
    }
    return 0;
}

int psg_applied_parse_id(const char *id, char *writer, size_t size, int64_t *seq) {
    const char *sp = strrchr(id, ' ');
    char *end = NULL;
    errno = 0;
    long long v = sp ? strtoll(sp + 1, &end, 10) : 0;
    if (!sp || sp == id || (size_t)(sp - id) >= size || !end || *end || v <= 0 || sp[1] == '-' ||
        errno == ERANGE)
        return psg_error_set_code(PSG_ERR_BAD_REQUEST, "update id '%.64s' is not \"WRITER SEQ\"",
                                  id);
    memcpy(writer, id, (size_t)(sp - id));
    writer[sp - id] = 0;
    *seq = v;
    return 0;
}
