/* "%.9g" of a float without printf, behind serving/float_text.h. printf takes about 600 ns
 * a number here (its format parsing and arbitrary-precision digits), and a served answer
 * writes 20 of them a row: a tenth of the HTTP side's CPU a request. A float is m * 2^e
 * exactly (m < 2^24), so its 9 correctly rounded significant digits are
 * round(m * 2^e * 10^(8-k)) for its decimal exponent k, a quotient of two integers that
 * fit in 128 bits for the magnitudes answers hold (for |x| < 1e9 the divisor is a power of
 * two: a shift); rounded half to even, as glibc's printf
 * rounds the exact binary value. The text then follows %g: fixed notation for exponents
 * -4 to 8, else d.dddde±XX, trailing zeros dropped. tests/test_serving.c checks it against
 * snprintf over millions of floats. */
#include "serving/float_text.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef unsigned __int128 u128;

static int bits(u128 v) {
    uint64_t hi = (uint64_t)(v >> 64), lo = (uint64_t)v;
    return hi ? 128 - __builtin_clzll(hi) : lo ? 64 - __builtin_clzll(lo) : 0;
}

/* 10^n for n <= 38 (u128's largest power of ten). */
static u128 pow10_u128(int n) {
    static const uint64_t p[20] = {1ull,
                                   10ull,
                                   100ull,
                                   1000ull,
                                   10000ull,
                                   100000ull,
                                   1000000ull,
                                   10000000ull,
                                   100000000ull,
                                   1000000000ull,
                                   10000000000ull,
                                   100000000000ull,
                                   1000000000000ull,
                                   10000000000000ull,
                                   100000000000000ull,
                                   1000000000000000ull,
                                   10000000000000000ull,
                                   100000000000000000ull,
                                   1000000000000000000ull,
                                   10000000000000000000ull};
    return n < 20 ? p[n] : (u128)p[19] * p[n - 19];
}

/* m * 2^e * 10^d as num / 2^shift / div (div 1 or a power of ten): false when it does not
 * fit in 126 bits. Most answers (|x| < 1e9) divide by a power of two alone: a shift. */
static bool scaled(uint64_t m, int e, int d, u128 *num, int *shift, u128 *div) {
    int nb = bits(m);
    *num = m;
    *shift = e < 0 ? -e : 0;
    *div = 1;
    if (e > 0) {
        if (nb + e > 126) return false;
        *num <<= e;
        nb += e;
    }
    if (*shift > 126 || d > 38 || d < -38) return false;
    u128 p = pow10_u128(d < 0 ? -d : d);
    if (d >= 0) {
        if (nb + bits(p) > 126) return false;
        *num *= p;
    } else {
        if (*shift + bits(p) > 126) return false;
        *div = p;
    }
    return true;
}

int psg_float_text_g9(float x, char *out) {
    if (!isfinite(x)) return 0;
    char *o = out;
    if (signbit(x)) *o++ = '-';
    x = fabsf(x);
    if (x == 0.0f) {
        *o++ = '0';
        *o = 0;
        return (int)(o - out);
    }
    int e2;
    float fr = frexpf(x, &e2); /* x = fr * 2^e2, fr in [0.5, 1) */
    uint64_t m = (uint64_t)ldexpf(fr, 24);
    int e = e2 - 24;
    /* x is in [2^(e2-1), 2^e2): its decimal exponent is this or one more (found below) */
    int k = (int)floor((e2 - 1) * 0.30102999566398120);
    u128 num, div, q, r;
    int shift;
    for (int tries = 0;; tries++) {
        if (tries > 3 || !scaled(m, e, 8 - k, &num, &shift, &div)) return 0;
        u128 den = div << shift; /* < 2^126 */
        q = div == 1 ? num >> shift : num / den;
        r = num - q * den;
        if (q < 100000000u)
            k--;
        else if (q >= 1000000000u)
            k++;
        else {
            if (2 * r > den || (2 * r == den && (q & 1))) q++; /* half to even */
            break;
        }
    }
    if (q == 1000000000u) q = 100000000u, k++;
    char dg[9];
    uint32_t v = (uint32_t)q;
    for (int i = 8; i >= 0; i--, v /= 10) dg[i] = (char)('0' + v % 10);
    int last = 8; /* the last digit kept: trailing zeros dropped, as %g does */
    if (k >= -4 && k < 9) {
        int lead = k >= 0 ? k + 1 : 0; /* digits before the point */
        while (last >= lead && dg[last] == '0') last--;
        if (k >= 0) {
            memcpy(o, dg, (size_t)lead);
            o += lead;
        } else {
            *o++ = '0';
        }
        if (last >= lead || k < 0) {
            *o++ = '.';
            for (int z = 0; z < -k - 1; z++) *o++ = '0';
            memcpy(o, dg + lead, (size_t)(last - lead + 1));
            o += last - lead + 1;
        }
    } else {
        while (last >= 1 && dg[last] == '0') last--;
        *o++ = dg[0];
        if (last >= 1) {
            *o++ = '.';
            memcpy(o, dg + 1, (size_t)last);
            o += last;
        }
        *o++ = 'e';
        *o++ = k < 0 ? '-' : '+';
        int a = k < 0 ? -k : k;
        if (a >= 100) *o++ = (char)('0' + a / 100);
        *o++ = (char)('0' + a / 10 % 10);
        *o++ = (char)('0' + a % 10);
    }
    *o = 0;
    return (int)(o - out);
}
