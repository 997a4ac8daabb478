/* match_engine.h - the per-packet work of `flowengine match`: hash the key,
 * find or insert its flow in a table (match_table.h), count the packet, and
 * expire idle and long-lived flows at a bounded cost per packet.
 *
 * Counters: packets, bytes (sum of LEN), first and last time stamp (min and
 * max of TS, as ntgcore/native/flowtab.h counts them).
 *
 * Timeouts (nanoseconds, 0 = none): a flow is over when NOW - last >= idle or
 * NOW - first >= active. Two ways it ends, with the same records either way:
 * - a packet of a flow that is over closes it and starts a new flow of the
 *   same key in its place (so a lagging sweep never changes what is counted);
 * - a timer wheel (1024 slots of min(idle, active) / 128) holds one record
 *   (the key, 40 bytes) per live flow; each packet first takes at most BUDGET
 *   steps from the slots due by its time stamp: a step is an empty slot passed
 *   or one record checked (a lookup: removed when over, else put back at its
 *   new due time). The cost a packet adds is thus at most BUDGET lookups,
 *   whatever the number of flows due; when more are due than the budget
 *   allows the sweep lags (the table holds more flows) but never stalls.
 * Each closed flow is passed to on_close (when set) before it leaves.
 *
 * Bulk: match_engine_bulk hashes the keys a block of MATCH_AHEAD at a time, a
 * block ahead, and prefetches each key's line MATCH_AHEAD packets before its
 * lookup (and, for a structure with a second level, what the line points to
 * MATCH_AHEAD / 2 packets before), so the cache misses of consecutive packets
 * overlap. A packet with the key of the packet before it is not prefetched
 * again and, when no timeout is set and the packet before did not insert, is
 * counted in that flow with the same probes without a lookup (the same
 * counters and histogram as a lookup would give: nothing moves a flow between
 * two hits).
 *
 * Returns negative errno. Thread safety: none; an engine belongs to one
 * thread. */
#ifndef FE_MATCH_ENGINE_H
#define FE_MATCH_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "match_table.h"

#define MATCH_HIST 64  /* probe lengths 1..63 counted one by one, 64 and more together */
#define MATCH_AHEAD 16 /* a power of two */
#define MATCH_BLOCK 16 /* keys a block of the staged bulk lookup (match_ops.stage) */

struct match_engine_params {
    const struct match_ops *ops;
    struct match_params table;
    hash_fn hash;
    const struct hash_algo *algo; /* NULL, or HASH's registry entry: match_engine_bulk
                                   * then hashes a block of keys at a time (hash_bulk) */
    uint64_t seed;
    int64_t idle_ns, active_ns;
    unsigned budget; /* expiry steps per packet, >= 1 when a timeout is set */
    void (*on_close)(const struct match_flow *f, void *arg);
    void *on_close_arg;
};

struct match_stats {
    uint64_t packets, inserts, expired_sweep, expired_on_hit, refused;
    uint64_t hist[MATCH_HIST + 1]; /* hist[L]: packets whose lookup took L probes */
    uint64_t probe_sum, probe_max;
    uint64_t steps_max;     /* most expiry steps of one packet (<= budget) */
    uint64_t work_max;      /* most probes of one packet, its lookup and its expiry steps */
    uint64_t wheel_records; /* records in the wheel now */
};

struct match_engine;

/* -EINVAL (bad params), -ENOMEM (the table's memory over the budget, or
 * malloc). */
int match_engine_create(struct match_engine **e, const struct match_engine_params *p);
void match_engine_free(struct match_engine *e);

/* One packet. 0, or the insert's negative errno (the packet is counted as
 * refused and the engine goes on). */
int match_engine_packet(struct match_engine *e, const struct match_key *key, uint32_t len,
                        int64_t ts_ns);
/* N packets in order; the same as N calls of match_engine_packet. */
void match_engine_bulk(struct match_engine *e, const struct match_key *keys, const uint32_t *len,
                       const int64_t *ts_ns, size_t n);

/* Pass every live flow to FN (the run's end). */
void match_engine_walk(struct match_engine *e, void (*fn)(const struct match_flow *, void *),
                       void *arg);

const struct match_stats *match_engine_stats(const struct match_engine *e);
/* Zero the counters (not the flows): a timed pass after an untimed warm-up. */
void match_engine_reset_stats(struct match_engine *e);
void *match_engine_table(const struct match_engine *e);
uint64_t match_engine_memory(const struct match_engine *e); /* the table and the wheel */

#endif
