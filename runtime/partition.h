/* Partitioning: cuts a placed graph, for one step signature (feeds,
 * fetches, targets), into one graph per device; every edge between devices
 * becomes a Send on the producer's side and a Recv on the consumer's,
 * matched through the rendezvous by key and step id.
 * Not placement (placement.h) and not the running of partitions. */
#ifndef PSGRAPH_PARTITION_H
#define PSGRAPH_PARTITION_H

#include "psgraph/device_name.h"
#include "psgraph/graph.h"

#include <stdint.h>

/* One device's piece of the step. Node ids in `graph` survive
 * psg_graph_serialize / psg_graph_deserialize; names are the original
 * graph's (Send, Recv and control dummies get new unique names). */
typedef struct {
    char device[PSG_DEVICE_NAME_MAX]; /* "/job:ps/replica:0/task:0/device:CPU:0" */
    char task[PSG_DEVICE_NAME_MAX];   /* the process that runs it: "/job:ps/replica:0/task:0" */
    psg_graph_t *graph;               /* owned by the set */
    int num_feeds;
    psg_endpoint_t *feeds; /* placeholders in graph, fed with the step's feed feed_index[i] */
    int *feed_index;
    int num_fetches;
    psg_endpoint_t *fetches; /* outputs of graph that are the step's fetch fetch_index[i] */
    int *fetch_index;
    int num_targets;
    int *targets; /* run these: every Send, and the step's targets placed here */
    int num_sends, num_recvs;
} psg_partition_t;

typedef struct {
    int num_partitions;
    psg_partition_t *partitions; /* in device-name order */
} psg_partition_set_t;

typedef struct {
    /* the incarnation of a sending device, put into its keys; NULL: 0 */
    uint64_t (*incarnation)(void *ctx, const char *device);
    void *ctx;
    /* one partition per task (a process runs one a step), not per device: its nodes keep
     * their own devices (the executor copies between a task's CPU and GPUs), its device
     * is the task's CPU:0, where its Sends and Recvs run */
    bool by_task;
} psg_partition_options_t;

/* Cuts g (placed: every needed node has a complete assigned device; g is
 * read only) for the step that feeds feeds[i], fetches fetches[i] and runs
 * targets[i]: only the nodes they need, cut at the fed endpoints (a fed
 * node becomes a placeholder of its name on its device). A tensor needed by
 * several nodes of another device is sent once; a control edge between
 * devices is carried by a scalar dummy (edge name "^node"). opt may be NULL.
 * Returns a set the caller owns, or NULL with the error naming the node (not
 * placed, a resource handle crossing devices, a fed node with several
 * outputs, a fetch or target out of range). */
psg_partition_set_t *psg_partition_graph(const psg_graph_t *g, int n_feeds,
                                         const psg_endpoint_t *feeds, int n_fetches,
                                         const psg_endpoint_t *fetches, int n_targets,
                                         const int *targets, const psg_partition_options_t *opt);
void psg_partition_set_destroy(psg_partition_set_t **set);

/* The index of the first partition whose device matches `device`, a full
 * or partial spec in any accepted form ("/job:ps/task:1" matches that task's
 * first device), or -1 (also for a name that does not parse, error set). */
int psg_partition_set_find(const psg_partition_set_t *set, const char *device);

#endif
