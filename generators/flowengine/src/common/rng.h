/* rng.h - SplitMix64, one stream per flow instance (8 bytes of state).
 *
 * Pure functions of their arguments (a stream's state belongs to its owner):
 * safe from any thread. */
#ifndef FE_RNG_H
#define FE_RNG_H

#include <stdint.h>

#define RNG_GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Serial is mixed before it meets the seed: seeding with seed ^ serial alone
 * would make the streams of neighbouring serials near-shifted copies. */
static inline uint64_t rng_seed(uint64_t seed, uint64_t serial)
{
    return rng_mix(seed ^ rng_mix(serial + RNG_GOLDEN));
}

static inline uint64_t rng_next(uint64_t *state)
{
    *state += RNG_GOLDEN;
    return rng_mix(*state);
}

/* LO + draw mod (HI - LO + 1); the modulo bias is below 2^-47 for our ranges. */
static inline uint64_t rng_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
    uint64_t n = hi - lo + 1;
    uint64_t r = rng_next(state);
    return n ? lo + r % n : r;
}

#endif
