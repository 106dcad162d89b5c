/* `psgraph launch --k8s`: the Kubernetes objects of a cluster as YAML, ready for
 * `kubectl apply -f`: a Secret with the cluster's CURVE keys, a headless Service naming every
 * pod, and one Indexed Job per job (ps, worker) whose pods build their TF_CONFIG from their
 * index and mount the Secret. Writes YAML only: it talks to no API server (docs/hosts.md). */
#include "cli/commands.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define K8S_PORT 2222
/* where every pod finds the cluster's keys: the Secret NAME-keys, read-only */
#define K8S_KEYS_PATH "/etc/psgraph/keys"

typedef struct {
    const char *image, *ns, *name, *cpu, *memory, *volume, *out;
    int gpus;
    int ps, workers;
    bool restart;
    char **cmd;
} k8s_t;

/* s as a YAML double-quoted scalar (JSON's escapes). */
static void q(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p < 0x20)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The DNS name of pod `index` of job `job`: the Job's pods are named NAME-JOB-INDEX and sit
 * under the headless Service NAME (their subdomain). */
static void pod_dns(const k8s_t *k, const char *job, int index, char *out, size_t size) {
    snprintf(out, size, "%s-%s-%d.%s.%s.svc.cluster.local:%d", k->name, job, index, k->name, k->ns,
             K8S_PORT);
}

static void service(FILE *f, const k8s_t *k) {
    fprintf(
        f,
        "---\n# the headless Service: a DNS name for every pod of the cluster, no load balancing\n"
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\n"
        "  labels:\n    app.kubernetes.io/name: psgraph\n    psgraph/cluster: %s\n"
        "spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n"
        "  selector:\n    psgraph/cluster: %s\n"
        "  ports:\n    - name: task\n      port: %d\n      targetPort: %d\n",
        k->name, k->ns, k->name, k->name, K8S_PORT, K8S_PORT);
}

/* s (len bytes) in base64, as a Secret's data. */
static void base64(FILE *f, const unsigned char *s, size_t len) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < len ? (unsigned)s[i + 1] << 8 : 0) |
                     (i + 2 < len ? s[i + 2] : 0);
        fputc(abc[v >> 18 & 63], f);
        fputc(abc[v >> 12 & 63], f);
        fputc(i + 1 < len ? abc[v >> 6 & 63] : '=', f);
        fputc(i + 2 < len ? abc[v & 63] : '=', f);
    }
}

static int secret_entry(void *ctx, const char *name, const char *text, size_t len) {
    FILE *f = ctx;
    fprintf(f, "  %s: ", name);
    base64(f, (const unsigned char *)text, len);
    fputc('\n', f);
    return 0;
}

/* The Secret NAME-keys: the files of the key folder every pod needs (cli/launch_keys.c). */
static int secret(FILE *f, const k8s_t *k, const char *keys_dir) {
    fprintf(f,
            "# the cluster's CURVE keys (docs/security.md), mounted read-only at %s in every pod:\n"
            "# whoever reads this file or the Secret can join the cluster\n"
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s-keys\n  namespace: %s\n"
            "  labels:\n    app.kubernetes.io/name: psgraph\n    psgraph/cluster: %s\n"
            "type: Opaque\ndata:\n",
            K8S_KEYS_PATH, k->name, k->ns, k->name);
    return psg_launch_keys_each(keys_dir, secret_entry, f);
}

/* The logdir the command names (--logdir DIR), else /logdir. */
static const char *logdir_of(char **cmd) {
    return psg_launch_cmd_option(cmd, "--logdir", "/logdir");
}

static void container(FILE *f, const k8s_t *k, const char *job, const char *cluster) {
    bool ps = !strcmp(job, "ps");
    fprintf(f, "          - name: %s\n            image: ", job);
    q(f, k->image);
    /* TF_CONFIG from the pod's index (JOB_COMPLETION_INDEX, set by Kubernetes) */
    fprintf(f, "\n            command: [\"/bin/sh\", \"-c\", ");
    q(f,
      "export TF_CONFIG=\"{\\\"cluster\\\": $PSG_CLUSTER, \\\"task\\\": {\\\"type\\\": \\\"$PSG_JOB\\\", "
      "\\\"index\\\": $JOB_COMPLETION_INDEX}}\"; exec \"$@\"");
    fprintf(f, ", \"psgraph-task\"]\n            args: [");
    if (ps) {
        /* the shards go to the workers' logdir: the only place a ps writes (docs/distributed.md) */
        fprintf(f, "\"psgraph\", \"server\", \"--logdir\", ");
        q(f, logdir_of(k->cmd));
        const char *peer_timeout = psg_launch_cmd_option(k->cmd, "--peer-timeout", NULL);
        if (peer_timeout) { /* the ps drops silent peers as the workers do */
            fprintf(f, ", \"--peer-timeout\", ");
            q(f, peer_timeout);
        }
    } else {
        for (int i = 0; k->cmd[i]; i++) {
            if (i) fputs(", ", f);
            q(f, k->cmd[i]);
        }
    }
    fprintf(
        f,
        "]\n            env:\n              - name: PSGRAPH_KEYS\n                value: \"%s\"\n"
        "              - name: PSG_JOB\n                value: \"%s\"\n"
        "              - name: PSG_CLUSTER\n                value: ",
        K8S_KEYS_PATH, job);
    q(f, cluster);
    fprintf(f,
            "\n            ports:\n              - name: task\n                containerPort: %d\n",
            K8S_PORT);
    bool gpus = !ps && k->gpus > 0;
    if (k->cpu || k->memory || gpus) {
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 0) fprintf(f, "            resources:\n");
            fprintf(f, "              %s:\n", pass ? "limits" : "requests");
            if (k->cpu) fprintf(f, "                cpu: "), q(f, k->cpu), fputc('\n', f);
            if (k->memory) fprintf(f, "                memory: "), q(f, k->memory), fputc('\n', f);
            if (gpus) fprintf(f, "                nvidia.com/gpu: \"%d\"\n", k->gpus);
        }
    }
    fprintf(f,
            "            volumeMounts:\n              - name: logdir\n                mountPath: ");
    q(f, logdir_of(k->cmd));
    fprintf(
        f,
        "\n              - name: keys\n                mountPath: %s\n                readOnly: true\n",
        K8S_KEYS_PATH);
}

/* One Indexed Job: its pods NAME-JOB-0..n-1, each its own task of the cluster. */
static void job(FILE *f, const k8s_t *k, const char *job, int n, const char *cluster) {
    fprintf(
        f,
        "# the %s tasks: pod NAME-%s-i is /job:%s/task:i\n"
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: %s-%s\n  namespace: %s\n"
        "  labels:\n    app.kubernetes.io/name: psgraph\n    psgraph/cluster: %s\n    psgraph/job: %s\n"
        "spec:\n  completionMode: Indexed\n  completions: %d\n  parallelism: %d\n"
        "  backoffLimit: %d\n"
        "  template:\n    metadata:\n      labels:\n        app.kubernetes.io/name: psgraph\n"
        "        psgraph/cluster: %s\n        psgraph/job: %s\n"
        "    spec:\n      subdomain: %s\n      restartPolicy: %s\n      containers:\n",
        job, job, job, k->name, job, k->ns, k->name, job, n, n, k->restart ? 3 * n : 0, k->name,
        job, k->name, k->restart ? "OnFailure" : "Never");
    container(f, k, job, cluster);
    fprintf(f, "      volumes:\n        - name: logdir\n");
    if (k->volume)
        fprintf(f, "          persistentVolumeClaim:\n            claimName: "), q(f, k->volume),
            fputc('\n', f);
    else
        fprintf(f, "          emptyDir: {}\n");
    /* 0400: the secret readable by the pod's user only (net/curve_keys.c checks it) */
    fprintf(f,
            "        - name: keys\n          secret:\n            secretName: %s-keys\n"
            "            defaultMode: 256 # 0400\n",
            k->name);
}

/* Writes the objects to f; the cluster's addresses are the pods' DNS names. */
static int write_all(FILE *f, const k8s_t *k, const char *secret_yaml) {
    size_t cap = 64 + (size_t)(k->ps + k->workers) * 200, len = 0;
    char *cluster = malloc(cap);
    if (!cluster) return -1;
    len += (size_t)snprintf(cluster + len, cap - len, "{");
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? k->workers : k->ps;
        if (!n) continue;
        len += (size_t)snprintf(cluster + len, cap - len, "%s\"%s\": [", len > 1 ? ", " : "",
                                pass ? "worker" : "ps");
        for (int i = 0; i < n; i++) {
            char a[300];
            pod_dns(k, pass ? "worker" : "ps", i, a, sizeof a);
            len += (size_t)snprintf(cluster + len, cap - len, "%s\"%s\"", i ? ", " : "", a);
        }
        len += (size_t)snprintf(cluster + len, cap - len, "]");
    }
    snprintf(cluster + len, cap - len, "}");
    fputs(secret_yaml, f);
    service(f, k);
    if (k->ps) {
        fputs("---\n", f);
        job(f, k, "ps", k->ps, cluster);
    }
    fputs("---\n", f);
    job(f, k, "worker", k->workers, cluster);
    free(cluster);
    return ferror(f) ? -1 : 0;
}

/* A DNS label (RFC 1123) of at most 40 characters: the pods' names add "-worker-NNN". */
static bool dns_label(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 40 || s[0] == '-' || s[n - 1] == '-') return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) return false;
    return true;
}

/* The objects on stdout, or into --out DIR/NAME.yaml (mode 0600: it holds the secret key). */
static int write_out(const k8s_t *k, const char *secret_yaml) {
    if (!k->out) return write_all(stdout, k, secret_yaml) == 0 ? 0 : 1;
    if (mkdir(k->out, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "psgraph launch: --out %s: %s\n", k->out, strerror(errno));
        return 1;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.yaml", k->out, k->name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 && fchmod(fd, 0600) == 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "psgraph launch: %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    int rc = write_all(f, k, secret_yaml);
    if (fclose(f) != 0) rc = -1;
    if (rc < 0) {
        fprintf(stderr, "psgraph launch: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    printf("psgraph launch: %s written (kubectl apply -f %s; it holds the cluster's secret key)\n",
           path, path);
    return 0;
}

int psg_launch_k8s(int argc, char **argv, int ps, int workers, bool restart, char **cmd,
                   const char *keys_dir) {
    k8s_t k = {.image = "psgraph:latest",
               .ns = "default",
               .name = "psgraph",
               .ps = ps,
               .workers = workers,
               .restart = restart,
               .cmd = cmd};
    for (int i = 0; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--image"))
            k.image = v;
        else if (!strcmp(a, "--namespace"))
            k.ns = v;
        else if (!strcmp(a, "--name"))
            k.name = v;
        else if (!strcmp(a, "--cpu"))
            k.cpu = v;
        else if (!strcmp(a, "--memory"))
            k.memory = v;
        else if (!strcmp(a, "--logdir-volume"))
            k.volume = v;
        else if (!strcmp(a, "--out"))
            k.out = v;
        else if (!strcmp(a, "--gpus-per-worker"))
            k.gpus = atoi(v); /* 0..64: cli/option_table.c */
    }
    if (!dns_label(k.name) || !dns_label(k.ns)) {
        fprintf(stderr,
                "psgraph launch: --%s '%s' is not a DNS label (a-z, 0-9, '-', at most 40)\n",
                dns_label(k.name) ? "namespace" : "name", dns_label(k.name) ? k.ns : k.name);
        return 2;
    }
    /* the keys first: an error about them comes before any output */
    psg_launch_keys_t keys;
    char *secret_yaml = NULL;
    size_t secret_len = 0;
    FILE *m = NULL;
    if (psg_launch_keys_prepare(&keys, keys_dir) < 0) return 1;
    int rc =
        (m = open_memstream(&secret_yaml, &secret_len)) && secret(m, &k, keys.dir) == 0 ? 0 : 1;
    if (m && fclose(m) != 0) rc = 1;
    psg_launch_keys_remove(&keys);
    if (rc == 0) rc = write_out(&k, secret_yaml);
    if (secret_yaml) memset(secret_yaml, 0, secret_len);
    free(secret_yaml);
    return rc;
}
