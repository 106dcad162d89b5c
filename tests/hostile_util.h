/* A live `psgraph server` for the tests of hostile peers (test_hostile, test_hostile_graphs):
 * the server a test talks to (its pid and port), requests built through the protocol table
 * (ps/protocol.h) as a worker builds them, and its memory from /proc. */
#ifndef PSGRAPH_TESTS_HOSTILE_UTIL_H
#define PSGRAPH_TESTS_HOSTILE_UTIL_H

#include "ps/protocol.h"
#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Under AddressSanitizer freed memory waits in its quarantine: RSS says nothing there. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_CHECKED 0
#else
#define RSS_CHECKED 1
#endif

extern const char *psgraph_exe;
extern char tmpdir[256], logdir[300]; /* the test's folder; the server's --logdir in it */
extern pid_t server_pid;              /* the server the helpers below talk to */
extern int port;
extern char server_log[400]; /* when set, the next server's stderr goes to this file */

/* A test's start: psgraph_exe from argv[1], a fresh tmpdir named for it, the server
 * started; -1 (said on stderr) when it did not start. */
int hostile_begin(int argc, char **argv, const char *name);
/* A test's end: SIGTERM must end the server (printed as the bench line `what`), the tmpdir
 * goes; the exit status. */
int hostile_end(const char *what);
/* Starts `psgraph server` on a free port (--recv-timeout 2, --logdir logdir) with `argv`
 * after its own arguments (NULL-ended), as server_pid and port; -1 when it printed no port. */
int start_server_argv(const char *const *argv);
/* The same with --memory-limit 256M and small limits (the pending steps and graphs a peer
 * may have, the longest wait in seconds), with CURVE when `keys` names a key folder. */
int start_server_keyed(const char *max_pending, const char *max_graphs, const char *max_wait,
                       const char *keys);
int start_server_with(const char *max_pending, const char *max_graphs, const char *max_wait);
int start_server(void);
/* Stops the server a test started for itself; (first_pid, first_port) is current again. */
void restore_server(pid_t first_pid, int first_port);
/* When the server has died (a test found a crash): reaped and started again, true. */
bool server_restart_if_dead(void);
/* The server's resident memory in MB (from /proc). */
double server_rss_mb(void);

psg_client_t *connect_peer(void);
psg_client_t *connect_as(const psg_curve_keys_t *k);
/* A request on a fresh connection (closed after); the reply or NULL with the error set. */
psg_msg_t *call(const psg_req_t *r, int timeout_ms);
/* Inspect answers. */
bool alive(void);
/* The call fails with `code` and a message containing `want`, and the server still serves. */
void expect_error(const psg_req_t *r, psg_err_code_t code, const char *want);
/* Serializes g into a RegisterGraph request (fetching output 0 of node `fetch` when >= 0);
 * *bytes is the caller's to free. */
psg_req_t register_req(psg_graph_t *g, int fetch, char **bytes);
/* Registers g through `via` (NULL: a fresh connection); its handle, 0 with the error set. */
uint64_t register_graph(psg_client_t *via, psg_graph_t *g, int fetch);
/* Registers an accumulator's take of timeout 0 (which waits up to --max-wait). */
uint64_t register_take(psg_client_t *via, const char *acc);
/* A graph that fetches 2.5 through a chain of 20 identities (too long to run inline on the
 * server thread); *fetch its last node. */
psg_graph_t *chain_graph(int *fetch);
/* Sends a RunGraph of `handle` through c (its reply comes later). */
void send_run(psg_client_t *c, uint64_t handle);
/* Inspect's integer "field" through c (-1: no answer). */
long long inspect_field(psg_client_t *c, const char *field);
/* Sends SIGTERM to pid and waits up to 30 s for its exit; prints how long it took as the
 * bench line `what`. What waitpid returned (0: still running), its status in *st. */
pid_t sigterm_and_wait(pid_t pid, const char *what, int *st);

#endif
