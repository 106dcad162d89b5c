/* The planner: a graph's nodes for a set of feeds, fetches and targets, in a topological
 * order found without recursion, each with its kernel, input slots and consumers (the
 * resource groups that order overlapping runs: resource_groups.c). Bounded by the graph
 * whatever a peer put in it (a dependency listed many times, a node of 200,000 inputs). Not
 * the running (executor.c). */
#include "runtime/plan_internal.h"

#include "psgraph/device.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- building a plan ---- */

static int slot_of(const psg_plan_t *p, const int *local_of, psg_endpoint_t e) {
    return p->nodes[local_of[e.node]].slot_base + e.index;
}

/* The kernel and device of a node from its assigned device: a GPU's CUDA
 * kernel, the CPU kernel on the host for a GPU op without one (Send, Recv,
 * Random), the CPU kernel for every CPU device of the process. */
static int choose_kernel(const psg_node_t *n, plan_node_t *pn) {
    psg_device_name_t d;
    pn->device = PSG_DEVICE_HOST;
    pn->kernel = n->def->cpu;
    if (n->assigned_device && n->assigned_device[0] &&
        psg_device_name_parse(n->assigned_device, &d) == 0 && d.has_type &&
        !strcmp(d.type, "GPU")) {
        int gpu = d.has_id ? d.id : 0;
        if (gpu >= psg_gpu_count())
            return psg_error_set(
                "node '%s' (%s): assigned to '%s', but this process has no GPU %d (%s)", n->name,
                psg_node_op(n), n->assigned_device, gpu, psg_gpu_status());
        if (n->def->cuda) {
            pn->device = PSG_DEVICE_GPU(gpu);
            pn->kernel = n->def->cuda;
        }
    }
    if (!pn->kernel)
        return psg_error_set("node '%s' (%s): no CPU kernel for this op", n->name, psg_node_op(n));
    return 0;
}

/* The def's prepare step, once for this plan node: its params for both kernels. */
static int prepare_node(const psg_graph_t *g, const psg_node_t *n, plan_node_t *pn) {
    if (n->def->state_size) {
        pn->state = calloc(1, n->def->state_size);
        if (!pn->state) return psg_error_set("out of memory");
    }
    if (!n->def->prepare) return 0;
    pn->params = calloc(1, n->def->params_size ? n->def->params_size : 1);
    if (!pn->params) return psg_error_set("out of memory");
    if (n->def->prepare(g, n, pn->params) < 0)
        return psg_error_wrap("node '%s' (%s)", n->name, psg_node_op(n));
    return 0;
}

/* The i-th dependency of n: inputs first, then control inputs. */
static int dep_of(const psg_node_t *n, int i) {
    return i < n->num_inputs ? n->inputs[i].node : n->controls[i - n->num_inputs];
}

/* Iterative DFS post-order from the fetches and targets: p->nodes in a
 * topological order, local_of[graph id] their index. Each node is on the stack
 * at most once (a frame: the node and its next dependency to look at), so the
 * stack holds at most every node, however often a dependency is listed. */
static int order_nodes(psg_plan_t *p, const char *fed, int *local_of, int n_fetches,
                       const psg_endpoint_t *fetches, int n_targets, const int *targets) {
    const psg_graph_t *g = p->g;
    int total = g->num_nodes;
    char *state = calloc((size_t)total + 1, 1); /* 0 new, 1 on stack, 2 done */
    struct frame {
        int id, next;
    } *stack = malloc(sizeof *stack * ((size_t)total + 1));
    p->nodes = calloc((size_t)total + 1, sizeof(plan_node_t));
    int rc = -1;
    if (!state || !stack || !p->nodes) {
        psg_error_set("out of memory");
        goto done;
    }
    int roots = n_fetches + n_targets;
    for (int r = 0; r < roots; r++) {
        int root = r < n_fetches ? fetches[r].node : targets[r - n_fetches];
        if (root < 0 || root >= total ||
            (r < n_fetches &&
             (fetches[r].index < 0 || fetches[r].index >= g->nodes[root]->num_outputs))) {
            psg_error_set("%s %d refers to a missing node", r < n_fetches ? "fetch" : "target",
                          r < n_fetches ? r : r - n_fetches);
            goto done;
        }
        if (state[root] == 2) continue;
        int sp = 0;
        stack[sp++] = (struct frame){root, 0};
        state[root] = 1;
        while (sp) {
            struct frame *f = &stack[sp - 1];
            const psg_node_t *n = g->nodes[f->id];
            int ndeps = fed[f->id] ? 0 : n->num_inputs + n->num_controls;
            if (f->next < ndeps) {
                int i = f->next++;
                int dep = i < n->num_inputs ? n->inputs[i].node : n->controls[i - n->num_inputs];
                if (dep < 0 || dep >= total) {
                    psg_error_set("node '%s' (%s): input %d refers to a missing node %d", n->name,
                                  psg_node_op(n), i, dep);
                    goto done;
                }
                if (state[dep] == 1) {
                    psg_error_set("node '%s' (%s): the graph has a cycle through '%s'", n->name,
                                  psg_node_op(n), g->nodes[dep]->name);
                    goto done;
                }
                if (state[dep] == 0) {
                    PSG_ASSERT(sp < total); /* each node is pushed once */
                    state[dep] = 1;
                    stack[sp++] = (struct frame){dep, 0};
                }
                continue;
            }
            sp--;
            state[f->id] = 2;
            local_of[f->id] = p->num_nodes;
            plan_node_t *pn = &p->nodes[p->num_nodes++];
            pn->node = n;
            pn->fed = fed[f->id];
            pn->slot_base = p->num_slots;
            p->num_slots += n->num_outputs;
        }
    }
    rc = 0;
done:
    free(state);
    free(stack);
    return rc;
}

/* Each node's kernel, input slots and use counts, its consumers (counted
 * first), and the nodes ready at the start. A producer listed several times
 * among a node's inputs and control inputs counts once: seen[] holds, per plan
 * node, the last consumer that counted it (linear in the edges, however often
 * one is repeated). */
static int link_nodes(psg_plan_t *p, const int *local_of) {
    int *consumer_count = calloc((size_t)p->num_nodes + 1, sizeof(int));
    int *seen = malloc(sizeof(int) * ((size_t)p->num_nodes + 1));
    int rc = -1;
    if (!consumer_count || !seen) {
        psg_error_set("out of memory");
        goto done;
    }
    for (int li = 0; li < p->num_nodes; li++) seen[li] = -1;
    for (int li = 0; li < p->num_nodes; li++) {
        plan_node_t *pn = &p->nodes[li];
        const psg_node_t *n = pn->node;
        if (pn->fed) continue;
        p->num_exec++;
        if (choose_kernel(n, pn) < 0 || prepare_node(p->g, n, pn) < 0) goto done;
        if (pn->device != PSG_DEVICE_HOST) p->host_only = false;
        if (n->def->flags & PSG_OP_SOURCE_FEED) {
            psg_error_set("node '%s' (%s): placeholder must be fed", n->name, psg_node_op(n));
            goto done;
        }
        if (!(pn->input_slots = malloc(sizeof(int) * (size_t)(n->num_inputs + 1)))) {
            psg_error_set("out of memory");
            goto done;
        }
        for (int i = 0; i < n->num_inputs; i++) {
            pn->input_slots[i] = slot_of(p, local_of, n->inputs[i]);
            p->slot_uses[pn->input_slots[i]]++;
        }
        for (int i = 0; i < n->num_inputs + n->num_controls; i++) {
            int d = local_of[dep_of(n, i)];
            if (seen[d] == li || p->nodes[d].fed) continue;
            seen[d] = li;
            pn->num_deps++;
            consumer_count[d]++;
        }
    }
    for (int li = 0; li < p->num_nodes; li++) {
        if (!(p->nodes[li].consumers = malloc(sizeof(int) * (size_t)(consumer_count[li] + 1)))) {
            psg_error_set("out of memory");
            goto done;
        }
        seen[li] = -1;
    }
    for (int li = 0; li < p->num_nodes; li++) {
        plan_node_t *pn = &p->nodes[li];
        const psg_node_t *n = pn->node;
        if (pn->fed) continue;
        for (int i = 0; i < n->num_inputs + n->num_controls; i++) {
            int d = local_of[dep_of(n, i)];
            if (seen[d] == li || p->nodes[d].fed) continue;
            seen[d] = li;
            plan_node_t *producer = &p->nodes[d];
            producer->consumers[producer->num_consumers++] = li;
        }
        if (pn->num_deps == 0) p->initial_ready[p->num_initial_ready++] = li;
    }
    rc = 0;
done:
    free(consumer_count);
    free(seen);
    return rc;
}

/* The slots of the feeds and fetches; fails when a fed node's needed output
 * is not among the feeds. */
static int bind_feeds_fetches(psg_plan_t *p, const int *local_of, int n_feeds,
                              const psg_endpoint_t *feeds, int n_fetches,
                              const psg_endpoint_t *fetches) {
    p->n_feeds = n_feeds;
    p->n_fetches = n_fetches;
    p->feed_slots = malloc(sizeof(int) * (size_t)(n_feeds + 1));
    p->fetch_slots = malloc(sizeof(int) * (size_t)(n_fetches + 1));
    p->feeds = malloc(sizeof(psg_endpoint_t) * (size_t)(n_feeds + 1));
    if (!p->feed_slots || !p->fetch_slots || !p->feeds) return psg_error_set("out of memory");
    if (n_feeds) memcpy(p->feeds, feeds, sizeof(psg_endpoint_t) * (size_t)n_feeds);
    for (int i = 0; i < n_feeds; i++) {
        /* a feed the fetches do not need is accepted and ignored */
        p->feed_slots[i] = local_of[feeds[i].node] >= 0 ? slot_of(p, local_of, feeds[i]) : -1;
    }
    for (int i = 0; i < n_fetches; i++) {
        p->fetch_slots[i] = slot_of(p, local_of, fetches[i]);
        p->slot_uses[p->fetch_slots[i]]++;
    }
    /* a fed node's outputs that are needed must all be fed */
    for (int li = 0; li < p->num_nodes; li++) {
        plan_node_t *pn = &p->nodes[li];
        if (!pn->fed) continue;
        for (int o = 0; o < pn->node->num_outputs; o++) {
            if (!p->slot_uses[pn->slot_base + o]) continue;
            bool is_fed = false;
            for (int i = 0; i < n_feeds && !is_fed; i++)
                is_fed = p->feed_slots[i] == pn->slot_base + o;
            if (!is_fed)
                return psg_error_set(
                    "node '%s' (%s): output %d is needed but only other outputs are fed",
                    pn->node->name, psg_node_op(pn->node), o);
        }
    }
    return 0;
}

psg_plan_t *psg_plan_new(const psg_graph_t *g, int n_feeds, const psg_endpoint_t *feeds,
                         int n_fetches, const psg_endpoint_t *fetches, int n_targets,
                         const int *targets) {
    int total = g->num_nodes;
    psg_plan_t *p = calloc(1, sizeof *p);
    int *local_of = malloc(sizeof(int) * (size_t)(total + 1));
    char *fed = calloc((size_t)total + 1, 1);
    if (!p || !local_of || !fed) {
        psg_error_set("out of memory");
        goto fail;
    }
    p->g = g;
    p->host_only = true;
    for (int i = 0; i < total; i++) local_of[i] = -1;
    for (int i = 0; i < n_feeds; i++) {
        if (feeds[i].node < 0 || feeds[i].node >= total ||
            feeds[i].index >= g->nodes[feeds[i].node]->num_outputs) {
            psg_error_set("feed %d refers to a missing output", i);
            goto fail;
        }
        fed[feeds[i].node] = 1;
    }
    if (order_nodes(p, fed, local_of, n_fetches, fetches, n_targets, targets) < 0) goto fail;
    p->slot_uses = calloc((size_t)p->num_slots + 1, sizeof(int));
    p->initial_ready = malloc(sizeof(int) * (size_t)(p->num_nodes + 1));
    if (!p->slot_uses || !p->initial_ready) {
        psg_error_set("out of memory");
        goto fail;
    }
    if (link_nodes(p, local_of) < 0 ||
        bind_feeds_fetches(p, local_of, n_feeds, feeds, n_fetches, fetches) < 0 ||
        psg_plan_find_resource_groups(p) < 0)
        goto fail;
    free(local_of);
    free(fed);
    return p;
fail:
    free(local_of);
    free(fed);
    psg_plan_destroy(&p);
    return NULL;
}

void psg_plan_destroy(psg_plan_t **pp) {
    if (!pp || !*pp) return;
    psg_plan_t *p = *pp;
    *pp = NULL;
    for (int i = 0; p->nodes && i < p->num_nodes; i++) {
        free(p->nodes[i].input_slots);
        free(p->nodes[i].consumers);
        free(p->nodes[i].groups);
        free(p->nodes[i].params);
        if (p->nodes[i].state && p->nodes[i].node->def->state_free)
            p->nodes[i].node->def->state_free(p->nodes[i].state);
        free(p->nodes[i].state);
    }
    free(p->nodes);
    free(p->slot_uses);
    free(p->feed_slots);
    free(p->feeds);
    free(p->fetch_slots);
    free(p->initial_ready);
    free(p->group_start);
    free(p->group_nodes);
    free(p);
}

int psg_plan_num_nodes(const psg_plan_t *p) {
    return p->num_exec;
}

size_t psg_plan_footprint(const psg_plan_t *p) {
    size_t n = sizeof *p + sizeof(plan_node_t) * ((size_t)p->num_nodes + 1) +
               sizeof(int) * ((size_t)p->num_slots + (size_t)p->n_feeds * 3 + (size_t)p->n_fetches +
                              (size_t)p->num_nodes + (size_t)p->num_groups + 4);
    for (int i = 0; i < p->num_nodes; i++) {
        const plan_node_t *pn = &p->nodes[i];
        n += sizeof(int) * ((size_t)pn->node->num_inputs + (size_t)pn->num_consumers +
                            (size_t)pn->num_groups + 3);
        if (pn->params) n += pn->node->def->params_size;
    }
    return n;
}

bool psg_plan_can_overlap(const psg_plan_t *p) {
    return p->can_overlap;
}
