/* The stream transport's shared-memory arena (net/stream_arena.c) in one process: the
 * sender's ring and the receiver's mapping of the same memfd. Places taken in order, copied
 * out byte for byte and taken back once marked; a ring full, then room again; a place that
 * does not fit at the end wraps to the front; frames over a quarter of the ring refused;
 * places outside the arena and memfds not sealed against shrinking refused by the receiver. */
#include "net/stream_arena.h"

#include "psgraph/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__,      \
                    #cond, psg_error_message());                                                   \
            failures++;                                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define MIB (1u << 20)

/* Fills a place with a pattern of seed; true when dst holds the same. */
static void fill(uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 131 + i * 7);
}
static bool same(const uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(seed * 131 + i * 7)) return false;
    return true;
}

static void test_ring(void) {
    psg_arena_tx_t tx;
    psg_arena_rx_t rx = {0};
    psg_arena_tx_init(&tx);
    size_t at[8];
    CHECK(psg_arena_tx_place(&tx, MIB + 5, &at[0]) == 0 && tx.fd >= 0);
    CHECK(psg_arena_rx_map(&rx, dup(tx.fd), tx.size) == 0);
    /* 1.5 MiB places (1.5 MiB + a header each): five fit in 8 MiB, the sixth does not */
    size_t len = 3 * MIB / 2;
    CHECK(psg_arena_tx_place(&tx, len, &at[1]) == 0);
    for (int i = 2; i < 5; i++) CHECK(psg_arena_tx_place(&tx, len, &at[i]) == 0);
    CHECK(psg_arena_tx_place(&tx, len, &at[5]) < 0);
    CHECK(psg_arena_tx_place(&tx, tx.size / 4 + 1, &at[5]) < 0); /* over a quarter */
    for (int i = 0; i < 5; i++) fill(tx.base + at[i], i == 0 ? MIB + 5 : len, (unsigned)i);
    uint8_t *dst = malloc(2 * MIB);
    CHECK(dst);
    /* the second taken out first: nothing comes back (the oldest is still in use) */
    CHECK(psg_arena_rx_take(&rx, at[1], len, dst) == 0 && same(dst, len, 1));
    CHECK(psg_arena_tx_place(&tx, len, &at[5]) < 0);
    /* the oldest taken: both come back, in order; the next place wraps to the front */
    CHECK(psg_arena_rx_take(&rx, at[0], MIB + 5, dst) == 0 && same(dst, MIB + 5, 0));
    CHECK(psg_arena_tx_place(&tx, len, &at[5]) == 0 && at[5] == 64);
    fill(tx.base + at[5], len, 5);
    for (int i = 2; i < 6; i++)
        CHECK(psg_arena_rx_take(&rx, at[i], len, dst) == 0 && same(dst, len, (unsigned)i));
    /* all taken back: the ring starts again at its front */
    CHECK(psg_arena_tx_place(&tx, 100, &at[0]) == 0 && at[0] == 64);
    free(dst);
    psg_arena_rx_clear(&rx);
    psg_arena_tx_clear(&tx);
}

static void test_receiver_checks(void) {
    psg_arena_tx_t tx;
    psg_arena_rx_t rx = {0};
    psg_arena_tx_init(&tx);
    size_t at;
    uint8_t dst[256];
    CHECK(psg_arena_rx_take(&rx, 64, 10, dst) < 0); /* no arena yet */
    CHECK(strstr(psg_error_message(), "before the arena was passed"));
    CHECK(psg_arena_tx_place(&tx, 100, &at) == 0);
    CHECK(psg_arena_rx_map(&rx, dup(tx.fd), tx.size) == 0);
    uint64_t bad[][2] = {{0, 10}, {65, 10}, {tx.size, 1}, {tx.size - 64, 65}, {64, UINT64_MAX}};
    for (int i = 0; i < 5; i++) {
        CHECK(psg_arena_rx_take(&rx, bad[i][0], bad[i][1], dst) < 0);
        CHECK(strstr(psg_error_message(), "outside the arena"));
    }
    /* a mapping larger than the memfd, or over the most a receiver maps */
    psg_arena_rx_t other = {0};
    CHECK(psg_arena_rx_map(&other, dup(tx.fd), (uint64_t)tx.size + 4096) < 0);
    CHECK(psg_arena_rx_map(&other, dup(tx.fd), (uint64_t)PSG_ARENA_MAX_BYTES + 64) < 0);
    /* a memfd a hostile sender could shrink under the mapping */
    int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
    CHECK(unsealed >= 0 && ftruncate(unsealed, 1 << 20) == 0);
    CHECK(psg_arena_rx_map(&other, unsealed, 1 << 20) < 0);
    CHECK(strstr(psg_error_message(), "sealed against shrinking"));
    CHECK(other.base == NULL);
    psg_arena_rx_clear(&rx);
    psg_arena_tx_clear(&tx);
}

int main(void) {
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {{"ring", test_ring}, {"receiver_checks", test_receiver_checks}};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = failures;
        tests[i].fn();
        printf("%s %s\n", failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    return failures ? 1 : 0;
}
