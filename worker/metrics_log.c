/* The one-writer metrics files of worker/metrics_log.h: a stdio stream over a cookie that
 * assembles lines and writes each whole one with a single write(2), the task named in it.
 * Not a JSON encoder: the callers format their records. */
#include "worker/metrics_log.h"

#include "psgraph/checkpoint.h"
#include "psgraph/error.h"
#include "psgraph/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    int fd;
    char prefix[256]; /* {"task":"…", */
    char *line;       /* the bytes of the line being assembled */
    size_t len, cap;
} mlog_t;

/* Writes all of p (a line: one write unless the kernel takes less, which a regular file
 * opened O_APPEND does not do short of a full disk). */
static int write_line(mlog_t *m, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(m->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One whole line of m->line[0, n) (its newline included), the task put first. */
static int emit(mlog_t *m, size_t n) {
    const char *l = m->line;
    if (n < 3 || l[0] != '{' || l[1] == '}') return write_line(m, l, n);
    size_t pn = strlen(m->prefix);
    char *buf = malloc(pn + n);
    if (!buf) return -1;
    memcpy(buf, m->prefix, pn);
    memcpy(buf + pn, l + 1, n - 1);
    int rc = write_line(m, buf, pn + n - 1);
    free(buf);
    return rc;
}

static ssize_t mlog_write(void *cookie, const char *data, size_t n) {
    mlog_t *m = cookie;
    if (m->len + n > m->cap) {
        size_t cap = m->cap ? m->cap : 1024;
        while (cap < m->len + n) cap *= 2;
        char *p = realloc(m->line, cap);
        if (!p) return -1;
        m->line = p;
        m->cap = cap;
    }
    memcpy(m->line + m->len, data, n);
    m->len += n;
    char *nl;
    while ((nl = memchr(m->line, '\n', m->len))) {
        size_t k = (size_t)(nl - m->line) + 1;
        if (emit(m, k) < 0) return -1;
        memmove(m->line, m->line + k, m->len - k);
        m->len -= k;
    }
    return (ssize_t)n;
}

static int mlog_close(void *cookie) {
    mlog_t *m = cookie;
    int rc = 0;
    if (m->len) {
        /* an unfinished record is finished rather than left for the next writer to tear */
        if (mlog_write(m, "\n", 1) < 0) rc = -1;
    }
    if (close(m->fd) < 0) rc = -1;
    free(m->line);
    free(m);
    return rc;
}

FILE *psg_metrics_open(const char *logdir, const char *tag, const char *task) {
    if (psg_logdir_make(logdir) < 0) {
        psg_error_wrap("--logdir");
        return NULL;
    }
    mlog_t *m = calloc(1, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, tag ? "%s/metrics.%s.jsonl" : "%s/metrics.jsonl", logdir, tag);
    if (!m) {
        psg_error_set("out of memory");
        return NULL;
    }
    /* task names are device names ("/job:worker/task:1"): nothing to escape */
    snprintf(m->prefix, sizeof m->prefix, "{\"task\":\"%s\",", task);
    m->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (m->fd < 0) {
        psg_error_set("%s: %s", path, strerror(errno));
        free(m);
        return NULL;
    }
    cookie_io_functions_t io = {.write = mlog_write, .close = mlog_close};
    FILE *f = fopencookie(m, "a", io);
    if (!f) {
        psg_error_set("%s: %s", path, strerror(errno));
        close(m->fd);
        free(m);
        return NULL;
    }
    setvbuf(f, NULL, _IOLBF, 0); /* each record out when its line ends */
    return f;
}

FILE *psg_train_metrics_open(const char *logdir, const char *tag, const char *task) {
    return psg_metrics_open(logdir, tag, task);
}

FILE *psg_metrics_open_worker(const char *logdir, const psg_worker_task_t *w) {
    if (!w->cluster) return psg_metrics_open(logdir, NULL, PSG_METRICS_LOCAL_TASK);
    psg_task_t me = psg_cluster_task(w->cluster);
    char tag[64];
    snprintf(tag, sizeof tag, "%s%d", me.job, me.index);
    return psg_metrics_open(logdir, w->chief ? NULL : tag, w->task);
}
