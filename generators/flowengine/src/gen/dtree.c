/* dtree.c - the Distribution Tree (dtree.h; FLOR thesis, appendix A). */
#define _POSIX_C_SOURCE 200809L
#include "dtree.h"

#include "bigmem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int dtree_init(struct dtree *t, uint32_t cap_hint)
{
    memset(t, 0, sizeof *t);
    t->cap = cap_hint < 16 ? 16 : cap_hint;
    /* Untouched pages cost nothing, so a generous first size is free. */
    t->v = bigmem_alloc(((size_t)t->cap * 2) * sizeof *t->v);
    return t->v ? 0 : -ENOMEM;
}

void dtree_free(struct dtree *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}

/* Adds d (two's complement) to the left-subtree sums on the path from node
 * i to the root: the parents of which the path comes in from the left. */
static void path_add(uint64_t *v, uint32_t i, uint64_t d)
{
    while (i) {
        uint32_t p = (i - 1) / 2;
        if (i & 1) /* a left child */
            v[p] += d;
        i = p;
    }
}

int dtree_insert(struct dtree *t, uint32_t id, uint32_t weight)
{
    uint64_t leaf = (uint64_t)id << 32 | weight;
    if (t->n == t->cap) {
        if (t->cap > UINT32_MAX / 4)
            return -ENOMEM;
        uint64_t *nv = bigmem_alloc((size_t)t->cap * 4 * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        memcpy(nv, t->v, ((size_t)t->n * 2 - 1) * sizeof *nv);
        free(t->v);
        t->v = nv;
        t->cap *= 2;
    }
    uint64_t *v = t->v;
    if (!t->n) {
        v[0] = leaf;
        t->n = 1;
        t->total = weight;
        return 0;
    }
    /* The first leaf in breadth-first order, node n-1, becomes an inner node. */
    uint32_t i = t->n - 1;
    uint64_t old = v[i];
    v[2 * i + 1] = old;   /* its copy, the left child */
    v[2 * i + 2] = leaf;  /* the new event, the right child */
    v[i] = (uint32_t)old; /* left-subtree sum */
    path_add(v, i, weight);
    t->n++;
    t->total += weight;
    return 0;
}

void dtree_remove(struct dtree *t, uint32_t pos)
{
    uint64_t *v = t->v;
    uint32_t n = t->n;
    uint64_t w = (uint32_t)v[pos];
    if (n == 1) {
        t->n = 0;
        t->total = 0;
        return;
    }
    uint32_t last = 2 * n - 2, q = n - 2; /* last leaf, its parent */
    uint64_t wl = (uint32_t)v[last];
    if (pos != last) {
        /* The last leaf replaces the removed one. */
        v[pos] = v[last];
        path_add(v, pos, wl - w);
    }
    /* Collapse the last two leaves into their parent, which becomes the
     * first leaf in breadth-first order; the subtree loses the last leaf. */
    v[q] = v[last - 1];
    path_add(v, q, (uint64_t)0 - wl);
    t->n = n - 1;
    t->total -= w;
}
