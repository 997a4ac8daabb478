/* test_match_line.c - driver for match_line (src/match_table.h): the line of a
 * hash among N lines.
 *
 * Built and run by tests/test_match_line.py, which checks every line of the
 * output against Python's own remainder:
 *   N HASH LINE   (decimal; LINE = match_line of HASH in a table of N lines)
 * for sizes at the edges of the reduction's paths (1, powers of two, 2^32 - 1,
 * 2^32, 2^32 + 1, odd and prime sizes) and hashes at the edges and drawn by a
 * fixed xorshift. */
#include <inttypes.h>
#include <stdio.h>

#include "match_table.h"

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int main(void)
{
    const uint64_t sizes[] = {
        1,
        2,
        3,
        5,
        7,
        10,
        1000,
        1024,
        16411,
        65535,
        65536,
        65537,
        999983,
        1000003,
        4194319,
        8388617,
        2147483647,
        2147483648u,
        2147483649u,
        3000000019u,
        4294967291u,
        4294967295u,
        4294967296ull,
        4294967297ull,
        10000000019ull,
        1ull << 40,
        0xFFFFFFFFFFFFFFFFull,
    };
    const uint64_t edges[] = {
        0, 1, 0xFFFFFFFFu, 0x100000000ull, 0xFFFFFFFFFFFFFFFFull, 0x80000000u, 0x7FFFFFFFu
    };
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        struct match_mod m;
        match_mod_init(&m, sizes[i]);
        for (size_t k = 0; k < 60; k++) {
            uint64_t h = k < sizeof edges / sizeof *edges ? edges[k] : next(&s);
            if (k % 3 == 0)
                h = (h & 0xFFFFFFFFu) | ((h % sizes[i]) << 32); /* upper half unrelated */
            printf("%" PRIu64 " %" PRIu64 " %" PRIu64 "\n", sizes[i], h, match_line(&m, h));
        }
    }
    return 0;
}
