/* Resource groups of an executor's plan: the executed nodes that touch one variable,
 * accumulator or queue, so that runs of a plan may overlap, ordered per resource
 * (psg_run_order_t). Not the running itself (runtime/executor.c). */
#include "runtime/plan_internal.h"
#include "psgraph/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- resource groups ---- */

/* The node that made the resource handle at e (a handle op: stateful, no
 * inputs), through Identity nodes; -1 when it comes from anything else. */
static int handle_source(const psg_graph_t *g, psg_endpoint_t e) {
    for (int hops = 0; hops <= g->num_nodes; hops++) {
        const psg_node_t *n = g->nodes[e.node];
        if (n->num_inputs == 0 && (n->def->flags & PSG_OP_STATEFUL)) return e.node;
        if (n->num_inputs != 1 || strcmp(psg_node_op(n), "Identity")) return -1;
        e = n->inputs[0];
    }
    return -1;
}

typedef struct {
    const char *op, *name; /* what the handle op names: its op and resource name */
    int li;                /* the plan node that uses it */
    int group;
} resource_use_t;

static int compare_use(const void *a, const void *b) {
    const resource_use_t *x = a, *y = b;
    int c = strcmp(x->op, y->op);
    if (!c) c = strcmp(x->name, y->name);
    if (!c) c = (x->li > y->li) - (x->li < y->li);
    return c;
}

/* May runs of the plan overlap, ordered per resource? Only when every
 * stateful node is a handle op, a Send or Recv (keyed by step), or a
 * synchronous user of resource handles: randomness has hidden state, and an
 * async kernel such as a token dequeue is a barrier whose order a later run
 * must keep whole. */
static bool stateful_node_orderable(const psg_node_t *n, bool uses_resource) {
    if (!(n->def->flags & PSG_OP_STATEFUL)) return true;
    const char *op = psg_node_op(n);
    if (!strcmp(op, "Send") || !strcmp(op, "Recv")) return true;
    if (n->num_inputs == 0) return n->num_outputs == 1 && n->out_dtypes[0] == PSG_DT_RESOURCE;
    return uses_resource && !(n->def->flags & PSG_OP_ASYNC);
}

/* Groups the executed nodes by the resource they touch (a node that takes
 * two handles, as ApplyMomentum, is in two groups). Two handle nodes of the
 * same op and resource name are one resource. */
int psg_plan_find_resource_groups(psg_plan_t *p) {
    const psg_graph_t *g = p->g;
    int cap = 0;
    for (int li = 0; li < p->num_nodes; li++)
        if (!p->nodes[li].fed) cap += p->nodes[li].node->num_inputs;
    resource_use_t *uses = malloc(sizeof *uses * (size_t)(cap + 1));
    if (!uses) return psg_error_set("out of memory");
    int n_uses = 0;
    p->can_overlap = true;
    for (int li = 0; li < p->num_nodes; li++) {
        const plan_node_t *pn = &p->nodes[li];
        const psg_node_t *n = pn->node;
        if (pn->fed) continue;
        bool uses_resource = false;
        for (int i = 0; i < n->num_inputs; i++) {
            psg_endpoint_t e = n->inputs[i];
            if (g->nodes[e.node]->out_dtypes[e.index] != PSG_DT_RESOURCE) continue;
            uses_resource = true;
            int h = handle_source(g, e);
            if (h < 0) {
                p->can_overlap = false;
                continue;
            }
            const psg_node_t *hn = g->nodes[h];
            const char *shared = psg_node_get_str(hn, "shared_name", "");
            uses[n_uses++] =
                (resource_use_t){psg_node_op(hn), shared[0] ? shared : hn->name, li, 0};
        }
        if (!stateful_node_orderable(n, uses_resource)) p->can_overlap = false;
    }
    qsort(uses, (size_t)n_uses, sizeof *uses, compare_use);
    int k = 0; /* distinct (resource, node) pairs: a node taking one handle twice counts once */
    for (int i = 0; i < n_uses; i++) {
        bool new_group =
            i == 0 || strcmp(uses[i].op, uses[k - 1].op) || strcmp(uses[i].name, uses[k - 1].name);
        if (!new_group && uses[i].li == uses[k - 1].li) continue;
        uses[i].group = new_group ? (k ? uses[k - 1].group + 1 : 0) : uses[k - 1].group;
        uses[k++] = uses[i];
    }
    p->num_groups = k ? uses[k - 1].group + 1 : 0;
    p->group_start = calloc((size_t)p->num_groups + 1, sizeof(int));
    p->group_nodes = malloc(sizeof(int) * (size_t)(k + 1));
    if (!p->group_start || !p->group_nodes) {
        free(uses);
        return psg_error_set("out of memory");
    }
    for (int i = 0; i < k; i++) {
        p->group_nodes[i] = uses[i].li;
        p->group_start[uses[i].group + 1] = i + 1;
        plan_node_t *pn = &p->nodes[uses[i].li];
        int *v = realloc(pn->groups, sizeof(int) * (size_t)(pn->num_groups + 1));
        if (!v) {
            free(uses);
            return psg_error_set("out of memory");
        }
        pn->groups = v;
        pn->groups[pn->num_groups++] = uses[i].group;
    }
    free(uses);
    return 0;
}
