/* core/json.c: numbers read as strtod reads them, bit for bit (the reader has its own fast
 * path for short decimals), and the errors that name where a document goes wrong. */
#include "core/json.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The number text parses, as a JSON value, to exactly strtod's double. */
static bool same_as_strtod(const char *text) {
    psg_json_t *j = psg_json_parse(text);
    if (!j) {
        fprintf(stderr, "  '%s' did not parse\n", text);
        return false;
    }
    double want = strtod(text, NULL);
    bool same = j->type == PSG_JSON_NUMBER && memcmp(&j->number, &want, sizeof want) == 0;
    if (!same) fprintf(stderr, "  '%s': %.17g, strtod %.17g\n", text, j->number, want);
    psg_json_free(j);
    return same;
}

static void test_edge_numbers(void) {
    static const char *cases[] = {"0",
                                  "-0",
                                  "0.0",
                                  "-0.0",
                                  "1",
                                  "-1",
                                  "0.1",
                                  "0.2",
                                  "0.30000000000000004",
                                  "1e22",
                                  "1e23",
                                  "1e-22",
                                  "1e-23",
                                  "9007199254740992",
                                  "9007199254740993",
                                  "9007199254740995",
                                  "1234567890123456789",
                                  "12345678901234567890",
                                  "0.000000000000000000001234",
                                  "123456789012345678901234567890",
                                  "1.7976931348623157e308",
                                  "1.8e308",
                                  "4.9e-324",
                                  "2.2250738585072014e-308",
                                  "1e-400",
                                  "1E5",
                                  "1e+5",
                                  "2.5E-3",
                                  "100e-2",
                                  "0e999999",
                                  "1e0000000000000000000000001",
                                  "3.4028235e38",
                                  "1.17549435e-38",
                                  "0.5",
                                  "-123.456e7"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) CHECK(same_as_strtod(cases[i]));
}

/* Random decimals in the forms clients send: floats as %.9g and doubles as %.17g write
 * them, short fixed decimals (images scaled to [0, 1]), and digit strings of any length. */
static void test_random_numbers(void) {
    uint64_t state = 88172645463325252ull;
    int bad = 0;
    char text[80];
    for (int i = 0; i < 200000 && bad < 5; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        uint64_t r = state;
        double d;
        memcpy(&d, &r, sizeof d);
        switch (i % 4) {
        case 0:
            if (!isfinite(d)) continue;
            snprintf(text, sizeof text, "%.17g", d);
            break;
        case 1:
            snprintf(text, sizeof text, "%.9g", (double)(float)((r >> 11) * 0x1p-53 * 2 - 1));
            break;
        case 2: snprintf(text, sizeof text, "%.*f", (int)(r % 7), (r >> 8) % 100000 / 1e4); break;
        default: {
            int n = 1 + (int)(r % 24), k = 0;
            if (r >> 63) text[k++] = '-';
            text[k++] = (char)('1' + (r >> 8) % 9);
            for (int m = 1; m < n; m++) text[k++] = (char)('0' + (r >> (m % 50)) % 10);
            if ((r >> 20) & 1) {
                text[k++] = '.';
                text[k++] = (char)('0' + (r >> 30) % 10);
            }
            if ((r >> 21) & 1) k += snprintf(text + k, 12, "e%d", (int)((r >> 40) % 61) - 30);
            text[k] = '\0';
        }
        }
        if (!same_as_strtod(text)) bad++;
    }
    CHECK(bad == 0);
}

/* A served image's worth of numbers in one array, each as strtod reads it. */
static void test_number_array(void) {
    int n = 268203;
    char *s = malloc((size_t)n * 8 + 4), *p = s;
    *p++ = '[';
    for (int i = 0; i < n; i++) p += sprintf(p, "%s%.3f", i ? "," : "", (i * 7919 % 1000) / 1000.0);
    strcpy(p, "]");
    psg_json_t *j = psg_json_parse(s);
    CHECK(j && j->count == n);
    int bad = 0;
    for (int i = 0; j && i < n; i++) {
        char one[16];
        snprintf(one, sizeof one, "%.3f", (i * 7919 % 1000) / 1000.0);
        bad += j->items[i]->number != strtod(one, NULL);
    }
    CHECK(bad == 0);
    psg_json_free(j);
    free(s);
}

static void test_bad_numbers(void) {
    static const char *cases[] = {"01", "1.", ".5", "-", "1e", "1e+", "+1", "0x10", "1.5e3.2"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        psg_json_t *j = psg_json_parse(cases[i]);
        CHECK(!j);
        psg_json_free(j);
    }
}

/* Strings longer than a block, many keys, nesting: every part readable until the one free. */
static void test_strings_and_keys(void) {
    size_t big = (size_t)3 << 20;
    char *s = malloc(big + 65536), *p = s;
    p += sprintf(p, "{\"long\":\"");
    memset(p, 'x', big);
    p += big;
    p += sprintf(p, "\",\"k\":[");
    for (int i = 0; i < 300; i++) p += sprintf(p, "%s{\"a%d\":\"v\\u00e9%d\"}", i ? "," : "", i, i);
    strcpy(p, "]}");
    psg_json_t *j = psg_json_parse(s);
    CHECK(j && j->count == 2);
    const psg_json_t *l = psg_json_get(j, "long"), *k = psg_json_get(j, "k");
    CHECK(l && strlen(l->string) == big && l->string[big - 1] == 'x');
    CHECK(k && k->count == 300 && !strcmp(k->items[299]->items[0]->key, "a299"));
    CHECK(k && !strcmp(k->items[7]->items[0]->string, "v\xc3\xa9"
                                                      "7"));
    psg_json_free(j);
    /* the same with an error at the very end: all of it freed (ASan's leak check) */
    strcpy(p, "],}");
    CHECK(!psg_json_parse(s));
    free(s);
}

int main(void) {
    RUN_TEST(test_edge_numbers);
    RUN_TEST(test_random_numbers);
    RUN_TEST(test_number_array);
    RUN_TEST(test_bad_numbers);
    RUN_TEST(test_strings_and_keys);
    return psg_test_summary();
}
