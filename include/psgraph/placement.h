/* Placement: the replica device setter (tf.train.replica_device_setter),
 * partitioned variables, and the pass that gives every node a complete
 * device, keeping each op that uses a variable's handle beside it.
 * Not partitioning (partition.h) and not device-name syntax (device_name.h). */
#ifndef PSGRAPH_PLACEMENT_H
#define PSGRAPH_PLACEMENT_H

#include "psgraph/graph.h"
#include "psgraph/ops_array.h"

/* ---- the replica device setter ---- */

typedef enum {
    PSG_PS_GREEDY = 0,  /* the ps task with the fewest variable bytes so far (ties: lowest task) */
    PSG_PS_ROUND_ROBIN, /* task 0, 1, ..., ps_tasks - 1, 0, ... in creation order */
} psg_ps_strategy_t;

typedef struct {
    int ps_tasks;              /* 0: everything goes to worker_device */
    const char *ps_device;     /* NULL: "/job:ps" (the setter adds the task) */
    const char *worker_device; /* NULL: "/job:worker" */
    psg_ps_strategy_t strategy;
} psg_replica_setter_options_t;

typedef struct psg_replica_setter psg_replica_setter_t;

/* A setter with copies of the options. NULL with the error set on a bad
 * device string (naming it) or ps_tasks < 0. The caller owns it. */
psg_replica_setter_t *psg_replica_setter_new(const psg_replica_setter_options_t *opt);
void psg_replica_setter_destroy(psg_replica_setter_t **s);

/* Pushes s as a device function of g (pop with psg_graph_pop_device); s
 * must outlive the push. The rules, for each node built while pushed (the
 * node's own device fields, explicit or from an inner spec, always win):
 * - an op with a RESOURCE input (ReadVariable, Assign*, optimizers' Apply*)
 *   goes where the handle's variable is;
 * - an op under a variable's name ("<var>/..."): its initializer and its
 *   slot variables ("<var>/<Slot>", counted in that ps's bytes) go with it;
 * - any other op flagged PSG_OP_VARIABLE goes to ps_device + "/task:k",
 *   k chosen by the strategy (bytes = elements x dtype size);
 * - everything else goes to worker_device. */
void psg_graph_push_replica_setter(psg_graph_t *g, psg_replica_setter_t *s);

/* Variable bytes the setter has put on ps task k so far (0 outside range). */
int64_t psg_replica_setter_ps_bytes(const psg_replica_setter_t *s, int k);

/* ---- partitioned variables ---- */

#define PSG_MAX_SHARDS 64

/* How to split a variable along its first axis: num_shards > 0 gives that
 * many (at most dim 0); else min_shard_bytes > 0 gives as many shards as keep
 * each at least that big (at least 1, at most max_shards when > 0). */
typedef struct {
    int num_shards;
    int64_t min_shard_bytes;
    int max_shards;
} psg_partitioner_t;

/* A variable split into shards "name/part_0", "name/part_1", ...: shard i
 * holds rows [offsets[i], offsets[i+1]); the first dim0 % n shards get one
 * row more, as TensorFlow's. */
typedef struct {
    char name[128]; /* as given (relative to the scope it was made in) */
    psg_shape_t shape;
    int num_shards;
    psg_endpoint_t shards[PSG_MAX_SHARDS];
    int64_t offsets[PSG_MAX_SHARDS + 1];
} psg_partitioned_var_t;

/* Creates the shards as variables (each with its initializer in "init";
 * glorot_uniform scaled from the full shape) and fills *out. Under a replica
 * setter each shard is placed on its own ps task. Returns 0, or -1 with the
 * error set (a shape that is not complete or has no rows, a partitioner
 * that asks for nothing or more than PSG_MAX_SHARDS shards). */
int psg_partitioned_variable(psg_graph_t *g, const char *name, psg_dtype_t dt,
                             const psg_shape_t *shape, psg_initializer_t init, bool trainable,
                             const psg_partitioner_t *p, psg_partitioned_var_t *out);

/* The whole value: each shard read beside it ("name/part_i/read"), then
 * concatenated along axis 0 (the math family's Concat; name, NULL:
 * "name/concat"). The gradient of the result flows back to each shard
 * handle as its rows of the incoming gradient (Concat's gradient slices). */
psg_endpoint_t psg_partitioned_read(psg_graph_t *g, const char *name,
                                    const psg_partitioned_var_t *pv);

/* ---- the placement pass ---- */

/* A job of the cluster, for checking that requested devices exist. */
typedef struct {
    const char *name;
    int num_tasks;
    int num_gpus; /* per task */
} psg_job_spec_t;

typedef struct {
    /* fills the fields a node's device leaves open; NULL:
     * "/job:localhost/replica:0/task:0/device:CPU:0". A worker's session
     * passes its own task ("/job:worker/replica:0/task:1/device:CPU:0"). */
    const char *default_device;
    /* a GPU request for an op with no GPU kernel falls back to the CPU
     * (else it is an error) */
    bool allow_soft_placement;
    /* with allow_soft_placement: a GPU this process does not have (psg_gpu_count) is the
     * CPU too, as TensorFlow's soft placement on a machine without it (a local session's) */
    bool soft_missing_gpus;
    /* when num_jobs > 0, every device must name one of these jobs, a task
     * below its count and a GPU below num_gpus */
    int num_jobs;
    const psg_job_spec_t *jobs;
    /* > 0: the bytes of variables (slots included) one task of job "ps" may hold; a
     * placement that puts more on one is refused, naming the variable that does not fit,
     * its bytes and the limit (--ps-memory-limit, docs/sparse.md) */
    int64_t ps_memory_limit;
} psg_placement_options_t;

/* Gives every node of g a complete canonical device
 * ("/job:ps/replica:0/task:1/device:CPU:0", psg_graph_set_assigned_device):
 * its requested device, completed from the default; an op that uses a
 * RESOURCE handle lands exactly where the handle's variable does (the group
 * takes the fields any member asks for). opt may be NULL. Returns 0, or -1
 * with an error naming the node and the device for a device name that does
 * not parse, a colocation whose members ask for different devices, a job,
 * task or GPU the cluster does not have, or a GPU request without a GPU
 * kernel. On failure the assigned devices are unspecified. */
int psg_place(psg_graph_t *g, const psg_placement_options_t *opt);

#endif
