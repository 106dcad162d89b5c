/* Internal to psgraph: the pulling half of cross-process Send/Recv. A Recv whose sender
 * lives in another task asks that task's server for (step, key) (TensorFlow's RecvTensor)
 * and the reply lands in this process's rendezvous, where the Recv op takes it.
 * Not the rendezvous itself (ops/state/rendezvous.c) nor the serving half (ps/task_server.c). */
#ifndef PSGRAPH_PS_REMOTE_RENDEZVOUS_H
#define PSGRAPH_PS_REMOTE_RENDEZVOUS_H

#include "psgraph/device_name.h"
#include "psgraph/rendezvous.h"
#include "psgraph/wire.h"

#include <stdint.h>

typedef struct psg_remote_rv psg_remote_rv_t;

/* A puller feeding `local` (borrowed). One thread owns one DEALER per peer task and polls
 * them all, so a pull that waits never holds up another. timeout_ms bounds a send to a
 * peer that is not reachable. NULL with the error set. */
psg_remote_rv_t *psg_remote_rv_new(psg_rendezvous_t *local, int timeout_ms);
/* The cluster's keys (borrowed, must outlive the puller; NULL: plain frames): its DEALERs
 * to tcp:// peers speak CURVE. Before the first pull. */
void psg_remote_rv_set_keys(psg_remote_rv_t *r, const psg_curve_keys_t *keys);
/* The peer timeout of its connections (psgraph/wire.h; 0: the default): a pull whose
 * connection is lost fails then, naming the task. Before the first pull. */
void psg_remote_rv_set_peer_timeout(psg_remote_rv_t *r, int ms);
/* Stops and joins the thread, closes the sockets. NULL-safe. */
void psg_remote_rv_destroy(psg_remote_rv_t **r);

/* One tensor to pull: its key, and the task (its name and address) that sends it. */
typedef struct {
    char *key;
    char task[PSG_DEVICE_NAME_MAX];
    char address[256];
} psg_remote_pull_t;

/* Asks, for each of pulls[n], the server at `address` ("host:port" or "ipc://path") of
 * task `task` for (step, key). Each tensor is sent into the local rendezvous under (step,
 * key); an error reply, or a peer that cannot be reached, aborts the step there with a
 * reason naming the task. Never blocks; the pulls are queued at once, with one wake-up of
 * the puller (one at a time, the caller and the puller took turns at the lock for each).
 * -1 with the error set on out of memory or a stopped puller (then none was queued). */
int psg_remote_rv_pull(psg_remote_rv_t *r, int64_t step, int n, const psg_remote_pull_t *pulls);
/* Fails at once every pull sent to `task` and not answered yet (their steps aborted with `why`,
 * naming the task): the caller knows the task is lost (a failover) before the puller's peer
 * timeout could tell. */
void psg_remote_rv_fail_task(psg_remote_rv_t *r, const char *task, const char *why);
/* Forgets the pulls of a step (their late replies are dropped). */
void psg_remote_rv_cleanup_step(psg_remote_rv_t *r, int64_t step);
/* Bytes of tensor data pulled from peers so far (the wire's payload, headers excluded). */
int64_t psg_remote_rv_bytes_pulled(psg_remote_rv_t *r);

#endif
