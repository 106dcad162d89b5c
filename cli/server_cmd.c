/* `psgraph server`: runs this process's task server (a ps task) until it is told to stop
 * (Shutdown, every worker done, idle timeout, SIGINT/SIGTERM). Not the server itself
 * (ps/task_server.c): options, the cluster, signals and the exit code only. */
#include "cli/commands.h"
#include "psgraph/cluster.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"
#include "psgraph/task_server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static void server_usage(FILE *f) {
    fprintf(f,
            "usage: psgraph server [options]\n"
            "  the task is TF_CONFIG's, or --cluster FILE --job ps --task I, or a lone\n"
            "  --task-name /job:ps/task:0 with --listen tcp://127.0.0.1:0 (port 0: any free one)\n"
            "  --threads T            executor threads per step (default 1)\n"
            "  --idle-timeout S       stop after S seconds without a request (default 600; 0: never)\n"
            "  --recv-timeout S       how long a Recv waits for its tensor (default 60)\n"
            "  --peer-timeout S       a peer silent S seconds (heartbeats) is dropped and its requests\n"
            "                         fail, naming it (default: the cluster file's \"peer_timeout\", else 10)\n"
            "  --expect-workers N     stop once N workers said they are done (default: the\n"
            "                         cluster's workers and chief; 0: never)\n"
            "  --keys DIR             the cluster's CURVE keys (psgraph keygen DIR); default: the\n"
            "                         cluster file's \"keys\", else $PSGRAPH_KEYS\n"
            "  --insecure             listen off loopback without keys (a network you trust)\n"
            "  --logdir DIR           where SaveShard and Trace may write (repeatable, up to %d;\n"
            "                         none: they are refused)\n"
            "  --memory-limit BYTES   the task's memory, for all its peers: graphs as built, what\n"
            "                         their steps allocate, requests waiting (suffix K, M, G;\n"
            "                         default half the machine's)\n"
            "  --peer-memory BYTES    a peer's share: what its graphs may allocate in all\n"
            "                         (default half of --memory-limit)\n"
            "  --max-pending N        RunGraph requests a peer may have pending (default 64)\n"
            "  --max-running N        of those, how many run at once (default 4: half the runners)\n"
            "  --max-graphs N         graphs a peer may have registered (default 256)\n"
            "  --max-peers-per-address N  open connections from one address holding anything\n"
            "                         here (a closed one's graphs wait out --graph-grace; default 64).\n"
            "                         With --keys a peer is a client key, all its connections\n"
            "                         one quota (the cluster's own key: per connection)\n"
            "  --max-wait S           the longest wait of an accumulator take or token dequeue,\n"
            "                         whatever a graph asks (default 600)\n"
            "  --max-connections N    connections open at once; at the cap a new one closes the\n"
            "                         oldest that never finished its handshake, or itself\n"
            "                         (default: what ulimit -n allows, less 128)\n"
            "  --graph-grace S        a peer's graphs outlive its last connection S seconds (a worker\n"
            "                         that reconnects keeps them), then are released (default 60)\n",
            PSG_TS_MAX_LOGDIRS);
}

/* "4096", "512K", "256M", "2G" into bytes; -1 on anything else. */
static int parse_bytes(const char *v, int64_t *out) {
    char *end = NULL;
    double x = strtod(v, &end);
    double mul = !*end ? 1 : !strcmp(end, "K") ? 1024.0 : !strcmp(end, "M") ? 1048576.0 : !strcmp(end, "G") ? 1073741824.0 : 0;
    if (end == v || mul == 0 || x < 1 || x * mul > 9e18) return -1;
    *out = (int64_t)(x * mul);
    return 0;
}

/* The task's cluster (from --cluster with --job and --task, or TF_CONFIG; NULL for a lone
 * task) and its keys: the cluster's, or a lone task's from --keys or $PSGRAPH_KEYS. -1 after
 * printing why. */
static int server_cluster(const char *cluster_file, const char *job, int task, const char *task_name,
                          const char *keys_dir, psg_cluster_t **c, psg_curve_keys_t **lone_keys) {
    if (cluster_file) {
        if ((job == NULL) != (task < 0)) {
            fprintf(stderr, "psgraph server: --job and --task go together\n");
            return -1;
        }
        *c = psg_cluster_from_file(cluster_file, job, task);
    } else if (getenv("TF_CONFIG") && !task_name) {
        *c = psg_cluster_from_env();
    }
    if ((cluster_file || (getenv("TF_CONFIG") && !task_name)) && !*c) {
        fprintf(stderr, "psgraph server: %s\n", psg_error_message());
        return -1;
    }
    if (*c && psg_cluster_task(*c).job && !strcmp(psg_cluster_task(*c).job, PSG_EVALUATOR_JOB)) {
        fprintf(stderr, "psgraph server: the evaluator task runs `psgraph train` with the job's options "
                        "(it evaluates the checkpoints of --logdir), not a server\n");
        psg_cluster_destroy(c);
        return -1;
    }
    /* a lone task (no cluster) takes its keys from --keys or $PSGRAPH_KEYS */
    const char *env_keys = getenv(PSG_CURVE_KEYS_ENV);
    if (!keys_dir && !*c && env_keys && *env_keys) keys_dir = env_keys;
    if (keys_dir && (*c ? psg_cluster_set_keys(*c, keys_dir) < 0 : !(*lone_keys = psg_curve_keys_load(keys_dir, NULL)))) {
        fprintf(stderr, "psgraph server: --keys: %s\n", psg_error_message());
        psg_cluster_destroy(c);
        return -1;
    }
    return 0;
}

int psg_cmd_server(int argc, char **argv) {
    const char *cluster_file = NULL, *job = NULL, *listen = NULL, *task_name = NULL, *keys_dir = NULL;
    const char *insecure_env = getenv(PSG_CURVE_INSECURE_ENV);
    bool insecure = insecure_env && !strcmp(insecure_env, "1");
    int task = -1, threads = 1, expect = -1;
    double idle = 600, recv_timeout = 60, max_wait = 600, peer_timeout = 0;
    const char *logdirs[PSG_TS_MAX_LOGDIRS] = {0};
    int n_logdirs = 0;
    psg_task_limits_t lim = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            server_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--insecure")) {
            insecure = true;
            continue;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "psgraph server: %s '%s'\n",
                    i + 1 >= argc ? "missing value for" : "unexpected argument", a);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        double x = strtod(v, &end);
        bool num_ok = end != v && !*end && x >= 0;
        if (!strcmp(a, "--cluster")) cluster_file = v;
        else if (!strcmp(a, "--job")) job = v;
        else if (!strcmp(a, "--listen")) listen = v;
        else if (!strcmp(a, "--task-name")) task_name = v;
        else if (!strcmp(a, "--keys")) keys_dir = v;
        else if (num_ok && !strcmp(a, "--task")) task = (int)x;
        else if (num_ok && !strcmp(a, "--threads")) threads = (int)x;
        else if (num_ok && !strcmp(a, "--expect-workers")) expect = (int)x;
        else if (num_ok && !strcmp(a, "--idle-timeout")) idle = x;
        else if (num_ok && x > 0 && !strcmp(a, "--recv-timeout")) recv_timeout = x;
        else if (num_ok && x > 0 && x <= 86400 && !strcmp(a, "--peer-timeout")) peer_timeout = x;
        else if (!strcmp(a, "--logdir") && n_logdirs < PSG_TS_MAX_LOGDIRS) logdirs[n_logdirs++] = v;
        else if (!strcmp(a, "--memory-limit") && parse_bytes(v, &lim.memory_bytes) == 0) {}
        else if (!strcmp(a, "--peer-memory") && parse_bytes(v, &lim.peer_memory_bytes) == 0) {}
        else if (num_ok && x >= 1 && !strcmp(a, "--max-pending")) lim.max_pending_per_peer = (int)x;
        else if (num_ok && x >= 1 && !strcmp(a, "--max-running")) lim.max_running_per_peer = (int)x;
        else if (num_ok && x >= 1 && !strcmp(a, "--max-graphs")) lim.max_graphs_per_peer = (int)x;
        else if (num_ok && x >= 1 && !strcmp(a, "--max-peers-per-address")) lim.max_peers_per_address = (int)x;
        else if (num_ok && x >= 1 && x <= 1e6 && !strcmp(a, "--max-connections")) lim.max_connections = (int)x;
        else if (num_ok && x > 0 && !strcmp(a, "--max-wait")) max_wait = x;
        else if (num_ok && x > 0 && x <= 86400 && !strcmp(a, "--graph-grace")) lim.graph_grace_ms = (int64_t)(x * 1000);
        else {
            fprintf(stderr, "psgraph server: bad option '%s %s'\n", a, v);
            server_usage(stderr);
            return 2;
        }
    }
    psg_cluster_t *c = NULL;
    psg_curve_keys_t *lone_keys = NULL;
    if (server_cluster(cluster_file, job, task, task_name, keys_dir, &c, &lone_keys) < 0) return 2;
    const psg_curve_keys_t *keys = lone_keys ? lone_keys : psg_cluster_keys(c);
    if (expect < 0)
        expect = c ? psg_cluster_num_tasks(c, "worker") + psg_cluster_num_tasks(c, "chief") : 0;
    psg_task_server_options_t o = {.cluster = c,
                                   .task_name = task_name ? task_name : (c ? NULL : "/job:ps/task:0"),
                                   .endpoint = listen,
                                   .num_threads = threads,
                                   .recv_timeout_ms = (int64_t)(recv_timeout * 1000),
                                   .idle_timeout_ms = (int64_t)(idle * 1000),
                                   .peer_timeout_ms = (int)(peer_timeout * 1000),
                                   .expect_workers = expect,
                                   .limits = lim,
                                   .keys = keys,
                                   .insecure = insecure};
    o.limits.max_wait_ms = (int64_t)(max_wait * 1000);
    for (int i = 0; i < n_logdirs; i++) o.logdirs[i] = logdirs[i];
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
           curve ? " with CURVE (keys " : "", curve ? psg_curve_keys_dir(keys) : "", curve ? ")" : "");
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
