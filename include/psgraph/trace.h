/* The timeline: a Chrome trace writer ("traceEvents" of complete "X" events,
 * loadable in Perfetto and chrome://tracing) fed by the executor's timing
 * hook, one pid per task and one tid per thread. Not a profiler of kernels'
 * insides, and not the merge of several tasks' traces (the launcher's job). */
#ifndef PSGRAPH_TRACE_H
#define PSGRAPH_TRACE_H

#include <stdint.h>

typedef struct psg_trace psg_trace_t;

/* A trace of one task: pid (the task's number in the merged trace),
 * process_name ("/job:worker/replica:0/task:0") and device ("CPU:0"), which
 * names the threads' tracks. Both strings are copied. NULL on out of memory. */
psg_trace_t *psg_trace_new(int pid, const char *process_name, const char *device);
void psg_trace_destroy(psg_trace_t **t);

/* The training step recorded in the args of the events that follow. */
void psg_trace_set_step(psg_trace_t *t, int64_t step);

/* Records one complete event on the calling thread's track: name (a node
 * name), cat (its op type), start and end in CLOCK_MONOTONIC ns. Thread-safe.
 * Out of memory drops the event and counts it (psg_trace_dropped). */
void psg_trace_event(psg_trace_t *t, const char *name, const char *cat, int64_t start_ns,
                     int64_t end_ns);

/* Records the span of training step `step` (an event named "step N", cat "step") with
 * the tensor bytes this task pushed to and pulled from its peers during it, in its args
 * (bytes_pushed, bytes_pulled). */
void psg_trace_step_event(psg_trace_t *t, int64_t step, int64_t start_ns, int64_t end_ns,
                          int64_t bytes_pushed, int64_t bytes_pulled);

/* A psg_node_timing_fn (session.h) over a psg_trace_t *ctx: pass it to
 * psg_session_set_node_hook(s, psg_trace_node_hook, trace). A Send's or a Recv's
 * bytes go into its event's args ("bytes"). */
void psg_trace_node_hook(void *ctx, const char *node, const char *op, int64_t step_id,
                         int64_t start_ns, int64_t end_ns, int64_t bytes);

int psg_trace_num_events(psg_trace_t *t);
int psg_trace_dropped(psg_trace_t *t);

/* Writes the trace as JSON to path (replacing it atomically): ts and dur in
 * microseconds since the Unix epoch (CLOCK_REALTIME), so traces of tasks on
 * one machine line up when merged. -1 with the error naming the file. */
int psg_trace_write(psg_trace_t *t, const char *path);

/* Parses "A:B" (steps A to B inclusive, 1-based as the progress lines count)
 * or "A" into *first, *last. -1 with the error quoting s. */
int psg_trace_parse_steps(const char *s, int64_t *first, int64_t *last);

#endif
