/* `psgraph launch --k8s`: the Kubernetes objects of a cluster as YAML, ready for
 * `kubectl apply -f`: a Secret with the cluster's CURVE keys, a headless Service naming every
 * pod, and one Indexed Job per job (ps, worker) whose pods build their TF_CONFIG from their
 * index and mount the Secret. Writes YAML only: it talks to no API server (docs/hosts.md). */
#include "cli/commands.h"
#include "worker/membership_leave.h"

#include <ctype.h>
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
/* the image's user (tools/image.sh: psgraph, 1000:1000), also the pods' fsGroup: the kubelet
   makes the Secret's files root:1000 0440, which the user reads and nobody else */
#define K8S_UID 1000
/* `psgraph train`'s default --data-dir: where --data is mounted when the command names none */
#define K8S_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define K8S_MAX_LIST 16

typedef struct {
    const char *image, *ns, *name, *cpu, *memory, *volume, *out, *data;
    int gpus;
    int ps, workers;
    int workers_at_start; /* --workers MIN:MAX: MIN (the Job's parallelism); 0: all */
    bool restart;
    long ttl, deadline; /* ttlSecondsAfterFinished, activeDeadlineSeconds (0: none) */
    const char *selectors[K8S_MAX_LIST], *tolerations[K8S_MAX_LIST];
    int nselectors, ntolerations;
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

/* The logdir the command names (--logdir DIR; a Python script's --train_dir or
 * --checkpoint_dir, as psgraph launch's ps tasks take it), else /logdir. */
static const char *logdir_of(char **cmd) {
    const char *d = psg_launch_cmd_option(cmd, "--logdir", NULL);
    if (!d) d = psg_launch_cmd_option(cmd, "--train_dir", NULL);
    return d ? d : psg_launch_cmd_option(cmd, "--checkpoint_dir", "/logdir");
}

/* The data folder the command names (--data-dir DIR; a Python script's --data_dir). */
static const char *data_dir_of(char **cmd) {
    return psg_launch_cmd_option(cmd, "--data-dir",
                                 psg_launch_cmd_option(cmd, "--data_dir", K8S_DATA_DIR));
}

/* The pod's container; join_from >= 0: a pod of that index or more joins (--workers MIN:MAX). */
static void container(FILE *f, const k8s_t *k, const char *job, int join_from,
                      const char *cluster) {
    bool ps = !strcmp(job, "ps");
    fprintf(f, "          - name: %s\n            image: ", job);
    q(f, k->image);
    /* TF_CONFIG from the pod's index (JOB_COMPLETION_INDEX, set by Kubernetes) */
    fprintf(f, "\n            command: [\"/bin/sh\", \"-c\", ");
    /* --workers MIN:MAX: a worker pod of index MIN or more joins the running job */
    q(f,
      join_from >= 0
          ? "export TF_CONFIG=\"{\\\"cluster\\\": $PSG_CLUSTER, \\\"task\\\": {\\\"type\\\": "
            "\\\"$PSG_JOB\\\", \\\"index\\\": $JOB_COMPLETION_INDEX}}\"; "
            "if [ \"$JOB_COMPLETION_INDEX\" -ge \"$PSG_JOIN_FROM\" ]; then set -- \"$@\" --join; "
            "fi; exec \"$@\""
          : "export TF_CONFIG=\"{\\\"cluster\\\": $PSG_CLUSTER, \\\"task\\\": {\\\"type\\\": "
            "\\\"$PSG_JOB\\\", \\\"index\\\": $JOB_COMPLETION_INDEX}}\"; exec \"$@\"");
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
    if (join_from >= 0)
        fprintf(f, "\n              - name: PSG_JOIN_FROM\n                value: \"%d\"",
                join_from);
    fprintf(f,
            "\n            ports:\n              - name: task\n                containerPort: %d\n",
            K8S_PORT);
    /* requests always (Burstable without --cpu and --memory: never BestEffort, the first
       evicted); limits only as given (both: Guaranteed) */
    bool gpus = !ps && k->gpus > 0;
    fprintf(f, "            resources:\n              requests:\n                cpu: ");
    q(f, k->cpu ? k->cpu : "1");
    fprintf(f, "\n                memory: ");
    q(f, k->memory ? k->memory : "1Gi");
    fputc('\n', f);
    if (gpus) fprintf(f, "                nvidia.com/gpu: \"%d\"\n", k->gpus);
    if (k->cpu || k->memory || gpus) {
        fprintf(f, "              limits:\n");
        if (k->cpu) fprintf(f, "                cpu: "), q(f, k->cpu), fputc('\n', f);
        if (k->memory) fprintf(f, "                memory: "), q(f, k->memory), fputc('\n', f);
        if (gpus) fprintf(f, "                nvidia.com/gpu: \"%d\"\n", k->gpus);
    }
    fprintf(f,
            "            volumeMounts:\n              - name: logdir\n                mountPath: ");
    q(f, logdir_of(k->cmd));
    if (!ps && k->data) {
        fprintf(f, "\n              - name: data\n                mountPath: ");
        q(f, data_dir_of(k->cmd));
        fprintf(f, "\n                readOnly: true");
    }
    fprintf(
        f,
        "\n              - name: keys\n                mountPath: %s\n                readOnly: true\n",
        K8S_KEYS_PATH);
}

/* A volume's source: a PersistentVolumeClaim, or a path on the node (hostPath of the type
 * given) when it starts with '/'; none: an emptyDir. */
static void volume(FILE *f, const char *v, const char *type) {
    if (!v) {
        fprintf(f, "          emptyDir: {}\n");
    } else if (v[0] == '/') {
        fprintf(f, "          hostPath:\n            path: ");
        q(f, v);
        fprintf(f, "\n            type: %s\n", type);
    } else {
        fprintf(f, "          persistentVolumeClaim:\n            claimName: ");
        q(f, v);
        fputc('\n', f);
    }
}

/* --node-selector K=V and --toleration K[=V][:EFFECT] (checked by check_placement). */
static void pod_placement(FILE *f, const k8s_t *k) {
    if (k->nselectors) fprintf(f, "      nodeSelector:\n");
    for (int i = 0; i < k->nselectors; i++) {
        const char *eq = strchr(k->selectors[i], '=');
        fprintf(f, "        %.*s: ", (int)(eq - k->selectors[i]), k->selectors[i]);
        q(f, eq + 1);
        fputc('\n', f);
    }
    if (k->ntolerations) fprintf(f, "      tolerations:\n");
    for (int i = 0; i < k->ntolerations; i++) {
        const char *t = k->tolerations[i], *colon = strchr(t, ':'), *eq = strchr(t, '=');
        size_t klen = eq ? (size_t)(eq - t) : colon ? (size_t)(colon - t) : strlen(t);
        fprintf(f, "        - key: \"%.*s\"\n          operator: %s\n", (int)klen, t,
                eq ? "Equal" : "Exists");
        if (eq)
            fprintf(f, "          value: \"%.*s\"\n",
                    (int)(colon ? (size_t)(colon - eq - 1) : strlen(eq + 1)), eq + 1);
        if (colon && colon[1]) fprintf(f, "          effect: %s\n", colon + 1);
    }
}

/* One Indexed Job: its pods NAME-JOB-0..n-1, each its own task of the cluster, `parallelism`
 * of them running; join_from >= 0: a pod of that index or more joins the running job. */
static void job(FILE *f, const k8s_t *k, const char *job, int n, int parallelism, int join_from,
                const char *cluster) {
    bool elastic = join_from >= 0;
    if (!strcmp(job, "chief")) /* --workers MIN:MAX: the worker Job is scaled, never this one */
        fprintf(f, "# the chief in a Job of its own: scaling the worker Job in never deletes it\n");
    fprintf(
        f,
        "# the %s tasks: pod NAME-%s-i is /job:%s/task:i\n"
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: %s-%s\n  namespace: %s\n"
        "  labels:\n    app.kubernetes.io/name: psgraph\n    psgraph/cluster: %s\n    psgraph/job: %s\n"
        "spec:\n  completionMode: Indexed\n  completions: %d\n  parallelism: %d\n"
        "  backoffLimit: %d\n"
        "  # the finished Job and its pods (their logs) removed after this; --ttl-after-finished\n"
        "  ttlSecondsAfterFinished: %ld\n",
        job, job, job, k->name, job, k->ns, k->name, job, n, parallelism, k->restart ? 3 * n : 0,
        k->ttl);
    if (elastic) /* --workers MIN:MAX: the chief's Job and this one's pods */
        fprintf(f,
                "  # --workers %d:%d: the chief (its own Job) and pods 0..%d start; raising\n"
                "  # parallelism starts the next ones (kubectl patch job %s-worker -p\n"
                "  # '{\"spec\":{\"parallelism\":%d}}'), each with --join: it joins the running\n"
                "  # job (docs/distributed.md \"Membership\"); lowering it deletes pods, each of\n"
                "  # which leaves the job at its SIGTERM (docs/hosts.md \"Scaling in\")\n",
                k->workers_at_start, k->workers, join_from - 1, k->name, n);
    if (k->deadline)
        fprintf(f,
                "  # every pod stopped and the Job failed after this, whatever runs; "
                "--active-deadline\n  activeDeadlineSeconds: %ld\n",
                k->deadline);
    fprintf(f,
            "  template:\n    metadata:\n      labels:\n        app.kubernetes.io/name: psgraph\n"
            "        psgraph/cluster: %s\n        psgraph/job: %s\n"
            "    spec:\n      subdomain: %s\n      restartPolicy: %s\n",
            k->name, job, k->name, k->restart ? "OnFailure" : "Never");
    if (elastic)
        fprintf(
            f,
            "      # SIGTERM: the worker ends its step, tells the chief and exits (at most %d s)\n"
            "      terminationGracePeriodSeconds: 30\n",
            PSG_LEAVE_GRACE_S);
    fprintf(f,
            "      securityContext:\n        runAsNonRoot: true\n        runAsUser: %d\n"
            "        runAsGroup: %d\n        fsGroup: %d\n",
            K8S_UID, K8S_UID, K8S_UID);
    pod_placement(f, k);
    fprintf(f, "      containers:\n");
    container(f, k, job, join_from, cluster);
    fprintf(f, "      volumes:\n        - name: logdir\n");
    volume(f, k->volume, "DirectoryOrCreate");
    if (strcmp(job, "ps") && k->data) {
        fprintf(f, "        - name: data\n");
        volume(f, k->data, "Directory");
    }
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
    /* --workers MIN:MAX: the chief is the "chief" job's task (a Job of its own), the worker
     * Job's pods the others (its pod i is /job:worker/task:i, rank i + 1) */
    bool elastic = k->workers_at_start > 0;
    const char *jobs[3] = {"ps", elastic ? "chief" : NULL, "worker"};
    int counts[3] = {k->ps, elastic ? 1 : 0, elastic ? k->workers - 1 : k->workers};
    len += (size_t)snprintf(cluster + len, cap - len, "{");
    for (int j = 0; j < 3; j++) {
        if (!counts[j]) continue;
        len +=
            (size_t)snprintf(cluster + len, cap - len, "%s\"%s\": [", len > 1 ? ", " : "", jobs[j]);
        for (int i = 0; i < counts[j]; i++) {
            char a[300];
            pod_dns(k, jobs[j], i, a, sizeof a);
            len += (size_t)snprintf(cluster + len, cap - len, "%s\"%s\"", i ? ", " : "", a);
        }
        len += (size_t)snprintf(cluster + len, cap - len, "]");
    }
    snprintf(cluster + len, cap - len, "}");
    fputs(secret_yaml, f);
    service(f, k);
    if (k->ps) {
        fputs("---\n", f);
        job(f, k, "ps", k->ps, k->ps, -1, cluster);
    }
    if (elastic) {
        fputs("---\n", f);
        job(f, k, "chief", 1, 1, -1, cluster);
    }
    fputs("---\n", f);
    if (elastic)
        job(f, k, "worker", k->workers - 1, k->workers_at_start - 1, k->workers_at_start - 1,
            cluster);
    else
        job(f, k, "worker", k->workers, k->workers, -1, cluster);
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

/* A label key ([prefix/]name: letters, digits, '-', '_', '.') and, with value, its value
 * (at most 63 of the same, empty allowed). */
static bool label_ok(const char *key, size_t klen, const char *value, size_t vlen) {
    if (!klen || klen > 253 || !isalnum((unsigned char)key[0]) ||
        !isalnum((unsigned char)key[klen - 1]))
        return false;
    for (size_t i = 0; i < klen; i++)
        if (!isalnum((unsigned char)key[i]) && !strchr("-_./", key[i])) return false;
    if (vlen > 63) return false;
    for (size_t i = 0; value && i < vlen; i++)
        if (!isalnum((unsigned char)value[i]) && !strchr("-_.", value[i])) return false;
    return true;
}

/* --toleration KEY[=VALUE][:EFFECT], as kubectl taint writes a taint */
static bool toleration_ok(const char *t) {
    const char *colon = strchr(t, ':'), *eq = strchr(t, '=');
    if (eq && colon && eq > colon) return false;
    size_t klen = eq ? (size_t)(eq - t) : colon ? (size_t)(colon - t) : strlen(t);
    const char *v = eq ? eq + 1 : NULL;
    size_t vlen = v ? (colon ? (size_t)(colon - v) : strlen(v)) : 0;
    if (!label_ok(t, klen, v, vlen)) return false;
    return !colon || !colon[1] || !strcmp(colon + 1, "NoSchedule") ||
           !strcmp(colon + 1, "PreferNoSchedule") || !strcmp(colon + 1, "NoExecute");
}

/* The --k8s options (pairs from the option table, values checked there) into *k; 2 after
 * printing a bad one. */
static int k8s_read(int argc, char **argv, k8s_t *k) {
    for (int i = 0; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        const char **one[] = {&k->image,  &k->ns,     &k->name, &k->cpu,
                              &k->memory, &k->volume, &k->out,  &k->data};
        const char *names[] = {"--image",  "--namespace",     "--name", "--cpu",
                               "--memory", "--logdir-volume", "--out",  "--data"};
        for (size_t j = 0; j < sizeof one / sizeof *one; j++)
            if (!strcmp(a, names[j])) *one[j] = v;
        if (!strcmp(a, "--gpus-per-worker")) k->gpus = atoi(v); /* 0..64: cli/option_table.c */
        if (!strcmp(a, "--ttl-after-finished")) k->ttl = atol(v);
        if (!strcmp(a, "--active-deadline")) k->deadline = atol(v);
        bool sel = !strcmp(a, "--node-selector"), tol = !strcmp(a, "--toleration");
        const char *eq = strchr(v, '=');
        if ((sel && !(eq && label_ok(v, (size_t)(eq - v), eq + 1, strlen(eq + 1)))) ||
            (tol && !toleration_ok(v))) {
            fprintf(stderr, "psgraph launch: %s '%s' is not %s\n", a, v,
                    sel ? "KEY=VALUE (a Kubernetes label)"
                        : "KEY[=VALUE][:NoSchedule|PreferNoSchedule|NoExecute]");
            return 2;
        }
        if ((sel && k->nselectors == K8S_MAX_LIST) || (tol && k->ntolerations == K8S_MAX_LIST)) {
            fprintf(stderr, "psgraph launch: %s: at most %d\n", a, K8S_MAX_LIST);
            return 2;
        }
        if (sel) k->selectors[k->nselectors++] = v;
        if (tol) k->tolerations[k->ntolerations++] = v;
    }
    return 0;
}

/* What the pods could not run as written: a GPU asked for and not used (or used and not
 * asked for), the workers' program a path on this machine, a relative folder to mount.
 * psgraph at any path becomes the image's (said on stderr, into *cmd0). 2 after printing. */
static int k8s_check(k8s_t *k, const char **cmd0) {
    if (!dns_label(k->name) || !dns_label(k->ns)) {
        fprintf(stderr,
                "psgraph launch: --%s '%s' is not a DNS label (a-z, 0-9, '-', at most 40)\n",
                dns_label(k->name) ? "namespace" : "name", dns_label(k->name) ? k->ns : k->name);
        return 2;
    }
    bool gpu = !strcmp(psg_launch_cmd_option(k->cmd, "--device", "cpu"), "gpu");
    if (gpu != (k->gpus > 0)) {
        fprintf(stderr,
                gpu ? "psgraph launch: the workers' command has --device gpu, but no "
                      "--gpus-per-worker G gives their pods a GPU: add it\n"
                    : "psgraph launch: --gpus-per-worker %d asks for GPUs that the workers' "
                      "command does not use: add --device gpu to it, or leave "
                      "--gpus-per-worker out\n",
                k->gpus);
        return 2;
    }
    const char *prog = k->cmd[0], *base = strrchr(prog, '/');
    *cmd0 = prog;
    if (base && !strcmp(base + 1, "psgraph")) {
        *cmd0 = "psgraph";
        fprintf(stderr, "psgraph launch: the pods run the image's psgraph (%s) for %s\n", k->image,
                prog);
    } else if (base && prog[0] != '/') {
        fprintf(stderr,
                "psgraph launch: the workers' program %s is a path on this machine; the pods run "
                "the image %s: name a program on its PATH (psgraph) or an absolute path in it\n",
                prog, k->image);
        return 2;
    }
    const char *dirs[] = {logdir_of(k->cmd), k->data ? data_dir_of(k->cmd) : "/"};
    for (int i = 0; i < 2; i++)
        if (dirs[i][0] != '/') {
            fprintf(stderr,
                    "psgraph launch: the workers' %s %s is relative: the pods mount a volume "
                    "there, give an absolute path\n",
                    i ? "--data-dir" : "--logdir", dirs[i]);
            return 2;
        }
    return 0;
}

int psg_launch_k8s(int argc, char **argv, int ps, int workers, int workers_at_start, bool restart,
                   char **cmd, const char *keys_dir) {
    k8s_t k = {.image = "psgraph:" PSG_VERSION, /* tools/image.sh's tag */
               .ns = "default",
               .name = "psgraph",
               .ps = ps,
               .workers = workers,
               .workers_at_start = workers_at_start,
               .restart = restart,
               .ttl = 3600,
               .deadline = 7 * 86400,
               .cmd = cmd};
    const char *cmd0;
    int bad = k8s_read(argc, argv, &k);
    if (bad || (bad = k8s_check(&k, &cmd0))) return bad;
    char *prog = cmd[0];
    cmd[0] = (char *)cmd0; /* the image's psgraph; put back below */
    /* the keys first: an error about them comes before any output */
    psg_launch_keys_t keys;
    char *secret_yaml = NULL;
    size_t secret_len = 0;
    FILE *m = NULL;
    int rc = 1;
    if (psg_launch_keys_prepare(&keys, keys_dir) == 0) {
        rc =
            (m = open_memstream(&secret_yaml, &secret_len)) && secret(m, &k, keys.dir) == 0 ? 0 : 1;
        if (m && fclose(m) != 0) rc = 1;
        psg_launch_keys_remove(&keys);
    }
    if (rc == 0) rc = write_out(&k, secret_yaml);
    if (secret_yaml) memset(secret_yaml, 0, secret_len);
    free(secret_yaml);
    cmd[0] = prog;
    return rc;
}
