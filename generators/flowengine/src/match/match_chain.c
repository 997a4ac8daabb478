/* match_chain.c - see match_chain.h. */
#include "match_chain.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigmem.h"

#define CHAIN_MALLOC_HEADER 16

struct chain_node {
    struct match_flow f;
    struct chain_node *next;
};

/* A line whose own node is free has this as next (no node sits at address 1). */
#define CHAIN_EMPTY ((struct chain_node *)1)

struct chain {
    struct chain_node *lines;
    struct match_mod mod; /* the line of a hash */
    uint64_t size, flows, used, held, budget;
};

static const uint64_t chain_node_bytes = sizeof(struct chain_node) + CHAIN_MALLOC_HEADER;

static int chain_footprint(uint64_t size, uint64_t *fixed, uint64_t *per_flow)
{
    if (!size)
        return -EINVAL;
    *fixed = match_mul_bytes(size, sizeof(struct chain_node));
    *per_flow = chain_node_bytes; /* for the flows beyond the first of a line */
    return 0;
}

static int chain_create(void **table, const struct match_params *p)
{
    uint64_t fixed;
    int rc = match_table_check(&match_chain_ops, p, &fixed);
    if (rc)
        return rc;
    struct chain *c = calloc(1, sizeof *c);
    if (!c || !(c->lines = bigmem_alloc(fixed))) {
        free(c);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < p->size; i++)
        c->lines[i].next = CHAIN_EMPTY;
    c->size = p->size;
    match_mod_init(&c->mod, p->size);
    c->held = fixed;
    c->budget = p->memory_budget ? p->memory_budget : UINT64_MAX;
    *table = c;
    return 0;
}

static void chain_destroy(void *table)
{
    struct chain *c = table;
    if (!c)
        return;
    for (uint64_t i = 0; i < c->size; i++) {
        struct chain_node *n = c->lines[i].next;
        if (n == CHAIN_EMPTY)
            continue;
        while (n) {
            struct chain_node *next = n->next;
            free(n);
            n = next;
        }
    }
    free(c->lines);
    free(c);
}

static void chain_prefetch(void *table, uint64_t hash)
{
    struct chain *c = table;
    __builtin_prefetch(&c->lines[match_line(&c->mod, hash)]);
}

static int chain_find(void *table, const struct match_key *key, uint64_t hash, int insert,
                      struct match_count **out)
{
    struct chain *c = table;
    struct chain_node *n = &c->lines[match_line(&c->mod, hash)];
    if (n->next == CHAIN_EMPTY) {
        if (!insert)
            return -ENOENT;
        memset(&n->f, 0, sizeof n->f);
        n->f.key = *key;
        n->next = NULL;
        c->used++;
        c->flows++;
        *out = &n->f.c;
        return 1;
    }
    int probes = 0;
    struct chain_node *last = n;
    for (; n; n = n->next) {
        probes++;
        if (match_key_eq(&n->f.key, key)) {
            *out = &n->f.c;
            return probes;
        }
        last = n;
    }
    if (!insert)
        return -ENOENT;
    if (c->held + chain_node_bytes > c->budget)
        return -ENOMEM;
    n = malloc(sizeof *n);
    if (!n)
        return -ENOMEM;
    memset(&n->f, 0, sizeof n->f);
    n->f.key = *key;
    n->next = NULL;
    last->next = n;
    c->held += chain_node_bytes;
    c->flows++;
    *out = &n->f.c;
    return probes;
}

static int chain_remove(void *table, const struct match_key *key, uint64_t hash)
{
    struct chain *c = table;
    struct chain_node *line = &c->lines[match_line(&c->mod, hash)];
    if (line->next == CHAIN_EMPTY)
        return -ENOENT;
    if (match_key_eq(&line->f.key, key)) {
        struct chain_node *second = line->next;
        if (second) {
            *line = *second; /* the line keeps a flow: no list walk on the next lookup */
            free(second);
            c->held -= chain_node_bytes;
        } else {
            line->next = CHAIN_EMPTY;
            c->used--;
        }
        c->flows--;
        return 0;
    }
    for (struct chain_node *prev = line, *n = line->next; n; prev = n, n = n->next)
        if (match_key_eq(&n->f.key, key)) {
            prev->next = n->next;
            free(n);
            c->held -= chain_node_bytes;
            c->flows--;
            return 0;
        }
    return -ENOENT;
}

static void chain_walk(void *table, void (*fn)(const struct match_flow *, void *), void *arg)
{
    struct chain *c = table;
    for (uint64_t i = 0; i < c->size; i++) {
        if (c->lines[i].next == CHAIN_EMPTY)
            continue;
        for (struct chain_node *n = &c->lines[i]; n; n = n->next)
            fn(&n->f, arg);
    }
}

static uint64_t chain_flows(const void *table)
{
    return ((const struct chain *)table)->flows;
}
static uint64_t chain_used(const void *table)
{
    return ((const struct chain *)table)->used;
}
static uint64_t chain_memory(const void *table)
{
    return ((const struct chain *)table)->held;
}

const struct match_ops match_chain_ops = {
    .name = "chain",
    .what = "chaining, one pre-allocated flow per line (seed 000 lists)",
    .footprint = chain_footprint,
    .create = chain_create,
    .destroy = chain_destroy,
    .prefetch = chain_prefetch,
    .find = chain_find,
    .remove = chain_remove,
    .walk = chain_walk,
    .flows = chain_flows,
    .used_lines = chain_used,
    .memory = chain_memory,
};
