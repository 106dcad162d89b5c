/* `psgraph server`: runs this process's task server (a ps task) until it is told to stop
 * (Shutdown, every worker done, idle timeout, SIGINT/SIGTERM). Not the server itself
 * (ps/task_server.c): options, the cluster, signals and the exit code only. */
#include "cli/commands.h"
#include "cli/options.h"
#include "psgraph/cluster.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"
#include "psgraph/task_server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    stop_signal = sig;
}

static void server_usage(FILE *f) {
    fprintf(
        f, "usage: psgraph server [options]\n"
           "  the task is TF_CONFIG's, or --cluster FILE --job ps --task I, or a lone\n"
           "  --task-name /job:ps/task:0 with --listen tcp://127.0.0.1:0 (port 0: any free one)\n");
    psg_cli_print_help(PSG_CLI_SERVER, f, 22);
}

/* The task's cluster (from --cluster with --job and --task, or TF_CONFIG; NULL for a lone
 * task) and its keys: the cluster's, or a lone task's from --keys or $PSGRAPH_KEYS. -1 after
 * printing why. */
static int server_cluster(const char *cluster_file, const char *job, int task,
                          const char *task_name, const char *keys_dir, psg_cluster_t **c,
                          psg_curve_keys_t **lone_keys) {
    if (cluster_file) {
        if ((job == NULL) != (task < 0)) {
            fprintf(stderr, "psgraph server: --job and --task go together\n");
            return -1;
        }
        *c = psg_cluster_from_file(cluster_file, job, task);
    } else if (psg_cluster_env_given() && !task_name) {
        *c = psg_cluster_from_env();
    }
    if ((cluster_file || (psg_cluster_env_given() && !task_name)) && !*c) {
        fprintf(stderr, "psgraph server: %s\n", psg_error_message());
        return -1;
    }
    if (*c && !psg_cluster_task(*c).job) { /* as psgraph train says it (worker/worker_task.c) */
        fprintf(stderr,
                "psgraph server: %s names no task for this process: give it \"task\": {\"type\": "
                "\"ps\", \"index\": I}%s\n",
                cluster_file ? cluster_file : "TF_CONFIG",
                cluster_file ? ", or --job ps --task I" : "");
        psg_cluster_destroy(c);
        return -1;
    }
    if (*c && psg_cluster_task(*c).job && !strcmp(psg_cluster_task(*c).job, PSG_EVALUATOR_JOB)) {
        fprintf(stderr,
                "psgraph server: the evaluator task runs `psgraph train` with the job's options "
                "(it evaluates the checkpoints of --logdir), not a server\n");
        psg_cluster_destroy(c);
        return -1;
    }
    /* a lone task (no cluster) takes its keys from --keys or $PSGRAPH_KEYS */
    const char *env_keys = getenv(PSG_CURVE_KEYS_ENV);
    if (!keys_dir && !*c && env_keys && *env_keys) keys_dir = env_keys;
    if (keys_dir && (*c ? psg_cluster_set_keys(*c, keys_dir) < 0
                        : !(*lone_keys = psg_curve_keys_load(keys_dir, NULL)))) {
        fprintf(stderr, "psgraph server: --keys: %s\n", psg_error_message());
        psg_cluster_destroy(c);
        return -1;
    }
    return 0;
}

/* The options (cli/option_table.c) into *a; 0, 1 after --help (printed), 2 after printing
 * the error. */
static int server_parse(int argc, char **argv, psg_server_args_t *a) {
    const char *insecure_env = getenv(PSG_CURVE_INSECURE_ENV);
    *a = (psg_server_args_t){.insecure = insecure_env && !strcmp(insecure_env, "1"),
                             .task = -1,
                             .threads = 1,
                             .expect = -1,
                             .idle = 600,
                             .recv_timeout = 60,
                             .max_wait = 600};
    int rc = psg_cli_parse(PSG_CLI_SERVER, argc, argv, 1, a, NULL);
    if (rc == 1) server_usage(stdout);
    if (rc < 0) fprintf(stderr, "psgraph server: %s\n", psg_error_message());
    if (rc == -2) server_usage(stderr);
    return rc == 0 ? 0 : rc == 1 ? 1 : 2;
}

int psg_cmd_server(int argc, char **argv) {
    psg_server_args_t a;
    int prc = server_parse(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : 2;
    const char *task_name = a.task_name;
    bool insecure = a.insecure;
    int expect = a.expect;
    psg_cluster_t *c = NULL;
    psg_curve_keys_t *lone_keys = NULL;
    if (server_cluster(a.cluster_file, a.job, a.task, task_name, a.keys_dir, &c, &lone_keys) < 0)
        return 2;
    if (a.ps_replicas > 0 && (!c || psg_cluster_set_ps_replicas(c, a.ps_replicas) < 0)) {
        fprintf(stderr, "psgraph server: --ps-replicas: %s\n",
                c ? psg_error_message() : "a lone task has no other ps task to back it up");
        psg_cluster_destroy(&c);
        psg_curve_keys_destroy(&lone_keys);
        return 2;
    }
    const psg_curve_keys_t *keys = lone_keys ? lone_keys : psg_cluster_keys(c);
    if (expect < 0)
        expect = c ? psg_cluster_num_tasks(c, "worker") + psg_cluster_num_tasks(c, "chief") : 0;
    psg_task_server_options_t o = {.cluster = c,
                                   .task_name =
                                       task_name ? task_name : (c ? NULL : "/job:ps/task:0"),
                                   .endpoint = a.listen,
                                   .num_threads = a.threads,
                                   .recv_timeout_ms = (int64_t)(a.recv_timeout * 1000),
                                   .idle_timeout_ms = (int64_t)(a.idle * 1000),
                                   .peer_timeout_ms = (int)(a.peer_timeout * 1000),
                                   .expect_workers = expect,
                                   .limits = a.lim,
                                   .keys = keys,
                                   .insecure = insecure};
    o.limits.max_wait_ms = (int64_t)(a.max_wait * 1000);
    o.limits.graph_grace_ms = (int64_t)(a.graph_grace * 1000); /* 0: the default */
    for (int i = 0; i < a.logdirs.n; i++) o.logdirs[i] = a.logdirs.v[i];
    psg_task_server_t *ts = psg_task_server_new(&o);
    if (!ts) {
        fprintf(stderr, "psgraph server: %s\n", psg_error_message());
        psg_cluster_destroy(&c);
        psg_curve_keys_destroy(&lone_keys);
        return 1;
    }
    const char *ep = psg_task_server_endpoint(ts);
    if (psg_curve_listen_check(ep, keys, insecure) == 1)
        fprintf(stderr, "psgraph server: warning: %s\n", psg_error_message());
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    bool curve = keys && !strncmp(ep, "tcp://", 6);
    printf("psgraph server: %s serving on %s%s%s%s\n", psg_task_server_task(ts), ep,
           curve ? " with CURVE (keys " : "", curve ? psg_curve_keys_dir(keys) : "",
           curve ? ")" : "");
    const char *my_job = c ? psg_cluster_task(c).job : NULL;
    if (my_job && (!strcmp(my_job, "worker") || !strcmp(my_job, "chief")))
        printf("psgraph server: %s is a %s task: this process only serves it (its variables and "
               "graphs, for the others) and trains nothing; `psgraph train` with the same "
               "TF_CONFIG runs the %s\n",
               psg_task_server_task(ts), my_job, my_job);
    fflush(stdout);
    while (!stop_signal && !psg_task_server_wait(ts, 100)) {
    }
    if (stop_signal)
        printf("psgraph server: stopping on signal %d\n", (int)stop_signal);
    else
        printf("psgraph server: stopped: %s\n", psg_task_server_stop_reason(ts));
    fflush(stdout);
    psg_task_server_destroy(&ts);
    psg_cluster_destroy(&c);
    psg_curve_keys_destroy(&lone_keys);
    return 0;
}
