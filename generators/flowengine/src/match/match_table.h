/* match_table.h - the common interface of the flow tables of `flowengine match`.
 *
 * A flow table maps a 5-tuple key to a flow record (packets, bytes, first and
 * last time stamp). Every structure (match_chain.h, match_tree.h,
 * match_linear.h, match_robin.h, match_cuckoo.h) fills one struct match_ops;
 * the emulator (match.c) and the tests reach a structure only through it, so a
 * new structure is one file, one header and one line in match_table.c.
 *
 * SIZE means the lines of the structure: chain heads and tree roots for the
 * bucketed ones, slots for open addressing, flow entries for cuckoo. Any size
 * from 1 works (powers of two or not: the line is the hash modulo the size,
 * computed without a division, see match_line).
 *
 * Memory: match_table_footprint() tells, before anything is allocated, the
 * bytes a structure takes at creation and what each stored flow may add; a
 * table never allocates past params.memory_budget (an insert that would is
 * refused with -ENOMEM and counted by the caller).
 *
 * Returns: negative errno (-EINVAL, -ENOMEM, -ENOSPC, -ENOENT), 0 or a count.
 * Thread safety: none; a table belongs to one thread. */
#ifndef FE_MATCH_TABLE_H
#define FE_MATCH_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hash.h"

/* The unidirectional flow key of ntgcore/native/flowtab.h: addresses as
 * big-endian numbers split in two (IPv4 in the low 32 bits of *_lo, *_hi = 0).
 * 40 bytes; PAD must be zero (the whole struct is hashed and compared). */
struct match_key {
    uint64_t src_hi, src_lo, dst_hi, dst_lo;
    uint16_t sport, dport;
    uint8_t proto, ip_version;
    uint8_t pad[2];
};

/* An IPv4 5-tuple packed in 16 bytes (the structures with key_bytes 16): the
 * addresses and ports as in struct match_key; PAD zero. */
struct match_key16 {
    uint32_t src, dst;
    uint16_t sport, dport;
    uint8_t proto, ip_version;
    uint8_t pad[2];
};

/* K packed in 16 bytes in *OUT: 0, or -1 (an IPv6 key, which does not fit). */
static inline int match_key_pack16(const struct match_key *k, struct match_key16 *out)
{
    *out = (struct match_key16){
        .src = (uint32_t)k->src_lo,
        .dst = (uint32_t)k->dst_lo,
        .sport = k->sport,
        .dport = k->dport,
        .proto = k->proto,
        .ip_version = k->ip_version,
    };
    return k->ip_version == 4 && !k->src_hi && !k->dst_hi && !(k->src_lo >> 32) &&
                   !(k->dst_lo >> 32)
               ? 0
               : -1;
}

static inline void match_key_unpack16(const struct match_key16 *p, struct match_key *k)
{
    *k = (struct match_key){
        .src_lo = p->src,
        .dst_lo = p->dst,
        .sport = p->sport,
        .dport = p->dport,
        .proto = p->proto,
        .ip_version = p->ip_version,
    };
}

/* What is counted of a flow. */
struct match_count {
    uint64_t packets, bytes;
    int64_t first_ns, last_ns;
};

struct match_flow {
    struct match_key key;
    struct match_count c;
};

/* The hash of a key is any hash_fn of the registry (hash.h), over the 40
 * bytes of struct match_key. The tables take the line from its low 32 bits
 * modulo the size (match_line: a 32-bit hash, whose upper half is zero, works)
 * and, for cuckoo, the signature from all 64 folded to 16. */

struct match_params {
    uint64_t size;        /* lines, see above; >= 1 */
    size_t memory_budget; /* bytes this table may hold in all; 0 = no limit */
};

struct match_ops {
    const char *name;
    const char *what; /* one line for --help and the JSON */
    /* 0: keys are struct match_key, hashed whole (40 bytes). 16: IPv4 keys
     * only, stored and hashed as struct match_key16 (match_key_hash); find
     * refuses another key with -EINVAL. */
    unsigned key_bytes;
    /* Bytes taken at creation for SIZE lines, and added by each stored flow
     * (0 when flows live in the lines). -EINVAL for a size that cannot be. */
    int (*footprint)(uint64_t size, uint64_t *fixed, uint64_t *per_flow);
    int (*create)(void **table, const struct match_params *p);
    void (*destroy)(void *table);
    /* Bring the line of HASH into the cache (no effect on the contents). */
    void (*prefetch)(void *table, uint64_t hash);
    /* Optional (NULL: none), called some packets after prefetch when the line
     * should be in cache: prefetch what the line points to (cuckoo: the
     * stored flows whose signature matches). */
    void (*prefetch_next)(void *table, uint64_t hash);
    /* Optional staged bulk lookup (NULL: none), both or neither: STAGE puts the
     * home lines of the N hashes at HASH into LINE and prefetches them;
     * FIND_LINE looks KEY up from its home LINE (from STAGE) without inserting,
     * as find with !INSERT (the probes, or -ENOENT; -EINVAL for a key the
     * table cannot hold). match_engine_bulk uses them when no timeout is set:
     * a block staged while the block before it is compared. */
    void (*stage)(void *table, const uint64_t *hash, size_t n, uint64_t *line);
    int (*find_line)(void *table, const struct match_key *key, uint64_t line,
                     struct match_count **out);
    /* Find KEY (whose hash is HASH). Absent and INSERT: add it with zero
     * counters. Returns the probes (keys or signatures compared, >= 1) with the
     * flow's counters in *OUT (valid until the next insert or remove; its key
     * is KEY), or -ENOENT (absent, !INSERT), -ENOSPC (no room), -ENOMEM
     * (memory budget). */
    int (*find)(void *table, const struct match_key *key, uint64_t hash, int insert,
                struct match_count **out);
    /* 0, or -ENOENT when KEY is absent. */
    int (*remove)(void *table, const struct match_key *key, uint64_t hash);
    /* Call FN on every flow (any order; FN must not change the table). */
    void (*walk)(void *table, void (*fn)(const struct match_flow *, void *), void *arg);
    uint64_t (*flows)(const void *table);
    uint64_t (*used_lines)(const void *table); /* lines holding at least one flow */
    uint64_t (*memory)(const void *table);     /* bytes held now */
};

/* The line of a hash among N lines, exact: the hash's low 32 bits modulo N
 * (seed 000's `hash % size`; a 32-bit hash, whose upper half is zero, is
 * reduced whole) for N <= 2^32, the 64 bits modulo N beyond. A division costs
 * tens of cycles, so each table computes once, at creation, what makes it two
 * multiplies (match_mod_init), and a power of two is a mask.
 *
 * Why it is exact: write h = qN + r and R = ceil(2^64 / N) = 2^64 / N + e,
 * 0 < e < 1 (N not a power of two). Modulo 2^64, R * h is r * 2^64 / N + e * h
 * (below 2^64 as e * h < 2^32 <= 2^64 / N); times N, the high word is
 * r + e * h * N / 2^64, rounded down, and e * h * N < 2^64 for h < 2^32 and
 * N <= 2^32: the remainder r. */
struct match_mod {
    uint64_t n;     /* lines, >= 1 */
    uint64_t recip; /* ceil(2^64 / n) when n <= 2^32 and not a power of two, else 0 */
};

static inline void match_mod_init(struct match_mod *m, uint64_t n)
{
    m->n = n;
    m->recip = (n & (n - 1)) && n <= (uint64_t)UINT32_MAX ? UINT64_MAX / n + 1 : 0;
}

static inline uint64_t match_line(const struct match_mod *m, uint64_t hash)
{
    if (m->recip) {
        uint64_t frac = m->recip * (hash & UINT32_MAX);
        return (uint64_t)(((unsigned __int128)frac * m->n) >> 64);
    }
    if (!(m->n & (m->n - 1)))
        return hash & (m->n - 1); /* n <= 2^32: the low 32 bits' remainder too */
    return hash % m->n;
}

/* Linear probing's removal without tombstones (match_linear.c,
 * match_linear16.c): SLOT_BYTES-byte slots, SIZE of them from SLOTS; the entry
 * at HOLE was just emptied. An entry after the hole moves into it unless its
 * home lies cyclically in (hole, here], where it would no longer be found;
 * the scan ends at the first empty slot. USED, HASH_OF and CLEAR read and mark
 * a slot (static inline: the compiler folds them in). */
static inline void match_backshift(void *slots, size_t slot_bytes, uint64_t size, uint64_t hole,
                                   const struct match_mod *mod, int (*used)(const void *),
                                   uint64_t (*hash_of)(const void *), void (*clear)(void *))
{
    char *base = (char *)slots;
    for (uint64_t k = hole;;) {
        if (++k == size)
            k = 0;
        char *s = base + k * slot_bytes;
        if (!used(s))
            break;
        uint64_t home = match_line(mod, hash_of(s));
        int stays = hole <= k ? (hole < home && home <= k) : (hole < home || home <= k);
        if (stays)
            continue;
        memcpy(base + hole * slot_bytes, s, slot_bytes);
        clear(s);
        hole = k;
    }
}

/* The hash of KEY for a table of OPS: HASH over the bytes the table keeps
 * (struct match_key, or struct match_key16 for key_bytes 16). */
static inline uint64_t match_key_hash(const struct match_ops *ops, hash_fn hash, uint64_t seed,
                                      const struct match_key *key)
{
    if (ops->key_bytes == 16) {
        struct match_key16 p;
        match_key_pack16(key, &p);
        return hash(&p, sizeof p, seed);
    }
    return hash(key, sizeof *key, seed);
}

/* Prefetch every cache line of the BYTES bytes at P (a record that straddles
 * lines, or the next probes of an open-addressing table: a probe that reaches
 * a line not prefetched stalls the packets behind it too). */
static inline void match_prefetch_span(const void *p, size_t bytes)
{
    const char *c = (const char *)p;
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(c + o);
    __builtin_prefetch(c + bytes - 1);
}

static inline int match_key_eq(const struct match_key *a, const struct match_key *b)
{
    return a->src_lo == b->src_lo && a->dst_lo == b->dst_lo && a->src_hi == b->src_hi &&
           a->dst_hi == b->dst_hi && a->sport == b->sport && a->dport == b->dport &&
           a->proto == b->proto && a->ip_version == b->ip_version;
}

/* Total order of keys (the trees): <0, 0, >0. */
int match_key_cmp(const struct match_key *a, const struct match_key *b);

/* The structures known, NULL-terminated; match_table_find_ops by name (NULL
 * when unknown). */
extern const struct match_ops *const match_tables[];
const struct match_ops *match_table_find_ops(const char *name);

/* For a structure's create: the bytes OPS takes at creation for P in *FIXED;
 * 0, -EINVAL (a size it cannot have) or -ENOMEM (over P's budget or SIZE_MAX). */
int match_table_check(const struct match_ops *ops, const struct match_params *p, uint64_t *fixed);
/* BYTES zeroed, from bigmem_alloc (NULL: out of memory; free with free()). */
void *match_table_zalloc(uint64_t bytes);

/* Saturating bytes of N elements of SIZE bytes (UINT64_MAX on overflow). */
uint64_t match_mul_bytes(uint64_t n, uint64_t size);

#endif
