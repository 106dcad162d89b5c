/* `psgraph serve --k8s`: the model server as Kubernetes objects, ready for `kubectl
 * apply -f`: a Deployment of R replicas of `psgraph serve` (each reading the model's log
 * directory from a volume, read-only, with a readiness probe on the model's status) and
 * a Service in front of them on TensorFlow Serving's REST port. Writes YAML only. */
#include "cli/serving_cmds.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define K8S_REST_PORT 8501

/* s as a YAML double-quoted scalar. */
static void q(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static bool dns_label(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 40 || s[0] == '-' || s[n - 1] == '-') return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

typedef struct {
    const char *image, *ns, *name, *dir, *volume, *out, *cpu, *memory;
    int replicas;
    char **pass; /* the other options, for the container */
    int n_pass;
} serve_k8s_t;

static void write_yaml(FILE *f, const serve_k8s_t *k) {
    fprintf(f,
            "# psgraph serve as Kubernetes objects (docs/serving.md): kubectl apply -f this file\n"
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\n"
            "  labels:\n    app.kubernetes.io/name: psgraph-serve\n    psgraph/model: %s\n"
            "spec:\n  selector:\n    psgraph/model: %s\n"
            "  ports:\n    - name: http\n      port: %d\n      targetPort: %d\n",
            k->name, k->ns, k->name, k->name, K8S_REST_PORT, K8S_REST_PORT);
    fprintf(
        f,
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: %s\n  namespace: %s\n"
        "  labels:\n    app.kubernetes.io/name: psgraph-serve\n    psgraph/model: %s\n"
        "spec:\n  replicas: %d\n  selector:\n    matchLabels:\n      psgraph/model: %s\n"
        "  template:\n    metadata:\n      labels:\n        app.kubernetes.io/name: psgraph-serve\n"
        "        psgraph/model: %s\n    spec:\n"
        /* the image's user (tools/image.sh: psgraph, 1000), as the training pods */
        "      securityContext:\n        runAsNonRoot: true\n        runAsUser: 1000\n"
        "        runAsGroup: 1000\n        fsGroup: 1000\n"
        "      containers:\n        - name: serve\n          image: ",
        k->name, k->ns, k->name, k->replicas, k->name, k->name);
    q(f, k->image);
    /* plain HTTP on the pod's address: inside the cluster, behind the Service (TLS ends at
     * an ingress; or add --tls-key/--tls-cert from a Secret) */
    fprintf(f, "\n          command: [\"psgraph\", \"serve\", \"--model-dir\", ");
    q(f, k->dir);
    fprintf(f, ", \"--name\", ");
    q(f, k->name);
    fprintf(f, ", \"--listen\", \"0.0.0.0\", \"--insecure\", \"--port\", \"%d\"", K8S_REST_PORT);
    for (int i = 0; i < k->n_pass; i++) fputs(", ", f), q(f, k->pass[i]);
    fprintf(f, "]\n          ports:\n            - name: http\n              containerPort: %d\n",
            K8S_REST_PORT);
    fprintf(f,
            "          readinessProbe:\n            httpGet:\n              path: /v1/models/%s\n"
            "              port: %d\n            periodSeconds: 5\n",
            k->name, K8S_REST_PORT);
    /* requests always: Burstable by default, never BestEffort (the first evicted) */
    fprintf(f, "          resources:\n            requests:\n              cpu: ");
    q(f, k->cpu ? k->cpu : "1");
    fprintf(f, "\n              memory: ");
    q(f, k->memory ? k->memory : "1Gi");
    fputc('\n', f);
    fprintf(
        f, "          volumeMounts:\n            - name: models\n              mountPath: /models\n"
           "              readOnly: true\n      volumes:\n        - name: models\n");
    if (k->volume && k->volume[0] == '/') /* a folder of the node */
        fprintf(f, "          hostPath:\n            path: "), q(f, k->volume),
            fprintf(f, "\n            type: Directory\n");
    else if (k->volume)
        fprintf(f, "          persistentVolumeClaim:\n            claimName: "), q(f, k->volume),
            fputc('\n', f);
    else
        fprintf(f, "          emptyDir: {}\n");
}

int psg_serve_k8s(int argc, char **argv) {
    serve_k8s_t k = {.image = "psgraph:" PSG_VERSION,
                     /* tools/image.sh's tag */ .ns = "default",
                     .name = "psgraph-serve",
                     .replicas = 1};
    char **pass = calloc((size_t)argc + 1, sizeof *pass);
    if (!pass) return 1;
    k.pass = pass;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **dst = !strcmp(a, "--image")          ? &k.image
                           : !strcmp(a, "--namespace")    ? &k.ns
                           : !strcmp(a, "--name")         ? &k.name
                           : !strcmp(a, "--model-dir")    ? &k.dir
                           : !strcmp(a, "--model-volume") ? &k.volume
                           : !strcmp(a, "--out")          ? &k.out
                           : !strcmp(a, "--cpu")          ? &k.cpu
                           : !strcmp(a, "--memory")       ? &k.memory
                                                          : NULL;
        if (!strcmp(a, "--k8s")) continue;
        if (!strcmp(a, "--replicas") && v) {
            k.replicas = atoi(v);
            i++;
        } else if (!strcmp(a, "--listen") || !strcmp(a, "--port")) {
            i++; /* the pod's: 0.0.0.0:8501 */
        } else if (dst && v) {
            *dst = v;
            i++;
        } else {
            pass[k.n_pass++] = argv[i];
        }
    }
    int rc = 0;
    if (!dns_label(k.name) || !dns_label(k.ns) || k.replicas < 1 || k.replicas > 1000) {
        fprintf(
            stderr,
            "psgraph serve --k8s: --name and --namespace must be DNS labels (a-z, 0-9, '-', at most 40), "
            "--replicas 1 to 1000\n");
        rc = 2;
    } else if (!k.dir || k.dir[0] != '/') {
        fprintf(stderr,
                "psgraph serve --k8s: --model-dir: the log directory's absolute path in the pod "
                "(under /models, where --model-volume is mounted)\n");
        rc = 2;
    } else {
        char path[4096];
        FILE *f = stdout;
        if (k.out) {
            snprintf(path, sizeof path, "%s/%s.yaml", k.out, k.name);
            /* the folder made when missing, as launch --k8s --out does */
            if ((mkdir(k.out, 0755) < 0 && errno != EEXIST) || !(f = fopen(path, "w"))) {
                fprintf(stderr, "psgraph serve --k8s: cannot write %s: %s\n", path,
                        strerror(errno));
                f = NULL;
                rc = 1;
            }
        }
        if (f) {
            write_yaml(f, &k);
            if (k.out && fclose(f) != 0) rc = 1;
            if (k.out && rc == 0)
                printf("psgraph serve: %s written (kubectl apply -f %s)\n", path, path);
        }
    }
    free(pass);
    return rc;
}
