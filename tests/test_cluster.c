/* Tests of the cluster spec (TF_CONFIG from a string, the environment, a file) and of the
 * JSON reader under it: good specs, and a clear error naming the field for each mistake.
 * Not a test of the launcher. */
#include "core/json.h"
#include "psgraph/cluster.h"
#include "psgraph/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static int failures;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__,      \
                    #cond, psg_error_message());                                                   \
            failures++;                                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static const char *GOOD =
    "{\"cluster\": {\"worker\": [\"127.0.0.1:2223\", \"127.0.0.1:2224\"],\n"
    "              \"ps\": [\"127.0.0.1:2222\", \"[::1]:2230\"],\n"
    "              \"chief\": [\"localhost:2225\"]},\n"
    " \"task\": {\"type\": \"worker\", \"index\": 1}, \"environment\": \"cloud\"}";

static void test_good(void) {
    psg_cluster_t *c = psg_cluster_parse(GOOD, "TF_CONFIG");
    CHECK(c);
    CHECK(psg_cluster_num_jobs(c) == 3);
    CHECK(strcmp(psg_cluster_job(c, 0), "chief") == 0 && strcmp(psg_cluster_job(c, 1), "ps") == 0 &&
          strcmp(psg_cluster_job(c, 2), "worker") == 0);
    CHECK(psg_cluster_job(c, 3) == NULL);
    CHECK(psg_cluster_num_tasks(c, "ps") == 2 && psg_cluster_num_tasks(c, "worker") == 2 &&
          psg_cluster_num_tasks(c, "chief") == 1 && psg_cluster_num_tasks(c, "evaluator") == 0);
    CHECK(strcmp(psg_cluster_address(c, "ps", 1), "[::1]:2230") == 0);
    CHECK(strcmp(psg_cluster_address(c, "worker", 0), "127.0.0.1:2223") == 0);
    CHECK(psg_cluster_address(c, "ps", 2) == NULL);
    CHECK(strstr(psg_error_message(), "/job:ps/task:2") &&
          strstr(psg_error_message(), "out of range"));
    CHECK(psg_cluster_address(c, "evaluator", 0) == NULL);
    CHECK(strstr(psg_error_message(), "\"evaluator\""));
    psg_task_t me = psg_cluster_task(c);
    CHECK(me.job && strcmp(me.job, "worker") == 0 && me.index == 1 &&
          strcmp(me.address, "127.0.0.1:2224") == 0);
    psg_task_t all[8];
    CHECK(psg_cluster_tasks(c, all, 8) == 5);
    CHECK(psg_cluster_peer_timeout_ms(c) == 0); /* not given: the wire's default */
    psg_cluster_t *pt =
        psg_cluster_parse("{\"cluster\": {\"ps\": [\"h:1\"]}, \"peer_timeout\": 2.5}", "TF_CONFIG");
    CHECK(pt && psg_cluster_peer_timeout_ms(pt) == 2500);
    CHECK(pt && psg_cluster_set_peer_timeout(pt, -1) < 0 &&
          psg_cluster_peer_timeout_ms(pt) == 2500);
    psg_cluster_destroy(&pt);
    CHECK(strcmp(all[0].job, "chief") == 0 && strcmp(all[1].job, "ps") == 0 && all[2].index == 1 &&
          strcmp(all[4].address, "127.0.0.1:2224") == 0);
    CHECK(psg_cluster_tasks(c, all, 2) == 5); /* counts all, writes 2 */
    CHECK(psg_cluster_set_task(c, "ps", 0) == 0);
    CHECK(strcmp(psg_cluster_task(c).address, "127.0.0.1:2222") == 0);
    CHECK(psg_cluster_set_task(c, "ps", 2) < 0);
    CHECK(strstr(psg_error_message(), "index 2 is out of range: job ps has 2 tasks (0..1)"));
    CHECK(psg_cluster_set_task(c, "master", 0) < 0);
    CHECK(
        strstr(psg_error_message(), "\"master\" is not in the cluster (jobs: chief, ps, worker)"));
    char dev[PSG_DEVICE_NAME_MAX];
    CHECK(strcmp(psg_device_name("ps", 0, NULL, dev, sizeof dev), "/job:ps/task:0") == 0);
    CHECK(strcmp(psg_device_name("worker", 1, "gpu:0", dev, sizeof dev),
                 "/job:worker/task:1/gpu:0") == 0);
    psg_cluster_destroy(&c);
    CHECK(c == NULL);
    psg_cluster_destroy(&c);

    /* Tasks of one host on Unix domain sockets. */
    c = psg_cluster_parse("{\"cluster\":{\"ps\":[\"ipc:///tmp/psg/ps0\"],\"worker\":[\"h:1\"]},"
                          "\"task\":{\"type\":\"ps\",\"index\":0}}",
                          NULL);
    CHECK(c && strcmp(psg_cluster_address(c, "ps", 0), "ipc:///tmp/psg/ps0") == 0 &&
          strcmp(psg_cluster_task(c).address, "ipc:///tmp/psg/ps0") == 0);
    psg_cluster_destroy(&c);

    /* No task: allowed (a launcher reads the spec before choosing). */
    c = psg_cluster_parse("{\"cluster\":{\"ps\":[\"h:1\"]}}", NULL);
    CHECK(c && psg_cluster_task(c).job == NULL && psg_cluster_task(c).index == -1);
    psg_cluster_destroy(&c);
}

static void expect_error(const char *json, const char *want) {
    psg_cluster_t *c = psg_cluster_parse(json, "TF_CONFIG");
    if (c || !strstr(psg_error_message(), want) ||
        strncmp(psg_error_message(), "TF_CONFIG: ", 11)) {
        fprintf(stderr, "spec %s\n  expected an error with \"%s\", got %s\n", json, want,
                c ? "success" : psg_error_message());
        failures++;
    }
    psg_cluster_destroy(&c);
}

static void test_errors(void) {
    expect_error("", "line 1, column 1: expected a value");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\",]}}", "line 1, column 27: expected a value");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}\n \"task\": {}}",
                 "line 2, column 2: expected ',' or '}'");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}} x", "unexpected text after the document");
    expect_error("[1]", "the document is an array, not an object");
    expect_error("{\"task\": {\"type\": \"ps\", \"index\": 0}}", "\"cluster\" is missing");
    expect_error("{\"clutser\": {}}", "unknown field \"clutser\"");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"peer_timeout\": \"3\"}",
                 "\"peer_timeout\" is a string, not a number of seconds");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"peer_timeout\": 0}",
                 "peer timeout 0 s: must be above 0");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"peer_timeout\": 1e9}",
                 "must be above 0 and at most 86400 s");
    expect_error("{\"cluster\": {}}", "\"cluster\" has no job");
    expect_error("{\"cluster\": [\"h:1\"]}", "\"cluster\" is an array, not an object of jobs");
    expect_error("{\"cluster\": {\"ps\": \"h:1\"}}", "cluster.ps is a string, not a list");
    expect_error("{\"cluster\": {\"ps\": []}}", "cluster.ps has no task");
    expect_error("{\"cluster\": {\"ps\": [2222]}}",
                 "cluster.ps[0] is a number, not a \"host:port\" or \"ipc://path\" string");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\", \"localhost\"]}}",
                 "cluster.ps[1] = \"localhost\" is not host:port");
    expect_error("{\"cluster\": {\"ps\": [\"h:99999\"]}}",
                 "cluster.ps[0] = \"h:99999\" is not host:port");
    expect_error("{\"cluster\": {\"ps\": [\"h:12x\"]}}", "is not host:port");
    expect_error("{\"cluster\": {\"ps\": [\":22\"]}}", "is not host:port");
    expect_error("{\"cluster\": {\"ps\": [\"a b:22\"]}}", "is not host:port");
    expect_error("{\"cluster\": {\"ps\": [\"ipc://\"]}}",
                 "cluster.ps[0] = \"ipc://\" is not host:port (port 1-65535) or ipc://path");
    expect_error("{\"cluster\": {\"ps\": [\"ipc:///tmp/a b\"]}}",
                 "or ipc://path (at most 107 bytes, no spaces)");
    expect_error(
        "{\"cluster\": {\"ps\": [\"ipc:///tmp/"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]}}",
        "at most 107 bytes");
    expect_error("{\"cluster\": {\"ps\": [\"ipc:///tmp/p\"], \"worker\": [\"ipc:///tmp/p\"]}}",
                 "cluster.worker[0] = \"ipc:///tmp/p\" is also cluster.ps[0]: duplicate address");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"], \"worker\": [\"h:2\", \"h:1\"]}}",
                 "cluster.worker[1] = \"h:1\" is also cluster.ps[0]: duplicate address");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\", \"h:1\"]}}",
                 "cluster.ps[1] = \"h:1\" is also cluster.ps[0]");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"], \"ps\": [\"h:2\"]}}", "duplicate key \"ps\"");
    expect_error("{\"cluster\": {\"chief\": [\"h:1\", \"h:2\"]}}", "at most one chief");
    expect_error("{\"cluster\": {\"p s\": [\"h:1\"]}}",
                 "cluster job \"p s\": not a valid job name");
    expect_error(
        "{\"cluster\": {\"ps\": [\"h:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
        "task: job \"worker\" is not in the cluster (jobs: ps)");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 1}}",
                 "task: index 1 is out of range: job ps has 1 task (0..0)");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"task\": {\"type\": \"ps\", \"index\": -1}}",
                 "task.index is not a task index");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0.5}}",
                 "task.index is not a task index");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"task\": {\"index\": 0}}",
                 "task.type is missing");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"task\": {\"type\": \"ps\", \"idx\": 0}}",
                 "task.idx: unknown field");
    expect_error("{\"cluster\": {\"ps\": [\"h:1\"]}, \"task\": {\"type\": 3}}",
                 "task.type is a number");
}

static void test_json(void) {
    psg_json_t *j =
        psg_json_parse(" {\"a\": [1, -2.5e3, true, false, null, \"x\\n\\u00e9\\ud83d\\ude00\"],"
                       " \"b\": {}} ");
    CHECK(j && j->type == PSG_JSON_OBJECT && j->count == 2);
    const psg_json_t *a = psg_json_get(j, "a");
    CHECK(a && a->type == PSG_JSON_ARRAY && a->count == 6);
    CHECK(a->items[0]->integral && a->items[0]->number == 1);
    CHECK(!a->items[1]->integral && a->items[1]->number == -2500);
    CHECK(a->items[2]->boolean && !a->items[3]->boolean && a->items[4]->type == PSG_JSON_NULL);
    CHECK(strcmp(a->items[5]->string, "x\n\xc3\xa9\xf0\x9f\x98\x80") == 0);
    CHECK(psg_json_get(j, "c") == NULL);
    psg_json_free(j);
    const char *bad[] = {"01",        "1.",          "-",           "\"a",
                         "\"\\x\"",   "\"\\u0000\"", "\"\\ud800\"", "[1 2]",
                         "{\"a\" 1}", "{1: 2}",      "tru",         "\"tab\there\"",
                         "[",         "{\"a\":1,}",  NULL};
    for (int i = 0; bad[i]; i++) {
        j = psg_json_parse(bad[i]);
        if (j) fprintf(stderr, "json: accepted %s\n", bad[i]);
        CHECK(j == NULL);
    }
    char deep[200];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    CHECK(psg_json_parse(deep) == NULL && strstr(psg_error_message(), "nested too deep"));
}

static void test_env_and_file(void) {
    unsetenv("TF_CONFIG");
    CHECK(psg_cluster_from_env() == NULL && strstr(psg_error_message(), "TF_CONFIG is not set"));
    setenv("TF_CONFIG", GOOD, 1);
    psg_cluster_t *c = psg_cluster_from_env();
    CHECK(c && psg_cluster_task(c).index == 1);
    psg_cluster_destroy(&c);
    setenv("TF_CONFIG", "{\"cluster\": {\"ps\": [\"h:1\"]}, \"task\": {\"type\": \"worker\"}}", 1);
    CHECK(psg_cluster_from_env() == NULL &&
          strstr(psg_error_message(), "TF_CONFIG: task: job \"worker\""));
    unsetenv("TF_CONFIG");

    char path[] = "/tmp/psg_test_cluster_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, GOOD, strlen(GOOD)) == (ssize_t)strlen(GOOD));
    close(fd);
    c = psg_cluster_from_file(path, "ps", 1); /* --job/--task override the file's task */
    CHECK(c && strcmp(psg_cluster_task(c).job, "ps") == 0 && psg_cluster_task(c).index == 1);
    psg_cluster_destroy(&c);
    c = psg_cluster_from_file(path, NULL, 0); /* the file's own task */
    CHECK(c && strcmp(psg_cluster_task(c).job, "worker") == 0);
    psg_cluster_destroy(&c);
    CHECK(psg_cluster_from_file(path, "ps", 5) == NULL);
    CHECK(strstr(psg_error_message(), path) && strstr(psg_error_message(), "--job ps --task 5") &&
          strstr(psg_error_message(), "out of range"));
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && write(fd, "{\"cluster\": {\"ps\": [\"h:1\"]", 26) == 26);
    close(fd);
    CHECK(psg_cluster_from_file(path, "ps", 0) == NULL);
    CHECK(strstr(psg_error_message(), path) && strstr(psg_error_message(), "line 1"));
    unlink(path);
    CHECK(psg_cluster_from_file(path, "ps", 0) == NULL);
    CHECK(strstr(psg_error_message(), path) && strstr(psg_error_message(), "No such file"));
}

/* "ps_replicas" and --ps-replicas: each shard's backup is the next ps task in the ring. */
static void test_ps_replicas(void) {
    const char *three = "{\"cluster\": {\"ps\": [\"h:1\", \"h:2\", \"h:3\"], \"worker\": "
                        "[\"h:4\"]}, \"ps_replicas\": 2}";
    psg_cluster_t *c = psg_cluster_parse(three, "TF_CONFIG");
    CHECK(c && psg_cluster_ps_replicas(c) == 2);
    CHECK(c && psg_cluster_ps_backup(c, 0) == 1 && psg_cluster_ps_backup(c, 1) == 2 &&
          psg_cluster_ps_backup(c, 2) == 0 && psg_cluster_ps_backup(c, 3) == -1);
    CHECK(c && psg_cluster_ps_backed_up(c, 0) == 2 && psg_cluster_ps_backed_up(c, 1) == 0);
    CHECK(c && psg_cluster_set_ps_replicas(c, 1) == 0 && psg_cluster_ps_backup(c, 0) == -1);
    CHECK(c && psg_cluster_set_ps_replicas(c, 3) < 0 && psg_error_code() == PSG_ERR_CONFIG &&
          strstr(psg_error_message(), "ps replicas 3: must be 1"));
    psg_cluster_destroy(&c);
    c = psg_cluster_parse("{\"cluster\": {\"ps\": [\"h:1\"]}}", "TF_CONFIG");
    CHECK(c && psg_cluster_ps_replicas(c) == 1 && psg_cluster_ps_backup(c, 0) == -1);
    CHECK(c && psg_cluster_set_ps_replicas(c, 2) < 0 &&
          strstr(psg_error_message(), "needs at least 2 ps tasks (the cluster has 1)"));
    psg_cluster_destroy(&c);
    c = psg_cluster_parse("{\"cluster\": {\"ps\": [\"h:1\"]}, \"ps_replicas\": 2}", "TF_CONFIG");
    CHECK(!c && strstr(psg_error_message(), "TF_CONFIG: \"ps_replicas\": ps replicas 2 needs"));
    c = psg_cluster_parse("{\"cluster\": {\"ps\": [\"h:1\", \"h:2\"]}, \"ps_replicas\": \"2\"}",
                          "TF_CONFIG");
    CHECK(!c && strstr(psg_error_message(), "\"ps_replicas\" is a string, not 1 or 2"));
    c = psg_cluster_parse("{\"cluster\": {\"ps\": [\"h:1\", \"h:2\"]}, \"ps_replicas\": 1e300}",
                          "TF_CONFIG");
    CHECK(!c && strstr(psg_error_message(), "\"ps_replicas\" is a number, not 1 or 2"));
}

int main(void) {
    test_ps_replicas();
    test_good();
    test_errors();
    test_json();
    test_env_and_file();
    printf("%s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
