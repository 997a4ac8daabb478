/* match_linear16.c - see match_linear16.h. */
#include "match_linear16.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The packed key read as two words: a slot's key compares in two loads. */
union key16_words {
    struct match_key16 k;
    uint64_t w[2];
};

struct linear16_slot {
    union key16_words key; /* key.k.ip_version == 0: empty */
    struct match_count c;
    uint64_t hash;
    uint64_t pad;
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct linear16_slot) == 64, "a slot is one cache line");

struct linear16 {
    struct linear16_slot *slots;
    struct match_mod mod; /* the home slot of a hash */
    uint64_t size, flows, held;
};

static int linear16_footprint(uint64_t size, uint64_t *fixed, uint64_t *per_flow)
{
    if (!size)
        return -EINVAL;
    *fixed = match_mul_bytes(size, sizeof(struct linear16_slot));
    *per_flow = 0;
    return 0;
}

static int linear16_create(void **table, const struct match_params *p)
{
    uint64_t fixed;
    int rc = match_table_check(&match_linear16_ops, p, &fixed);
    if (rc)
        return rc;
    struct linear16 *l = calloc(1, sizeof *l);
    if (!l || !(l->slots = match_table_zalloc(fixed))) { /* 64-byte aligned */
        free(l);
        return -ENOMEM;
    }
    l->size = p->size;
    match_mod_init(&l->mod, p->size);
    l->held = fixed;
    *table = l;
    return 0;
}

static void linear16_destroy(void *table)
{
    struct linear16 *l = table;
    if (l)
        free(l->slots);
    free(l);
}

static void linear16_prefetch(void *table, uint64_t hash)
{
    struct linear16 *l = table;
    uint64_t i = match_line(&l->mod, hash);
    /* the home slot and the next (the second probe), two lines */
    __builtin_prefetch(&l->slots[i]);
    __builtin_prefetch(&l->slots[i + 1 < l->size ? i + 1 : 0]);
}

/* The probe sequence of WANT from slot I (its home): as find. */
static int probe_from(struct linear16 *l, const union key16_words *want, uint64_t i, uint64_t hash,
                      int insert, struct match_count **out)
{
    for (uint64_t probes = 1; probes <= l->size; probes++) {
        struct linear16_slot *s = &l->slots[i];
        if (s->key.w[0] == want->w[0] && s->key.w[1] == want->w[1]) {
            *out = &s->c;
            return (int)(probes < INT32_MAX ? probes : INT32_MAX);
        }
        if (!s->key.k.ip_version) {
            if (!insert)
                return -ENOENT;
            s->key = *want;
            memset(&s->c, 0, sizeof s->c);
            s->hash = hash;
            l->flows++;
            *out = &s->c;
            return (int)(probes < INT32_MAX ? probes : INT32_MAX);
        }
        if (++i == l->size)
            i = 0;
    }
    return insert ? -ENOSPC : -ENOENT;
}

static int linear16_find(void *table, const struct match_key *key, uint64_t hash, int insert,
                         struct match_count **out)
{
    struct linear16 *l = table;
    union key16_words want;
    if (match_key_pack16(key, &want.k))
        return -EINVAL;
    return probe_from(l, &want, match_line(&l->mod, hash), hash, insert, out);
}

static void linear16_stage(void *table, const uint64_t *hash, size_t n, uint64_t *line)
{
    struct linear16 *l = table;
    for (size_t i = 0; i < n; i++) {
        line[i] = match_line(&l->mod, hash[i]);
        __builtin_prefetch(&l->slots[line[i]]);
    }
}

/* The home slot of HASH is in cache by now: when another flow holds it (its
 * stored hash differs), the lookup goes on to the next slot: prefetch it. */
static void linear16_prefetch_next(void *table, uint64_t hash)
{
    struct linear16 *l = table;
    uint64_t i = match_line(&l->mod, hash);
    const struct linear16_slot *s = &l->slots[i];
    if (s->key.k.ip_version && s->hash != hash)
        __builtin_prefetch(&l->slots[i + 1 < l->size ? i + 1 : 0]);
}

static int linear16_find_line(void *table, const struct match_key *key, uint64_t line,
                              struct match_count **out)
{
    union key16_words want;
    if (match_key_pack16(key, &want.k))
        return -EINVAL;
    return probe_from(table, &want, line, 0, 0, out);
}

static int slot_used(const void *s)
{
    return ((const struct linear16_slot *)s)->key.k.ip_version != 0;
}
static uint64_t slot_hash(const void *s)
{
    return ((const struct linear16_slot *)s)->hash;
}
static void slot_clear(void *s)
{
    ((struct linear16_slot *)s)->key.k.ip_version = 0;
}

static int linear16_remove(void *table, const struct match_key *key, uint64_t hash)
{
    struct linear16 *l = table;
    struct match_count *c;
    if (linear16_find(table, key, hash, 0, &c) < 0)
        return -ENOENT;
    uint64_t hole = ((uintptr_t)c - (uintptr_t)l->slots) / sizeof *l->slots; /* the slot C is in */
    l->slots[hole].key.k.ip_version = 0;
    match_backshift(l->slots, sizeof *l->slots, l->size, hole, &l->mod, slot_used, slot_hash,
                    slot_clear);
    l->flows--;
    return 0;
}

static void linear16_walk(void *table, void (*fn)(const struct match_flow *, void *), void *arg)
{
    struct linear16 *l = table;
    for (uint64_t i = 0; i < l->size; i++) {
        const struct linear16_slot *s = &l->slots[i];
        if (!s->key.k.ip_version)
            continue;
        struct match_flow f = { .c = s->c };
        match_key_unpack16(&s->key.k, &f.key);
        fn(&f, arg);
    }
}

static uint64_t linear16_flows(const void *table)
{
    return ((const struct linear16 *)table)->flows;
}

static uint64_t linear16_memory(const void *table)
{
    return ((const struct linear16 *)table)->held;
}

const struct match_ops match_linear16_ops = {
    .name = "linear16",
    .what = "linear probing, IPv4 keys packed in 16 bytes, one 64-byte slot a flow",
    .key_bytes = 16,
    .footprint = linear16_footprint,
    .create = linear16_create,
    .destroy = linear16_destroy,
    .prefetch = linear16_prefetch,
    .find = linear16_find,
    .prefetch_next = linear16_prefetch_next,
    .stage = linear16_stage,
    .find_line = linear16_find_line,
    .remove = linear16_remove,
    .walk = linear16_walk,
    .flows = linear16_flows,
    .used_lines = linear16_flows,
    .memory = linear16_memory,
};
