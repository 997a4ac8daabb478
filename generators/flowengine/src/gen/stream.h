/* stream.h - `frames` and `stream` lines (README, "Stream lines"): frames read
 * once from a pcap and played as they are, at exact due times.
 *
 * The session's `frames PATH` is loaded whole into memory (struct
 * stream_frames, through the project's one pcap reader, ntgcore/native
 * pcapread). A `stream` line is a struct fe_flow of kind FE_K_STREAM with one
 * instance (serial = its offset), whose struct stream_line holds the cycle of
 * frames it plays and, per frame, what the sequence patch needs. Per packet
 * the loop copies the frame (stream_fill), writes the packet index into the
 * 4-byte field at seq_off and updates the 16-bit Internet checksum at
 * csum_off incrementally (RFC 1624, eqn. 3); with fcs=1 also the frame's
 * trailing Ethernet FCS (CRC-32), incrementally as well: CRC-32 is linear,
 * so the new FCS is the frame's own CRC XOR the raw CRC (no initial value,
 * no final XOR) of a frame of zeros but for the changed bytes' differences;
 * that is the XOR of one table per changed byte position (the raw CRC of a
 * byte value at that distance from the FCS), built per frame length.
 * Nothing else is recomputed.
 *
 * Packet i of a stream is frame first + (i mod count), due at
 * start + i * period (burst 0), or
 * start + (i / burst) * burst_period + (i mod burst) * period.
 *
 * Errors: stream_frames_load and stream_line_build print nothing; they return
 * a negative errno and leave the reason in a caller's buffer (the session
 * parser puts it after "SESSION:LINE: key: ").
 *
 * Thread safety: loading and building happen once, on the main thread,
 * while the session is read; afterwards frames and lines are only read. */
#ifndef FE_STREAM_H
#define FE_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "session.h"

#define STREAM_NONE UINT32_MAX /* seq_off / csum_off `-` */
#define STREAM_MIN_FRAME 14u   /* an Ethernet header */
#define STREAM_MAX_PACKETS (1ull << 62)

/* Every frame of the `frames` file, and what the flow log shows of each. */
struct stream_frames {
    size_t n;
    uint8_t *data;  /* the frames back to back */
    uint64_t *off;  /* frame j: data + off[j] */
    uint32_t *len;  /* its bytes (captured = on the wire) */
    uint8_t *ipver; /* pcapread's dissection: 4, 6 or 0 (not IP) */
    uint8_t *proto;
    uint64_t *src_hi, *src_lo, *dst_hi, *dst_lo;
    uint16_t *sport, *dport; /* ICMP echo: identifier, 0 */
};

#define STREAM_FCS_POS 6 /* bytes a patch changes: 4 of the sequence, 2 of the checksum */

/* One frame of a stream's cycle. csum_base is the checksum's part that the
 * patch does not change: ~HC + ~m_hi + ~m_lo (RFC 1624) of this frame.
 * fcs=1: crc is the CRC-32 of its bytes before the FCS, and tab[k][d] the
 * raw CRC of a frame of its length that is zero but for d at the stream's
 * k-th changed position (shared by the frames of one length). */
struct stream_tpl {
    const uint8_t *data;
    uint32_t len;
    uint32_t csum_base;
    uint32_t crc;
    const uint32_t (*tab)[256]; /* [npos][256], or NULL */
};

struct stream_line {
    uint64_t burst, burst_period;          /* burst 0: no bursts */
    uint32_t first, count;                 /* frames[first, first + count) */
    uint32_t seq_off, csum_off;            /* byte offsets or STREAM_NONE */
    uint32_t min_len, max_len;             /* over its frames */
    uint32_t fcs;                          /* 1: the last 4 bytes are the FCS, kept right */
    uint32_t npos, pos[STREAM_FCS_POS];    /* fcs: the bytes the patch changes */
    uint32_t (*tabs)[STREAM_FCS_POS][256]; /* fcs: the tables of each distinct length */
    struct stream_tpl tpl[];               /* count of them */
};

/* Reads every frame of path into fr. 0, or a negative errno with the reason
 * in why (-EINVAL: a file that is not a whole, undamaged Ethernet capture
 * with frames of 14..65535 bytes; -ENOMEM; the open's errno). fr is then
 * empty. */
int stream_frames_load(struct stream_frames *fr, const char *path, char *why, size_t whylen);
/* Frees what stream_frames_load allocated; an empty one is fine. */
void stream_frames_free(struct stream_frames *fr);

/* The keys of a stream line, checked for range by the parser. */
struct stream_keys {
    uint64_t first, count, start, period, packets, burst, burst_period;
    uint32_t seq_off, csum_off; /* or STREAM_NONE */
    uint64_t fcs;               /* 0 or 1 (the key may be left out: 0) */
};

/* Checks k against fr and the timing rules, then makes f a stream line:
 * kind FE_K_STREAM, start, period, packets, reps 1, size_lo/size_hi the
 * smallest and largest frame, the flow log's endpoints of frame `first`,
 * and f->stream (allocated; session_free frees it). Returns 0, or -EINVAL
 * with "KEY: what is wrong (got ...)" in why, or -ENOMEM. */
int stream_line_build(struct fe_flow *f, const struct stream_keys *k,
                      const struct stream_frames *fr, char *why, size_t whylen);

/* Due time of packet i of stream line f (i < f->packets). */
uint64_t stream_due(const struct fe_flow *f, uint64_t i);

/* The flow log's addresses (text, "" when the frame is not IP) and ports of
 * stream line f: those of its first frame. */
void stream_endpoints(const struct fe_flow *f, char *src, char *dst, unsigned *sport,
                      unsigned *dport);

/* Frees a stream line (its tables too); NULL is fine. */
void stream_line_free(struct stream_line *sl);

/* fcs=1: the FCS of out (frame t after the patch), written least
 * significant byte first as Ethernet sends it. */
static inline void stream_fcs(const struct stream_line *sl, const struct stream_tpl *t,
                              uint8_t *out)
{
    uint32_t r = t->crc;
    for (uint32_t k = 0; k < sl->npos; k++)
        r ^= t->tab[k][out[sl->pos[k]] ^ t->data[sl->pos[k]]];
    uint8_t *f = out + t->len - 4;
    f[0] = (uint8_t)r;
    f[1] = (uint8_t)(r >> 8);
    f[2] = (uint8_t)(r >> 16);
    f[3] = (uint8_t)(r >> 24);
}

/* Writes packet i of the stream (frame t) to out: the frame's bytes, the
 * sequence field = i mod 2^32 big-endian, its checksum updated (a result of
 * 0x0000 is written as 0xffff) and, with fcs=1, its FCS. */
static inline void stream_fill(const struct stream_line *sl, const struct stream_tpl *t,
                               uint8_t *out, uint64_t i)
{
    memcpy(out, t->data, t->len);
    if (sl->seq_off == STREAM_NONE)
        return;
    uint32_t v = (uint32_t)i;
    uint8_t *p = out + sl->seq_off;
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    if (sl->csum_off != STREAM_NONE) {
        uint32_t s = t->csum_base + (v >> 16) + (v & 0xffffu);
        s = (s & 0xffffu) + (s >> 16);
        s = (s & 0xffffu) + (s >> 16);
        uint16_t c = (uint16_t)~s;
        if (!c)
            c = 0xffff;
        out[sl->csum_off] = (uint8_t)(c >> 8);
        out[sl->csum_off + 1] = (uint8_t)c;
    }
    if (sl->fcs)
        stream_fcs(sl, t, out);
}

#endif
