/* Tensors with patterned bytes, for the wire's round trips (tests/testutil.c), apart from
 * testutil.h so that a test with a CHECK of its own (one that returns) can use them. */
#ifndef PSGRAPH_TESTS_TENSOR_PATTERN_H
#define PSGRAPH_TESTS_TENSOR_PATTERN_H

#include "psgraph/tensor.h"

#include <stdbool.h>

/* A tensor of dtype dt whose bytes follow a pattern of seed (bools 0 or 1). */
psg_tensor_t *psg_test_patterned(psg_dtype_t dt, psg_shape_t shape, unsigned seed);
/* Same dtype, shape and bytes. */
bool psg_test_same_tensor(const psg_tensor_t *a, const psg_tensor_t *b);

#endif
