/* match_cuckoo.h - bucketized cuckoo hash table with per-slot signatures (the
 * design of DPDK's rte_hash and of most modern flow tables).
 *
 * Buckets of one cache line: 8 slots, each a 16-bit signature of the hash and
 * a 32-bit index into a separate flow store. A key may sit in two buckets: its
 * primary (from the hash) and an alternative computed from the primary and the
 * signature alone, alt(b) = (off(sig) - b) mod B, an involution for any number
 * of buckets B (no power of two needed), so an entry can be moved without its
 * key being hashed again. A lookup reads at most two lines and compares a full
 * key only where the signature matches (false match 1 in 65,536 per slot).
 * An insert into two full buckets moves entries along a random walk of at
 * most 128 steps (undone when it fails: -ENOSPC).
 *
 * SIZE is the number of flows (the store); buckets = ceil(SIZE / 8), so the
 * table is full near 95 %+ of SIZE. Bytes per flow: 72 (store) + 4 (free
 * list) + 8 (a slot's share of its 64-byte bucket) = 84, all allocated with
 * the table. SIZE <= 2^32 - 2.
 *
 * find() probes: buckets read (1 or 2). Occupancy: flows over SIZE. */
#ifndef FE_MATCH_CUCKOO_H
#define FE_MATCH_CUCKOO_H

#include "match_table.h"

extern const struct match_ops match_cuckoo_ops;

#endif
