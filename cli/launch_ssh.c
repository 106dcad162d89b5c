/* `psgraph launch --ssh`: which host each task runs on (--hosts, --hosts-file, task@host)
 * and the ssh command line that runs a task there so that it never outlives its session.
 * Not the supervision of the tasks (cli/launch_cmd.c does it for local and remote alike). */
#include "cli/commands.h"
#include "psgraph/curve.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void psg_launch_hosts_free(char ***hosts, int n) {
    if (!hosts || !*hosts) return;
    for (int i = 0; i < n; i++) free((*hosts)[i]);
    free(*hosts);
    *hosts = NULL;
}

/* A host name as ssh takes it: [user@]host with letters, digits, '.', '-', '_', ':'. */
static bool host_ok(const char *h) {
    if (!*h || *h == '-') return false;
    for (const char *p = h; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(".-_@:[]", *p)) return false;
    return true;
}

/* "ps3" -> 3 of ps, "worker0" -> nps + 0; -1 when it names no task of the cluster. */
static int task_index(const char *tag, size_t len, int nps, int nworkers) {
    char buf[32], again[48];
    int k;
    if (len >= sizeof buf) return -1;
    memcpy(buf, tag, len);
    buf[len] = 0;
    bool ps = sscanf(buf, "ps%d", &k) == 1, worker = !ps && sscanf(buf, "worker%d", &k) == 1;
    if (!ps && !worker) return -1;
    snprintf(again, sizeof again, "%s%d", ps ? "ps" : "worker", k); /* no "ps01", "ps0x" */
    if (strcmp(again, buf) || k < 0 || k >= (ps ? nps : nworkers)) return -1;
    return ps ? k : nps + k;
}

/* The entries of a list "a,b,c" or of a file (one a line, '#' comments), into e[]. */
static int split_hosts(const char *list, const char *file, char **e, int cap) {
    int n = 0;
    char *text = NULL;
    if (file) {
        FILE *f = fopen(file, "r");
        if (!f) {
            fprintf(stderr, "psgraph launch: --hosts-file %s: %s\n", file, strerror(errno));
            return -1;
        }
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *hash = strchr(line, '#');
            if (hash) *hash = 0;
            char *s = line + strspn(line, " \t\r\n");
            size_t len = strcspn(s, " \t\r\n");
            if (!len) continue;
            s[len] = 0;
            if (n == cap || !(e[n++] = strdup(s))) break;
        }
        fclose(f);
        return n;
    }
    if (!(text = strdup(list))) return -1;
    for (char *save = NULL, *s = strtok_r(text, ",", &save); s && n < cap;
         s = strtok_r(NULL, ",", &save))
        if (*s && !(e[n++] = strdup(s))) break;
    free(text);
    return n;
}

char **psg_launch_hosts(const char *list, const char *file, int nps, int nworkers) {
    int n = nps + nworkers, ne;
    char *e[512] = {0};
    const char *from = file ? file : "--hosts";
    if ((ne = split_hosts(list, file, e, 512)) <= 0) {
        if (ne == 0) fprintf(stderr, "psgraph launch: %s names no host\n", from);
        return NULL;
    }
    char **hosts = calloc((size_t)n, sizeof *hosts);
    bool placed = strchr(e[0], '@') &&
                  task_index(e[0], (size_t)(strchr(e[0], '@') - e[0]), nps, nworkers) >= 0;
    int rc = hosts ? 0 : -1;
    for (int i = 0; i < ne && rc == 0; i++) {
        const char *at = strchr(e[i], '@');
        int k = at ? task_index(e[i], (size_t)(at - e[i]), nps, nworkers) : -1;
        const char *host = placed && k >= 0 ? at + 1 : e[i];
        if (!host_ok(host)) {
            fprintf(stderr, "psgraph launch: %s: bad host '%s'\n", from, host);
            rc = -1;
        } else if (placed && k < 0) {
            fprintf(stderr,
                    "psgraph launch: %s: '%s' is not TASK@HOST for a task of this cluster "
                    "(ps0..ps%d, worker0..worker%d)\n",
                    from, e[i], nps - 1, nworkers - 1);
            rc = -1;
        } else if (placed && hosts[k]) {
            fprintf(stderr, "psgraph launch: %s: %.*s is placed twice\n", from, (int)(at - e[i]),
                    e[i]);
            rc = -1;
        } else if (placed) {
            rc = (hosts[k] = strdup(host)) ? 0 : -1;
        }
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (!placed) {
            rc = (hosts[i] = strdup(e[i % ne])) ? 0 : -1;
        } else if (!hosts[i]) {
            fprintf(stderr, "psgraph launch: %s places no host for %s%d\n", from,
                    i < nps ? "ps" : "worker", i < nps ? i : i - nps);
            rc = -1;
        }
    }
    for (int i = 0; i < ne; i++) free(e[i]);
    if (rc < 0) psg_launch_hosts_free(&hosts, n);
    return hosts;
}

void psg_launch_argv_free(char ***argv) {
    if (!argv || !*argv) return;
    for (char **a = *argv; *a; a++) free(*a);
    free(*argv);
    *argv = NULL;
}

/* Appends s to the growing string *b (*len of *cap), single-quoted for sh when quote. */
static int put(char **b, size_t *len, size_t *cap, const char *s, bool quote) {
    size_t need = *len + 4 * strlen(s) + 8;
    if (need > *cap) {
        size_t nc = need * 2;
        char *nb = realloc(*b, nc);
        if (!nb) return -1;
        *b = nb;
        *cap = nc;
    }
    char *o = *b + *len;
    if (quote) *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (quote && *p == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    if (quote) *o++ = '\'';
    *o = 0;
    *len = (size_t)(o - *b);
    return 0;
}

char *psg_launch_remote_script(const psg_launch_t *o, const char *host, const char *cfg, char **cmd,
                               const char *pre) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "/");
    size_t len = 0, cap = 256;
    char *b = malloc(cap);
    if (!b) return NULL;
    b[0] = 0;
    /* the task's stderr joins its stdout: the session's own stderr is then ssh's (or srun's)
       alone, the reason quoted when it fails */
    int rc = put(&b, &len, &cap, "exec 2>&1; cd ", false);
    rc |= put(&b, &len, &cap, cwd, true);
    rc |= put(&b, &len, &cap, " 2>/dev/null || cd /; TF_CONFIG=", false);
    rc |= put(&b, &len, &cap, cfg, true);
    rc |= put(&b, &len, &cap, "; export TF_CONFIG; ", false);
    if (pre) rc |= put(&b, &len, &cap, pre, false);
    /* the cluster's keys: a private copy from this session's stdin (cli/launch_ssh_keys.c);
       --keys-shared: the folder at the same path on the host */
    const char *keys = getenv(PSG_CURVE_KEYS_ENV);
    if (o->keys_payload) {
        char *script = psg_launch_ssh_keys_script(host);
        rc |= script ? put(&b, &len, &cap, script, false) : -1;
        free(script);
    } else if (keys && *keys) {
        rc |= put(&b, &len, &cap, "PSGRAPH_KEYS=", false);
        rc |= put(&b, &len, &cap, keys, true);
        rc |= put(&b, &len, &cap, "; export PSGRAPH_KEYS; ", false);
    }
    rc |= put(&b, &len, &cap, "command -v ", false);
    rc |= put(&b, &len, &cap, cmd[0], true);
    rc |= put(&b, &len, &cap, " >/dev/null 2>&1 || { echo \"psgraph launch: no \"", false);
    rc |= put(&b, &len, &cap, cmd[0], true);
    rc |= put(&b, &len, &cap, "\" on host ", false);
    rc |= put(&b, &len, &cap, host, false);
    rc |= put(&b, &len, &cap,
              " (the same path as here, or --remote-bin)\" >&2; exit 127; }; exec 3<&0; setsid",
              false);
    for (int i = 0; cmd[i] && rc == 0; i++) {
        rc |= put(&b, &len, &cap, " ", false);
        rc |= put(&b, &len, &cap, cmd[i], true);
    }
    rc |= put(&b, &len, &cap,
              " </dev/null & p=$!; echo \"remote pid $p\"; "
              "( while read -r _; do :; done <&3; kill -s TERM -- -$p; i=0; "
              "while [ $i -lt 50 ] && kill -s 0 -- -$p; do sleep 0.1; i=$((i+1)); done; "
              "kill -s KILL -- -$p ) >/dev/null 2>&1 & w=$!; exec 3<&-; "
              "wait $p; rc=$?; kill $w 2>/dev/null; exit $rc",
              false);
    if (rc) {
        free(b);
        return NULL;
    }
    return b;
}

/* ssh's keep-alive from the workers' --peer-timeout (default 10 s): an ssh session whose
 * link is cut ends after about that long (3 unanswered probes), so the launcher sees the
 * task as failed (and restarts it with --restart on-failure) instead of waiting on it. */
static void server_alive(char **cmd, char *out, size_t size) {
    double peer = atof(psg_launch_cmd_option(cmd, "--peer-timeout", "10"));
    int ivl = (int)(peer / 3 + 0.999);
    snprintf(out, size, "ServerAliveInterval=%d", ivl < 1 ? 1 : ivl);
}

char **psg_launch_ssh_argv(const psg_launch_t *o, const char *host, const char *cfg, char **cmd) {
    int nopt = 0;
    while (o->ssh_options && o->ssh_options[nopt]) nopt++;
    char **argv = calloc((size_t)(18 + 2 * nopt), sizeof *argv);
    if (!argv) return NULL;
    int k = 0;
    const char *fixed[] = {"ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"};
    bool ok = true;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        ok &= (argv[k++] = strdup(fixed[i])) != NULL;
    if (o->ssh_config) {
        ok &= (argv[k++] = strdup("-F")) != NULL;
        ok &= (argv[k++] = strdup(o->ssh_config)) != NULL;
    }
    for (int i = 0; i < nopt; i++) {
        ok &= (argv[k++] = strdup("-o")) != NULL;
        ok &= (argv[k++] = strdup(o->ssh_options[i])) != NULL;
    }
    /* after the user's: ssh keeps the first value of an option */
    char alive[64];
    server_alive(o->cmd, alive, sizeof alive);
    /* LogLevel INFO: ssh's reasons ("Timeout, server h1 not responding.") are kept, on its
       stderr, which carries nothing else (the task's stderr joins its stdout) */
    const char *keep[] = {"-o", alive, "-o", "ServerAliveCountMax=3", "-o", "LogLevel=INFO"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        ok &= (argv[k++] = strdup(keep[i])) != NULL;
    ok &= (argv[k++] = strdup("--")) != NULL;
    ok &= (argv[k++] = strdup(host)) != NULL;
    ok &= (argv[k++] = psg_launch_remote_script(o, host, cfg, cmd, NULL)) != NULL;
    if (!ok) psg_launch_argv_free(&argv);
    return argv;
}
