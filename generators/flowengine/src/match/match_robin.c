/* match_robin.c - see match_robin.h. */
#include "match_robin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct robin_slot {
    struct match_flow f; /* f.key.ip_version == 0: empty */
    uint32_t tag;        /* the hash folded to 32 bits: most mismatches end here */
    uint32_t dist;       /* slots from home */
};

struct robin {
    struct robin_slot *slots;
    struct match_mod mod; /* the home slot of a hash */
    uint64_t size, flows, held;
};

static uint32_t robin_tag(uint64_t hash)
{
    return (uint32_t)(hash ^ (hash >> 32));
}

static int robin_footprint(uint64_t size, uint64_t *fixed, uint64_t *per_flow)
{
    if (!size || size > UINT32_MAX)
        return -EINVAL; /* distances are 32-bit */
    *fixed = match_mul_bytes(size, sizeof(struct robin_slot));
    *per_flow = 0;
    return 0;
}

static int robin_create(void **table, const struct match_params *p)
{
    uint64_t fixed;
    int rc = match_table_check(&match_robin_ops, p, &fixed);
    if (rc)
        return rc;
    struct robin *r = calloc(1, sizeof *r);
    if (!r || !(r->slots = match_table_zalloc(fixed))) {
        free(r);
        return -ENOMEM;
    }
    r->size = p->size;
    match_mod_init(&r->mod, p->size);
    r->held = fixed;
    *table = r;
    return 0;
}

static void robin_destroy(void *table)
{
    struct robin *r = table;
    if (r)
        free(r->slots);
    free(r);
}

static void robin_prefetch(void *table, uint64_t hash)
{
    struct robin *r = table;
    /* the home slot and the next one (the second probe), as linear */
    match_prefetch_span(&r->slots[match_line(&r->mod, hash)], 2 * sizeof(struct robin_slot));
}

static int robin_find(void *table, const struct match_key *key, uint64_t hash, int insert,
                      struct match_count **out)
{
    struct robin *r = table;
    uint32_t tag = robin_tag(hash), dist = 0;
    uint64_t i = match_line(&r->mod, hash);
    struct robin_slot *s;
    for (;; dist++) {
        s = &r->slots[i];
        if (!s->f.key.ip_version || s->dist < dist || dist == r->size)
            break; /* the key would have been here or before (or: full, all seen) */
        if (s->tag == tag && match_key_eq(&s->f.key, key)) {
            *out = &s->f.c;
            return (int)dist + 1;
        }
        if (++i == r->size)
            i = 0;
    }
    if (!insert)
        return -ENOENT;
    if (r->flows == r->size)
        return -ENOSPC;
    int probes = (int)dist + 1;
    struct robin_slot carry = { .tag = tag, .dist = dist };
    carry.f.key = *key;
    *out = &s->f.c; /* the new flow stays where it lands first; only others move on */
    while (s->f.key.ip_version) {
        if (s->dist < carry.dist) {
            struct robin_slot t = *s;
            *s = carry;
            carry = t;
        }
        carry.dist++;
        if (++i == r->size)
            i = 0;
        s = &r->slots[i];
    }
    *s = carry;
    r->flows++;
    return probes;
}

static int robin_remove(void *table, const struct match_key *key, uint64_t hash)
{
    struct robin *r = table;
    struct match_count *f;
    if (robin_find(table, key, hash, 0, &f) < 0)
        return -ENOENT;
    uint64_t hole = ((uintptr_t)f - (uintptr_t)r->slots) / sizeof *r->slots; /* the slot F is in */
    r->slots[hole].f.key.ip_version = 0;
    for (uint64_t moved = 0; moved < r->size; moved++) {
        uint64_t k = hole + 1 == r->size ? 0 : hole + 1;
        struct robin_slot *s = &r->slots[k];
        if (!s->f.key.ip_version || !s->dist)
            break;
        r->slots[hole] = *s;
        r->slots[hole].dist--;
        s->f.key.ip_version = 0;
        hole = k;
    }
    r->slots[hole].dist = 0;
    r->flows--;
    return 0;
}

static void robin_walk(void *table, void (*fn)(const struct match_flow *, void *), void *arg)
{
    struct robin *r = table;
    for (uint64_t i = 0; i < r->size; i++)
        if (r->slots[i].f.key.ip_version)
            fn(&r->slots[i].f, arg);
}

static uint64_t robin_flows(const void *table)
{
    return ((const struct robin *)table)->flows;
}
static uint64_t robin_memory(const void *table)
{
    return ((const struct robin *)table)->held;
}

const struct match_ops match_robin_ops = {
    .name = "robin",
    .what = "open addressing, Robin Hood, backward-shift removal",
    .footprint = robin_footprint,
    .create = robin_create,
    .destroy = robin_destroy,
    .prefetch = robin_prefetch,
    .find = robin_find,
    .remove = robin_remove,
    .walk = robin_walk,
    .flows = robin_flows,
    .used_lines = robin_flows,
    .memory = robin_memory,
};
