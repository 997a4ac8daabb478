/* packet.h - flow instances: header template at activation, frames per packet.
 *
 * Thread safety: functions touch only the flow line and instance they are
 * given; a flow line is only read here (packet_prepare excepted, once, before
 * the loop), so loops on different threads may share nothing but read-only data. */
#ifndef FE_PACKET_H
#define FE_PACKET_H

#include <stdint.h>

#include "rng.h"
#include "session.h"

#define FE_HDR_MAX 76 /* Ethernet + IPv6 + TCP = 74, rounded (the size of fe_flow.tpl) */

/* 48 bytes: only what changes per packet or is drawn per instance. The
 * header is rebuilt per packet from the flow line's template (fe_flow.tpl)
 * and these fields: addresses, ports and the TCP ACK are re-derived from the
 * instance's stream start `rng` (draw j is rng_mix(rng + j * RNG_GOLDEN)). */
struct fe_inst {
    uint64_t due; /* exact planner: due time of the next packet;
                   * stochastic planner (tree): due time of the last one sent */
    uint64_t serial;
    uint64_t sent;  /* packets sent, i.e. index of the next packet */
    uint64_t bytes; /* frame bytes sent */
    uint64_t rng;   /* SplitMix64 stream start rng_seed(seed, serial), constant */
    uint32_t flow;  /* index of the flow line; the free list's link when free */
    uint32_t seq;   /* TCP: sequence number of the next packet */
};
_Static_assert(sizeof(struct fe_inst) == 48, "fe_inst should stay 48 bytes");

/* Builds the line's template and draw indices (once per flow line). */
void packet_prepare(struct fe_flow *f);

/* Starts an instance: stream, TCP ISN. */
void packet_activate(struct fe_inst *in, const struct fe_flow *f, uint32_t flow_index, uint64_t rep,
                     uint64_t serial, uint64_t seed);

/* Payload length of the next packet (draw ndraw + sent + 1 of the stream when random). */
static inline uint32_t packet_payload_len(const struct fe_flow *f, const struct fe_inst *in)
{
    if (f->size_lo == f->size_hi)
        return f->size_lo;
    uint64_t r = rng_mix(in->rng + (f->ndraw + in->sent + 1) * RNG_GOLDEN);
    return (uint32_t)(f->size_lo + r % ((uint64_t)f->size_hi - f->size_lo + 1));
}

/* Writes packet number in->sent (f->hdr_len + plen bytes) to frame and
 * advances the TCP sequence number; the caller advances in->sent. */
void packet_write(const struct fe_flow *f, struct fe_inst *in, uint8_t *frame, uint32_t plen);

/* The instance's addresses and ports as sent. */
void packet_endpoints(const struct fe_flow *f, const struct fe_inst *in, char *src, char *dst,
                      unsigned *sport, unsigned *dport);

#endif
