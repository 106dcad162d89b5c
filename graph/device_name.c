/* Device names in TensorFlow's syntax: a strict parser that names the bad
 * part, the merge of nested specs, and the canonical printed form.
 * Not placement: which device a node gets is decided in placement.c. */
#include "psgraph/device_name.h"
#include "psgraph/error.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Reads a decimal number or "*" (open) from [s, end). */
static int read_index(const char *s, const char *end, bool *set, int *v) {
    if (end - s == 1 && *s == '*') {
        *set = false;
        return 0;
    }
    if (s == end || end - s > 9) return -1;
    int x = 0;
    for (const char *p = s; p < end; p++) {
        if (!isdigit((unsigned char)*p)) return -1;
        x = x * 10 + (*p - '0');
    }
    *set = true;
    *v = x;
    return 0;
}

static bool valid_job(const char *s, size_t n) {
    if (n == 0 || n >= PSG_DEVICE_JOB_MAX || !isalpha((unsigned char)s[0])) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return false;
    return true;
}

static bool valid_type(const char *s, size_t n) {
    if (n == 0 || n >= PSG_DEVICE_TYPE_MAX || !isalpha((unsigned char)s[0])) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_') return false;
    return true;
}

/* One "/key:value" component at [s, end); fills d. Sets seen bits to catch repeats. */
static int parse_part(const char *s, const char *end, psg_device_name_t *d, unsigned *seen,
                      const char *whole) {
    const char *colon = memchr(s, ':', (size_t)(end - s));
    size_t klen = colon ? (size_t)(colon - s) : (size_t)(end - s);
    const char *v = colon ? colon + 1 : end;
    size_t vlen = (size_t)(end - v);
    unsigned bit;
    if (!colon)
        return psg_error_set("invalid device name '%s': '%.*s' has no ':'", whole, (int)klen, s);
    if (klen == 3 && !memcmp(s, "job", 3)) {
        bit = 1;
        if (!valid_job(v, vlen))
            return psg_error_set("invalid device name '%s': bad job name '%.*s'", whole, (int)vlen,
                                 v);
        memcpy(d->job, v, vlen);
        d->job[vlen] = '\0';
        d->has_job = true;
    } else if ((klen == 7 && !memcmp(s, "replica", 7)) || (klen == 4 && !memcmp(s, "task", 4))) {
        bool is_task = klen == 4;
        bit = is_task ? 4 : 2;
        if (read_index(v, end, is_task ? &d->has_task : &d->has_replica,
                       is_task ? &d->task : &d->replica) < 0)
            return psg_error_set("invalid device name '%s': bad %s index '%.*s'", whole,
                                 is_task ? "task" : "replica", (int)vlen, v);
    } else {
        /* "device:TYPE:N", or the legacy "cpu:N" / "gpu:N" */
        bit = 8;
        const char *type = s, *idx = v;
        size_t tlen = klen;
        if (klen == 6 && !memcmp(s, "device", 6)) {
            const char *c2 = memchr(v, ':', vlen);
            if (!c2)
                return psg_error_set("invalid device name '%s': '%.*s' needs TYPE:INDEX", whole,
                                     (int)(end - s), s);
            type = v;
            tlen = (size_t)(c2 - v);
            idx = c2 + 1;
        } else if (!((klen == 3 && (!strncasecmp(s, "cpu", 3) || !strncasecmp(s, "gpu", 3))))) {
            return psg_error_set("invalid device name '%s': unknown field '%.*s' (expected job, "
                                 "replica, task, device, cpu or gpu)",
                                 whole, (int)klen, s);
        }
        if (tlen == 1 && type[0] == '*') {
            d->has_type = false;
        } else if (!valid_type(type, tlen)) {
            return psg_error_set("invalid device name '%s': bad device type '%.*s'", whole,
                                 (int)tlen, type);
        } else {
            for (size_t i = 0; i < tlen; i++) d->type[i] = (char)toupper((unsigned char)type[i]);
            d->type[tlen] = '\0';
            d->has_type = true;
        }
        if (read_index(idx, end, &d->has_id, &d->id) < 0)
            return psg_error_set("invalid device name '%s': bad device index '%.*s'", whole,
                                 (int)(end - idx), idx);
    }
    if (*seen & bit)
        return psg_error_set("invalid device name '%s': '%.*s' given twice", whole, (int)klen, s);
    *seen |= bit;
    return 0;
}

int psg_device_name_parse(const char *s, psg_device_name_t *out) {
    psg_device_name_t d;
    memset(&d, 0, sizeof d);
    if (!s) s = "";
    if (strlen(s) >= PSG_DEVICE_NAME_MAX)
        return psg_error_set("invalid device name '%.40s...': longer than %d characters", s,
                             PSG_DEVICE_NAME_MAX - 1);
    unsigned seen = 0;
    const char *p = s;
    while (*p) {
        if (*p != '/') return psg_error_set("invalid device name '%s': expected '/' at '%s'", s, p);
        const char *start = p + 1;
        const char *end = strchr(start, '/');
        if (!end) end = start + strlen(start);
        if (end == start) return psg_error_set("invalid device name '%s': empty part", s);
        if (parse_part(start, end, &d, &seen, s) < 0) return -1;
        p = end;
    }
    *out = d;
    return 0;
}

void psg_device_name_merge(const psg_device_name_t *outer, const psg_device_name_t *inner,
                           psg_device_name_t *out) {
    psg_device_name_t r = *outer;
    const psg_device_name_t *in = inner;
    if (in->has_job) {
        r.has_job = true;
        memcpy(r.job, in->job, sizeof r.job);
    }
    if (in->has_replica) r.has_replica = true, r.replica = in->replica;
    if (in->has_task) r.has_task = true, r.task = in->task;
    if (in->has_type) {
        r.has_type = true;
        memcpy(r.type, in->type, sizeof r.type);
    }
    if (in->has_id) r.has_id = true, r.id = in->id;
    *out = r;
}

bool psg_device_name_compatible(const psg_device_name_t *a, const psg_device_name_t *b) {
    if (a->has_job && b->has_job && strcmp(a->job, b->job)) return false;
    if (a->has_replica && b->has_replica && a->replica != b->replica) return false;
    if (a->has_task && b->has_task && a->task != b->task) return false;
    if (a->has_type && b->has_type && strcmp(a->type, b->type)) return false;
    if (a->has_id && b->has_id && a->id != b->id) return false;
    return true;
}

bool psg_device_name_is_complete(const psg_device_name_t *d) {
    return d->has_job && d->has_replica && d->has_task && d->has_type && d->has_id;
}

bool psg_device_name_same_task(const psg_device_name_t *a, const psg_device_name_t *b) {
    return a->has_job && b->has_job && !strcmp(a->job, b->job) && a->has_replica &&
           b->has_replica && a->replica == b->replica && a->has_task && b->has_task &&
           a->task == b->task;
}

char *psg_device_name_task_str(const psg_device_name_t *d, char *buf, size_t size) {
    size_t n = 0;
    if (size) buf[0] = '\0';
#define APPEND(...)                                                                                \
    do {                                                                                           \
        int w = snprintf(buf + n, n < size ? size - n : 0, __VA_ARGS__);                           \
        if (w > 0) n += (size_t)w;                                                                 \
        if (n >= size) n = size ? size - 1 : 0;                                                    \
    } while (0)
    if (d->has_job) APPEND("/job:%s", d->job);
    if (d->has_replica) APPEND("/replica:%d", d->replica);
    if (d->has_task) APPEND("/task:%d", d->task);
    return buf;
}

char *psg_device_name_str(const psg_device_name_t *d, char *buf, size_t size) {
    psg_device_name_task_str(d, buf, size);
    size_t n = strlen(buf);
    if (d->has_type && d->has_id)
        APPEND("/device:%s:%d", d->type, d->id);
    else if (d->has_type)
        APPEND("/device:%s:*", d->type);
    else if (d->has_id)
        APPEND("/device:*:%d", d->id);
#undef APPEND
    return buf;
}

int psg_device_name_merge_str(const char *outer, const char *inner, char *buf, size_t size) {
    psg_device_name_t a, b;
    if (psg_device_name_parse(outer, &a) < 0 || psg_device_name_parse(inner, &b) < 0) return -1;
    psg_device_name_merge(&a, &b, &a);
    psg_device_name_str(&a, buf, size);
    return 0;
}

int psg_device_name_canonical(const char *s, char *buf, size_t size) {
    psg_device_name_t d;
    if (psg_device_name_parse(s, &d) < 0) return -1;
    psg_device_name_str(&d, buf, size);
    return 0;
}
