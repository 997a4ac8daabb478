/* dist.h - a `dist` line (README, "Dist lines"): a discrete distribution of
 * bins, drawn through an alias table (Vose) built with integer arithmetic
 * only, so a seed gives the same values on every platform.
 *
 * A dist is n bins (1..65536) [lo_i, hi_i] with weights w_i (1..2^32-1). A
 * draw picks bin i with probability w_i / sum(w), then a value uniform in
 * lo_i..hi_i. It takes one 64-bit SplitMix64 output d for the bin and, only
 * when lo_i < hi_i, a second one d2 for the value:
 *   column c = ((d >> 32) * n) >> 32
 *   bin    i = (d & 0xffffffff) < thr[c] ? c : alias[c]
 *   value    = lo_i + d2 % (hi_i - lo_i + 1)        (lo_i when lo_i == hi_i)
 *
 * Table (dist_build): T = sum(w); every bin's scaled weight s_i = w_i * n
 * (the column's share is T). Columns with s < T are "small", the others
 * "large"; both are kept as stacks filled in bin order (the last pushed is
 * taken first). While both are non-empty: take small l and large g, set
 * thr[l] = floor(s_l * 2^32 / T), alias[l] = g, then s_g -= T - s_l and g
 * moves to the small stack if now s_g < T (else it stays on top of the large
 * one). Every column left on either stack gets thr = 2^32 - 1 and alias =
 * itself (always itself). All of it is exact 64-bit integer arithmetic.
 *
 * A deck (session lines' P:ID, sess.h): when every bin is one value (lo_i ==
 * hi_i) and T <= DIST_MAX_DECK, dist_build also keeps cum[i] = w_0 + ... +
 * w_i; card j (0 <= j < T) is then the value of the bin b with cum[b - 1] <= j
 * < cum[b] (the values in bin order, each repeated its weight).
 *
 * Thread safety: built once on the main thread while the session is read;
 * afterwards only read (dist_draw is a pure function of its arguments). */
#ifndef FE_DIST_H
#define FE_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"

#define DIST_MAX_ID 65535u
#define DIST_MAX_BINS 65536u
#define DIST_MAX_VALUE ((1ull << 63) - 1) /* a bin's HI */
#define DIST_MAX_DECK (1u << 20)          /* the most cards of a deck (its T) */

struct dist_bin {
    uint64_t lo, span; /* span = hi - lo (value = lo + d2 % (span + 1)) */
};

struct fe_dist {
    uint32_t n;           /* bins */
    uint32_t *thr;        /* [n] acceptance thresholds */
    uint32_t *alias;      /* [n] */
    struct dist_bin *bin; /* [n] */
    uint64_t lo, hi;      /* smallest lo and largest hi over the bins */
    uint64_t total;       /* sum of the weights */
    double mean;          /* sum(w * (lo + hi) / 2) / T: for bounds and messages */
    uint32_t *cum;        /* [n] deck ends, or NULL: not every bin one value, or T too big */
};

/* Builds d from n bins (lo[i] <= hi[i] <= DIST_MAX_VALUE) and weights
 * (1..2^32-1; n 1..DIST_MAX_BINS): allocates the table (and the deck's
 * cum when it qualifies). 0 or -ENOMEM
 * (-EINVAL for arguments outside those ranges). */
int dist_build(struct fe_dist *d, uint32_t n, const uint64_t *lo, const uint64_t *hi,
               const uint32_t *w);
/* Frees the table; a zeroed dist is fine. */
void dist_free(struct fe_dist *d);

/* The bin of draw r (the first output). */
static inline uint32_t dist_bin_of(const struct fe_dist *d, uint64_t r)
{
    uint32_t c = (uint32_t)(((r >> 32) * d->n) >> 32);
    return (uint32_t)r < d->thr[c] ? c : d->alias[c];
}

/* A value of d from two outputs: r picks the bin, r2 (only read when the bin
 * has more than one value) the value inside it. */
static inline uint64_t dist_value(const struct fe_dist *d, uint64_t r, uint64_t r2)
{
    const struct dist_bin *b = &d->bin[dist_bin_of(d, r)];
    return b->span ? b->lo + r2 % (b->span + 1) : b->lo;
}

/* A value of d at draw j (1-based) of the instance stream that starts at
 * rng0 (draw j = rng_mix(rng0 + j * RNG_GOLDEN)): draws j and j + 1. */
static inline uint64_t dist_draw_at(const struct fe_dist *d, uint64_t rng0, uint64_t j)
{
    uint64_t r = rng_mix(rng0 + j * RNG_GOLDEN);
    const struct dist_bin *b = &d->bin[dist_bin_of(d, r)];
    if (!b->span)
        return b->lo;
    return b->lo + rng_mix(rng0 + (j + 1) * RNG_GOLDEN) % (b->span + 1);
}

/* The bin of draw j (1-based) of the instance stream that starts at rng0: for
 * a dist whose bins are one value each, the value is d->bin[that].lo and the
 * draw reads nothing else (as dist_draw_at). */
static inline uint32_t dist_bin_at(const struct fe_dist *d, uint64_t rng0, uint64_t j)
{
    return dist_bin_of(d, rng_mix(rng0 + j * RNG_GOLDEN));
}

/* Card j (< d->total) of a deck (d->cum not NULL). */
static inline uint64_t dist_card(const struct fe_dist *d, uint32_t j)
{
    uint32_t lo = 0, hi = d->n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (d->cum[mid] <= j)
            lo = mid + 1;
        else
            hi = mid;
    }
    return d->bin[lo].lo;
}

/* A value of d from a sequential stream (state as rng_next): one output, or
 * two when the bin has more than one value. */
static inline uint64_t dist_draw(const struct fe_dist *d, uint64_t *state)
{
    const struct dist_bin *b = &d->bin[dist_bin_of(d, rng_next(state))];
    return b->span ? b->lo + rng_next(state) % (b->span + 1) : b->lo;
}

#endif
