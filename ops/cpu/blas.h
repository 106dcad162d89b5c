/* OpenBLAS set up once for psgraph: one thread (psgraph splits GEMMs over its
 * own pool) and kernels that fit the CPU. Not the GEMM (gemm.h). */
#ifndef PSGRAPH_OPS_CPU_BLAS_H
#define PSGRAPH_OPS_CPU_BLAS_H

#include <stdbool.h>

/* Sets OpenBLAS up, once per process (thread-safe; later calls return at
 * once): OpenBLAS single-threaded, and, where a DYNAMIC_ARCH OpenBLAS fell
 * back to its SSE3 Prescott kernels on a CPU with AVX2 or AVX-512 (a CPU
 * model newer than the library), its kernels switched to the ones the CPU
 * runs. A user's OPENBLAS_CORETYPE is left as it is. psg_gemm_f32 calls it;
 * anything else that calls OpenBLAS directly calls it first. Best called
 * before other threads start: it sets OPENBLAS_CORETYPE in the environment
 * (children inherit it). */
void psg_blas_init(void);

/* The OpenBLAS kernels in use ("SkylakeX", "Haswell", "Prescott", ...), after
 * psg_blas_init; a static string. */
const char *psg_blas_core(void);

/* The kernels to switch to, or NULL to keep `current`: a generic SSE core
 * (Prescott, Core2, ...) on a CPU with AVX-512 (F, CD, BW, DQ, VL) gives
 * "SkylakeX", with AVX2 and FMA "Haswell". */
const char *psg_blas_pick_core(const char *current, bool avx2_fma, bool avx512);

#endif
