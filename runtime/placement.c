/* The replica device setter (a device function), partitioned variables, and
 * the placement pass (colocation groups by resource handle, completion from
 * a default device, checks against the cluster and the kernels).
 * Not partitioning: partition.c cuts the placed graph. */
#include "graph/graph_layout.h"
#include "psgraph/device.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/ops_math.h"
#include "psgraph/placement.h"

#include "core/checked.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the replica device setter ---- */

struct psg_replica_setter {
    int ps_tasks;
    psg_ps_strategy_t strategy;
    psg_device_name_t ps, worker;
    int64_t *bytes; /* per ps task */
    int next_rr;
    char out[PSG_DEVICE_NAME_MAX];
};

psg_replica_setter_t *psg_replica_setter_new(const psg_replica_setter_options_t *opt) {
    if (!opt || opt->ps_tasks < 0) {
        psg_error_set("replica device setter: ps_tasks must be >= 0");
        return NULL;
    }
    if (opt->strategy != PSG_PS_GREEDY && opt->strategy != PSG_PS_ROUND_ROBIN) {
        psg_error_set("replica device setter: unknown strategy %d", (int)opt->strategy);
        return NULL;
    }
    psg_replica_setter_t *s = calloc(1, sizeof *s);
    if (!s || !(s->bytes = calloc((size_t)opt->ps_tasks + 1, sizeof(int64_t)))) {
        free(s);
        psg_error_set("out of memory");
        return NULL;
    }
    s->ps_tasks = opt->ps_tasks;
    s->strategy = opt->strategy;
    if (psg_device_name_parse(opt->ps_device ? opt->ps_device : "/job:ps", &s->ps) < 0 ||
        psg_device_name_parse(opt->worker_device ? opt->worker_device : "/job:worker", &s->worker) <
            0) {
        psg_error_wrap("replica device setter");
        psg_replica_setter_destroy(&s);
        return NULL;
    }
    return s;
}

void psg_replica_setter_destroy(psg_replica_setter_t **sp) {
    if (!sp || !*sp) return;
    free((*sp)->bytes);
    free(*sp);
    *sp = NULL;
}

int64_t psg_replica_setter_ps_bytes(const psg_replica_setter_t *s, int k) {
    return k >= 0 && k < s->ps_tasks ? s->bytes[k] : 0;
}

static int64_t variable_bytes(const psg_node_t *n) {
    int64_t numel = n->num_outputs ? psg_shape_numel(&n->out_shapes[0]) : 0;
    psg_dtype_t dt = (psg_dtype_t)psg_node_get_int(n, "dtype", PSG_DT_F32);
    const psg_attr_t *a = psg_node_attr(n, "dtype");
    if (a && a->type == PSG_ATTR_DTYPE) dt = a->u.dtype;
    int64_t bytes;
    if (numel <= 0) return 0;
    /* a size past 2^48 bytes counts as 2^48: the greedy sums stay exact and never overflow */
    return psg_ckd_mul_i64(&bytes, numel, (int64_t)psg_dtype_size(dt)) || bytes > (int64_t)1 << 48
               ? (int64_t)1 << 48
               : bytes;
}

/* The variable node this node belongs beside: the producer of its first
 * RESOURCE input, else the variable whose name is the longest proper
 * prefix ("<var>/...") of its name; -1 for none. */
static int owner_variable(const psg_graph_t *g, const psg_node_t *n) {
    for (int i = 0; i < n->num_inputs; i++) {
        psg_endpoint_t e = n->inputs[i];
        if (e.node >= 0 && e.node < g->num_nodes &&
            g->nodes[e.node]->out_dtypes[e.index] == PSG_DT_RESOURCE)
            return e.node;
    }
    char prefix[1024];
    snprintf(prefix, sizeof prefix, "%s", n->name);
    for (char *slash = strrchr(prefix, '/'); slash; slash = strrchr(prefix, '/')) {
        *slash = '\0';
        int id = psg_graph_find(g, prefix);
        if (id >= 0 && (g->nodes[id]->def->flags & PSG_OP_VARIABLE)) return id;
    }
    return -1;
}

static int choose_task(psg_replica_setter_t *s) {
    if (s->strategy == PSG_PS_ROUND_ROBIN) return s->next_rr++ % s->ps_tasks;
    int best = 0;
    for (int k = 1; k < s->ps_tasks; k++)
        if (s->bytes[k] < s->bytes[best]) best = k;
    return best;
}

static const char *setter_fn(void *ctx, const psg_graph_t *g, const psg_node_t *n) {
    psg_replica_setter_t *s = ctx;
    psg_device_name_t cur, d;
    if (psg_device_name_parse(n->device, &cur) < 0) return NULL; /* placement reports it */
    bool is_var = n->def->flags & PSG_OP_VARIABLE;
    int owner = owner_variable(g, n);
    if (owner >= 0) {
        /* beside its variable: the variable's fields win (a GPU tower's scope must not move an
         * initial value or a slot to a GPU the ps does not have), the node's own fill the rest */
        if (psg_device_name_parse(g->nodes[owner]->device, &d) < 0) return NULL;
        psg_device_name_merge(&cur, &d, &d);
        /* a slot variable's bytes count on its variable's ps */
        if (is_var && d.has_task && d.task < s->ps_tasks && s->ps.has_job && d.has_job &&
            !strcmp(d.job, s->ps.job))
            s->bytes[d.task] += variable_bytes(n);
    } else if (is_var && s->ps_tasks > 0) {
        d = s->ps;
        if (!cur.has_job || !s->ps.has_job || !strcmp(cur.job, s->ps.job)) {
            int task = cur.has_task ? cur.task : choose_task(s);
            if (task >= 0 && task < s->ps_tasks) s->bytes[task] += variable_bytes(n);
            d.has_task = true;
            d.task = task;
        }
        psg_device_name_merge(&d, &cur, &d);
    } else {
        psg_device_name_merge(&s->worker, &cur, &d);
    }
    return psg_device_name_str(&d, s->out, sizeof s->out);
}

void psg_graph_push_replica_setter(psg_graph_t *g, psg_replica_setter_t *s) {
    psg_graph_push_device_fn(g, setter_fn, s);
}

/* ---- partitioned variables ---- */

int psg_partitioned_variable(psg_graph_t *g, const char *name, psg_dtype_t dt,
                             const psg_shape_t *shape, psg_initializer_t init, bool trainable,
                             const psg_partitioner_t *p, psg_partitioned_var_t *out) {
    memset(out, 0, sizeof *out);
    if (!name || strlen(name) + 16 > sizeof out->name)
        return psg_error_set("partitioned variable: name missing or too long");
    if (!psg_shape_is_complete(shape) || shape->rank < 1 || shape->dims[0] < 1)
        return psg_error_set("partitioned variable '%s': needs a complete shape with rows", name);
    int64_t rows = shape->dims[0];
    int64_t n;
    if (p && p->num_shards > 0) {
        n = p->num_shards;
    } else if (p && p->min_shard_bytes > 0) {
        int64_t total;
        if (psg_ckd_mul_i64(&total, psg_shape_numel(shape), (int64_t)psg_dtype_size(dt)) ||
            total < 0)
            return psg_error_set("partitioned variable '%s': its size is not known or overflows",
                                 name);
        n = total / p->min_shard_bytes;
        if (n < 1) n = 1;
        if (p->max_shards > 0 && n > p->max_shards) n = p->max_shards;
    } else {
        return psg_error_set("partitioned variable '%s': the partitioner asks for no shards", name);
    }
    if (n > rows) n = rows;
    if (n > PSG_MAX_SHARDS)
        return psg_error_set("partitioned variable '%s': %lld shards, at most %d", name,
                             (long long)n, PSG_MAX_SHARDS);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->shape = *shape;
    out->num_shards = (int)n;
    psg_initializer_t shard_init = init;
    if (init.kind && !strcmp(init.kind, "glorot_uniform")) {
        /* the fans of the whole variable, not of a shard */
        shard_init.kind = "uniform";
        shard_init.scale = psg_glorot_uniform_scale(shape);
    }
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        psg_shape_t s = *shape;
        s.dims[0] = rows / n + (i < rows % n ? 1 : 0);
        char part[160];
        snprintf(part, sizeof part, "%s/part_%d", name, i);
        out->offsets[i] = at;
        out->shards[i] = psg_variable(g, part, dt, &s, shard_init, trainable);
        if (!psg_endpoint_valid(out->shards[i]))
            return psg_error_wrap("partitioned variable '%s'", name);
        at += s.dims[0];
    }
    out->offsets[n] = at;
    return 0;
}

psg_endpoint_t psg_partitioned_read(psg_graph_t *g, const char *name,
                                    const psg_partitioned_var_t *pv) {
    psg_endpoint_t parts[PSG_MAX_SHARDS];
    char buf[200];
    for (int i = 0; i < pv->num_shards; i++) {
        snprintf(buf, sizeof buf, "%s/part_%d/read", pv->name, i);
        parts[i] = psg_read_variable(g, buf, pv->shards[i]);
    }
    snprintf(buf, sizeof buf, "%s/concat", pv->name);
    if (pv->num_shards == 1) return psg_identity(g, name ? name : buf, parts[0]);
    return psg_concat(g, name ? name : buf, pv->num_shards, parts, 0);
}

/* ---- the placement pass ---- */

static int find_root(int *parent, int i) {
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

/* The lower id becomes the root, so a group's root is its variable. */
static void unite(int *parent, int a, int b) {
    a = find_root(parent, a);
    b = find_root(parent, b);
    if (a == b) return;
    if (a < b)
        parent[b] = a;
    else
        parent[a] = b;
}

static bool nd_has_any(const psg_device_name_t *d) {
    return d->has_job || d->has_replica || d->has_task || d->has_type || d->has_id;
}

/* Checks a complete device against the cluster and the group's kernels;
 * may move it to the CPU (soft placement). Error names node `who`. */
static int check_device(const psg_graph_t *g, const int *parent, int root,
                        const psg_placement_options_t *opt, psg_device_name_t *d) {
    const psg_node_t *who = g->nodes[root];
    char buf[PSG_DEVICE_NAME_MAX];
    if (strcmp(d->type, "CPU") && strcmp(d->type, "GPU"))
        return psg_error_set("node '%s' (%s): device '%s': unknown device type '%s' (CPU or GPU)",
                             who->name, psg_node_op(who), psg_device_name_str(d, buf, sizeof buf),
                             d->type);
    if (!strcmp(d->type, "GPU") && opt && opt->allow_soft_placement && opt->soft_missing_gpus &&
        d->id >= psg_gpu_count()) {
        snprintf(d->type, sizeof d->type, "CPU");
        d->id = 0;
    }
    if (!strcmp(d->type, "GPU")) {
        for (int i = root; i < g->num_nodes; i++) {
            if (find_root((int *)parent, i) != root || g->nodes[i]->def->cuda) continue;
            if (opt && opt->allow_soft_placement) {
                snprintf(d->type, sizeof d->type, "CPU");
                d->id = 0;
                break;
            }
            return psg_error_set("node '%s' (%s): no GPU kernel for this op, but it is placed on "
                                 "'%s' (allow soft placement to run it on the CPU)",
                                 g->nodes[i]->name, psg_node_op(g->nodes[i]),
                                 psg_device_name_str(d, buf, sizeof buf));
        }
    }
    if (!opt || opt->num_jobs <= 0) return 0;
    for (int j = 0; j < opt->num_jobs; j++) {
        const psg_job_spec_t *job = &opt->jobs[j];
        if (!job->name || strcmp(job->name, d->job)) continue;
        if (d->task >= job->num_tasks)
            return psg_error_set(
                "node '%s' (%s): device '%s' does not exist: job '%s' has %d task%s", who->name,
                psg_node_op(who), psg_device_name_str(d, buf, sizeof buf), job->name,
                job->num_tasks, job->num_tasks == 1 ? "" : "s");
        if (!strcmp(d->type, "GPU") && d->id >= job->num_gpus)
            return psg_error_set(
                "node '%s' (%s): device '%s' does not exist: job '%s' has %d GPU%s per task",
                who->name, psg_node_op(who), psg_device_name_str(d, buf, sizeof buf), job->name,
                job->num_gpus, job->num_gpus == 1 ? "" : "s");
        return 0;
    }
    return psg_error_set(
        "node '%s' (%s): device '%s' names job '%s', which the cluster does not have", who->name,
        psg_node_op(who), psg_device_name_str(d, buf, sizeof buf), d->job);
}

/* The variables placed on each ps task against opt->ps_memory_limit, in creation order:
 * the first that does not fit is named, with its bytes and the limits. */
static int check_ps_memory(const psg_graph_t *g, const psg_placement_options_t *opt) {
    if (!opt || opt->ps_memory_limit <= 0) return 0;
    int64_t used[PSG_MAX_SHARDS * 4] = {0}, total = 0;
    int ntasks = 0;
    for (int j = 0; j < opt->num_jobs; j++)
        if (opt->jobs[j].name && !strcmp(opt->jobs[j].name, "ps")) ntasks = opt->jobs[j].num_tasks;
    for (int i = 0; i < g->num_nodes; i++)
        if (g->nodes[i]->def->flags & PSG_OP_VARIABLE) total += variable_bytes(g->nodes[i]);
    for (int i = 0; i < g->num_nodes; i++) {
        const psg_node_t *n = g->nodes[i];
        psg_device_name_t d;
        if (!(n->def->flags & PSG_OP_VARIABLE) ||
            psg_device_name_parse(psg_node_assigned_device(n), &d) < 0 || !d.has_job ||
            strcmp(d.job, "ps") || !d.has_task || d.task < 0 ||
            d.task >= (int)(sizeof used / sizeof used[0]))
            continue;
        int64_t b = variable_bytes(n);
        used[d.task] += b;
        if (used[d.task] > opt->ps_memory_limit)
            return psg_error_set(
                "variable '%s' (%lld bytes) does not fit on /job:ps/task:%d: its variables "
                "would take %lld bytes, over the ps memory limit of %lld bytes a task "
                "(%d ps tasks, %lld bytes of variables in all); give more ps tasks or a "
                "higher --ps-memory-limit",
                n->name, (long long)b, d.task, (long long)used[d.task],
                (long long)opt->ps_memory_limit, ntasks, (long long)total);
    }
    return 0;
}

int psg_place(psg_graph_t *g, const psg_placement_options_t *opt) {
    int n = g->num_nodes, rc = -1;
    const char *dflt_str = opt && opt->default_device
                               ? opt->default_device
                               : "/job:localhost/replica:0/task:0/device:CPU:0";
    psg_device_name_t dflt;
    if (psg_device_name_parse(dflt_str, &dflt) < 0)
        return psg_error_wrap("placement: default device");
    if (g->error) return psg_error_set("placement: the graph has a build error: %s", g->error);
    psg_device_name_t *spec = calloc((size_t)n + 1, sizeof *spec);
    psg_device_name_t *group = calloc((size_t)n + 1, sizeof *group);
    int *parent = malloc(sizeof(int) * ((size_t)n + 1));
    int *asker = malloc(sizeof(int) * ((size_t)n + 1)); /* a member that set the group's fields */
    if (!spec || !group || !parent || !asker) {
        psg_error_set("out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const psg_node_t *nd = g->nodes[i];
        parent[i] = i;
        asker[i] = -1;
        if (psg_device_name_parse(nd->device, &spec[i]) < 0) {
            psg_error_wrap("node '%s' (%s)", nd->name, psg_node_op(nd));
            goto done;
        }
        for (int k = 0; k < nd->num_inputs; k++) {
            psg_endpoint_t e = nd->inputs[k];
            if (g->nodes[e.node]->out_dtypes[e.index] == PSG_DT_RESOURCE) unite(parent, i, e.node);
        }
    }
    /* each group takes the fields its members ask for; two different asks are an error */
    for (int i = 0; i < n; i++) {
        int r = find_root(parent, i);
        if (!psg_device_name_compatible(&group[r], &spec[i])) {
            const psg_node_t *a = g->nodes[i], *b = g->nodes[asker[r]], *v = g->nodes[r];
            char ga[PSG_DEVICE_NAME_MAX];
            psg_error_set(
                "node '%s' (%s) uses the resource of '%s' (%s) and must sit beside it, but "
                "asks for '%s' while '%s' asks for '%s'",
                a->name, psg_node_op(a), v->name, psg_node_op(v), a->device, b->name,
                psg_device_name_str(&group[r], ga, sizeof ga));
            goto done;
        }
        psg_device_name_merge(&group[r], &spec[i], &group[r]);
        if (asker[r] < 0 && nd_has_any(&spec[i])) asker[r] = i;
    }
    for (int r = 0; r < n; r++) {
        if (find_root(parent, r) != r) continue;
        psg_device_name_t d;
        psg_device_name_merge(&dflt, &group[r], &d);
        if (!d.has_job) d.has_job = true, snprintf(d.job, sizeof d.job, "localhost");
        if (!d.has_replica) d.has_replica = true, d.replica = 0;
        if (!d.has_task) d.has_task = true, d.task = 0;
        if (!d.has_type) d.has_type = true, snprintf(d.type, sizeof d.type, "CPU");
        if (!d.has_id) d.has_id = true, d.id = 0;
        if (check_device(g, parent, r, opt, &d) < 0) goto done;
        group[r] = d;
    }
    for (int i = 0; i < n; i++) {
        char buf[PSG_DEVICE_NAME_MAX];
        psg_device_name_str(&group[find_root(parent, i)], buf, sizeof buf);
        if (psg_graph_set_assigned_device(g, i, buf) < 0) goto done;
    }
    rc = check_ps_memory(g, opt);
done:
    free(spec);
    free(group);
    free(parent);
    free(asker);
    return rc;
}
