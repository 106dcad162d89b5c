/* The cluster: TensorFlow's TF_CONFIG (jobs of task addresses, and this process's task),
 * parsed strictly, from a string, the environment or a file, and TensorFlow device names.
 * Not the launcher (which writes TF_CONFIG) nor the sockets (wire.h) that connect tasks. */
#ifndef PSGRAPH_CLUSTER_H
#define PSGRAPH_CLUSTER_H

#include "psgraph/curve.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct psg_cluster psg_cluster_t;

/* One task of the cluster. The strings belong to the cluster. */
typedef struct {
    const char *job;     /* "ps", "worker", "chief", ... */
    int index;           /* its index in the job */
    const char *address; /* "host:port" or "ipc://path", as written in the spec */
} psg_task_t;

/* Parses a TF_CONFIG document:
 *   {"cluster": {"ps": ["127.0.0.1:2222"], "worker": [...], "chief": [...]},
 *    "task": {"type": "worker", "index": 0}}
 * "task" may be absent (then no task is set); "environment" and "rpc_layer" are accepted
 * and ignored, as TensorFlow does; "keys": "DIR" names the cluster's key folder
 * (psgraph/curve.h), loaded here; "peer_timeout": S the seconds a silent peer is waited
 * for (psg_cluster_peer_timeout_ms); "ps_replicas": 1 or 2 the copies of each ps shard
 * (psg_cluster_ps_replicas); any other field is an error (a typo would otherwise
 * pass silently). `origin` ("TF_CONFIG", a file name) starts every error message.
 * NULL with the error set (code PSG_ERR_CONFIG), naming the field, on malformed JSON, a job that is
 * not a list of "host:port" (or "ipc://path") strings, an empty job, a duplicate address, more than
 * one chief, a task type that is not a job, or an index out of range. The caller owns the result.
 */
psg_cluster_t *psg_cluster_parse(const char *json, const char *origin);
/* As psg_cluster_parse, from the TF_CONFIG environment variable; without "keys" in it, the
 * key folder of $PSGRAPH_KEYS when set. NULL with the error set when it is unset or invalid. */
psg_cluster_t *psg_cluster_from_env(void);
/* Whether TF_CONFIG names a cluster for this process: false when it is unset, empty, or a
 * document whose "cluster" is absent or empty, with no "task" ('{}', '{"cluster": {}}'),
 * which TensorFlow takes as local training; true otherwise (a malformed one or an unknown
 * field too: psg_cluster_from_env says what is wrong). */
bool psg_cluster_env_given(void);
/* As psg_cluster_parse, from a file (as `--cluster FILE`; a relative "keys" is relative to the
 * file's folder; without "keys", $PSGRAPH_KEYS when set); then, when job is not NULL,
 * sets this process's task to (job, index) as `--job` and `--task` do, overriding the
 * file's "task". NULL with the error set (naming the file) on failure. */
psg_cluster_t *psg_cluster_from_file(const char *path, const char *job, int index);
/* Loads the key folder dir as the cluster's keys (as `--keys DIR`), replacing any; dir NULL
 * drops them. -1 with the error set (naming the folder or file) when they do not load; the
 * keys before stay then. */
int psg_cluster_set_keys(psg_cluster_t *c, const char *dir);
/* The cluster's keys (owned by the cluster), NULL when it has none. NULL-safe. */
const psg_curve_keys_t *psg_cluster_keys(const psg_cluster_t *c);
/* How long a peer may stay silent before a request waiting on it fails, naming it
 * (heartbeats: psgraph/wire.h): the document's "peer_timeout" in seconds, or as set; 0 when
 * neither (PSG_WIRE_PEER_TIMEOUT_MS then). NULL-safe. */
int psg_cluster_peer_timeout_ms(const psg_cluster_t *c);
/* Sets it (as `--peer-timeout S`): -1 with the error set unless 0 < seconds <= a day. */
int psg_cluster_set_peer_timeout(psg_cluster_t *c, double seconds);
/* The copies of each ps task's shard (docs/replication.md): 1, the primary alone (the
 * default), or 2, the primary and a backup on the next ps task in the ring. NULL-safe. */
int psg_cluster_ps_replicas(const psg_cluster_t *c);
/* Sets it (as `--ps-replicas N`): -1 with the error set (code PSG_ERR_CONFIG) unless n is
 * 1, or 2 with at least two ps tasks. */
int psg_cluster_set_ps_replicas(psg_cluster_t *c, int n);
/* The ps task that holds the backup of ps task k's shard: (k + 1) mod the ps tasks with 2
 * replicas; -1 with 1 replica or k out of range. */
int psg_cluster_ps_backup(const psg_cluster_t *c, int k);
/* The ps task whose shard ps task k backs up (the inverse of psg_cluster_ps_backup), or -1. */
int psg_cluster_ps_backed_up(const psg_cluster_t *c, int k);
/* Frees the cluster; sets *c to NULL. NULL-safe. */
void psg_cluster_destroy(psg_cluster_t **c);

/* TensorFlow's evaluator task (train_and_evaluate): TF_CONFIG's task may name it whether or
 * not the cluster lists an "evaluator" job; when it does not, the task has no address. */
#define PSG_EVALUATOR_JOB "evaluator"

/* Sets this process's task. -1 with the error set on an unknown job (other than the
 * evaluator, index 0) or an index out of range. */
int psg_cluster_set_task(psg_cluster_t *c, const char *job, int index);
/* This process's task; .job is NULL when none is set. */
psg_task_t psg_cluster_task(const psg_cluster_t *c);

/* The number of jobs, and the name of job i (jobs sorted by name, as TensorFlow does). */
int psg_cluster_num_jobs(const psg_cluster_t *c);
const char *psg_cluster_job(const psg_cluster_t *c, int i);
/* Tasks of a job; 0 for a job the cluster does not have (no error). */
int psg_cluster_num_tasks(const psg_cluster_t *c, const char *job);
/* The address ("host:port" or "ipc://path") of a task. NULL with the error set on an unknown job or
 * an index out of range. */
const char *psg_cluster_address(const psg_cluster_t *c, const char *job, int index);
/* Every task, jobs in name order then by index, into out (room for max); returns how many
 * there are (which may exceed max: then only max are written). */
int psg_cluster_tasks(const psg_cluster_t *c, psg_task_t *out, int max);

/* Writes a TensorFlow device name into buf: "/job:ps/task:0", with "/<device>" appended
 * when device is not NULL ("/job:worker/task:1/gpu:0"). Returns buf (truncated to size). */
char *psg_device_name(const char *job, int index, const char *device, char *buf, size_t size);
#define PSG_DEVICE_NAME_MAX 128

#endif
