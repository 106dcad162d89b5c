/* libFuzzer: the PNG decode path of the image readers (examples/data/png.c): libpng behind
 * psg_png_decode, with its size limits checked from the header before any pixel. */
#include "psgraph/imagenet.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    if (psg_png_decode(data, size, &rgb, &w, &h) == 0 && (w <= 0 || h <= 0 || !rgb)) abort();
    if (rgb) { /* every decoded byte is there: ASan sees a short buffer */
        volatile uint8_t sum = 0;
        for (size_t i = 0; i < (size_t)w * (size_t)h * 3; i++) sum = (uint8_t)(sum + rgb[i]);
        (void)sum;
    }
    free(rgb);
    return 0;
}
