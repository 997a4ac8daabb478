/* pool.c - the instance pool (pool.h). */
#include "pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigmem.h"

int pool_init(struct pool *p, uint64_t cap_hint)
{
    memset(p, 0, sizeof *p);
    p->free_head = POOL_NONE;
    if (cap_hint > POOL_INITIAL_MAX)
        cap_hint = POOL_INITIAL_MAX;
    p->cap = cap_hint ? (uint32_t)cap_hint : 1;
    p->inst = bigmem_alloc((size_t)p->cap * sizeof *p->inst);
    return p->inst ? 0 : -ENOMEM;
}

void pool_free(struct pool *p)
{
    free(p->inst);
    p->inst = NULL;
}

int pool_grow(struct pool *p)
{
    if (p->cap >= POOL_MAX)
        return -ENOMEM;
    uint32_t ncap = p->cap > POOL_MAX / 2 ? POOL_MAX : p->cap * 2;
    struct fe_inst *np = bigmem_alloc((size_t)ncap * sizeof *np);
    if (!np)
        return -ENOMEM;
    memcpy(np, p->inst, (size_t)p->used * sizeof *np);
    free(p->inst);
    p->inst = np;
    p->cap = ncap;
    return 0;
}
