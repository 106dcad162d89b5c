/* OpenBLAS set up once for psgraph: its thread count and, on a DYNAMIC_ARCH
 * build that does not know the CPU, its kernels. Not the GEMM (gemm.c).
 *
 * Why the kernels: a DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels by
 * CPU family and model when it loads, and a model newer than the library
 * (0.3.21 on an Emerald Rapids Xeon, family 6 model 0xCF) gets the fallback,
 * the SSE3 Prescott kernels: 4-5x slower sgemm than the AVX-512 ones the CPU
 * runs (32 against 150 GFLOP/s at n=512, one thread). OpenBLAS reads
 * OPENBLAS_CORETYPE when it loads, before main, so setting it here is late;
 * but its exported gotoblas_dynamic_quit/gotoblas_dynamic_init redo the
 * choice that load made (the only thing they touch is the table of kernels
 * and its blocking sizes; buffers are sized for the largest core at build
 * time), and they honour OPENBLAS_CORETYPE. So, before the first BLAS call:
 * set it, quit, init. The symbols are looked up at run time, so a build on
 * an OpenBLAS for one target (no DYNAMIC_ARCH) links and keeps its kernels. */
#include "ops/cpu/blas.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

const char *psg_blas_pick_core(const char *current, bool avx2_fma, bool avx512) {
    /* OpenBLAS's SSE-only x86-64 cores: what an unknown CPU falls back to. */
    static const char *const generic[] = {"Prescott", "Core2", "Penryn", "Dunnington",
                                          "Nehalem",  "Atom",  "Unknown"};
    if (!current) return NULL;
    bool is_generic = false;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (!strcasecmp(current, generic[i])) is_generic = true;
    if (!is_generic) return NULL;
    if (avx512) return "SkylakeX";
    if (avx2_fma) return "Haswell";
    return NULL;
}

static void switch_core(void) {
    if (getenv("OPENBLAS_CORETYPE")) return; /* the user chose; OpenBLAS read it at load */
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the AVX/AVX-512 registers */
    bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
    const char *pick = psg_blas_pick_core(openblas_get_corename(), avx2_fma, avx512);
    if (!pick) return;
    void (*quit)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
    void (*init)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    if (!quit || !init) return; /* not a DYNAMIC_ARCH build */
    if (setenv("OPENBLAS_CORETYPE", pick, 1) < 0) return;
    quit();
    init();
}

static void blas_setup(void) {
    switch_core();
    /* psgraph splits GEMMs over its own pool: OpenBLAS's threads would compete with it for
     * the same cores, and they spin (sched_yield) between calls, taking a core from the
     * other threads and processes of a task (the ps beside a worker on one host). */
    openblas_set_num_threads(1);
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

void psg_blas_init(void) {
    pthread_once(&blas_once, blas_setup);
}

const char *psg_blas_core(void) {
    psg_blas_init();
    return openblas_get_corename();
}
