/* libFuzzer: the JPEG decode path of the ImageNet reader (examples/data/imagenet.c):
 * libjpeg behind psg_jpeg_decode, with its size limits checked from the header. */
#include "psgraph/imagenet.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    if (psg_jpeg_decode(data, size, &rgb, &w, &h) == 0 && (w <= 0 || h <= 0 || !rgb)) abort();
    free(rgb);
    return 0;
}
