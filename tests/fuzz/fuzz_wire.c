/* libFuzzer: the wire's header decoder (net/header.c) and the msgpack pre-check
 * (core/msgpack_check.c), the two parsers every received frame meets first. When the
 * pre-check accepts bytes, msgpack-c must unpack them (they agree), and no header the
 * decoder accepts may claim a tensor whose bytes disagree with its dtype and shape. */
#include "net/codec.h"
#include "core/msgpack_check.h"

#include <msgpack.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static psg_codec_header_t h; /* 4096 tensor descriptors: too big for the stack */
    if (psg_codec_decode_header(data, size, &h) == 0) {
        for (int i = 0; i < h.ntensors; i++)
            if (h.t[i].nbytes !=
                (uint64_t)psg_shape_numel(&h.t[i].shape) * psg_dtype_size(h.t[i].dtype))
                abort();
    }
    if (psg_msgpack_check(data, size, 16) == 0) {
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        size_t off = 0;
        if (msgpack_unpack_next(&up, (const char *)data, size, &off) != MSGPACK_UNPACK_SUCCESS ||
            off != size)
            abort(); /* the pre-check accepted what msgpack-c refuses */
        msgpack_unpacked_destroy(&up);
    }
    return 0;
}
