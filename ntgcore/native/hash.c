/* hash.c - the registry, the tuple key and the bulk loops of hash.h. The
 * algorithms are in hash_fn.h (inline, so each bulk loop gets its own copy
 * with the key length a constant), hash_crc32c.c and hash_toeplitz.c. */
#include "hash.h"
#include "hash_fn.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Every algorithm as (bytes, len, 64-bit seed) -> value, inline. */
static inline uint64_t a_coralreef(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_coralreef(k, n, (uint32_t)s);
}
static inline uint64_t a_lookup3(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_lookup3(k, n, (uint32_t)s);
}
static inline uint64_t a_murmur3_32(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_murmur3_32(k, n, (uint32_t)s);
}
static inline uint64_t a_murmur3_128(const uint8_t *k, size_t n, uint64_t s)
{
    uint64_t h[2];
    hf_murmur3_128(k, n, (uint32_t)s, h);
    return h[0];
}
static inline uint64_t a_superfast(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_superfast(k, n, (uint32_t)s);
}
static inline uint64_t a_fnv1a_32(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_fnv1a_32(k, n, (uint32_t)s);
}
static inline uint64_t a_fnv1a_64(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_fnv1a_64(k, n, s);
}
static inline uint64_t a_wyhash(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_wyhash(k, n, s);
}
static inline uint64_t a_xxh3(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_xxh3(k, n, s);
}
static inline uint64_t a_crc32c_sw(const uint8_t *k, size_t n, uint64_t s)
{
    return hf_crc32c_sw(k, n, (uint32_t)s);
}
static inline uint64_t a_toeplitz_sym(const uint8_t *k, size_t n, uint64_t s)
{
    (void)s;
    return hf_toeplitz(hf_toeplitz_sym_tab, k, n);
}
static inline uint64_t a_toeplitz_ms(const uint8_t *k, size_t n, uint64_t s)
{
    (void)s;
    return hf_toeplitz(hf_toeplitz_ms_tab, k, n);
}
#if HASH_HAVE_SSE42
__attribute__((target("sse4.2"))) static inline uint64_t a_crc32c_hw(const uint8_t *k, size_t n,
                                                                     uint64_t s)
{
    return hf_crc32c_hw(k, n, (uint32_t)s);
}
#endif

uint64_t hash_coralreef(const void *key, size_t len, uint64_t seed)
{
    return a_coralreef(key, len, seed);
}
uint64_t hash_lookup3(const void *key, size_t len, uint64_t seed)
{
    return a_lookup3(key, len, seed);
}
uint64_t hash_murmur3_32(const void *key, size_t len, uint64_t seed)
{
    return a_murmur3_32(key, len, seed);
}
uint64_t hash_murmur3_128(const void *key, size_t len, uint64_t seed)
{
    return a_murmur3_128(key, len, seed);
}
void hash_murmur3_128_full(const void *key, size_t len, uint32_t seed, uint64_t out[2])
{
    hf_murmur3_128(key, len, seed, out);
}
uint64_t hash_superfast(const void *key, size_t len, uint64_t seed)
{
    return a_superfast(key, len, seed);
}
uint64_t hash_fnv1a_32(const void *key, size_t len, uint64_t seed)
{
    return a_fnv1a_32(key, len, seed);
}
uint64_t hash_fnv1a_64(const void *key, size_t len, uint64_t seed)
{
    return a_fnv1a_64(key, len, seed);
}
uint64_t hash_wyhash(const void *key, size_t len, uint64_t seed)
{
    return a_wyhash(key, len, seed);
}
uint64_t hash_xxh3(const void *key, size_t len, uint64_t seed)
{
    return a_xxh3(key, len, seed);
}

/* One bulk loop per algorithm; the switch gives the compiler a constant
 * length for the tuple keys (IPv4/IPv6, with and without the protocol) and
 * for the flow keys of `flowengine match` (match_table.h: 16 and 40). */
typedef void (*bulk_fn)(const uint8_t *p, size_t len, size_t stride, size_t n, uint64_t seed,
                        uint64_t *out);

#define BULK_LOOP(F, L)                                                                            \
    for (size_t i = 0; i < n; i++)                                                                 \
    out[i] = F(p + i * stride, (L), seed)

#define DEFINE_BULK(NAME, ATTR)                                                                    \
    ATTR static void bulk_##NAME(const uint8_t *p, size_t len, size_t stride, size_t n,            \
                                 uint64_t seed, uint64_t *out)                                     \
    {                                                                                              \
        switch (len) {                                                                             \
        case 12:                                                                                   \
            BULK_LOOP(a_##NAME, 12);                                                               \
            break;                                                                                 \
        case 13:                                                                                   \
            BULK_LOOP(a_##NAME, 13);                                                               \
            break;                                                                                 \
        case 16:                                                                                   \
            BULK_LOOP(a_##NAME, 16);                                                               \
            break;                                                                                 \
        case 36:                                                                                   \
            BULK_LOOP(a_##NAME, 36);                                                               \
            break;                                                                                 \
        case 37:                                                                                   \
            BULK_LOOP(a_##NAME, 37);                                                               \
            break;                                                                                 \
        case 40:                                                                                   \
            BULK_LOOP(a_##NAME, 40);                                                               \
            break;                                                                                 \
        default:                                                                                   \
            BULK_LOOP(a_##NAME, len);                                                              \
            break;                                                                                 \
        }                                                                                          \
    }

DEFINE_BULK(coralreef, )
DEFINE_BULK(lookup3, )
DEFINE_BULK(murmur3_32, )
DEFINE_BULK(murmur3_128, )
DEFINE_BULK(superfast, )
DEFINE_BULK(fnv1a_32, )
DEFINE_BULK(fnv1a_64, )
DEFINE_BULK(wyhash, )
DEFINE_BULK(xxh3, )
DEFINE_BULK(crc32c_sw, )
DEFINE_BULK(toeplitz_sym, )
DEFINE_BULK(toeplitz_ms, )
#if HASH_HAVE_SSE42
DEFINE_BULK(crc32c_hw, __attribute__((target("sse4.2"))))
#else
#define bulk_crc32c_hw bulk_crc32c_sw
#endif

static void bulk_crc32c(const uint8_t *p, size_t len, size_t stride, size_t n, uint64_t seed,
                        uint64_t *out)
{
    if (hash_crc32c_hw_ok())
        bulk_crc32c_hw(p, len, stride, n, seed, out);
    else
        bulk_crc32c_sw(p, len, stride, n, seed, out);
}

static const struct hash_algo algos[] = {
    { "coralreef", 32, 0, hash_coralreef,
      "CoralReef-style XOR folding of the key's 32-bit words (no mixing)", NULL },
    { "lookup3", 32, 0, hash_lookup3, "Bob Jenkins' lookup3, hashlittle()", NULL },
    { "murmur3_32", 32, 0, hash_murmur3_32, "MurmurHash3 x86_32", NULL },
    { "murmur3_128", 64, 0, hash_murmur3_128, "MurmurHash3 x64_128, its first 64-bit half", NULL },
    { "superfasthash", 32, 0, hash_superfast, "Paul Hsieh's SuperFastHash (seed 002's hash)",
      NULL },
    { "fnv1a_32", 32, 0, hash_fnv1a_32, "FNV-1a, 32-bit", NULL },
    { "fnv1a_64", 64, 0, hash_fnv1a_64, "FNV-1a, 64-bit", NULL },
    { "crc32c", 32, 0, hash_crc32c,
      "CRC32C (Castagnoli): SSE4.2 crc32 when the CPU has it, else table-driven", NULL },
    { "crc32c_sw", 32, 0, hash_crc32c_sw, "CRC32C, the portable table-driven path", "crc32c" },
    { "crc32c_hw", 32, 0, hash_crc32c_hw, "CRC32C, the SSE4.2 crc32 instruction", "crc32c" },
    { "toeplitz", 32, 1, hash_toeplitz_sym,
      "Toeplitz (RSS) with the symmetric key 0x6d5a repeated: both directions hash the same",
      NULL },
    { "toeplitz_ms", 32, 1, hash_toeplitz_ms,
      "Toeplitz (RSS) with Microsoft's default key (the NIC's RSS value)", NULL },
    { "wyhash", 64, 0, hash_wyhash, "wyhash (final 4.2) with its default secret", NULL },
    { "xxh3", 64, 0, hash_xxh3, "XXH3-64 (xxHash 0.8) with its default secret", NULL },
};
#define NALGOS (sizeof algos / sizeof algos[0])

/* bulks[i] is algos[i]'s loop: same order. */
static const bulk_fn bulks[] = {
    bulk_coralreef,    bulk_lookup3,     bulk_murmur3_32, bulk_murmur3_128, bulk_superfast,
    bulk_fnv1a_32,     bulk_fnv1a_64,    bulk_crc32c,     bulk_crc32c_sw,   bulk_crc32c_hw,
    bulk_toeplitz_sym, bulk_toeplitz_ms, bulk_wyhash,     bulk_xxh3,
};
_Static_assert(sizeof bulks / sizeof bulks[0] == NALGOS, "one bulk loop per algorithm");

const struct hash_algo *hash_algos(size_t *n)
{
    *n = NALGOS;
    return algos;
}

int hash_find(const char *name, const struct hash_algo **out)
{
    for (size_t i = 0; i < NALGOS; i++) {
        if (strcmp(algos[i].name, name) != 0)
            continue;
        if (algos[i].fn == hash_crc32c_hw && !hash_crc32c_hw_ok())
            return -ENOTSUP;
        *out = &algos[i];
        return 0;
    }
    return -ENOENT;
}

size_t hash_names(char *buf, size_t size)
{
    size_t need = 0;
    if (size > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < NALGOS; i++) {
        const char *sep = i ? ", " : "";
        int w = snprintf(size > need ? buf + need : NULL, size > need ? size - need : 0, "%s%s",
                         sep, algos[i].name);
        need += (size_t)w;
    }
    return need;
}

int hash_tuple_key(const struct hash_tuple *t, uint8_t *key)
{
    size_t alen;
    if (t->family == 4)
        alen = 4;
    else if (t->family == 6)
        alen = 16;
    else
        return -EINVAL;
    memcpy(key, t->src, alen);
    memcpy(key + alen, t->dst, alen);
    uint8_t *q = key + 2 * alen;
    q[0] = (uint8_t)(t->sport >> 8);
    q[1] = (uint8_t)t->sport;
    q[2] = (uint8_t)(t->dport >> 8);
    q[3] = (uint8_t)t->dport;
    q[4] = t->proto;
    return (int)(2 * alen + 5);
}

uint64_t hash_tuple(const struct hash_algo *a, const struct hash_tuple *t, uint64_t seed)
{
    uint8_t key[HASH_TUPLE_KEY_MAX];
    int len = hash_tuple_key(t, key);
    if (len < 0)
        len = 0;
    else if (a->rss_input)
        len -= 1;
    return a->fn(key, (size_t)len, seed);
}

int hash_bulk(const struct hash_algo *a, const void *keys, size_t len, size_t stride, size_t n,
              uint64_t seed, uint64_t *out)
{
    if (stride < len)
        return -EINVAL;
    bulks[a - algos](keys, len, stride, n, seed, out);
    return 0;
}

void hash_tuple_bulk(const struct hash_algo *a, const struct hash_tuple *t, size_t n, uint64_t seed,
                     uint64_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = hash_tuple(a, &t[i], seed);
}
