/* Denormal floats (subnormals, below FLT_MIN = 1.2e-38): flushed to zero, as TensorFlow's
 * CPU kernels do, or kept, as IEEE 754 says. On x86 a denormal input or result costs a
 * microcode assist (about a hundred cycles), and an optimizer's slots decay into that range:
 * Adam's and momentum's first moment of a weight whose gradient stays 0 (a dead ReLU unit)
 * shrinks by 0.9 a step, below FLT_MIN after some 700 steps, and the update of every such
 * element then runs tens of times slower. Flushing changes only values below FLT_MIN
 * (docs/engine.md, "Denormal floats").
 *
 * The choice is the process's: flush by default, keep when the environment says
 * PSGRAPH_DENORMALS=keep or psg_fp_set_flush_denormals(false) is called. It is applied to
 * the thread that runs each kernel (psg_fp_enter/psg_fp_leave around it: the executor, the
 * thread pool's tasks, a backup's replay), so the threads of a program that embeds psgraph
 * keep their own mode outside psgraph's kernels. */
#ifndef PSGRAPH_FP_MODE_H
#define PSGRAPH_FP_MODE_H

#include <stdbool.h>

/* The process's choice: true (the default) flushes, false keeps. The first call of any
 * function here reads PSGRAPH_DENORMALS ("flush" or "keep"; anything else is refused by
 * psg_fp_mode_from_env). */
void psg_fp_set_flush_denormals(bool flush);
bool psg_fp_flush_denormals(void);

/* Reads PSGRAPH_DENORMALS into the process's choice. Returns 0, or -1 with the error (the
 * variable's value named) when it is neither "flush" nor "keep" (the choice is unchanged). */
int psg_fp_mode_from_env(void);

/* Whether this CPU's mode can be set (x86-64 and AArch64); elsewhere both choices run as the
 * CPU does and psg_fp_enter changes nothing. */
bool psg_fp_mode_supported(void);

/* Puts this thread's floating-point control in the process's choice; returns what it was,
 * for psg_fp_leave. Costs a few cycles: called around each kernel. */
unsigned psg_fp_enter(void);
void psg_fp_leave(unsigned saved);

#endif
