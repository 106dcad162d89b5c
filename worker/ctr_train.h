/* Internal to psgraph: the wide-and-deep training loop (worker/ctr_train.c), which
 * psg_train runs for --model wide-deep. */
#ifndef PSGRAPH_WORKER_CTR_TRAIN_H
#define PSGRAPH_WORKER_CTR_TRAIN_H

#include "psgraph/trainer.h"

/* Trains wide-deep on c->data_dir (Criteo format) as psg_train does; r->test_accuracy gets
 * the held-out AUC. Returns 0, or -1 with the error set. */
int psg_train_ctr(const psg_train_config_t *c, psg_train_result_t *r);

#endif
