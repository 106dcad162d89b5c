/* Internal to net/: the stream transport's shared-memory arena (issue 33). A large frame on
 * one host need not be copied into the kernel's socket buffers and out again (on the mlp's
 * step, 1 MiB each way, those copies were 13% of the processes' CPU): its sender copies it
 * into a ring in a memfd that both processes map, and sends on the socket only where it
 * lies; the receiver copies it out into the frame's own memory and marks its place free.
 *
 * One arena a connection and direction, made by the sender when it first has a frame to
 * put there, and passed to the receiver once (SCM_RIGHTS) ahead of the frames that use it.
 * The ring is first in, first out: the frames are written and read in the socket's order,
 * and the sender takes back a place once the receiver marked it, in that order. No room (a
 * receiver that does not read, or a frame over a quarter of the ring): the frame goes
 * through the socket as before. Each place starts with a 64-byte header holding the mark;
 * the sender keeps every place's offset and size on its own side, so a receiver that
 * writes the shared memory can only mark places early, which spoils its own copies. The
 * receiver checks each place against the arena's bounds before it copies, and maps only a
 * memfd sealed against shrinking (a truncated mapping would fault). */
#ifndef PSGRAPH_NET_STREAM_ARENA_H
#define PSGRAPH_NET_STREAM_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PSG_ARENA_BYTES (8u << 20)
#define PSG_ARENA_MAX_BYTES (64u << 20) /* the most a receiver maps */
#define PSG_ARENA_MIN_FRAME (32u << 10) /* smaller frames: the socket is as quick */
#define PSG_ARENA_ALIGN 64
#define PSG_ARENA_PLACES 256

/* The sender's side. */
typedef struct {
    int fd; /* the memfd; -1: not made yet; -2: cannot be (the socket, always) */
    uint8_t *base;
    size_t size;
    bool told;   /* its descriptor went to the peer */
    size_t head; /* where the next place starts */
    struct {
        size_t at, size;
    } places[PSG_ARENA_PLACES]; /* in use, oldest first (a ring of them) */
    int first, count;
} psg_arena_tx_t;

void psg_arena_tx_init(psg_arena_tx_t *a);
/* Unmaps and closes it (the receiver's mapping stays valid until it unmaps its own). */
void psg_arena_tx_clear(psg_arena_tx_t *a);
/* A place for len bytes: 0 and its offset in *at; -1 when there is no room now, or no arena
 * can be made (the frame then goes through the socket). */
int psg_arena_tx_place(psg_arena_tx_t *a, size_t len, size_t *at);

/* The receiver's side. */
typedef struct {
    uint8_t *base;
    size_t size;
} psg_arena_rx_t;

/* Maps the sender's memfd (taken: closed here whatever happens), of size bytes. -1 with the
 * error set when it is no memfd sealed against shrinking of at least that size. */
int psg_arena_rx_map(psg_arena_rx_t *a, int fd, uint64_t size);
/* Copies the len bytes at offset at into dst and marks their place free. -1 with the error
 * set when there is no arena or the place is outside it. */
int psg_arena_rx_take(psg_arena_rx_t *a, uint64_t at, uint64_t len, void *dst);
void psg_arena_rx_clear(psg_arena_rx_t *a);

#endif
