/* A Slurm allocation read as a cluster: host lists expanded as `scontrol show hostnames`
 * does, SLURM_TASKS_PER_NODE as counts, and a ps/worker cluster placed on the nodes as
 * TensorFlow's SlurmClusterResolver places it. Not the environment nor srun
 * (cli/launch_slurm.c). */
#include "cli/slurm_alloc.h"
#include "psgraph/error.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void psg_slurm_hosts_free(char ***hosts, int n) {
    if (!hosts || !*hosts) return;
    for (int i = 0; i < n; i++) free((*hosts)[i]);
    free(*hosts);
    *hosts = NULL;
}

/* One range "07-10" or "3" of a bracket: its bounds and the width of its first number. */
static int parse_range(const char *s, size_t len, unsigned long *lo, unsigned long *hi,
                       int *width) {
    const char *dash = memchr(s, '-', len);
    size_t llen = dash ? (size_t)(dash - s) : len;
    size_t hlen = dash ? len - llen - 1 : llen;
    const char *h = dash ? dash + 1 : s;
    if (!llen || !hlen || llen > 9 || hlen > 9) return -1;
    for (size_t i = 0; i < llen; i++)
        if (!isdigit((unsigned char)s[i])) return -1;
    for (size_t i = 0; i < hlen; i++)
        if (!isdigit((unsigned char)h[i])) return -1;
    *lo = strtoul(s, NULL, 10);
    *hi = strtoul(h, NULL, 10);
    *width = (int)llen;
    return *lo <= *hi ? 0 : -1;
}

/* The names of one entry ("a[1-2]-b[3,5]"): the text before each bracket, then every number
 * of the bracket, the later brackets varying fastest (Slurm's order). Appends to *out. */
static int expand_entry(const char *e, size_t len, char ***out, int *n, int max) {
    const char *open = memchr(e, '[', len);
    if (!open) {
        if (memchr(e, ']', len)) return -1;
        if (*n >= max) return -2;
        if (!((*out)[*n] = strndup(e, len))) return -3;
        (*n)++;
        return 0;
    }
    const char *close = memchr(open, ']', len - (size_t)(open - e));
    if (!close) return -1;
    size_t head = (size_t)(open - e), rest = len - (size_t)(close + 1 - e);
    if (memchr(e, ']', head)) return -1;
    /* text after the last bracket is refused, as scontrol does: "n[1-2]-ib" */
    if (rest && !memchr(close + 1, '[', rest)) return -1;
    const char *body = open + 1;
    size_t blen = (size_t)(close - body);
    if (!blen) return -1;
    for (size_t at = 0; at <= blen;) {
        const char *comma = memchr(body + at, ',', blen - at);
        size_t rlen = comma ? (size_t)(comma - body) - at : blen - at;
        unsigned long lo, hi;
        int width;
        if (parse_range(body + at, rlen, &lo, &hi, &width) < 0) return -1;
        for (unsigned long v = lo; v <= hi; v++) {
            char name[512];
            int k = snprintf(name, sizeof name, "%.*s%0*lu%.*s", (int)head, e, width, v, (int)rest,
                             close + 1);
            if (k < 0 || (size_t)k >= sizeof name) return -1;
            int rc = expand_entry(name, (size_t)k, out, n, max);
            if (rc < 0) return rc;
        }
        at += rlen + 1;
        if (!comma) break;
    }
    return 0;
}

int psg_slurm_hostlist(const char *list, int max, char ***hosts) {
    *hosts = calloc((size_t)max + 1, sizeof **hosts);
    if (!*hosts) return psg_error_set("out of memory");
    int n = 0, depth = 0;
    const char *start = list;
    for (const char *p = list;; p++) {
        if (*p == '[') depth++;
        if (*p == ']') depth--;
        if (depth < 0 || depth > 1) break;
        if (*p && (*p != ',' || depth)) continue;
        if (p > start) {
            int rc = expand_entry(start, (size_t)(p - start), hosts, &n, max);
            if (rc < 0) {
                psg_slurm_hosts_free(hosts, n);
                return rc == -2
                           ? psg_error_set("host list '%s' names more than %d hosts", list, max)
                       : rc == -3 ? psg_error_set("out of memory")
                                  : psg_error_set("host list '%s': '%.*s' is not a host or "
                                                  "prefix[ranges] (as scontrol show hostnames)",
                                                  list, (int)(p - start), start);
            }
        }
        if (!*p) break;
        start = p + 1;
    }
    if (depth) {
        psg_slurm_hosts_free(hosts, n);
        return psg_error_set("host list '%s': unbalanced brackets", list);
    }
    return n;
}

int psg_slurm_tasks_per_node(const char *s, int *v, int cap) {
    int n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long count = strtol(p, &end, 10), times = 1;
        if (end == p || count < 0 || count > 100000) break;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') break;
            times = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || times < 1 || times > 100000) break;
            p = end + 1;
        }
        for (long i = 0; i < times; i++) {
            if (n == cap) return psg_error_set("SLURM_TASKS_PER_NODE '%s': over %d nodes", s, cap);
            v[n++] = (int)count;
        }
        if (!*p) return n;
        if (*p++ != ',' || !*p) break;
    }
    return psg_error_set("SLURM_TASKS_PER_NODE '%s' is not counts such as 2(x3),1", s);
}

void psg_slurm_place_free(psg_slurm_place_t *p) {
    if (!p) return;
    psg_slurm_hosts_free(&p->host, p->n);
    free(p->port);
    free(p->slot);
    free(p->node_slots);
    memset(p, 0, sizeof *p);
}

typedef struct {
    const char *host;
    int slots;
} node_t;

static int by_name(const void *a, const void *b) {
    return strcmp(((const node_t *)a)->host, ((const node_t *)b)->host);
}

#define MAX_NODES 4096

int psg_slurm_place(const char *nodelist, const char *tasks_per_node, int ntasks, int ps,
                    int workers, int port_base, psg_slurm_place_t *out) {
    memset(out, 0, sizeof *out);
    char **hosts = NULL;
    int nh = psg_slurm_hostlist(nodelist, MAX_NODES, &hosts);
    if (nh < 0) return -1;
    int *tpn = malloc(MAX_NODES * sizeof *tpn);
    node_t *nodes = malloc((size_t)(nh ? nh : 1) * sizeof *nodes);
    int nt = tpn ? psg_slurm_tasks_per_node(tasks_per_node, tpn, MAX_NODES) : -1;
    int rc = -1;
    if (!tpn || !nodes) {
        psg_error_set("out of memory");
    } else if (nt >= 0 && nt != nh) {
        psg_error_set("SLURM_TASKS_PER_NODE '%s' counts %d nodes, SLURM_JOB_NODELIST '%s' names %d",
                      tasks_per_node, nt, nodelist, nh);
    } else if (nt >= 0) {
        /* the resolver sorts its {host: tasks} by host name; the slots follow in that order */
        int slots = 0;
        for (int i = 0; i < nh; i++) nodes[i] = (node_t){hosts[i], tpn[i]}, slots += tpn[i];
        qsort(nodes, (size_t)nh, sizeof *nodes, by_name);
        if (ntasks > 0 && ntasks < slots) slots = ntasks;
        int n = ps + workers;
        if (n > slots) {
            psg_error_set("--ps %d --workers %d are %d tasks, the allocation runs %d "
                          "(SLURM_NTASKS %d, SLURM_TASKS_PER_NODE %s on %s): ask for --ntasks %d",
                          ps, workers, n, slots, ntasks, tasks_per_node, nodelist, n);
        } else if (!(out->host = calloc((size_t)n + 1, sizeof *out->host)) ||
                   !(out->port = calloc((size_t)n + 1, sizeof *out->port)) ||
                   !(out->slot = calloc((size_t)n + 1, sizeof *out->slot)) ||
                   !(out->node_slots = calloc((size_t)n + 1, sizeof *out->node_slots))) {
            psg_error_set("out of memory");
        } else {
            rc = 0;
            for (int i = 0, k = 0; i < nh && k < n && rc == 0; i++)
                for (int s = 0; s < nodes[i].slots && k < n; s++, k++) {
                    out->n = k + 1;
                    out->port[k] = port_base + s;
                    out->slot[k] = s;
                    out->node_slots[k] = nodes[i].slots;
                    if (!(out->host[k] = strdup(nodes[i].host)))
                        rc = psg_error_set("out of memory");
                }
        }
    }
    if (rc < 0) psg_slurm_place_free(out);
    psg_slurm_hosts_free(&hosts, nh);
    free(tpn);
    free(nodes);
    return rc;
}
