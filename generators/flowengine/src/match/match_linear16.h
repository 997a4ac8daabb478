/* match_linear16.h - linear probing with IPv4 keys packed in 16 bytes.
 *
 * match_linear.h with a compact slot: the key as struct match_key16 (an IPv4
 * 5-tuple in 16 bytes), the counters and the 64-bit hash in one 64-byte,
 * 64-byte-aligned slot, so a lookup that ends in its home slot reads one cache
 * line (linear's 80-byte slots straddle two). IPv6 keys are refused (find:
 * -EINVAL; `flowengine match` refuses such a feed before it runs). The key is
 * hashed as its 16 packed bytes (match_key_hash), the same bytes as DPDK's
 * usual IPv4 flow key.
 *
 * SIZE slots of 64 bytes; at most SIZE flows; backward-shift removal as linear.
 * find() probes: slots inspected. Occupancy: flows over SIZE.
 *
 * Staged bulk lookup (match_ops.stage, find_line, prefetch_next): stage puts
 * the home slots of a block of hashes in a list and prefetches them;
 * prefetch_next, once the home slot is in cache, prefetches the next slot when
 * another flow (another stored hash) holds the home; find_line compares from
 * the listed home slot. match_engine_bulk uses them without timeouts. */
#ifndef FE_MATCH_LINEAR16_H
#define FE_MATCH_LINEAR16_H

#include "match_table.h"

extern const struct match_ops match_linear16_ops;

#endif
