/* The table of strategies and the table of their options: the one place the
 * names live (--sync NAME, --help, psgraph compare, launch's lost workers).
 * Adding a strategy: its file (sync/strategy_<name>.c, defining
 * psg_sync_strategy_<name>) and one row, X(<name>), in BUILT_IN (and the file's
 * line in sync/meson.build); a program's own goes in through
 * psg_sync_strategy_register. A new option: one line in `options`. Not the
 * strategies. */
#include "psgraph/error.h"
#include "sync/strategy.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The built-in strategies, in --help's order: a row declares the strategy its file
 * defines and lists it. */
#define BUILT_IN(X) X(sync) X(async) X(ssp) X(local) X(easgd) X(diloco) X(allreduce)

#define DECLARE(name) extern const psg_sync_strategy_t psg_sync_strategy_##name;
BUILT_IN(DECLARE)
#define ROW(name) &psg_sync_strategy_##name,
static const psg_sync_strategy_t *const built_in[] = {BUILT_IN(ROW)};
#define NUM_BUILT_IN ((int)(sizeof built_in / sizeof built_in[0]))

/* The strategies psg_sync_strategy_register added, after the built-in ones: written
 * under the lock, published by num_added. */
static const psg_sync_strategy_t *added[PSG_SYNC_MAX_ADDED];
static atomic_int num_added;
static pthread_mutex_t added_lock = PTHREAD_MUTEX_INITIALIZER;

/* offset PSG_SYNC_OPT_CMD: parsed by the command itself (psg_sync_config_t's fields) */
#define PSG_SYNC_OPT_CMD ((size_t)-1)
#define OPT(field) offsetof(psg_sync_options_t, field)

static const char *const compressions[] = {"none", "topk", NULL}; /* PSG_SYNC_COMPRESS_* */
static const char *const momentum_places[] = {"ps", "worker", "worker-masked", "folded",
                                              NULL}; /* _MOMENTUM_* */

static const psg_sync_option_t options[] = {
    {"--replicas-to-aggregate", "N", "gradients averaged a step (default workers - b)",
     PSG_SYNC_OPT_CMD, 1, 1000000, false, NULL},
    {"--backup-workers", "B", "workers whose gradients may be dropped (default 0)",
     PSG_SYNC_OPT_CMD, 0, 1000000, false, NULL},
    {"--max-staleness", "K",
     "let reads run up to K steps ahead of this worker's own updates "
     "(steps asked for ahead; default 0: none)",
     OPT(max_staleness), 0, 1, false, NULL},
    {"--staleness", "S",
     "a worker waits when more than S steps ahead of the slowest "
     "(default 2; 0: the same as sync with b = 0)",
     OPT(staleness), 0, 1000000, false, NULL},
    {"--local-steps", "H", "steps on the worker's own copy between two averages (default 4)",
     OPT(local_steps), 1, 1000000, false, NULL},
    {"--local-after", "STEPS",
     "plain sync steps before local SGD starts: post-local SGD "
     "(default 0)",
     OPT(local_after), 0, 1000000000, false, NULL},
    {"--elastic-alpha", "A",
     "a copy and the center each move A of their distance toward "
     "the other (default 0.5)",
     OPT(elastic_alpha), 1e-9, 1, true, NULL},
    {"--compress", "none|topk",
     "topk: send the largest entries of each gradient, the rest kept "
     "on the worker for the next (default none)",
     OPT(compress), 0, 1, false, compressions},
    {"--compress-ratio", "R", "with --compress topk: the share of entries sent (default 0.01)",
     OPT(compress_ratio), 1e-9, 1, true, NULL},
    {"--compress-min-size", "N",
     "with --compress topk: gradients of fewer than N entries are "
     "sent whole (default 0)",
     OPT(compress_min_size), 0, 1e15, false, NULL},
    {"--compress-warmup", "STEPS",
     "with --compress topk: the share sent falls exponentially from "
     "--compress-warmup-ratio to R over a worker's first STEPS steps (default 0: none)",
     OPT(compress_warmup), 0, 1e12, false, NULL},
    {"--compress-warmup-ratio", "R0", "the share sent at the warm-up's first step (default 0.25)",
     OPT(compress_warmup_ratio), 1e-9, 1, true, NULL},
    {"--compress-momentum", "ps|worker|worker-masked|folded",
     "with --compress topk and --optimizer "
     "momentum: where the momentum runs (worker: DGC's momentum correction, SGD on the ps; "
     "-masked: with its masking; folded: nowhere, SGD of rate lr/(1-m) on the ps, with sync "
     "the recipe that matches uncompressed at 1 %, docs/sync.md; default ps)",
     OPT(compress_momentum), 0, 3, false, momentum_places},
    {"--outer-lr", "LR",
     "the outer Nesterov step's rate on the averaged pseudo-gradient (default 0.7; 1 with "
     "--outer-momentum 0: local SGD)",
     OPT(outer_lr), 0, 1e6, true, NULL},
    {"--outer-momentum", "M", "the outer step's Nesterov momentum, in [0, 1) (default 0.9)",
     OPT(outer_momentum), 0, 0.999999, true, NULL},
};
#define NUM_OPTIONS ((int)(sizeof options / sizeof options[0]))

void psg_sync_options_defaults(psg_sync_options_t *o) {
    memset(o, 0, sizeof *o);
    o->staleness = 2;
    o->local_steps = 4;
    o->elastic_alpha = 0.5;
    o->compress_ratio = 0.01;
    o->compress_warmup_ratio = 0.25;
    o->outer_lr = 0.7;
    o->outer_momentum = 0.9;
}

/* The strategy named name, or NULL (no error set). */
static const psg_sync_strategy_t *lookup(const char *name) {
    for (int i = 0, n = psg_sync_num_strategies(); i < n; i++)
        if (!strcmp(psg_sync_strategy_at(i)->name, name)) return psg_sync_strategy_at(i);
    return NULL;
}

const psg_sync_strategy_t *psg_sync_strategy_find(const char *name) {
    if (!name) name = "sync";
    const psg_sync_strategy_t *s = lookup(name);
    if (!s) psg_error_set("unknown strategy '%s' (known: %s)", name, psg_sync_strategy_names());
    return s;
}

int psg_sync_strategy_check_name(const char *name) {
    return psg_sync_strategy_find(name) ? 0 : psg_error_wrap("--sync");
}

int psg_sync_strategy_local_model(const char *name) {
    const psg_sync_strategy_t *s = psg_sync_strategy_find(name);
    return s ? s->local_model : psg_error_wrap("--sync");
}

int psg_sync_num_strategies(void) {
    return NUM_BUILT_IN + atomic_load(&num_added);
}

const psg_sync_strategy_t *psg_sync_strategy_at(int i) {
    if (i >= 0 && i < NUM_BUILT_IN) return built_in[i];
    return i >= NUM_BUILT_IN && i < psg_sync_num_strategies() ? added[i - NUM_BUILT_IN] : NULL;
}

/* "sync, async, ...": made once for the built-in ones, again when one is added. */
static char names[64 * (PSG_SYNC_MAX_ADDED + 8)];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void make_names(void) {
    size_t len = 0;
    for (int i = 0, n = psg_sync_num_strategies(); i < n; i++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                                psg_sync_strategy_at(i)->name);
}

const char *psg_sync_strategy_names(void) {
    pthread_once(&names_once, make_names);
    return names;
}

static const psg_sync_option_t *find_option(const char *flag) {
    for (int i = 0; i < NUM_OPTIONS; i++)
        if (!strcmp(options[i].flag, flag)) return &options[i];
    return NULL;
}

/* A name --sync can take and a table row can hold: 1..31 of [a-z0-9_-], not "none". */
static bool good_name(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 31 || !strcmp(name, "none")) return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

int psg_sync_strategy_register(const psg_sync_strategy_t *s) {
    if (!s || !good_name(s->name))
        return psg_error_set("strategy '%.64s': a name is 1 to 31 of a-z, 0-9, '_', '-' "
                             "(not 'none')",
                             s && s->name ? s->name : "");
    if (!s->summary || !s->build)
        return psg_error_set("strategy '%s' needs its summary and its build", s->name);
    for (int k = 0; s->options && s->options[k]; k++)
        if (!find_option(s->options[k]))
            return psg_error_set("strategy '%s': option '%s' is not in the options table "
                                 "(sync/strategies.c)",
                                 s->name, s->options[k]);
    pthread_once(&names_once, make_names);
    pthread_mutex_lock(&added_lock);
    int n = atomic_load(&num_added), rc = 0;
    if (lookup(s->name)) {
        rc = psg_error_set("strategy '%s' is in the table already", s->name);
    } else if (n == PSG_SYNC_MAX_ADDED) {
        rc = psg_error_set("strategy '%s': %d strategies were added already (the limit)", s->name,
                           PSG_SYNC_MAX_ADDED);
    } else {
        added[n] = s;
        atomic_store(&num_added, n + 1);
        make_names();
    }
    pthread_mutex_unlock(&added_lock);
    return rc;
}

int psg_sync_option_parse(psg_sync_options_t *o, const char *flag, const char *value) {
    const psg_sync_option_t *op = find_option(flag);
    if (!op || op->offset == PSG_SYNC_OPT_CMD) return 0;
    if (op->choices) {
        for (int64_t i = 0; op->choices[i]; i++)
            if (!strcmp(op->choices[i], value)) {
                *(int64_t *)((char *)o + op->offset) = i;
                return 1;
            }
        return psg_error_set("%s: '%s' is not %s", flag, value, op->metavar);
    }
    char *end;
    errno = 0;
    double v = op->real ? strtod(value, &end) : (double)strtoll(value, &end, 10);
    if (errno || end == value || *end || !(v >= op->lo && v <= op->hi))
        return psg_error_set("%s: '%s' is not %s in [%g, %g]", flag, value,
                             op->real ? "a number" : "an integer", op->lo, op->hi);
    if (op->real)
        *(double *)((char *)o + op->offset) = v;
    else
        *(int64_t *)((char *)o + op->offset) = (int64_t)v;
    return 1;
}

void psg_sync_print_help(FILE *f) {
    fprintf(f, "  --sync none|%s\n", psg_sync_strategy_names());
    fprintf(f,
            "                           none: one process; the others train as a worker of the\n"
            "                           cluster given by TF_CONFIG or --cluster (async when one\n"
            "                           is given and --sync is not); docs/sync.md:\n");
    for (int i = 0, n = psg_sync_num_strategies(); i < n; i++) {
        const psg_sync_strategy_t *s = psg_sync_strategy_at(i);
        fprintf(f, "    %-8s %s\n", s->name, s->summary);
        for (int k = 0; s->options && s->options[k]; k++) {
            const psg_sync_option_t *op = find_option(s->options[k]);
            PSG_ASSERT(op); /* a strategy lists only the table's flags */
            char lhs[64];
            snprintf(lhs, sizeof lhs, "%s %s", op->flag, op->metavar);
            fprintf(f, "      %-24s %s\n", lhs, op->help);
        }
    }
}

int psg_sync_lost_any(const psg_sync_config_t *cfg, int num_required) {
    (void)num_required;
    return cfg->num_workers - 1;
}

int psg_sync_lost_workers_tolerated(const psg_sync_config_t *cfg) {
    const psg_sync_strategy_t *s = psg_sync_strategy_find(cfg->strategy);
    if (!s) return -1;
    int n = cfg->replicas_to_aggregate > 0 ? cfg->replicas_to_aggregate
                                           : cfg->num_workers - cfg->backup_workers;
    return s->lost_workers ? s->lost_workers(cfg, n) : 0;
}

/* The edit distance of a and b (Levenshtein), both at most 63 characters counted. */
static int distance(const char *a, const char *b) {
    int row[64], la = (int)strnlen(a, 63), lb = (int)strnlen(b, 63);
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* The strategy whose name is closest to name. */
static const char *closest_strategy(const char *name) {
    const char *best = psg_sync_strategy_at(0)->name;
    for (int i = 1, n = psg_sync_num_strategies(); i < n; i++)
        if (distance(name, psg_sync_strategy_at(i)->name) < distance(name, best))
            best = psg_sync_strategy_at(i)->name;
    return best;
}

/* The option of s closest to flag ("" when it has none), and its list into list. */
static const char *closest_option(const psg_sync_strategy_t *s, const char *flag, char *list,
                                  size_t cap) {
    const char *best = "";
    size_t len = 0;
    list[0] = 0;
    for (int k = 0; s->options && s->options[k]; k++) {
        if (!*best || distance(flag, s->options[k]) < distance(flag, best)) best = s->options[k];
        len += (size_t)snprintf(list + len, len < cap ? cap - len : 0, "%s%s", k ? ", " : "",
                                s->options[k]);
    }
    if (!*list) snprintf(list, cap, "none");
    return best;
}

/* value of op (a command's own option: an integer in its range), checked. */
static int check_cmd_value(const psg_sync_option_t *op, const char *value) {
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end || !(v >= op->lo && v <= op->hi))
        return psg_error_set("%s: '%s' is not an integer in [%g, %g]", op->flag, value, op->lo,
                             op->hi);
    return 0;
}

int psg_sync_spec_check(const char *spec) {
    char words[512];
    if (!spec || strlen(spec) >= sizeof words)
        return psg_error_set("strategy '%.64s...': longer than %zu characters", spec ? spec : "",
                             sizeof words - 1);
    snprintf(words, sizeof words, "%s", spec);
    char *save = NULL, *name = strtok_r(words, " ", &save);
    if (!name) return psg_error_set("an empty strategy (say its name, e.g. 'sync')");
    const psg_sync_strategy_t *s = lookup(name);
    if (!s)
        return psg_error_set("unknown strategy '%s' (closest: %s; known: %s)", name,
                             closest_strategy(name), psg_sync_strategy_names());
    psg_sync_options_t scratch;
    psg_sync_options_defaults(&scratch);
    char list[512];
    for (char *flag = strtok_r(NULL, " ", &save); flag; flag = strtok_r(NULL, " ", &save)) {
        bool listed = false;
        for (int k = 0; s->options && s->options[k] && !listed; k++)
            listed = !strcmp(s->options[k], flag);
        if (!listed) {
            char owners[256] = "";
            for (int i = 0, n = psg_sync_num_strategies(), len = 0; i < n; i++)
                for (int k = 0;
                     psg_sync_strategy_at(i)->options && psg_sync_strategy_at(i)->options[k]; k++)
                    if (!strcmp(psg_sync_strategy_at(i)->options[k], flag) && len < 200)
                        len +=
                            snprintf(owners + len, sizeof owners - (size_t)len, "%s%s",
                                     len ? ", " : " (an option of ", psg_sync_strategy_at(i)->name);
            const char *near = closest_option(s, flag, list, sizeof list);
            return psg_error_set("%s: unknown option '%s'%s%s%s%s (%s takes: %s; options for "
                                 "every strategy go after --)",
                                 name, flag, owners, *owners ? ")" : "", *near ? ", closest: " : "",
                                 near, name, list);
        }
        const char *value = strtok_r(NULL, " ", &save);
        if (!value) return psg_error_set("%s: %s needs a value", name, flag);
        const psg_sync_option_t *op = find_option(flag);
        int rc = op->offset == PSG_SYNC_OPT_CMD ? check_cmd_value(op, value)
                                                : psg_sync_option_parse(&scratch, flag, value);
        if (rc < 0) return psg_error_wrap("%s", name);
    }
    return 0;
}
