/* flowtab.c — the flow table of flowtab.h: open addressing (linear probing, at most half full)
 * over an array of flows in order of first appearance. */
#include "flowtab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct ft_flow {
    uint64_t src_hi, src_lo, dst_hi, dst_lo;
    uint64_t rest; /* ip_version << 40 | proto << 32 | sport << 16 | dport */
    int64_t packets, bytes, first_ns, last_ns;
} ft_flow;

struct ft_table {
    ft_flow *flows;
    size_t count, cap;
    uint64_t *slots; /* 0: empty; else tag << 32 | (flow index + 1) */
    size_t mask;     /* number of slots - 1 (a power of 2 less 1) */
    unsigned shift;  /* 64 - log2(number of slots): a hash's slot is hash >> shift */
};

#define FT_MIN_SLOTS_LOG2 10
#define FT_MAX_FLOWS 0xFFFFFFFEu
/* Packets hashed (and their slots prefetched) ahead of the lookups, which then hit the cache. */
#define FT_BLOCK 16

static inline uint64_t ft_hash(uint64_t rest, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    const uint64_t m = 0x9E3779B97F4A7C15ull;
    uint64_t h = (rest ^ 0x5851F42D4C957F2Dull) * m;
    h = (h ^ (h >> 29) ^ a) * m;
    h = (h ^ (h >> 29) ^ b) * m;
    h = (h ^ (h >> 29) ^ c) * m;
    h = (h ^ (h >> 29) ^ d) * m;
    return h ^ (h >> 31); /* the slot comes from the top bits, the tag from the low ones */
}

static inline uint64_t ft_flow_hash(const ft_flow *f)
{
    return ft_hash(f->rest, f->src_hi, f->src_lo, f->dst_hi, f->dst_lo);
}

ft_table *ft_new(void)
{
    ft_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->slots = calloc((size_t)1 << FT_MIN_SLOTS_LOG2, sizeof *t->slots);
    if (!t->slots) {
        free(t);
        return NULL;
    }
    t->mask = ((size_t)1 << FT_MIN_SLOTS_LOG2) - 1;
    t->shift = 64 - FT_MIN_SLOTS_LOG2;
    return t;
}

void ft_free(ft_table *t)
{
    if (!t)
        return;
    free(t->flows);
    free(t->slots);
    free(t);
}

size_t ft_count(const ft_table *t)
{
    return t->count;
}

static void ft_place(uint64_t *slots, size_t mask, unsigned shift, uint64_t h, size_t index)
{
    size_t j = (size_t)(h >> shift);
    while (slots[j])
        j = (j + 1) & mask;
    slots[j] = (h & 0xFFFFFFFFu) << 32 | (uint64_t)(index + 1);
}

/* Twice the slots, every flow placed again. */
static int ft_grow_slots(ft_table *t)
{
    size_t n = (t->mask + 1) * 2;
    uint64_t *s = calloc(n, sizeof *s);
    if (!s)
        return -ENOMEM;
    unsigned shift = t->shift - 1;
    for (size_t i = 0; i < t->count; i++)
        ft_place(s, n - 1, shift, ft_flow_hash(&t->flows[i]), i);
    free(t->slots);
    t->slots = s;
    t->mask = n - 1;
    t->shift = shift;
    return 0;
}

/* A new flow for the key, placed in the slots; NULL when out of memory. */
static ft_flow *ft_insert(ft_table *t, uint64_t h, uint64_t rest, uint64_t sh, uint64_t sl,
                          uint64_t dh, uint64_t dl)
{
    if (t->count >= FT_MAX_FLOWS)
        return NULL;
    if (t->count == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        ft_flow *f = realloc(t->flows, cap * sizeof *f);
        if (!f)
            return NULL;
        t->flows = f;
        t->cap = cap;
    }
    if ((t->count + 1) * 2 > t->mask + 1 && ft_grow_slots(t) != 0)
        return NULL;
    ft_flow *f = &t->flows[t->count];
    f->src_hi = sh;
    f->src_lo = sl;
    f->dst_hi = dh;
    f->dst_lo = dl;
    f->rest = rest;
    f->packets = 0;
    f->bytes = 0;
    f->first_ns = INT64_MAX;
    f->last_ns = INT64_MIN;
    ft_place(t->slots, t->mask, t->shift, h, t->count);
    t->count++;
    return f;
}

int ft_add(ft_table *t, const ft_packets *p, size_t n)
{
    uint64_t hs[FT_BLOCK], rs[FT_BLOCK];
    for (size_t base = 0; base < n; base += FT_BLOCK) {
        size_t m = n - base < FT_BLOCK ? n - base : FT_BLOCK;
        for (size_t k = 0; k < m; k++) {
            size_t i = base + k;
            rs[k] = (uint64_t)p->ip_version[i] << 40 | (uint64_t)p->proto[i] << 32 |
                    (uint64_t)p->sport[i] << 16 | (uint64_t)p->dport[i];
            hs[k] = ft_hash(rs[k], p->src_hi[i], p->src_lo[i], p->dst_hi[i], p->dst_lo[i]);
            __builtin_prefetch(&t->slots[hs[k] >> t->shift]);
        }
        for (size_t k = 0; k < m; k++) {
            size_t i = base + k;
            if (!p->ip_version[i])
                continue;
            uint64_t h = hs[k], rest = rs[k];
            uint64_t sh = p->src_hi[i], sl = p->src_lo[i], dh = p->dst_hi[i], dl = p->dst_lo[i];
            uint32_t tag = (uint32_t)h;
            ft_flow *f = NULL;
            for (size_t j = (size_t)(h >> t->shift);; j = (j + 1) & t->mask) {
                uint64_t s = t->slots[j];
                if (!s)
                    break;
                if ((uint32_t)(s >> 32) == tag) {
                    ft_flow *g = &t->flows[(uint32_t)s - 1];
                    if (g->rest == rest && g->src_lo == sl && g->dst_lo == dl && g->src_hi == sh &&
                        g->dst_hi == dh) {
                        f = g;
                        break;
                    }
                }
            }
            if (!f && !(f = ft_insert(t, h, rest, sh, sl, dh, dl)))
                return -ENOMEM;
            int64_t ts = p->ts_ns[i];
            f->packets++;
            f->bytes += p->wire_len[i];
            if (ts < f->first_ns)
                f->first_ns = ts;
            if (ts > f->last_ns)
                f->last_ns = ts;
        }
    }
    return 0;
}

void ft_columns(const ft_table *t, const ft_flows *o)
{
    for (size_t i = 0; i < t->count; i++) {
        const ft_flow *f = &t->flows[i];
        o->ip_version[i] = (uint8_t)(f->rest >> 40);
        o->proto[i] = (uint8_t)(f->rest >> 32);
        o->sport[i] = (uint16_t)(f->rest >> 16);
        o->dport[i] = (uint16_t)f->rest;
        o->src_hi[i] = f->src_hi;
        o->src_lo[i] = f->src_lo;
        o->dst_hi[i] = f->dst_hi;
        o->dst_lo[i] = f->dst_lo;
        o->packets[i] = f->packets;
        o->bytes[i] = f->bytes;
        o->first_ns[i] = f->first_ns;
        o->last_ns[i] = f->last_ns;
    }
}
