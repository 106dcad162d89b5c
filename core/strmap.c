/* String -> int map by open addressing (linear probing, FNV-1a, load below 1/2). Not a
 * container to iterate or to remove from: it exists to make duplicate checks linear. Each
 * slot keeps its key's hash: a probe compares hashes before it reads a key (a cache miss
 * each), and growing never hashes a key again. */
#include "core/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *key;
    uint64_t hash;
    int value;
} slot_t;

struct psg_strmap {
    slot_t *slots;
    size_t cap, count; /* cap a power of two */
};

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

psg_strmap_t *psg_strmap_new(void) {
    psg_strmap_t *m = calloc(1, sizeof *m);
    if (m && !(m->slots = calloc(m->cap = 16, sizeof *m->slots))) {
        free(m);
        m = NULL;
    }
    return m;
}

void psg_strmap_destroy(psg_strmap_t **m) {
    if (!m || !*m) return;
    free((*m)->slots);
    free(*m);
    *m = NULL;
}

static slot_t *find(slot_t *slots, size_t cap, const char *key, uint64_t h) {
    for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!slots[i].key || (slots[i].hash == h && !strcmp(slots[i].key, key))) return &slots[i];
}

static int grow(psg_strmap_t *m) {
    size_t cap = m->cap * 2;
    slot_t *s = calloc(cap, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = m->slots[i].hash & (cap - 1);
        while (s[j].key) j = (j + 1) & (cap - 1); /* the keys are distinct */
        s[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    return 0;
}

int psg_strmap_put(psg_strmap_t *m, const char *key, int value) {
    if (2 * (m->count + 1) > m->cap && grow(m) < 0) return -2;
    uint64_t h = hash(key);
    slot_t *s = find(m->slots, m->cap, key, h);
    if (s->key) return s->value;
    *s = (slot_t){key, h, value};
    m->count++;
    return -1;
}

int psg_strmap_get(const psg_strmap_t *m, const char *key) {
    const slot_t *s = find(m->slots, m->cap, key, hash(key));
    return s->key ? s->value : -1;
}

size_t psg_strmap_count(const psg_strmap_t *m) {
    return m->count;
}
