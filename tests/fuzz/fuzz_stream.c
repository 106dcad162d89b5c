/* libFuzzer: the stream transport's reader (net/stream.c) on the bytes a peer writes to a
 * Unix socket, and the reassembly (psg_codec_rx_feed) of every message it puts together:
 * frame heads, flags, frames placed in an arena never passed, truncated frames. The input is
 * written to one end of a socketpair and closed; the reader must end (closed, or a bad
 * frame) without a crash or a leak. */
#include "net/codec.h"
#include "net/stream.h"

#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int sv[2];
    if (size > 60000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0) return 0;
    if (write(sv[0], data, size) != (ssize_t)size) {
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    close(sv[0]);
    psg_wire_opts_t o = psg_wire_opts_default();
    psg_codec_rx_t *rx = psg_codec_rx_new(&o);
    psg_stream_rx_t srx;
    psg_stream_rx_init(&srx);
    psg_route_t route = {.len = 1, .id = {7}};
    psg_conn_t conn = {.fd = -1};
    for (int guard = 0; rx && guard < 100000; guard++) {
        psg_stream_result_t r = psg_stream_read(&srx, sv[1]);
        if (r != PSG_STREAM_MSG) break; /* closed (the input's end), bad, or nothing more */
        psg_msg_t *m = NULL;
        uint64_t bad_id;
        (void)psg_codec_rx_feed(rx, srx.parts, srx.n, srx.too_many, &route, &conn, "fuzz", "", &m,
                                &bad_id);
        srx.n = 0;
        srx.too_many = false;
        psg_msg_destroy(&m);
    }
    psg_stream_rx_clear(&srx);
    psg_codec_rx_destroy(&rx);
    close(sv[1]);
    return 0;
}
