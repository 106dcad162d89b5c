/* Internal to net/: the raw CURVE keys for the sockets (server.c, client.c) and the guard
 * (curve_guard.c: the ZAP handler and the handshake monitor). Not a public API: that is
 * include/psgraph/curve.h. */
#ifndef PSGRAPH_NET_CURVE_INTERNAL_H
#define PSGRAPH_NET_CURVE_INTERNAL_H

#include "psgraph/curve.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PSG_CURVE_KEY_BYTES 32

/* Makes a DEALER a CURVE client of the cluster: the cluster's public key as the server's,
 * this identity's pair as its own. Before connect. -1 with the error set. */
int psg_curve_apply_client(void *sock, const psg_curve_keys_t *k);
/* Makes a ROUTER a CURVE server with the cluster's pair. Before bind. -1 with the error set
 * when the folder holds no cluster.key_secret (a client's folder). */
int psg_curve_apply_server(void *sock, const psg_curve_keys_t *k);
/* The identity of `key` (32 bytes) when it is in the allow-list, NULL when not: the NAME of
 * its NAME.key ("cluster" for the cluster's own key), or its 40 Z85 characters when the file's
 * name is not one keygen would write. A server hands it to the requests of that key's
 * connections (psg_msg_t.peer_key, by ZAP's User-Id). */
const char *psg_curve_keys_name(const psg_curve_keys_t *k, const uint8_t *key);

/* Puts a server socket under the process's guard, before its bind: a monitor of its
 * connections, at most max_connections open at once (at the cap a new one closes the oldest
 * that never finished its handshake, else itself; logged once, naming `endpoint`, and each
 * closed connection named). With keys
 * k (a CURVE server) also a ZAP domain of its own (set on the socket here) whose requests are
 * checked against k's allow-list: every refusal adds 1 to *refused and is logged once per
 * peer address and reason. Call from the socket's thread. Fills domain (the handle for
 * detach). -1 with the error set. */
int psg_curve_guard_attach(void *sock, const char *endpoint, const psg_curve_keys_t *k,
                           int max_connections, atomic_uint_fast64_t *refused, char *domain,
                           size_t size);
/* Takes the socket out of the guard (before it is closed); the guard's thread stops with
 * the last one. */
void psg_curve_guard_detach(void *sock, const char *domain);

#endif
