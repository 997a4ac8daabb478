/* match_linear.h - open addressing with linear probing.
 *
 * SIZE slots of 80 bytes (the flow and its 64-bit hash) allocated with the
 * table; nothing is allocated per flow. A key is looked for from its home slot
 * onwards until it or an empty slot is found (the stored hash is compared
 * before the key). Removal shifts the following entries back instead of
 * leaving tombstones, so lookups never walk over dead slots. The table holds
 * at most SIZE flows (then insert is -ENOSPC); probes grow as 1/(1-load)^2 for
 * misses, so keep it below ~70 % full.
 *
 * Keys stored must have ip_version != 0 (0 marks an empty slot).
 * find() probes: slots inspected. Occupancy: flows over SIZE. */
#ifndef FE_MATCH_LINEAR_H
#define FE_MATCH_LINEAR_H

#include "match_table.h"

extern const struct match_ops match_linear_ops;

#endif
