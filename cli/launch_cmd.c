/* `psgraph launch`: starts a whole cluster, each task its own process with its own
 * TF_CONFIG (ps tasks run `psgraph server`, workers run the given command), on this host or
 * each on its host over ssh; tags every output line with its task, and stops all of them on
 * Ctrl-C or when one fails. With --restart on-failure a task that dies is started again
 * (bounded retries). Not the ssh command line (cli/launch_ssh.c) nor Kubernetes
 * (cli/launch_k8s.c), nor forwarding the tasks' output (cli/launch_tasks.c). */
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/launch_tasks.h"
#include "psgraph/sync_replicas.h"
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

static volatile sig_atomic_t got_signal, joins_asked;
static void on_signal(int sig) {
    got_signal = sig;
}
static void on_usr1(int sig) {
    (void)sig;
    joins_asked++;
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: psgraph launch --ps P --workers W|MIN:MAX [--transport ipc|tcp] [--port-base N] [--host H]\n"
        "                      [--restart never|on-failure] [--max-restarts R] -- CMD [ARGS...]\n"
        "       psgraph launch --ssh --hosts H1,H2,... | --hosts-file F [--ssh-config F]\n"
        "                      [--ssh-option OPT]... [--remote-bin PATH] [--keys-shared] --ps P ...\n"
        "       psgraph launch --slurm [--port-base N] [--remote-bin PATH] [--keys-shared] --ps P ...\n"
        "       psgraph launch --k8s [--image IMG] [--namespace NS] [--name N] [--out DIR]\n"
        "                      [--gpus-per-worker G] [--cpu C] [--memory M] [--data PVC|/PATH]\n"
        "                      [--logdir-volume PVC|/PATH] [--node-selector K=V]... [--toleration\n"
        "                      K[=V][:EFFECT]]... [--ttl-after-finished S] [--active-deadline S] ...\n"
        "  starts P ps tasks (psgraph server) and W workers (CMD) on this host, each with its\n"
        "  TF_CONFIG; output lines tagged [ps0], [worker1];\n"
        "  --ssh: each task on its host over OpenSSH (BatchMode; the same paths there):\n"
        "    round-robin over --hosts, or ps0@h1,worker0@h2,... ; TCP on --port-base (23000) + i;\n"
        "  --slurm: inside an allocation (sbatch, salloc), each task a job step (srun) on its node,\n"
        "    placed as TensorFlow's SlurmClusterResolver (nodes sorted, ps first); port --port-base\n"
        "    (23000) + the task's slot on its node; keys as with --ssh (docs/hosts.md);\n"
        "  --k8s: writes a headless Service and an Indexed Job per job as YAML (docs/hosts.md);\n"
        "  --transport ipc (the default) Unix domain sockets in a private folder, removed at the end;\n"
        "  --transport tcp, --port-base N or --host H: TCP on ports N, N+1, ... (default: free ports);\n"
        "  --restart on-failure starts a task that died again, at most R times (default 3)\n"
        "  --workers MIN:MAX a cluster of MAX workers of which MIN start; each SIGUSR1 to launch\n"
        "                      starts the next one with CMD --join (it joins the running job;\n"
        "                      --ssh, --slurm: on its host; --k8s: the worker Job's parallelism\n"
        "                      is MIN)\n"
        "  --keys DIR the cluster's CURVE keys (psgraph keygen DIR) for every task; default: a fresh\n"
        "                      pair in a private folder, removed at the end (with --ssh: copied to a\n"
        "                      private folder on each host over the task's ssh session, removed when\n"
        "                      the task ends; --keys-shared: read by the hosts at the same path;\n"
        "                      with --k8s: a Secret mounted into every pod; docs/security.md)\n"
        "  --allow-worker-failures N  up to N workers other than the chief may fail and the\n"
        "                      others go on (default: CMD's --backup-workers b with --sync sync,\n"
        "                      which the sync replicas can lose; else 0)\n");
}

/* Binds port (0: any) on 127.0.0.1 to check it is free; returns the port or -1. */
static int probe_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t len = sizeof a;
    if (rc == 0) rc = getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return rc == 0 ? ntohs(a.sin_port) : -1;
}

/* One line of task t: tagged on stdout, or its status line on a terminal. */
/* The ps tasks write checkpoint shards into the workers' --logdir and their part of a
 * timeline beside the workers' --trace file: those are the directories a ps may write
 * (`psgraph server --logdir`), as "--logdir" "DIR" pairs into out; and they time out
 * silent peers as the workers do (--peer-timeout), and forward updates to their backups as the
 * workers expect (--ps-replicas). NULL-terminated, 8 entries at most. */
#define PS_ARGS 8
const char *psg_launch_cmd_option(char **cmd, const char *opt, const char *otherwise) {
    for (int i = 0; cmd[i] && cmd[i + 1]; i++)
        if (!strcmp(cmd[i], opt)) return cmd[i + 1];
    return otherwise;
}

static void ps_args(char **cmd, char **out) {
    static char trace_dir[4096];
    int n = 0;
    const char *peer_timeout = psg_launch_cmd_option(cmd, "--peer-timeout", NULL);
    if (peer_timeout) {
        out[n++] = "--peer-timeout";
        out[n++] = (char *)peer_timeout;
    }
    const char *replicas = psg_launch_cmd_option(cmd, "--ps-replicas", NULL);
    if (replicas) {
        out[n++] = "--ps-replicas";
        out[n++] = (char *)replicas;
    }
    for (int i = 0; cmd[i] && cmd[i + 1]; i++) {
        /* a Python script's checkpoint folder (mnist_replica.py's --train_dir,
         * MonitoredTrainingSession's checkpoint_dir) is a logdir too */
        if (!strcmp(cmd[i], "--logdir") || !strcmp(cmd[i], "--train_dir") ||
            !strcmp(cmd[i], "--checkpoint_dir")) {
            out[n++] = "--logdir";
            out[n++] = cmd[i + 1];
        } else if (!strcmp(cmd[i], "--trace")) {
            snprintf(trace_dir, sizeof trace_dir, "%s", cmd[i + 1]);
            char *slash = strrchr(trace_dir, '/');
            if (slash)
                *slash = 0;
            else
                snprintf(trace_dir, sizeof trace_dir, ".");
            out[n++] = "--logdir";
            out[n++] = trace_dir;
        }
        if (n >= PS_ARGS - 1) break;
    }
    out[n] = NULL;
}

/* Starts task t (again): a process in its own group, TF_CONFIG t->cfg, stdout and stderr
 * into a pipe read by the launcher; over ssh, ssh with its stdin a pipe the launcher holds
 * (argv from psg_launch_ssh_argv). -1 (printed) when it cannot. */
static int spawn(task_proc_t *t, const psg_launch_t *o, const char *self, char **cmd) {
    int p[2], in[2] = {-1, -1}, e[2] = {-1, -1};
    char **argv = NULL;
    if (t->host) {
        char *ps_cmd[2 + PS_ARGS + 1] = {(char *)(o->remote_bin ? o->remote_bin : self), "server"};
        ps_args(cmd, ps_cmd + 2);
        char **task_cmd = t->is_ps ? ps_cmd : cmd;
        argv = o->slurm ? psg_launch_srun_argv(o, t->index, t->cfg, task_cmd)
                        : psg_launch_ssh_argv(o, t->host, t->cfg, task_cmd);
    }
    if ((t->host && (!argv || pipe2(in, O_CLOEXEC) < 0 || pipe2(e, O_CLOEXEC) < 0)) ||
        pipe2(p, O_CLOEXEC) < 0) {
        fprintf(stderr, "psgraph launch: %s: %s\n", t->tag,
                argv ? strerror(errno) : "out of memory");
        if (in[0] >= 0) close(in[0]), close(in[1]);
        if (e[0] >= 0) close(e[0]), close(e[1]);
        psg_launch_argv_free(&argv);
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
        dup2(e[1] >= 0 ? e[1] : p[1], 2);
        if (argv) {
            dup2(in[0], 0);
            execvp(argv[0], argv);
        } else {
            setenv("TF_CONFIG", t->cfg, 1);
            if (t->is_ps) {
                char *args[2 + PS_ARGS + 1] = {(char *)self, "server"};
                ps_args(cmd, args + 2);
                execv(self, args);
            } else {
                execvp(cmd[0], cmd);
            }
        }
        fprintf(stderr, "cannot run %s: %s\n",
                argv       ? argv[0]
                : t->is_ps ? self
                           : cmd[0],
                strerror(errno));
        _exit(127);
    }
    psg_launch_argv_free(&argv);
    close(p[1]);
    if (in[0] >= 0) close(in[0]);
    if (e[1] >= 0) close(e[1]);
    if (pid > 0 && in[1] >= 0)
        psg_launch_ssh_keys_send(o, in[1], t->tag); /* a failure shows as ssh's */
    if (pid < 0) {
        close(p[0]);
        if (in[1] >= 0) close(in[1]);
        if (e[0] >= 0) close(e[0]);
        fprintf(stderr, "psgraph launch: fork: %s\n", strerror(errno));
        return -1;
    }
    setpgid(pid, pid); /* also here: no race with a kill before the child ran setpgid */
    if (t->fd >= 0) close(t->fd);
    if (t->in_fd >= 0) close(t->in_fd);
    if (t->err_fd >= 0) close(t->err_fd);
    t->pid = pid;
    t->fd = p[0];
    t->in_fd = in[1];
    t->err_fd = e[0];
    t->err_len = 0;
    t->err_last[0] = 0;
    if (e[0] >= 0) fcntl(e[0], F_SETFL, O_NONBLOCK);
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

/* The options of `psgraph launch` (cli/option_table.c) into *a; returns the index of CMD,
 * 0 after --help, or -1 after printing the error. */
static int parse_options(int argc, char **argv, psg_launch_args_t *a) {
    int cmd_at;
    int rc = psg_cli_parse(PSG_CLI_LAUNCH, argc, argv, 1, a, &cmd_at);
    if (rc == 1) usage(stdout);
    if (rc < 0) fprintf(stderr, "psgraph launch: %s\n", psg_error_message());
    if (rc == -2) usage(stderr);
    if (rc) return rc == 1 ? 0 : -1;
    if (a->host) a->l.host = a->host, a->l.tcp = true;
    if (a->l.port_base) a->l.tcp = true;
    return cmd_at < argc ? cmd_at : -2;
}

int psg_cmd_launch(int argc, char **argv) {
    psg_launch_args_t a = {.l = {.ps = -1,
                                 .workers = -1,
                                 .max_restarts = 3,
                                 .host = "127.0.0.1",
                                 .worker_failures = -1}};
    psg_launch_t *o = &a.l;
    int cmd_at = parse_options(argc, argv, &a);
    if (cmd_at == 0) return 0;
    if (cmd_at == -1) return 2;
    if (a.workers && psg_cli_workers_range(a.workers, &o->workers_at_start, &o->workers) < 0)
        return 2; /* checked by the table already */
    if (o->workers_at_start == o->workers) o->workers_at_start = 0;
    if (o->ps < 0 || o->workers < 1 || cmd_at < 0) {
        fprintf(stderr, "psgraph launch: need --ps P, --workers W and -- CMD\n");
        usage(stderr);
        return 2;
    }
    if (a.ssh + a.k8s + o->slurm > 1) {
        fprintf(stderr, "psgraph launch: one of --ssh, --slurm and --k8s\n");
        return 2;
    }
    const char *misplaced =
        a.k8s_args.n && !a.k8s ? "--image, --namespace, --data, ... go with --k8s"
        : (a.hosts || a.hosts_file || a.ssh_options.n || o->ssh_config) && !a.ssh
            ? "--hosts, --hosts-file and --ssh-* go with --ssh"
        : (o->remote_bin || o->keys_shared) && !a.ssh && !o->slurm
            ? "--remote-bin and --keys-shared go with --ssh or --slurm"
            : NULL;
    if (misplaced) {
        fprintf(stderr, "psgraph launch: %s\n", misplaced);
        return 2;
    }
    if (a.transport && !strcmp(a.transport, "ipc") && (o->tcp || a.ssh || a.k8s || o->slurm)) {
        fprintf(stderr, "psgraph launch: --transport ipc takes no --port-base, --host, --ssh, "
                        "--slurm or --k8s (those are TCP's)\n");
        return 2;
    }
    if (a.transport) o->tcp = !strcmp(a.transport, "tcp");
    o->cmd = argv + cmd_at;
    if (a.k8s)
        return psg_launch_k8s(a.k8s_args.n, (char **)a.k8s_args.v, o->ps, o->workers,
                              o->workers_at_start, o->restart, o->cmd, o->keys);
    if (a.ssh) {
        if (!a.hosts == !a.hosts_file) {
            fprintf(
                stderr,
                "psgraph launch: --ssh needs --hosts H1,H2,... or --hosts-file FILE (one of them)\n");
            return 2;
        }
        if (!(o->task_hosts = psg_launch_hosts(a.hosts, a.hosts_file, o->ps, o->workers))) return 2;
        o->ssh_options = (char **)a.ssh_options.v;
        o->tcp = true;
        if (!o->port_base) o->port_base = 23000;
    }
    if (o->slurm) {
        o->tcp = true;
        if (!o->port_base) o->port_base = 23000;
        if (psg_launch_slurm_place(o) < 0) return 2;
    }
    int rc = psg_launch_local(o);
    if (o->slurm)
        psg_launch_slurm_free(o);
    else
        psg_launch_hosts_free(&o->task_hosts, o->ps + o->workers);
    return rc;
}

/* The workers the command's strategy can lose and go on (sync/strategies.c: async all but the
 * chief; sync and local SGD with --backup-workers b: b; the others 0), for a command that
 * trains with --sync, or `psgraph train` without it (async in a cluster). */
static int backup_workers_of(char **cmd, int nworkers) {
    static const char *const read[] = {"--sync", "--backup-workers", "--replicas-to-aggregate"};
    psg_train_args_t t = {
        0}; /* the three through train's rows of the table: a bad value is not read */
    for (int i = 0; cmd[i] && cmd[i + 1]; i++)
        for (size_t k = 0; k < sizeof read / sizeof *read; k++)
            if (!strcmp(cmd[i], read[k])) psg_cli_parse_one(PSG_CLI_TRAIN, read[k], cmd[i + 1], &t);
    psg_sync_config_t c;
    psg_sync_config_defaults(&c);
    c.strategy = t.c.sync;
    for (int i = 1; cmd[i] && !c.strategy; i++) { /* "... psgraph train": its default */
        const char *base = strrchr(cmd[i - 1], '/');
        if (!strcmp(cmd[i], "train") && !strcmp(base ? base + 1 : cmd[i - 1], "psgraph"))
            c.strategy = "async";
    }
    c.num_workers = nworkers;
    c.backup_workers = t.c.backup_workers;
    c.replicas_to_aggregate = t.c.replicas_to_aggregate;
    if (!c.strategy || !strcmp(c.strategy, "none")) return 0;
    int n = psg_sync_lost_workers_tolerated(&c);
    return n > 0 ? n : 0;
}

/* One run of the launcher: its tasks and where it is in stopping them. */
typedef struct {
    psg_launch_t *o;
    task_proc_t *t;
    int n, nps;
    int *ports;
    char sock_dir[64];
    psg_launch_keys_t keys;
    char *cluster;
    char self[4096];
    int may_fail, failed_workers;
    int joins_done; /* SIGUSR1s handled (joins_asked: received) */
    bool stopping;
    double stop_at, workers_done_at, drawn_at;
    double job_over_at; /* the chief and every ps task exited 0 (0: not yet) */
    int signaled;
} launch_run_t;

/* Tags, hosts and ports of the tasks: free ports of this host (or --port-base N + i, checked
 * free here), --port-base + i on the hosts over ssh (not checkable from here). -1 printed. */
static int tasks_init(launch_run_t *r) {
    psg_launch_t *o = r->o;
    for (int i = 0; i < r->n; i++) {
        task_proc_t *t = &r->t[i];
        t->is_ps = i < r->nps;
        snprintf(t->tag, sizeof t->tag, "%s%d", t->is_ps ? "ps" : "worker",
                 t->is_ps ? i : i - r->nps);
        t->fd = t->in_fd = t->err_fd = -1;
        t->index = i;
        if (o->task_hosts) {
            t->host = o->task_hosts[i];
            t->srun = o->slurm;
            r->ports[i] = o->task_ports ? o->task_ports[i] : o->port_base + i;
            continue;
        }
        if (i == r->nps && o->chief_json) {
            t->json = o->chief_json;
            t->json_size = o->chief_json_size;
            o->chief_json[0] = 0;
        }
        if (!o->tcp) continue;
        int want = o->port_base ? o->port_base + i : 0;
        r->ports[i] = probe_port(want);
        for (int j = 0; j < i && r->ports[i] > 0 && !o->port_base; j++)
            if (r->ports[j] == r->ports[i]) r->ports[i] = probe_port(0), j = -1;
        if (r->ports[i] < 0) {
            fprintf(stderr,
                    "psgraph launch: port %d on 127.0.0.1 (for %s) is busy: %s; "
                    "pick another --port-base\n",
                    want, t->tag, strerror(errno));
            return -1;
        }
    }
    /* Unix domain sockets: no TCP stack between tasks of one host (docs/distributed.md) */
    if (!o->tcp) {
        snprintf(r->sock_dir, sizeof r->sock_dir, "/tmp/psgraph-launch-XXXXXX");
        if (!mkdtemp(r->sock_dir)) {
            fprintf(stderr,
                    "psgraph launch: cannot make a folder for the tasks' sockets (%s): %s\n",
                    r->sock_dir, strerror(errno));
            r->sock_dir[0] = 0;
            return -1;
        }
    }
    return 0;
}

/* The address of task i in the cluster: its host (over ssh, without a user@) and port, or
 * its Unix socket. */
static void task_address(const launch_run_t *r, int i, char *out, size_t size) {
    const char *host = r->o->host ? r->o->host : "127.0.0.1";
    if (r->t[i].host) {
        const char *at = strrchr(r->t[i].host, '@');
        host = at ? at + 1 : r->t[i].host;
    }
    if (r->o->tcp)
        snprintf(out, size, "%s:%d", host, r->ports[i]);
    else
        snprintf(out, size, "ipc://%s/%s", r->sock_dir, r->t[i].tag);
}

/* The cluster, as TF_CONFIG's "cluster" (malloc'd into r->cluster); -1 when out of memory. */
static int build_cluster(launch_run_t *r) {
    size_t cap = 64 + (size_t)r->n * 300, len;
    if (!(r->cluster = malloc(cap))) return -1;
    len = (size_t)snprintf(r->cluster, cap, "{");
    for (int pass = 0; pass < 2; pass++) {
        int lo = pass ? r->nps : 0, hi = pass ? r->n : r->nps;
        if (lo == hi) continue;
        len += (size_t)snprintf(r->cluster + len, cap - len, "%s\"%s\": [", len > 1 ? ", " : "",
                                pass ? "worker" : "ps");
        for (int i = lo; i < hi; i++) {
            char addr[280];
            task_address(r, i, addr, sizeof addr);
            len +=
                (size_t)snprintf(r->cluster + len, cap - len, "%s\"%s\"", i > lo ? ", " : "", addr);
        }
        len += (size_t)snprintf(r->cluster + len, cap - len, "]");
    }
    snprintf(r->cluster + len, cap - len, "}");
    return 0;
}

/* Every task started with its TF_CONFIG; on a failure the ones started are stopped. */
static void start_tasks(launch_run_t *r) {
    size_t cap = strlen(r->cluster) + 128;
    char *cfg = malloc(cap);
    for (int i = 0; i < r->n; i++) {
        task_proc_t *t = &r->t[i];
        if (cfg)
            snprintf(cfg, cap, "{\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}}",
                     r->cluster, t->is_ps ? "ps" : "worker", t->is_ps ? i : i - r->nps);
        t->pending = !t->is_ps && r->o->workers_at_start && i - r->nps >= r->o->workers_at_start;
        if (!cfg || !(t->cfg = strdup(cfg)) ||
            (!t->pending && spawn(t, r->o, r->self, r->o->cmd) < 0)) {
            psg_launch_kill_all(r->t, i, SIGTERM);
            break;
        }
    }
    free(cfg);
    printf("psgraph launch: %d ps + %d workers, cluster %s\n", r->nps, r->n - r->nps, r->cluster);
    printf("psgraph launch: CURVE keys %s%s%s\n", r->keys.dir,
           r->keys.run[0] ? " (made for this run, removed at the end)" : "",
           r->o->keys_payload ? ", a copy sent to each host over its ssh session" : "");
    if (r->may_fail > 0)
        printf("psgraph launch: the job goes on without up to %d worker%s other than the chief "
               "(%s)\n",
               r->may_fail, r->may_fail == 1 ? "" : "s",
               r->o->worker_failures >= 0 ? "--allow-worker-failures"
                                          : "what the command's strategy can lose");
    if (r->o->workers_at_start)
        printf("psgraph launch: worker%d..worker%d not started: each SIGUSR1 (kill -USR1 %d) "
               "starts the next, with CMD --join\n",
               r->o->workers_at_start, r->o->workers - 1, (int)getpid());
    for (int i = 0; i < r->n; i++)
        if (r->t[i].pid > 0) {
            if (r->t[i].host)
                printf("psgraph launch: %s pid %d (%s %s)\n", r->t[i].tag, (int)r->t[i].pid,
                       r->t[i].srun ? "srun on" : "ssh to", r->t[i].host);
            else
                printf("psgraph launch: %s pid %d\n", r->t[i].tag, (int)r->t[i].pid);
        }
    fflush(stdout);
}

/* --restart on-failure: every task that died (not stopped by us) started again, within
 * its budget. Returns the tasks started. */
static int restart_dead(launch_run_t *r) {
    int started = 0;
    for (int i = 0; r->o->restart && !r->stopping && !got_signal && i < r->n; i++) {
        task_proc_t *t = &r->t[i];
        if (!t->exited || t->code == 0 || t->killed_by_us || t->restarts >= r->o->max_restarts)
            continue;
        t->restarts++;
        psg_launch_task_line(t, "restarting it (restart %d of at most %d, --restart on-failure)",
                             t->restarts, r->o->max_restarts);
        if (spawn(t, r->o, r->self, r->o->cmd) == 0) {
            psg_launch_task_line(t, "restarted: pid %d", (int)t->pid);
            started++;
        }
        fflush(stdout);
    }
    return started;
}

/* --workers MIN:MAX: the next pending worker started for each SIGUSR1, its command with
 * --join. Returns the workers started. */
static int start_joins(launch_run_t *r) {
    int started = 0;
    while (r->joins_done < joins_asked && !r->stopping && !got_signal) {
        r->joins_done++;
        task_proc_t *t = NULL;
        for (int i = r->nps; i < r->n && !t; i++)
            if (r->t[i].pending) t = &r->t[i];
        if (!t) {
            psg_launch_say("psgraph launch: SIGUSR1: every worker of the %d is started already\n",
                           r->n - r->nps);
            continue;
        }
        if (r->t[r->nps].exited) { /* the chief: the job it would join is over */
            psg_launch_say(
                "psgraph launch: SIGUSR1: the job is ending (the chief exited): %s not started\n",
                t->tag);
            continue;
        }
        int n = 0;
        while (r->o->cmd[n]) n++;
        char **cmd = calloc((size_t)n + 2, sizeof *cmd);
        if (!cmd) {
            psg_launch_say("psgraph launch: out of memory\n");
            continue;
        }
        memcpy(cmd, r->o->cmd, sizeof *cmd * (size_t)n);
        cmd[n] = "--join";
        t->pending = false;
        if (spawn(t, r->o, r->self, cmd) == 0) {
            psg_launch_task_line(t, "started: pid %d, joining the running job (SIGUSR1)",
                                 (int)t->pid);
            started++;
        }
        free(cmd);
        fflush(stdout);
    }
    return started;
}

/* Whether the job ended well: the chief and every ps task exited 0 (the ps tasks stop when
 * every worker said it is done). */
static bool job_over(const launch_run_t *r) {
    bool over = r->n > r->nps;
    for (int i = 0; i <= r->nps && i < r->n; i++)
        over = over && r->t[i].exited && r->t[i].code == 0;
    return over;
}

/* Whether a task failed in a way that stops the job (a worker the job can lose is let go,
 * once); notes when every worker is done. */
static bool job_failed(launch_run_t *r) {
    bool failed = false, workers_left = false;
    for (int i = 0; i < r->n; i++) {
        task_proc_t *t = &r->t[i];
        bool died = t->exited && t->code != 0 && !t->killed_by_us && !t->tolerated;
        /* a worker other than the chief (worker 0) the job can do without: it goes on */
        bool spare = !t->is_ps && i > r->nps && r->failed_workers < r->may_fail &&
                     (!r->o->restart || t->restarts >= r->o->max_restarts);
        if (died && !t->is_ps && i > r->nps && job_over(r)) { /* one that joined at the end */
            t->tolerated = true;
            psg_launch_task_line(
                t,
                "failed with code %d after the job ended (the chief and the ps tasks "
                "exited 0): not counted",
                t->code);
            fflush(stdout);
            died = false;
        }
        if (died && spare && !r->stopping) {
            t->tolerated = true;
            r->failed_workers++;
            psg_launch_task_line(
                t,
                "failed with code %d; the job goes on without it (%d of at most %d "
                "workers lost, --allow-worker-failures)",
                t->code, r->failed_workers, r->may_fail);
            fflush(stdout);
            died = false;
        }
        if (died) failed = true;
        if (!t->is_ps && !t->exited && !t->pending) workers_left = true;
    }
    if (!workers_left && r->workers_done_at == 0) r->workers_done_at = psg_now_sec();
    return failed;
}

/* Seconds a worker still running after the job ended is given to see it and stop. */
#define LEFT_OUT_GRACE_S 5

/* Once the chief and every ps task exited 0 (the ps tasks stop when every worker said it is
 * done), a worker still running was left out of the job (one that joined at its end): it
 * stops by itself when a ps task told it the job is done; else it is stopped here after
 * LEFT_OUT_GRACE_S, said, and not counted as failed. Whether it stopped them. */
static bool stop_left_out(launch_run_t *r) {
    if (!job_over(r) || r->stopping) return false;
    if (r->job_over_at == 0) r->job_over_at = psg_now_sec();
    if (psg_now_sec() - r->job_over_at < LEFT_OUT_GRACE_S) return false;
    for (int i = r->nps + 1; i < r->n; i++)
        if (r->t[i].pid > 0 && !r->t[i].exited)
            psg_launch_task_line(
                &r->t[i],
                "still running %d s after the job ended (the chief and the ps tasks "
                "exited 0): stopping it",
                LEFT_OUT_GRACE_S);
    return true;
}

/* Forwards the tasks' output until every task has exited: restarts, stops all when one
 * fails, on a signal, or a while after the workers are done. */
static void supervise(launch_run_t *r) {
    for (;;) {
        struct pollfd pf[2 * MAX_TASKS];
        int idx[2 * MAX_TASKS], np = 0;
        for (int i = 0; i < r->n && np < 2 * MAX_TASKS - 1; i++) {
            if (r->t[i].fd >= 0) {
                pf[np] = (struct pollfd){r->t[i].fd, POLLIN, 0};
                idx[np++] = i;
            }
            if (r->t[i].err_fd >= 0) {
                pf[np] = (struct pollfd){r->t[i].err_fd, POLLIN, 0};
                idx[np++] = -1 - i;
            }
        }
        poll(pf, (nfds_t)np, 100);
        for (int k = 0; k < np; k++)
            if (pf[k].revents) {
                if (idx[k] >= 0)
                    psg_launch_drain(&r->t[idx[k]]);
                else
                    psg_launch_drain_err(&r->t[-1 - idx[k]]);
            }
        int alive = psg_launch_reap(r->t, r->n);
        alive += restart_dead(r);
        alive += start_joins(r);
        /* before the end: the last task to exit may be a worker the job can do without */
        bool failed = job_failed(r);
        if (alive == 0) break;
        if (got_signal && !r->signaled) {
            r->signaled = got_signal;
            psg_launch_say("psgraph launch: signal %d, stopping every task\n", (int)got_signal);
        }
        /* the ps tasks exit once every worker said it is done; give them a few seconds */
        bool ps_linger = r->workers_done_at > 0 && psg_now_sec() - r->workers_done_at > 10;
        if (!r->stopping && (r->signaled || failed || ps_linger || stop_left_out(r))) {
            if (failed) psg_launch_say("psgraph launch: a task failed, stopping the others\n");
            psg_launch_kill_all(r->t, r->n, SIGTERM);
            r->stopping = true;
            r->stop_at = psg_now_sec();
        }
        if (r->stopping && psg_now_sec() - r->stop_at > 5) psg_launch_kill_all(r->t, r->n, SIGKILL);
        if (psg_launch_on_tty && psg_launch_block_dirty && psg_now_sec() - r->drawn_at > 0.2) {
            psg_launch_draw_block(r->t, r->n);
            r->drawn_at = psg_now_sec();
        }
    }
}

/* After the run: the merged trace, the worst exit code, the sockets' folder removed. */
static int finish(launch_run_t *r) {
    task_proc_t *t = r->t;
    char **cmd = r->o->cmd;
    for (int i = 0; i < r->n; i++) psg_launch_drain(&t[i]), psg_launch_drain_err(&t[i]);
    if (psg_launch_on_tty) psg_launch_draw_block(t, r->n);
    for (int i = 0; cmd[i] && cmd[i + 1]; i++)
        if (!strcmp(cmd[i], "--trace")) {
            int parts = merge_traces(t, r->n, cmd[i + 1]);
            if (parts < 0)
                psg_launch_say("psgraph launch: cannot write the merged trace %s: %s\n", cmd[i + 1],
                               strerror(errno));
            else if (parts > 0)
                psg_launch_say("psgraph launch: trace of %d tasks merged into %s\n", parts,
                               cmd[i + 1]);
        }
    int worst = 0;
    for (int i = 0; i < r->n; i++)
        if (!t[i].killed_by_us && !t[i].tolerated && t[i].code > worst) worst = t[i].code;
    if (r->failed_workers)
        psg_launch_say("psgraph launch: %d worker%s failed and the job went on without %s\n",
                       r->failed_workers, r->failed_workers == 1 ? "" : "s",
                       r->failed_workers == 1 ? "it" : "them");
    if (r->signaled && worst == 0) worst = 128 + r->signaled;
    return worst;
}

static void run_free(launch_run_t *r) {
    if (r->sock_dir[0]) { /* a task killed before it closed its socket leaves the file */
        for (int i = 0; i < r->n; i++) {
            char path[128];
            snprintf(path, sizeof path, "%s/%s", r->sock_dir, r->t[i].tag);
            unlink(path);
        }
        rmdir(r->sock_dir);
    }
    psg_launch_keys_remove(&r->keys);
    psg_launch_ssh_keys_free(r->o);
    for (int i = 0; r->t && i < r->n; i++) {
        free(r->t[i].cfg);
        if (r->t[i].fd >= 0) close(r->t[i].fd);
        if (r->t[i].in_fd >= 0) close(r->t[i].in_fd);
        if (r->t[i].err_fd >= 0) close(r->t[i].err_fd);
    }
    free(r->cluster);
    free(r->t);
    free(r->ports);
}

int psg_launch_local(psg_launch_t *o) {
    launch_run_t r = {.o = o, .nps = o->ps, .n = o->ps + o->workers};
    if (o->port_base > 0) o->tcp = true;
    r.may_fail =
        o->worker_failures >= 0 ? o->worker_failures : backup_workers_of(o->cmd, o->workers);
    psg_launch_on_tty = isatty(1);
    r.t = calloc((size_t)r.n, sizeof *r.t);
    r.ports = calloc((size_t)r.n, sizeof *r.ports);
    if (!r.t || !r.ports) {
        fprintf(stderr, "psgraph launch: out of memory\n");
        run_free(&r);
        return 1;
    }
    if (psg_launch_keys_prepare(&r.keys, o->keys) < 0 ||
        (o->task_hosts && !o->keys_shared && psg_launch_ssh_keys_prepare(o, r.keys.dir) < 0)) {
        run_free(&r);
        return 1;
    }
    if (tasks_init(&r) < 0 || build_cluster(&r) < 0) {
        run_free(&r);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a closed ssh stdin must not kill the launcher */
    ssize_t sl = readlink("/proc/self/exe", r.self, sizeof r.self - 1);
    r.self[sl > 0 ? sl : 0] = 0;
    start_tasks(&r);
    supervise(&r);
    int worst = finish(&r);
    run_free(&r);
    return worst;
}
