/* CPU kernels of the Send/Recv ops (ops/sendrecv.c holds their defs). */
#ifndef PSGRAPH_OPS_CPU_SENDRECV_H
#define PSGRAPH_OPS_CPU_SENDRECV_H

#include "psgraph/kernel.h"

int psg_cpu_send(psg_kernel_ctx_t *c);
int psg_cpu_recv(psg_kernel_ctx_t *c);

/* The rendezvous key of a Send or Recv node, from its attributes, into buf. */
char *psg_sendrecv_key(const psg_node_t *n, char *buf, size_t size);

#endif
