/* hash_fn.h - the hash algorithms as static inline bodies (hf_*), private to
 * hash.c, hash_crc32c.c and hash_toeplitz.c: hash.c instantiates each in its
 * bulk loops with a constant key length, which is where their speed comes
 * from. The public functions and their contract are in hash.h.
 *
 * Multi-byte reads are little-endian (the algorithms are defined that way),
 * done with memcpy so unaligned keys are fine. */
#ifndef FE_HASH_FN_H
#define FE_HASH_FN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define HASH_HAVE_SSE42 1
#else
#define HASH_HAVE_SSE42 0
#endif

static inline uint32_t hf_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline uint64_t hf_rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t hf_rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}
static inline uint64_t hf_rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* CoralReef-style: the key's 32-bit words XORed together (the tail padded
 * with zeros): src ^ dst ^ ports ^ proto for a tuple. No mixing at all - the
 * baseline of seed 000. */
static inline uint32_t hf_coralreef(const uint8_t *p, size_t len, uint32_t seed)
{
    uint32_t h = seed;
    for (; len >= 4; len -= 4, p += 4)
        h ^= hf_rd32(p);
    uint32_t t = 0;
    for (size_t i = 0; i < len; i++)
        t |= (uint32_t)p[i] << (8 * i);
    return h ^ t;
}

/* Bob Jenkins' lookup3, hashlittle(): 12-byte blocks through mix(), the last
 * (1..12 bytes) through final(); a zero length returns the initial c. */
#define HF_L3_MIX(a, b, c)                                                                         \
    do {                                                                                           \
        a -= c;                                                                                    \
        a ^= hf_rotl32(c, 4);                                                                      \
        c += b;                                                                                    \
        b -= a;                                                                                    \
        b ^= hf_rotl32(a, 6);                                                                      \
        a += c;                                                                                    \
        c -= b;                                                                                    \
        c ^= hf_rotl32(b, 8);                                                                      \
        b += a;                                                                                    \
        a -= c;                                                                                    \
        a ^= hf_rotl32(c, 16);                                                                     \
        c += b;                                                                                    \
        b -= a;                                                                                    \
        b ^= hf_rotl32(a, 19);                                                                     \
        a += c;                                                                                    \
        c -= b;                                                                                    \
        c ^= hf_rotl32(b, 4);                                                                      \
        b += a;                                                                                    \
    } while (0)
#define HF_L3_FINAL(a, b, c)                                                                       \
    do {                                                                                           \
        c ^= b;                                                                                    \
        c -= hf_rotl32(b, 14);                                                                     \
        a ^= c;                                                                                    \
        a -= hf_rotl32(c, 11);                                                                     \
        b ^= a;                                                                                    \
        b -= hf_rotl32(a, 25);                                                                     \
        c ^= b;                                                                                    \
        c -= hf_rotl32(b, 16);                                                                     \
        a ^= c;                                                                                    \
        a -= hf_rotl32(c, 4);                                                                      \
        b ^= a;                                                                                    \
        b -= hf_rotl32(a, 14);                                                                     \
        c ^= b;                                                                                    \
        c -= hf_rotl32(b, 24);                                                                     \
    } while (0)

static inline uint32_t hf_lookup3(const uint8_t *p, size_t len, uint32_t seed)
{
    uint32_t a, b, c;
    a = b = c = 0xdeadbeefu + (uint32_t)len + seed;
    while (len > 12) {
        a += hf_rd32(p);
        b += hf_rd32(p + 4);
        c += hf_rd32(p + 8);
        HF_L3_MIX(a, b, c);
        len -= 12;
        p += 12;
    }
    if (len == 0)
        return c;
    uint32_t w[3] = { 0, 0, 0 };
    for (size_t i = 0; i < len; i++)
        w[i / 4] |= (uint32_t)p[i] << (8 * (i % 4));
    a += w[0];
    b += w[1];
    c += w[2];
    HF_L3_FINAL(a, b, c);
    return c;
}

/* MurmurHash3 x86_32 (Austin Appleby). */
static inline uint32_t hf_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static inline uint32_t hf_murmur3_32(const uint8_t *p, size_t len, uint32_t seed)
{
    const uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
    uint32_t h = seed;
    size_t nblocks = len / 4;
    for (size_t i = 0; i < nblocks; i++) {
        uint32_t k = hf_rd32(p + 4 * i);
        k *= c1;
        k = hf_rotl32(k, 15);
        k *= c2;
        h ^= k;
        h = hf_rotl32(h, 13);
        h = h * 5 + 0xe6546b64u;
    }
    const uint8_t *tail = p + 4 * nblocks;
    uint32_t k = 0;
    switch (len & 3) {
    case 3:
        k ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2:
        k ^= (uint32_t)tail[1] << 8; /* fall through */
    case 1:
        k ^= tail[0];
        k *= c1;
        k = hf_rotl32(k, 15);
        k *= c2;
        h ^= k;
    }
    return hf_fmix32(h ^ (uint32_t)len);
}

/* MurmurHash3 x64_128: both 64-bit halves (the registry keeps h1). */
static inline uint64_t hf_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

static inline void hf_murmur3_128(const uint8_t *p, size_t len, uint32_t seed, uint64_t out[2])
{
    const uint64_t c1 = 0x87c37b91114253d5ull, c2 = 0x4cf5ad432745937full;
    uint64_t h1 = seed, h2 = seed;
    size_t nblocks = len / 16;
    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k1 = hf_rd64(p + 16 * i), k2 = hf_rd64(p + 16 * i + 8);
        k1 *= c1;
        k1 = hf_rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
        h1 = hf_rotl64(h1, 27);
        h1 += h2;
        h1 = h1 * 5 + 0x52dce729;
        k2 *= c2;
        k2 = hf_rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
        h2 = hf_rotl64(h2, 31);
        h2 += h1;
        h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *tail = p + 16 * nblocks;
    size_t rem = len & 15;
    uint64_t k1 = 0, k2 = 0;
    for (size_t i = rem; i > 8; i--)
        k2 ^= (uint64_t)tail[i - 1] << (8 * (i - 9));
    if (rem > 8) {
        k2 *= c2;
        k2 = hf_rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
    }
    for (size_t i = rem < 8 ? rem : 8; i > 0; i--)
        k1 ^= (uint64_t)tail[i - 1] << (8 * (i - 1));
    if (rem > 0) {
        k1 *= c1;
        k1 = hf_rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
    }
    h1 ^= len;
    h2 ^= len;
    h1 += h2;
    h2 += h1;
    h1 = hf_fmix64(h1);
    h2 = hf_fmix64(h2);
    h1 += h2;
    h2 += h1;
    out[0] = h1;
    out[1] = h2;
}

/* Paul Hsieh's SuperFastHash. The original starts from the length; a nonzero
 * SEED is added to it (seed 0 is the original function, as seed 002 used).
 * Its tail reads the last byte as a signed char, as the original does. */
static inline uint32_t hf_rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

static inline uint32_t hf_superfast(const uint8_t *p, size_t len, uint32_t seed)
{
    if (len == 0)
        return 0;
    uint32_t h = (uint32_t)len + seed, tmp;
    size_t rem = len & 3;
    for (size_t n = len >> 2; n > 0; n--, p += 4) {
        h += hf_rd16(p);
        tmp = (hf_rd16(p + 2) << 11) ^ h;
        h = (h << 16) ^ tmp;
        h += h >> 11;
    }
    switch (rem) {
    case 3:
        h += hf_rd16(p);
        h ^= h << 16;
        h ^= (uint32_t)(int32_t)(int8_t)p[2] << 18;
        h += h >> 11;
        break;
    case 2:
        h += hf_rd16(p);
        h ^= h << 11;
        h += h >> 17;
        break;
    case 1:
        h += (uint32_t)(int32_t)(int8_t)p[0];
        h ^= h << 10;
        h += h >> 1;
    }
    h ^= h << 3;
    h += h >> 5;
    h ^= h << 4;
    h += h >> 17;
    h ^= h << 25;
    h += h >> 6;
    return h;
}

/* FNV-1a (Fowler, Noll, Vo): XOR the byte, then multiply. A nonzero SEED is
 * XORed into the offset basis (seed 0: the published function). */
static inline uint32_t hf_fnv1a_32(const uint8_t *p, size_t len, uint32_t seed)
{
    uint32_t h = 0x811c9dc5u ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x01000193u;
    }
    return h;
}

static inline uint64_t hf_fnv1a_64(const uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* wyhash (Wang Yi), the "final 4" version with its default secret: a 64x64
 * -> 128-bit multiply folds each 16 bytes; up to 16 bytes need one fold. */
static const uint64_t hf_wyp[4] = { 0x2d358dccaa6c78a5ull, 0x8bb84b93962eacc9ull,
                                    0x4b33a62ed433d4a3ull, 0x4d5a2da51de1aa47ull };

static inline void hf_wymum(uint64_t *a, uint64_t *b)
{
    __uint128_t r = (__uint128_t)*a * *b;
    *a = (uint64_t)r;
    *b = (uint64_t)(r >> 64);
}

static inline uint64_t hf_wymix(uint64_t a, uint64_t b)
{
    hf_wymum(&a, &b);
    return a ^ b;
}

static inline uint64_t hf_wyhash(const uint8_t *p, size_t len, uint64_t seed)
{
    const uint64_t *s = hf_wyp;
    uint64_t a, b;
    seed ^= hf_wymix(seed ^ s[0], s[1]);
    if (len <= 16) {
        if (len >= 4) {
            size_t q = (len >> 3) << 2;
            a = ((uint64_t)hf_rd32(p) << 32) | hf_rd32(p + q);
            b = ((uint64_t)hf_rd32(p + len - 4) << 32) | hf_rd32(p + len - 4 - q);
        } else if (len > 0) {
            a = ((uint64_t)p[0] << 16) | ((uint64_t)p[len >> 1] << 8) | p[len - 1];
            b = 0;
        } else {
            a = b = 0;
        }
    } else {
        size_t i = len;
        if (i >= 48) {
            uint64_t see1 = seed, see2 = seed;
            do {
                seed = hf_wymix(hf_rd64(p) ^ s[1], hf_rd64(p + 8) ^ seed);
                see1 = hf_wymix(hf_rd64(p + 16) ^ s[2], hf_rd64(p + 24) ^ see1);
                see2 = hf_wymix(hf_rd64(p + 32) ^ s[3], hf_rd64(p + 40) ^ see2);
                p += 48;
                i -= 48;
            } while (i >= 48);
            seed ^= see1 ^ see2;
        }
        while (i > 16) {
            seed = hf_wymix(hf_rd64(p) ^ s[1], hf_rd64(p + 8) ^ seed);
            i -= 16;
            p += 16;
        }
        a = hf_rd64(p + i - 16);
        b = hf_rd64(p + i - 8);
    }
    a ^= s[1];
    b ^= seed;
    hf_wymum(&a, &b);
    return hf_wymix(a ^ s[0] ^ len, b ^ s[1]);
}

/* XXH3-64 (Yann Collet's xxHash 0.8), seeded, with its default 192-byte
 * secret. Short inputs take one of five closed forms; longer than 240 bytes,
 * eight accumulators eat 64-byte stripes, scrambled every 16 stripes. */
static const uint8_t hf_xxh3_secret[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};
#define HF_P32_1 0x9e3779b1ull
#define HF_P32_2 0x85ebca77ull
#define HF_P32_3 0xc2b2ae3dull
#define HF_P64_1 0x9e3779b185ebca87ull
#define HF_P64_2 0xc2b2ae3d27d4eb4full
#define HF_P64_3 0x165667b19e3779f9ull
#define HF_P64_4 0x85ebca77c2b2ae63ull
#define HF_P64_5 0x27d4eb2f165667c5ull

static inline uint64_t hf_fold64(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t hf_xxh64_avalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= HF_P64_2;
    h ^= h >> 29;
    h *= HF_P64_3;
    return h ^ (h >> 32);
}

static inline uint64_t hf_xxh3_avalanche(uint64_t h)
{
    h ^= h >> 37;
    h *= 0x165667919e3779f9ull;
    return h ^ (h >> 32);
}

static inline uint64_t hf_xxh3_mix16(const uint8_t *p, const uint8_t *s, uint64_t seed)
{
    return hf_fold64(hf_rd64(p) ^ (hf_rd64(s) + seed), hf_rd64(p + 8) ^ (hf_rd64(s + 8) - seed));
}

/* One 64-byte stripe into the accumulators, with the secret at S. */
static inline void hf_xxh3_stripe(uint64_t acc[8], const uint8_t *p, const uint8_t *s)
{
    for (int i = 0; i < 8; i++) {
        uint64_t v = hf_rd64(p + 8 * i), k = v ^ hf_rd64(s + 8 * i);
        acc[i ^ 1] += v;
        acc[i] += (k & 0xffffffffull) * (k >> 32);
    }
}

static inline uint64_t hf_xxh3_long(const uint8_t *p, size_t len, uint64_t seed)
{
    uint8_t own[192];
    const uint8_t *s = hf_xxh3_secret;
    if (seed) { /* the secret shifted by the seed, 16 bytes at a time */
        for (int i = 0; i < 12; i++) {
            uint64_t lo = hf_rd64(hf_xxh3_secret + 16 * i) + seed;
            uint64_t hi = hf_rd64(hf_xxh3_secret + 16 * i + 8) - seed;
            for (int b = 0; b < 8; b++) {
                own[16 * i + b] = (uint8_t)(lo >> (8 * b));
                own[16 * i + 8 + b] = (uint8_t)(hi >> (8 * b));
            }
        }
        s = own;
    }
    uint64_t acc[8] = { HF_P32_3, HF_P64_1, HF_P64_2, HF_P64_3,
                        HF_P64_4, HF_P32_2, HF_P64_5, HF_P32_1 };
    const size_t stripes = (192 - 64) / 8, block = 64 * stripes;
    size_t nblocks = (len - 1) / block;
    for (size_t b = 0; b < nblocks; b++) {
        for (size_t i = 0; i < stripes; i++)
            hf_xxh3_stripe(acc, p + b * block + 64 * i, s + 8 * i);
        for (int i = 0; i < 8; i++) { /* scramble */
            uint64_t a = acc[i];
            a ^= a >> 47;
            a ^= hf_rd64(s + 192 - 64 + 8 * i);
            acc[i] = a * HF_P32_1;
        }
    }
    size_t last = ((len - 1) - block * nblocks) / 64;
    for (size_t i = 0; i < last; i++)
        hf_xxh3_stripe(acc, p + nblocks * block + 64 * i, s + 8 * i);
    hf_xxh3_stripe(acc, p + len - 64, s + 192 - 64 - 7);
    uint64_t r = (uint64_t)len * HF_P64_1;
    for (int i = 0; i < 4; i++)
        r += hf_fold64(acc[2 * i] ^ hf_rd64(s + 11 + 16 * i),
                       acc[2 * i + 1] ^ hf_rd64(s + 11 + 16 * i + 8));
    return hf_xxh3_avalanche(r);
}

static inline uint64_t hf_xxh3(const uint8_t *p, size_t len, uint64_t seed)
{
    const uint8_t *s = hf_xxh3_secret;
    if (len == 0)
        return hf_xxh64_avalanche(seed ^ hf_rd64(s + 56) ^ hf_rd64(s + 64));
    if (len <= 3) {
        uint32_t c = ((uint32_t)p[0] << 16) | ((uint32_t)p[len >> 1] << 24) | p[len - 1] |
                     ((uint32_t)len << 8);
        uint64_t flip = (uint64_t)(hf_rd32(s) ^ hf_rd32(s + 4)) + seed;
        return hf_xxh64_avalanche((uint64_t)c ^ flip);
    }
    if (len <= 8) {
        seed ^= (uint64_t)__builtin_bswap32((uint32_t)seed) << 32;
        uint64_t in = hf_rd32(p + len - 4) + ((uint64_t)hf_rd32(p) << 32);
        uint64_t h = in ^ ((hf_rd64(s + 8) ^ hf_rd64(s + 16)) - seed);
        h ^= hf_rotl64(h, 49) ^ hf_rotl64(h, 24);
        h *= 0x9fb21c651e98df25ull;
        h ^= (h >> 35) + len;
        h *= 0x9fb21c651e98df25ull;
        return h ^ (h >> 28);
    }
    if (len <= 16) {
        uint64_t lo = hf_rd64(p) ^ ((hf_rd64(s + 24) ^ hf_rd64(s + 32)) + seed);
        uint64_t hi = hf_rd64(p + len - 8) ^ ((hf_rd64(s + 40) ^ hf_rd64(s + 48)) - seed);
        return hf_xxh3_avalanche(len + __builtin_bswap64(lo) + hi + hf_fold64(lo, hi));
    }
    uint64_t acc = (uint64_t)len * HF_P64_1;
    if (len <= 128) {
        if (len > 32) {
            if (len > 64) {
                if (len > 96) {
                    acc += hf_xxh3_mix16(p + 48, s + 96, seed);
                    acc += hf_xxh3_mix16(p + len - 64, s + 112, seed);
                }
                acc += hf_xxh3_mix16(p + 32, s + 64, seed);
                acc += hf_xxh3_mix16(p + len - 48, s + 80, seed);
            }
            acc += hf_xxh3_mix16(p + 16, s + 32, seed);
            acc += hf_xxh3_mix16(p + len - 32, s + 48, seed);
        }
        acc += hf_xxh3_mix16(p, s, seed);
        acc += hf_xxh3_mix16(p + len - 16, s + 16, seed);
        return hf_xxh3_avalanche(acc);
    }
    if (len <= 240) {
        size_t rounds = len / 16;
        for (size_t i = 0; i < 8; i++)
            acc += hf_xxh3_mix16(p + 16 * i, s + 16 * i, seed);
        acc = hf_xxh3_avalanche(acc);
        for (size_t i = 8; i < rounds; i++)
            acc += hf_xxh3_mix16(p + 16 * i, s + 16 * (i - 8) + 3, seed);
        acc += hf_xxh3_mix16(p + len - 16, s + 136 - 17, seed);
        return hf_xxh3_avalanche(acc);
    }
    return hf_xxh3_long(p, len, seed);
}

/* CRC32C, reflected polynomial 0x82f63b78. The table is filled at load time
 * (hash_crc32c.c). */
extern uint32_t hf_crc32c_table[256];

static inline uint32_t hf_crc32c_sw(const uint8_t *p, size_t len, uint32_t seed)
{
    uint32_t c = ~seed;
    for (size_t i = 0; i < len; i++)
        c = hf_crc32c_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return ~c;
}

#if HASH_HAVE_SSE42
__attribute__((target("sse4.2"))) static inline uint32_t hf_crc32c_hw(const uint8_t *p, size_t len,
                                                                      uint32_t seed)
{
    uint64_t c = ~seed;
    for (; len >= 8; len -= 8, p += 8)
        c = _mm_crc32_u64(c, hf_rd64(p));
    uint32_t c32 = (uint32_t)c;
    if (len >= 4) {
        c32 = _mm_crc32_u32(c32, hf_rd32(p));
        len -= 4;
        p += 4;
    }
    for (; len > 0; len--, p++)
        c32 = _mm_crc32_u8(c32, *p);
    return ~c32;
}
#endif

/* Toeplitz: for each input byte position and byte value, the XOR of the
 * 32-bit key windows its set bits select (hash_toeplitz.c fills them at load time
 * for positions 0..39; the key repeats after 40 bytes, and so do the
 * tables). */
#define HF_TOEPLITZ_KEY 40
extern uint32_t hf_toeplitz_sym_tab[HF_TOEPLITZ_KEY][256];
extern uint32_t hf_toeplitz_ms_tab[HF_TOEPLITZ_KEY][256];

static inline uint32_t hf_toeplitz(uint32_t (*tab)[256], const uint8_t *p, size_t len)
{
    uint32_t h = 0;
    for (size_t i = 0, k = 0; i < len; i++) {
        h ^= tab[k][p[i]];
        if (++k == HF_TOEPLITZ_KEY)
            k = 0;
    }
    return h;
}

#endif
