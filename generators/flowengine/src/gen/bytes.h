/* bytes.h - big-endian (network order) loads and stores of frame fields.
 *
 * The one copy the engine's frame writers share (packet.c, sess.c, stream.c,
 * offload.c); each compiles to a byte swap and a store at -O2.
 *
 * Thread safety: pure functions of their arguments. */
#ifndef FE_BYTES_H
#define FE_BYTES_H

#include <stdint.h>

static inline void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static inline void put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

#endif
