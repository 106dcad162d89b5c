/* The one small random generator of psgraph: splitmix64, with uniform and
 * normal draws on top. Deterministic from a 64-bit state, so a seed gives
 * the same initial values, data orders and simulations everywhere. Not for
 * cryptography. Header only: the draws are in the inner loops. */
#ifndef PSGRAPH_CORE_RNG_H
#define PSGRAPH_CORE_RNG_H

#include <math.h>
#include <stdint.h>

/* The next 64 random bits; advances *s. */
static inline uint64_t psg_splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The mix of x alone (one splitmix64 step from state x), for hashing a key. */
static inline uint64_t psg_mix64(uint64_t x) {
    return psg_splitmix64(&x);
}

/* A uniform draw in the open interval (0, 1). */
static inline double psg_uniform01(uint64_t *s) {
    return ((double)(psg_splitmix64(s) >> 11) + 0.5) / 9007199254740992.0;
}

/* A standard normal draw (Box-Muller). */
static inline double psg_normal01(uint64_t *s) {
    double u1 = psg_uniform01(s), u2 = psg_uniform01(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
