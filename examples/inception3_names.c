/* Inception-v3's variables by TF-slim's names and by Keras's (keras.applications.
 * InceptionV3: layers conv2d, conv2d_1, ... and batch_normalization, ... numbered in the
 * order they are made, and the top's "predictions"), both ways: the pairs come from the
 * order psgraph builds the model in, which is Keras's (stem, Mixed_5b ... Mixed_7c, each
 * branch's convolutions in turn). Not a reader or writer of weights (worker/init_from.c). */
#include "psgraph/error.h"
#include "psgraph/inception3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ends_with(const char *s, const char *end) {
    size_t n = strlen(s), k = strlen(end);
    return n >= k && !strcmp(s + n - k, end);
}

/* Keras's name of the k-th layer of a kind ("conv2d", then "conv2d_1", ...). */
static void numbered(char *buf, size_t size, const char *kind, int k, const char *var) {
    if (k == 0)
        snprintf(buf, size, "%s/%s", kind, var);
    else
        snprintf(buf, size, "%s_%d/%s", kind, k, var);
}

int psg_inception3_keras_names(const psg_inception3_config_t *cfg, psg_inception3_name_t **pairs) {
    *pairs = NULL;
    psg_inception3_config_t c = *cfg;
    c.is_training = true; /* every variable, none read from a shadow */
    c.read_ema = false;
    psg_graph_t *g = psg_graph_new();
    psg_inception3_t m;
    if (!g || psg_inception3_build(g, &c, &m) < 0) {
        psg_graph_destroy(&g);
        return -1;
    }
    int nv;
    const int *vars = psg_graph_collection(g, "variables", &nv);
    psg_inception3_name_t *p = calloc((size_t)(nv > 0 ? nv : 1), sizeof *p);
    if (!p) {
        psg_graph_destroy(&g);
        return psg_error_set("out of memory");
    }
    int n = 0, conv = -1;
    char layer[160] = ""; /* the scope of the last convolution */
    for (int i = 0; i < nv; i++) {
        const char *name = psg_node_name(psg_graph_node(g, vars[i]));
        if (!name || strncmp(name, "InceptionV3/", 12)) continue;
        psg_inception3_name_t *e = &p[n++];
        snprintf(e->slim, sizeof e->slim, "%s", name);
        e->logits = strstr(name, "/Logits/") != NULL;
        if (strstr(name, "/AuxLogits/")) continue; /* Keras's model has no auxiliary head */
        if (e->logits) {
            snprintf(e->keras, sizeof e->keras, "predictions/%s",
                     ends_with(name, "/weights") ? "kernel" : "bias");
        } else if (ends_with(name, "/weights")) {
            numbered(e->keras, sizeof e->keras, "conv2d", ++conv, "kernel");
            snprintf(layer, sizeof layer, "%.*s", (int)(strlen(name) - 8), name);
        } else {
            const char *leaf = strrchr(name, '/') + 1; /* beta, moving_mean, moving_variance */
            if (strncmp(name, layer, strlen(layer)) || !strstr(name, "/BatchNorm/")) {
                psg_graph_destroy(&g);
                free(p);
                return psg_error_set("inception3 names: %s follows no convolution", name);
            }
            numbered(e->keras, sizeof e->keras, "batch_normalization", conv, leaf);
        }
    }
    psg_graph_destroy(&g);
    *pairs = p;
    return n;
}
