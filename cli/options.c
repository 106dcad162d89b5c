/* The parser and the --help printer of the commands' options, both read from the one
 * table (cli/option_table.c); train and bench also take the strategies' options
 * (sync/strategies.c, psg_sync_option_parse). Not the table, nor a command's checks
 * across its options. */
#include "cli/options.h"
#include "psgraph/error.h"
#include "psgraph/sync_replicas.h"
#include "psgraph/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const cmd_names[PSG_CLI_NUM_CMDS] = {
    [PSG_CLI_TRAIN] = "train",       [PSG_CLI_BENCH] = "bench inception3",
    [PSG_CLI_LAUNCH] = "launch",     [PSG_CLI_COMPARE] = "compare",
    [PSG_CLI_SIMULATE] = "simulate", [PSG_CLI_SERVER] = "server",
    [PSG_CLI_DATA] = "data",
};

/* where a command keeps the strategies' options (+ 1; 0: it takes none) */
static const size_t sync_opt_at[PSG_CLI_NUM_CMDS] = {
    [PSG_CLI_TRAIN] = offsetof(psg_train_args_t, c.sync_opt) + 1,
    [PSG_CLI_BENCH] = offsetof(psg_bench_opts_t, c.sync_opt) + 1,
};

const char *psg_cli_cmd_name(psg_cli_cmd_t cmd) {
    return cmd_names[cmd];
}

/* The row of flag name that cmd takes, or NULL. */
static const psg_cli_option_t *find(psg_cli_cmd_t cmd, const char *name) {
    int n;
    const psg_cli_option_t *rows = psg_cli_options(&n);
    for (int i = 0; i < n; i++)
        if (rows[i].use[cmd].at && !strcmp(rows[i].name, name)) return &rows[i];
    return NULL;
}

/* A number of row o (INT, REAL, BYTES) in its bounds; -1 with the error naming the flag. */
static int number(const psg_cli_option_t *o, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    bool ok = !errno && end != s;
    if (ok && o->kind == PSG_OPT_BYTES && *end) {
        double unit = strchr("Kk", *end)   ? 1024.0
                      : strchr("Mm", *end) ? 1048576.0
                      : strchr("Gg", *end) ? 1073741824.0
                                           : 0;
        v *= unit;
        ok = unit > 0 && !end[1];
    } else {
        ok = ok && !*end;
    }
    if (o->kind == PSG_OPT_BYTES && !(ok && v >= o->lo && v <= o->hi))
        return psg_error_set("%s: '%s' is not a size in bytes (e.g. 512M, 4G)", o->name, s);
    if (!ok)
        return psg_error_set("%s: '%s' is not a number in [%.15g, %.15g]", o->name, s, o->lo,
                             o->hi);
    if (o->kind == PSG_OPT_INT && !(v >= o->lo && v <= o->hi && v == floor(v)))
        return psg_error_set("%s: '%s' is not an integer in [%.15g, %.15g]", o->name, s, o->lo,
                             o->hi);
    if (!(v >= o->lo && v <= o->hi))
        return psg_error_set("%s: '%s' is not a number in [%.15g, %.15g]", o->name, s, o->lo,
                             o->hi);
    *out = v;
    return 0;
}

/* WORDS: the index of v in o->words; -1 with the error listing them. */
static int word(const psg_cli_option_t *o, const char *v, double *out) {
    int n = 0;
    for (; o->words[n]; n++)
        if (!strcmp(o->words[n], v)) {
            *out = n;
            return 0;
        }
    char list[256];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                !i           ? ""
                                : i == n - 1 ? " or "
                                             : ", ",
                                o->words[i]);
    return psg_error_set("%s: '%s' is not %s", o->name, v, list);
}

static int append(const psg_cli_option_t *o, const psg_cli_use_t *u, psg_cli_list_t *l,
                  const char *v) {
    int max = u->max ? u->max : PSG_CLI_LIST_MAX;
    int need = u->ctype == PSG_AT_PAIRS ? 2 : 1;
    if (l->n + need > max)
        return psg_error_set("%s: at most %d", o->name, u->ctype == PSG_AT_PAIRS ? max / 2 : max);
    if (u->ctype == PSG_AT_PAIRS) l->v[l->n++] = o->name;
    l->v[l->n++] = v;
    l->v[l->n] = NULL;
    return 0;
}

/* Checks value v of row o and stores it into cmd's field. */
static int store(const psg_cli_option_t *o, psg_cli_cmd_t cmd, const char *v, void *dst) {
    const psg_cli_use_t *u = &o->use[cmd];
    char *field = (char *)dst + u->at - 1;
    double x = 1;
    int rc = 0;
    if (o->kind == PSG_OPT_STRING && o->check && o->check(v) < 0) {
        size_t n = strlen(o->name); /* the check's error may name the flag already */
        return strncmp(psg_error_message(), o->name, n) ? psg_error_wrap("%s", o->name) : -1;
    }
    if (o->kind == PSG_OPT_WORDS)
        rc = word(o, v, &x);
    else if (o->kind == PSG_OPT_INT || o->kind == PSG_OPT_REAL || o->kind == PSG_OPT_BYTES)
        rc = number(o, v, &x);
    if (rc < 0) return -1;
    if (o->scale) x *= o->scale;
    switch (u->ctype) {
    case PSG_AT_BOOL: *(bool *)field = x != 0; break;
    case PSG_AT_INT: *(int *)field = (int)x; break;
    case PSG_AT_I64: *(int64_t *)field = (int64_t)x; break;
    case PSG_AT_U64: *(uint64_t *)field = (uint64_t)x; break;
    case PSG_AT_DOUBLE: *(double *)field = x; break;
    case PSG_AT_STR: *(const char **)field = v; break;
    case PSG_AT_LIST:
    case PSG_AT_PAIRS: return append(o, u, (psg_cli_list_t *)field, v);
    }
    return 0;
}

int psg_cli_parse_one(psg_cli_cmd_t cmd, const char *name, const char *value, void *dst) {
    const psg_cli_option_t *o = find(cmd, name);
    if (o) return store(o, cmd, value, dst) < 0 ? -1 : 1;
    if (!sync_opt_at[cmd]) return 0;
    return psg_sync_option_parse((psg_sync_options_t *)((char *)dst + sync_opt_at[cmd] - 1), name,
                                 value);
}

int psg_cli_parse(psg_cli_cmd_t cmd, int argc, char **argv, int first, void *dst, int *rest) {
    if (rest) *rest = argc;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (rest && !strcmp(a, "--")) {
            *rest = i + 1;
            return 0;
        }
        const psg_cli_option_t *o = find(cmd, a);
        if (o && o->kind == PSG_OPT_FLAG) {
            store(o, cmd, a, dst);
            continue;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            psg_error_set("%s '%s'", i + 1 >= argc ? "missing value for" : "unexpected argument",
                          a);
            return -2;
        }
        int rc = psg_cli_parse_one(cmd, a, argv[++i], dst);
        if (rc < 0) return -1;
        if (rc == 0) {
            psg_error_set("unknown option '%s'", a);
            return -2;
        }
    }
    return 0;
}

int psg_cli_check_scope(psg_cli_cmd_t cmd, int argc, char **argv, int first, const char *model,
                        const char *data) {
    if (!data) data = psg_train_default_data(model);
    for (int i = first; i < argc && strcmp(argv[i], "--"); i++) {
        const psg_cli_option_t *o = find(cmd, argv[i]);
        if (!o) continue;
        const char *m = o->use[cmd].models, *d = o->use[cmd].data;
        bool taken = (!m && !d) || (m && !strcmp(m, model)) || (d && !strcmp(d, data));
        if (!taken && m && d)
            return psg_error_set("%s is an option of --model %s or --data %s, not of --model %s "
                                 "--data %s",
                                 argv[i], m, d, model, data);
        if (!taken && m)
            return psg_error_set("%s is an option of --model %s, not of --model %s", argv[i], m,
                                 model);
        if (!taken)
            return psg_error_set("%s is an option of --data %s, not of --data %s", argv[i], d,
                                 data);
        if (o->kind != PSG_OPT_FLAG) i++;
    }
    return 0;
}

void psg_cli_print_help(psg_cli_cmd_t cmd, FILE *f, int width) {
    int n;
    const psg_cli_option_t *rows = psg_cli_options(&n);
    for (int i = 0; i < n; i++) {
        const psg_cli_use_t *u = &rows[i].use[cmd];
        if (!u->at) continue;
        if (u->heading) fprintf(f, "%s\n", u->heading);
        if (!u->label) continue;
        if (!u->help || !*u->help) {
            fprintf(f, "  %s\n", u->label);
            continue;
        }
        if ((int)strlen(u->label) < width)
            fprintf(f, "  %-*s ", width, u->label);
        else
            fprintf(f, "  %s  ", u->label);
        for (const char *p = u->help;;) {
            const char *nl = strchr(p, '\n');
            fprintf(f, "%.*s\n", nl ? (int)(nl - p) : (int)strlen(p), p);
            if (!nl) break;
            p = nl + 1;
            fprintf(f, "%*s", width + 3, "");
        }
    }
}

int psg_cli_counts(const char *s, int *v, int cap, int lo, int hi) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < lo || x > hi || n == cap) return -1;
        v[n++] = (int)x;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return n;
}

int psg_cli_workers_range(const char *s, int *lo, int *hi) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end != s && *end == ':') {
        const char *p = end + 1;
        b = strtol(p, &end, 10);
        if (end == p) b = 0;
    }
    if (end == s || *end || a < 1 || b < a || b > 128)
        return psg_error_set("'%s': want W or MIN:MAX workers (1 <= MIN <= MAX <= 128)", s);
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

void psg_cli_list_drop(psg_cli_list_t *l, const char *word) {
    int k = 0;
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i], word)) l->v[k++] = l->v[i];
    l->n = k;
    l->v[k] = NULL;
}
