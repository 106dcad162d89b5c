/* The serving commands of the psgraph binary (docs/serving.md): export, serve, predict,
 * and the options they share for loading a servable (psgraph/servable.h). */
#ifndef PSGRAPH_CLI_SERVING_CMDS_H
#define PSGRAPH_CLI_SERVING_CMDS_H

#include "psgraph/servable.h"

int psg_cmd_export(int argc, char **argv);
int psg_cmd_serve(int argc, char **argv);
int psg_cmd_predict(int argc, char **argv);
/* `psgraph serve --k8s ...`: a Deployment and a Service as YAML (cli/serve_k8s.c). */
int psg_serve_k8s(int argc, char **argv);

/* Reads a loading option at argv[*i] (--model, --image-size H[,W[,C]], --threads,
 * --partition-strategy, --no-ema) into o, advancing *i past its value: 1 when it was one,
 * 0 when argv[*i] is another option, -1 after printing what is wrong with it. */
int psg_cli_servable_option(int argc, char **argv, int *i, psg_servable_options_t *o);
/* The help lines of those options. */
/* Serve and predict poll 50 us for the next kernel's share during a batch, as ONNX Runtime's
 * intra-op threads spin by default: on an idle machine it saves a wake-up a kernel
 * (docs/serving.md, "Compute threads"). */
#define PSG_CLI_SPIN_US_DEFAULT 50

#define PSG_CLI_SERVABLE_HELP                                                                      \
    "  --model NAME          mlp, cnn, inception3, wide-deep (default: from the checkpoint)\n"     \
    "  --image-size H[,W[,C]] the input images (default: from the weights; inception3 299)\n"      \
    "  --threads N           compute threads (default 1)\n"                                        \
    "  --lanes N             a batch's rows cut over N one-thread plans side by side\n"            \
    "                        (default 1: one plan, its kernels over the threads)\n"                \
    "  --spin-us US          an idle compute thread polls this long for work before it\n"          \
    "                        sleeps, during a batch only (default 50; 0: it sleeps at once)\n"     \
    "  --partition-strategy mod|div  how a row-sharded table was split (default mod)\n"            \
    "  --no-ema              the raw weights even where moving averages are kept\n"

#endif
