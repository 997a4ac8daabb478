/* hash_crc32c.c - CRC32C (Castagnoli): the portable table-driven path, the SSE4.2
 * one, and the run-time choice between them (hash.h). */
#include "hash.h"
#include "hash_fn.h"

uint32_t hf_crc32c_table[256];

__attribute__((constructor)) static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        hf_crc32c_table[i] = c;
    }
}

uint64_t hash_crc32c_sw(const void *key, size_t len, uint64_t seed)
{
    return hf_crc32c_sw(key, len, (uint32_t)seed);
}

int hash_crc32c_hw_ok(void)
{
#if HASH_HAVE_SSE42
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    return 0;
#endif
}

#if HASH_HAVE_SSE42
__attribute__((target("sse4.2"))) uint64_t hash_crc32c_hw(const void *key, size_t len,
                                                          uint64_t seed)
{
    return hf_crc32c_hw(key, len, (uint32_t)seed);
}
#else
/* Never chosen (hash_crc32c_hw_ok() is 0); the portable result keeps the
 * symbol defined everywhere. */
uint64_t hash_crc32c_hw(const void *key, size_t len, uint64_t seed)
{
    return hf_crc32c_sw(key, len, (uint32_t)seed);
}
#endif

uint64_t hash_crc32c(const void *key, size_t len, uint64_t seed)
{
    return hash_crc32c_hw_ok() ? hash_crc32c_hw(key, len, seed) : hash_crc32c_sw(key, len, seed);
}
