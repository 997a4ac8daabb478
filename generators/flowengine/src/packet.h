/* packet.h - flow instances: header template at activation, frames per packet. */
#ifndef FE_PACKET_H
#define FE_PACKET_H

#include <stdint.h>

#include "rng.h"
#include "session.h"

#define FE_HDR_MAX 76 /* Ethernet + IPv6 + TCP = 74, rounded to keep 8-byte alignment */

/* 128 bytes: two cache lines; at 10^6 concurrent flows that is 128 MB. */
struct fe_inst {
    uint64_t rng;       /* SplitMix64 state */
    uint64_t sent;      /* packets sent, i.e. index of the next packet */
    uint64_t bytes;     /* frame bytes sent */
    uint64_t serial;
    uint32_t flow;      /* index of the flow line; the free list's link when free */
    uint32_t seq;       /* TCP: sequence number of the next packet */
    uint32_t ack;       /* TCP: acknowledgment number (not on the SYN) */
    uint32_t sum_ip;    /* IPv4 header sum without total length and ID */
    uint32_t sum_l4;    /* L4 sum without length, payload and per-packet fields */
    uint8_t hdr[FE_HDR_MAX];
};
_Static_assert(sizeof(struct fe_inst) == 128, "fe_inst should stay two cache lines");

/* Draws the instance's addresses, ports and TCP numbers and builds its template. */
void packet_activate(struct fe_inst *in, const struct fe_flow *f, uint32_t flow_index,
                     uint64_t rep, uint64_t serial, uint64_t seed);

/* Payload length of the next packet (draws from the instance's stream when random). */
static inline uint32_t packet_payload_len(const struct fe_flow *f, struct fe_inst *in)
{
    if (f->size_lo == f->size_hi)
        return f->size_lo;
    return (uint32_t)rng_range(&in->rng, f->size_lo, f->size_hi);
}

/* Writes packet number in->sent (f->hdr_len + plen bytes) to frame and
 * advances the TCP sequence number; the caller advances in->sent. */
void packet_write(const struct fe_flow *f, struct fe_inst *in, uint8_t *frame, uint32_t plen);

/* The instance's addresses and ports as sent (from its template). */
void packet_endpoints(const struct fe_flow *f, const struct fe_inst *in, char *src, char *dst,
                      unsigned *sport, unsigned *dport);

#endif
