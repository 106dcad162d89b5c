/* A Slurm allocation read as a cluster (cli/slurm_alloc.c): host lists expanded as
 * `scontrol show hostnames` expands them (compared with scontrol itself where slurm-client is
 * installed, else with what it printed here), SLURM_TASKS_PER_NODE's counts, and the tasks
 * placed as TensorFlow's SlurmClusterResolver places them. */
#include "cli/slurm_alloc.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the names of list, space-separated, or "ERROR" */
static void expand(const char *list, char *out, size_t size) {
    char **h;
    int n = psg_slurm_hostlist(list, 4096, &h);
    if (n < 0) {
        snprintf(out, size, "ERROR");
        return;
    }
    out[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), size - strlen(out), "%s%s", i ? " " : "", h[i]);
    psg_slurm_hosts_free(&h, n);
}

/* what scontrol show hostnames prints for list (names space-separated, "ERROR" when it
 * refuses), or NULL without scontrol */
static char *scontrol(const char *conf, const char *list) {
    char cmd[512], *out = calloc(1, 8192);
    snprintf(cmd, sizeof cmd, "SLURM_CONF=%s scontrol show hostnames '%s' 2>/dev/null", conf, list);
    FILE *p = popen(cmd, "r");
    size_t len = p ? fread(out, 1, 8191, p) : 0;
    int rc = p ? pclose(p) : -1;
    out[len] = 0;
    for (char *c = out; *c; c++)
        if (*c == '\n') *c = c[1] ? ' ' : 0;
    if (rc != 0 || !len || strstr(out, "Invalid hostlist")) snprintf(out, 8192, "ERROR");
    return out;
}

static void test_hostlist(void) {
    /* each list and what scontrol show hostnames printed for it (slurm-wlm 22.05) */
    static const char *const cases[][2] = {
        {"h[1-3]", "h1 h2 h3"},
        {"a[1-2]b[3-4]", "a1b3 a1b4 a2b3 a2b4"},
        {"n[08-11],x", "n08 n09 n10 n11 x"},
        {"gpu[001-003,7]", "gpu001 gpu002 gpu003 gpu7"},
        {"h1,h[10-11]", "h1 h10 h11"},
        {"x[9-10]", "x9 x10"},
        {"z[1-2],z1", "z1 z2 z1"},
        {"a[1-2]-b[1-2]", "a1-b1 a1-b2 a2-b1 a2-b2"},
        {"h[1-3,5-6]", "h1 h2 h3 h5 h6"},
        {"h[1-2],,h3", "h1 h2 h3"},
        {"a[01-3]", "a01 a02 a03"},
        {"n1-ib", "n1-ib"},
        {"h[1-1]", "h1"},
        {"n[1-2]-ib", "ERROR"},
        {"a[2-1]", "ERROR"},
        {"h[a-b]", "ERROR"},
        {"h[]", "ERROR"},
        {"h[1-3]x", "ERROR"},
    };
    char conf[] = "/tmp/psg_test_slurm.XXXXXX";
    int fd = mkstemp(conf);
    CHECK(fd >= 0);
    if (fd >= 0) {
        const char *text = "ClusterName=t\nSlurmctldHost=localhost\nNodeName=h1 CPUs=1\n"
                           "PartitionName=p Nodes=ALL Default=YES\n";
        CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
        close(fd);
    }
    bool have = system("command -v scontrol >/dev/null 2>&1") == 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char got[1024];
        expand(cases[i][0], got, sizeof got);
        if (strcmp(got, cases[i][1]))
            fprintf(stderr, "'%s': '%s', want '%s'\n", cases[i][0], got, cases[i][1]);
        CHECK(!strcmp(got, cases[i][1]));
        if (have) { /* the real thing, where it is installed */
            char *real = scontrol(conf, cases[i][0]);
            if (strcmp(got, real))
                fprintf(stderr, "'%s': '%s', scontrol '%s'\n", cases[i][0], got, real);
            CHECK(!strcmp(got, real));
            free(real);
        }
    }
    printf("     %zu host lists%s\n", sizeof cases / sizeof cases[0],
           have ? ", each as scontrol show hostnames expands it" : "");
    unlink(conf);
    char **h;
    CHECK(psg_slurm_hostlist("h[1-3", 10, &h) == -1);
    CHECK_ERROR_HAS("h[1-3");
    CHECK(psg_slurm_hostlist("h[1-100]", 10, &h) == -1);
    CHECK_ERROR_HAS("more than 10 hosts");
}

static void test_tasks_per_node(void) {
    int v[8];
    CHECK(psg_slurm_tasks_per_node("2(x3),1", v, 8) == 4);
    CHECK(v[0] == 2 && v[1] == 2 && v[2] == 2 && v[3] == 1);
    CHECK(psg_slurm_tasks_per_node("1", v, 8) == 1 && v[0] == 1);
    CHECK(psg_slurm_tasks_per_node("4,3(x2)", v, 8) == 3 && v[2] == 3);
    CHECK(psg_slurm_tasks_per_node("2(x3", v, 8) == -1);
    CHECK_ERROR_HAS("SLURM_TASKS_PER_NODE '2(x3'");
    CHECK(psg_slurm_tasks_per_node("1,", v, 8) == -1);
    CHECK(psg_slurm_tasks_per_node("1(x9)", v, 8) == -1);
}

static void test_place(void) {
    psg_slurm_place_t p;
    /* nodes by name (as the resolver sorts its {host: tasks}), then slots: ps first */
    CHECK(psg_slurm_place("n[2-3],n10", "2,1,2", 0, 1, 3, 8888, &p) == 0);
    CHECK(p.n == 4);
    const char *hosts[] = {"n10", "n10", "n2", "n2"};
    const int ports[] = {8888, 8889, 8888, 8889}, slots[] = {0, 1, 0, 1}, of[] = {2, 2, 2, 2};
    for (int i = 0; i < 4 && p.n == 4; i++)
        CHECK(!strcmp(p.host[i], hosts[i]) && p.port[i] == ports[i] && p.slot[i] == slots[i] &&
              p.node_slots[i] == of[i]);
    psg_slurm_place_free(&p);
    /* SLURM_NTASKS bounds the slots */
    CHECK(psg_slurm_place("h[1-3]", "2(x3)", 3, 1, 3, 23000, &p) == -1);
    CHECK_ERROR_HAS("--ps 1 --workers 3 are 4 tasks, the allocation runs 3 (SLURM_NTASKS 3, "
                    "SLURM_TASKS_PER_NODE 2(x3) on h[1-3]): ask for --ntasks 4");
    CHECK(psg_slurm_place("h[1-3]", "1(x2)", 0, 1, 1, 23000, &p) == -1);
    CHECK_ERROR_HAS("counts 2 nodes, SLURM_JOB_NODELIST 'h[1-3]' names 3");
    CHECK(psg_slurm_place("h[1-3]", "1(x3)", 3, 1, 2, 23000, &p) == 0);
    CHECK(p.n == 3 && !strcmp(p.host[0], "h1") && !strcmp(p.host[2], "h3") && p.port[2] == 23000);
    psg_slurm_place_free(&p);
}

int main(void) {
    RUN_TEST(test_hostlist);
    RUN_TEST(test_tasks_per_node);
    RUN_TEST(test_place);
    return psg_test_summary();
}
