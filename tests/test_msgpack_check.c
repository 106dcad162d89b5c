/* The structural check of untrusted msgpack bytes (core/msgpack_check.c), on its own: every
 * format's header and length at its boundary (the exact bytes pass, one byte less fails),
 * the nesting bound, and the object cap (PSG_MSGPACK_MAX_OBJECTS) at its edge, in well under a
 * second: the end-to-end case is test_hostile's RegisterGraph of 64 MiB of nils.
 * Not the graph's deserializer (test_serialize.c). */
#include "core/msgpack_check.h"
#include "tests/testutil.h"

#include <stdint.h>
#include <stdlib.h>

/* n bytes of buf pass the check; n - 1 of them fail it (every format's last byte counts). */
static void check_exact(const char *what, const unsigned char *buf, size_t n) {
    int ok = psg_msgpack_check(buf, n, 8);
    if (ok != 0) fprintf(stderr, "  %s: %s\n", what, psg_error_message());
    CHECK(ok == 0);
    CHECK(psg_msgpack_check(buf, n - 1, 8) < 0);
}

/* Every scalar format, with the bytes its header says follow. */
static void test_formats(void) {
    static const struct {
        const char *what;
        unsigned char bytes[40];
        size_t n;
    } cases[] = {
        {"positive fixint", {0x7f}, 1},
        {"negative fixint", {0xe0}, 1},
        {"nil", {0xc0}, 1},
        {"false", {0xc2}, 1},
        {"true", {0xc3}, 1},
        {"fixstr 3", {0xa3, 'a', 'b', 'c'}, 4},
        {"fixstr 31", {0xbf}, 32},
        {"str8", {0xd9, 2, 'h', 'i'}, 4},
        {"bin8", {0xc4, 3, 1, 2, 3}, 5},
        {"bin16", {0xc5, 0, 2, 9, 9}, 5},
        {"str16", {0xda, 0, 1, 'x'}, 4},
        {"bin32", {0xc6, 0, 0, 0, 1, 7}, 6},
        {"str32", {0xdb, 0, 0, 0, 2, 'o', 'k'}, 7},
        {"ext8", {0xc7, 2, 5, 1, 2}, 5},
        {"ext16", {0xc8, 0, 1, 5, 1}, 5},
        {"ext32", {0xc9, 0, 0, 0, 1, 5, 1}, 7},
        {"float32", {0xca, 0x3f, 0x80, 0, 0}, 5},
        {"float64", {0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}, 9},
        {"uint8", {0xcc, 200}, 2},
        {"uint16", {0xcd, 1, 0}, 3},
        {"uint32", {0xce, 0, 1, 0, 0}, 5},
        {"uint64", {0xcf, 0, 0, 0, 1, 0, 0, 0, 0}, 9},
        {"int8", {0xd0, 0x80}, 2},
        {"int16", {0xd1, 0x80, 0}, 3},
        {"int32", {0xd2, 0x80, 0, 0, 0}, 5},
        {"int64", {0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, 9},
        {"fixext1", {0xd4, 1, 2}, 3},
        {"fixext2", {0xd5, 1, 2, 3}, 4},
        {"fixext4", {0xd6, 1, 2, 3, 4, 5}, 6},
        {"fixext8", {0xd7, 1, 1, 2, 3, 4, 5, 6, 7, 8}, 10},
        {"fixext16", {0xd8, 1}, 18},
        {"fixarray 2", {0x92, 1, 2}, 3},
        {"fixarray 15", {0x9f}, 16},
        {"fixmap 1", {0x81, 1, 2}, 3},
        {"fixmap 15", {0x8f}, 31},
        {"array16", {0xdc, 0, 2, 0xc0, 0xc0}, 5},
        {"array32", {0xdd, 0, 0, 0, 1, 0xc3}, 6},
        {"map16", {0xde, 0, 1, 1, 2}, 5},
        {"map32", {0xdf, 0, 0, 0, 1, 0xa1, 'k', 0xc0}, 8},
        {"array of a map of a str", {0x91, 0x81, 0xa1, 'k', 0x92, 0xc2, 0xd0, 0xff}, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_exact(cases[i].what, cases[i].bytes, cases[i].n);
    /* empty containers are whole objects */
    CHECK(psg_msgpack_check("\x90", 1, 8) == 0);
    CHECK(psg_msgpack_check("\x80", 1, 8) == 0);
    CHECK(psg_msgpack_check("\xdc\x00\x00", 3, 8) == 0);
    CHECK(psg_msgpack_check("\xdf\x00\x00\x00\x00", 5, 8) == 0);
}

/* Lengths are big-endian, several bytes wide: str16 of 258 bytes, str32 of 261. */
static void test_lengths(void) {
    unsigned char buf[300] = {0xda, 0x01, 0x02};
    check_exact("str16 of 258", buf, 3 + 258);
    unsigned char buf32[300] = {0xdb, 0x00, 0x00, 0x01, 0x05};
    check_exact("str32 of 261", buf32, 5 + 261);
    unsigned char arr[300] = {0xdc, 0x01, 0x03};
    check_exact("array16 of 259 nils", arr, 3 + 259);
    /* a length header cut short */
    CHECK(psg_msgpack_check("\xc4", 1, 8) < 0);
    CHECK_ERROR_HAS("truncated header at byte 1");
    CHECK(psg_msgpack_check("\xdd\x00\x00\x01", 4, 8) < 0);
    CHECK_ERROR_HAS("truncated header");
    /* a field past the end, a container that cannot fit, nothing at all */
    CHECK(psg_msgpack_check("\xd9\x05"
                            "ab",
                            4, 8) < 0);
    CHECK_ERROR_HAS("a field of 5 bytes runs past the end at byte 2");
    CHECK(psg_msgpack_check("\xdd\xff\xff\xff\xff\x01", 6, 8) < 0);
    CHECK_ERROR_HAS("a container of 4294967295 elements cannot fit in 1 bytes");
    CHECK(psg_msgpack_check("\xdf\x00\x00\x00\x02\x01\x02\x03", 8, 8) < 0); /* 2 pairs: 4 objects */
    CHECK_ERROR_HAS("a container of 4 elements cannot fit in 3 bytes");
    CHECK(psg_msgpack_check("", 0, 8) < 0);
    CHECK_ERROR_HAS("truncated at byte 0");
    CHECK(psg_msgpack_check("\x92\x91\x01", 3, 8) <
          0); /* each count fits, the outer array is short */
    CHECK_ERROR_HAS("truncated at byte 3");
}

/* Exactly one object: an invalid byte and trailing bytes are refused. */
static void test_one_object(void) {
    CHECK(psg_msgpack_check("\xc1", 1, 8) < 0);
    CHECK_ERROR_HAS("invalid byte 0xc1 at 0");
    CHECK(psg_msgpack_check("\x91\xc1", 2, 8) < 0);
    CHECK_ERROR_HAS("invalid byte 0xc1 at 1");
    CHECK(psg_msgpack_check("\x01\x02", 2, 8) < 0);
    CHECK_ERROR_HAS("1 trailing bytes");
    CHECK(psg_msgpack_check("\x91\x01\x02\x03", 4, 8) < 0);
    CHECK_ERROR_HAS("2 trailing bytes");
}

/* max_depth levels of nesting: max_depth - 1 nested arrays pass, one more fails; a max_depth
 * out of [1, 63] means 63. */
static void test_depth(void) {
    unsigned char buf[80];
    for (int levels = 1; levels <= 64; levels++) {
        memset(buf, 0x91, (size_t)levels);
        buf[levels] = 0x01;
        int want_ok = levels <= 62;
        CHECK((psg_msgpack_check(buf, (size_t)levels + 1, 0) == 0) == want_ok);
        CHECK((psg_msgpack_check(buf, (size_t)levels + 1, 64) == 0) == want_ok);
        CHECK((psg_msgpack_check(buf, (size_t)levels + 1, 63) == 0) == want_ok);
        CHECK((psg_msgpack_check(buf, (size_t)levels + 1, 4) == 0) == (levels <= 3));
        CHECK(psg_msgpack_check(buf, (size_t)levels + 1, 1) < 0); /* 1: no container at all */
    }
    CHECK(psg_msgpack_check("\x01", 1, 1) == 0);
    CHECK(psg_msgpack_check("\x91\x91\x91\x91\x01", 5, 4) < 0);
    CHECK_ERROR_HAS("nested deeper than 4");
    /* siblings do not add depth: [[1], [1], [1]] at max_depth 3 */
    CHECK(psg_msgpack_check("\x93\x91\x01\x91\x01\x91\x01", 7, 3) == 0);
    /* a map's values nest as an array's elements */
    CHECK(psg_msgpack_check("\x81\x01\x81\x01\x01", 5, 3) == 0);
    CHECK(psg_msgpack_check("\x81\x01\x81\x01\x81\x01\x01", 7, 3) < 0);
}

/* The object cap: PSG_MSGPACK_MAX_OBJECTS objects pass (the array itself and N - 1 nils), one
 * more fails naming the cap, wherever the extra object is (nested, or a map's value). */
static void test_object_cap(void) {
    const uint64_t cap = PSG_MSGPACK_MAX_OBJECTS;
    size_t n = (size_t)cap + 16;
    unsigned char *buf = malloc(n);
    PSG_ASSERT(buf);
    memset(buf, 0xc0, n);
    /* array32 of cap - 1 nils: cap objects */
    uint64_t count = cap - 1;
    buf[0] = 0xdd;
    for (int i = 0; i < 4; i++) buf[1 + i] = (unsigned char)(count >> (24 - 8 * i));
    CHECK(psg_msgpack_check(buf, 5 + count, 8) == 0);
    /* cap nils: one object over */
    count = cap;
    for (int i = 0; i < 4; i++) buf[1 + i] = (unsigned char)(count >> (24 - 8 * i));
    CHECK(psg_msgpack_check(buf, 5 + count, 8) < 0);
    CHECK_ERROR_HAS("msgpack: over 8388608 objects at byte");
    CHECK_ERROR_HAS("(unpacking would take over 192 MiB)");
    /* [[nil x (cap - 3)], nil]: cap objects; one more nil inside is over */
    count = cap - 3;
    buf[0] = 0x92;
    buf[1] = 0xdd;
    for (int i = 0; i < 4; i++) buf[2 + i] = (unsigned char)(count >> (24 - 8 * i));
    CHECK(psg_msgpack_check(buf, 6 + count + 1, 8) == 0);
    count = cap - 2;
    for (int i = 0; i < 4; i++) buf[2 + i] = (unsigned char)(count >> (24 - 8 * i));
    CHECK(psg_msgpack_check(buf, 6 + count + 1, 8) < 0);
    CHECK_ERROR_HAS("over 8388608 objects");
    /* a map32 of (cap - 1) / 2 pairs of nils: cap - 1 objects with the map; a pair more is over */
    count = (cap - 1) / 2;
    buf[0] = 0xdf;
    for (int i = 0; i < 4; i++) buf[1 + i] = (unsigned char)(count >> (24 - 8 * i));
    memset(buf + 5, 0xc0, n - 5);
    CHECK(psg_msgpack_check(buf, 5 + 2 * count, 8) == 0);
    count++;
    for (int i = 0; i < 4; i++) buf[1 + i] = (unsigned char)(count >> (24 - 8 * i));
    CHECK(psg_msgpack_check(buf, 5 + 2 * count, 8) < 0);
    CHECK_ERROR_HAS("over 8388608 objects");
    free(buf);
}

int main(void) {
    RUN_TEST(test_formats);
    RUN_TEST(test_lengths);
    RUN_TEST(test_one_object);
    RUN_TEST(test_depth);
    RUN_TEST(test_object_cap);
    return psg_test_summary();
}
