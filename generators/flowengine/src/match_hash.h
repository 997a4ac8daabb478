/* match_hash.h - the hashes `flowengine match --hash NAME` can plug into a
 * table (struct match_hash_fn of match_table.h).
 *
 * A stand-in until the project's hash library (CoralReef folding, lookup3,
 * Murmur3, SuperFastHash, FNV-1a, CRC32C, Toeplitz, xxh3/wyhash with a name
 * registry) is merged: then this registry becomes a view of that one and
 * nothing else in the emulator changes. It has one hash, "mix64": the five
 * 64-bit words of the key each multiplied into a running state with the
 * SplitMix64 finalizer (rng.h), for keys whose length is a multiple of 8. */
#ifndef FE_MATCH_HASH_H
#define FE_MATCH_HASH_H

#include "match_table.h"

struct match_hash {
    const char *name;
    match_hash_fn fn;
};

/* NULL-terminated (name NULL). */
extern const struct match_hash match_hashes[];

/* The hash called NAME, or NULL. */
match_hash_fn match_hash_find(const char *name);

#endif
