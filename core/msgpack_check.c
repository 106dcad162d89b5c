/* Walks msgpack bytes without allocating: every header is decoded, every
 * length checked against the bytes left, nesting bounded. */
#include "psgraph/error.h"
#include "core/msgpack_check.h"

#include <stdbool.h>
#include <stdint.h>

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

int psg_msgpack_check(const void *data, size_t len, int max_depth) {
    const unsigned char *p = data;
    size_t off = 0;
    /* remaining[d]: objects still to read at nesting depth d */
    uint64_t remaining[64];
    if (max_depth < 1 || max_depth > 63) max_depth = 63;
    int depth = 0;
    uint64_t objects = 0;
    remaining[0] = 1;
    while (depth >= 0) {
        if (remaining[depth] == 0) {
            depth--;
            continue;
        }
        remaining[depth]--;
        /* msgpack-c spends a msgpack_object (24 bytes) on every object: 64 MiB of nils, which
         * the checks on lengths pass, once took 1.6 GB to unpack */
        if (++objects > PSG_MSGPACK_MAX_OBJECTS)
            return psg_error_set(
                "msgpack: over %d objects at byte %zu (unpacking would take over %d MiB)",
                PSG_MSGPACK_MAX_OBJECTS, off, (PSG_MSGPACK_MAX_OBJECTS >> 20) * 24);
        if (off >= len) return psg_error_set("msgpack: truncated at byte %zu", off);
        unsigned char c = p[off++];
        uint64_t skip = 0, count = 0;
        int hdr = 0;
        bool container = false;
        if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
            /* fixint, nil, bool: done */
        } else if ((c & 0xf0) == 0x80) {
            count = 2u * (c & 0x0f), container = true;
        } else if ((c & 0xf0) == 0x90) {
            count = c & 0x0f, container = true;
        } else if ((c & 0xe0) == 0xa0) {
            skip = c & 0x1f;
        } else {
            switch (c) {
            case 0xc4:
            case 0xd9: hdr = 1; break; /* bin8, str8 */
            case 0xc5:
            case 0xda: hdr = 2; break; /* bin16, str16 */
            case 0xc6:
            case 0xdb: hdr = 4; break; /* bin32, str32 */
            case 0xc7:
                hdr = 1;
                skip = 1;
                break; /* ext8: +type */
            case 0xc8:
                hdr = 2;
                skip = 1;
                break;
            case 0xc9:
                hdr = 4;
                skip = 1;
                break;
            case 0xca: skip = 4; break;
            case 0xcb: skip = 8; break;
            case 0xcc:
            case 0xd0: skip = 1; break;
            case 0xcd:
            case 0xd1: skip = 2; break;
            case 0xce:
            case 0xd2: skip = 4; break;
            case 0xcf:
            case 0xd3: skip = 8; break;
            case 0xd4: skip = 2; break; /* fixext: type + data */
            case 0xd5: skip = 3; break;
            case 0xd6: skip = 5; break;
            case 0xd7: skip = 9; break;
            case 0xd8: skip = 17; break;
            case 0xdc:
                hdr = 2;
                container = true;
                break; /* array16 */
            case 0xdd:
                hdr = 4;
                container = true;
                break; /* array32 */
            case 0xde:
                hdr = 2;
                container = true;
                count = 1;
                break; /* map16: doubled below */
            case 0xdf:
                hdr = 4;
                container = true;
                count = 1;
                break;
            default: return psg_error_set("msgpack: invalid byte 0x%02x at %zu", c, off - 1);
            }
            if (hdr) {
                if (len - off < (size_t)hdr)
                    return psg_error_set("msgpack: truncated header at byte %zu", off);
                uint64_t n = be(p + off, hdr);
                off += (size_t)hdr;
                if (container)
                    count = count ? 2 * n : n;
                else
                    skip += n;
            }
        }
        if (skip > len - off)
            return psg_error_set("msgpack: a field of %llu bytes runs past the end at byte %zu",
                                 (unsigned long long)skip, off);
        off += skip;
        if (container && count) {
            /* each element takes at least one byte */
            if (count > len - off)
                return psg_error_set(
                    "msgpack: a container of %llu elements cannot fit in %zu bytes",
                    (unsigned long long)count, len - off);
            if (depth + 1 >= max_depth)
                return psg_error_set("msgpack: nested deeper than %d", max_depth);
            remaining[++depth] = count;
        }
    }
    if (off != len) return psg_error_set("msgpack: %zu trailing bytes", len - off);
    return 0;
}
