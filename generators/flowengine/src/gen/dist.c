/* dist.c - alias tables of `dist` lines (dist.h). */
#include "dist.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* floor(s * 2^32 / t) for s < t < 2^48, in two 16-bit steps so that nothing
 * overflows 64 bits. */
static uint32_t scaled_threshold(uint64_t s, uint64_t t)
{
    uint64_t q1 = (s << 16) / t, r1 = (s << 16) % t;
    uint64_t q2 = (r1 << 16) / t;
    return (uint32_t)(q1 << 16 | q2);
}

int dist_build(struct fe_dist *d, uint32_t n, const uint64_t *lo, const uint64_t *hi,
               const uint32_t *w)
{
    memset(d, 0, sizeof *d);
    if (n < 1 || n > DIST_MAX_BINS)
        return -EINVAL;
    uint64_t t = 0;
    double mean = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!w[i] || lo[i] > hi[i] || hi[i] > DIST_MAX_VALUE)
            return -EINVAL;
        t += w[i]; /* at most 2^16 * 2^32 */
        mean += (double)w[i] * ((double)lo[i] + (double)hi[i]) / 2;
    }
    uint64_t *s = malloc((size_t)n * sizeof *s);
    uint32_t *small = malloc((size_t)n * 2 * sizeof *small), *large = small ? small + n : NULL;
    d->thr = malloc((size_t)n * sizeof *d->thr);
    d->alias = malloc((size_t)n * sizeof *d->alias);
    d->bin = malloc((size_t)n * sizeof *d->bin);
    if (!s || !small || !d->thr || !d->alias || !d->bin) {
        free(s);
        free(small);
        dist_free(d);
        return -ENOMEM;
    }
    uint32_t ns = 0, nl = 0;
    d->n = n;
    d->total = t;
    d->mean = mean / (double)t;
    d->lo = lo[0];
    d->hi = hi[0];
    for (uint32_t i = 0; i < n; i++) {
        d->bin[i].lo = lo[i];
        d->bin[i].span = hi[i] - lo[i];
        if (lo[i] < d->lo)
            d->lo = lo[i];
        if (hi[i] > d->hi)
            d->hi = hi[i];
        s[i] = (uint64_t)w[i] * n; /* sum of all: n * t < 2^64 */
        if (s[i] < t)
            small[ns++] = i;
        else
            large[nl++] = i;
        d->thr[i] = UINT32_MAX;
        d->alias[i] = i;
    }
    while (ns && nl) {
        uint32_t l = small[--ns], g = large[nl - 1];
        d->thr[l] = scaled_threshold(s[l], t);
        d->alias[l] = g;
        s[g] -= t - s[l];
        if (s[g] < t) {
            nl--;
            small[ns++] = g;
        }
    }
    free(s);
    free(small);
    if (t > DIST_MAX_DECK)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (lo[i] != hi[i])
            return 0;
    if (!(d->cum = malloc((size_t)n * sizeof *d->cum))) {
        dist_free(d);
        return -ENOMEM;
    }
    for (uint32_t i = 0, c = 0; i < n; i++) {
        c += w[i];
        d->cum[i] = c;
    }
    return 0;
}

void dist_free(struct fe_dist *d)
{
    free(d->thr);
    free(d->alias);
    free(d->bin);
    free(d->cum);
    memset(d, 0, sizeof *d);
}
