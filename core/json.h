/* Internal to psgraph: a small strict JSON reader (RFC 8259) building a tree, for TF_CONFIG
 * and other small configuration documents. Not a writer, not streaming, not for large data:
 * documents are limited in size and depth, numbers are doubles. */
#ifndef PSGRAPH_NET_JSON_H
#define PSGRAPH_NET_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    PSG_JSON_NULL,
    PSG_JSON_BOOL,
    PSG_JSON_NUMBER,
    PSG_JSON_STRING,
    PSG_JSON_ARRAY,
    PSG_JSON_OBJECT
} psg_json_type_t;

typedef struct psg_json {
    psg_json_type_t type;
    bool boolean;
    double number;
    bool integral; /* a number written without fraction or exponent */
    char *string;  /* STRING: the text, NUL-terminated (a \u0000 inside is refused) */
    char *key;     /* a member of an OBJECT: its name */
    int count;     /* ARRAY, OBJECT: number of items */
    struct psg_json **items;
    struct psg_json_arena *arena; /* the document's, on its root only: every node is in it */
} psg_json_t;

/* The longest text psg_json_parse reads. */
#define PSG_JSON_MAX_BYTES ((size_t)16 << 20)

/* Parses a whole document. NULL with the error set ("line 3, column 7: expected ','");
 * duplicate keys in an object are an error. The caller frees the document (its root, never a
 * part of it: the parts are freed with it) with psg_json_free. */
psg_json_t *psg_json_parse(const char *text);
void psg_json_free(psg_json_t *j);
/* The member `key` of an object, or NULL. */
const psg_json_t *psg_json_get(const psg_json_t *obj, const char *key);
/* The JSON number (RFC 8259's grammar) at s: its end, its value in *value (the double strtod
 * gives) and *integral (written without fraction or exponent); or NULL with *why saying what
 * is wrong. psg_json_parse reads numbers with it; so does a reader that walks a known layout
 * itself (serving/rest.c's predict bodies) and must read numbers as this one does. */
const char *psg_json_read_number(const char *s, double *value, bool *integral, const char **why);
/* "null", "a boolean", "a number", "a string", "an array", "an object". */
const char *psg_json_type_name(psg_json_type_t t);

#endif
