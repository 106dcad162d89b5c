/* Internal to net/: the one-host transport's framing. ZeroMQ's messages (frames with a "more"
 * flag, as psg_codec_encode makes them) over a Unix stream socket that the processes' own
 * threads write and read, without ZeroMQ's I/O threads between them (issue 33: a small
 * message's round trip 74-77 us over ZeroMQ ipc, 18-22 us so; docs/wire.md "The stream
 * transport"). Each frame goes as an 8-byte head (its length, little-endian u32; a flags
 * byte, bit 0: more frames follow; three zero bytes), then its bytes. A connection starts
 * with the client's hello: one frame of PSG_STREAM_HELLO_BYTES, the magic then its routing
 * id, so that a server knows a client that reconnects as the same peer. A frame of at least
 * PSG_ARENA_MIN_FRAME bytes may travel through the connection's shared-memory arena instead
 * (flags bit 1: its 16 bytes are the place's offset and the frame's length); the arena
 * itself is passed once before (flags bit 2: 8 bytes, its size, and its memfd beside them,
 * SCM_RIGHTS). */
#ifndef PSGRAPH_NET_STREAM_H
#define PSGRAPH_NET_STREAM_H

#include "net/codec.h"
#include "net/stream_arena.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PSG_STREAM_MAGIC "psgrstr1"
#define PSG_STREAM_MAGIC_BYTES 8
#define PSG_STREAM_ID_BYTES 16
#define PSG_STREAM_HELLO_BYTES (PSG_STREAM_MAGIC_BYTES + PSG_STREAM_ID_BYTES)

/* Whether psgraph carries endpoint (as psg_codec_endpoint writes it) on its own stream
 * transport: every ipc:// endpoint, unless PSGRAPH_IPC=zmq in the environment asks for
 * ZeroMQ's (both ends of a connection must agree: one process's tasks and the processes it
 * launches see the same environment). */
bool psg_stream_endpoint(const char *endpoint);
/* The socket path of an ipc:// endpoint. */
const char *psg_stream_path(const char *endpoint);

/* The hello a client writes first on a connection (a frame's head and its 24 bytes). */
#define PSG_STREAM_HELLO_WIRE (8 + PSG_STREAM_HELLO_BYTES)
void psg_stream_hello(uint8_t out[PSG_STREAM_HELLO_WIRE], const uint8_t id[PSG_STREAM_ID_BYTES]);
/* Whether the message of frames (n of them) is a hello; its routing id then in *route. */
bool psg_stream_hello_id(const zmq_msg_t *parts, int n, psg_route_t *route);

/* The reading side of one connection: bytes read ahead, and the message being put together. */
typedef struct {
    uint8_t *buf;
    size_t start, end, cap;
    zmq_msg_t parts[PSG_CODEC_MAX_PARTS];
    int n;         /* frames of the message so far */
    bool too_many; /* frames past PSG_CODEC_MAX_PARTS came and were dropped */
    bool in_body;  /* a frame's head was read, its bytes not yet all */
    bool more;     /* the frame being read is not the message's last */
    zmq_msg_t body;
    size_t body_got;
    bool starved; /* the last read found the socket empty: what is buffered is no whole message */
    psg_arena_rx_t arena; /* the sender's, once it passed it */
    int passed_fd;        /* a descriptor that came with the bytes, for the arena frame: -1 */
} psg_stream_rx_t;

/* The sending side of one connection: its arena for large frames (net/stream_arena.h). */
typedef struct {
    psg_arena_tx_t arena;
} psg_stream_tx_t;

void psg_stream_tx_init(psg_stream_tx_t *tx);
void psg_stream_tx_clear(psg_stream_tx_t *tx);

void psg_stream_rx_init(psg_stream_rx_t *rx);
/* Frees what it holds and makes it empty, ready for a new connection. */
void psg_stream_rx_clear(psg_stream_rx_t *rx);

/* What reading a connection gave. */
typedef enum {
    PSG_STREAM_MSG = 1,     /* a whole message: rx->parts[0..rx->n), rx->too_many */
    PSG_STREAM_AGAIN = 0,   /* nothing more now */
    PSG_STREAM_CLOSED = -1, /* the peer closed it, or it failed (error set) */
    PSG_STREAM_BAD = -2     /* a frame too large or a bad head: close it (error set) */
} psg_stream_result_t;

/* Reads fd (non-blocking) until one message is whole or nothing more is there. On
 * PSG_STREAM_MSG the caller takes the frames (psg_codec_rx_feed closes them) and sets
 * rx->n = 0, rx->too_many = false before the next call. Bytes of the next message stay
 * buffered: call again before waiting on fd (psg_stream_buffered). */
psg_stream_result_t psg_stream_read(psg_stream_rx_t *rx, int fd);
/* Whether bytes already read wait in rx that may hold a whole message (a poll of the
 * descriptor would not see them). */
bool psg_stream_buffered(const psg_stream_rx_t *rx);

/* Writes out's frames to fd (non-blocking), waiting for room until timeout_ms (< 0: no
 * limit); the frames stay the caller's (psg_codec_out_clear). -1 with the error set and errno
 * (EAGAIN: timed out, EPIPE/ECONNRESET: the peer is gone); a message may then be half written: the
 * caller closes the connection. */
int psg_stream_write(int fd, psg_stream_tx_t *tx, psg_codec_out_t *out, int timeout_ms);

/* Socket buffers of a connection made large enough for a tensor's bytes to go in few writes. */
void psg_stream_tune(int fd);

/* The server's end (net/stream_server.c): a listening Unix socket and its connections. Its
 * reads and waits are the owning thread's; psg_stream_server_send may be called from any. */
typedef struct psg_stream_server psg_stream_server_t;
/* Binds endpoint's path (a file left there is replaced, as ZeroMQ's ipc:// does). At most
 * max_conns connections: at the cap the oldest that said no hello yet is closed for a new one,
 * or when every one did, the new one (each counted in *refused). */
psg_stream_server_t *psg_stream_server_new(const char *endpoint, int max_conns,
                                           atomic_uint_fast64_t *refused);
void psg_stream_server_destroy(psg_stream_server_t **ss);
/* As psg_codec_rx_read for a ROUTER: one message from any connection, without waiting. A
 * connection that breaks the framing is closed (counted in *dropped). */
psg_rx_result_t psg_stream_server_read(psg_stream_server_t *ss, psg_codec_rx_t *rx, psg_msg_t **out,
                                       uint64_t *bad_id, psg_route_t *bad_route, char *bad_peer,
                                       size_t bad_peer_size, atomic_uint_fast64_t *dropped);
/* Sleeps until a connection may have a message or wait_ms (-1: forever) passes. */
int psg_stream_server_wait(psg_stream_server_t *ss, int64_t wait_ms);
/* Writes out (encoded without a route) to the connection of route; the frames stay the
 * caller's. -1 with
 * errno EHOSTUNREACH when no connection has that route, EAGAIN when it took nothing for
 * timeout_ms (the connection is then closed: a message may be half written). */
int psg_stream_server_send(psg_stream_server_t *ss, const psg_route_t *route, psg_codec_out_t *out,
                           int timeout_ms);

#endif
