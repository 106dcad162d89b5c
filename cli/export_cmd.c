/* `psgraph export`: a checkpoint's inference graph and weights as an ONNX model
 * (docs/serving.md); and the loading options that export, serve and predict share.
 * Not the writer (serving/onnx_export.c). */
#include "cli/serving_cmds.h"
#include "psgraph/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
    "usage: psgraph export --logdir DIR [--checkpoint FILE] --format onnx --out FILE [options]\n"
    "  --logdir DIR          a training log directory: its newest checkpoint that verifies\n"
    "  --checkpoint FILE     this checkpoint instead (an index .json or a shard .safetensors)\n"
    "  --format onnx         ONNX, opset 17 (the only format)\n"
    "  --out FILE            the model file written\n" PSG_CLI_SERVABLE_HELP;

int psg_cli_servable_option(int argc, char **argv, int *i, psg_servable_options_t *o) {
    const char *a = argv[*i];
    if (!strcmp(a, "--no-ema")) {
        o->no_ema = true;
        return 1;
    }
    bool known = !strcmp(a, "--model") || !strcmp(a, "--image-size") || !strcmp(a, "--threads") ||
                 !strcmp(a, "--lanes") || !strcmp(a, "--spin-us") ||
                 !strcmp(a, "--partition-strategy");
    if (!known) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "psgraph: %s needs a value\n", a);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(a, "--model")) {
        o->model = v;
    } else if (!strcmp(a, "--partition-strategy")) {
        if (strcmp(v, "mod") && strcmp(v, "div")) {
            fprintf(stderr, "psgraph: --partition-strategy '%s' (mod or div)\n", v);
            return -1;
        }
        o->partition_strategy = v;
    } else if (!strcmp(a, "--spin-us")) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 0 || n > 1000000) {
            fprintf(stderr, "psgraph: --spin-us '%s' (0 to 1000000)\n", v);
            return -1;
        }
        o->spin_us = (int)n;
    } else if (!strcmp(a, "--threads") || !strcmp(a, "--lanes")) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 1 || n > 1024) {
            fprintf(stderr, "psgraph: %s '%s' (1 to 1024)\n", a, v);
            return -1;
        }
        *(a[2] == 't' ? &o->threads : &o->lanes) = (int)n;
    } else {
        int h = 0, w = 0, c = 0;
        int k = sscanf(v, "%d,%d,%d", &h, &w, &c);
        if (k < 1 || h < 1 || h > 100000 || (k >= 2 && (w < 1 || w > 100000)) ||
            (k == 3 && (c < 1 || c > 64))) {
            fprintf(stderr, "psgraph: --image-size '%s' (H, H,W or H,W,C)\n", v);
            return -1;
        }
        o->height = h;
        o->width = k >= 2 ? w : h;
        o->channels = k == 3 ? c : 0;
    }
    return 1;
}

int psg_cmd_export(int argc, char **argv) {
    const char *logdir = NULL, *checkpoint = NULL, *format = "onnx", *out = NULL;
    psg_servable_options_t o = {0};
    for (int i = 1; i < argc; i++) {
        int r = psg_cli_servable_option(argc, argv, &i, &o);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        const char **dst = !strcmp(a, "--logdir")       ? &logdir
                           : !strcmp(a, "--checkpoint") ? &checkpoint
                           : !strcmp(a, "--format")     ? &format
                           : !strcmp(a, "--out")        ? &out
                                                        : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "psgraph export: %s '%s'\n%s", dst ? "no value for" : "unknown option",
                    a, usage);
            return 2;
        }
        *dst = argv[++i];
    }
    if ((!logdir && !checkpoint) || !out) {
        fprintf(stderr, "psgraph export: --logdir (or --checkpoint) and --out are required\n%s",
                usage);
        return 2;
    }
    if (strcmp(format, "onnx")) {
        fprintf(stderr, "psgraph export: --format '%s': onnx is the only format\n", format);
        return 2;
    }
    psg_servable_t *s = psg_servable_load(checkpoint ? checkpoint : logdir, &o);
    if (!s) {
        fprintf(stderr, "psgraph export: %s\n", psg_error_message());
        return 1;
    }
    int rc = psg_servable_export_onnx(s, out);
    if (rc < 0) {
        fprintf(stderr, "psgraph export: %s\n", psg_error_message());
    } else {
        printf(
            "{\"exported\":\"%s\",\"model\":\"%s\",\"checkpoint\":\"%s\",\"step\":%lld,\"ema\":%s,\"opset\":%d,"
            "\"inputs\":[",
            out, psg_servable_model(s), psg_servable_checkpoint(s), (long long)psg_servable_step(s),
            psg_servable_uses_ema(s) ? "true" : "false", PSG_ONNX_OPSET);
        for (int i = 0; i < psg_servable_num_inputs(s); i++)
            printf("%s\"%s\"", i ? "," : "", psg_servable_input(s, i)->name);
        printf("],\"outputs\":[");
        for (int i = 0; i < psg_servable_num_outputs(s); i++)
            printf("%s\"%s\"", i ? "," : "", psg_servable_output(s, i)->name);
        printf("]}\n");
    }
    psg_servable_destroy(&s);
    return rc < 0 ? 1 : 0;
}
