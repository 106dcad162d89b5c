/* PSG_UNROLL: before a loop of a few iterations known at compile time (a register
 * tile's rows and vectors), asks the compiler to unroll it whole, so that the tile's
 * accumulators stay in registers. Not a vector type or intrinsic. */
#ifndef PSGRAPH_OPS_CPU_UNROLL_H
#define PSGRAPH_OPS_CPU_UNROLL_H

#if defined(__clang__)
#define PSG_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define PSG_UNROLL _Pragma("GCC unroll 16")
#else
#define PSG_UNROLL
#endif

#endif
