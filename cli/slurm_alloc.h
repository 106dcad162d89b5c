/* A Slurm allocation read as a cluster (cli/slurm_alloc.c): Slurm's host lists expanded as
 * `scontrol show hostnames` does, SLURM_TASKS_PER_NODE's "2(x3),1" as counts, and the tasks
 * of a ps/worker cluster placed on the nodes as TensorFlow's SlurmClusterResolver places
 * them. Strings in, numbers out: no environment, no srun (cli/launch_slurm.c). */
#ifndef PSGRAPH_CLI_SLURM_ALLOC_H
#define PSGRAPH_CLI_SLURM_ALLOC_H

/* "h[1-3,07-08],gpu[01-02]x[1-2]" into *hosts (malloc'd, each malloc'd; free with
 * psg_slurm_hosts_free): the names in order, duplicates kept, each range's numbers padded to
 * the width of its first number. Returns the count, or -1 with the error naming the list
 * (an unclosed bracket, a bad range, text after the last bracket, over max names). */
int psg_slurm_hostlist(const char *list, int max, char ***hosts);
void psg_slurm_hosts_free(char ***hosts, int n);

/* SLURM_TASKS_PER_NODE ("2(x3),1") into v[0..]: the count of nodes, or -1 with the error. */
int psg_slurm_tasks_per_node(const char *s, int *v, int cap);

/* The tasks of a cluster of ps ps and workers workers, placed as SlurmClusterResolver:
 * every node of the allocation (nodelist, tasks_per_node: one count per node) in name order
 * (strcmp), each giving its count of slots, slot k listening on port_base + k; the first ps
 * slots are ps0.., the next ones worker0..; ntasks > 0 bounds the slots used (SLURM_NTASKS).
 * Task i gets host[i], port[i], slot[i] and node_slots[i] (its node's count: its share of
 * the node's GPUs is slot / node_slots). -1 with the error naming the counts when the
 * allocation has fewer slots than tasks. */
typedef struct {
    int n;
    char **host;
    int *port, *slot, *node_slots;
} psg_slurm_place_t;
int psg_slurm_place(const char *nodelist, const char *tasks_per_node, int ntasks, int ps,
                    int workers, int port_base, psg_slurm_place_t *out);
void psg_slurm_place_free(psg_slurm_place_t *p);

#endif
