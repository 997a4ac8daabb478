/* match_tree.h - hash table of balanced trees: an AVL tree per line (the
 * "trees" of seed 000, which used red-black trees of the C++ STL).
 *
 * The table is SIZE root pointers (8 bytes each); every flow is a node from
 * malloc (flow, two children, height: 96 bytes + malloc's 16-byte header,
 * counted as 112), so, as in the seed, even the first flow of a line costs an
 * allocation, but a line holding L flows is searched in O(log L): a collision
 * attack that makes one line a list of L costs log2(L) compares, not L.
 *
 * find() probes: the nodes compared on the path (1 for an empty line).
 * Occupancy: non-empty lines over SIZE. */
#ifndef FE_MATCH_TREE_H
#define FE_MATCH_TREE_H

#include "match_table.h"

extern const struct match_ops match_tree_ops;

#endif
