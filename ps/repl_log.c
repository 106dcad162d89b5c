/* The write log of chain replication and its replay on the backup (ps/repl_log.h,
 * docs/replication.md). Not the forward's transport or ledger (ps/replicate.c). */
#include "ps/repl_log.h"

#include "ops/params.h"
#include "psgraph/device.h"
#include "psgraph/error.h"
#include "psgraph/fp_mode.h"
#include "psgraph/graph.h"
#include "psgraph/kernel.h"
#include "psgraph/op.h"
#include "psgraph/ops_array.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The backup's built nodes kept (one per update node of the primary's graphs). */
#define MAX_CACHED 256
/* The separator of a replay line's inputs and attributes. */
#define SEP '\x1f'

/* One logged update. */
typedef struct entry {
    struct entry *next;
    char *line;             /* "!OP\tATTRS\tINPUTS": each input "v" NAME or "t", SEP between */
    int nvars, ntensors;    /* its variables and its other inputs, in input order */
    psg_variable_t **vars;  /* (nvars) */
    uint64_t *pre;          /* (nvars) each one's count of writes before this one */
    psg_tensor_t **tensors; /* (ntensors) copies */
    char *writer;           /* the update id of its step (NULL: none), and its SEQ */
    int64_t seq;
} entry_t;

/* A run in progress and its update id (psg_repl_log_step_begin). */
typedef struct {
    int64_t step, seq;
    char writer[PSG_APPLIED_WRITER_MAX];
} step_id_t;

/* A node built on the backup for a replay line (its key: the line and the tensors' shapes). */
typedef struct {
    char *key;
    psg_graph_t *g;
    const psg_node_t *node;
    void *params, *state;
} cached_t;

struct psg_repl_log {
    psg_resource_mgr_t *rm;
    atomic_bool on;
    pthread_mutex_t lock; /* the list; taken under the locks of the variables an update writes */
    entry_t *head, **tail;
    psg_applied_t *records; /* where each update is recorded as it is applied (may be NULL) */
    step_id_t *steps;       /* the runs with an update id, under lock */
    int n_steps, cap_steps;
    cached_t cache[MAX_CACHED]; /* the backup's; on its apply thread only (ps/repl_queue.c) */
    int n_cached;
};

static void entry_free(entry_t *e) {
    if (!e) return;
    for (int i = 0; i < e->ntensors; i++) psg_tensor_destroy(&e->tensors[i]);
    free(e->tensors);
    free(e->vars);
    free(e->pre);
    free(e->line);
    free(e->writer);
    free(e);
}

static void list_free(entry_t *e) {
    while (e) {
        entry_t *next = e->next;
        entry_free(e);
        e = next;
    }
}

/* ---- the log: the primary's kernels ---- */

/* An attribute as "KEY=T VALUE" (T: i int, f float in hex, b bool, s string, d dtype);
 * false for another kind, or a byte a line cannot hold. */
static bool attr_text(psg_strbuf_t *b, const psg_attr_t *a) {
    if (strpbrk(a->key, "\t\n=\x1f")) return false;
    switch (a->type) {
    case PSG_ATTR_INT: psg_strbuf_printf(b, "%s=i%" PRId64, a->key, a->u.i); return true;
    case PSG_ATTR_FLOAT: psg_strbuf_printf(b, "%s=f%a", a->key, a->u.f); return true;
    case PSG_ATTR_BOOL: psg_strbuf_printf(b, "%s=b%d", a->key, a->u.b ? 1 : 0); return true;
    case PSG_ATTR_DTYPE: psg_strbuf_printf(b, "%s=d%d", a->key, (int)a->u.dtype); return true;
    case PSG_ATTR_STR:
        if (strpbrk(a->u.s, "\t\n\x1f")) return false;
        psg_strbuf_printf(b, "%s=s%s", a->key, a->u.s);
        return true;
    default: return false;
    }
}

static psg_variable_t *handle_var(const psg_tensor_t *t) {
    psg_variable_t *v;
    memcpy(&v, t->data, sizeof v);
    return v;
}

/* Whether t shares a variable's current buffer (ReadVariable, Identity and Reshape of a
 * variable do): a writer in place may change it after the log took it, so it is copied. Any
 * other input (a Recv's, a Const's, an op's output, an accumulator's mean; a variable's
 * value before a write aside, kept as a way back) is never written again: a reference does. */
static bool variable_buffer(psg_resource_mgr_t *rm, const psg_tensor_t *t) {
    return !rm || psg_resource_holds_buffer(rm, t->buf);
}

/* The entry of one update; NULL when it cannot be logged (then its variables go by value). */
static entry_t *entry_make(psg_resource_mgr_t *rm, const psg_node_t *node,
                           psg_tensor_t *const *inputs, int n) {
    entry_t *e = calloc(1, sizeof *e);
    if (!e || !(e->vars = calloc((size_t)n, sizeof *e->vars)) ||
        !(e->pre = calloc((size_t)n, sizeof *e->pre)) ||
        !(e->tensors = calloc((size_t)n, sizeof *e->tensors))) {
        entry_free(e);
        return NULL;
    }
    psg_strbuf_t b = {0};
    bool ok = true;
    psg_strbuf_printf(&b, "!%s\t", psg_node_op(node));
    for (int i = 0, k = 0; ok && i < psg_node_num_attrs(node); i++) {
        const psg_attr_t *a = psg_node_attr_at(node, i);
        if (!strcmp(a->key, "_class") || a->key[0] == '_') continue; /* placement hints */
        if (k++) psg_strbuf_add(&b, "\x1f", 1);
        ok = attr_text(&b, a);
    }
    psg_strbuf_add(&b, "\t", 1);
    for (int i = 0; ok && i < n; i++) {
        if (i) psg_strbuf_add(&b, "\x1f", 1);
        if (inputs[i]->dtype == PSG_DT_RESOURCE) {
            psg_variable_t *v = handle_var(inputs[i]);
            ok = !v->backup && !strpbrk(v->name, "\t\n\x1f");
            psg_strbuf_printf(&b, "v%s", v->name);
            e->pre[e->nvars] = v->writes - 1; /* psg_variable_note_write counted this one */
            e->vars[e->nvars++] = v;
        } else {
            /* the gradient by reference (1x its bytes a step copied before) */
            ok = psg_tensor_on_host(inputs[i]) &&
                 (e->tensors[e->ntensors++] = variable_buffer(rm, inputs[i])
                                                  ? psg_tensor_copy(inputs[i])
                                                  : psg_tensor_ref(inputs[i])) != NULL;
            psg_strbuf_add(&b, "t", 1);
        }
    }
    e->line = b.s;
    if (!ok || b.oom || e->nvars == 0) {
        entry_free(e);
        return NULL;
    }
    return e;
}

/* The update id of the run that applies an update now (false: none): its step id is the
 * last write its first variable counted (psg_variable_note_write, under its lock). */
static bool update_of(psg_repl_log_t *l, psg_tensor_t *const *inputs, int n, char *writer,
                      int64_t *seq) {
    psg_variable_t *v = NULL;
    for (int i = 0; i < n && !v; i++)
        if (inputs[i]->dtype == PSG_DT_RESOURCE) v = handle_var(inputs[i]);
    if (!v || v->writes == 0) return false;
    int64_t step = v->recent[(v->writes - 1) % PSG_VARIABLE_RECENT];
    bool found = false;
    pthread_mutex_lock(&l->lock);
    for (int i = 0; i < l->n_steps && !found; i++)
        if (l->steps[i].step == step) {
            memcpy(writer, l->steps[i].writer, PSG_APPLIED_WRITER_MAX);
            *seq = l->steps[i].seq;
            found = true;
        }
    pthread_mutex_unlock(&l->lock);
    return found && step != 0;
}

/* The write log (psg_write_log_fn): under the locks of the update's variables. */
static void log_write(void *ctx, const psg_node_t *node, psg_tensor_t *const *inputs, int n) {
    psg_repl_log_t *l = ctx;
    char writer[PSG_APPLIED_WRITER_MAX];
    int64_t seq = 0;
    bool id = update_of(l, inputs, n, writer, &seq);
    /* recorded as it is applied, under the variables' locks: a value copied under them after
     * this holds the update and comes with its record, one copied before has neither */
    for (int i = 0; id && l->records && i < n; i++)
        if (inputs[i]->dtype == PSG_DT_RESOURCE)
            (void)psg_applied_set(l->records, handle_var(inputs[i])->name, writer, seq);
    if (!atomic_load(&l->on)) return; /* its counts move on: its next forward is by value */
    for (int i = 0; i < n; i++)       /* a backup copy's (a step after a failover): by value */
        if (inputs[i]->dtype == PSG_DT_RESOURCE && handle_var(inputs[i])->backup) return;
    entry_t *e = entry_make(l->rm, node, inputs, n);
    if (e && id && !(e->writer = strdup(writer))) entry_free(e), e = NULL;
    if (e) e->seq = seq;
    if (!e) {
        for (int i = 0; i < n; i++)
            if (inputs[i]->dtype == PSG_DT_RESOURCE)
                psg_variable_note_unlogged(handle_var(inputs[i]));
        psg_error_clear();
        return;
    }
    pthread_mutex_lock(&l->lock);
    *l->tail = e;
    l->tail = &e->next;
    pthread_mutex_unlock(&l->lock);
}

psg_repl_log_t *psg_repl_log_new(psg_resource_mgr_t *rm, psg_applied_t *records) {
    psg_repl_log_t *l = calloc(1, sizeof *l);
    if (!l) {
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    l->rm = rm;
    l->records = records;
    l->tail = &l->head;
    pthread_mutex_init(&l->lock, NULL);
    psg_resource_set_write_log(rm, log_write, l);
    return l;
}

static void cached_free(cached_t *c) {
    const psg_op_def_t *def = c->node ? psg_node_def(c->node) : NULL;
    if (def && def->state_free && c->state) def->state_free(c->state);
    free(c->state);
    free(c->params);
    psg_graph_destroy(&c->g);
    free(c->key);
    memset(c, 0, sizeof *c);
}

void psg_repl_log_destroy(psg_repl_log_t **lp) {
    if (!lp || !*lp) return;
    psg_repl_log_t *l = *lp;
    *lp = NULL;
    psg_resource_set_write_log(l->rm, NULL, NULL);
    list_free(l->head);
    for (int i = 0; i < l->n_cached; i++) cached_free(&l->cache[i]);
    pthread_mutex_destroy(&l->lock);
    free(l->steps);
    free(l);
}

static entry_t *take_all(psg_repl_log_t *l) {
    pthread_mutex_lock(&l->lock);
    entry_t *d = l->head;
    l->head = NULL;
    l->tail = &l->head;
    pthread_mutex_unlock(&l->lock);
    return d;
}

void psg_repl_log_set_on(psg_repl_log_t *l, bool on) {
    if (!l) return;
    atomic_store(&l->on, on);
    if (!on) list_free(take_all(l));
}

int psg_repl_log_step_begin(psg_repl_log_t *l, int64_t step, const char *writer, int64_t seq) {
    if (strlen(writer) >= PSG_APPLIED_WRITER_MAX)
        return psg_error_set("update id: writer '%.40s...' too long", writer);
    pthread_mutex_lock(&l->lock);
    int rc = 0;
    if (l->n_steps == l->cap_steps) {
        int cap = l->cap_steps ? 2 * l->cap_steps : 8;
        step_id_t *v = realloc(l->steps, (size_t)cap * sizeof *v);
        if (v)
            l->steps = v, l->cap_steps = cap;
        else
            rc = psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    }
    if (rc == 0) {
        step_id_t *s = &l->steps[l->n_steps++];
        s->step = step;
        s->seq = seq;
        snprintf(s->writer, sizeof s->writer, "%s", writer);
    }
    pthread_mutex_unlock(&l->lock);
    return rc;
}

void psg_repl_log_step_end(psg_repl_log_t *l, int64_t step) {
    pthread_mutex_lock(&l->lock);
    for (int i = 0; i < l->n_steps; i++)
        if (l->steps[i].step == step) {
            l->steps[i] = l->steps[--l->n_steps];
            break;
        }
    pthread_mutex_unlock(&l->lock);
}

/* ---- the primary's forward ---- */

int psg_repl_add_value(psg_msg_t *m, psg_variable_t *v, psg_applied_t *records, psg_strbuf_t *body,
                       size_t *bytes, const psg_repl_since_t *since, bool *only) {
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    psg_tensor_t *copy =
        psg_tensor_on_host(v->value) ? psg_tensor_copy(v->value) : psg_tensor_to_host(v->value);
    if (only) *only = since && v->writes == since->writes + 1 && psg_variable_wrote(v, since->step);
    if (copy) {
        v->repl_writes = v->writes;
        v->unlogged = false;
        if (records) psg_applied_dump(records, v->name, body); /* the updates the copy holds */
    }
    pthread_mutex_unlock(&guard->lock);
    if (!copy) return -1;
    *bytes += psg_tensor_nbytes(copy);
    int rc = psg_msg_add_tensor(m, v->name, copy);
    psg_tensor_destroy(&copy);
    return rc;
}

/* A variable of a forward: by value, or its logged updates replayed. */
typedef struct {
    psg_variable_t *v;
    bool by_value;
    uint64_t expect; /* the count of writes the backup holds after the replayed updates */
} pvar_t;

struct psg_repl_plan {
    int n, cap;
    pvar_t *vars;
};

static pvar_t *plan_var(psg_repl_plan_t *p, psg_variable_t *v) {
    for (int i = 0; i < p->n; i++)
        if (p->vars[i].v == v) return &p->vars[i];
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        pvar_t *nv = realloc(p->vars, (size_t)cap * sizeof *nv);
        if (!nv) return NULL;
        p->vars = nv;
        p->cap = cap;
    }
    psg_variable_t *guard = psg_variable_guard(v);
    pthread_mutex_lock(&guard->lock);
    /* written by other than a logged update, off the host: by value */
    bool by_value = v->unlogged || !psg_tensor_on_host(v->value);
    pthread_mutex_unlock(&guard->lock);
    p->vars[p->n] = (pvar_t){v, by_value, 0};
    return &p->vars[p->n++];
}

/* Whether e replays: its variables not by value, each of its writes the next one the backup
 * lacks (then counted). An update the backup holds already (taken in a value forwarded
 * after it was logged) is dropped (*drop). Else every variable it writes goes by value,
 * *changed set. */
static bool entry_replays(psg_repl_plan_t *p, const entry_t *e, bool *drop, bool *changed) {
    int below = 0, next = 0;
    pvar_t *pv[64];
    if (e->nvars > 64) return false;
    for (int k = 0; k < e->nvars; k++) {
        pv[k] = plan_var(p, e->vars[k]);
        if (!pv[k]) return false;
        if (pv[k]->by_value) continue;
        if (e->pre[k] < pv[k]->expect) below++;
        if (e->pre[k] == pv[k]->expect) next++;
    }
    *drop = below == e->nvars;
    if (*drop) return false;
    if (next == e->nvars) {
        for (int k = 0; k < e->nvars; k++) pv[k]->expect++;
        return true;
    }
    for (int k = 0; k < e->nvars; k++)
        if (pv[k] && !pv[k]->by_value) pv[k]->by_value = *changed = true;
    return false;
}

/* Which variables go by value: until no update that cannot replay makes another one. */
static int plan_make(psg_repl_plan_t *p, entry_t *d) {
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < p->n; i++) p->vars[i].expect = p->vars[i].v->repl_writes;
        for (entry_t *e = d; e; e = e->next) {
            bool drop = false;
            (void)entry_replays(p, e, &drop, &changed);
        }
    }
    return 0;
}

int psg_repl_log_forward(psg_repl_log_t *l, psg_resource_mgr_t *rm, const char *const *names,
                         const bool *skip, int n, psg_msg_t *m, psg_strbuf_t *body, int *count,
                         int *replays, size_t *bytes, psg_repl_plan_t **plan) {
    *plan = NULL;
    entry_t *d = take_all(l);
    psg_repl_plan_t *p = calloc(1, sizeof *p);
    int rc = p ? 0 : -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        psg_variable_t *v = skip && skip[i] ? NULL : psg_resource_find_variable(rm, names[i]);
        if (!v || !v->initialized || v->backup) continue;
        if (!plan_var(p, v)) rc = -1;
    }
    /* a variable demoted to a backup copy since its update was logged is not this task's */
    for (entry_t *e = d; rc == 0 && e; e = e->next)
        for (int k = 0; k < e->nvars && rc == 0; k++) {
            pvar_t *pv = plan_var(p, e->vars[k]);
            if (!pv)
                rc = -1;
            else if (e->vars[k]->backup)
                pv->by_value = true;
        }
    if (rc < 0) {
        list_free(d);
        psg_repl_commit(&p, false);
        return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    }
    plan_make(p, d);
    for (int i = 0; rc == 0 && i < p->n; i++) {
        if (!p->vars[i].by_value || p->vars[i].v->backup) continue;
        rc = psg_repl_add_value(m, p->vars[i].v, l->records, body, bytes, NULL, NULL);
        if (rc == 0) (*count)++;
    }
    for (int i = 0; i < p->n; i++) p->vars[i].expect = p->vars[i].v->repl_writes;
    for (entry_t *e = d; rc == 0 && e; e = e->next) {
        bool drop = false, changed = false;
        if (!entry_replays(p, e, &drop, &changed)) continue;
        psg_strbuf_str(body, e->line);
        if (e->writer) psg_strbuf_printf(body, "\t%s %" PRId64, e->writer, e->seq);
        psg_strbuf_add(body, "\n", 1);
        for (int k = 0; rc == 0 && k < e->ntensors; k++) {
            *bytes += psg_tensor_nbytes(e->tensors[k]);
            rc = psg_msg_add_tensor(m, "@", e->tensors[k]);
        }
        (*count)++;
        (*replays)++;
    }
    list_free(d);
    if (rc < 0 || body->oom) {
        psg_repl_commit(&p, false);
        return rc < 0 ? -1 : psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    }
    *plan = p;
    return 0;
}

void psg_repl_commit(psg_repl_plan_t **pp, bool applied) {
    if (!pp || !*pp) return;
    psg_repl_plan_t *p = *pp;
    *pp = NULL;
    for (int i = 0; applied && i < p->n; i++)
        if (!p->vars[i].by_value) p->vars[i].v->repl_writes = p->vars[i].expect;
    free(p->vars);
    free(p);
}

/* ---- the backup's replay ---- */

/* The ops a backup replays: the dense updates whose CPU kernels log themselves. */
static bool replayable(const char *op) {
    static const char *const ops[] = {
        "ApplyGradientDescent", "ApplyMomentum", "ApplyRMSProp",  "ApplyAdam",
        "ApplyAdagrad",         "ApplyFtrl",     "ScaleVariable", "IncrementVariable"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(op, ops[i])) return true;
    return false;
}

/* Splits s[0..n) at the first c: the part before it in *part (its length *plen); the rest
 * after it returned (NULL at the end). */
static const char *split(const char *s, size_t n, char c, size_t *plen) {
    const char *at = memchr(s, c, n);
    *plen = at ? (size_t)(at - s) : n;
    return at ? at + 1 : NULL;
}

/* One attribute "KEY=T VALUE" onto b. false when malformed. */
static bool attr_parse(psg_node_builder_t *b, const char *s, size_t n) {
    char buf[512];
    if (n >= sizeof buf) return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *eq = strchr(buf, '=');
    if (!eq || eq == buf || !eq[1]) return false;
    *eq = 0;
    const char *key = buf, *val = eq + 2;
    char *end = NULL;
    switch (eq[1]) {
    case 'i': psg_node_attr_int(b, key, strtoll(val, &end, 10)); break;
    case 'f': psg_node_attr_float(b, key, strtod(val, &end)); break;
    case 'b': psg_node_attr_bool(b, key, val[0] == '1'); return val[0] && !val[1];
    case 'd': {
        long dt = strtol(val, &end, 10);
        if (dt <= PSG_DT_INVALID || dt >= PSG_DT_COUNT) return false;
        psg_node_attr_dtype(b, key, (psg_dtype_t)dt);
        break;
    }
    case 's': psg_node_attr_str(b, key, val); return true;
    default: return false;
    }
    return end && end != val && !*end;
}

/* One input of a line: a variable "v" NAME (a backup copy here) or a tensor "t" (the next
 * "@" of req, from *ti on). */
typedef struct {
    psg_variable_t *v;
    psg_tensor_t *t;
} input_t;

/* The node of a replay line, built once: VarHandles and Placeholders as its inputs, the op
 * with the line's attributes. NULL with the error set. */
static cached_t *node_for(psg_repl_log_t *l, const char *op, const char *attrs, size_t alen,
                          const input_t *in, int n, const char *key) {
    for (int i = 0; i < l->n_cached; i++)
        if (!strcmp(l->cache[i].key, key)) return &l->cache[i];
    if (l->n_cached == MAX_CACHED) { /* many graphs came and went: start again */
        for (int i = 0; i < l->n_cached; i++) cached_free(&l->cache[i]);
        l->n_cached = 0;
    }
    cached_t c = {0};
    if (!(c.key = strdup(key)) || !(c.g = psg_graph_new())) {
        cached_free(&c);
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    psg_endpoint_t eps[16];
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        eps[i] = in[i].v ? psg_var_handle(c.g, name, in[i].v->dtype, &in[i].v->shape)
                         : psg_placeholder(c.g, name, in[i].t->dtype, &in[i].t->shape);
    }
    psg_node_builder_t *b = psg_node_begin(c.g, op, "replay");
    for (int i = 0; i < n; i++) psg_node_add_input(b, eps[i]);
    bool ok = true;
    for (const char *s = attrs, *rest; ok && s && s < attrs + alen; s = rest) {
        size_t len;
        rest = split(s, (size_t)(attrs + alen - s), SEP, &len);
        ok = attr_parse(b, s, len);
    }
    int id = psg_node_finish(b);
    if (!ok || id < 0) {
        if (!ok) psg_error_set_code(PSG_ERR_BAD_REQUEST, "a malformed attribute");
        cached_free(&c);
        return NULL;
    }
    c.node = psg_graph_node(c.g, id);
    const psg_op_def_t *def = psg_node_def(c.node);
    if ((def->params_size && !(c.params = calloc(1, def->params_size))) ||
        (def->state_size && !(c.state = calloc(1, def->state_size)))) {
        cached_free(&c);
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    if (def->prepare && def->prepare(c.g, c.node, c.params) < 0) {
        cached_free(&c);
        return NULL;
    }
    l->cache[l->n_cached] = c;
    return &l->cache[l->n_cached++];
}

/* The inputs of a line's INPUTS part s[0..n); -1 with the error set. */
static int inputs_parse(psg_resource_mgr_t *rm, const psg_msg_t *req, const char *s, size_t n,
                        int *ti, input_t *in, int *nin, psg_strbuf_t *key) {
    *nin = 0;
    for (const char *end = s + n;;) {
        const char *sep = memchr(s, SEP, (size_t)(end - s));
        size_t len = sep ? (size_t)(sep - s) : (size_t)(end - s);
        if (*nin == 16 || len == 0) return psg_error_set("more than 16 inputs, or an empty one");
        input_t *x = &in[(*nin)++];
        memset(x, 0, sizeof *x);
        if (s[0] == 'v') {
            char name[1024];
            if (len - 1 >= sizeof name) return psg_error_set("a variable name over 1023 bytes");
            memcpy(name, s + 1, len - 1);
            name[len - 1] = 0;
            x->v = psg_resource_find_variable(rm, name);
            if (!x->v || !x->v->initialized || !x->v->backup || !psg_tensor_on_host(x->v->value))
                return psg_error_set_code(PSG_ERR_DENIED,
                                          "variable '%s' is not a backup copy here (a primary "
                                          "of its own, or not copied yet)",
                                          name);
        } else if (s[0] == 't' && len == 1) {
            while (*ti < req->ntensors && strcmp(req->names[*ti], "@")) (*ti)++;
            if (*ti == req->ntensors) return psg_error_set("fewer \"@\" tensors than inputs");
            x->t = req->tensors[(*ti)++];
            char sh[256];
            psg_strbuf_printf(key, "\x1f%d:%s", (int)x->t->dtype,
                              psg_shape_str(&x->t->shape, sh, sizeof sh));
        } else {
            return psg_error_set("input '%.*s' is not \"vNAME\" or \"t\"",
                                 (int)(len < 40 ? len : 40), s);
        }
        if (!sep) return 0;
        s = sep + 1;
    }
}

/* A variable a forward's replay wrote: its last update there (its id; writer "" none) and,
 * with an id, its value before that one. */
typedef struct {
    psg_variable_t *v;
    psg_tensor_t *pre;
    char writer[PSG_APPLIED_WRITER_MAX];
    int64_t seq;
} touch_t;

typedef struct {
    int n, cap;
    touch_t *v;
} touched_t;

/* Before update (writer, seq) writes v: v's value now is the way back of a retry of that
 * update alone, as long as no later update of the forward writes v. */
static int touch(touched_t *t, psg_variable_t *v, const char *writer, int64_t seq) {
    touch_t *x = NULL;
    for (int i = 0; i < t->n && !x; i++)
        if (t->v[i].v == v) x = &t->v[i];
    if (!x && t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        touch_t *nv = realloc(t->v, (size_t)cap * sizeof *nv);
        if (!nv) return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        t->v = nv;
        t->cap = cap;
    }
    if (!x) {
        x = &t->v[t->n++];
        memset(x, 0, sizeof *x);
        x->v = v;
    }
    psg_tensor_destroy(&x->pre);
    snprintf(x->writer, sizeof x->writer, "%s", writer);
    x->seq = seq;
    if (writer[0]) {
        psg_variable_t *guard = psg_variable_guard(v);
        pthread_mutex_lock(&guard->lock);
        x->pre = psg_tensor_copy(v->value);
        pthread_mutex_unlock(&guard->lock);
        if (!x->pre) return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    }
    return 0;
}

/* A line's update id, after its INPUTS: "WRITER SEQ" into writer ("" when absent). */
static int line_id(const char *s, size_t n, char *writer, int64_t *seq) {
    writer[0] = 0;
    *seq = 0;
    if (!s) return 0;
    char id[PSG_APPLIED_WRITER_MAX + 24];
    if (n >= sizeof id) return psg_error_set("an update id of %zu bytes", n);
    memcpy(id, s, n);
    id[n] = 0;
    return psg_applied_parse_id(id, writer, PSG_APPLIED_WRITER_MAX, seq);
}

/* Runs one replay line (without its '!'); -1 with the error set. */
static int replay_line(psg_repl_log_t *l, psg_resource_mgr_t *rm, psg_applied_t *applied,
                       const psg_msg_t *req, const char *s, size_t n, int *ti, touched_t *t) {
    size_t oplen, alen, ilen;
    const char *attrs = split(s, n, '\t', &oplen);
    const char *ins = attrs ? split(attrs, n - (size_t)(attrs - s), '\t', &alen) : NULL;
    char op[64], writer[PSG_APPLIED_WRITER_MAX];
    if (!ins || oplen == 0 || oplen >= sizeof op || memchr(s, 0, n))
        return psg_error_set("not \"!OP\\tATTRS\\tINPUTS\"");
    const char *id = split(ins, n - (size_t)(ins - s), '\t', &ilen);
    int64_t seq = 0;
    if (line_id(id, id ? n - (size_t)(id - s) : 0, writer, &seq) < 0) return -1;
    memcpy(op, s, oplen);
    op[oplen] = 0;
    if (!replayable(op))
        return psg_error_set_code(PSG_ERR_DENIED, "op '%s' is not an update a backup replays", op);
    input_t in[16];
    int nin = 0;
    psg_strbuf_t key = {0};
    psg_strbuf_add(&key, s, (size_t)(ins + ilen - s)); /* the line without its id */
    int rc = inputs_parse(rm, req, ins, ilen, ti, in, &nin, &key);
    cached_t *c = rc == 0 && !key.oom ? node_for(l, op, attrs, alen, in, nin, key.s) : NULL;
    free(key.s);
    if (!c) return -1;
    if (nin != psg_node_num_inputs(c->node))
        return psg_error_set("op '%s' takes %d inputs, the line gives %d", op,
                             psg_node_num_inputs(c->node), nin);
    psg_tensor_t *args[16] = {0}, *outs[PSG_MAX_OUTPUTS] = {0};
    psg_shape_t scalar = psg_shape_scalar();
    for (int i = 0; rc == 0 && i < nin; i++) {
        if (!in[i].v) {
            args[i] = psg_tensor_ref(in[i].t);
            continue;
        }
        rc = touch(t, in[i].v, writer, seq);
        if (rc == 0 && !(args[i] = psg_tensor_new(PSG_DT_RESOURCE, &scalar)))
            rc = psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        if (rc == 0) memcpy(args[i]->data, &in[i].v, sizeof in[i].v);
    }
    if (rc == 0) {
        psg_kernel_ctx_t ctx = {.node = c->node,
                                .num_inputs = nin,
                                .inputs = args,
                                .num_outputs = psg_node_num_outputs(c->node),
                                .outputs = outs,
                                .resources = rm,
                                .device = -1,
                                .params = c->params,
                                .state = c->state};
        unsigned fp = psg_fp_enter(); /* the primary's mode: the same bits */
        rc = psg_node_def(c->node)->cpu(&ctx);
        psg_fp_leave(fp);
    }
    /* the copies hold this update: a retry of it here does not apply it twice */
    for (int i = 0; rc == 0 && writer[0] && i < nin; i++)
        if (in[i].v) (void)psg_applied_set(applied, in[i].v->name, writer, seq);
    for (int i = 0; i < nin; i++) psg_tensor_destroy(&args[i]);
    for (int i = 0; i < PSG_MAX_OUTPUTS; i++) psg_tensor_destroy(&outs[i]);
    return rc;
}

int psg_repl_replay(psg_repl_log_t *l, psg_resource_mgr_t *rm, psg_applied_t *applied,
                    const psg_msg_t *req, int *replayed) {
    *replayed = 0;
    const char *d = req->body ? (const char *)req->body->data : NULL;
    size_t len = req->body ? req->body->size : 0;
    touched_t t = {0};
    int rc = 0, ti = 0, line = 0;
    for (size_t at = 0; rc == 0 && at < len;) {
        size_t n;
        (void)split(d + at, len - at, '\n', &n);
        line++;
        if (n > 1 && d[at] == '!') {
            rc = replay_line(l, rm, applied, req, d + at + 1, n - 1, &ti, &t);
            if (rc < 0)
                psg_error_wrap("replay, line %d", line);
            else
                (*replayed)++;
        }
        at += n + 1;
    }
    for (int i = 0; i < t.n; i++) {
        touch_t *x = &t.v[i];
        psg_variable_t *guard = psg_variable_guard(x->v);
        pthread_mutex_lock(&guard->lock);
        psg_variable_note_unlogged(x->v); /* a copy: by value once promoted */
        pthread_mutex_unlock(&guard->lock);
        /* its last update and the value before that one only (an earlier update of the forward,
         * another worker's, stays when a retry of the last rolls back) */
        if (rc == 0)
            (void)psg_applied_set_last(applied, x->v->name, x->writer[0] ? x->writer : NULL, x->seq,
                                       &x->pre);
        psg_tensor_destroy(&x->pre);
    }
    free(t.v);
    return rc;
}
