/* dtree.h - FLOR's Distribution Tree (thesis, appendix A): picks an event
 * with probability proportional to its integer weight.
 *
 * A complete binary tree in breadth-first order in one array: with n leaves,
 * nodes 0..n-2 are inner nodes and n-1..2n-2 the leaves, children of i are
 * 2i+1 and 2i+2. An inner node holds the sum of the weights in its *left*
 * subtree (not a prefix sum, so updates stay local); a leaf holds its event
 * (an instance id) and weight. Pick: binary search of the inverse CDF from
 * the root. Insert: the first leaf in breadth-first order becomes an inner
 * node with a copy of itself as left child and the new leaf as right child.
 * Remove: the last leaf takes the removed leaf's place and the last two
 * leaves collapse into their parent. All three are O(log n); 16 bytes per
 * event.
 *
 * Thread safety: none; a tree belongs to one thread (the stochastic planner
 * of one loop). */
#ifndef FE_DTREE_H
#define FE_DTREE_H

#include <stddef.h>
#include <stdint.h>

struct dtree {
    uint64_t *v;     /* inner: left-subtree sum; leaf: id << 32 | weight */
    uint32_t n, cap; /* leaves, capacity in leaves */
    uint64_t total;  /* sum of all weights */
};

/* An empty tree with room for cap_hint leaves (at least 16; it grows).
 * Returns 0 or -ENOMEM. */
int dtree_init(struct dtree *t, uint32_t cap_hint);
/* Frees the array; a zeroed tree is fine. */
void dtree_free(struct dtree *t);
/* Adds event id with weight 1..2^32-1. Returns 0 or -ENOMEM (tree unchanged). */
int dtree_insert(struct dtree *t, uint32_t id, uint32_t weight);
/* Removes the leaf at node index pos (from dtree_pick); the last leaf moves
 * into its place, so positions from earlier picks are stale afterwards. */
void dtree_remove(struct dtree *t, uint32_t pos);

/* The leaf (node index) whose cumulative range holds r, 0 <= r < total; the
 * tree must not be empty. */
static inline uint32_t dtree_pick(const struct dtree *t, uint64_t r)
{
    const uint64_t *v = t->v;
    uint32_t i = 0, inner = t->n - 1;
    while (i < inner) {
        /* The 16 descendants four levels down are contiguous (128 bytes):
         * fetching them now overlaps the misses of a deep tree. */
        uint32_t g = 16 * i + 15;
        if (g < inner) {
            __builtin_prefetch(&v[g]);
            __builtin_prefetch(&v[g + 8]);
            __builtin_prefetch(&v[g + 15]);
        }
        uint64_t left = v[i];
        int right = r >= left;
        r -= right ? left : 0;
        i = 2 * i + 1 + (uint32_t)right;
    }
    return i;
}

/* The event id of the leaf at node index pos. */
static inline uint32_t dtree_id(const struct dtree *t, uint32_t pos)
{
    return (uint32_t)(t->v[pos] >> 32);
}

/* The weight of the leaf at node index pos. */
static inline uint32_t dtree_weight(const struct dtree *t, uint32_t pos)
{
    return (uint32_t)t->v[pos];
}

#endif
