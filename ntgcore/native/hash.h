/* hash.h - the flow-key hash functions: one signature over bytes, a 5-tuple
 * key, bulk calls over N keys, and a name -> function registry.
 *
 * Every hash takes (key, len, seed) and returns its value in a uint64_t; a
 * 32-bit hash leaves the upper half zero (struct hash_algo.bits says which).
 * The functions are our own code written from the published descriptions of
 * each algorithm; tests/test_hashes.py checks each against published vectors
 * (docs/hash-study.md lists them and their sources).
 *
 * Flow keys. struct hash_tuple holds an IPv4 or IPv6 5-tuple; hash_tuple_key()
 * packs it into the bytes that are hashed, in network order:
 *     src | dst | sport | dport | proto     (IPv4: 13 bytes, IPv6: 37 bytes)
 * The first 12/36 bytes are exactly the RSS (Toeplitz) input of a TCP/UDP
 * packet, so the Toeplitz entries hash the tuple without the protocol and give
 * the NIC's value. A symmetric hash (both directions the same) is the
 * "toeplitz" entry: its key repeats 0x6d5a, whose 16-bit period makes swapping
 * src/dst (32 or 128 bits apart) and sport/dport (16 bits apart) a no-op.
 * The same period makes its value depend only on the XOR of the input's 16-bit
 * words: at most 65,536 values, a queue selector and not a table hash
 * (docs/hash-study.md measures it).
 *
 * Thread safety: every function here is pure; the CRC32C and Toeplitz tables
 * are filled by a constructor when the program or library is loaded, before
 * any call. Any number of threads may hash at once. */
#ifndef FE_HASH_H
#define FE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Exported from the shared library (libntg, loaded by analysis/hashing.py)
 * built with hidden visibility; a no-op inside the flowengine executable. */
#define HASH_API __attribute__((visibility("default")))

/* The longest packed tuple key (IPv6). */
#define HASH_TUPLE_KEY_MAX 37

/* One flow: addresses in network order (IPv4 in the first 4 bytes, the rest
 * zero), ports in host order, family 4 or 6. 40 bytes, no padding holes. */
struct hash_tuple {
    uint8_t src[16];
    uint8_t dst[16];
    uint16_t sport, dport;
    uint8_t proto;
    uint8_t family;
    uint8_t pad[2];
};

typedef uint64_t (*hash_fn)(const void *key, size_t len, uint64_t seed);

struct hash_algo {
    const char *name; /* registry name, e.g. "crc32c" */
    unsigned bits;    /* width of the value: 32 or 64 */
    int rss_input;    /* 1: a tuple is hashed without its protocol byte */
    hash_fn fn;
    const char *summary; /* one line: what it is */
    const char *same_as; /* NULL, or the entry whose values this one repeats
                            (another implementation of it, e.g. crc32c_sw) */
};

/* The known hashes, in a stable order; *n gets their number. */
HASH_API const struct hash_algo *hash_algos(size_t *n);
/* The hash named NAME in *out. Returns 0, -ENOENT (unknown name) or
 * -ENOTSUP (known, but this CPU lacks the instructions it needs). */
HASH_API int hash_find(const char *name, const struct hash_algo **out);
/* The known names, comma-separated, into buf (always NUL-terminated); for
 * error messages. Returns the length the full list needs. */
HASH_API size_t hash_names(char *buf, size_t size);

/* Packs T into KEY (HASH_TUPLE_KEY_MAX bytes of room); returns the key's
 * length (13 or 37), or -EINVAL when t->family is neither 4 nor 6. */
HASH_API int hash_tuple_key(const struct hash_tuple *t, uint8_t *key);
/* A's value of T's packed key (without the protocol byte when a->rss_input).
 * A tuple of an unknown family hashes as an empty key. */
HASH_API uint64_t hash_tuple(const struct hash_algo *a, const struct hash_tuple *t, uint64_t seed);

/* N keys of LEN bytes, STRIDE bytes apart from KEYS, hashed into OUT[0..N).
 * A must be an entry of the registry (hash_find() or hash_algos()).
 * STRIDE >= LEN. The loop is specialized for the tuple lengths (12, 13, 36,
 * 37), so a packed array of tuples costs no per-key call. Returns 0 or
 * -EINVAL (stride < len). */
HASH_API int hash_bulk(const struct hash_algo *a, const void *keys, size_t len, size_t stride,
                       size_t n, uint64_t seed, uint64_t *out);
/* N tuples hashed into OUT[0..N) (each as hash_tuple()). */
HASH_API void hash_tuple_bulk(const struct hash_algo *a, const struct hash_tuple *t, size_t n,
                              uint64_t seed, uint64_t *out);

/* The algorithms themselves (the registry's functions). 32-bit hashes use
 * the low 32 bits of SEED. */
HASH_API uint64_t hash_coralreef(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_lookup3(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_murmur3_32(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_murmur3_128(const void *key, size_t len, uint64_t seed);
HASH_API void hash_murmur3_128_full(const void *key, size_t len, uint32_t seed, uint64_t out[2]);
HASH_API uint64_t hash_superfast(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_fnv1a_32(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_fnv1a_64(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_wyhash(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_xxh3(const void *key, size_t len, uint64_t seed);

/* CRC32C (Castagnoli): SEED is the CRC of the bytes before (0 to start), so
 * hash_crc32c(b, n, hash_crc32c(a, m, 0)) is the CRC of a then b. The
 * portable path is table-driven; the SSE4.2 one uses the crc32 instruction
 * and exists only on x86-64 (hash_crc32c_hw_ok() says if this CPU has it).
 * hash_crc32c picks the fast one once, at the first call. */
HASH_API uint64_t hash_crc32c(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_crc32c_sw(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_crc32c_hw(const void *key, size_t len, uint64_t seed);
HASH_API int hash_crc32c_hw_ok(void);

/* Toeplitz (RSS) with a 40-byte key: the symmetric 0x6d5a key, or the
 * Microsoft default key of the RSS verification suite. SEED is ignored (the
 * key is the seed). Inputs up to 36 bytes give the RSS value; longer ones
 * continue with the key repeated. */
HASH_API uint64_t hash_toeplitz_sym(const void *key, size_t len, uint64_t seed);
HASH_API uint64_t hash_toeplitz_ms(const void *key, size_t len, uint64_t seed);
/* Toeplitz of DATA under any 40-byte KEY, bit by bit (the reference the
 * table-driven versions are tested against). */
HASH_API uint32_t hash_toeplitz_ref(const uint8_t key[40], const void *data, size_t len);

#endif
