/* match_table.c - see match_table.h: the registry of structures. */
#include "match_table.h"

#include <errno.h>
#include <string.h>

#include "bigmem.h"
#include "match_chain.h"
#include "match_cuckoo.h"
#include "match_linear.h"
#include "match_linear16.h"
#include "match_robin.h"
#include "match_tree.h"

const struct match_ops *const match_tables[] = {
    &match_chain_ops,
    &match_tree_ops,
    &match_linear_ops,
    &match_robin_ops,
    &match_cuckoo_ops,
    &match_linear16_ops,
    NULL,
};

const struct match_ops *match_table_find_ops(const char *name)
{
    for (const struct match_ops *const *o = match_tables; *o; o++)
        if (!strcmp((*o)->name, name))
            return *o;
    return NULL;
}

int match_key_cmp(const struct match_key *a, const struct match_key *b)
{
#define MATCH_CMP(f)                                                                               \
    if (a->f != b->f)                                                                              \
    return a->f < b->f ? -1 : 1
    MATCH_CMP(src_lo);
    MATCH_CMP(dst_lo);
    MATCH_CMP(sport);
    MATCH_CMP(dport);
    MATCH_CMP(src_hi);
    MATCH_CMP(dst_hi);
    MATCH_CMP(proto);
    MATCH_CMP(ip_version);
#undef MATCH_CMP
    return 0;
}

uint64_t match_mul_bytes(uint64_t n, uint64_t size)
{
    if (size && n > UINT64_MAX / size)
        return UINT64_MAX;
    return n * size;
}

int match_table_check(const struct match_ops *ops, const struct match_params *p, uint64_t *fixed)
{
    uint64_t per_flow;
    if (ops->footprint(p->size, fixed, &per_flow))
        return -EINVAL;
    if ((p->memory_budget && *fixed > p->memory_budget) || *fixed > SIZE_MAX)
        return -ENOMEM;
    return 0;
}

void *match_table_zalloc(uint64_t bytes)
{
    void *p = bigmem_alloc((size_t)bytes);
    if (p)
        memset(p, 0, (size_t)bytes);
    return p;
}
