/* sess.h - `session` lines (README, "Session lines"): two-way TCP and UDP
 * sessions, their per-instance state and the per-packet writer.
 *
 * A session line is a struct fe_flow of kind FE_K_SESS whose struct
 * sess_line (f->sess) holds what only sessions have: timing (h = rtt / 2,
 * gap), mss, flight size, close, the values (fixed or a `dist`, dist.h) of
 * rounds, request and response bytes and arrival, and the frame templates of
 * both directions. The fe_flow's own fields keep what flow lines have too:
 * af, proto, the client (src, smac) and the server (dst, dmac), their modes
 * and port ranges, start, reps, offset, header length.
 *
 * An instance is a struct fe_inst (packet.h: due, serial, sent, bytes, rng,
 * flow) plus a struct sess_state in the loop's parallel array (the same id).
 * The state always describes the instance's current packet (sess_activate:
 * its first, sess_next: the one after); sess_write builds it. Between two
 * packets of one instance there are h or gap ns, or think (before a round's
 * first packet, rounds 1 on) or linger (before the TCP close) when those are
 * set, so each session line needs up to four FIFO classes (wheel.h): klass
 * (period h), klass_gap, klass_think and klass_linger; a think or linger
 * drawn from a dist (D:ID) needs one per value instead (think_k, linger_k).
 *
 * A port of mode FE_DECK (P:ID) is a card of the dist's deck (dist.h): the
 * instance of repetition rep takes card pi_q(rep mod N), N the deck's size,
 * q = rep / N its cycle, pi_q a keyed bijection of [0, N) (sess_deck_pos;
 * README, "Session lines"). It needs no per-instance state.
 *
 * Thread safety: sess_line_build once on the main thread while the session
 * is read; then every loop_init (main thread, before any worker starts)
 * writes think_k and linger_k, the same values each time (the classes depend
 * on the session's lines only); afterwards the line is only read. The other functions touch only
 * the instance and state they are given. */
#ifndef FE_SESS_H
#define FE_SESS_H

#include <stddef.h>
#include <stdint.h>

#include "dist.h"
#include "packet.h"
#include "session.h"

#define SESS_MAX_ROUNDS (1u << 20)
/* The most values of a think or linger drawn from a dist (D:ID): one FIFO class each. */
#define SESS_MAX_PAUSES 64u

/* How a TCP instance ends (the `close` key): FIN both ways, a client RST, or not at all (the
 * instance just stops after its last exchange, as a connection still open when a capture
 * ends). */
enum { SESS_CLOSE_FIN, SESS_CLOSE_RST, SESS_CLOSE_NONE };

/* A value that is fixed (dist NULL) or drawn from a dist. */
struct sess_val {
    uint64_t fixed;
    const struct fe_dist *dist;
};

struct sess_line {
    uint64_t h, gap;        /* rtt / 2 and the spacing within a flight */
    uint64_t think, linger; /* 0: none (the h / gap rule); D:ID: the dist's largest value */
    /* think / linger from a dist of point bins (D:ID), else NULL: round r >= 1's think is
     * the value of bin think_d->bin[b], b the bin of draw d_base + 4 * SESS_MAX_ROUNDS + r,
     * and its FIFO class think_k[b]; the linger is drawn once per instance at
     * d_base + 4 * SESS_MAX_ROUNDS (an index no round's think takes), class linger_k[b].
     * The classes are filled by the loop (loop.c, assign_classes). */
    const struct fe_dist *think_d, *linger_d;
    uint32_t think_k[SESS_MAX_PAUSES], linger_k[SESS_MAX_PAUSES];
    uint64_t deck_key, deck_off; /* P: ports: the deck of line deck_key, from deck_off on */
    uint32_t mss, win;
    uint8_t close_rst; /* TCP: SESS_CLOSE_FIN, _RST or _NONE */
    uint8_t open_none; /* TCP: 1: no handshake (the instance starts with its first data) */
    struct sess_val rounds, req, resp, arrival;
    const struct fe_dist *cdist, *sdist;         /* host offset dists (mode FE_DIST) */
    const struct fe_dist *cpdist, *spdist;       /* port dists (mode FE_DIST, FE_DECK) */
    uint32_t d_chost, d_shost, d_cport, d_sport; /* 1-based draw index, 0: none */
    uint32_t d_cisn, d_sisn, d_rounds, d_base;   /* d_base: round r at d_base + 4r */
    uint8_t tpl[2][FE_HDR_MAX];                  /* [0] client -> server, [1] the reverse */
    uint32_t tpl_sum_ip, tpl_sum_l4;             /* folded constants (both directions) */
};

/* Per instance, beside its struct fe_inst. The "current packet" fields say
 * what sess_write builds next. */
struct sess_state {
    uint8_t caddr[16], saddr[16]; /* network order (IPv4: first 4 bytes) */
    uint16_t cport, sport;
    uint32_t sum_ip, sum_l4; /* addresses (+ IPv4 constants), ports, proto, TCP constants */
    uint32_t seq[2];         /* TCP: next sequence number of the client [0], server [1] */
    uint32_t round, rounds;  /* current round, rounds of the instance */
    uint64_t left;           /* bytes of the current message not yet sent */
    uint32_t cur_seq, cur_ack;
    uint32_t plen;             /* current packet: payload bytes */
    uint8_t dir, flags, phase; /* current packet: 0 client -> server, 1 the reverse */
    uint8_t msg;               /* current message: 0 request, 1 response */
    uint32_t fl_segs, fl_seq0; /* TCP: segments of the flight, sender's seq at its start */
    uint32_t acks, ack_i;      /* TCP: ACKs answering the flight, index of the current */
    uint64_t start, last;      /* due time of the first packet, of the last one sent */
    uint64_t pk[2], pay[2];    /* packets and payload bytes sent per direction */
    uint64_t sbytes;           /* frame bytes sent server -> client */
};

/* The keys of a session line, checked for range by the parser. */
struct sess_keys {
    uint64_t h, gap, mss, win, close_rst, think, linger, open_none;
    uint64_t deck_key, deck_off; /* deck=LINE:OFFSET (default: the line's index, 0) */
    struct sess_val rounds, req, resp, arrival;
    const struct fe_dist *think_d, *linger_d; /* D:ID (think, linger: 0), else NULL */
};

/* Completes f (af, proto, addresses, modes, ports, start, reps parsed) as a
 * session line: kind, header lengths, draw indices, templates, f->sess
 * (allocated; sess_line_free frees it), max_live. Returns 0, -EINVAL with
 * "KEY: what is wrong (got ...)" in why, or -ENOMEM. */
int sess_line_build(struct fe_flow *f, const struct sess_keys *k, char *why, size_t whylen);
void sess_line_free(struct sess_line *sl);

/* The arrival stream of line `index` (README: mix(seed XOR mix(index + C))). */
uint64_t sess_arrival_seed(uint64_t seed, uint64_t index);
/* Start of the line's repetition after the one starting at t, drawn from
 * the stream (fixed arrival: t + the spacing). */
static inline uint64_t sess_arrival_next(const struct sess_line *sl, uint64_t t, uint64_t *state)
{
    return t + (sl->arrival.dist ? dist_draw(sl->arrival.dist, state) : sl->arrival.fixed);
}

/* Position pi_q(rep mod n) in a deck of n cards (1..DIST_MAX_DECK) that
 * repetition rep of line `index` takes for its client (side 0) or server
 * (side 1) port; q = rep / n (README, "Session lines": the Feistel network). */
uint32_t sess_deck_pos(uint64_t seed, uint64_t index, unsigned side, uint64_t rep, uint32_t n);

/* Starts instance `serial` (repetition rep) of line f (index k) at due time
 * start: draws its addresses, ports, ISNs and rounds, and makes its first
 * packet current. */
void sess_activate(const struct fe_flow *f, struct sess_state *ss, struct fe_inst *in, uint32_t k,
                   uint64_t rep, uint64_t serial, uint64_t seed, uint64_t start);

/* Writes the current packet (f->hdr_len + ss->plen bytes) to frame and
 * counts it in ss (packets, payload, bytes per direction). */
void sess_write(const struct fe_flow *f, struct sess_state *ss, const struct fe_inst *in,
                uint8_t *frame);

/* Moves to the instance's next packet. Returns the ns until it is due (h,
 * gap, think or linger; the class in *klass), or 0 when the instance is done. */
uint64_t sess_next(const struct fe_flow *f, struct sess_state *ss, const struct fe_inst *in,
                   uint32_t *klass);

/* The flow log's endpoints of the instance (client -> server). */
void sess_endpoints(const struct fe_flow *f, const struct sess_state *ss, char *src, char *dst,
                    unsigned *sport, unsigned *dport);

#endif
