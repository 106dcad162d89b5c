/* A growable NUL-terminated string for building text (JSON reports, safetensors headers):
 * appends never fail loudly; an allocation failure sets `oom` and later appends do nothing,
 * so a builder checks once at the end. Not a parser (core/json.c reads JSON). */
#ifndef PSG_CORE_STRBUF_H
#define PSG_CORE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__GNUC__)
#define PSG_STRBUF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PSG_STRBUF_PRINTF(a, b)
#endif

/* Zero-initialize ({0}) to start; free(b.s) when done. */
typedef struct {
    char *s; /* NULL until the first append */
    size_t len, cap;
    bool oom;
} psg_strbuf_t;

void psg_strbuf_add(psg_strbuf_t *b, const char *s, size_t n);
void psg_strbuf_str(psg_strbuf_t *b, const char *s);
void psg_strbuf_printf(psg_strbuf_t *b, const char *fmt, ...) PSG_STRBUF_PRINTF(2, 3);
/* A JSON string literal of s: quotes, backslashes and control bytes escaped. */
void psg_strbuf_json_str(psg_strbuf_t *b, const char *s);

#endif
