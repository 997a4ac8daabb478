/* csum.h - the Internet checksum (RFC 1071), the one routine used everywhere.
 *
 * Sums are kept unfolded in a uint64_t and are in "network word" terms: a
 * 16-bit field whose value is V contributes V, whatever the host byte order.
 * So a caller can add header fields as plain numbers (csum_add16/32) to a sum
 * returned by csum_partial and fold once at the end.
 *
 * (File and prefix are both "csum".) Pure functions: safe from any thread. */
#ifndef FE_CSUM_H
#define FE_CSUM_H

#include <stddef.h>
#include <stdint.h>

/* Add the bytes of buf to sum. A range that does not start the summed data
 * must start at an even offset of it (RFC 1071 word alignment). */
uint64_t csum_partial(const void *buf, size_t len, uint64_t sum);

/* Fold to 16 bits (end-around carry), not complemented. */
static inline uint16_t csum_fold(uint64_t sum)
{
    sum = (sum & 0xffffffffu) + (sum >> 32);
    sum = (sum & 0xffffffffu) + (sum >> 32);
    sum = (sum & 0xffffu) + (sum >> 16);
    sum = (sum & 0xffffu) + (sum >> 16);
    return (uint16_t)sum;
}

/* The value to store in a checksum field (host number; store with htons). */
static inline uint16_t csum_finish(uint64_t sum)
{
    return (uint16_t)~csum_fold(sum);
}

static inline uint64_t csum_add32(uint64_t sum, uint32_t v)
{
    return sum + (v >> 16) + (v & 0xffffu);
}

/* Pseudo-header sums without the upper-layer length, which varies per packet
 * and is added by the caller. Addresses are in network byte order. */
uint64_t csum_pseudo4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto);
uint64_t csum_pseudo6(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header);

#endif
