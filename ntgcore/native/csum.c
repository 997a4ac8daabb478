/* csum.c - Internet checksum. */
#include "csum.h"

#include <string.h>

uint64_t csum_partial(const void *buf, size_t len, uint64_t sum)
{
    const uint8_t *p = buf;
    uint64_t acc = 0;

    /* Host-order 32-bit loads: the one's complement sum is byte-order
     * independent up to a final byte swap (RFC 1071 section 2(B)), and each
     * load's 32 bits never overflow a 64-bit accumulator for any len we use. */
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        acc += (w & 0xffffffffu) + (w >> 32);
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        acc += w;
        p += 4;
        len -= 4;
    }
    if (len >= 2) {
        uint16_t w;
        memcpy(&w, p, 2);
        acc += w;
        p += 2;
        len -= 2;
    }
    if (len) {
        /* The odd byte is the high half of a zero-padded word in network
         * order; in host order that is where a 1-byte load puts it. */
        uint16_t w = 0;
        memcpy(&w, p, 1);
        acc += w;
    }

    uint16_t folded = csum_fold(acc);
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe == 1) /* little endian: back to network terms */
        folded = (uint16_t)((folded >> 8) | (folded << 8));
    return sum + folded;
}

uint64_t csum_pseudo4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto)
{
    uint64_t s = csum_partial(src, 4, 0);
    s = csum_partial(dst, 4, s);
    return s + proto;
}

uint64_t csum_pseudo6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header)
{
    uint64_t s = csum_partial(src, 16, 0);
    s = csum_partial(dst, 16, s);
    return s + next_header;
}
