/* Mutated graphs registered and run against a live `psgraph server` (issue 27): N pairs of
 * RegisterGraph + RunGraph (then DeregisterGraph) from seed graphs (tests/fuzz/corpus/
 * fuzz_run) whose bytes are flipped, cut, spliced or repeated, each registered with the
 * targets and the Placeholder feeds a client would give. Prints JSON lines: the server's
 * RSS at the start, every 10% and once settled, the task's memory as it counted it (Inspect:
 * held, peak, against --memory-limit), how the requests ended, and whether the server is
 * still up. The server's own stderr (an ASan build's reports) is the caller's to read.
 * CLIENTS processes share the pairs (each its own connection and mutations): most of a pair's
 * time is the server's bounded waits (--max-wait 1, --recv-timeout 1), not its CPU, so
 * several clients get through 100,000 pairs in a session, against the one server.
 *   bench_hostile_graphs PSGRAPH_EXE CORPUS_DIR [PAIRS] [MEMORY_LIMIT] [SERVER_LOG] [CLIENTS]
 * (the ASan server: bench/hostile.sh --graphs). */
#include "tests/hostile_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SEEDS 64
#define MAX_BYTES 65536

typedef struct {
    uint8_t *b;
    size_t n;
} seed_t;

/* Inspect's "memory" numbers (held, peak; -1 when it does not answer) and the number of
 * variables the task holds (peers' graphs create them, and they outlive the graphs). */
static void inspect(psg_client_t *c, long long *held, long long *peak, long long *vars,
                    long long *resources, long long *cached) {
    psg_req_t in = {.type = PSG_REQ_INSPECT};
    psg_msg_t *m = psg_req_encode(&in), *rep = psg_client_call(c, &m, 30000);
    const char *js = rep && rep->body ? (const char *)rep->body->data : NULL;
    const char *h = js ? strstr(js, "\"held\":") : NULL, *p = js ? strstr(js, "\"peak\":") : NULL;
    const char *end = js ? strstr(js, "\"accumulators\":") : NULL;
    *held = h ? atoll(h + 7) : -1;
    const char *bc = js ? strstr(js, "\"buffer_cache\":") : NULL;
    *cached = bc ? atoll(bc + 15) : -1;
    *peak = p ? atoll(p + 7) : -1;
    const char *res = js ? strstr(js, "\"resources\":") : NULL;
    *vars = end ? 0 : -1;
    *resources = res ? atoll(res + 12) : -1;
    for (const char *v = js; end && (v = strstr(v, "{\"name\":")) && v < end; v++) ++*vars;
    psg_msg_destroy(&rep);
}

/* One mutation of a seed (or of two spliced), in out (MAX_BYTES). */
static size_t mutate(const seed_t *seeds, int ns, unsigned *r, uint8_t *out) {
    const seed_t *a = &seeds[rand_r(r) % (unsigned)ns], *b = &seeds[rand_r(r) % (unsigned)ns];
    size_t n = a->n;
    memcpy(out, a->b, n);
    /* mostly one small change, so that most still parse and reach the planner and kernels */
    for (int k = 0, rounds = 1 + (rand_r(r) % 4 ? 0 : (int)(rand_r(r) % 3)); k < rounds && n > 0;
         k++) {
        switch (rand_r(r) % 8) {
        case 6:
        case 7: /* a byte one up or down: a dim, an index, a count, a letter of a name */
            out[rand_r(r) % n] += rand_r(r) % 2 ? 1 : 0xff;
            break;
        case 0:
        case 1: /* flip a byte, often to a small or a boundary value */
            out[rand_r(r) % n] = rand_r(r) % 2
                                     ? (uint8_t)rand_r(r)
                                     : (uint8_t[]){0, 1, 0x7f, 0x80, 0xff, 0xcc}[rand_r(r) % 6];
            break;
        case 2: /* cut */ n = rand_r(r) % n + 1; break;
        case 3: { /* splice b's tail in */
            size_t at = rand_r(r) % n, from = rand_r(r) % b->n, len = b->n - from;
            if (at + len > MAX_BYTES) len = MAX_BYTES - at;
            memcpy(out + at, b->b + from, len);
            n = at + len;
            break;
        }
        case 4: { /* repeat a piece */
            size_t from = rand_r(r) % n, len = 1 + rand_r(r) % 16;
            if (from + len > n) len = n - from;
            if (n + len <= MAX_BYTES) {
                memmove(out + from + len, out + from, n - from);
                n += len;
            }
            break;
        }
        default: /* a 32-bit number somewhere: sizes, counts */
            if (n >= 4) {
                uint32_t v =
                    (uint32_t[]){0, 1, 0xffffffffu, 1u << 20, 1u << 30, 200000}[rand_r(r) % 6];
                memcpy(out + rand_r(r) % (n - 3), &v, 4);
            }
        }
    }
    return n;
}

#define MAX_CLIENTS 64

typedef struct {
    long long registered, ran, run_failed, refused, lost;
    _Atomic long long done; /* read by the parent while the client runs */
} tally_t;

/* One pair: a mutation registered through c with the targets and Placeholder feeds a client
 * would give (when it parses here), run, deregistered. */
static void one_pair(psg_client_t *c, const seed_t *seeds, int ns, unsigned *r, uint8_t *buf, int i,
                     tally_t *t) {
    /* a mutation that still parses here, most of the time (up to 16 tries; every 4th pair as
     * it comes): the server's planner and kernels see it, not only its parser */
    size_t n = 0;
    psg_graph_t *g = NULL;
    for (int k = 0; k < (i % 4 ? 16 : 1) && !g; k++) {
        n = mutate(seeds, ns, r, buf);
        g = psg_graph_deserialize(buf, n);
    }
    int nn = g ? psg_graph_num_nodes(g) : 1 + (int)(rand_r(r) % 4), nf = 0;
    int *targets = calloc((size_t)nn + 1, sizeof *targets);
    psg_endpoint_t *feeds = calloc((size_t)nn + 1, sizeof *feeds);
    psg_tensor_t **values = calloc((size_t)nn + 1, sizeof *values);
    for (int k = 0; k < nn; k++) {
        targets[k] = k;
        const psg_node_t *node = g ? psg_graph_node(g, k) : NULL;
        if (!node || strcmp(psg_node_op(node), "Placeholder") || psg_node_num_outputs(node) != 1)
            continue;
        const psg_shape_t *s = psg_node_output_shape(node, 0);
        if (psg_shape_is_complete(s) && psg_shape_numel(s) < (1 << 20) &&
            (values[nf] = psg_tensor_zeros(psg_node_output_dtype(node, 0), s)))
            feeds[nf++] = (psg_endpoint_t){k, 0};
    }
    psg_graph_destroy(&g);
    psg_req_t reg = {.type = PSG_REQ_REGISTER_GRAPH,
                     .u.reg = {.graph = (char *)buf,
                               .len = n,
                               .n_feeds = nf,
                               .feeds = feeds,
                               .n_targets = nn,
                               .targets = targets}};
    psg_msg_t *m = psg_req_encode(&reg), *rep = m ? psg_client_call(c, &m, 60000) : NULL;
    psg_rep_t rr;
    uint64_t h = rep && psg_rep_decode(rep, PSG_REQ_REGISTER_GRAPH, &rr) == 0 ? rr.u.handle : 0;
    t->refused += !rep;
    t->lost += !rep && psg_error_code() == PSG_ERR_UNAVAILABLE;
    psg_msg_destroy(&rep);
    if (h) {
        t->registered++;
        psg_req_t run = {.type = PSG_REQ_RUN_GRAPH,
                         .step = i + 1,
                         .u.run = {.handle = h, .n_feeds = nf, .feeds = values}};
        m = psg_req_encode(&run);
        rep = m ? psg_client_call(c, &m, 60000) : NULL;
        t->ran += rep != NULL;
        t->run_failed += rep == NULL;
        t->lost += !rep && psg_error_code() == PSG_ERR_UNAVAILABLE;
        psg_msg_destroy(&rep);
        psg_req_t dr = {.type = PSG_REQ_DEREGISTER_GRAPH, .u.handle = h};
        m = psg_req_encode(&dr);
        rep = m ? psg_client_call(c, &m, 60000) : NULL;
        psg_msg_destroy(&rep);
    }
    for (int k = 0; k < nf; k++) psg_tensor_destroy(&values[k]);
    free(values);
    free(feeds);
    free(targets);
}

/* Client k of clients: pairs k, k + clients, ... with its own connection and mutations (the
 * first client's are those of a run with one client); its exit status for _exit. */
static int run_client(int k, int clients, int pairs, const seed_t *seeds, int ns, tally_t *t) {
    psg_client_t *c = connect_peer();
    uint8_t *buf = malloc(MAX_BYTES);
    unsigned r = 27 + 7919u * (unsigned)k;
    for (int i = k; c && buf && i < pairs && kill(server_pid, 0) == 0; i += clients) {
        one_pair(c, seeds, ns, &r, buf, i, t);
        t->done++;
    }
    int ok = c && buf;
    psg_client_destroy(&c);
    free(buf);
    return ok ? 0 : 1;
}

static int load_seeds(const char *dir, seed_t *seeds) {
    int ns = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && ns < MAX_SEEDS && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        seeds[ns].b = malloc(MAX_BYTES);
        seeds[ns].n = f && seeds[ns].b ? fread(seeds[ns].b, 1, MAX_BYTES, f) : 0;
        if (f) fclose(f);
        if (seeds[ns].n)
            ns++;
        else
            free(seeds[ns].b);
    }
    if (d) closedir(d);
    return ns;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(
            stderr,
            "usage: bench_hostile_graphs PSGRAPH_EXE CORPUS_DIR [PAIRS] [MEMORY_LIMIT] [SERVER_LOG] "
            "[CLIENTS]\n");
        return 2;
    }
    int pairs = argc > 3 ? atoi(argv[3]) : 100000;
    const char *limit = argc > 4 ? argv[4] : "256M";
    psgraph_exe = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/psg_bench_hostile_graphs_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    snprintf(logdir, sizeof logdir, "%s/logdir", tmpdir);
    snprintf(server_log, sizeof server_log, "%s",
             argc > 5 ? argv[5] : "/tmp/psg_hostile_graphs_ps.log");
    signal(SIGPIPE, SIG_IGN);
    seed_t seeds[MAX_SEEDS];
    int ns = load_seeds(argv[2], seeds);
    const char *args[] = {"--memory-limit", limit,  "--max-wait", "1", "--recv-timeout", "1",
                          "--idle-timeout", "3600", NULL};
    if (!ns || start_server_argv(args) < 0) {
        fprintf(stderr, "no seeds in %s, or the server did not start\n", argv[2]);
        return 1;
    }
    int clients = argc > 6 ? atoi(argv[6]) : 1;
    if (clients < 1 || clients > MAX_CLIENTS) clients = clients < 1 ? 1 : MAX_CLIENTS;
    /* each client's tally, in memory the clients and this process share */
    tally_t *tallies = mmap(NULL, sizeof(tally_t) * (size_t)clients, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (tallies == MAP_FAILED) return 1;
    memset(tallies, 0, sizeof(tally_t) * (size_t)clients);
    pid_t kids[MAX_CLIENTS];
    double rss0 = server_rss_mb(), rss_max = rss0;
    fflush(stdout);
    for (int k = 0; k < clients; k++) /* before this process opens a socket of its own */
        if ((kids[k] = fork()) == 0) _exit(run_client(k, clients, pairs, seeds, ns, &tallies[k]));
    psg_client_t *watch = connect_peer();
    long long held = 0, peak = 0, worst_peak = 0, vars = 0, resources = 0, cached = 0;
    printf("{\"bench\":\"hostile_graphs_start\",\"pairs\":%d,\"clients\":%d,\"rss_mb\":%.1f}\n",
           pairs, clients, rss0);
    fflush(stdout);
    int running = clients, step = pairs / 10 > 0 ? pairs / 10 : 1, next = step, done = 0;
    for (int up = 1; running > 0 && up;) {
        nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
        for (int k = 0; k < clients; k++)
            if (kids[k] > 0 && waitpid(kids[k], NULL, WNOHANG) == kids[k]) kids[k] = 0, running--;
        up = waitpid(server_pid, NULL, WNOHANG) == 0;
        done = 0;
        for (int k = 0; k < clients; k++) done += (int)tallies[k].done;
        if (done < next && running > 0 && up) continue;
        for (; next <= done; next += step) {
        }
        inspect(watch, &held, &peak, &vars, &resources, &cached);
        double rss = server_rss_mb();
        if (rss > rss_max) rss_max = rss;
        if (peak > worst_peak) worst_peak = peak;
        printf("{\"bench\":\"hostile_graphs_progress\",\"pairs\":%d,\"rss_mb\":%.1f,"
               "\"held_bytes\":%lld,\"peak_bytes\":%lld,\"variables\":%lld,\"resources\":%lld,"
               "\"buffer_cache_bytes\":%lld}\n",
               done, rss, held, peak, vars, resources, cached);
        fflush(stdout);
    }
    for (int k = 0; k < clients; k++) /* the server went: stop the clients still running */
        if (kids[k] > 0) kill(kids[k], SIGKILL), waitpid(kids[k], NULL, 0);
    tally_t t = {0};
    for (int k = 0; k < clients; k++) {
        t.registered += tallies[k].registered, t.ran += tallies[k].ran;
        t.run_failed += tallies[k].run_failed, t.refused += tallies[k].refused;
        t.lost += tallies[k].lost;
    }
    munmap(tallies, sizeof(tally_t) * (size_t)clients);
    sleep(3); /* every wait a request started (--max-wait 1, --recv-timeout 1) has ended */
    inspect(watch, &held, &peak, &vars, &resources, &cached);
    double rss_end = server_rss_mb();
    int up = waitpid(server_pid, NULL, WNOHANG) == 0;
    printf(
        "{\"bench\":\"hostile_graphs\",\"pairs\":%d,\"seeds\":%d,\"registered\":%lld,\"ran\":%lld,"
        "\"run_failed\":%lld,\"refused\":%lld,\"lost\":%lld,\"rss_start_mb\":%.1f,\"rss_max_mb\":%.1f,"
        "\"rss_end_mb\":%.1f,\"rss_growth_mb\":%.1f,\"held_end_bytes\":%lld,\"peak_bytes\":%lld,"
        "\"memory_limit\":\"%s\",\"server_up\":%s,\"targets\":\"rss +50 MB, peak <= limit\"}\n",
        done, ns, t.registered, t.ran, t.run_failed, t.refused, t.lost, rss0, rss_max, rss_end,
        rss_end - rss0, held, peak > worst_peak ? peak : worst_peak, limit, up ? "true" : "false");
    psg_client_destroy(&watch);
    int st = 0;
    pid_t w = sigterm_and_wait(server_pid, "hostile_graphs_sigterm", &st);
    printf("{\"bench\":\"hostile_graphs_exit\",\"exited\":%s,\"status\":%d}\n",
           w == server_pid && WIFEXITED(st) ? "true" : "false",
           WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    for (int i = 0; i < ns; i++) free(seeds[i].b);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    return up ? 0 : 1;
}
