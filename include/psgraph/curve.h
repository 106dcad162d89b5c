/* The cluster's CURVE keys (CurveZMQ: Curve25519, authenticated and encrypted connections):
 * a key folder in czmq's certificate format, its allow-list, and the rule of when a task may
 * listen without them. Not the sockets (wire.h applies the keys) nor the launcher.
 *
 * A key folder (0700) holds `cluster.key` (the cluster's public certificate) and
 * `cluster.key_secret` (its secret, 0600): every task serves with that pair and connects with
 * it, so a client must know the cluster's public key and hold a key of the allow-list. The
 * allow-list is every public certificate `NAME.key` in the folder (`psgraph keygen DIR
 * --name NAME` adds one, for a client of its own). docs/security.md has the whole story. */
#ifndef PSGRAPH_CURVE_H
#define PSGRAPH_CURVE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct psg_curve_keys psg_curve_keys_t;

/* The identity every task of a cluster serves and connects with. */
#define PSG_CURVE_CLUSTER "cluster"
/* Bytes of a key's name (NAME.key: letters, digits, '_', '-', '.'), its terminating 0 included. */
#define PSG_CURVE_NAME_MAX 65
/* The environment variable naming a key folder when neither --keys nor the cluster file
 * does (`psgraph launch` sets it for the tasks it starts). */
#define PSG_CURVE_KEYS_ENV "PSGRAPH_KEYS"
/* Set to 1, as --insecure for `psgraph server` and `psgraph train`. */
#define PSG_CURVE_INSECURE_ENV "PSGRAPH_INSECURE"

/* Writes a new key pair NAME.key (public) and NAME.key_secret (secret, mode 0600) into dir,
 * in czmq's certificate format; name NULL is PSG_CURVE_CLUSTER. Makes dir (mode 0700) when it
 * does not exist. -1 with the error set, naming the folder or the file, when dir is open to
 * other users (any group or other permission bit), is not ours or not a folder, when the
 * pair exists already (keys are never overwritten), or on an I/O error. */
int psg_curve_keygen(const char *dir, const char *name);

/* Loads a key folder for a task that speaks as `identity` (NULL: PSG_CURVE_CLUSTER): its
 * pair from IDENTITY.key_secret, the cluster's public key from cluster.key, the allow-list
 * from every NAME.key. NULL with the error set, naming the folder or the file, when the
 * folder is open to other users, a secret file is readable by others, a certificate does
 * not parse, or a file is missing. A folder Kubernetes made of a Secret volume (files linked
 * through "..data") passes when it is on a read-only mount, as Kubernetes mounts one, and
 * its secret has no permission for others (0400; 0440 with the pod's fsGroup). The caller
 * owns the result. */
psg_curve_keys_t *psg_curve_keys_load(const char *dir, const char *identity);
/* Frees the keys; sets *k to NULL. NULL-safe. A socket using them must be closed first. */
void psg_curve_keys_destroy(psg_curve_keys_t **k);
/* The folder, as given to psg_curve_keys_load. */
const char *psg_curve_keys_dir(const psg_curve_keys_t *k);
/* This identity's public key, 40 Z85 characters. */
const char *psg_curve_keys_public(const psg_curve_keys_t *k);
/* The number of public keys in the allow-list. */
int psg_curve_keys_allowed(const psg_curve_keys_t *k);

/* How a server may listen:
 *   a tcp:// endpoint with keys: CURVE; without keys: plain frames, allowed on a loopback
 *   address (127.0.0.0/8, ::1, localhost) and elsewhere only when `insecure` (every other
 *   address, 0.0.0.0 and * included, is refused); an ipc:// endpoint: plain frames, its folder
 *   must be ours with no permission for others (0700) unless `insecure`.
 * Returns 1 when the server will take plain frames over TCP on loopback, with the warning
 * to print once as the error message (psg_error_message), 0 when all is well, -1 with the error set
 * (naming the endpoint and how to make keys) when it must not listen. */
int psg_curve_listen_check(const char *endpoint, const psg_curve_keys_t *keys, bool insecure);
/* True when a tcp:// endpoint (or host:port) names a loopback address. */
bool psg_curve_is_loopback(const char *endpoint);

/* Where net/ writes what a server refuses ("tcp://127.0.0.1:2222: refused 127.0.0.1: ...",
 * once per peer address and reason): fn(ctx, line) from a background thread, without a
 * newline. NULL (the default): nothing is written (the counts in psg_server_stats stay). */
typedef void (*psg_net_log_fn)(void *ctx, const char *line);
void psg_net_set_log(psg_net_log_fn fn, void *ctx);
/* Writes a line to that log (nothing when none is set): the task server's notes too (a
 * peer's graphs released, connections over the cap). */
void psg_net_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
