/* libFuzzer: the IDX reader (examples/data/idx.c, Fashion-MNIST's format) on a file of the
 * input's bytes (gzip or plain: zlib reads both). */
#include "fuzz_util.h"
#include "psgraph/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    psg_tensor_t *t = psg_idx_read(psg_fuzz_file(data, size, ".idx"));
    psg_tensor_destroy(&t);
    return 0;
}
