/* The subcommands of the psgraph binary; each returns the process's exit code. */
#ifndef PSGRAPH_CLI_COMMANDS_H
#define PSGRAPH_CLI_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

/* A repeatable option's values, in the order given (NULL-terminated; cli/options.h). */
#define PSG_CLI_LIST_MAX 64
typedef struct {
    const char *v[PSG_CLI_LIST_MAX + 1];
    int n;
} psg_cli_list_t;

int psg_cmd_train(int argc, char **argv);
int psg_cmd_server(int argc, char **argv);
int psg_cmd_launch(int argc, char **argv);
int psg_cmd_keygen(int argc, char **argv);

/* A local cluster as `psgraph launch` starts it (cli/launch_cmd.c). */
typedef struct {
    int ps, workers;      /* P ps tasks (`psgraph server`), W workers running cmd */
    int workers_at_start; /* --workers MIN:MAX: MIN started, the others one a SIGUSR1 (with
                             --join); 0: all */
    int port_base;        /* 0: free ports */
    const char *host;     /* NULL: 127.0.0.1 */
    bool tcp;             /* TCP on ports of host; false: Unix domain sockets (ipc://) in a
                             private folder, unless port_base or host is given */
    bool restart;         /* --restart on-failure, at most max_restarts times */
    int max_restarts;
    int worker_failures; /* non-chief workers that may fail without stopping the job;
                            -1: the command's --backup-workers when it trains --sync sync */
    char **cmd;          /* the workers' command, NULL-terminated */
    char *chief_json;    /* NULL, or gets worker 0's last line that starts with '{' */
    size_t chief_json_size;
    const char *keys; /* the cluster's key folder (--keys); NULL: a fresh pair for this run */
    /* over ssh (cli/launch_ssh.c): task i runs on task_hosts[i] (ps first, then workers);
       NULL: every task on this host */
    char **task_hosts;
    const char *ssh_config; /* NULL, or ssh's -F FILE */
    char **ssh_options;     /* NULL-terminated ssh -o OPTIONs, or NULL */
    const char *remote_bin; /* psgraph on the hosts (ps tasks); NULL: this binary's path */
    bool keys_shared;       /* --keys-shared: the hosts read the key folder at this path */
    char *keys_payload;     /* else the keys sent to each host (cli/launch_ssh_keys.c) */
    size_t keys_payload_len;
    /* --slurm (cli/launch_slurm.c): task_hosts are the allocation's nodes and each task is
       started with srun there; task i listens on task_ports[i] (NULL: port_base + i), the
       task_slots[i]-th of the node_slots[i] tasks its node may run (its share of the GPUs) */
    bool slurm;
    int *task_ports, *task_slots, *node_slots;
} psg_launch_t;

/* The keys of a launched cluster (cli/launch_keys.c): dir, set in $PSGRAPH_KEYS for the tasks;
 * run: the private folder made for a fresh pair ("" when the keys were given). */
typedef struct {
    char dir[4096];
    char run[64];
} psg_launch_keys_t;
/* Checks the given folder, or makes a fresh pair in a new private folder; sets
 * $PSGRAPH_KEYS. -1 after printing why. */
int psg_launch_keys_prepare(psg_launch_keys_t *k, const char *given);
/* Removes a fresh pair and its folder (nothing for given keys). */
void psg_launch_keys_remove(psg_launch_keys_t *k);
/* The files of key folder dir that a task on another host needs, in name order: every
 * NAME.key (the cluster's public key and the allow-list) and cluster.key_secret, no other
 * secret: fn(ctx, name, text, len) with the file's text (NUL-terminated, at most
 * PSG_LAUNCH_KEY_FILE_MAX bytes). -1 after printing (naming the file), or fn's -1. */
#define PSG_LAUNCH_KEY_FILE_MAX 65536
typedef int (*psg_launch_key_fn)(void *ctx, const char *name, const char *text, size_t len);
int psg_launch_keys_each(const char *dir, psg_launch_key_fn fn, void *ctx);

/* Starts the tasks of *o, each with its TF_CONFIG, tags and forwards their output, stops
 * all when one fails or on a signal. Returns the worst exit code of the tasks (128 + the
 * signal when stopped by one), after printing why. With o->task_hosts, every task runs on
 * its host over ssh (cli/launch_ssh.c). */
int psg_launch_local(psg_launch_t *o);
/* The value that NULL-terminated command cmd gives option opt ("--logdir"), else otherwise. */
const char *psg_launch_cmd_option(char **cmd, const char *opt, const char *otherwise);

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
/* The script a remote shell runs for a task (cli/launch_ssh.c), over ssh or srun: stderr
 * joined to stdout (the session's own stderr is the transport's alone), in this folder (or
 * /), TF_CONFIG cfg and the keys set, then the shell code pre (NULL: none), the task in a
 * session and process group of its own (setsid), its pid printed, and a watcher that stops
 * that group when the session's stdin closes (the launcher stopped it, or the connection
 * died); the exit code is the task's. malloc'd; NULL when out of memory. */
char *psg_launch_remote_script(const psg_launch_t *o, const char *host, const char *cfg, char **cmd,
                               const char *pre);
void psg_launch_argv_free(char ***argv);

/* The keys over ssh (cli/launch_ssh_keys.c). Reads key folder dir into o->keys_payload,
 * what each task's ssh session gets on its standard input first; -1 after printing. */
int psg_launch_ssh_keys_prepare(psg_launch_t *o, const char *dir);
void psg_launch_ssh_keys_free(psg_launch_t *o);
/* The remote shell's part (malloc'd) that reads the payload into a private folder (mktemp,
 * 0700), exports PSGRAPH_KEYS naming it and removes it when the remote shell exits (the task
 * ended, or the session died and the watcher ended it). NULL when out of memory. */
char *psg_launch_ssh_keys_script(const char *host);
/* Writes the payload into fd, ssh's standard input (nothing without one). -1 after printing. */
int psg_launch_ssh_keys_send(const psg_launch_t *o, int fd, const char *tag);

/* --slurm (cli/launch_slurm.c): the tasks' nodes and ports from the allocation's environment
 * (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE, SLURM_NTASKS) as TensorFlow's
 * SlurmClusterResolver places them, into o->task_hosts, task_ports, task_slots and
 * node_slots. -1 after printing why (not in an allocation, too few tasks, ...). */
int psg_launch_slurm_place(psg_launch_t *o);
void psg_launch_slurm_free(psg_launch_t *o);
/* srun's argv (as psg_launch_ssh_argv's) that runs task i's command cmd on its node with
 * TF_CONFIG cfg: one job step of one task, sharing the allocation with the others
 * (--overlap), its stdin the launcher's pipe (the keys, then the watcher's), CUDA_VISIBLE_DEVICES
 * its share of the node's GPUs (SLURM_STEP_GPUS, else CUDA_VISIBLE_DEVICES there). */
char **psg_launch_srun_argv(const psg_launch_t *o, int i, const char *cfg, char **cmd);

/* `psgraph launch --k8s ...`: writes the Kubernetes objects (cli/launch_k8s.c), with a
 * Secret of the keys in keys_dir (NULL: a fresh pair); workers_at_start > 0 (--workers
 * MIN:MAX): the worker Job's parallelism, the pods from that index on joining (--join). */
int psg_launch_k8s(int argc, char **argv, int ps, int workers, int workers_at_start, bool restart,
                   char **cmd, const char *keys_dir);
int psg_cmd_bench(int argc, char **argv);
int psg_cmd_simulate(int argc, char **argv);
int psg_cmd_inspect(int argc, char **argv);
int psg_cmd_plot(int argc, char **argv);
int psg_cmd_compare(int argc, char **argv);
int psg_cmd_data(int argc, char **argv);

#endif
