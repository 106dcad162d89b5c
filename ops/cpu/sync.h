/* CPU kernels of the sync-replicas ops (ops/sync.c holds their defs). */
#ifndef PSGRAPH_OPS_CPU_SYNC_H
#define PSGRAPH_OPS_CPU_SYNC_H

#include "psgraph/kernel.h"

int psg_cpu_accumulator(psg_kernel_ctx_t *c);
int psg_cpu_accumulator_apply(psg_kernel_ctx_t *c);
int psg_cpu_accumulator_take(psg_kernel_ctx_t *c);
int psg_cpu_sparse_accumulator(psg_kernel_ctx_t *c);
int psg_cpu_accumulator_set_global_step(psg_kernel_ctx_t *c);
int psg_cpu_accumulator_set_required(psg_kernel_ctx_t *c);
int psg_cpu_token_queue_set_repeat(psg_kernel_ctx_t *c);
int psg_cpu_token_queue_set_live(psg_kernel_ctx_t *c);
int psg_cpu_ssp_clock_set_live(psg_kernel_ctx_t *c);
int psg_cpu_accumulator_num_accumulated(psg_kernel_ctx_t *c);
int psg_cpu_accumulator_close(psg_kernel_ctx_t *c);
int psg_cpu_token_queue(psg_kernel_ctx_t *c);
int psg_cpu_token_queue_enqueue_many(psg_kernel_ctx_t *c);
int psg_cpu_token_queue_dequeue(psg_kernel_ctx_t *c);
int psg_cpu_token_queue_close(psg_kernel_ctx_t *c);
int psg_cpu_ssp_clock(psg_kernel_ctx_t *c);
int psg_cpu_ssp_clock_tick(psg_kernel_ctx_t *c);
int psg_cpu_ssp_clock_reset(psg_kernel_ctx_t *c);
int psg_cpu_ssp_clock_wait(psg_kernel_ctx_t *c);
int psg_cpu_count_accepted(psg_kernel_ctx_t *c);
int psg_cpu_mailbox(psg_kernel_ctx_t *c);
int psg_cpu_mailbox_put(psg_kernel_ctx_t *c);
int psg_cpu_mailbox_take(psg_kernel_ctx_t *c);
int psg_cpu_shard_queue(psg_kernel_ctx_t *c);
int psg_cpu_shard_queue_take(psg_kernel_ctx_t *c);

#endif
