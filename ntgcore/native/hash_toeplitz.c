/* hash_toeplitz.c - the Toeplitz (RSS) hash: per-byte tables for the two keys,
 * filled at load time, and the bit-by-bit reference (hash.h). */
#include "hash.h"
#include "hash_fn.h"

uint32_t hf_toeplitz_sym_tab[HF_TOEPLITZ_KEY][256];
uint32_t hf_toeplitz_ms_tab[HF_TOEPLITZ_KEY][256];

/* 0x6d5a repeated: a 16-bit period, so the hash is the same for both
 * directions of a flow (Woo and Park's symmetric RSS key). */
static const uint8_t key_sym[HF_TOEPLITZ_KEY] = {
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
};
/* The key of Microsoft's RSS verification suite (RSS hashing functions,
 * "Verifying the RSS hash calculation"). */
static const uint8_t key_ms[HF_TOEPLITZ_KEY] = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
};

/* Bits B..B+31 of the key (bit 0: the top bit of key[0]), the key repeated. */
static uint32_t window(const uint8_t key[HF_TOEPLITZ_KEY], size_t b)
{
    uint32_t w = 0;
    for (size_t j = 0; j < 32; j++) {
        size_t bit = b + j;
        uint32_t v = (key[(bit / 8) % HF_TOEPLITZ_KEY] >> (7 - bit % 8)) & 1;
        w = (w << 1) | v;
    }
    return w;
}

static void fill(const uint8_t key[HF_TOEPLITZ_KEY], uint32_t (*tab)[256])
{
    for (size_t k = 0; k < HF_TOEPLITZ_KEY; k++) {
        uint32_t w[8];
        for (size_t j = 0; j < 8; j++)
            w[j] = window(key, 8 * k + j);
        for (unsigned v = 0; v < 256; v++) {
            uint32_t h = 0;
            for (size_t j = 0; j < 8; j++)
                if (v & (0x80u >> j))
                    h ^= w[j];
            tab[k][v] = h;
        }
    }
}

__attribute__((constructor)) static void toeplitz_init(void)
{
    fill(key_sym, hf_toeplitz_sym_tab);
    fill(key_ms, hf_toeplitz_ms_tab);
}

uint32_t hash_toeplitz_ref(const uint8_t key[40], const void *data, size_t len)
{
    const uint8_t *p = data;
    uint32_t h = 0;
    for (size_t bit = 0; bit < 8 * len; bit++)
        if ((p[bit / 8] >> (7 - bit % 8)) & 1)
            h ^= window(key, bit);
    return h;
}

uint64_t hash_toeplitz_sym(const void *key, size_t len, uint64_t seed)
{
    (void)seed;
    return hf_toeplitz(hf_toeplitz_sym_tab, key, len);
}

uint64_t hash_toeplitz_ms(const void *key, size_t len, uint64_t seed)
{
    (void)seed;
    return hf_toeplitz(hf_toeplitz_ms_tab, key, len);
}
