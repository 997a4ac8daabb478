/* wirerender.c - evasion variant sessions as pcap records (the contract: wirerender.h). */
#include "wirerender.h"

#include "csum.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WR_FIN 0x01
#define WR_SYN 0x02
#define WR_PSH 0x08
#define WR_ACK 0x10
#define WR_URG 0x20
#define WR_IP6_ROUTING 43
#define WR_IP6_FRAGMENT 44
#define WR_MAX_HDR                                                                                 \
    (40 + 255 * 24 + 8) /* an IPv6 header, 255 extension headers, a fragment header */

static const uint8_t wr_mac_client[6] = { 2, 0, 0, 0, 0, 1 };
static const uint8_t wr_mac_server[6] = { 2, 0, 0, 0, 0, 2 };

/* --- reading the program -------------------------------------------------------------------- */

struct wr_cursor {
    const uint8_t *base;
    size_t pos, len;
    int bad;
};

static const uint8_t *wr_take(struct wr_cursor *c, size_t n)
{
    if (c->bad || n > c->len - c->pos) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *p = c->base + c->pos;
    c->pos += n;
    return p;
}

static uint16_t wr_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t wr_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* --- writing ------------------------------------------------------------------------------ */

static void wr_be16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void wr_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void wr_put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

struct wr_out {
    uint8_t *p, *end;
    uint64_t t, gap;
    int nanosecond;
    uint64_t packets;
    int err; /* the first error: -ENOBUFS, -EMSGSIZE */
};

/* One record: the Ethernet header, HDR (an IP header and what follows it) and PAYLOAD. */
static void wr_frame(struct wr_out *o, int from_client, const uint8_t *hdr, size_t hlen,
                     const uint8_t *payload, size_t plen)
{
    size_t n = 14 + hlen + plen;
    if (o->err) {
        return;
    }
    if ((size_t)(o->end - o->p) < 16 + n) {
        o->err = -ENOBUFS;
        return;
    }
    uint8_t *r = o->p;
    uint64_t unit = o->nanosecond ? 1 : 1000;
    wr_put_le32(r, (uint32_t)(o->t / 1000000000u));
    wr_put_le32(r + 4, (uint32_t)(o->t % 1000000000u / unit));
    wr_put_le32(r + 8, (uint32_t)n);
    wr_put_le32(r + 12, (uint32_t)n);
    uint8_t *f = r + 16;
    memcpy(f, from_client ? wr_mac_server : wr_mac_client, 6);
    memcpy(f + 6, from_client ? wr_mac_client : wr_mac_server, 6);
    wr_be16(f + 12, (hdr[0] >> 4) == 6 ? 0x86dd : 0x0800);
    memcpy(f + 14, hdr, hlen);
    if (plen) {
        memcpy(f + 14 + hlen, payload, plen);
    }
    o->p = f + n;
    o->t += o->gap;
    o->packets++;
}

/* An IPv4 header of PLEN payload bytes into H (20 bytes). */
static int wr_ipv4(uint8_t *h, const uint8_t *src, const uint8_t *dst, uint8_t proto, size_t plen,
                   uint32_t ident, uint8_t ttl, uint16_t frag)
{
    if (plen > 0xffff - 20) {
        return -EMSGSIZE;
    }
    h[0] = 0x45;
    h[1] = 0;
    wr_be16(h + 2, (uint32_t)(20 + plen));
    wr_be16(h + 4, ident & 0xffff);
    wr_be16(h + 6, frag);
    h[8] = ttl;
    h[9] = proto;
    h[10] = h[11] = 0;
    memcpy(h + 12, src, 4);
    memcpy(h + 16, dst, 4);
    wr_be16(h + 10, csum_finish(csum_partial(h, 20, 0)));
    return 20;
}

/* An IPv6 header (flow label 0) of PLEN payload bytes into H (40 bytes). */
static int wr_ipv6(uint8_t *h, const uint8_t *src, const uint8_t *dst, uint8_t next, size_t plen,
                   uint8_t hops)
{
    if (plen > 0xffff) {
        return -EMSGSIZE;
    }
    wr_be32(h, 6u << 28);
    wr_be16(h + 4, (uint32_t)plen);
    h[6] = next;
    h[7] = hops;
    memcpy(h + 8, src, 16);
    memcpy(h + 24, dst, 16);
    return 40;
}

/* --- the connection ------------------------------------------------------------------------- */

struct wr_conn {
    const uint8_t *client, *server;
    int alen; /* 4 or 16 */
    uint16_t cport, sport;
    uint32_t cisn, ack, ts, ts_echo, ident;
    int timestamps;
    uint8_t *l4; /* scratch: one transport segment */
    size_t l4cap;
};

struct wr_seg {
    uint32_t off, len, shift, ts_back;
    uint16_t flags, urgent, nfrags;
    uint8_t hops, bits, next_ext;
    const uint8_t *ext, *data, *frags;
};

static uint32_t wr_next_ident(struct wr_conn *c)
{
    c->ident++;
    return c->ident;
}

static size_t wr_ts_option(uint8_t *p, uint32_t val, uint32_t echo)
{
    p[0] = 1;
    p[1] = 1;
    p[2] = 8;
    p[3] = 10;
    wr_be32(p + 4, val);
    wr_be32(p + 8, echo);
    return 12;
}

static size_t wr_mss_option(uint8_t *p)
{
    p[0] = 2;
    p[1] = 4;
    wr_be16(p + 2, WR_MSS);
    return 4;
}

/* A TCP segment into BUF (room checked by the caller: 60 + dlen): its length. */
static size_t wr_tcp(uint8_t *buf, const uint8_t *src, const uint8_t *dst, int alen, uint16_t sport,
                     uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags, const uint8_t *opts,
                     size_t olen, uint16_t urgent, const uint8_t *data, size_t dlen)
{
    size_t pad = (4 - olen % 4) % 4;
    size_t hlen = 20 + olen + pad;
    wr_be16(buf, sport);
    wr_be16(buf + 2, dport);
    wr_be32(buf + 4, seq);
    wr_be32(buf + 8, ack);
    buf[12] = (uint8_t)((hlen / 4) << 4);
    buf[13] = flags;
    wr_be16(buf + 14, 65535);
    buf[16] = buf[17] = 0;
    wr_be16(buf + 18, urgent);
    memcpy(buf + 20, opts, olen);
    memset(buf + 20 + olen, 0, pad);
    if (dlen) {
        memcpy(buf + hlen, data, dlen);
    }
    size_t n = hlen + dlen;
    uint64_t s = csum_partial(src, (size_t)alen, 0);
    s = csum_partial(dst, (size_t)alen, s);
    s += 6 + n;
    wr_be16(buf + 16, csum_finish(csum_partial(buf, n, s)));
    return n;
}

static size_t wr_udp(uint8_t *buf, const uint8_t *src, const uint8_t *dst, int alen, uint16_t sport,
                     uint16_t dport, const uint8_t *data, size_t dlen)
{
    size_t n = 8 + dlen;
    wr_be16(buf, sport);
    wr_be16(buf + 2, dport);
    wr_be16(buf + 4, (uint32_t)(n & 0xffff));
    buf[6] = buf[7] = 0;
    if (dlen) {
        memcpy(buf + 8, data, dlen);
    }
    uint64_t s = csum_partial(src, (size_t)alen, 0);
    s = csum_partial(dst, (size_t)alen, s);
    s += 17 + (n & 0xffff);
    uint16_t c = csum_finish(csum_partial(buf, n, s));
    wr_be16(buf + 6, c ? c : 0xffff);
    return n;
}

static int wr_room(struct wr_conn *c, size_t need)
{
    if (need <= c->l4cap) {
        return 0;
    }
    size_t cap = c->l4cap ? c->l4cap : 4096;
    while (cap < need) {
        cap *= 2;
    }
    uint8_t *p = realloc(c->l4, cap);
    if (!p) {
        return -ENOMEM;
    }
    c->l4 = p;
    c->l4cap = cap;
    return 0;
}

/* One fragment of a program (wirerender.h): where it starts, the bytes it carries (its fill, or
 * the segment's true bytes there: L4, L4LEN long) and whether more of the segment follows. */
struct wr_frag {
    uint32_t off, len;
    const uint8_t *chunk;
    size_t clen;
    int more;
};

static const uint8_t *wr_next_frag(const uint8_t *fp, const uint8_t *l4, size_t l4len,
                                   struct wr_frag *f)
{
    uint32_t fill = wr_le32(fp + 8);
    f->off = wr_le32(fp);
    f->len = wr_le32(fp + 4);
    fp += WR_FRAG_LEN;
    if (fill != WR_NO_FILL) {
        f->chunk = fp;
        f->clen = fill;
        fp += fill;
    } else {
        size_t at = f->off < l4len ? f->off : l4len;
        f->chunk = l4 + at;
        f->clen = l4len - at < f->len ? l4len - at : f->len;
    }
    f->more = (uint64_t)f->off + f->len < l4len;
    return fp;
}

/* The IP packets of one client segment SEG (its transport bytes in c->l4, L4LEN long). */
static int wr_client_ip(struct wr_out *o, struct wr_conn *c, const struct wr_seg *seg,
                        uint8_t proto, size_t l4len)
{
    uint8_t h[WR_MAX_HDR];
    const uint8_t *l4 = c->l4;
    if (c->alen == 4) {
        uint32_t ident = wr_next_ident(c) & 0xffff;
        if (!seg->nfrags) {
            int n = wr_ipv4(h, c->client, c->server, proto, l4len, ident, seg->hops, 0x4000);
            if (n < 0) {
                return n;
            }
            wr_frame(o, 1, h, (size_t)n, l4, l4len);
            return 0;
        }
        const uint8_t *fp = seg->frags;
        for (unsigned i = 0; i < seg->nfrags; i++) {
            struct wr_frag f;
            fp = wr_next_frag(fp, l4, l4len, &f);
            uint16_t field = (uint16_t)((f.more ? 0x2000 : 0) | ((f.off >> 3) & 0xffff));
            int n = wr_ipv4(h, c->client, c->server, proto, f.clen, ident, seg->hops, field);
            if (n < 0) {
                return n;
            }
            wr_frame(o, 1, h, (size_t)n, f.chunk, f.clen);
        }
        return 0;
    }
    int fragmented = seg->nfrags || (seg->bits & WR_S_ATOMIC);
    uint8_t chain[260];
    size_t nchain = 0;
    for (unsigned i = 0; i < seg->next_ext; i++) {
        chain[nchain++] = seg->ext[i];
    }
    if (fragmented) {
        chain[nchain++] = WR_IP6_FRAGMENT;
    }
    chain[nchain++] = proto;
    size_t elen = 40;
    for (unsigned i = 0; i < seg->next_ext; i++) {
        uint8_t *e = h + elen;
        if (seg->ext[i] == WR_IP6_ROUTING) {
            memset(e, 0, 8);
            e[0] = chain[i + 1];
            e[1] = 2;
            e[2] = 4;
            memcpy(e + 8, c->server, 16);
            elen += 24;
        } else {
            memset(e, 0, 8);
            e[0] = chain[i + 1];
            e[2] = 1;
            e[3] = 4;
            elen += 8;
        }
    }
    if (!fragmented) {
        int n = wr_ipv6(h, c->client, c->server, chain[0], elen - 40 + l4len, seg->hops);
        if (n < 0) {
            return n;
        }
        wr_frame(o, 1, h, elen, l4, l4len);
        return 0;
    }
    uint32_t ident = wr_next_ident(c);
    uint8_t *fh = h + elen;
    fh[0] = proto;
    fh[1] = 0;
    wr_be32(fh + 4, ident);
    if (!seg->nfrags) { /* atomic: offset 0, no more fragments */
        wr_be16(fh + 2, 0);
        int n = wr_ipv6(h, c->client, c->server, chain[0], elen - 40 + 8 + l4len, seg->hops);
        if (n < 0) {
            return n;
        }
        wr_frame(o, 1, h, elen + 8, l4, l4len);
        return 0;
    }
    const uint8_t *fp = seg->frags;
    for (unsigned i = 0; i < seg->nfrags; i++) {
        struct wr_frag f;
        fp = wr_next_frag(fp, l4, l4len, &f);
        wr_be16(fh + 2, ((f.off & ~7u) | (unsigned)f.more) & 0xffff);
        int n = wr_ipv6(h, c->client, c->server, chain[0], elen - 40 + 8 + f.clen, seg->hops);
        if (n < 0) {
            return n;
        }
        wr_frame(o, 1, h, elen + 8, f.chunk, f.clen);
    }
    return 0;
}

/* One client segment: c->ts advanced, its transport bytes, its IP packets. */
static int wr_client_seg(struct wr_out *o, struct wr_conn *c, const struct wr_seg *seg,
                         uint8_t proto, int syn)
{
    int rc = wr_room(c, 64 + (size_t)seg->len);
    if (rc < 0) {
        return rc;
    }
    size_t n;
    c->ts++;
    if (proto == 17) {
        n = wr_udp(c->l4, c->client, c->server, c->alen, c->cport, c->sport, seg->data, seg->len);
        if (seg->bits & WR_S_BAD_CHECKSUM) {
            c->l4[6] ^= 0x5a;
            c->l4[7] ^= 0x5a;
        }
        return wr_client_ip(o, c, seg, proto, n);
    }
    uint8_t opts[16];
    size_t olen = 0;
    if (syn) {
        olen = wr_mss_option(opts);
        if (c->timestamps) {
            olen += wr_ts_option(opts + olen, c->ts, 0);
        }
    } else if (c->timestamps) {
        olen = wr_ts_option(opts, c->ts - seg->ts_back, c->ts_echo);
    }
    uint8_t flags = (uint8_t)(seg->flags | (seg->urgent ? WR_URG : 0));
    uint32_t seq = c->cisn + (syn ? 0 : 1 + seg->off) + seg->shift;
    n = wr_tcp(c->l4, c->client, c->server, c->alen, c->cport, c->sport, seq,
               flags & WR_ACK ? c->ack : 0, flags, opts, olen, seg->urgent, seg->data, seg->len);
    if (seg->bits & WR_S_BAD_CHECKSUM) {
        c->l4[16] ^= 0x5a;
        c->l4[17] ^= 0x5a;
    }
    return wr_client_ip(o, c, seg, proto, n);
}

/* A bare client segment (handshake, acknowledgements, FIN). */
static int wr_client_bare(struct wr_out *o, struct wr_conn *c, uint32_t off, uint8_t flags, int syn)
{
    struct wr_seg s = { 0 };
    s.off = off;
    s.flags = flags;
    s.hops = 64;
    return wr_client_seg(o, c, &s, 6, syn);
}

/* One server packet: TCP (with its options) or, when UDP, a datagram of DATA. */
static int wr_server(struct wr_out *o, struct wr_conn *c, uint8_t proto, uint32_t *sseq,
                     uint32_t server_ack, uint8_t flags, const uint8_t *data, size_t dlen, int syn)
{
    uint8_t h[40];
    int rc = wr_room(c, 64 + dlen);
    if (rc < 0) {
        return rc;
    }
    size_t n;
    if (proto == 17) {
        n = wr_udp(c->l4, c->server, c->client, c->alen, c->sport, c->cport, data, dlen);
    } else {
        uint8_t opts[16];
        size_t olen = 0;
        c->ts_echo = c->ts;
        if (syn) {
            olen = wr_mss_option(opts);
        }
        if (c->timestamps) {
            olen += wr_ts_option(opts + olen, c->ts + 1000, c->ts);
        }
        n = wr_tcp(c->l4, c->server, c->client, c->alen, c->sport, c->cport, *sseq, server_ack,
                   flags, opts, olen, 0, data, dlen);
        *sseq += (uint32_t)dlen + ((flags & (WR_SYN | WR_FIN)) ? 1 : 0);
    }
    uint32_t ident = wr_next_ident(c);
    int hl = c->alen == 4 ? wr_ipv4(h, c->server, c->client, proto, n, ident, 64, 0x4000)
                          : wr_ipv6(h, c->server, c->client, proto, n, 64);
    if (hl < 0) {
        return hl;
    }
    wr_frame(o, 0, h, (size_t)hl, c->l4, n);
    return 0;
}

/* --- a session ------------------------------------------------------------------------------ */

/* The segments of a client step, read from the cursor (or the plain ones made): calls FN on each
 * and keeps the stream end they reach in *END. */
static int wr_read_seg(struct wr_cursor *cur, struct wr_seg *s)
{
    const uint8_t *p = wr_take(cur, WR_SEG_LEN);
    if (!p) {
        return -EINVAL;
    }
    s->off = wr_le32(p);
    s->len = wr_le32(p + 4);
    s->shift = wr_le32(p + 8);
    s->ts_back = wr_le32(p + 12);
    s->flags = wr_le16(p + 16);
    s->urgent = wr_le16(p + 18);
    s->nfrags = wr_le16(p + 20);
    s->hops = p[22];
    s->bits = p[23];
    s->next_ext = p[24];
    s->ext = wr_take(cur, s->next_ext);
    s->data = wr_take(cur, s->len);
    s->frags = cur->base + cur->pos;
    for (unsigned i = 0; i < s->nfrags && !cur->bad; i++) {
        const uint8_t *f = wr_take(cur, WR_FRAG_LEN);
        uint32_t fill = f ? wr_le32(f + 8) : 0;
        if (f && fill != WR_NO_FILL) {
            wr_take(cur, fill);
        }
    }
    return cur->bad ? -EINVAL : 0;
}

static int wr_session(struct wr_out *o, struct wr_cursor *cur, struct wr_conn *c)
{
    const uint8_t *h = wr_take(cur, WR_SESSION_LEN);
    if (!h) {
        return -EINVAL;
    }
    uint8_t proto = h[0], family = h[1];
    if ((proto != 6 && proto != 17) || (family != 4 && family != 6)) {
        cur->pos -= WR_SESSION_LEN; /* the error is at the header */
        cur->bad = 1;
        return -EINVAL;
    }
    c->alen = family == 4 ? 4 : 16;
    c->timestamps = h[2] & WR_F_TIMESTAMPS;
    c->cport = wr_le16(h + 4);
    c->sport = wr_le16(h + 6);
    c->cisn = wr_le32(h + 8);
    uint32_t nsteps = wr_le32(h + 12);
    c->client = h + 16;
    c->server = h + 32;
    c->ack = 0;
    c->ts = 1;
    c->ts_echo = 0;
    c->ident = 0;
    uint32_t sseq = c->cisn ^ 0x5a5a5a5au, server_ack = c->cisn + 1, end = 0, coff = 0;
    int rc = 0;
    if (proto == 6) {
        if ((rc = wr_client_bare(o, c, 0, WR_SYN, 1)) < 0 ||
            (rc = wr_server(o, c, 6, &sseq, server_ack, WR_SYN | WR_ACK, NULL, 0, 1)) < 0) {
            return rc;
        }
        c->ack = sseq;
        c->ts_echo = c->ts + 1000;
        if ((rc = wr_client_bare(o, c, 0, WR_ACK, 0)) < 0) {
            return rc;
        }
    }
    for (uint32_t k = 0; k < nsteps; k++) {
        const uint8_t *st = wr_take(cur, WR_STEP_LEN);
        if (!st) {
            return -EINVAL;
        }
        int from_client = st[0];
        uint32_t dlen = wr_le32(st + 4), nsegs = wr_le32(st + 8);
        const uint8_t *data = wr_take(cur, dlen);
        if (!data && dlen) {
            return -EINVAL;
        }
        if (from_client) {
            if (nsegs == WR_PLAIN_SEGS) {
                struct wr_seg s = { 0 };
                s.flags = WR_ACK | WR_PSH;
                s.hops = 64;
                uint32_t step = proto == 6 ? WR_MSS : (dlen ? dlen : 1);
                for (uint32_t i = 0; i < dlen || (proto == 17 && i == 0); i += step) {
                    s.off = coff + i;
                    s.data = data + i;
                    s.len = dlen - i < step ? dlen - i : step;
                    if ((rc = wr_client_seg(o, c, &s, proto, 0)) < 0) {
                        return rc;
                    }
                    if (proto == 6 && s.off + s.len > end) {
                        end = s.off + s.len;
                    }
                }
            } else {
                for (uint32_t i = 0; i < nsegs; i++) {
                    struct wr_seg s;
                    if ((rc = wr_read_seg(cur, &s)) < 0) {
                        return rc;
                    }
                    if ((rc = wr_client_seg(o, c, &s, proto, 0)) < 0) {
                        return rc;
                    }
                    if (!(s.bits & WR_S_SHIFTED) && s.off + s.len > end) {
                        end = s.off + s.len;
                    }
                }
            }
            coff += dlen;
            if (proto == 6) {
                server_ack = c->cisn + 1 + end;
                if ((rc = wr_server(o, c, 6, &sseq, server_ack, WR_ACK, NULL, 0, 0)) < 0) {
                    return rc;
                }
            }
        } else if (proto == 17) {
            if ((rc = wr_server(o, c, 17, &sseq, 0, 0, data, dlen, 0)) < 0) {
                return rc;
            }
        } else {
            for (uint32_t i = 0; i < dlen; i += WR_MSS) {
                uint32_t n = dlen - i < WR_MSS ? dlen - i : WR_MSS;
                rc = wr_server(o, c, 6, &sseq, server_ack, WR_ACK | WR_PSH, data + i, n, 0);
                if (rc < 0) {
                    return rc;
                }
                c->ack = sseq;
                if ((rc = wr_client_bare(o, c, end, WR_ACK, 0)) < 0) {
                    return rc;
                }
            }
        }
    }
    if (proto == 6) {
        if ((rc = wr_client_bare(o, c, end, WR_FIN | WR_ACK, 0)) < 0) {
            return rc;
        }
        server_ack = c->cisn + 2 + end;
        if ((rc = wr_server(o, c, 6, &sseq, server_ack, WR_FIN | WR_ACK, NULL, 0, 0)) < 0) {
            return rc;
        }
        c->ack = sseq;
        if ((rc = wr_client_bare(o, c, end + 1, WR_ACK, 0)) < 0) {
            return rc;
        }
    }
    return 0;
}

int64_t wr_render(const uint8_t *prog, size_t len, uint64_t t_ns, uint64_t pkt_gap_ns,
                  uint64_t session_gap_ns, int nanosecond, uint8_t *out, size_t cap,
                  struct wr_result *res)
{
    struct wr_cursor cur = { prog, 0, len, 0 };
    struct wr_out o = { out, out + cap, t_ns, pkt_gap_ns, nanosecond, 0, 0 };
    struct wr_conn c = { 0 };
    int rc = 0;
    memset(res, 0, sizeof(*res));
    while (cur.pos < cur.len) {
        size_t at = cur.pos;
        rc = wr_session(&o, &cur, &c);
        if (rc == 0 && o.err) {
            rc = o.err;
        }
        if (rc < 0) {
            res->at = cur.bad ? cur.pos : at;
            break;
        }
        o.t += session_gap_ns;
        res->sessions++;
    }
    free(c.l4);
    res->packets = o.packets;
    res->t_ns = o.t;
    if (rc < 0) {
        return rc;
    }
    return (int64_t)(o.p - out);
}

unsigned wr_session_len(void)
{
    return WR_SESSION_LEN;
}
