/* `psgraph launch`: starts a whole cluster on this host, each task its own process with its
 * own TF_CONFIG (ps tasks run `psgraph server`, workers run the given command), tags every
 * output line with its task, and stops all of them on Ctrl-C or when one fails.
 * With --restart on-failure a task that dies is started again (bounded retries).
 * Not ssh or Kubernetes launching. */
#include "cli/commands.h"
#include "psgraph/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TASKS 256

typedef struct {
    char tag[32];
    bool is_ps;
    pid_t pid;
    int fd; /* the read end of its stdout+stderr, -1 once closed */
    char line[4096];
    size_t len;
    bool exited, killed_by_us;
    bool tolerated; /* a non-chief worker whose failure the job outlives */
    int code;
    int restarts;
    char *cfg;          /* its TF_CONFIG */
    char status[256];   /* on a terminal: its last line */
    char *json;         /* NULL, or where its last line starting with '{' is kept */
    size_t json_size;
} task_proc_t;

/* On a terminal, a block of one line per task redrawn in place; else tagged lines. */
static bool on_tty;
static int block_lines; /* lines of the block drawn last (0: none on screen) */
static bool block_dirty;

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

static void usage(FILE *f) {
    fprintf(f, "usage: psgraph launch --ps P --workers W [--transport ipc|tcp] [--port-base N] [--host H]\n"
               "                      [--restart never|on-failure] [--max-restarts R] -- CMD [ARGS...]\n"
               "  starts P ps tasks (psgraph server) and W workers (CMD) on this host, each with its\n"
               "  TF_CONFIG; output lines tagged [ps0], [worker1];\n"
               "  --transport ipc (the default) Unix domain sockets in a private folder, removed at the end;\n"
               "  --transport tcp, --port-base N or --host H: TCP on ports N, N+1, ... (default: free ports);\n"
               "  --restart on-failure starts a task that died again, at most R times (default 3)\n"
               "  --keys DIR          the cluster's CURVE keys (psgraph keygen DIR) for every task; default:\n"
               "                      a fresh pair in a private folder, removed at the end (docs/security.md)\n"
               "  --allow-worker-failures N  up to N workers other than the chief may fail and the\n"
               "                      others go on (default: CMD's --backup-workers b with --sync sync,\n"
               "                      which the sync replicas can lose; else 0)\n");
}

/* Binds port (0: any) on 127.0.0.1 to check it is free; returns the port or -1. */
static int probe_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t len = sizeof a;
    if (rc == 0) rc = getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return rc == 0 ? ntohs(a.sin_port) : -1;
}

/* One line of task t: tagged on stdout, or its status line on a terminal. */
static void task_line(task_proc_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void task_line(task_proc_t *t, const char *fmt, ...) {
    char line[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!on_tty) {
        printf("[%s] %s\n", t->tag, line);
        return;
    }
    size_t len = strlen(line);
    if (len >= sizeof t->status) len = sizeof t->status - 1;
    memcpy(t->status, line, len);
    t->status[len] = 0;
    block_dirty = true;
}

static void erase_block(void) {
    if (block_lines) printf("\033[%dA\033[J", block_lines);
    block_lines = 0;
}

/* A line of the launcher itself (above the block on a terminal). */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    erase_block();
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    block_dirty = true;
    fflush(stdout);
}

/* The block: tag, state (pid or exit code, restarts), the task's last line cut to the
 * terminal's width. */
static void draw_block(const task_proc_t *t, int n) {
    struct winsize ws;
    int width = ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 40 ? ws.ws_col : 100;
    erase_block();
    for (int i = 0; i < n; i++) {
        char state[48];
        if (t[i].exited) snprintf(state, sizeof state, "exit %d", t[i].code);
        else snprintf(state, sizeof state, "pid %d", (int)t[i].pid);
        if (t[i].restarts) snprintf(state + strlen(state), sizeof state - strlen(state), " r%d", t[i].restarts);
        printf("%-8s %-14s %.*s\n", t[i].tag, state, width - 25 > 0 ? width - 25 : 0, t[i].status);
    }
    block_lines = n;
    block_dirty = false;
    fflush(stdout);
}

static void emit(task_proc_t *t, bool flush_partial) {
    char *start = t->line;
    for (;;) {
        char *nl = memchr(start, '\n', t->len - (size_t)(start - t->line));
        if (!nl) break;
        if (t->json && *start == '{')
            snprintf(t->json, t->json_size, "%.*s", (int)(nl - start), start);
        task_line(t, "%.*s", (int)(nl - start), start);
        start = nl + 1;
    }
    size_t rest = t->len - (size_t)(start - t->line);
    if (flush_partial && rest) {
        task_line(t, "%.*s", (int)rest, start);
        rest = 0;
    } else if (rest == sizeof t->line) { /* a line longer than the buffer: cut it */
        task_line(t, "%.*s", (int)rest, start);
        rest = 0;
    }
    memmove(t->line, start, rest);
    t->len = rest;
    fflush(stdout);
}

static void drain(task_proc_t *t) {
    while (t->fd >= 0) {
        ssize_t n = read(t->fd, t->line + t->len, sizeof t->line - t->len);
        if (n > 0) {
            t->len += (size_t)n;
            emit(t, false);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        emit(t, true);
        close(t->fd);
        t->fd = -1;
    }
}

static void kill_all(task_proc_t *t, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (t[i].pid > 0 && !t[i].exited) {
            if (sig == SIGTERM) t[i].killed_by_us = true;
            kill(-t[i].pid, sig);
        }
}

static int reap(task_proc_t *t, int n) {
    int alive = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].pid <= 0 || t[i].exited) continue;
        int st;
        pid_t r = waitpid(t[i].pid, &st, WNOHANG);
        if (r == t[i].pid) {
            t[i].exited = true;
            t[i].code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            drain(&t[i]);
            if (!on_tty && (t[i].code != 0 || !t[i].killed_by_us)) { /* a terminal: the state column */
                char how[64] = "";
                if (WIFSIGNALED(st)) snprintf(how, sizeof how, " (killed by signal %d)", WTERMSIG(st));
                task_line(&t[i], "exited with code %d%s%s", t[i].code, how,
                       t[i].killed_by_us ? " (stopped by launch)" : "");
            }
            fflush(stdout);
        } else {
            alive++;
        }
    }
    return alive;
}

/* Starts task t (again): a process in its own group, TF_CONFIG t->cfg, stdout and stderr
 * into a pipe read by the launcher. -1 (printed) when it cannot. */
static int spawn(task_proc_t *t, const char *self, char **cmd) {
    int p[2];
    if (pipe(p) < 0) {
        fprintf(stderr, "psgraph launch: pipe: %s\n", strerror(errno));
        return -1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        setenv("TF_CONFIG", t->cfg, 1);
        if (t->is_ps) {
            char *args[] = {(char *)self, "server", NULL};
            execv(self, args);
        } else {
            execvp(cmd[0], cmd);
        }
        fprintf(stderr, "cannot run %s: %s\n", t->is_ps ? self : cmd[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        fprintf(stderr, "psgraph launch: fork: %s\n", strerror(errno));
        return -1;
    }
    setpgid(pid, pid); /* also here: no race with a kill before the child ran setpgid */
    if (t->fd >= 0) close(t->fd);
    t->pid = pid;
    t->fd = p[0];
    t->exited = false;
    t->len = 0;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    return 0;
}

/* Reads a whole file (NUL-terminated, malloc'd) or NULL. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t n;
    while (b && (n = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    if (b) b[len] = 0;
    return b;
}

/* --trace FILE in the workers' command: every task wrote FILE.<tag>.json (its own events,
 * its own pid); one Chrome trace FILE of all of them, each task a process track. The parts
 * are removed once merged. Returns the number of parts merged (-1 on a write error). */
static int merge_traces(const task_proc_t *t, int n, const char *file) {
    char tmp[4200], part[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", file, (int)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) return -1;
    fprintf(out, "{\"traceEvents\": [");
    int parts = 0, events = 0;
    for (int i = 0; i < n; i++) {
        snprintf(part, sizeof part, "%s.%s.json", file, t[i].tag);
        char *text = slurp(part);
        char *open = text ? strchr(text, '[') : NULL, *close = text ? strrchr(text, ']') : NULL;
        if (open && close && close > open) {
            *close = 0;
            const char *body = open + 1;
            while (*body == ' ' || *body == '\n') body++;
            if (*body) fprintf(out, "%s\n%s", events++ ? "," : "", body);
            parts++;
            remove(part);
        }
        free(text);
    }
    fprintf(out, "]}\n");
    if (fflush(out) != 0 || fsync(fileno(out)) != 0 || fclose(out) != 0 || rename(tmp, file) != 0) {
        remove(tmp);
        return -1;
    }
    return parts;
}

int psg_cmd_launch(int argc, char **argv) {
    psg_launch_t o = {.ps = -1, .workers = -1, .max_restarts = 3, .host = "127.0.0.1",
                      .worker_failures = -1};
    int cmd_at = -1;
    const char *transport = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            cmd_at = i + 1;
            break;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) break;
        const char *v = argv[++i];
        char *end;
        long x = strtol(v, &end, 10);
        bool ok = *v && !*end;
        if (!strcmp(argv[i - 1], "--ps") && ok && x >= 0 && x <= 64) o.ps = (int)x;
        else if (!strcmp(argv[i - 1], "--workers") && ok && x >= 1 && x <= 128) o.workers = (int)x;
        else if (!strcmp(argv[i - 1], "--port-base") && ok && x > 0 && x < 65536 - MAX_TASKS)
            o.port_base = (int)x, o.tcp = true;
        else if (!strcmp(argv[i - 1], "--host")) o.host = v, o.tcp = true;
        else if (!strcmp(argv[i - 1], "--keys")) o.keys = v;
        else if (!strcmp(argv[i - 1], "--transport") && (!strcmp(v, "tcp") || !strcmp(v, "ipc")))
            transport = v;
        else if (!strcmp(argv[i - 1], "--restart") && (!strcmp(v, "never") || !strcmp(v, "on-failure")))
            o.restart = !strcmp(v, "on-failure");
        else if (!strcmp(argv[i - 1], "--max-restarts") && ok && x >= 0 && x <= 1000) o.max_restarts = (int)x;
        else if (!strcmp(argv[i - 1], "--allow-worker-failures") && ok && x >= 0 && x < MAX_TASKS)
            o.worker_failures = (int)x;
        else {
            fprintf(stderr, "psgraph launch: bad option '%s %s'\n", argv[i - 1], v);
            usage(stderr);
            return 2;
        }
    }
    if (o.ps < 0 || o.workers < 1 || cmd_at < 0 || cmd_at >= argc) {
        fprintf(stderr, "psgraph launch: need --ps P, --workers W and -- CMD\n");
        usage(stderr);
        return 2;
    }
    if (transport && !strcmp(transport, "ipc") && o.tcp) {
        fprintf(stderr, "psgraph launch: --transport ipc takes no --port-base or --host (those are TCP's)\n");
        return 2;
    }
    if (transport) o.tcp = !strcmp(transport, "tcp");
    o.cmd = argv + cmd_at;
    return psg_launch_local(&o);
}

/* The workers that sync replicas with b backup workers can lose: b, when the command
 * trains with --sync sync --backup-workers b; else 0. */
static int backup_workers_of(char **cmd) {
    bool sync = false;
    int b = 0;
    for (int i = 0; cmd[i] && cmd[i + 1]; i++) {
        if (!strcmp(cmd[i], "--sync")) sync = !strcmp(cmd[i + 1], "sync");
        if (!strcmp(cmd[i], "--backup-workers")) b = atoi(cmd[i + 1]);
    }
    return sync && b > 0 ? b : 0;
}

int psg_launch_local(psg_launch_t *o) {
    int nps = o->ps, nworkers = o->workers, port_base = o->port_base, max_restarts = o->max_restarts;
    bool restart = o->restart;
    const char *host = o->host ? o->host : "127.0.0.1";
    bool tcp = o->tcp || port_base > 0;
    char **cmd = o->cmd;
    int may_fail = o->worker_failures >= 0 ? o->worker_failures : backup_workers_of(cmd), failed_workers = 0;
    int n = nps + nworkers;
    on_tty = isatty(1);
    task_proc_t *t = calloc((size_t)n, sizeof *t);
    int *ports = calloc((size_t)n, sizeof *ports);
    psg_launch_keys_t keys;
    if (!t || !ports || psg_launch_keys_prepare(&keys, o->keys) < 0) {
        if (!t || !ports) fprintf(stderr, "psgraph launch: out of memory\n");
        free(t);
        free(ports);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        t[i].is_ps = i < nps;
        snprintf(t[i].tag, sizeof t[i].tag, "%s%d", t[i].is_ps ? "ps" : "worker", t[i].is_ps ? i : i - nps);
        t[i].fd = -1;
        if (i == nps && o->chief_json) {
            t[i].json = o->chief_json;
            t[i].json_size = o->chief_json_size;
            o->chief_json[0] = 0;
        }
        if (!tcp) continue;
        int want = port_base ? port_base + i : 0;
        ports[i] = probe_port(want);
        for (int j = 0; j < i && ports[i] > 0 && !port_base; j++)
            if (ports[j] == ports[i]) ports[i] = probe_port(0), j = -1;
        if (ports[i] < 0) {
            fprintf(stderr, "psgraph launch: port %d on 127.0.0.1 (for %s) is busy: %s; "
                            "pick another --port-base\n", want, t[i].tag, strerror(errno));
            psg_launch_keys_remove(&keys);
            free(t);
            free(ports);
            return 1;
        }
    }
    /* Unix domain sockets: no TCP stack between tasks of one host (docs/distributed.md) */
    char sock_dir[64] = "";
    if (!tcp) {
        snprintf(sock_dir, sizeof sock_dir, "/tmp/psgraph-launch-XXXXXX");
        if (!mkdtemp(sock_dir)) {
            fprintf(stderr, "psgraph launch: cannot make a folder for the tasks' sockets (%s): %s\n", sock_dir,
                    strerror(errno));
            psg_launch_keys_remove(&keys);
            free(t);
            free(ports);
            return 1;
        }
    }
    /* the cluster, as TF_CONFIG's "cluster" */
    size_t cap = 64 + (size_t)n * 300;
    char *cluster = malloc(cap), *cfg = malloc(cap + 128);
    size_t len = (size_t)snprintf(cluster, cap, "{");
    for (int pass = 0; pass < 2; pass++) {
        int lo = pass ? nps : 0, hi = pass ? n : nps;
        if (lo == hi) continue;
        len += (size_t)snprintf(cluster + len, cap - len, "%s\"%s\": [", len > 1 ? ", " : "",
                                pass ? "worker" : "ps");
        for (int i = lo; i < hi; i++) {
            if (tcp)
                len += (size_t)snprintf(cluster + len, cap - len, "%s\"%s:%d\"", i > lo ? ", " : "", host, ports[i]);
            else
                len += (size_t)snprintf(cluster + len, cap - len, "%s\"ipc://%s/%s\"", i > lo ? ", " : "",
                                        sock_dir, t[i].tag);
        }
        len += (size_t)snprintf(cluster + len, cap - len, "]");
    }
    snprintf(cluster + len, cap - len, "}");

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sl > 0 ? sl : 0] = 0;
    for (int i = 0; i < n; i++) {
        snprintf(cfg, cap + 128, "{\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}}",
                 cluster, t[i].is_ps ? "ps" : "worker", t[i].is_ps ? i : i - nps);
        if (!(t[i].cfg = strdup(cfg)) || spawn(&t[i], self, cmd) < 0) {
            kill_all(t, i, SIGTERM);
            break;
        }
    }
    printf("psgraph launch: %d ps + %d workers, cluster %s\n", nps, nworkers, cluster);
    printf("psgraph launch: CURVE keys %s%s\n", keys.dir, keys.run[0] ? " (made for this run, removed at the end)" : "");
    for (int i = 0; i < n; i++)
        if (t[i].pid > 0) printf("psgraph launch: %s pid %d\n", t[i].tag, (int)t[i].pid);
    fflush(stdout);

    bool stopping = false;
    double stop_at = 0, workers_done_at = 0, drawn_at = 0;
    int signaled = 0;
    for (;;) {
        struct pollfd pf[MAX_TASKS];
        int idx[MAX_TASKS], np = 0;
        for (int i = 0; i < n && np < MAX_TASKS; i++)
            if (t[i].fd >= 0) {
                pf[np] = (struct pollfd){t[i].fd, POLLIN, 0};
                idx[np++] = i;
            }
        poll(pf, (nfds_t)np, 100);
        for (int k = 0; k < np; k++)
            if (pf[k].revents) drain(&t[idx[k]]);
        int alive = reap(t, n);
        for (int i = 0; restart && !stopping && !got_signal && i < n; i++) {
            if (!t[i].exited || t[i].code == 0 || t[i].killed_by_us || t[i].restarts >= max_restarts) continue;
            t[i].restarts++;
            task_line(&t[i], "restarting it (restart %d of at most %d, --restart on-failure)", t[i].restarts,
                      max_restarts);
            if (spawn(&t[i], self, cmd) == 0) {
                task_line(&t[i], "restarted: pid %d", (int)t[i].pid);
                alive++;
            }
            fflush(stdout);
        }
        if (alive == 0) break;
        if (got_signal && !signaled) {
            signaled = got_signal;
            say("psgraph launch: signal %d, stopping every task\n", (int)got_signal);
            fflush(stdout);
        }
        bool failed = false, workers_left = false;
        for (int i = 0; i < n; i++) {
            bool died = t[i].exited && t[i].code != 0 && !t[i].killed_by_us && !t[i].tolerated;
            /* a worker other than the chief (worker 0) the job can do without: it goes on */
            bool spare = !t[i].is_ps && i > nps && failed_workers < may_fail &&
                         (!restart || t[i].restarts >= max_restarts);
            if (died && spare && !stopping) {
                t[i].tolerated = true;
                failed_workers++;
                task_line(&t[i], "failed with code %d; the job goes on without it (%d of at most %d "
                                 "workers lost, --allow-worker-failures)", t[i].code, failed_workers, may_fail);
                fflush(stdout);
                died = false;
            }
            if (died) failed = true;
            if (!t[i].is_ps && !t[i].exited) workers_left = true;
        }
        if (!workers_left && workers_done_at == 0) workers_done_at = psg_now_sec();
        /* the ps tasks exit once every worker said it is done; give them a few seconds */
        bool ps_linger = workers_done_at > 0 && psg_now_sec() - workers_done_at > 10;
        if (!stopping && (signaled || failed || ps_linger)) {
            if (failed) say("psgraph launch: a task failed, stopping the others\n");
            fflush(stdout);
            kill_all(t, n, SIGTERM);
            stopping = true;
            stop_at = psg_now_sec();
        }
        if (stopping && psg_now_sec() - stop_at > 5) kill_all(t, n, SIGKILL);
        if (on_tty && block_dirty && psg_now_sec() - drawn_at > 0.2) {
            draw_block(t, n);
            drawn_at = psg_now_sec();
        }
    }
    for (int i = 0; i < n; i++) drain(&t[i]);
    if (on_tty) draw_block(t, n);
    for (int i = 0; cmd[i] && cmd[i + 1]; i++)
        if (!strcmp(cmd[i], "--trace")) {
            int parts = merge_traces(t, n, cmd[i + 1]);
            if (parts < 0) say("psgraph launch: cannot write the merged trace %s: %s\n", cmd[i + 1], strerror(errno));
            else if (parts > 0) say("psgraph launch: trace of %d tasks merged into %s\n", parts, cmd[i + 1]);
        }
    int worst = 0;
    for (int i = 0; i < n; i++)
        if (!t[i].killed_by_us && !t[i].tolerated && t[i].code > worst) worst = t[i].code;
    if (failed_workers)
        say("psgraph launch: %d worker%s failed and the job went on without %s\n", failed_workers,
            failed_workers == 1 ? "" : "s", failed_workers == 1 ? "it" : "them");
    if (signaled && worst == 0) worst = 128 + signaled;
    if (sock_dir[0]) { /* a task killed before it closed its socket leaves the file */
        for (int i = 0; i < n; i++) {
            char path[128];
            snprintf(path, sizeof path, "%s/%s", sock_dir, t[i].tag);
            unlink(path);
        }
        rmdir(sock_dir);
    }
    psg_launch_keys_remove(&keys);
    free(cluster);
    free(cfg);
    for (int i = 0; i < n; i++) free(t[i].cfg);
    free(t);
    free(ports);
    return worst;
}
