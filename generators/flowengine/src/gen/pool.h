/* pool.h - the pool of flow instances (struct fe_inst, packet.h).
 *
 * Instances live in one array and are named by their index (a 32-bit id: the
 * wheel's FIFOs and the Distribution Tree store ids, not pointers). Freed ids
 * go on a free list threaded through fe_inst.flow and are reused first; the
 * array doubles only when more instances are alive at once than ever before,
 * so the steady state allocates nothing.
 *
 * Thread safety: none; a pool belongs to one loop (one thread). */
#ifndef FE_POOL_H
#define FE_POOL_H

#include <stdint.h>

#include "packet.h"

#define POOL_NONE UINT32_MAX
/* Ids stay below WHEEL_NONE and fit the tree's 32-bit event field. */
#define POOL_MAX 0x7fffffffu
/* Upper bound of the first size: untouched pages cost nothing, but a
 * session's bound on live instances can be far above what is ever alive. */
#define POOL_INITIAL_MAX (1u << 25)

struct pool {
    struct fe_inst *inst; /* the array: inst[id] */
    uint32_t cap, used;   /* slots allocated, slots ever handed out */
    uint32_t free_head;   /* first free id, POOL_NONE: none */
};

/* An empty pool with room for cap_hint instances (at least 1, at most
 * POOL_INITIAL_MAX; it grows). Returns 0 or -ENOMEM. */
int pool_init(struct pool *p, uint64_t cap_hint);
/* Frees the array; a zeroed pool is fine. */
void pool_free(struct pool *p);
/* Doubles the array (up to POOL_MAX slots). Returns 0 or -ENOMEM. */
int pool_grow(struct pool *p);

/* A free instance id in *id (its fields are stale: the caller initializes
 * them). Returns 0 or -ENOMEM (no id). */
static inline int pool_get(struct pool *p, uint32_t *id)
{
    if (p->free_head != POOL_NONE) {
        *id = p->free_head;
        p->free_head = p->inst[*id].flow;
        return 0;
    }
    if (p->used == p->cap) {
        int rc = pool_grow(p);
        if (rc)
            return rc;
    }
    *id = p->used++;
    return 0;
}

/* Gives id back; its instance must not be used afterwards. */
static inline void pool_put(struct pool *p, uint32_t id)
{
    p->inst[id].flow = p->free_head;
    p->free_head = id;
}

#endif
