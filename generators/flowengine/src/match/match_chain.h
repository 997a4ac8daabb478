/* match_chain.h - hash table with chaining and one pre-allocated flow per line
 * (the "lists" of seed 000).
 *
 * Each line is a full node (flow + next pointer, 80 bytes) allocated with the
 * table, so the first flow of a line costs no allocation: it is copied into
 * the line. Further flows of the line are nodes from malloc appended to the
 * line's list (80 bytes + malloc's 16-byte header, counted as 96). Removing
 * the line's own flow moves the second one into the line.
 *
 * find() probes: the flows compared in the line's list (1 for an empty line).
 * Occupancy: lines holding a flow over SIZE. */
#ifndef FE_MATCH_CHAIN_H
#define FE_MATCH_CHAIN_H

#include "match_table.h"

extern const struct match_ops match_chain_ops;

#endif
