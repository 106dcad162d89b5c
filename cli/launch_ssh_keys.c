/* The cluster's keys on the hosts of `psgraph launch --ssh`: sent over each task's own ssh
 * session (its standard input, before anything else) into a private folder the remote shell
 * makes and removes when the task ends (with --keys-shared, cli/launch_ssh.c gives the
 * launcher's path instead). Not the rest of the remote command (cli/launch_ssh.c) nor the keys
 * themselves (cli/launch_keys.c). */
#include "cli/commands.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The stream the remote shell reads (one `read -r` a line, so that nothing past it is
 * consumed): "F NAME" starts a file, "L TEXT" is a line of it, "E" ends the keys. */
typedef struct {
    char *b;
    size_t len, cap;
} payload_t;

static int add(payload_t *p, const char *s, size_t n) {
    if (p->len + n + 1 > p->cap) {
        size_t cap = (p->len + n + 1) * 2;
        char *b = realloc(p->b, cap);
        if (!b) {
            fprintf(stderr, "psgraph launch: out of memory\n");
            return -1;
        }
        p->b = b;
        p->cap = cap;
    }
    memcpy(p->b + p->len, s, n);
    p->len += n;
    p->b[p->len] = 0;
    return 0;
}

static int add_file(void *ctx, const char *name, const char *text, size_t len) {
    payload_t *p = ctx;
    int rc = add(p, "F ", 2) | add(p, name, strlen(name)) | add(p, "\n", 1);
    for (const char *s = text, *end = text + len; s < end && rc == 0;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        rc = add(p, "L ", 2) | add(p, s, n) | add(p, "\n", 1);
        s += n + 1;
    }
    return rc ? -1 : 0;
}

int psg_launch_ssh_keys_prepare(psg_launch_t *o, const char *dir) {
    payload_t p = {0};
    if (psg_launch_keys_each(dir, add_file, &p) < 0 || add(&p, "E\n", 2) < 0) {
        if (p.b) memset(p.b, 0, p.len);
        free(p.b);
        return -1;
    }
    o->keys_payload = p.b;
    o->keys_payload_len = p.len;
    return 0;
}

void psg_launch_ssh_keys_free(psg_launch_t *o) {
    if (o->keys_payload) memset(o->keys_payload, 0, o->keys_payload_len);
    free(o->keys_payload);
    o->keys_payload = NULL;
    o->keys_payload_len = 0;
}

char *psg_launch_ssh_keys_script(const char *host) {
    /* A folder of mktemp's (0700), the files written under umask 077 in a subshell (the
     * task keeps the session's umask); removed when this shell exits: after the task, or on
     * a signal; the watcher of cli/launch_ssh.c ends the task when the session dies. */
    static const char *fmt =
        "k=$(mktemp -d \"${TMPDIR:-/tmp}/psgraph-keys.XXXXXX\") || { echo \"psgraph launch: cannot make a "
        "private folder for the cluster's keys on host %s\" >&2; exit 1; }; "
        "trap 'rm -rf \"$k\"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; "
        "( umask 077; f=/dev/null; while IFS= read -r l; do case $l in E) exit 0;; \"F \"*) f=$k/${l#F };; "
        "\"L \"*) printf '%%s\\n' \"${l#L }\" >>\"$f\" || exit 1;; esac; done; exit 1 ) || { echo \"psgraph "
        "launch: the cluster's keys did not arrive on host %s (its ssh session ended first?)\" >&2; exit 1; }; "
        "PSGRAPH_KEYS=$k; export PSGRAPH_KEYS; ";
    size_t n = strlen(fmt) + 2 * strlen(host) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, host, host);
    return s;
}

int psg_launch_ssh_keys_send(const psg_launch_t *o, int fd, const char *tag) {
    if (!o->keys_payload) return 0;
    /* the whole stream fits in the pipe: the launcher never waits on ssh to read it */
    if (o->keys_payload_len > 65536 && fcntl(fd, F_SETPIPE_SZ, (int)o->keys_payload_len) < 0) {
        fprintf(
            stderr,
            "psgraph launch: %s: the key folder's %zu bytes do not fit in a pipe (%s): use fewer "
            "public keys, or --keys-shared\n",
            tag, o->keys_payload_len, strerror(errno));
        return -1;
    }
    for (size_t off = 0; off < o->keys_payload_len;) {
        ssize_t w = write(fd, o->keys_payload + off, o->keys_payload_len - off);
        if (w < 0 && errno == EINTR) continue;
        /* EPIPE: ssh is gone already; its exit code says why */
        if (w < 0 && errno == EPIPE) return 0;
        if (w < 0) {
            fprintf(stderr, "psgraph launch: %s: cannot send the keys to ssh: %s\n", tag,
                    strerror(errno));
            return -1;
        }
        off += (size_t)w;
    }
    return 0;
}
