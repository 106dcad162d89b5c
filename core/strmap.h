/* A map from strings to ints by open addressing, for duplicate checks that must stay
 * linear on input a peer or a file controls (JSON keys, cluster addresses). It borrows
 * the keys: they must outlive the map. Not a general container: no removal. */
#ifndef PSG_CORE_STRMAP_H
#define PSG_CORE_STRMAP_H

#include <stddef.h>

typedef struct psg_strmap psg_strmap_t;

/* An empty map; NULL when out of memory. */
psg_strmap_t *psg_strmap_new(void);
void psg_strmap_destroy(psg_strmap_t **m);
/* Inserts key -> value unless key is there. Returns the value already stored for key
 * (and leaves it), -1 when key was new and is now stored, -2 when out of memory.
 * Values must be >= 0. */
int psg_strmap_put(psg_strmap_t *m, const char *key, int value);
/* The value of key, or -1. */
int psg_strmap_get(const psg_strmap_t *m, const char *key);
size_t psg_strmap_count(const psg_strmap_t *m);

#endif
