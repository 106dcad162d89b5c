/* Internal to psgraph: a worker process's place in a cluster, shared by the
 * training loops (worker/trainer.c, `psgraph bench inception3`): the
 * cluster from TF_CONFIG or a file, its rank among the workers, whether it
 * is the chief, its task server and the replica device setter. Not the
 * session (dist_session.h) nor the loop. */
#ifndef PSGRAPH_WORKER_WORKER_TASK_H
#define PSGRAPH_WORKER_WORKER_TASK_H

#include "psgraph/cluster.h"
#include "psgraph/dist_session.h"
#include "psgraph/task_server.h"
#include "psgraph/trainer.h"

#include <stdbool.h>

typedef struct {
    psg_cluster_t *cluster;
    psg_task_server_t *server;
    psg_replica_setter_t *setter;   /* variables on the ps tasks, greedy by bytes */
    int num_workers;                /* the chief job's and the worker job's tasks */
    int rank;                       /* in [0, num_workers): the chief job first */
    bool chief;                     /* rank 0 */
    char task[PSG_DEVICE_NAME_MAX]; /* "/job:worker/task:1" */
} psg_worker_task_t;

/* "worker0": the task's job and index, which name its part of a trace. */
void psg_worker_task_tag(const psg_worker_task_t *w, char *buf, size_t size);

/* True when c names a cluster: --cluster FILE, or TF_CONFIG in the environment. */
bool psg_worker_task_wanted(const psg_train_config_t *c);

/* Joins the cluster of c (c->cluster_file with c->job and c->task, else
 * TF_CONFIG) as the worker or chief task it names, and starts its task
 * server (c->threads, receives time out after c->step_timeout_ms, 30 s by
 * default). prog names the command in errors ("psgraph train"). Returns 0,
 * or -1 with the error set (no such task, a ps task, a bad cluster); the
 * caller still calls psg_worker_task_leave. */
int psg_worker_task_join(psg_worker_task_t *w, const psg_train_config_t *c, const char *prog);

/* Stops the server and frees the rest (after the sessions that use them). */
void psg_worker_task_leave(psg_worker_task_t *w);

#endif
