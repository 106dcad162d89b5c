/* The stream transport's shared-memory arena (net/stream_arena.h): a ring of places in a
 * memfd, taken by the sender in order and marked free by the receiver. */
#include "net/stream_arena.h"

#include "psgraph/error.h"
#include "psgraph/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A place's mark: 0 in use, 1 free (the receiver copied it out, or a pad at the ring's end). */
static atomic_uint *mark_of(uint8_t *base, size_t at) {
    return (atomic_uint *)(void *)(base + at);
}

void psg_arena_tx_init(psg_arena_tx_t *a) {
    memset(a, 0, sizeof *a);
    a->fd = -1;
}

void psg_arena_tx_clear(psg_arena_tx_t *a) {
    if (a->base) munmap(a->base, a->size);
    if (a->fd >= 0) close(a->fd);
    psg_arena_tx_init(a);
}

static int tx_make(psg_arena_tx_t *a) {
    int fd = memfd_create("psgraph-stream", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    void *p = MAP_FAILED;
    if (ftruncate(fd, PSG_ARENA_BYTES) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, PSG_ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return -1;
    }
    a->fd = fd;
    a->base = p;
    a->size = PSG_ARENA_BYTES;
    return 0;
}

/* Takes back the oldest places the receiver marked free, in order. */
static void reclaim(psg_arena_tx_t *a) {
    while (a->count > 0) {
        size_t at = a->places[a->first].at;
        if (!atomic_load_explicit(mark_of(a->base, at), memory_order_acquire)) break;
        a->first = (a->first + 1) % PSG_ARENA_PLACES;
        a->count--;
    }
    if (a->count == 0) a->head = 0; /* empty: start again at the front, the space whole */
}

static void push(psg_arena_tx_t *a, size_t at, size_t size, unsigned mark) {
    int i = (a->first + a->count++) % PSG_ARENA_PLACES;
    a->places[i].at = at;
    a->places[i].size = size;
    atomic_store_explicit(mark_of(a->base, at), mark, memory_order_relaxed);
    a->head = at + size == a->size ? 0 : at + size;
}

int psg_arena_tx_place(psg_arena_tx_t *a, size_t len, size_t *at) {
    if (a->fd == -2) return -1;
    if (a->fd == -1 && tx_make(a) < 0) {
        a->fd = -2;
        return -1;
    }
    reclaim(a);
    size_t need = PSG_ARENA_ALIGN + ((len + PSG_ARENA_ALIGN - 1) & ~(size_t)(PSG_ARENA_ALIGN - 1));
    if (need > a->size / 4 || a->count + 2 > PSG_ARENA_PLACES) return -1;
    size_t tail = a->count ? a->places[a->first].at : 0;
    size_t where;
    if (a->count == 0 || a->head > tail) { /* free: [head, size) and [0, tail) */
        if (a->size - a->head >= need) {
            where = a->head;
        } else if (tail >= need) {
            push(a, a->head, a->size - a->head, 1); /* the end's rest, free at once */
            where = 0;
        } else {
            return -1;
        }
    } else if (a->head < tail && tail - a->head >= need) {
        where = a->head;
    } else {
        return -1; /* full (head == tail), or too little between */
    }
    push(a, where, need, 0);
    *at = where + PSG_ARENA_ALIGN;
    return 0;
}

int psg_arena_rx_map(psg_arena_rx_t *a, int fd, uint64_t size) {
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 || size < PSG_ARENA_ALIGN ||
        size > PSG_ARENA_MAX_BYTES || (uint64_t)st.st_size < size) {
        close(fd);
        return psg_error_set("the peer's arena is no memfd sealed against shrinking of %llu "
                             "bytes (at most %u)",
                             (unsigned long long)size, PSG_ARENA_MAX_BYTES);
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return psg_error_set("cannot map the peer's arena: %s", strerror(errno));
    psg_arena_rx_clear(a);
    a->base = p;
    a->size = size;
    return 0;
}

int psg_arena_rx_take(psg_arena_rx_t *a, uint64_t at, uint64_t len, void *dst) {
    if (!a->base) return psg_error_set("a frame in the shared arena before the arena was passed");
    if (at < PSG_ARENA_ALIGN || at % PSG_ARENA_ALIGN || at > a->size || len > a->size - at ||
        len > PSG_WIRE_MAX_FRAME)
        return psg_error_set("a frame of %llu bytes at %llu: outside the arena of %zu bytes",
                             (unsigned long long)len, (unsigned long long)at, a->size);
    memcpy(dst, a->base + at, len);
    atomic_store_explicit(mark_of(a->base, at - PSG_ARENA_ALIGN), 1, memory_order_release);
    return 0;
}

void psg_arena_rx_clear(psg_arena_rx_t *a) {
    if (a->base) munmap(a->base, a->size);
    a->base = NULL;
    a->size = 0;
}
