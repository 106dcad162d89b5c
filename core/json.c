/* A small strict JSON reader behind core/json.h: recursive descent with a depth limit,
 * positions in every error, duplicate keys refused. Not a general-purpose library: no
 * writer, no streaming, numbers as doubles. */
#include "core/json.h"

#include "psgraph/error.h"

#include "core/strmap.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_BYTES PSG_JSON_MAX_BYTES
#define SMALL_OBJECT 16 /* members checked for duplicates by a scan; past it, by a map */

/* A document's nodes, strings and item arrays come from its arena, freed at once with the
 * document: a served image is 268,203 numbers, and a malloc and a free each were a sixth of
 * a served request's CPU. Blocks double from 4 KiB to 1 MiB; a bigger request gets its own. */
typedef struct block {
    struct block *next;
    size_t used, cap;
    max_align_t data[];
} block_t;

struct psg_json_arena {
    block_t *head;
    size_t next_cap;
};

typedef struct {
    const char *start, *p;
    int depth;
    struct psg_json_arena *arena;
} parser_t;

static void arena_free(struct psg_json_arena *a) {
    if (!a) return;
    for (block_t *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

/* size bytes of the arena, aligned for any type; NULL with the error set */
static void *arena_alloc(parser_t *ps, size_t size) {
    struct psg_json_arena *a = ps->arena;
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    block_t *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > a->next_cap ? size : a->next_cap;
        if (!(b = malloc(sizeof *b + cap))) {
            psg_error_set("out of memory");
            return NULL;
        }
        b->used = 0;
        b->cap = cap;
        if (a->next_cap < ((size_t)1 << 20)) a->next_cap *= 2;
        /* a block of its own goes behind the head, whose free space stays in use */
        if (a->head && cap == size) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = (char *)b->data + b->used;
    b->used += size;
    return p;
}

static int fail(parser_t *ps, const char *what) {
    int line = 1, col = 1;
    for (const char *q = ps->start; q < ps->p; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return psg_error_set("line %d, column %d: %s", line, col, what);
}

static void skip_ws(parser_t *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

void psg_json_free(psg_json_t *j) {
    if (j) arena_free(j->arena);
}

static psg_json_t *parse_value(parser_t *ps);

static int hex4(const char *s, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d == 16) return -1;
        *v = *v * 16 + d;
    }
    return 0;
}

static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at ps->p (on its opening quote); returns a copy in the arena, unescaped. */
static char *parse_string(parser_t *ps) {
    const char *q = ++ps->p;
    size_t raw = 0;
    while (q[raw] && q[raw] != '"') raw += q[raw] == '\\' && q[raw + 1] ? 2 : 1;
    char *out = arena_alloc(ps, raw + 1); /* unescaping never grows the text */
    if (!out) return NULL;
    size_t n = 0;
    for (;;) {
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') break;
        if (c == '\0') {
            fail(ps, "unterminated string");
            goto bad;
        }
        if (c < 0x20) {
            fail(ps, "control character in a string");
            goto bad;
        }
        if (c != '\\') {
            out[n++] = (char)c;
            ps->p++;
            continue;
        }
        char e = ps->p[1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            out[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            ps->p += 2;
            continue;
        }
        unsigned cp;
        if (e != 'u' || hex4(ps->p + 2, &cp) < 0) {
            fail(ps, "bad escape in a string");
            goto bad;
        }
        ps->p += 6;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            unsigned lo;
            if (ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) < 0 || lo < 0xdc00 ||
                lo > 0xdfff) {
                fail(ps, "unpaired surrogate in a string");
                goto bad;
            }
            ps->p += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if ((cp >= 0xdc00 && cp <= 0xdfff) || cp == 0) {
            fail(ps, cp ? "unpaired surrogate in a string" : "\\u0000 in a string");
            goto bad;
        }
        n += put_utf8(out + n, cp);
    }
    ps->p++;
    out[n] = '\0';
    return out;
bad:
    return NULL; /* out stays in the arena, freed with it */
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* One pass over the number: its grammar checked (RFC 8259) while its digits make an integer m
 * and its value m * 10^e. Clinger's fast path: m < 2^53 (at most 19 digits, leading zeros
 * aside) and |e| <= 22 is one multiplication or division of two exact doubles, so one correct
 * rounding: the double strtod returns, found without strtod's cost (a served image is 268,203
 * numbers, read once, not scanned and then read). Anything else goes to strtod. */
const char *psg_json_read_number(const char *s, double *value, bool *integral, const char **why) {
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char *q = s;
    bool neg = *q == '-';
    q += neg;
    uint64_t m = 0; /* wraps past 19 digits, unused then */
    int digits = 0, e = 0;
    bool huge_exponent = false; /* past 100000: e is not kept, strtod reads it */
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        const char *d = q;
        for (; is_digit(*q); q++) m = m * 10 + (uint64_t)(*q - '0');
        digits = (int)(q - d);
    } else {
        *why = "expected a value";
        return NULL;
    }
    *integral = true;
    if (*q == '.') {
        *integral = false;
        if (!is_digit(*++q)) {
            *why = "expected a digit after '.'";
            return NULL;
        }
        const char *f = q;
        if (!m)
            while (*q == '0') q++; /* leading zeros: no digits of m */
        const char *d = q;
        for (; is_digit(*q); q++) m = m * 10 + (uint64_t)(*q - '0');
        digits += (int)(q - d);
        e = -(int)(q - f);
    }
    if (*q == 'e' || *q == 'E') {
        *integral = false;
        bool eneg = *++q == '-';
        if (*q == '+' || *q == '-') q++;
        if (!is_digit(*q)) {
            *why = "expected a digit in the exponent";
            return NULL;
        }
        int x = 0;
        for (; is_digit(*q); q++)
            if (x <= 100000) x = x * 10 + (*q - '0'); /* past it: strtod's */
        e += eneg ? -x : x;
        huge_exponent = x > 100000;
    }
    if (huge_exponent || digits > 19 || m > ((uint64_t)1 << 53) || e < -22 || e > 22) {
        *value = strtod(s, NULL);
    } else {
        double v = e < 0 ? (double)m / pow10[-e] : (double)m * pow10[e];
        *value = neg ? -v : v;
    }
    return q;
}

static int parse_number(parser_t *ps, psg_json_t *j) {
    const char *why = NULL, *q = psg_json_read_number(ps->p, &j->number, &j->integral, &why);
    if (!q) return fail(ps, why);
    ps->p = q;
    return 0;
}

static int push_item(parser_t *ps, psg_json_t *j, psg_json_t *item) {
    if ((j->count & (j->count - 1)) == 0) { /* full at powers of two */
        int cap = j->count ? 2 * j->count : 1;
        psg_json_t **items = arena_alloc(ps, (size_t)cap * sizeof *items);
        if (!items) return -1;
        if (j->count) memcpy(items, j->items, (size_t)j->count * sizeof *items);
        j->items = items;
    }
    j->items[j->count++] = item;
    return 0;
}

/* Whether key is already a member of object j: a linear scan while j is small, then a map
 * (*keys, made on first need), so that 100 k keys parse in linear time, not quadratic. */
static int seen_key(parser_t *ps, const psg_json_t *j, psg_strmap_t **keys, const char *key) {
    int dup = -1;
    if (j->count < SMALL_OBJECT) {
        for (int i = 0; i < j->count && dup < 0; i++)
            if (strcmp(j->items[i]->key, key) == 0) dup = i;
    } else {
        if (!*keys) {
            if (!(*keys = psg_strmap_new())) return psg_error_set("out of memory");
            for (int i = 0; i < j->count; i++) psg_strmap_put(*keys, j->items[i]->key, i);
        }
        /* put, not get: the key is stored once its value parsed (the map is dropped on a
         * failure before that) */
        if ((dup = psg_strmap_put(*keys, key, j->count)) == -2)
            return psg_error_set("out of memory");
    }
    if (dup >= 0) {
        char what[160];
        snprintf(what, sizeof what, "duplicate key \"%.100s\"", key);
        return fail(ps, what);
    }
    return 0;
}

static int parse_members(parser_t *ps, psg_json_t *j, bool object, psg_strmap_t **keys);

static int parse_container(parser_t *ps, psg_json_t *j, bool object) {
    psg_strmap_t *keys = NULL;
    int rc = parse_members(ps, j, object, &keys);
    psg_strmap_destroy(&keys);
    return rc;
}

static int parse_members(parser_t *ps, psg_json_t *j, bool object, psg_strmap_t **keysp) {
    char close = object ? '}' : ']';
    ps->p++;
    skip_ws(ps);
    if (*ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        if (object) {
            skip_ws(ps);
            if (*ps->p != '"') return fail(ps, "expected a string key");
            if (!(key = parse_string(ps))) return -1;
            if (seen_key(ps, j, keysp, key) < 0) return -1;
            skip_ws(ps);
            if (*ps->p != ':') return fail(ps, "expected ':'");
            ps->p++;
        }
        psg_json_t *item = parse_value(ps);
        if (!item) return -1;
        item->key = key;
        if (push_item(ps, j, item) < 0) return -1;
        skip_ws(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            return 0;
        }
        return fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static psg_json_t *parse_value(parser_t *ps) {
    skip_ws(ps);
    if (++ps->depth > MAX_DEPTH) {
        fail(ps, "nested too deep");
        return NULL;
    }
    psg_json_t *j = arena_alloc(ps, sizeof *j);
    if (!j) return NULL;
    memset(j, 0, sizeof *j);
    int rc = 0;
    char c = *ps->p;
    if (c == '{' || c == '[') {
        j->type = c == '{' ? PSG_JSON_OBJECT : PSG_JSON_ARRAY;
        rc = parse_container(ps, j, c == '{');
    } else if (c == '"') {
        j->type = PSG_JSON_STRING;
        rc = (j->string = parse_string(ps)) ? 0 : -1;
    } else if ((c == 't' && strncmp(ps->p, "true", 4) == 0) ||
               (c == 'f' && strncmp(ps->p, "false", 5) == 0)) {
        j->type = PSG_JSON_BOOL;
        j->boolean = c == 't';
        ps->p += j->boolean ? 4 : 5;
    } else if (c == 'n' && strncmp(ps->p, "null", 4) == 0) {
        j->type = PSG_JSON_NULL;
        ps->p += 4;
    } else {
        j->type = PSG_JSON_NUMBER;
        rc = parse_number(ps, j);
    }
    ps->depth--;
    return rc < 0 ? NULL : j; /* a failure frees the whole arena (psg_json_parse) */
}

psg_json_t *psg_json_parse(const char *text) {
    if (!text) {
        psg_error_set("no JSON text");
        return NULL;
    }
    if (strlen(text) > MAX_BYTES) {
        psg_error_set("JSON text over %zu bytes", MAX_BYTES);
        return NULL;
    }
    parser_t ps = {text, text, 0, calloc(1, sizeof *ps.arena)};
    if (!ps.arena) {
        psg_error_set("out of memory");
        return NULL;
    }
    ps.arena->next_cap = 4096;
    psg_json_t *j = parse_value(&ps);
    skip_ws(&ps);
    if (j && *ps.p) {
        fail(&ps, "unexpected text after the document");
        j = NULL;
    }
    if (!j) {
        arena_free(ps.arena);
        return NULL;
    }
    j->arena = ps.arena;
    return j;
}

const psg_json_t *psg_json_get(const psg_json_t *obj, const char *key) {
    if (!obj || obj->type != PSG_JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->count; i++)
        if (strcmp(obj->items[i]->key, key) == 0) return obj->items[i];
    return NULL;
}

const char *psg_json_type_name(psg_json_type_t t) {
    static const char *names[] = {"null",     "a boolean", "a number",
                                  "a string", "an array",  "an object"};
    return t <= PSG_JSON_OBJECT ? names[t] : "unknown";
}
