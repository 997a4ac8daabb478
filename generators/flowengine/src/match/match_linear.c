/* match_linear.c - see match_linear.h. */
#include "match_linear.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct linear_slot {
    struct match_flow f; /* f.key.ip_version == 0: empty */
    uint64_t hash;
};

struct linear {
    struct linear_slot *slots;
    struct match_mod mod; /* the home slot of a hash */
    uint64_t size, flows, held;
};

static int linear_footprint(uint64_t size, uint64_t *fixed, uint64_t *per_flow)
{
    if (!size)
        return -EINVAL;
    *fixed = match_mul_bytes(size, sizeof(struct linear_slot));
    *per_flow = 0;
    return 0;
}

static int linear_create(void **table, const struct match_params *p)
{
    uint64_t fixed;
    int rc = match_table_check(&match_linear_ops, p, &fixed);
    if (rc)
        return rc;
    struct linear *l = calloc(1, sizeof *l);
    if (!l || !(l->slots = match_table_zalloc(fixed))) {
        free(l);
        return -ENOMEM;
    }
    l->size = p->size;
    match_mod_init(&l->mod, p->size);
    l->held = fixed;
    *table = l;
    return 0;
}

static void linear_destroy(void *table)
{
    struct linear *l = table;
    if (l)
        free(l->slots);
    free(l);
}

static void linear_prefetch(void *table, uint64_t hash)
{
    struct linear *l = table;
    /* The home slot and the next one (the second probe, about a third of the
     * lookups at half load): 160 bytes, three or four lines. */
    match_prefetch_span(&l->slots[match_line(&l->mod, hash)], 2 * sizeof(struct linear_slot));
}

static int linear_find(void *table, const struct match_key *key, uint64_t hash, int insert,
                       struct match_count **out)
{
    struct linear *l = table;
    uint64_t i = match_line(&l->mod, hash);
    for (uint64_t probes = 1; probes <= l->size; probes++) {
        struct linear_slot *s = &l->slots[i];
        if (!s->f.key.ip_version) {
            if (!insert)
                return -ENOENT;
            memset(&s->f, 0, sizeof s->f);
            s->f.key = *key;
            s->hash = hash;
            l->flows++;
            *out = &s->f.c;
            return (int)(probes < INT32_MAX ? probes : INT32_MAX);
        }
        if (s->hash == hash && match_key_eq(&s->f.key, key)) {
            *out = &s->f.c;
            return (int)(probes < INT32_MAX ? probes : INT32_MAX);
        }
        if (++i == l->size)
            i = 0;
    }
    return insert ? -ENOSPC : -ENOENT;
}

static int slot_used(const void *s)
{
    return ((const struct linear_slot *)s)->f.key.ip_version != 0;
}
static uint64_t slot_hash(const void *s)
{
    return ((const struct linear_slot *)s)->hash;
}
static void slot_clear(void *s)
{
    ((struct linear_slot *)s)->f.key.ip_version = 0;
}

static int linear_remove(void *table, const struct match_key *key, uint64_t hash)
{
    struct linear *l = table;
    struct match_count *f;
    if (linear_find(table, key, hash, 0, &f) < 0)
        return -ENOENT;
    uint64_t hole = ((uintptr_t)f - (uintptr_t)l->slots) / sizeof *l->slots; /* the slot F is in */
    /* The hole is marked empty first, so even a full table's scan ends there. */
    l->slots[hole].f.key.ip_version = 0;
    match_backshift(l->slots, sizeof *l->slots, l->size, hole, &l->mod, slot_used, slot_hash,
                    slot_clear);
    l->flows--;
    return 0;
}

static void linear_walk(void *table, void (*fn)(const struct match_flow *, void *), void *arg)
{
    struct linear *l = table;
    for (uint64_t i = 0; i < l->size; i++)
        if (l->slots[i].f.key.ip_version)
            fn(&l->slots[i].f, arg);
}

static uint64_t linear_flows(const void *table)
{
    return ((const struct linear *)table)->flows;
}
static uint64_t linear_memory(const void *table)
{
    return ((const struct linear *)table)->held;
}

const struct match_ops match_linear_ops = {
    .name = "linear",
    .what = "open addressing, linear probing, backward-shift removal",
    .footprint = linear_footprint,
    .create = linear_create,
    .destroy = linear_destroy,
    .prefetch = linear_prefetch,
    .find = linear_find,
    .remove = linear_remove,
    .walk = linear_walk,
    .flows = linear_flows,
    .used_lines = linear_flows,
    .memory = linear_memory,
};
