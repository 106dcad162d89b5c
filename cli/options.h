/* The one table of the options of psgraph's commands (cli/options.c): each flag's name,
 * value kind, bounds, and for each command that takes it where the value goes and its
 * --help line. Parsing, --help and the errors come from it; the strategies' own options
 * stay in theirs (sync/strategies.c) and are merged in for train and bench. Not the
 * commands themselves (cli/train_cmd.c, ...), nor the checks across options. */
#ifndef PSGRAPH_CLI_OPTIONS_H
#define PSGRAPH_CLI_OPTIONS_H

#include "cli/bench.h"
#include "cli/commands.h"
#include "psgraph/simulate.h"
#include "psgraph/task_server.h"
#include "psgraph/trainer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    PSG_CLI_TRAIN,
    PSG_CLI_BENCH,
    PSG_CLI_LAUNCH,
    PSG_CLI_COMPARE,
    PSG_CLI_SIMULATE,
    PSG_CLI_SERVER,
    PSG_CLI_DATA,
    PSG_CLI_NUM_CMDS
} psg_cli_cmd_t;

typedef enum {
    PSG_OPT_FLAG,   /* no value: sets a bool */
    PSG_OPT_STRING, /* any text (row.check may refuse it) */
    PSG_OPT_INT,    /* an integer in [lo, hi] */
    PSG_OPT_REAL,   /* a number in [lo, hi] */
    PSG_OPT_BYTES,  /* bytes in [lo, hi], with an optional K, M or G (powers of 1024) */
    PSG_OPT_WORDS,  /* one of row.words: stored as its index, or as the word */
} psg_opt_kind_t;

/* The C type of a command's field (found by _Generic in cli/options.c). */
typedef enum {
    PSG_AT_BOOL,
    PSG_AT_INT,
    PSG_AT_I64,
    PSG_AT_U64,
    PSG_AT_DOUBLE,
    PSG_AT_STR,   /* const char *: the value as given */
    PSG_AT_LIST,  /* psg_cli_list_t: the value appended */
    PSG_AT_PAIRS, /* psg_cli_list_t: the flag and the value appended */
} psg_opt_ctype_t;

/* One command's use of a flag: where its value goes and its --help line. */
typedef struct {
    size_t at; /* offsetof its field in the command's struct, + 1; 0: not taken */
    psg_opt_ctype_t ctype;
    const char *label;   /* --help's left column ("--batch B"); NULL: in a usage line */
    const char *help;    /* its text; a '\n' starts a line at the text's column */
    const char *heading; /* NULL, or a line printed before its own */
    int max;             /* PSG_AT_LIST, _PAIRS: values at most (0: PSG_CLI_LIST_MAX) */
    const char *models;  /* train: the --model it is an option of ("inception3"); NULL: any */
    const char *data;    /* train: the --data it is an option of ("imagenet"); NULL: any; with
                            models: an option of either */
} psg_cli_use_t;

/* A row: one flag, the same bounds for every command that takes it. */
typedef struct {
    const char *name; /* "--batch" */
    psg_opt_kind_t kind;
    double lo, hi;               /* INT, REAL, BYTES: the range; LIST: unused */
    const char *const *words;    /* WORDS: NULL-terminated */
    double scale;                /* the field gets value x scale (0: 1; seconds to ms) */
    int (*check)(const char *v); /* STRING: -1 with the error (without the flag's name) */
    psg_cli_use_t use[PSG_CLI_NUM_CMDS];
} psg_cli_option_t;

/* The command's values, each in its struct (the table's offsets are into these). */
typedef struct {
    psg_train_config_t c;
    psg_cli_list_t stragglers;
    const char *trace_steps; /* parsed into c.trace_first, c.trace_last */
    int overlap;             /* --overlap: -1 not given, 0 on, 1 off */
    bool print_model;        /* inception3: its size, then exit */
    bool print_keras_names;  /* inception3: its slim and Keras names, then exit */
} psg_train_args_t;

typedef struct {
    psg_launch_t l;
    const char *transport, *hosts, *hosts_file, *host;
    const char *workers; /* --workers W or MIN:MAX */
    bool ssh, k8s;
    psg_cli_list_t ssh_options;
    psg_cli_list_t k8s_args; /* --image IMG --namespace NS ... pairs (cli/launch_k8s.c) */
} psg_launch_args_t;

/* psgraph compare's (cli/compare_cmd.c) */
#define PSG_COMPARE_MAX_EXTRA 64
typedef struct {
    psg_cli_list_t strategies; /* --strategy, or --variant, its older name (cli/option_table.c) */
    /* --launch-arg: more psgraph launch options (--ssh --hosts-file F: the cluster on other
     * hosts, e.g. emulated ones with capped links, bench/compare_hosts.sh) */
    psg_cli_list_t launch;
    const char *model, *data, *straggler, *outdir, *png, *epochs, *eval_every, *seed, *batch;
    const char *seeds;  /* --seeds S1,S2,...: repeat k's seed */
    const char *script; /* --script FILE.py: a Python script as every worker, not psgraph train */
    const char *python; /* --python P: its interpreter (default python3) */
    int ps, workers, repeats;
    double target, load_margin;
    /* after --: more train options for every strategy (with --script: the script's args) */
    const char *extra[PSG_COMPARE_MAX_EXTRA];
    int n_extra;
    char launch_text[1024]; /* the --launch-arg values, joined, for the JSON lines */
    long long seed_of[64];  /* each repeat's seed, from --seeds or --seed */
} psg_compare_args_t;

typedef struct {
    psg_sim_config_t c;
    int tail; /* psg_sim_tail_t */
    const char *samples, *workers, *backups;
    const char *trace; /* the overlap model, calibrated from this trace */
    bool overlap;      /* the overlap model on the serial model's inputs */
    double cpu_speed;  /* --cpu-speed: every CPU time divided by it (psg_sim_scale_cpu); 1 */
} psg_simulate_args_t;

typedef struct {
    const char *cluster_file, *job, *listen, *task_name, *keys_dir;
    bool insecure;
    int task, threads, expect, ps_replicas;
    double idle, recv_timeout, max_wait, peer_timeout, graph_grace;
    psg_cli_list_t logdirs;
    psg_task_limits_t lim;
} psg_server_args_t;

/* psgraph data's (cli/data_cmd.c): ctr's and imagenet's */
typedef struct {
    const char *out;
    int64_t rows;
    uint64_t seed;
    int classes, train, validation, image_size, shards;
} psg_data_args_t;

/* The table's rows (n of them) and a command's name ("train"). */
const psg_cli_option_t *psg_cli_options(int *n);
const char *psg_cli_cmd_name(psg_cli_cmd_t cmd);

/* Parses argv[*i..] for command cmd into dst (the command's struct above, or
 * psg_bench_opts_t, with its defaults set). With rest non-NULL, "--" ends the options and
 * *rest gets the index after it (argc when absent); else "--" is an unexpected argument.
 * Returns 0, 1 for --help or -h (nothing printed), -1 with the error naming the flag and
 * the value, -2 for an unknown option, a missing value or a stray argument (the caller
 * prints the usage too). */
int psg_cli_parse(psg_cli_cmd_t cmd, int argc, char **argv, int first, void *dst, int *rest);
/* One flag's value through the table into dst (as psg_cli_parse); 0 when cmd does not
 * take name. */
int psg_cli_parse_one(psg_cli_cmd_t cmd, const char *name, const char *value, void *dst);
/* A flag of argv (from first, up to a "--") that cmd's table gives to other models than
 * `model` or to other data sets than `data` (NULL: the model's, psg_train_default_data):
 * -1 with the error naming the flag, what it is an option of and what this run is; else 0.
 * A flag that would do nothing is refused, not ignored (psgraph train --model mlp
 * --label-smoothing, --data fashion-mnist --classes 5). */
int psg_cli_check_scope(psg_cli_cmd_t cmd, int argc, char **argv, int first, const char *model,
                        const char *data);
/* --help's lines of cmd's options, in the table's order, the text at column width + 3. */
void psg_cli_print_help(psg_cli_cmd_t cmd, FILE *f, int width);
/* "1,2,50" into v (at most cap counts, each in [lo, hi]); the count, or -1. */
#define PSG_CLI_COUNTS_MAX 64
int psg_cli_counts(const char *s, int *v, int cap, int lo, int hi);
/* launch's --workers: "W" (*lo = *hi = W) or "MIN:MAX" (1 <= MIN <= MAX), each at most 128;
 * 0, or -1 with the error. */
int psg_cli_workers_range(const char *s, int *lo, int *hi);
/* Removes the values equal to word from *l. */
void psg_cli_list_drop(psg_cli_list_t *l, const char *word);

#endif
