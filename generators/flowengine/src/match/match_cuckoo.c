/* match_cuckoo.c - see match_cuckoo.h. */
#include "match_cuckoo.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigmem.h"
#include "rng.h"

#define CUCKOO_SLOTS 8
#define CUCKOO_MAX_WALK 128

struct cuckoo_bucket {
    uint16_t sig[CUCKOO_SLOTS];
    uint32_t idx[CUCKOO_SLOTS]; /* into the store; 0: free slot */
} __attribute__((aligned(64)));

struct cuckoo {
    struct cuckoo_bucket *buckets;
    struct match_flow *store; /* entries 1..size */
    uint32_t *free_idx;       /* stack of free store entries */
    struct match_mod mod;     /* the first bucket of a hash */
    uint64_t size, nbuckets, flows, held, free_top, rng;
};

static uint16_t cuckoo_sig(uint64_t hash)
{
    return (uint16_t)(hash ^ (hash >> 16) ^ (hash >> 32) ^ (hash >> 48));
}

static uint64_t cuckoo_alt(const struct cuckoo *c, uint64_t bucket, uint16_t sig)
{
    /* off(sig): the signature spread over 32 bits by a multiply, scaled to
     * [0, B) by a multiply-shift (its high bits choose); the subtraction mod B
     * by one compare: no division */
    uint64_t off = ((uint64_t)(uint32_t)(sig * 0x9e3779b1u) * c->nbuckets) >> 32;
    uint64_t alt = off + c->nbuckets - bucket;
    return alt >= c->nbuckets ? alt - c->nbuckets : alt;
}

static int cuckoo_footprint(uint64_t size, uint64_t *fixed, uint64_t *per_flow)
{
    if (!size || size > UINT32_MAX - 1)
        return -EINVAL;
    uint64_t nb = (size + CUCKOO_SLOTS - 1) / CUCKOO_SLOTS;
    *fixed = nb * sizeof(struct cuckoo_bucket) + (size + 1) * sizeof(struct match_flow) +
             size * sizeof(uint32_t);
    *per_flow = 0;
    return 0;
}

static int cuckoo_create(void **table, const struct match_params *p)
{
    uint64_t fixed;
    int rc = match_table_check(&match_cuckoo_ops, p, &fixed);
    if (rc)
        return rc;
    struct cuckoo *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->size = p->size;
    c->nbuckets = (p->size + CUCKOO_SLOTS - 1) / CUCKOO_SLOTS;
    match_mod_init(&c->mod, c->nbuckets);
    c->buckets = match_table_zalloc(c->nbuckets * sizeof *c->buckets);
    c->store = match_table_zalloc((c->size + 1) *
                                  sizeof *c->store); /* touched now, not in the timed loop */
    c->free_idx = bigmem_alloc(c->size * sizeof *c->free_idx);
    if (!c->buckets || !c->store || !c->free_idx) {
        free(c->buckets);
        free(c->store);
        free(c->free_idx);
        free(c);
        return -ENOMEM;
    }
    /* Handed out from 1 upwards: the store fills from its start. */
    for (uint64_t i = 0; i < c->size; i++)
        c->free_idx[i] = (uint32_t)(c->size - i);
    c->free_top = c->size;
    c->held = fixed;
    c->rng = rng_seed(p->size, 0);
    *table = c;
    return 0;
}

static void cuckoo_destroy(void *table)
{
    struct cuckoo *c = table;
    if (!c)
        return;
    free(c->buckets);
    free(c->store);
    free(c->free_idx);
    free(c);
}

static void cuckoo_prefetch(void *table, uint64_t hash)
{
    struct cuckoo *c = table;
    uint64_t b = match_line(&c->mod, hash);
    __builtin_prefetch(&c->buckets[b]);
    __builtin_prefetch(&c->buckets[cuckoo_alt(c, b, cuckoo_sig(hash))]);
}

static void cuckoo_prefetch_next(void *table, uint64_t hash)
{
    struct cuckoo *c = table;
    uint16_t sig = cuckoo_sig(hash);
    uint64_t b1 = match_line(&c->mod, hash);
    const struct cuckoo_bucket *b = &c->buckets[b1];
    unsigned seen = 0;
    for (unsigned j = 0; j < CUCKOO_SLOTS; j++)
        if (b->sig[j] == sig && b->idx[j]) {
            match_prefetch_span(&c->store[b->idx[j]],
                                sizeof *c->store); /* 72 bytes: may straddle */
            seen++;
        }
    if (seen)
        return;
    /* not in the first bucket: the flow is in the alternative one */
    b = &c->buckets[cuckoo_alt(c, b1, sig)];
    for (unsigned j = 0; j < CUCKOO_SLOTS; j++)
        if (b->sig[j] == sig && b->idx[j])
            match_prefetch_span(&c->store[b->idx[j]], sizeof *c->store);
}

/* The slot of KEY in bucket B, or -1. */
static int bucket_search(const struct cuckoo *c, const struct cuckoo_bucket *b, uint16_t sig,
                         const struct match_key *key)
{
    unsigned hits = 0;
    for (unsigned j = 0; j < CUCKOO_SLOTS; j++)
        hits |= (unsigned)(b->sig[j] == sig && b->idx[j]) << j;
    while (hits) {
        int j = __builtin_ctz(hits);
        if (match_key_eq(&c->store[b->idx[j]].key, key))
            return j;
        hits &= hits - 1;
    }
    return -1;
}

static int free_slot(const struct cuckoo_bucket *b)
{
    for (int j = 0; j < CUCKOO_SLOTS; j++)
        if (!b->idx[j])
            return j;
    return -1;
}

/* Exchange (*SIG, *IDX) with slot V of bucket B. */
static void swap_slot(struct cuckoo_bucket *b, int v, uint16_t *sig, uint32_t *idx)
{
    uint16_t s = b->sig[v];
    uint32_t x = b->idx[v];
    b->sig[v] = *sig;
    b->idx[v] = *idx;
    *sig = s;
    *idx = x;
}

/* Put (SIG, IDX) in bucket B1 or B2, moving others along a random walk when
 * both are full. 0, or -ENOSPC with the table as it was. */
static int cuckoo_place(struct cuckoo *c, uint64_t b1, uint64_t b2, uint16_t sig, uint32_t idx)
{
    struct cuckoo_bucket *first = &c->buckets[b1];
    int j = free_slot(first);
    if (j < 0 && b2 != b1) {
        first = &c->buckets[b2];
        j = free_slot(first);
    }
    if (j >= 0) {
        first->sig[j] = sig;
        first->idx[j] = idx;
        return 0;
    }
    uint64_t path_b[CUCKOO_MAX_WALK];
    uint8_t path_j[CUCKOO_MAX_WALK];
    uint64_t b = (rng_next(&c->rng) & 1) ? b2 : b1;
    uint16_t csig = sig;
    uint32_t cidx = idx;
    for (int step = 0; step < CUCKOO_MAX_WALK; step++) {
        int v = (int)(rng_next(&c->rng) % CUCKOO_SLOTS);
        path_b[step] = b;
        path_j[step] = (uint8_t)v;
        swap_slot(&c->buckets[b], v, &csig, &cidx);
        b = cuckoo_alt(c, b, csig);
        if ((j = free_slot(&c->buckets[b])) >= 0) {
            c->buckets[b].sig[j] = csig;
            c->buckets[b].idx[j] = cidx;
            return 0;
        }
    }
    /* Undo the walk from its end: every displaced entry goes back. */
    for (int step = CUCKOO_MAX_WALK - 1; step >= 0; step--)
        swap_slot(&c->buckets[path_b[step]], path_j[step], &csig, &cidx);
    return -ENOSPC;
}

/* The bucket and slot of KEY: 0 with *B, *J and the buckets read in *PROBES,
 * or -ENOENT with the key's two buckets in *B and *B2 (*B2 is left as it was
 * on a hit in the first bucket). */
static int cuckoo_locate(const struct cuckoo *c, const struct match_key *key, uint64_t hash,
                         uint64_t *b, uint64_t *b2, int *j, int *probes)
{
    uint16_t sig = cuckoo_sig(hash);
    *b = match_line(&c->mod, hash);
    *probes = 1;
    if ((*j = bucket_search(c, &c->buckets[*b], sig, key)) >= 0)
        return 0; /* *B2 not needed: not computed */
    *b2 = cuckoo_alt(c, *b, sig);
    if (*b2 == *b)
        return -ENOENT;
    *probes = 2;
    if ((*j = bucket_search(c, &c->buckets[*b2], sig, key)) < 0)
        return -ENOENT;
    *b = *b2;
    return 0;
}

static int cuckoo_find(void *table, const struct match_key *key, uint64_t hash, int insert,
                       struct match_count **out)
{
    struct cuckoo *c = table;
    uint64_t b1, b2;
    int j, probes;
    if (!cuckoo_locate(c, key, hash, &b1, &b2, &j, &probes)) {
        *out = &c->store[c->buckets[b1].idx[j]].c;
        return probes;
    }
    if (!insert)
        return -ENOENT;
    if (!c->free_top)
        return -ENOSPC;
    uint32_t idx = c->free_idx[c->free_top - 1];
    if (cuckoo_place(c, b1, b2, cuckoo_sig(hash), idx))
        return -ENOSPC;
    c->free_top--;
    struct match_flow *f = &c->store[idx];
    memset(f, 0, sizeof *f);
    f->key = *key;
    c->flows++;
    *out = &f->c;
    return probes;
}

static int cuckoo_remove(void *table, const struct match_key *key, uint64_t hash)
{
    struct cuckoo *c = table;
    uint64_t b, b2;
    int j, probes;
    if (cuckoo_locate(c, key, hash, &b, &b2, &j, &probes))
        return -ENOENT;
    c->free_idx[c->free_top++] = c->buckets[b].idx[j];
    c->buckets[b].idx[j] = 0;
    c->flows--;
    return 0;
}

static void cuckoo_walk(void *table, void (*fn)(const struct match_flow *, void *), void *arg)
{
    struct cuckoo *c = table;
    for (uint64_t b = 0; b < c->nbuckets; b++)
        for (int j = 0; j < CUCKOO_SLOTS; j++)
            if (c->buckets[b].idx[j])
                fn(&c->store[c->buckets[b].idx[j]], arg);
}

static uint64_t cuckoo_flows(const void *table)
{
    return ((const struct cuckoo *)table)->flows;
}
static uint64_t cuckoo_memory(const void *table)
{
    return ((const struct cuckoo *)table)->held;
}

const struct match_ops match_cuckoo_ops = {
    .name = "cuckoo",
    .what = "bucketized cuckoo, 8 slots of 16-bit signatures per 64-byte bucket",
    .footprint = cuckoo_footprint,
    .create = cuckoo_create,
    .destroy = cuckoo_destroy,
    .prefetch = cuckoo_prefetch,
    .prefetch_next = cuckoo_prefetch_next,
    .find = cuckoo_find,
    .remove = cuckoo_remove,
    .walk = cuckoo_walk,
    .flows = cuckoo_flows,
    .used_lines = cuckoo_flows,
    .memory = cuckoo_memory,
};
