/* Shared helpers of the test programs (assert counters, tensor makers). */
#include "tests/testutil.h"

int psg_test_failures;
int psg_test_checks;

int psg_test_summary(void) {
    printf("%d checks, %d failed\n", psg_test_checks, psg_test_failures);
    return psg_test_failures ? 1 : 0;
}

psg_tensor_t *psg_test_tensor(const psg_shape_t *shape, const float *values) {
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, shape);
    if (t) memcpy(t->data, values, psg_tensor_nbytes(t));
    return t;
}

psg_tensor_t *psg_test_random(const psg_shape_t *shape, float lo, float hi, unsigned *seed) {
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, shape);
    if (!t) return NULL;
    float *d = psg_tensor_f32(t);
    for (int64_t i = 0; i < psg_tensor_numel(t); i++) {
        *seed = *seed * 1103515245u + 12345u;
        d[i] = lo + (hi - lo) * (float)((*seed >> 8) & 0xffffff) / 16777216.0f;
    }
    return t;
}
