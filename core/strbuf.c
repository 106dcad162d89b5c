/* The growable string of core/strbuf.h: one JSON string writer for the whole project. */
#include "core/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void psg_strbuf_add(psg_strbuf_t *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void psg_strbuf_str(psg_strbuf_t *b, const char *s) {
    psg_strbuf_add(b, s, strlen(s));
}

void psg_strbuf_printf(psg_strbuf_t *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        psg_strbuf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    psg_strbuf_add(b, big, (size_t)n);
    free(big);
}

void psg_strbuf_json_str(psg_strbuf_t *b, const char *s) {
    psg_strbuf_add(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            psg_strbuf_add(b, e, 2);
        } else if (c < 0x20) {
            psg_strbuf_printf(b, "\\u%04x", c);
        } else {
            psg_strbuf_add(b, (const char *)&c, 1);
        }
    }
    psg_strbuf_add(b, "\"", 1);
}
