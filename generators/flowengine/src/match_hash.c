/* match_hash.c - see match_hash.h. */
#include "match_hash.h"

#include <string.h>

#include "rng.h"

static uint64_t mix64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = seed ^ (len * RNG_GOLDEN);
    for (size_t i = 0; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = rng_mix(h ^ w);
    }
    return h;
}

const struct match_hash match_hashes[] = {
    { "mix64", mix64 },
    { NULL, NULL },
};

match_hash_fn match_hash_find(const char *name)
{
    for (const struct match_hash *h = match_hashes; h->name; h++)
        if (!strcmp(h->name, name))
            return h->fn;
    return NULL;
}
