/* libFuzzer: the TFRecord reader (index scan and record reads with their CRCs) and the
 * tf.Example parser (examples/data/tfrecord.c), on a file of the input's bytes; each
 * record's data is parsed as a tf.Example, and the whole input once more. */
#include "fuzz_util.h"
#include "psgraph/tfrecord.h"

#include <fcntl.h>

static void quiet(void *ctx, const char *msg) {
    (void)ctx, (void)msg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    psg_example_image_t ex;
    psg_example_parse(data, size, "image/encoded", "image/class/label", &ex);
    const char *path = psg_fuzz_file(data, size, ".tfrecord");
    psg_tfrecord_entry_t *e = NULL;
    int64_t n = 0;
    if (psg_tfrecord_index(path, &e, &n, quiet, NULL) >= 0) {
        int fd = open(path, O_RDONLY);
        for (int64_t i = 0; fd >= 0 && i < n; i++) {
            uint8_t *buf = malloc(e[i].length > 0 ? (size_t)e[i].length : 1);
            if (buf && psg_tfrecord_read(fd, path, &e[i], buf) == 0)
                psg_example_parse(buf, (size_t)e[i].length, "image/encoded", "image/class/label",
                                  &ex);
            free(buf);
        }
        if (fd >= 0) close(fd);
    }
    free(e);
    return 0;
}
