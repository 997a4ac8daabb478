/* match_robin.h - open addressing with Robin Hood hashing.
 *
 * SIZE slots of 80 bytes (the flow, a 32-bit tag of its hash and its distance
 * from its home slot) allocated with the table. Insertion lets a key that has
 * travelled further take the slot of one that is nearer its home, so probe
 * lengths stay close to the mean even when the table is full; a lookup stops
 * as soon as it meets an entry nearer its home than the key would be (a miss
 * costs about as much as a hit). Removal shifts the following entries back.
 * At most SIZE flows (then insert is -ENOSPC).
 *
 * Keys stored must have ip_version != 0 (0 marks an empty slot).
 * find() probes: slots inspected. Occupancy: flows over SIZE. */
#ifndef FE_MATCH_ROBIN_H
#define FE_MATCH_ROBIN_H

#include "match_table.h"

extern const struct match_ops match_robin_ops;

#endif
