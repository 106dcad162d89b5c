/* Reference-counted buffers and the size-bucketed cache behind them.
 * The cache exists because a training step frees and re-allocates the same
 * sizes every step: reusing blocks avoids page faults and keeps RSS flat. */
#include "core/membudget.h"
#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

#define BUFFER_ALIGN 64
#define CACHE_MAX_BYTES ((size_t)1 << 30)
#define NUM_BUCKETS 256
/* Blocks this large come from mmap, not malloc: a trimmed block goes back to
 * the system at once, whatever thread's malloc arena it would have come from. */
#define MMAP_MIN_BYTES ((size_t)256 << 10)

/* A psgraph-owned block: the header lives in front of the data, one cache line. */
typedef struct block {
    psg_buffer_t pub;
    size_t capacity;
    int bucket;
    struct block *next;
    psg_membudget_t *budget; /* charged its capacity while it lives (a reference), or NULL */
} block_t;

#define HEADER_BYTES (((sizeof(block_t) + BUFFER_ALIGN - 1) / BUFFER_ALIGN) * BUFFER_ALIGN)

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static block_t *cache[NUM_BUCKETS];
static size_t cached_bytes;
static atomic_size_t live_bytes;

/* Four buckets per power of two above 256 bytes: at most 25% waste. */
static int bucket_of(size_t size, size_t *capacity) {
    if (size <= 256) {
        *capacity = 256;
        return 0;
    }
    int log2 = 63 - __builtin_clzll((unsigned long long)(size - 1));
    size_t base = (size_t)1 << log2;
    size_t step = base / 4;
    size_t sub = (size - base + step - 1) / step; /* 1..4 */
    *capacity = base + sub * step;
    int b = (log2 - 8) * 4 + (int)sub;
    return b < NUM_BUCKETS ? b : NUM_BUCKETS - 1;
}

/* A cached block for a request of bucket b, or NULL. A mapped block may be up to twice the
 * request (the next 4 buckets): the layers of a convolutional net at a large batch each
 * have their own size, so exact buckets alone left the cache full of blocks no run asked
 * for again while every run mapped (and faulted on) fresh ones: Inception-v3 at batch 32,
 * 545 MB live at its peak, faulted on 2.4 M fresh pages in 7 runs (16 % of its CPU), and
 * 320 K with this. A mapped block's pages past the request are not touched by it: the
 * larger block takes no new memory. */
static block_t *cache_take(int b, size_t capacity) {
    int last = HEADER_BYTES + capacity >= MMAP_MIN_BYTES ? b + 4 : b;
    pthread_mutex_lock(&cache_lock);
    block_t *blk = NULL;
    for (int k = b; k <= last && k < NUM_BUCKETS && !blk; k++) {
        if (!cache[k]) continue;
        blk = cache[k];
        cache[k] = blk->next;
        cached_bytes -= blk->capacity;
    }
    pthread_mutex_unlock(&cache_lock);
    return blk;
}

static void cache_put(block_t *blk);

psg_buffer_t *psg_buffer_new(size_t size) {
    size_t capacity;
    int b = bucket_of(size, &capacity);
    /* the thread's budget (a task server's, while a peer's step runs) pays for it */
    psg_membudget_t *budget = psg_membudget_current();
    if (budget && (capacity > INT64_MAX || psg_membudget_charge(budget, (int64_t)capacity) < 0))
        return NULL;
    block_t *blk = cache_take(b, capacity);
    if (blk && blk->capacity > capacity && budget &&
        psg_membudget_charge(budget, (int64_t)(blk->capacity - capacity)) < 0) {
        cache_put(blk); /* the budget pays for the block's whole capacity, or a new one */
        blk = NULL;
    }
    if (!blk) {
        void *mem;
        if (HEADER_BYTES + capacity >= MMAP_MIN_BYTES) {
            mem = mmap(NULL, HEADER_BYTES + capacity, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (mem == MAP_FAILED) mem = NULL;
        } else {
            mem = aligned_alloc(BUFFER_ALIGN, HEADER_BYTES + capacity);
        }
        if (!mem) {
            if (budget) psg_membudget_release(budget, (int64_t)capacity);
            psg_error_set("out of memory allocating a buffer of %zu bytes", size);
            return NULL;
        }
        blk = mem;
        blk->capacity = capacity;
        blk->bucket = b;
    }
    blk->next = NULL;
    blk->budget = psg_membudget_ref(budget);
    blk->pub.data = (char *)blk + HEADER_BYTES;
    blk->pub.size = size;
    atomic_init(&blk->pub.refcount, 1);
    blk->pub.free_fn = NULL;
    blk->pub.hint = NULL;
    blk->pub.device = 0;
    atomic_fetch_add(&live_bytes, blk->capacity);
    return &blk->pub;
}

psg_buffer_t *psg_buffer_wrap(void *data, size_t size, psg_free_fn free_fn, void *hint) {
    psg_buffer_t *buf = malloc(sizeof *buf);
    if (!buf) {
        psg_error_set("out of memory wrapping a buffer");
        return NULL;
    }
    buf->data = data;
    buf->size = size;
    atomic_init(&buf->refcount, 1);
    buf->free_fn = free_fn;
    buf->hint = hint;
    buf->device = 0;
    return buf;
}

psg_buffer_t *psg_buffer_ref(psg_buffer_t *b) {
    atomic_fetch_add(&b->refcount, 1);
    return b;
}

static void block_free(block_t *blk) {
    if (!blk) return;
    if (HEADER_BYTES + blk->capacity >= MMAP_MIN_BYTES)
        munmap(blk, HEADER_BYTES + blk->capacity);
    else
        free(blk);
}

static void block_release(block_t *blk) {
    atomic_fetch_sub(&live_bytes, blk->capacity);
    if (blk->budget) {
        psg_membudget_release(blk->budget, (int64_t)blk->capacity);
        psg_membudget_unref(&blk->budget);
    }
    cache_put(blk);
}

/* Into the cache, or back to the system when the cache is full. */
static void cache_put(block_t *blk) {
    pthread_mutex_lock(&cache_lock);
    if (cached_bytes + blk->capacity <= CACHE_MAX_BYTES) {
        blk->next = cache[blk->bucket];
        cache[blk->bucket] = blk;
        cached_bytes += blk->capacity;
        blk = NULL;
    }
    pthread_mutex_unlock(&cache_lock);
    block_free(blk);
}

void psg_buffer_unref(psg_buffer_t **bp) {
    if (!bp || !*bp) return;
    psg_buffer_t *b = *bp;
    *bp = NULL;
    if (atomic_fetch_sub(&b->refcount, 1) != 1) return;
    if (b->free_fn) {
        b->free_fn(b->data, b->hint);
        free(b);
    } else {
        block_release((block_t *)b);
    }
}

size_t psg_buffer_cached_bytes(void) {
    pthread_mutex_lock(&cache_lock);
    size_t n = cached_bytes;
    pthread_mutex_unlock(&cache_lock);
    return n;
}

size_t psg_buffer_live_bytes(void) {
    return atomic_load(&live_bytes);
}

void psg_buffer_cache_trim(void) {
    pthread_mutex_lock(&cache_lock);
    for (int b = 0; b < NUM_BUCKETS; b++) {
        while (cache[b]) {
            block_t *blk = cache[b];
            cache[b] = blk->next;
            block_free(blk);
        }
    }
    cached_bytes = 0;
    pthread_mutex_unlock(&cache_lock);
}
