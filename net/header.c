/* The msgpack header of a wire message: written with msgpack-c's packer, read with a strict
 * bounds-checked reader of our own that allocates nothing (msgpack-c's unpacker allocates
 * what a header claims before reading it, so 5 hostile bytes could ask for 100 GB).
 * Not the framing (net/codec.c) nor the sockets. */
#include "net/codec.h"

#include <msgpack.h>
#include <stddef.h>
#include <string.h>

/* ---- writing ------------------------------------------------------------------------ */

static void pack_cstr(msgpack_packer *pk, const char *s, size_t n) {
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_key(msgpack_packer *pk, const char *k) {
    pack_cstr(pk, k, strlen(k));
}

int psg_codec_pack_header(msgpack_sbuffer *sb, const psg_msg_t *m, const uint8_t *place,
                          bool body_inline) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    bool code = m->error && m->code > 0;
    bool body = m->body && m->body->size > 0;
    body_inline = body && body_inline;
    uint64_t inc = psg_wire_incarnation();
    int fields = 4 + (m->op != NULL) + (m->key != NULL) + (m->step != 0) + (m->error != NULL) +
                 code + body + body_inline + (m->ntensors > 0);
    msgpack_pack_map(&pk, (size_t)fields);
    pack_key(&pk, "v");
    msgpack_pack_uint32(&pk, PSG_WIRE_VERSION);
    pack_key(&pk, "k");
    msgpack_pack_uint32(&pk, (uint32_t)m->kind);
    pack_key(&pk, "id");
    msgpack_pack_uint64(&pk, m->id);
    pack_key(&pk, "inc");
    msgpack_pack_uint64(&pk, inc);
    if (m->op) {
        pack_key(&pk, "op");
        pack_key(&pk, m->op);
    }
    if (m->key) {
        pack_key(&pk, "key");
        pack_key(&pk, m->key);
    }
    if (m->step) {
        pack_key(&pk, "step");
        msgpack_pack_int64(&pk, m->step);
    }
    if (m->error) {
        pack_key(&pk, "err");
        pack_cstr(&pk, m->error, strnlen(m->error, PSG_WIRE_MAX_ERROR));
    }
    if (code) {
        pack_key(&pk, "code");
        msgpack_pack_uint32(&pk, (uint32_t)m->code);
    }
    if (m->body && m->body->size > 0) {
        pack_key(&pk, "body");
        msgpack_pack_uint64(&pk, m->body->size);
    }
    if (body_inline) {
        pack_key(&pk, "bi");
        msgpack_pack_true(&pk);
    }
    if (m->ntensors > 0) {
        pack_key(&pk, "t");
        msgpack_pack_array(&pk, (size_t)m->ntensors);
        for (int i = 0; i < m->ntensors; i++) {
            const psg_tensor_t *t = m->tensors[i];
            msgpack_pack_array(&pk, 5);
            if (m->names[i])
                pack_key(&pk, m->names[i]);
            else
                msgpack_pack_nil(&pk);
            pack_key(&pk, psg_dtype_name(t->dtype));
            msgpack_pack_array(&pk, (size_t)t->shape.rank);
            for (int d = 0; d < t->shape.rank; d++) msgpack_pack_int64(&pk, t->shape.dims[d]);
            msgpack_pack_uint64(&pk, psg_tensor_nbytes(t));
            if (place[i] == PSG_PLACE_INLINE) /* version 1's bool for the others */
                msgpack_pack_uint32(&pk, PSG_PLACE_INLINE);
            else if (place[i] == PSG_PLACE_CHUNKS)
                msgpack_pack_true(&pk);
            else
                msgpack_pack_false(&pk);
        }
    }
    return 0;
}

int psg_codec_pack_chunk(msgpack_sbuffer *sb, uint64_t id, uint32_t ti, uint64_t off) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    pack_key(&pk, "v");
    msgpack_pack_uint32(&pk, PSG_WIRE_VERSION);
    pack_key(&pk, "k");
    msgpack_pack_uint32(&pk, PSG_CODEC_CHUNK);
    pack_key(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    pack_key(&pk, "ti");
    msgpack_pack_uint32(&pk, ti);
    pack_key(&pk, "off");
    msgpack_pack_uint64(&pk, off);
    return 0;
}

/* ---- reading ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *p, *end;
} rd_t;

static bool rd_need(rd_t *r, size_t n) {
    return (size_t)(r->end - r->p) >= n;
}

static uint64_t rd_be(rd_t *r, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | r->p[i];
    r->p += n;
    return v;
}

/* A container header (map or array): its element count. */
static int rd_container(rd_t *r, bool map, uint32_t *n) {
    if (!rd_need(r, 1)) return -1;
    uint8_t b = *r->p;
    uint8_t fix = map ? 0x80 : 0x90, c16 = map ? 0xde : 0xdc, c32 = map ? 0xdf : 0xdd;
    if ((b & 0xf0) == fix) {
        r->p++;
        *n = b & 0x0f;
        return 0;
    }
    if (b == c16 || b == c32) {
        int w = b == c16 ? 2 : 4;
        if (!rd_need(r, 1 + (size_t)w)) return -1;
        r->p++;
        *n = (uint32_t)rd_be(r, w);
        return 0;
    }
    return -1;
}

static int rd_str(rd_t *r, const char **s, size_t *len) {
    if (!rd_need(r, 1)) return -1;
    uint8_t b = *r->p;
    size_t n;
    if ((b & 0xe0) == 0xa0) {
        r->p++;
        n = b & 0x1f;
    } else if (b >= 0xd9 && b <= 0xdb) {
        int w = 1 << (b - 0xd9);
        if (!rd_need(r, 1 + (size_t)w)) return -1;
        r->p++;
        n = (size_t)rd_be(r, w);
    } else {
        return -1;
    }
    if (!rd_need(r, n)) return -1;
    *s = (const char *)r->p;
    *len = n;
    r->p += n;
    return 0;
}

static bool rd_nil(rd_t *r) {
    if (rd_need(r, 1) && *r->p == 0xc0) {
        r->p++;
        return true;
    }
    return false;
}

static int rd_bool(rd_t *r, bool *v) {
    if (!rd_need(r, 1) || (*r->p != 0xc2 && *r->p != 0xc3)) return -1;
    *v = *r->p++ == 0xc3;
    return 0;
}

/* Any integer; *neg tells whether it was negative (then *v is its two's complement). */
static int rd_int(rd_t *r, uint64_t *v, bool *neg) {
    if (!rd_need(r, 1)) return -1;
    uint8_t b = *r->p;
    *neg = false;
    if (b <= 0x7f) {
        r->p++;
        *v = b;
        return 0;
    }
    if (b >= 0xe0) {
        r->p++;
        *v = (uint64_t)(int64_t)(int8_t)b;
        *neg = true;
        return 0;
    }
    if (b >= 0xcc && b <= 0xd3) {
        bool is_signed = b >= 0xd0;
        int w = 1 << ((b - 0xcc) & 3);
        if (!rd_need(r, 1 + (size_t)w)) return -1;
        r->p++;
        uint64_t u = rd_be(r, w);
        if (is_signed && w < 8 && (u >> (8 * w - 1)) & 1) u |= ~(uint64_t)0 << (8 * w);
        *v = u;
        *neg = is_signed && (int64_t)u < 0;
        return 0;
    }
    return -1;
}

static int rd_uint(rd_t *r, uint64_t *v) {
    bool neg;
    if (rd_int(r, v, &neg) < 0 || neg) return -1;
    return 0;
}

static bool key_is(const char *k, size_t n, const char *want) {
    return n == strlen(want) && memcmp(k, want, n) == 0;
}

/* Checks a string from the wire: bounded, no NUL inside. */
static int check_str(const char *s, size_t n, size_t max, const char *what) {
    if (n > max) return psg_error_set("%s is %zu bytes (the limit is %zu)", what, n, max);
    if (memchr(s, '\0', n)) return psg_error_set("%s contains a NUL byte", what);
    return 0;
}

static int rd_field_str(rd_t *r, const char **s, size_t *n, size_t max, const char *what) {
    if (rd_str(r, s, n) < 0) return psg_error_set("header field \"%s\" is not a string", what);
    return check_str(*s, *n, max, what);
}

static int rd_tensor(rd_t *r, psg_codec_header_t *h, int i) {
    psg_codec_tdesc_t *t = &h->t[i];
    uint32_t n;
    if (rd_container(r, false, &n) < 0 || n != 5)
        return psg_error_set("tensor %d: not an array of 5 fields", i);
    h->names[i] = NULL;
    h->name_lens[i] = 0;
    if (!rd_nil(r)) {
        if (rd_str(r, &h->names[i], &h->name_lens[i]) < 0)
            return psg_error_set("tensor %d: name is not a string", i);
        if (check_str(h->names[i], h->name_lens[i], PSG_WIRE_MAX_KEY, "tensor name") < 0)
            return psg_error_wrap("tensor %d", i);
    }
    const char *dn;
    size_t dl;
    char dname[16];
    if (rd_str(r, &dn, &dl) < 0) return psg_error_set("tensor %d: dtype is not a string", i);
    memcpy(dname, dn, dl < sizeof dname ? dl : sizeof dname - 1);
    dname[dl < sizeof dname ? dl : sizeof dname - 1] = '\0';
    t->dtype = dl < sizeof dname ? psg_dtype_from_name(dname) : PSG_DT_INVALID;
    if (t->dtype == PSG_DT_INVALID || t->dtype == PSG_DT_RESOURCE)
        return psg_error_set("tensor %d: unknown dtype \"%.*s\"", i, (int)(dl > 16 ? 16 : dl), dn);
    uint32_t rank;
    if (rd_container(r, false, &rank) < 0)
        return psg_error_set("tensor %d: shape is not an array", i);
    if (rank > PSG_MAX_RANK)
        return psg_error_set("tensor %d: rank %u is over the limit of %d", i, rank, PSG_MAX_RANK);
    t->shape.rank = (int)rank;
    uint64_t numel = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < rank; d++) {
        uint64_t v;
        bool neg;
        if (rd_int(r, &v, &neg) < 0)
            return psg_error_set("tensor %d: dim %u is not an integer", i, d);
        if (neg || v > ((uint64_t)1 << 48))
            return psg_error_set("tensor %d: dim %u is %lld", i, d, (long long)(int64_t)v);
        t->shape.dims[d] = (int64_t)v;
        if (v != 0 && numel > UINT64_MAX / v) overflow = true;
        numel *= v;
    }
    for (int d = (int)rank; d < PSG_MAX_RANK; d++) t->shape.dims[d] = 0;
    if (rd_uint(r, &t->nbytes) < 0)
        return psg_error_set("tensor %d: byte count is not an unsigned integer", i);
    bool chunked;
    uint64_t place;
    if (rd_bool(r, &chunked) == 0)
        place = chunked ? PSG_PLACE_CHUNKS : PSG_PLACE_FRAME;
    else if (rd_uint(r, &place) < 0 || place > PSG_PLACE_INLINE)
        return psg_error_set("tensor %d: placement is not 0, 1, 2 or a bool", i);
    t->place = (uint8_t)place;
    t->chunked = place == PSG_PLACE_CHUNKS;
    t->at = 0;
    h->ninline += place == PSG_PLACE_INLINE;
    size_t es = psg_dtype_size(t->dtype);
    if (overflow || numel > UINT64_MAX / es || numel * es != t->nbytes) {
        char s[PSG_SHAPE_STR_MAX];
        return psg_error_set("tensor %d: byte count %llu does not match dtype %s and shape %s", i,
                             (unsigned long long)t->nbytes, psg_dtype_name(t->dtype),
                             psg_shape_str(&t->shape, s, sizeof s));
    }
    return 0;
}

/* Lays the inline tensors and body out after the map; they must fill the frame exactly. */
static int layout_inline(psg_codec_header_t *h, uint64_t size) {
    uint64_t at = h->map_bytes;
    if (h->ninline == 0 && !h->body_inline) {
        if (at != size)
            return psg_error_set("%llu trailing bytes after the header",
                                 (unsigned long long)(size - at));
        return 0;
    }
    for (int i = 0; i < h->ntensors; i++) {
        psg_codec_tdesc_t *t = &h->t[i];
        if (t->place != PSG_PLACE_INLINE) continue;
        at = psg_codec_inline_at(at);
        if (at > size || t->nbytes > size - at)
            return psg_error_set("tensor %d: %llu bytes inline, the header frame has %llu left", i,
                                 (unsigned long long)t->nbytes,
                                 (unsigned long long)(at > size ? 0 : size - at));
        t->at = at;
        at += t->nbytes;
    }
    if (h->body_inline) {
        if (h->body > size - at)
            return psg_error_set("body: %llu bytes inline, the header frame has %llu left",
                                 (unsigned long long)h->body, (unsigned long long)(size - at));
        h->body_at = at;
        at += h->body;
    }
    if (at != size)
        return psg_error_set("the header frame has %llu bytes, its inline bytes end at %llu",
                             (unsigned long long)size, (unsigned long long)at);
    return 0;
}

static int decode_map(const void *data, size_t size, psg_codec_header_t *h) {
    rd_t r = {data, (const uint8_t *)data + size};
    memset(h, 0, offsetof(psg_codec_header_t, names));
    h->ti = 0;
    h->off = 0;
    uint32_t nfields;
    if (rd_container(&r, true, &nfields) < 0) return psg_error_set("header is not a msgpack map");
    if (nfields > 16) return psg_error_set("header has %u fields", nfields);
    uint64_t kind = 0;
    bool have_ti = false, have_off = false, have_id = false;
    for (uint32_t f = 0; f < nfields; f++) {
        const char *k;
        size_t kl;
        if (rd_str(&r, &k, &kl) < 0)
            return psg_error_set("header field %u: key is not a string", f);
        if (key_is(k, kl, "v")) {
            if (rd_uint(&r, &h->version) < 0)
                return psg_error_set("header field \"v\" is not an unsigned integer");
        } else if (key_is(k, kl, "k")) {
            if (rd_uint(&r, &kind) < 0)
                return psg_error_set("header field \"k\" is not an unsigned integer");
        } else if (key_is(k, kl, "id")) {
            if (rd_uint(&r, &h->id) < 0)
                return psg_error_set("header field \"id\" is not an unsigned integer");
            have_id = true;
        } else if (key_is(k, kl, "inc")) {
            if (rd_uint(&r, &h->incarnation) < 0)
                return psg_error_set("header field \"inc\" is not an unsigned integer");
        } else if (key_is(k, kl, "op")) {
            if (rd_field_str(&r, &h->op, &h->op_len, PSG_WIRE_MAX_OP, "op") < 0) return -1;
        } else if (key_is(k, kl, "key")) {
            if (rd_field_str(&r, &h->key, &h->key_len, PSG_WIRE_MAX_KEY, "key") < 0) return -1;
        } else if (key_is(k, kl, "err")) {
            if (rd_field_str(&r, &h->err, &h->err_len, PSG_WIRE_MAX_ERROR, "err") < 0) return -1;
        } else if (key_is(k, kl, "code")) {
            uint64_t v;
            if (rd_uint(&r, &v) < 0 || v > 1000)
                return psg_error_set("header field \"code\" is not an error code");
            h->code = (int)v;
        } else if (key_is(k, kl, "step")) {
            uint64_t v;
            bool neg;
            if (rd_int(&r, &v, &neg) < 0)
                return psg_error_set("header field \"step\" is not an integer");
            h->step = (int64_t)v;
        } else if (key_is(k, kl, "body")) {
            if (rd_uint(&r, &h->body) < 0)
                return psg_error_set("header field \"body\" is not an unsigned integer");
        } else if (key_is(k, kl, "bi")) {
            if (rd_bool(&r, &h->body_inline) < 0)
                return psg_error_set("header field \"bi\" is not a bool");
        } else if (key_is(k, kl, "ti")) {
            uint64_t v;
            if (rd_uint(&r, &v) < 0 || v >= PSG_WIRE_MAX_TENSORS)
                return psg_error_set("header field \"ti\" is not a tensor index");
            h->ti = (uint32_t)v;
            have_ti = true;
        } else if (key_is(k, kl, "off")) {
            if (rd_uint(&r, &h->off) < 0)
                return psg_error_set("header field \"off\" is not an unsigned integer");
            have_off = true;
        } else if (key_is(k, kl, "t")) {
            uint32_t n;
            if (rd_container(&r, false, &n) < 0)
                return psg_error_set("header field \"t\" is not an array");
            if (n > PSG_WIRE_MAX_TENSORS)
                return psg_error_set("message has %u tensors (the limit is %d)", n,
                                     PSG_WIRE_MAX_TENSORS);
            h->ntensors = (int)n;
            for (int i = 0; i < h->ntensors; i++)
                if (rd_tensor(&r, h, i) < 0) return -1;
        } else {
            return psg_error_set("unknown header field \"%.*s\"", (int)(kl > 32 ? 32 : kl), k);
        }
    }
    h->map_bytes = (uint64_t)(r.p - (const uint8_t *)data);
    if (!have_id) return psg_error_set("header has no \"id\"");
    if (kind == 0 || (kind >= PSG_MSG_KIND_COUNT && kind != PSG_CODEC_CHUNK))
        return psg_error_set("unknown message kind %llu", (unsigned long long)kind);
    h->kind = (int)kind;
    if (kind == PSG_CODEC_CHUNK) {
        if (!have_ti || !have_off) return psg_error_set("chunk header lacks \"ti\" or \"off\"");
        if (h->op || h->key || h->err || h->code || h->ntensors || h->body || h->incarnation ||
            h->body_inline)
            return psg_error_set("chunk header has message fields");
    } else if (have_ti || have_off) {
        return psg_error_set("message header has chunk fields");
    }
    if (h->body_inline && !h->body) return psg_error_set("header field \"bi\" without a body");
    return layout_inline(h, size);
}

int psg_codec_decode_header(const void *data, size_t size, psg_codec_header_t *h) {
    int rc = decode_map(data, size, h);
    if (h->version == PSG_WIRE_VERSION || (h->version == 0 && rc < 0)) return rc;
    if (h->version == 0) return psg_error_set("header has no wire version (\"v\")");
    /* another version's header may fail on anything: the versions are what to tell */
    return psg_error_set("wire version %llu, this peer speaks %d: every task must run a "
                         "psgraph of the same wire version",
                         (unsigned long long)h->version, PSG_WIRE_VERSION);
    return rc;
}
