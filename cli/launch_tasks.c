/* The tasks' processes of `psgraph launch`: their output forwarded, stopped, reaped
 * (cli/launch_tasks.h). */
#include "cli/launch_tasks.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* On a terminal, a block of one line per task redrawn in place; else tagged lines. */
bool psg_launch_on_tty;
static int block_lines; /* lines of the block drawn last (0: none on screen) */
bool psg_launch_block_dirty;

void psg_launch_task_line(task_proc_t *t, const char *fmt, ...) {
    char line[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!psg_launch_on_tty) {
        printf("[%s] %s\n", t->tag, line);
        return;
    }
    size_t len = strlen(line);
    if (len >= sizeof t->status) len = sizeof t->status - 1;
    memcpy(t->status, line, len);
    t->status[len] = 0;
    psg_launch_block_dirty = true;
}

static void erase_block(void) {
    if (block_lines) printf("\033[%dA\033[J", block_lines);
    block_lines = 0;
}

/* A line of the launcher itself (above the block on a terminal). */
void psg_launch_say(const char *fmt, ...) {
    erase_block();
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    psg_launch_block_dirty = true;
    fflush(stdout);
}

/* The block: tag, state (pid or exit code, restarts), the task's last line cut to the
 * terminal's width. */
void psg_launch_draw_block(const task_proc_t *t, int n) {
    struct winsize ws;
    int width = ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 40 ? ws.ws_col : 100;
    erase_block();
    for (int i = 0; i < n; i++) {
        char state[48];
        if (t[i].exited)
            snprintf(state, sizeof state, "exit %d", t[i].code);
        else
            snprintf(state, sizeof state, "pid %d", (int)t[i].pid);
        if (t[i].restarts)
            snprintf(state + strlen(state), sizeof state - strlen(state), " r%d", t[i].restarts);
        printf("%-8s %-14s %.*s\n", t[i].tag, state, width - 25 > 0 ? width - 25 : 0, t[i].status);
    }
    block_lines = n;
    psg_launch_block_dirty = false;
    fflush(stdout);
}

static void emit(task_proc_t *t, bool flush_partial) {
    char *start = t->line;
    for (;;) {
        char *nl = memchr(start, '\n', t->len - (size_t)(start - t->line));
        if (!nl) break;
        if (t->json && *start == '{')
            snprintf(t->json, t->json_size, "%.*s", (int)(nl - start), start);
        if (nl > start) snprintf(t->last, sizeof t->last, "%.*s", (int)(nl - start), start);
        psg_launch_task_line(t, "%.*s", (int)(nl - start), start);
        start = nl + 1;
    }
    size_t rest = t->len - (size_t)(start - t->line);
    if (flush_partial && rest) {
        psg_launch_task_line(t, "%.*s", (int)rest, start);
        rest = 0;
    } else if (rest == sizeof t->line) { /* a line longer than the buffer: cut it */
        psg_launch_task_line(t, "%.*s", (int)rest, start);
        rest = 0;
    }
    memmove(t->line, start, rest);
    t->len = rest;
    fflush(stdout);
}

void psg_launch_drain(task_proc_t *t) {
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

/* The transport's stderr (ssh's or srun's own messages): tagged lines, the last one kept. */
void psg_launch_drain_err(task_proc_t *t) {
    while (t->err_fd >= 0) {
        ssize_t n = read(t->err_fd, t->err_line + t->err_len, sizeof t->err_line - t->err_len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        bool eof = n <= 0;
        if (n > 0) t->err_len += (size_t)n;
        size_t start = 0;
        for (;;) {
            char *nl = memchr(t->err_line + start, '\n', t->err_len - start);
            size_t end = nl ? (size_t)(nl - t->err_line) : t->err_len;
            if (!nl && !((eof || t->err_len == sizeof t->err_line) && start < t->err_len)) break;
            size_t len = end - start;
            while (len && t->err_line[start + len - 1] == '\r') len--;
            if (len) {
                snprintf(t->err_last, sizeof t->err_last, "%.*s", (int)len, t->err_line + start);
                psg_launch_task_line(t, "%.*s", (int)len, t->err_line + start);
            }
            start = nl ? end + 1 : end;
        }
        memmove(t->err_line, t->err_line + start, t->err_len - start);
        t->err_len -= start;
        fflush(stdout);
        if (eof) {
            close(t->err_fd);
            t->err_fd = -1;
        }
    }
}

/* SIGTERM to every task; over ssh, its stdin closed instead: the remote side then stops
 * its task's process group (SIGKILL kills the local ssh, which closes the session too). */
void psg_launch_kill_all(task_proc_t *t, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (t[i].pid > 0 && !t[i].exited) {
            if (sig == SIGTERM) t[i].killed_by_us = true;
            if (t[i].host && sig == SIGTERM && t[i].in_fd >= 0) {
                close(t[i].in_fd);
                t[i].in_fd = -1;
            } else if (!t[i].host || sig == SIGKILL) {
                kill(-t[i].pid, sig);
            }
        }
}

int psg_launch_reap(task_proc_t *t, int n) {
    int alive = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].pid <= 0 || t[i].exited) continue;
        int st;
        pid_t r = waitpid(t[i].pid, &st, WNOHANG);
        if (r == t[i].pid) {
            t[i].exited = true;
            t[i].code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            psg_launch_drain(&t[i]);
            psg_launch_drain_err(&t[i]);
            if (!psg_launch_on_tty &&
                (t[i].code != 0 || !t[i].killed_by_us)) { /* a terminal: the state column */
                char how[64] = "";
                if (WIFSIGNALED(st))
                    snprintf(how, sizeof how, " (killed by signal %d)", WTERMSIG(st));
                psg_launch_task_line(&t[i], "exited with code %d%s%s", t[i].code, how,
                                     t[i].killed_by_us ? " (stopped by launch)" : "");
            }
            const char *why = t[i].err_last[0] ? t[i].err_last : "no message from it";
            if (t[i].host && !t[i].killed_by_us && t[i].code == 127)
                psg_launch_say(
                    "psgraph launch: %s on host %s: command not found there (exit 127): %s\n",
                    t[i].tag, t[i].host, t[i].last[0] ? t[i].last : "no output");
            else if (t[i].host && !t[i].killed_by_us && !t[i].srun && t[i].code == 255)
                psg_launch_say("psgraph launch: %s on host %s: ssh failed (exit 255): %s\n",
                               t[i].tag, t[i].host, why);
            else if (t[i].srun && !t[i].killed_by_us && t[i].code != 0)
                psg_launch_say("psgraph launch: %s on host %s: exit %d, srun said: %s\n", t[i].tag,
                               t[i].host, t[i].code, why);
            fflush(stdout);
        } else {
            alive++;
        }
    }
    return alive;
}
