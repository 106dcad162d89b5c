/* The tasks' processes of `psgraph launch` (cli/launch_tasks.c): their output forwarded as
 * tagged lines (on a terminal: a block of one status line per task, redrawn in place), the
 * launcher's own lines, stopping and reaping them. Where and how they start, and when the
 * job stops them, is cli/launch_cmd.c. */
#ifndef PSGRAPH_CLI_LAUNCH_TASKS_H
#define PSGRAPH_CLI_LAUNCH_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    char tag[32];
    bool is_ps;
    pid_t pid;
    int fd; /* the read end of its stdout+stderr, -1 once closed */
    char line[4096];
    size_t len;
    bool exited, killed_by_us;
    bool tolerated; /* a non-chief worker whose failure the job outlives */
    bool pending;   /* --workers MIN:MAX: not started yet (a SIGUSR1 starts it, --join) */
    int code;
    int restarts;
    char *cfg;        /* its TF_CONFIG */
    char status[256]; /* on a terminal: its last line */
    char *json;       /* NULL, or where its last line starting with '{' is kept */
    size_t json_size;
    const char *host; /* NULL: this host; else it runs there over ssh or srun */
    int in_fd;        /* over ssh: the write end of ssh's stdin; closing it stops the task */
    char last[256];   /* its last line, for the message when it fails */
    int index;        /* in the cluster: ps first, then workers */
    /* over ssh or srun: the transport's own stderr (the task's joins its stdout), its lines
       tagged as the task's and the last one kept: the reason quoted when it fails */
    int err_fd;
    char err_line[1024];
    size_t err_len;
    char err_last[256];
    bool srun;
} task_proc_t;

/* stdout is a terminal (the block is drawn); the block changed since it was drawn. */
extern bool psg_launch_on_tty;
extern bool psg_launch_block_dirty;

/* One line of task t: tagged on stdout, or its status line on a terminal. */
void psg_launch_task_line(task_proc_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A line of the launcher itself (above the block on a terminal). */
void psg_launch_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The block of the n tasks, redrawn. */
void psg_launch_draw_block(const task_proc_t *t, int n);
/* What task t wrote (its stdout+stderr; over ssh or srun, the transport's stderr) forwarded. */
void psg_launch_drain(task_proc_t *t);
void psg_launch_drain_err(task_proc_t *t);
/* sig to every task still running (SIGTERM over ssh: its stdin closed). */
void psg_launch_kill_all(task_proc_t *t, int n, int sig);
/* The tasks that exited collected (code, said); returns those still alive. */
int psg_launch_reap(task_proc_t *t, int n);

#endif
