/* The subcommands of the psgraph binary; each returns the process's exit code. */
#ifndef PSGRAPH_CLI_COMMANDS_H
#define PSGRAPH_CLI_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

int psg_cmd_train(int argc, char **argv);
int psg_cmd_server(int argc, char **argv);
int psg_cmd_launch(int argc, char **argv);

/* A local cluster as `psgraph launch` starts it (cli/launch_cmd.c). */
typedef struct {
    int ps, workers;    /* P ps tasks (`psgraph server`), W workers running cmd */
    int port_base;      /* 0: free ports */
    const char *host;   /* NULL: 127.0.0.1 */
    bool tcp;           /* TCP on ports of host; false: Unix domain sockets (ipc://) in a
                           private folder, unless port_base or host is given */
    bool restart;       /* --restart on-failure, at most max_restarts times */
    int max_restarts;
    int worker_failures; /* non-chief workers that may fail without stopping the job;
                            -1: the command's --backup-workers when it trains --sync sync */
    char **cmd;         /* the workers' command, NULL-terminated */
    char *chief_json;   /* NULL, or gets worker 0's last line that starts with '{' */
    size_t chief_json_size;
    /* over ssh (cli/launch_ssh.c): task i runs on task_hosts[i] (ps first, then workers);
       NULL: every task on this host */
    char **task_hosts;
    const char *ssh_config;   /* NULL, or ssh's -F FILE */
    char **ssh_options;       /* NULL-terminated ssh -o OPTIONs, or NULL */
    const char *remote_bin;   /* psgraph on the hosts (ps tasks); NULL: this binary's path */
} psg_launch_t;

/* Starts the tasks of *o, each with its TF_CONFIG, tags and forwards their output, stops
 * all when one fails or on a signal. Returns the worst exit code of the tasks (128 + the
 * signal when stopped by one), after printing why. With o->task_hosts, every task runs on
 * its host over ssh (cli/launch_ssh.c). */
int psg_launch_local(psg_launch_t *o);

/* Task i's host from --hosts LIST or --hosts-file FILE (one of them NULL): "h1,h2"
 * round-robin over ps then workers, or "ps0@h1,worker0@h2,..." naming every task once.
 * Returns n = ps + workers malloc'd strings (psg_launch_hosts_free), or NULL after
 * printing an error that names the host, task or line. */
char **psg_launch_hosts(const char *list, const char *file, int ps, int workers);
void psg_launch_hosts_free(char ***hosts, int n);

/* ssh's argv (malloc'd, NULL-terminated; free with psg_launch_argv_free) that runs argv
 * `cmd` on `host` with TF_CONFIG `cfg` in this folder, in a process group of its own that
 * is stopped (SIGTERM, then SIGKILL after 5 s) when ssh's standard input closes, as it
 * does when the launcher or the ssh session dies: no orphan on the host. */
char **psg_launch_ssh_argv(const psg_launch_t *o, const char *host, const char *cfg, char **cmd);
void psg_launch_argv_free(char ***argv);

/* `psgraph launch --k8s ...`: writes the Kubernetes objects (cli/launch_k8s.c). */
int psg_launch_k8s(int argc, char **argv, int ps, int workers, bool restart, char **cmd);
int psg_cmd_bench(int argc, char **argv);
int psg_cmd_simulate(int argc, char **argv);
/* `psgraph train --model inception3 ...`: the bench's loop with the Inception recipe. */
int psg_cmd_train_inception3(int argc, char **argv);
int psg_cmd_inspect(int argc, char **argv);
int psg_cmd_plot(int argc, char **argv);
int psg_cmd_compare(int argc, char **argv);
int psg_cmd_data(int argc, char **argv);

#endif
