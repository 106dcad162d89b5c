/* The partitioner: prunes the placed graph to one step's needs and copies
 * each node into its device's (or its task's) graph, in the original (topological) order,
 * putting a Send/Recv pair on every edge between devices, once per tensor
 * and destination. Not the executor: partitions run as ordinary plans. */
#include "graph/graph_layout.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "runtime/partition.h"

#include <stdlib.h>
#include <string.h>

/* (producer node, output or -1 for control, destination part) -> Recv id */
typedef struct {
    int node, index, part, recv;
} edge_slot_t;

typedef struct {
    const psg_graph_t *g;
    const psg_partition_options_t *opt;
    bool by_task; /* opt->by_task */
    psg_partition_set_t *set;
    int *part_of;    /* original id -> partition, -1 when not needed */
    int *copy_of;    /* original id -> id in its partition's graph */
    int *canon;      /* by_task: original id -> the node that stands for it (a read's twin) */
    const char *fed; /* original id -> fed this step */
    edge_slot_t *edges;
    int num_edges, cap_edges; /* open addressing, cap a power of 2 */
} cutter_t;

static void *xgrow(void *p, int *cap, int need, size_t elem) {
    if (need <= *cap) return p;
    int c = *cap ? *cap : 4;
    while (c < need) c *= 2;
    void *q = realloc(p, elem * (size_t)c);
    PSG_ASSERT(q);
    *cap = c;
    return q;
}

static uint64_t edge_hash(int node, int index, int part) {
    uint64_t h = (uint64_t)(uint32_t)node * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t)(uint32_t)(index + 1) * 0xbf58476d1ce4e5b9ull;
    h ^= (uint64_t)(uint32_t)part * 0x94d049bb133111ebull;
    return h ^ (h >> 29);
}

static edge_slot_t *edge_find(cutter_t *c, int node, int index, int part) {
    if ((c->num_edges + 1) * 2 > c->cap_edges) {
        int old_cap = c->cap_edges;
        edge_slot_t *old = c->edges;
        c->cap_edges = old_cap ? old_cap * 2 : 64;
        c->edges = malloc(sizeof *c->edges * (size_t)c->cap_edges);
        PSG_ASSERT(c->edges);
        for (int i = 0; i < c->cap_edges; i++) c->edges[i].recv = -1;
        for (int i = 0; i < old_cap; i++) {
            if (old[i].recv < 0) continue;
            size_t m = (size_t)c->cap_edges - 1,
                   j = edge_hash(old[i].node, old[i].index, old[i].part) & m;
            while (c->edges[j].recv >= 0) j = (j + 1) & m;
            c->edges[j] = old[i];
        }
        free(old);
    }
    size_t m = (size_t)c->cap_edges - 1;
    for (size_t j = edge_hash(node, index, part) & m;; j = (j + 1) & m) {
        edge_slot_t *e = &c->edges[j];
        if (e->recv < 0 || (e->node == node && e->index == index && e->part == part)) return e;
    }
}

/* A name free in both the original graph and partition pg. */
static void unique_name(const psg_graph_t *g, const psg_graph_t *pg, const char *base, char *out,
                        size_t size) {
    snprintf(out, size, "%s", base);
    for (int k = 1; psg_graph_find(g, out) >= 0 || psg_graph_find(pg, out) >= 0; k++)
        snprintf(out, size, "%.1000s_%d", base, k);
}

static void copy_attr(psg_node_builder_t *b, const psg_attr_t *a) {
    switch (a->type) {
    case PSG_ATTR_INT: psg_node_attr_int(b, a->key, a->u.i); break;
    case PSG_ATTR_FLOAT: psg_node_attr_float(b, a->key, a->u.f); break;
    case PSG_ATTR_BOOL: psg_node_attr_bool(b, a->key, a->u.b); break;
    case PSG_ATTR_STR: psg_node_attr_str(b, a->key, a->u.s); break;
    case PSG_ATTR_INTS: psg_node_attr_ints(b, a->key, a->u.ints.n, a->u.ints.v); break;
    case PSG_ATTR_FLOATS: psg_node_attr_floats(b, a->key, a->u.floats.n, a->u.floats.v); break;
    case PSG_ATTR_SHAPE: psg_node_attr_shape(b, a->key, &a->u.shape); break;
    case PSG_ATTR_DTYPE: psg_node_attr_dtype(b, a->key, a->u.dtype); break;
    case PSG_ATTR_TENSOR: {
        psg_tensor_t *t = psg_tensor_ref(a->u.tensor);
        psg_node_attr_tensor(b, a->key, &t);
        break;
    }
    }
}

/* Finishes b in partition p with its device set; returns the id or -1. */
static int finish_in(psg_partition_t *p, psg_node_builder_t *b) {
    psg_node_set_device(b, p->device);
    int id = psg_node_finish(b);
    if (id >= 0) psg_graph_set_assigned_device(p->graph, id, p->device);
    return id;
}

static void edge_attrs(cutter_t *c, psg_node_builder_t *b, const char *edge,
                       const psg_partition_t *src, const psg_partition_t *dst) {
    uint64_t inc =
        c->opt && c->opt->incarnation ? c->opt->incarnation(c->opt->ctx, src->device) : 0;
    psg_node_attr_str(b, "tensor_name", edge);
    psg_node_attr_str(b, "send_device", src->device);
    psg_node_attr_int(b, "send_device_incarnation", (int64_t)inc);
    psg_node_attr_str(b, "recv_device", dst->device);
    psg_node_attr_bool(b, "client_terminated", false);
}

static void add_target(psg_partition_t *p, int *cap, int id) {
    p->targets = xgrow(p->targets, cap, p->num_targets + 1, sizeof(int));
    p->targets[p->num_targets++] = id;
}

static int canon_of(const cutter_t *c, int id);

/* Whether original node id is a Const with no inputs, not fed. */
static bool plain_const(const cutter_t *c, int id) {
    const psg_node_t *n = c->g->nodes[id];
    return !c->fed[id] && n->num_inputs == 0 && n->num_controls == 0 &&
           !strcmp(psg_node_op(n), "Const");
}

/* Whether node n's input `in`, from another task, is a constant that n's task copies rather
 * than receives (the learning rate and momentum of an optimizer on the ps were two Send/Recv
 * pairs from the worker every step, issue 33): only when n also receives something else from
 * that task, which keeps n waiting for that task's step as before (an op fed by constants
 * alone, a token's enqueue, would run ahead of its step). */
static bool copied_const(const cutter_t *c, const psg_node_t *n, int in) {
    int id = canon_of(c, n->inputs[in].node);
    if (!c->by_task || !plain_const(c, id)) return false;
    int from = c->part_of[id];
    for (int i = 0; i < n->num_inputs; i++) {
        int k = canon_of(c, n->inputs[i].node);
        if (i != in && c->part_of[k] == from && !plain_const(c, k)) return true;
    }
    for (int i = 0; i < n->num_controls; i++)
        if (c->part_of[canon_of(c, n->controls[i])] == from) return true;
    return false;
}

/* The copy in partition `dst` of Const node `node` (copied_const), made the first time. */
static int const_in(cutter_t *c, int node, int dst) {
    edge_slot_t *e = edge_find(c, node, 0, dst);
    if (e->recv >= 0) return e->recv;
    const psg_node_t *n = c->g->nodes[node];
    psg_partition_t *to = &c->set->partitions[dst];
    char name[1200], base[1200];
    snprintf(base, sizeof base, "%s/_copy_%d", n->name, dst);
    unique_name(c->g, to->graph, base, name, sizeof name);
    psg_node_builder_t *b = psg_node_begin(to->graph, "Const", name);
    for (int i = 0; i < n->num_attrs; i++) copy_attr(b, &n->attrs[i]);
    int id = finish_in(to, b);
    if (id < 0) return -1;
    e = edge_find(c, node, 0, dst); /* the table may have grown */
    *e = (edge_slot_t){node, 0, dst, id};
    c->num_edges++;
    return id;
}

/* The Recv in partition `dst` of output `index` of original node `node`
 * (index -1: its control edge), made with its Send the first time. */
static int recv_of(cutter_t *c, int node, int index, int dst, int *target_caps) {
    edge_slot_t *e = edge_find(c, node, index, dst);
    if (e->recv >= 0) return e->recv;
    const psg_node_t *n = c->g->nodes[node];
    int srci = c->part_of[node];
    psg_partition_t *src = &c->set->partitions[srci], *to = &c->set->partitions[dst];
    char edge[1100], name[1200], base[1200];
    psg_endpoint_t sent = {c->copy_of[node], index};
    psg_dtype_t dt = PSG_DT_F32;
    psg_shape_t shape = psg_shape_scalar();
    if (index >= 0) {
        dt = n->out_dtypes[index];
        shape = n->out_shapes[index];
        if (dt == PSG_DT_RESOURCE)
            return psg_error_set("node '%s' (%s): its resource handle is used on '%s' but it is on "
                                 "'%s' (place its users beside it)",
                                 n->name, psg_node_op(n), to->device, src->device);
        snprintf(edge, sizeof edge, "%s:%d", n->name, index);
    } else {
        /* a control edge: a scalar dummy that runs after the node */
        snprintf(edge, sizeof edge, "^%s", n->name);
        snprintf(base, sizeof base, "%s/_control", n->name);
        unique_name(c->g, src->graph, base, name, sizeof name);
        psg_tensor_t *zero = psg_tensor_scalar_f32(0.0f);
        psg_node_builder_t *b = psg_node_begin(src->graph, "Const", name);
        psg_node_attr_tensor(b, "value", &zero);
        psg_node_add_control(b, c->copy_of[node]);
        sent = (psg_endpoint_t){finish_in(src, b), 0};
        if (sent.node < 0) return -1;
    }
    snprintf(base, sizeof base, "%s/_send_%d", n->name, dst);
    unique_name(c->g, src->graph, base, name, sizeof name);
    psg_node_builder_t *b = psg_node_begin(src->graph, "Send", name);
    psg_node_add_input(b, sent);
    edge_attrs(c, b, edge, src, to);
    int send = finish_in(src, b);
    if (send < 0) return -1;
    add_target(src, &target_caps[srci], send);
    src->num_sends++;

    snprintf(base, sizeof base, "%s/_recv_%d", n->name, index < 0 ? 0 : index);
    unique_name(c->g, to->graph, base, name, sizeof name);
    b = psg_node_begin(to->graph, "Recv", name);
    edge_attrs(c, b, edge, src, to);
    psg_node_attr_dtype(b, "dtype", dt);
    psg_node_attr_shape(b, "shape", &shape);
    int recv = finish_in(to, b);
    if (recv < 0) return -1;
    to->num_recvs++;
    e = edge_find(c, node, index, dst); /* the table may have grown */
    *e = (edge_slot_t){node, index, dst, recv};
    c->num_edges++;
    return recv;
}

void psg_partition_set_destroy(psg_partition_set_t **sp) {
    if (!sp || !*sp) return;
    psg_partition_set_t *s = *sp;
    *sp = NULL;
    for (int i = 0; i < s->num_partitions; i++) {
        psg_partition_t *p = &s->partitions[i];
        psg_graph_destroy(&p->graph);
        free(p->feeds);
        free(p->feed_index);
        free(p->fetches);
        free(p->fetch_index);
        free(p->targets);
    }
    free(s->partitions);
    free(s);
}

int psg_partition_set_find(const psg_partition_set_t *set, const char *device) {
    psg_device_name_t want, have;
    if (psg_device_name_parse(device, &want) < 0) return -1;
    for (int i = 0; i < set->num_partitions; i++)
        if (psg_device_name_parse(set->partitions[i].device, &have) == 0 &&
            psg_device_name_compatible(&want, &have))
            return i;
    return -1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Marks what the fetches and targets need, not looking past fed nodes. */
static int mark_needed(const psg_graph_t *g, const char *fed, int n_fetches,
                       const psg_endpoint_t *fetches, int n_targets, const int *targets,
                       char *needed) {
    int total = g->num_nodes, sp = 0;
    int *stack = malloc(sizeof(int) * ((size_t)total + 1));
    if (!stack) return psg_error_set("out of memory");
    for (int r = 0; r < n_fetches + n_targets; r++) {
        int root = r < n_fetches ? fetches[r].node : targets[r - n_fetches];
        if (root < 0 || root >= total ||
            (r < n_fetches &&
             (fetches[r].index < 0 || fetches[r].index >= g->nodes[root]->num_outputs))) {
            free(stack);
            return psg_error_set("partition: %s %d refers to a missing node",
                                 r < n_fetches ? "fetch" : "target",
                                 r < n_fetches ? r : r - n_fetches);
        }
        if (needed[root]) continue;
        needed[root] = 1;
        stack[sp++] = root;
        while (sp) {
            const psg_node_t *n = g->nodes[stack[--sp]];
            if (fed[n->id]) continue;
            for (int i = 0; i < n->num_inputs + n->num_controls; i++) {
                int dep = i < n->num_inputs ? n->inputs[i].node : n->controls[i - n->num_inputs];
                if (!needed[dep]) {
                    needed[dep] = 1;
                    stack[sp++] = dep;
                }
            }
        }
    }
    free(stack);
    return 0;
}

/* By task, the partition a placed node goes to: its task's CPU:0. */
static void task_key(const psg_device_name_t *d, char *out, size_t size) {
    psg_device_name_t k = *d;
    snprintf(k.type, sizeof k.type, "CPU");
    k.id = 0;
    psg_device_name_str(&k, out, size);
}

/* Sorts the devices (or tasks) of the needed nodes into partitions and sets part_of. */
static int make_partitions(cutter_t *c, const char *needed) {
    const psg_graph_t *g = c->g;
    int total = g->num_nodes, nd = 0;
    const char **devs = malloc(sizeof(char *) * ((size_t)total + 1));
    char(*keys)[PSG_DEVICE_NAME_MAX] =
        c->by_task ? malloc(sizeof *keys * ((size_t)total + 1)) : NULL;
    if (!devs || (c->by_task && !keys)) {
        free(devs);
        return psg_error_set("out of memory");
    }
    for (int i = 0; i < total; i++) {
        if (!needed[i]) continue;
        const psg_node_t *n = g->nodes[i];
        psg_device_name_t d;
        if (!n->assigned_device[0] || psg_device_name_parse(n->assigned_device, &d) < 0 ||
            !psg_device_name_is_complete(&d)) {
            free(devs);
            free(keys);
            return psg_error_set(
                "partition: node '%s' (%s) has no complete assigned device ('%s'): "
                "run psg_place first",
                n->name, psg_node_op(n), n->assigned_device);
        }
        if (keys) task_key(&d, keys[i], sizeof keys[i]);
        devs[nd++] = keys ? keys[i] : n->assigned_device;
    }
    qsort(devs, (size_t)nd, sizeof *devs, cmp_str);
    int np = 0;
    for (int i = 0; i < nd; i++)
        if (i == 0 || strcmp(devs[i], devs[i - 1])) devs[np++] = devs[i];
    c->set->partitions = calloc((size_t)np + 1, sizeof(psg_partition_t));
    if (!c->set->partitions) {
        free(devs);
        return psg_error_set("out of memory");
    }
    c->set->num_partitions = np;
    for (int k = 0; k < np; k++) {
        psg_partition_t *p = &c->set->partitions[k];
        psg_device_name_t d;
        psg_device_name_parse(devs[k], &d);
        psg_device_name_str(&d, p->device, sizeof p->device);
        psg_device_name_task_str(&d, p->task, sizeof p->task);
        p->graph = psg_graph_new();
        if (!p->graph) {
            free(devs);
            free(keys);
            return -1;
        }
    }
    for (int i = 0; i < total; i++) {
        if (!needed[i]) continue;
        const char *key = keys ? keys[i] : g->nodes[i]->assigned_device;
        const char **hit = bsearch(&key, devs, (size_t)np, sizeof *devs, cmp_str);
        PSG_ASSERT(hit);
        c->part_of[i] = (int)(hit - devs);
    }
    free(devs);
    free(keys);
    return 0;
}

static int canon_of(const cutter_t *c, int id) {
    return c->canon ? c->canon[id] : id;
}

/* By task: the reads of one variable with no control input are one read (the first), so
 * a worker's towers pull each variable once a step, not once a tower. Reads with nothing
 * ordering them may run in any order anyway; a read ordered by a control input is kept.
 * Twins leave `needed`; canon maps each to its first. */
static int merge_read_twins(cutter_t *c, char *needed, const char *fed) {
    const psg_graph_t *g = c->g;
    int total = g->num_nodes, *first = malloc(sizeof(int) * ((size_t)total + 1));
    c->canon = malloc(sizeof(int) * ((size_t)total + 1));
    if (!first || !c->canon) {
        free(first);
        return psg_error_set("out of memory");
    }
    for (int i = 0; i < total; i++) c->canon[i] = i, first[i] = -1;
    for (int i = 0; i < total; i++) {
        const psg_node_t *n = g->nodes[i];
        if (!needed[i] || fed[i] || n->num_inputs != 1 || n->num_controls ||
            strcmp(psg_node_op(n), "ReadVariable") || n->inputs[0].index != 0)
            continue;
        int h = n->inputs[0].node, f = first[h];
        if (f < 0) {
            first[h] = i;
        } else if (!strcmp(g->nodes[f]->assigned_device, n->assigned_device) &&
                   n->out_dtypes[0] == g->nodes[f]->out_dtypes[0]) {
            c->canon[i] = f;
            needed[i] = 0;
        }
    }
    free(first);
    return 0;
}

/* Copies needed node id into its partition (a fed node as a placeholder). */
static int copy_node(cutter_t *c, int id, bool fed, int *target_caps) {
    const psg_node_t *n = c->g->nodes[id];
    int pi = c->part_of[id];
    psg_partition_t *p = &c->set->partitions[pi];
    psg_node_builder_t *b;
    if (fed) {
        if (n->num_outputs != 1)
            return psg_error_set("partition: node '%s' (%s) is fed but has %d outputs (feed a "
                                 "node with one output)",
                                 n->name, psg_node_op(n), n->num_outputs);
        b = psg_node_begin(p->graph, "Placeholder", n->name);
        psg_node_attr_dtype(b, "dtype", n->out_dtypes[0]);
        psg_node_attr_shape(b, "shape", &n->out_shapes[0]);
    } else {
        /* the copies' ids of its inputs, then of its control inputs (on the heap: a node
         * may have any number) */
        int *ins = malloc(sizeof(int) * ((size_t)n->num_inputs + (size_t)n->num_controls + 1)),
            *ctl = ins ? ins + n->num_inputs : NULL;
        if (!ins) return psg_error_set("out of memory");
        for (int i = 0; i < n->num_inputs; i++) {
            psg_endpoint_t e = n->inputs[i];
            e.node = canon_of(c, e.node);
            ins[i] = c->part_of[e.node] == pi ? c->copy_of[e.node]
                     : copied_const(c, n, i)  ? const_in(c, e.node, pi)
                                              : recv_of(c, e.node, e.index, pi, target_caps);
            if (ins[i] < 0) return free(ins), -1;
        }
        for (int i = 0; i < n->num_controls; i++) {
            int dep = canon_of(c, n->controls[i]);
            ctl[i] = c->part_of[dep] == pi ? c->copy_of[dep] : recv_of(c, dep, -1, pi, target_caps);
            if (ctl[i] < 0) return free(ins), -1;
        }
        b = psg_node_begin(p->graph, psg_node_op(n), n->name);
        for (int i = 0; i < n->num_inputs; i++) {
            bool local = c->part_of[canon_of(c, n->inputs[i].node)] == pi;
            psg_node_add_input(b, (psg_endpoint_t){ins[i], local ? n->inputs[i].index : 0});
        }
        for (int i = 0; i < n->num_controls; i++) psg_node_add_control(b, ctl[i]);
        free(ins);
        for (int i = 0; i < n->num_attrs; i++) copy_attr(b, &n->attrs[i]);
    }
    psg_node_set_device(b, n->device);
    int nid = psg_node_finish(b);
    if (nid < 0) return -1;
    if (strcmp(psg_node_name(psg_graph_node(p->graph, nid)), n->name))
        return psg_error_set("partition: node '%s' was renamed (internal error)", n->name);
    psg_graph_set_assigned_device(p->graph, nid, c->by_task ? n->assigned_device : p->device);
    c->copy_of[id] = nid;
    return 0;
}

psg_partition_set_t *psg_partition_graph(const psg_graph_t *g, int n_feeds,
                                         const psg_endpoint_t *feeds, int n_fetches,
                                         const psg_endpoint_t *fetches, int n_targets,
                                         const int *targets, const psg_partition_options_t *opt) {
    int total = g->num_nodes;
    cutter_t c = {.g = g, .opt = opt, .by_task = opt && opt->by_task};
    char *fed = calloc((size_t)g->num_nodes + 1, 1);
    c.fed = fed;
    char *needed = calloc((size_t)total + 1, 1);
    c.set = calloc(1, sizeof *c.set);
    c.part_of = malloc(sizeof(int) * ((size_t)total + 1));
    c.copy_of = malloc(sizeof(int) * ((size_t)total + 1));
    int *target_caps = NULL, *fetch_caps = NULL, *feed_caps = NULL;
    if (!fed || !needed || !c.set || !c.part_of || !c.copy_of) {
        psg_error_set("out of memory");
        goto fail;
    }
    if (g->error) {
        psg_error_set("partition: the graph has a build error: %s", g->error);
        goto fail;
    }
    for (int i = 0; i < total; i++) c.part_of[i] = c.copy_of[i] = -1;
    for (int i = 0; i < n_feeds; i++) {
        if (feeds[i].node < 0 || feeds[i].node >= total || feeds[i].index < 0 ||
            feeds[i].index >= g->nodes[feeds[i].node]->num_outputs) {
            psg_error_set("partition: feed %d refers to a missing output", i);
            goto fail;
        }
        fed[feeds[i].node] = 1;
    }
    if (mark_needed(g, fed, n_fetches, fetches, n_targets, targets, needed) < 0) goto fail;
    if (c.by_task && merge_read_twins(&c, needed, fed) < 0) goto fail;
    if (make_partitions(&c, needed) < 0) goto fail;
    int np = c.set->num_partitions;
    target_caps = calloc((size_t)np + 1, sizeof(int));
    fetch_caps = calloc((size_t)np + 1, sizeof(int));
    feed_caps = calloc((size_t)np + 1, sizeof(int));
    if (!target_caps || !fetch_caps || !feed_caps) {
        psg_error_set("out of memory");
        goto fail;
    }
    for (int id = 0; id < total; id++) {
        if (needed[id] && copy_node(&c, id, fed[id], target_caps) < 0) {
            psg_error_wrap("partition");
            goto fail;
        }
    }
    for (int i = 0; i < n_feeds; i++) {
        int id = feeds[i].node;
        if (!needed[id]) continue; /* the step does not need it */
        psg_partition_t *p = &c.set->partitions[c.part_of[id]];
        p->feeds = xgrow(p->feeds, &feed_caps[c.part_of[id]], p->num_feeds + 1, sizeof *p->feeds);
        p->feed_index = realloc(p->feed_index, sizeof(int) * (size_t)feed_caps[c.part_of[id]]);
        PSG_ASSERT(p->feed_index);
        p->feeds[p->num_feeds] = (psg_endpoint_t){c.copy_of[id], 0};
        p->feed_index[p->num_feeds++] = i;
    }
    for (int i = 0; i < n_fetches; i++) {
        int id = canon_of(&c, fetches[i].node), pi = c.part_of[id];
        psg_partition_t *p = &c.set->partitions[pi];
        p->fetches = xgrow(p->fetches, &fetch_caps[pi], p->num_fetches + 1, sizeof *p->fetches);
        p->fetch_index = realloc(p->fetch_index, sizeof(int) * (size_t)fetch_caps[pi]);
        PSG_ASSERT(p->fetch_index);
        p->fetches[p->num_fetches] =
            (psg_endpoint_t){c.copy_of[id], fed[id] ? 0 : fetches[i].index};
        p->fetch_index[p->num_fetches++] = i;
    }
    for (int i = 0; i < n_targets; i++) {
        int t = canon_of(&c, targets[i]), pi = c.part_of[t];
        add_target(&c.set->partitions[pi], &target_caps[pi], c.copy_of[t]);
    }
    goto done;
fail:
    psg_partition_set_destroy(&c.set);
done:
    free(fed);
    free(needed);
    free(c.part_of);
    free(c.copy_of);
    free(c.canon);
    free(c.edges);
    free(target_caps);
    free(fetch_caps);
    free(feed_caps);
    return c.set;
}
