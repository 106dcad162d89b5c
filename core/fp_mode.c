/* The process's choice for denormal floats and the thread's control register that carries
 * it: MXCSR's FTZ (bit 15: a denormal result becomes 0) and DAZ (bit 6: a denormal input
 * reads as 0) on x86, FPCR's FZ (bit 24: both) on AArch64. */
#include "psgraph/fp_mode.h"
#include "psgraph/error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLUSH_BITS (1u << 15 | 1u << 6)
static unsigned read_control(void) {
    return _mm_getcsr();
}
static void write_control(unsigned v) {
    _mm_setcsr(v);
}
#define SUPPORTED true
#elif defined(__aarch64__)
#define FLUSH_BITS (1u << 24)
static unsigned read_control(void) {
    unsigned long v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return (unsigned)v;
}
static void write_control(unsigned v) {
    __asm__ volatile("msr fpcr, %0" : : "r"((unsigned long)v));
}
#define SUPPORTED true
#else
#define FLUSH_BITS 0u
static unsigned read_control(void) {
    return 0;
}
static void write_control(unsigned v) {
    (void)v;
}
#define SUPPORTED false
#endif

/* -1: not decided yet (the environment not read), 0: keep, 1: flush */
static atomic_int choice = -1;

/* PSGRAPH_DENORMALS: 1 flush (also unset or empty), 0 keep, -1 anything else */
static int env_choice(void) {
    const char *v = getenv("PSGRAPH_DENORMALS");
    if (!v || !*v || !strcmp(v, "flush")) return 1;
    return strcmp(v, "keep") ? -1 : 0;
}

int psg_fp_mode_from_env(void) {
    int c = env_choice();
    if (c < 0) {
        int undecided = -1;
        atomic_compare_exchange_strong(&choice, &undecided, 1);
        return psg_error_set("PSGRAPH_DENORMALS='%s': expected flush or keep",
                             getenv("PSGRAPH_DENORMALS"));
    }
    atomic_store(&choice, c);
    return 0;
}

void psg_fp_set_flush_denormals(bool flush) {
    atomic_store(&choice, flush ? 1 : 0);
}

bool psg_fp_flush_denormals(void) {
    int c = atomic_load_explicit(&choice, memory_order_relaxed);
    if (c < 0) {
        /* first use without psg_fp_mode_from_env: a bad value flushes (the CLI reports it) */
        int undecided = -1;
        atomic_compare_exchange_strong(&choice, &undecided, env_choice() == 0 ? 0 : 1);
        c = atomic_load(&choice);
    }
    return c == 1;
}

bool psg_fp_mode_supported(void) {
    return SUPPORTED;
}

unsigned psg_fp_enter(void) {
    unsigned saved = read_control();
    unsigned want = psg_fp_flush_denormals() ? saved | FLUSH_BITS : saved & ~FLUSH_BITS;
    if (want != saved) write_control(want);
    return saved;
}

void psg_fp_leave(unsigned saved) {
    if (read_control() != saved) write_control(saved);
}
