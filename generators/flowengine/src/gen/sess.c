/* sess.c - session lines: instances, their packet sequence and frames (sess.h). */
#define _POSIX_C_SOURCE 200809L
#include "sess.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "csum.h"
#include "sink.h"

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_PSH 0x08
#define TCP_ACK 0x10

/* Last due time the pcap can carry (as session.c). */
#define SESS_TIME_LIMIT 4294967296000000000ull
/* The arrival stream's constant (README, "Session lines"). */
#define SESS_ARRIVAL_C 0x3c6ef372fe94f82bull
/* The deck key's constant (P:ID; README, "Session lines"). */
#define SESS_DECK_C 0xa54ff53a5f1d36f1ull

/* Phases: what the current packet is. */
enum {
    PH_SYN,
    PH_SYNACK,
    PH_HSACK, /* the handshake's ACK */
    PH_DATA,  /* a data segment / datagram of the current message */
    PH_ACK,   /* TCP: a pure ACK answering a flight */
    PH_FIN1,  /* client FIN|ACK */
    PH_FIN2,  /* server FIN|ACK */
    PH_FIN3,  /* client ACK */
    PH_RST,   /* client RST|ACK */
    PH_EMPTY, /* UDP: the one empty request of an instance with nothing to send */
};

static inline uint32_t sum32(uint32_t v)
{
    return (v >> 16) + (v & 0xffff);
}

/* a + b and a * b saturating at UINT64_MAX. */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

static uint64_t val_max(const struct sess_val *v)
{
    return v->dist ? v->dist->hi : v->fixed;
}

static uint64_t val_min(const struct sess_val *v)
{
    return v->dist ? v->dist->lo : v->fixed;
}

/* Draw indices (README, "Session lines": the draw order is part of the contract). */
static void assign_draws(const struct fe_flow *f, struct sess_line *sl)
{
    uint32_t j = 1, aw = f->af == 4 ? 1 : 2;
    const uint8_t modes[4] = { f->src_mode, f->dst_mode, f->sport_mode, f->dport_mode };
    uint32_t *idx[4] = { &sl->d_chost, &sl->d_shost, &sl->d_cport, &sl->d_sport };
    for (int i = 0; i < 4; i++) {
        *idx[i] = 0;
        if (modes[i] == FE_RANDOM) {
            *idx[i] = j;
            j += i < 2 ? aw : 1;
        } else if (modes[i] == FE_DIST || modes[i] == FE_DECK) {
            /* A deck draws nothing but keeps the two draws of D:. */
            *idx[i] = j;
            j += 2;
        }
    }
    sl->d_cisn = sl->d_sisn = 0;
    if (f->proto == 6) {
        sl->d_cisn = j++;
        sl->d_sisn = j++;
    }
    sl->d_rounds = 0;
    if (sl->rounds.dist) {
        sl->d_rounds = j;
        j += 2;
    }
    sl->d_base = j;
}

static void build_templates(const struct fe_flow *f, struct sess_line *sl)
{
    for (int d = 0; d < 2; d++) {
        uint8_t *h = sl->tpl[d], *l4 = h + f->l4_off;
        memset(h, 0, FE_HDR_MAX);
        /* Client -> server: src cmac (f->smac), dst server mac (f->dmac). */
        memcpy(h, d ? f->smac : f->dmac, 6);
        memcpy(h + 6, d ? f->dmac : f->smac, 6);
        if (f->af == 4) {
            put16(h + 12, 0x0800);
            h[14] = 0x45;
            h[20] = 0x40; /* DF */
            h[22] = 64;
            h[23] = f->proto;
        } else {
            put16(h + 12, 0x86dd);
            h[14] = 0x60;
            h[20] = f->proto;
            h[21] = 64;
        }
        if (f->proto == 6) {
            l4[12] = 0x50; /* data offset 5 */
            put16(l4 + 14, 0xffff);
        }
    }
    sl->tpl_sum_ip = f->af == 4 ? csum_fold(0x4500 + 0x4000 + (64u << 8 | f->proto)) : 0;
    sl->tpl_sum_l4 = f->proto == 6 ? csum_fold(0x5000 + 0xffff) : 0;
}

/* Segments (TCP: plus their ACKs, at most as many) of a message of b bytes, saturating. */
static uint64_t msg_packets(uint64_t b, uint64_t mss, int tcp)
{
    uint64_t segs = b / mss + (b % mss != 0);
    return tcp ? sat_mul(segs, 2) : segs;
}

int sess_line_build(struct fe_flow *f, const struct sess_keys *k, char *why, size_t whylen)
{
    struct sess_line *sl = calloc(1, sizeof *sl);
    if (!sl)
        return -ENOMEM;
    int tcp = f->proto == 6;
    unsigned ip_len = f->af == 4 ? 20 : 40;
    f->kind = FE_K_SESS;
    f->l4_off = (uint8_t)(FE_ETH_LEN + ip_len);
    f->hdr_len = (uint8_t)(FE_ETH_LEN + ip_len + (tcp ? 20 : 8));
    if (k->mss < 1 || k->mss > FE_MAX_FRAME - f->hdr_len) {
        snprintf(why, whylen, "mss: must be 1..%u (a %u-byte frame with these headers) (got %llu)",
                 FE_MAX_FRAME - f->hdr_len, FE_MAX_FRAME, (unsigned long long)k->mss);
        free(sl);
        return -EINVAL;
    }
    sl->h = k->h;
    sl->gap = k->gap;
    sl->think = k->think_d ? k->think_d->hi : k->think;
    sl->linger = k->linger_d ? k->linger_d->hi : k->linger;
    sl->deck_key = k->deck_key;
    sl->deck_off = k->deck_off;
    sl->think_d = k->think_d;
    sl->linger_d = k->linger_d;
    sl->mss = (uint32_t)k->mss;
    sl->win = (uint32_t)k->win;
    sl->close_rst = (uint8_t)k->close_rst;
    sl->open_none = (uint8_t)k->open_none;
    sl->rounds = k->rounds;
    sl->req = k->req;
    sl->resp = k->resp;
    sl->arrival = k->arrival;
    /* What the rest of the engine reads of a line: the largest frame (MTU
     * check), one period (the stochastic planner leaves sessions exact). */
    f->size_lo = 0;
    f->size_hi = sl->mss;
    f->period = sl->h;
    f->packets = 0;
    f->rep_period = sl->arrival.dist ? 0 : sl->arrival.fixed;
    assign_draws(f, sl);
    build_templates(f, sl);

    /* The latest any packet of the line can be due: the last start plus the
     * longest instance, every packet h or gap after the one before it, but
     * for a think before each round after the first and a linger before the
     * close (each at most replaces one of those steps). */
    uint64_t rounds = val_max(&sl->rounds);
    if (!rounds)
        rounds = 1;
    uint64_t per_round = sat_add(msg_packets(val_max(&sl->req), sl->mss, tcp),
                                 msg_packets(val_max(&sl->resp), sl->mss, tcp));
    uint64_t pk = sat_add(sat_mul(rounds, per_round), tcp ? 6 : 1);
    uint64_t step = sl->h > sl->gap ? sl->h : sl->gap;
    uint64_t dur =
        sat_add(sat_add(sat_mul(pk, step), sat_mul(rounds - 1, sl->think)), tcp ? sl->linger : 0);
    uint64_t last = sat_add(sat_add(f->start, sat_mul(f->reps - 1, val_max(&sl->arrival))), dur);
    if (last >= SESS_TIME_LIMIT) {
        snprintf(why, whylen,
                 "reps: the last packet could be due after 2^32 s, the pcap limit: start + "
                 "(reps-1) * the largest arrival + the longest instance (up to %llu packets, "
                 "each at most max(rtt/2, gap) after the one before, plus think and linger) "
                 "must stay below it: lower reps, arrival, rounds, req, resp, think, linger or "
                 "raise mss (got reps=%llu)",
                 (unsigned long long)pk, (unsigned long long)f->reps);
        free(sl);
        return -EINVAL;
    }
    /* Instances alive at once: all of them, or as many as start within the
     * longest instance when the arrival has a positive minimum. */
    uint64_t amin = val_min(&sl->arrival);
    f->max_live = f->reps;
    if (amin && dur / amin + 1 < f->max_live)
        f->max_live = dur / amin + 1;
    f->sess = sl;
    return 0;
}

void sess_line_free(struct sess_line *sl)
{
    free(sl);
}

uint64_t sess_arrival_seed(uint64_t seed, uint64_t index)
{
    return rng_mix(seed ^ rng_mix(index + SESS_ARRIVAL_C));
}

uint32_t sess_deck_pos(uint64_t seed, uint64_t index, unsigned side, uint64_t rep, uint32_t n)
{
    uint64_t x = rep % n, key[4];
    unsigned b = 0;
    while ((1ull << b) < n)
        b++;
    if (!b)
        return 0;
    /* The line's key, the cycle's, then one per round. */
    uint64_t line = rng_mix(seed ^ rng_mix((index << 1 | side) + SESS_DECK_C));
    uint64_t cyc = rng_mix(line + (rep / n) * RNG_GOLDEN);
    for (unsigned i = 0; i < 4; i++)
        key[i] = rng_mix(cyc + (i + 1) * RNG_GOLDEN);
    /* A 4-round Feistel network on b bits (high part ceil(b/2) bits, low
     * part floor(b/2); the parts swap widths every round), walked until it
     * lands in [0, n): a bijection of [0, n). */
    do {
        unsigned wh = b - b / 2, wl = b / 2;
        for (unsigned i = 0; i < 4; i++) {
            uint64_t l = x >> wl, r = x & ((1ull << wl) - 1);
            x = r << wh | ((l ^ rng_mix(key[i] ^ r)) & ((1ull << wh) - 1));
            unsigned t = wh;
            wh = wl;
            wl = t;
        }
    } while (x >= n);
    return (uint32_t)x;
}

static inline uint64_t draw(uint64_t rng0, uint64_t j)
{
    return rng_mix(rng0 + j * RNG_GOLDEN);
}

/* A value at draw j (fixed: no draw). */
static inline uint64_t val_at(const struct sess_val *v, uint64_t rng0, uint64_t j)
{
    return v->dist ? dist_draw_at(v->dist, rng0, j) : v->fixed;
}

/* The instance's address: ADDRESS, its network part + drawn host bits
 * (random), + a host offset drawn from a dist (FE_DIST), or ADDRESS + rep
 * wrapping inside the prefix (increment). */
static void inst_addr(uint8_t *out, const uint8_t *base, int af, unsigned prefix, int mode,
                      const struct fe_dist *d, uint64_t rep, uint64_t rng0, uint32_t j)
{
    if (af == 4) {
        uint32_t a =
            (uint32_t)base[0] << 24 | (uint32_t)base[1] << 16 | (uint32_t)base[2] << 8 | base[3];
        uint32_t m = (uint32_t)(0xffffffffull >> prefix);
        if (mode == FE_RANDOM)
            a = (a & ~m) | ((uint32_t)draw(rng0, j) & m);
        else if (mode == FE_DIST)
            a = (a & ~m) | ((uint32_t)dist_draw_at(d, rng0, j) & m);
        else if (mode == FE_INCREMENT)
            a = (a & ~m) | ((a + (uint32_t)rep) & m);
        put32(out, a);
        return;
    }
    uint64_t hi = get64(base), lo = get64(base + 8);
    uint64_t mhi = prefix >= 64 ? 0 : ~0ull >> prefix;
    uint64_t mlo = prefix >= 64 ? (prefix == 128 ? 0 : ~0ull >> (prefix - 64)) : ~0ull;
    if (mode == FE_RANDOM) {
        hi = (hi & ~mhi) | (draw(rng0, j) & mhi);
        lo = (lo & ~mlo) | (draw(rng0, j + 1) & mlo);
    } else if (mode == FE_DIST) {
        /* Checked at load: the offset fits the host bits (and 63 bits). */
        hi &= ~mhi;
        lo = (lo & ~mlo) | (dist_draw_at(d, rng0, j) & mlo);
    } else if (mode == FE_INCREMENT) {
        uint64_t hl = lo & mlo, nl = hl + rep;
        uint64_t hh = (hi & mhi) + (nl < hl);
        lo = (lo & ~mlo) | (nl & mlo);
        hi = (hi & ~mhi) | (hh & mhi);
    }
    put64(out, hi);
    put64(out + 8, lo);
}

static uint16_t inst_port(uint16_t lo, uint16_t hi, int mode, const struct fe_dist *d, uint64_t rep,
                          uint64_t rng0, uint32_t j)
{
    if (mode == FE_RANDOM)
        return (uint16_t)(lo + draw(rng0, j) % ((uint64_t)hi - lo + 1));
    if (mode == FE_DIST)
        return (uint16_t)dist_draw_at(d, rng0, j);
    if (mode == FE_INCREMENT)
        return (uint16_t)(lo + rep % ((uint64_t)hi - lo + 1));
    return lo;
}

/* Bytes of message m (0 request, 1 response) of round r. */
static uint64_t msg_bytes(const struct sess_line *sl, const struct fe_inst *in, uint32_t r, int m)
{
    return val_at(m ? &sl->resp : &sl->req, in->rng, sl->d_base + 4ull * r + 2ull * m);
}

/* From the message after (round, msg), the first that has bytes: 1 with it
 * current (left = its bytes), 0 when none is left. */
static int next_message(const struct sess_line *sl, struct sess_state *ss, const struct fe_inst *in)
{
    for (;;) {
        if (ss->msg == 0) {
            ss->msg = 1;
        } else {
            if (ss->round + 1 >= ss->rounds)
                return 0;
            ss->round++;
            ss->msg = 0;
        }
        uint64_t b = msg_bytes(sl, in, ss->round, ss->msg);
        if (b) {
            ss->left = b;
            return 1;
        }
    }
}

/* Makes a data segment / datagram of the current message current. */
static void data_packet(const struct sess_line *sl, struct sess_state *ss)
{
    uint32_t d = ss->msg;
    uint32_t n = ss->left < sl->mss ? (uint32_t)ss->left : sl->mss;
    ss->left -= n;
    ss->dir = (uint8_t)d;
    ss->plen = n;
    ss->phase = PH_DATA;
    ss->flags = (uint8_t)(TCP_ACK | (ss->left ? 0 : TCP_PSH));
    if (!ss->fl_segs)
        ss->fl_seq0 = ss->seq[d];
    ss->fl_segs++;
    ss->cur_seq = ss->seq[d];
    ss->cur_ack = ss->seq[!d];
    ss->seq[d] += n;
}

/* A packet without payload from side d: flags, its sequence number (the side's
 * next), ACK number ack; SYN and FIN take one sequence number. */
static void bare_packet(struct sess_state *ss, int phase, uint32_t d, uint8_t flags, uint32_t ack)
{
    ss->phase = (uint8_t)phase;
    ss->dir = (uint8_t)d;
    ss->plen = 0;
    ss->flags = flags;
    ss->cur_seq = ss->seq[d];
    ss->cur_ack = ack;
    ss->seq[d] += (flags & (TCP_SYN | TCP_FIN)) ? 1 : 0;
}

/* The j-th ACK answering the flight: two more segments each (all of them for the last). */
static void ack_packet(const struct sess_line *sl, struct sess_state *ss)
{
    uint32_t s = ss->msg; /* the sender of the flight */
    uint32_t ack =
        ss->ack_i + 1 == ss->acks ? ss->seq[s] : ss->fl_seq0 + 2 * (ss->ack_i + 1) * sl->mss;
    bare_packet(ss, PH_ACK, !s, TCP_ACK, ack);
}

static int tcp_first_data(const struct sess_line *sl, struct sess_state *ss,
                          const struct fe_inst *in);
static int tcp_close(const struct sess_line *sl, struct sess_state *ss);

void sess_activate(const struct fe_flow *f, struct sess_state *ss, struct fe_inst *in, uint32_t k,
                   uint64_t rep, uint64_t serial, uint64_t seed, uint64_t start)
{
    const struct sess_line *sl = f->sess;
    in->rng = rng_seed(seed, serial);
    in->sent = 0;
    in->bytes = 0;
    in->serial = serial;
    in->flow = k;
    in->seq = 0;
    in->due = start;
    memset(ss, 0, sizeof *ss);
    ss->start = start;
    inst_addr(ss->caddr, f->src, f->af, f->src_prefix, f->src_mode, sl->cdist, rep, in->rng,
              sl->d_chost);
    inst_addr(ss->saddr, f->dst, f->af, f->dst_prefix, f->dst_mode, sl->sdist, rep, in->rng,
              sl->d_shost);
    if (f->sport_mode == FE_DECK)
        ss->cport =
            (uint16_t)dist_card(sl->cpdist, sess_deck_pos(seed, sl->deck_key, 0, rep + sl->deck_off,
                                                          (uint32_t)sl->cpdist->total));
    else
        ss->cport = inst_port(f->sport_lo, f->sport_hi, f->sport_mode, sl->cpdist, rep, in->rng,
                              sl->d_cport);
    if (f->dport_mode == FE_DECK)
        ss->sport =
            (uint16_t)dist_card(sl->spdist, sess_deck_pos(seed, sl->deck_key, 1, rep + sl->deck_off,
                                                          (uint32_t)sl->spdist->total));
    else
        ss->sport = inst_port(f->dport_lo, f->dport_hi, f->dport_mode, sl->spdist, rep, in->rng,
                              sl->d_sport);
    /* The sums both directions share (swapping source and destination
     * changes no sum): addresses, protocol, ports, constants. */
    uint64_t s;
    if (f->af == 4) {
        s = csum_partial(ss->caddr, 4, 0);
        s = csum_partial(ss->saddr, 4, s);
        ss->sum_ip = csum_fold(s + sl->tpl_sum_ip);
    } else {
        s = csum_partial(ss->caddr, 16, 0);
        s = csum_partial(ss->saddr, 16, s);
    }
    ss->sum_l4 = csum_fold(s + f->proto + ss->cport + ss->sport + sl->tpl_sum_l4);
    uint64_t r = val_at(&sl->rounds, in->rng, sl->d_rounds);
    ss->rounds = r ? (uint32_t)r : 1;
    if (f->proto == 6) {
        ss->seq[0] = (uint32_t)draw(in->rng, sl->d_cisn);
        ss->seq[1] = (uint32_t)draw(in->rng, sl->d_sisn);
        if (!sl->open_none)
            bare_packet(ss, PH_SYN, 0, TCP_SYN, 0);
        else if (!tcp_first_data(sl, ss, in) && !tcp_close(sl, ss))
            bare_packet(ss, PH_FIN3, 0, TCP_ACK, ss->seq[1]); /* one ACK: the instance's packet */
        return;
    }
    /* UDP: the first message with bytes, else one empty request. */
    ss->round = 0;
    ss->msg = 0;
    ss->left = msg_bytes(sl, in, 0, 0);
    if (ss->left || next_message(sl, ss, in)) {
        data_packet(sl, ss);
        return;
    }
    ss->phase = PH_EMPTY;
    ss->dir = 0;
    ss->plen = 0;
}

void sess_write(const struct fe_flow *f, struct sess_state *ss, const struct fe_inst *in,
                uint8_t *frame)
{
    const struct sess_line *sl = f->sess;
    uint32_t d = ss->dir, plen = ss->plen;
    uint16_t id = (uint16_t)ss->pk[d];
    const uint8_t *a = d ? ss->saddr : ss->caddr, *b = d ? ss->caddr : ss->saddr;
    uint16_t sp = d ? ss->sport : ss->cport, dp = d ? ss->cport : ss->sport;
    uint8_t *l4 = frame + f->l4_off;
    uint64_t sl4 = ss->sum_l4;
    uint32_t l4len;
    (void)in;

    memset(frame + f->hdr_len, 0, plen);
    if (f->af == 4) {
        memcpy(frame, sl->tpl[d], 54);
        memcpy(frame + 26, a, 4);
        memcpy(frame + 30, b, 4);
        l4len = f->hdr_len - 34 + plen;
        uint32_t tot = 20 + l4len;
        put16(frame + 16, tot);
        put16(frame + 18, id);
        put16(frame + 24, csum_finish((uint64_t)ss->sum_ip + tot + id));
    } else {
        memcpy(frame, sl->tpl[d], 74);
        memcpy(frame + 22, a, 16);
        memcpy(frame + 38, b, 16);
        l4len = f->hdr_len - 54 + plen;
        put16(frame + 18, l4len);
    }
    put16(l4, sp);
    put16(l4 + 2, dp);
    if (f->proto == 6) {
        put32(l4 + 4, ss->cur_seq);
        put32(l4 + 8, ss->cur_ack);
        l4[13] = ss->flags;
        put16(l4 + 16,
              csum_finish(sl4 + l4len + sum32(ss->cur_seq) + sum32(ss->cur_ack) + ss->flags));
    } else {
        put16(l4 + 4, l4len);
        uint16_t c = csum_finish(sl4 + 2 * l4len);
        put16(l4 + 6, c ? c : 0xffff);
    }
    ss->pk[d]++;
    ss->pay[d] += plen;
    if (d)
        ss->sbytes += f->hdr_len + plen;
}

/* TCP: the first data segment (round 0 on), or 0 when no round has bytes. */
static int tcp_first_data(const struct sess_line *sl, struct sess_state *ss,
                          const struct fe_inst *in)
{
    ss->round = 0;
    ss->msg = 0;
    ss->left = msg_bytes(sl, in, 0, 0);
    if (ss->left || next_message(sl, ss, in)) {
        ss->fl_segs = 0;
        data_packet(sl, ss);
        return 1;
    }
    return 0;
}

/* TCP: the close's first packet, or 0 for close none. */
static int tcp_close(const struct sess_line *sl, struct sess_state *ss)
{
    if (sl->close_rst == SESS_CLOSE_NONE)
        return 0; /* left open: the last exchange was the instance's last packet */
    if (sl->close_rst == SESS_CLOSE_RST)
        bare_packet(ss, PH_RST, 0, TCP_RST | TCP_ACK, ss->seq[1]);
    else
        bare_packet(ss, PH_FIN1, 0, TCP_FIN | TCP_ACK, ss->seq[1]);
    return 1;
}

/* TCP: the packet after the current one; 0 when the instance is done. */
static int tcp_next(const struct sess_line *sl, struct sess_state *ss, const struct fe_inst *in)
{
    switch (ss->phase) {
    case PH_SYN:
        bare_packet(ss, PH_SYNACK, 1, TCP_SYN | TCP_ACK, ss->seq[0]);
        return 1;
    case PH_SYNACK:
        bare_packet(ss, PH_HSACK, 0, TCP_ACK, ss->seq[1]);
        return 1;
    case PH_HSACK:
        if (tcp_first_data(sl, ss, in))
            return 1;
        break; /* nothing to send: close */
    case PH_DATA:
        if (ss->left && ss->fl_segs < sl->win) {
            data_packet(sl, ss);
            return 1;
        }
        ss->acks = (ss->fl_segs + 1) / 2;
        ss->ack_i = 0;
        ack_packet(sl, ss);
        return 1;
    case PH_ACK:
        if (ss->ack_i + 1 < ss->acks) {
            ss->ack_i++;
            ack_packet(sl, ss);
            return 1;
        }
        ss->fl_segs = 0;
        if (ss->left || next_message(sl, ss, in)) {
            data_packet(sl, ss);
            return 1;
        }
        break; /* the last message is answered: close */
    case PH_FIN1:
        bare_packet(ss, PH_FIN2, 1, TCP_FIN | TCP_ACK, ss->seq[0]);
        return 1;
    case PH_FIN2:
        bare_packet(ss, PH_FIN3, 0, TCP_ACK, ss->seq[1]);
        return 1;
    default: /* PH_FIN3, PH_RST */
        return 0;
    }
    return tcp_close(sl, ss);
}

/* The first draw index after every round's (README, "Think and linger"): the
 * linger's; round r's think is this + r (r >= 1). */
static inline uint64_t pause_base(const struct sess_line *sl)
{
    return sl->d_base + 4ull * SESS_MAX_ROUNDS;
}

/* The think before round r's first packet (r >= 1; sl->think > 0), its class in *klass. */
static inline uint64_t think_of(const struct fe_flow *f, const struct sess_line *sl,
                                const struct fe_inst *in, uint32_t r, uint32_t *klass)
{
    if (sl->think_d) {
        uint32_t b = dist_bin_at(sl->think_d, in->rng, pause_base(sl) + r);
        *klass = sl->think_k[b];
        return sl->think_d->bin[b].lo;
    }
    *klass = f->klass_think;
    return sl->think;
}

uint64_t sess_next(const struct fe_flow *f, struct sess_state *ss, const struct fe_inst *in,
                   uint32_t *klass)
{
    const struct sess_line *sl = f->sess;
    uint32_t prev = ss->dir, round = ss->round;
    if (f->proto == 6) {
        if (!tcp_next(sl, ss, in))
            return 0;
        /* think before a round's first data segment (rounds 1 on: the round
         * moved), linger before the close; else same side: gap, the other
         * side reacts after h. */
        if (sl->think && ss->phase == PH_DATA && ss->round != round)
            return think_of(f, sl, in, ss->round, klass);
        if (sl->linger && (ss->phase == PH_FIN1 || ss->phase == PH_RST)) {
            if (sl->linger_d) {
                uint32_t b = dist_bin_at(sl->linger_d, in->rng, pause_base(sl));
                *klass = sl->linger_k[b];
                return sl->linger_d->bin[b].lo;
            }
            *klass = f->klass_linger;
            return sl->linger;
        }
        if (ss->dir == prev) {
            *klass = f->klass_gap;
            return sl->gap;
        }
        *klass = f->klass;
        return sl->h;
    }
    /* UDP: gap inside a message, h between messages (think before the first
     * datagram of a later round, when set). */
    if (ss->phase == PH_EMPTY)
        return 0;
    if (ss->left) {
        data_packet(sl, ss);
        *klass = f->klass_gap;
        return sl->gap;
    }
    if (!next_message(sl, ss, in))
        return 0;
    data_packet(sl, ss);
    if (sl->think && ss->round != round)
        return think_of(f, sl, in, ss->round, klass);
    *klass = f->klass;
    return sl->h;
}

void sess_endpoints(const struct fe_flow *f, const struct sess_state *ss, char *src, char *dst,
                    unsigned *sport, unsigned *dport)
{
    inet_ntop(f->af == 4 ? AF_INET : AF_INET6, ss->caddr, src, 46);
    inet_ntop(f->af == 4 ? AF_INET : AF_INET6, ss->saddr, dst, 46);
    *sport = ss->cport;
    *dport = ss->sport;
}
