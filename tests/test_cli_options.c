/* The commands' option table (cli/option_table.c), row by row, from the table itself: a new
 * row is checked without a change here. Each command that takes a row shows it in its
 * --help (the psgraph binary, argv[1]); a number is refused one step below and above its
 * bounds, naming the flag and the value, and taken at them; every word of a WORDS row is
 * taken and another refused; a list takes its most values and refuses one more; no
 * command sees two rows of one name; the strategies' options are merged in. */
#include "cli/options.h"
#include "psgraph/error.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for any command's struct, zeroed before each parse. */
typedef union {
    psg_train_args_t train;
    psg_bench_opts_t bench;
    psg_launch_args_t launch;
    psg_compare_args_t compare;
    psg_simulate_args_t simulate;
    psg_server_args_t server;
    psg_data_args_t data;
} any_args_t;

static any_args_t args;

static int parse2(psg_cli_cmd_t cmd, const char *name, const char *value) {
    memset(&args, 0, sizeof args);
    char *argv[] = {"psgraph", (char *)name, (char *)value, NULL};
    return psg_cli_parse(cmd, value ? 3 : 2, argv, 1, &args, NULL);
}

/* value refused, the error naming the flag and the value */
static void refused(psg_cli_cmd_t cmd, const char *name, const char *value) {
    int rc = parse2(cmd, name, value);
    const char *m = psg_error_message();
    if (rc != -1 || !strstr(m, name) || !strstr(m, value)) {
        fprintf(stderr, "psgraph %s %s %s: rc %d, '%s'\n", psg_cli_cmd_name(cmd), name, value, rc,
                m);
        CHECK(false);
    }
}

static void taken(psg_cli_cmd_t cmd, const char *name, const char *value) {
    int rc = parse2(cmd, name, value);
    if (rc != 0) {
        fprintf(stderr, "psgraph %s %s %s: rc %d, '%s'\n", psg_cli_cmd_name(cmd), name,
                value ? value : "", rc, psg_error_message());
        CHECK(false);
    }
}

static void check_bounds(const psg_cli_option_t *o, psg_cli_cmd_t cmd) {
    char v[64];
    bool integer = o->kind == PSG_OPT_INT || o->kind == PSG_OPT_BYTES;
    double below =
        integer ? o->lo - fmax(1, fabs(o->lo) * 1e-9) : o->lo - fmax(fabs(o->lo) * 1e-6, 1e-15);
    double above =
        integer ? o->hi + fmax(1, fabs(o->hi) * 1e-9) : o->hi + fmax(fabs(o->hi) * 1e-6, 1e-9);
    snprintf(v, sizeof v, "%.17g", below);
    refused(cmd, o->name, v);
    snprintf(v, sizeof v, "%.17g", above);
    refused(cmd, o->name, v);
    refused(cmd, o->name, "many");
    snprintf(v, sizeof v, "%.17g", o->lo);
    taken(cmd, o->name, v);
    snprintf(v, sizeof v, "%.17g", o->hi);
    taken(cmd, o->name, v);
    if (o->kind == PSG_OPT_INT && o->hi > o->lo) {
        snprintf(v, sizeof v, "%.17g", o->lo + 0.5);
        refused(cmd, o->name, v);
    }
}

static void check_words(const psg_cli_option_t *o, psg_cli_cmd_t cmd) {
    for (int k = 0; o->words[k]; k++) taken(cmd, o->name, o->words[k]);
    refused(cmd, o->name, "no-such-word");
}

/* a list without a check: its most values taken, one more refused naming the flag */
static void check_list(const psg_cli_option_t *o, psg_cli_cmd_t cmd) {
    const psg_cli_use_t *u = &o->use[cmd];
    int max = u->max ? u->max : PSG_CLI_LIST_MAX;
    if (u->ctype == PSG_AT_PAIRS) max /= 2;
    char *argv[2 * PSG_CLI_LIST_MAX + 4] = {"psgraph"};
    int argc = 1;
    for (int k = 0; k <= max; k++) argv[argc++] = (char *)o->name, argv[argc++] = "1";
    memset(&args, 0, sizeof args);
    CHECK(psg_cli_parse(cmd, argc - 2, argv, 1, &args, NULL) == 0);
    memset(&args, 0, sizeof args);
    CHECK(psg_cli_parse(cmd, argc, argv, 1, &args, NULL) == -1);
    CHECK_ERROR_HAS(o->name);
}

/* `psgraph CMD --help` of the binary */
static char *help_of(const char *psgraph, psg_cli_cmd_t cmd) {
    char line[4200];
    snprintf(line, sizeof line, "'%s' %s --help 2>&1", psgraph, psg_cli_cmd_name(cmd));
    FILE *p = popen(line, "r");
    CHECK(p != NULL);
    size_t cap = 1 << 16, len = 0, n;
    char *text = calloc(cap, 1);
    while (p && text && (n = fread(text + len, 1, cap - len - 1, p)) > 0) len += n;
    if (p) CHECK(pclose(p) == 0);
    return text;
}

int main(int argc, char **argv) {
    CHECK(argc == 2); /* the psgraph binary */
    int n;
    const psg_cli_option_t *rows = psg_cli_options(&n);
    CHECK(n > 50);
    char *help[PSG_CLI_NUM_CMDS];
    for (int c = 0; c < PSG_CLI_NUM_CMDS; c++) help[c] = help_of(argv[1], (psg_cli_cmd_t)c);
    for (int i = 0; i < n; i++) {
        const psg_cli_option_t *o = &rows[i];
        CHECK(!strncmp(o->name, "--", 2));
        for (int c = 0; c < PSG_CLI_NUM_CMDS; c++) {
            psg_cli_cmd_t cmd = (psg_cli_cmd_t)c;
            if (!o->use[c].at) continue;
            for (int j = 0; j < n; j++) /* one row a name for each command */
                CHECK(j == i || !rows[j].use[c].at || strcmp(rows[j].name, o->name));
            if (!help[c] || !strstr(help[c], o->name)) {
                fprintf(stderr, "psgraph %s --help does not show %s\n", psg_cli_cmd_name(cmd),
                        o->name);
                CHECK(false);
            }
            switch (o->kind) {
            case PSG_OPT_INT:
            case PSG_OPT_REAL:
            case PSG_OPT_BYTES: check_bounds(o, cmd); break;
            case PSG_OPT_WORDS: check_words(o, cmd); break;
            case PSG_OPT_FLAG: taken(cmd, o->name, NULL); break;
            case PSG_OPT_STRING:
                if (o->use[c].ctype == PSG_AT_LIST || o->use[c].ctype == PSG_AT_PAIRS) {
                    if (!o->check) check_list(o, cmd);
                } else if (!o->check) {
                    taken(cmd, o->name, "any text");
                }
                break;
            }
        }
    }
    /* the strategies' options (sync/strategies.c) are train's and bench's too */
    taken(PSG_CLI_TRAIN, "--staleness", "3");
    CHECK(args.train.c.sync_opt.staleness == 3);
    refused(PSG_CLI_BENCH, "--local-steps", "0");
    CHECK(parse2(PSG_CLI_SERVER, "--staleness", "3") == -2);
    CHECK_ERROR_HAS("unknown option '--staleness'");
    /* where a value goes: seconds to ms, the word's index */
    taken(PSG_CLI_TRAIN, "--step-timeout", "2.5");
    CHECK(args.train.c.step_timeout_ms == 2500);
    taken(PSG_CLI_LAUNCH, "--restart", "on-failure");
    CHECK(args.launch.l.restart);
    taken(PSG_CLI_SERVER, "--memory-limit", "3M");
    CHECK(args.server.lim.memory_bytes == 3 << 20);
    CHECK(parse2(PSG_CLI_TRAIN, "--steps", NULL) == -2);
    CHECK_ERROR_HAS("missing value for '--steps'");
    /* an option of one model's: taken with it, refused with another, naming both; a flag's
     * value is not read as a flag, nor is anything after "--" */
    int of_one = 0, of_data = 0, of_either = 0;
    for (int i = 0; i < n; i++) {
        const char *m = rows[i].use[PSG_CLI_TRAIN].models, *d = rows[i].use[PSG_CLI_TRAIN].data;
        if (!m && !d) continue;
        char *argv[] = {"psgraph", (char *)rows[i].name, "1", NULL};
        int argc = rows[i].kind == PSG_OPT_FLAG ? 2 : 3;
        if (m) CHECK(psg_cli_check_scope(PSG_CLI_TRAIN, argc, argv, 1, m, NULL) == 0);
        if (d) CHECK(psg_cli_check_scope(PSG_CLI_TRAIN, argc, argv, 1, "mlp", d) == 0);
        CHECK(psg_cli_check_scope(PSG_CLI_TRAIN, argc, argv, 1, "mlp", NULL) < 0);
        CHECK_ERROR_HAS(rows[i].name);
        CHECK_ERROR_HAS(m ? "--model mlp" : "--data fashion-mnist");
        CHECK_ERROR_HAS(m ? m : d);
        if (d) CHECK_ERROR_HAS(d);
        of_one += m && !d, of_data += d && !m, of_either += m && d;
    }
    CHECK(of_one >= 13);   /* inception3's recipe and batch norm, wide-deep's table */
    CHECK(of_data >= 6);   /* the ImageNet reader's */
    CHECK(of_either == 2); /* --image-size, --classes */
    /* the data named, or the model's default: inception3's synthetic images are sized */
    char *sized[] = {"psgraph", "--classes", "5", NULL};
    CHECK(psg_cli_check_scope(PSG_CLI_TRAIN, 3, sized, 1, "inception3", NULL) == 0);
    CHECK(psg_cli_check_scope(PSG_CLI_TRAIN, 3, sized, 1, "cnn", "synthetic") < 0);
    CHECK_ERROR_HAS("--classes is an option of --model inception3 or --data imagenet, not of "
                    "--model cnn --data synthetic");
    char *valued[] = {"psgraph", "--logdir", "--label-smoothing", "--", "--aux", NULL};
    CHECK(psg_cli_check_scope(PSG_CLI_TRAIN, 5, valued, 1, "mlp", NULL) == 0);
    for (int c = 0; c < PSG_CLI_NUM_CMDS; c++) free(help[c]);
    return psg_test_summary();
}
