/* packet.c - frame templates and the per-packet writer. */
#define _POSIX_C_SOURCE 200809L
#include "packet.h"

#include <arpa/inet.h>
#include <string.h>

#include "bytes.h"
#include "csum.h"

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_PSH 0x08
#define TCP_ACK 0x10

/* The address of one instance: ADDRESS itself, or its network part with host
 * bits drawn or incremented. IPv6 works on two 64-bit halves with a carry. */
static inline void make_addr(uint8_t *out, const uint8_t *base, int af, unsigned prefix, int mode,
                             uint64_t rep, uint64_t *rng)
{
    if (af == 4) {
        uint32_t a =
            (uint32_t)base[0] << 24 | (uint32_t)base[1] << 16 | (uint32_t)base[2] << 8 | base[3];
        uint32_t m = (uint32_t)(0xffffffffull >> prefix);
        if (mode == FE_RANDOM)
            a = (a & ~m) | ((uint32_t)rng_next(rng) & m);
        else if (mode == FE_INCREMENT)
            a = (a & ~m) | ((a + (uint32_t)rep) & m); /* 2^32 mod 2^host = 0 */
        put32(out, a);
        return;
    }
    uint64_t hi = get64(base), lo = get64(base + 8);
    uint64_t mhi = prefix >= 64 ? 0 : ~0ull >> prefix;
    uint64_t mlo = prefix >= 64 ? (prefix == 128 ? 0 : ~0ull >> (prefix - 64)) : ~0ull;
    if (mode == FE_RANDOM) {
        uint64_t rh = rng_next(rng), rl = rng_next(rng);
        hi = (hi & ~mhi) | (rh & mhi);
        lo = (lo & ~mlo) | (rl & mlo);
    } else if (mode == FE_INCREMENT) {
        uint64_t hl = lo & mlo, nl = hl + rep;
        uint64_t hh = (hi & mhi) + (nl < hl);
        lo = (lo & ~mlo) | (nl & mlo);
        hi = (hi & ~mhi) | (hh & mhi);
    }
    put64(out, hi);
    put64(out + 8, lo);
}

/* Draw j (1-based) of the stream that starts at rng0, as a state for
 * rng_next: the next rng_next returns draw j. */
static inline uint64_t draw_state(uint64_t rng0, unsigned j)
{
    return rng0 + (uint64_t)(j - 1) * RNG_GOLDEN;
}

void packet_prepare(struct fe_flow *f)
{
    uint8_t *h = f->tpl, *l4 = h + f->l4_off;
    int icmp = f->proto == 1 || f->proto == 58;
    unsigned j = 0, aw = f->af == 4 ? 1 : 2;

    /* Draw order is part of the contract (README, "Determinism"). */
    f->d_src = f->d_dst = f->d_sport = f->d_dport = f->d_isn = f->d_ack = 0;
    if (f->src_mode == FE_RANDOM) {
        f->d_src = (uint8_t)(j + 1);
        j += aw;
    }
    if (f->dst_mode == FE_RANDOM) {
        f->d_dst = (uint8_t)(j + 1);
        j += aw;
    }
    if (!icmp && f->sport_mode == FE_RANDOM)
        f->d_sport = (uint8_t)++j;
    if (!icmp && f->dport_mode == FE_RANDOM)
        f->d_dport = (uint8_t)++j;
    if (f->proto == 6) {
        f->d_isn = (uint8_t)++j;
        f->d_ack = (uint8_t)++j;
    }
    f->ndraw = (uint8_t)j;

    memset(h, 0, sizeof f->tpl);
    memcpy(h, f->dmac, 6);
    memcpy(h + 6, f->smac, 6);
    f->tpl_sum_ip = 0;
    if (f->af == 4) {
        put16(h + 12, 0x0800);
        h[14] = 0x45;
        h[20] = 0x40; /* DF */
        h[22] = 64;
        h[23] = f->proto;
        f->tpl_sum_ip = csum_fold(0x4500 + 0x4000 + (64u << 8 | f->proto));
    } else {
        put16(h + 12, 0x86dd);
        h[14] = 0x60;
        h[20] = f->proto;
        h[21] = 64;
    }
    uint64_t s = 0;
    if (icmp) {
        l4[0] = f->proto == 1 ? 8 : 128; /* echo request */
        s += (uint32_t)l4[0] << 8;
    } else if (f->proto == 6) {
        l4[12] = 0x50; /* data offset 5 */
        put16(l4 + 14, 0xffff);
        s += 0x5000 + 0xffff;
    }
    f->tpl_sum_l4 = csum_fold(s);
}

void packet_activate(struct fe_inst *in, const struct fe_flow *f, uint32_t flow_index, uint64_t rep,
                     uint64_t serial, uint64_t seed)
{
    (void)rep;
    in->rng = rng_seed(seed, serial);
    in->sent = 0;
    in->bytes = 0;
    in->serial = serial;
    in->flow = flow_index;
    in->seq = 0;
    if (f->d_isn) {
        uint64_t r = draw_state(in->rng, f->d_isn);
        in->seq = (uint32_t)rng_next(&r);
    }
}

static inline uint64_t sum32(uint32_t v)
{
    return (v >> 16) + (v & 0xffff);
}

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

static ALWAYS_INLINE uint16_t inst_port(uint16_t lo, uint16_t hi, int mode, uint64_t rep,
                                        uint64_t rng0, unsigned dj)
{
    if (mode == FE_RANDOM)
        return (uint16_t)(lo + rng_mix(rng0 + (uint64_t)dj * RNG_GOLDEN) % ((uint64_t)hi - lo + 1));
    if (mode == FE_INCREMENT)
        return (uint16_t)(lo + rep % ((uint64_t)hi - lo + 1));
    return lo;
}

static ALWAYS_INLINE uint32_t inst_addr4(const uint8_t *b, unsigned prefix, int mode, uint64_t rep,
                                         uint64_t rng0, unsigned dj)
{
    uint32_t a = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    uint32_t m = (uint32_t)(0xffffffffull >> prefix);
    if (mode == FE_RANDOM)
        return (a & ~m) | ((uint32_t)rng_mix(rng0 + (uint64_t)dj * RNG_GOLDEN) & m);
    if (mode == FE_INCREMENT)
        return (a & ~m) | ((a + (uint32_t)rep) & m); /* 2^32 mod 2^host = 0 */
    return a;
}

/* The instance's addresses (network order, 4 or 16 bytes each) and ports. */
static ALWAYS_INLINE void inst_fields(const struct fe_flow *f, const struct fe_inst *in,
                                      uint8_t *src, uint8_t *dst, uint16_t *sport, uint16_t *dport)
{
    uint64_t rep = in->serial - f->offset, r = 0;
    if (f->af == 4) {
        put32(src, inst_addr4(f->src, f->src_prefix, f->src_mode, rep, in->rng, f->d_src));
        put32(dst, inst_addr4(f->dst, f->dst_prefix, f->dst_mode, rep, in->rng, f->d_dst));
    } else {
        if (f->d_src)
            r = draw_state(in->rng, f->d_src);
        make_addr(src, f->src, f->af, f->src_prefix, f->src_mode, rep, &r);
        if (f->d_dst)
            r = draw_state(in->rng, f->d_dst);
        make_addr(dst, f->dst, f->af, f->dst_prefix, f->dst_mode, rep, &r);
    }
    *sport = *dport = 0;
    if (f->proto != 1 && f->proto != 58) {
        *sport = inst_port(f->sport_lo, f->sport_hi, f->sport_mode, rep, in->rng, f->d_sport);
        *dport = inst_port(f->dport_lo, f->dport_hi, f->dport_mode, rep, in->rng, f->d_dport);
    }
}

/* Copies the line's template (n bytes), writes the instance's addresses and
 * ports / ICMP identifier; returns the IPv4 header sum without total length
 * and ID in *sip and the L4 sum without length, payload and per-packet fields. */
static ALWAYS_INLINE void build_header(const struct fe_flow *f, const struct fe_inst *in,
                                       uint8_t *frame, size_t n, uint64_t *sip, uint64_t *sl4)
{
    uint8_t src[16], dst[16];
    uint16_t sport, dport;
    uint8_t *l4 = frame + f->l4_off;
    uint64_t s;

    inst_fields(f, in, src, dst, &sport, &dport);
    memcpy(frame, f->tpl, n);
    if (f->af == 4) {
        uint32_t a =
            (uint32_t)src[0] << 24 | (uint32_t)src[1] << 16 | (uint32_t)src[2] << 8 | src[3];
        uint32_t b =
            (uint32_t)dst[0] << 24 | (uint32_t)dst[1] << 16 | (uint32_t)dst[2] << 8 | dst[3];
        memcpy(frame + 26, src, 4);
        memcpy(frame + 30, dst, 4);
        s = sum32(a) + sum32(b);
        *sip = f->tpl_sum_ip + s;
        s = f->proto == 1 ? 0 : s + f->proto;
    } else {
        memcpy(frame + 22, src, 16);
        memcpy(frame + 38, dst, 16);
        s = csum_partial(src, 16, f->proto);
        s = csum_partial(dst, 16, s);
        *sip = 0;
    }
    s += f->tpl_sum_l4;
    if (f->proto == 1 || f->proto == 58) {
        uint16_t id = (uint16_t)in->serial;
        put16(l4 + 4, id);
        s += id;
    } else {
        put16(l4, sport);
        put16(l4 + 2, dport);
        s += (uint32_t)sport + dport;
    }
    *sl4 = s;
}

void packet_write(const struct fe_flow *f, struct fe_inst *in, uint8_t *frame, uint32_t plen)
{
    uint8_t *pay = frame + f->hdr_len;
    uint64_t psum = 0, sum_ip, sum_l4;
    uint16_t id = (uint16_t)in->sent;

    /* Payload: the custom prefix, then zeros; its checksum share is a lookup. */
    if (f->payload_len) {
        uint32_t n = plen < f->payload_len ? plen : f->payload_len;
        memcpy(pay, f->payload, n);
        memset(pay + n, 0, plen - n);
        psum = f->payload_sum[n];
    } else {
        memset(pay, 0, plen);
    }

    /* Constant-size copies per kind: a variable memcpy costs more than the rest. */
    switch (f->kind) {
    case FE_K4_UDP: {
        uint32_t ul = 8 + plen, tot = 20 + ul;
        uint8_t *l4 = frame + 34;
        build_header(f, in, frame, 42, &sum_ip, &sum_l4);
        put16(frame + 16, tot);
        put16(frame + 18, id);
        put16(frame + 24, csum_finish(sum_ip + tot + id));
        put16(l4 + 4, ul);
        uint16_t c = csum_finish(sum_l4 + 2 * ul + psum);
        put16(l4 + 6, c ? c : 0xffff);
        break;
    }
    case FE_K6_UDP: {
        uint32_t ul = 8 + plen;
        uint8_t *l4 = frame + 54;
        build_header(f, in, frame, 62, &sum_ip, &sum_l4);
        put16(frame + 18, ul);
        put16(l4 + 4, ul);
        uint16_t c = csum_finish(sum_l4 + 2 * ul + psum);
        put16(l4 + 6, c ? c : 0xffff);
        break;
    }
    case FE_K4_TCP:
    case FE_K6_TCP: {
        uint64_t i = in->sent, last = f->packets - 1;
        uint8_t flags = f->packets == 1 ? (TCP_SYN | TCP_FIN)
                        : i == 0        ? TCP_SYN
                        : i == last     ? (TCP_FIN | TCP_ACK)
                                        : (TCP_ACK | TCP_PSH);
        uint32_t seq = in->seq, ack = 0;
        uint32_t tl = 20 + plen;
        uint8_t *l4;
        if (flags & TCP_ACK) {
            uint64_t r = draw_state(in->rng, f->d_ack);
            ack = (uint32_t)rng_next(&r);
        }
        if (f->kind == FE_K4_TCP) {
            uint32_t tot = 20 + tl;
            l4 = frame + 34;
            build_header(f, in, frame, 54, &sum_ip, &sum_l4);
            put16(frame + 16, tot);
            put16(frame + 18, id);
            put16(frame + 24, csum_finish(sum_ip + tot + id));
        } else {
            l4 = frame + 54;
            build_header(f, in, frame, 74, &sum_ip, &sum_l4);
            put16(frame + 18, tl);
        }
        put32(l4 + 4, seq);
        put32(l4 + 8, ack);
        l4[13] = flags;
        put16(l4 + 16, csum_finish(sum_l4 + tl + sum32(seq) + sum32(ack) + flags + psum));
        in->seq = seq + plen + ((flags & TCP_SYN) ? 1 : 0) + ((flags & TCP_FIN) ? 1 : 0);
        break;
    }
    case FE_K4_ICMP: {
        uint32_t il = 8 + plen, tot = 20 + il;
        uint8_t *l4 = frame + 34;
        build_header(f, in, frame, 42, &sum_ip, &sum_l4);
        put16(frame + 16, tot);
        put16(frame + 18, id);
        put16(frame + 24, csum_finish(sum_ip + tot + id));
        put16(l4 + 6, id); /* sequence number = packet index */
        put16(l4 + 2, csum_finish(sum_l4 + id + psum));
        break;
    }
    case FE_K6_ICMP: {
        uint32_t il = 8 + plen;
        uint8_t *l4 = frame + 54;
        build_header(f, in, frame, 62, &sum_ip, &sum_l4);
        put16(frame + 18, il);
        put16(l4 + 6, id);
        put16(l4 + 2, csum_finish(sum_l4 + il + id + psum));
        break;
    }
    }
}

void packet_endpoints(const struct fe_flow *f, const struct fe_inst *in, char *src, char *dst,
                      unsigned *sport, unsigned *dport)
{
    uint8_t s[16], d[16];
    uint16_t sp, dp;
    inst_fields(f, in, s, d, &sp, &dp);
    inet_ntop(f->af == 4 ? AF_INET : AF_INET6, s, src, 46);
    inet_ntop(f->af == 4 ? AF_INET : AF_INET6, d, dst, 46);
    if (f->proto == 1 || f->proto == 58) {
        *sport = (uint16_t)in->serial; /* the ICMP identifier */
        *dport = 0;
    } else {
        *sport = sp;
        *dport = dp;
    }
}
