/* pcapread.c — classic pcap and pcapng into columns; see pcapread.h for the contract. */
#define _DEFAULT_SOURCE /* madvise */

#include "pcapread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PCAP_HDR_LEN 24
#define PCAP_REC_LEN 16
/* libpcap refuses larger records; a bigger length is the usual sign of a corrupt header. */
#define PCAP_MAX_CAPLEN 262144u
#define PCAP_MAX_SNAPLEN (1u << 26)

/* Records are found by chasing lengths, which the hardware prefetcher follows poorly: the reader
 * streams every cache line this far ahead of the record it is on. */
#define PR_PREFETCH 2048

#define PNG_SHB 0x0A0D0D0Au
#define PNG_IDB 0x00000001u
#define PNG_OPB 0x00000002u
#define PNG_SPB 0x00000003u
#define PNG_EPB 0x00000006u
#define PNG_BOM 0x1A2B3C4Du

#define LT_NULL 0
#define LT_ETHERNET 1
#define LT_RAW_BSD 12
#define LT_RAW_OPENBSD 14
#define LT_RAW 101
#define LT_LOOP 108
#define LT_SLL 113
#define LT_IPV4 228
#define LT_IPV6 229
#define LT_SLL2 276

enum { TS_MUL, TS_DIV, TS_SHIFT };

typedef struct pr_iface {
    uint16_t link;
    uint32_t snaplen;
    uint8_t kind; /* TS_MUL, TS_DIV or TS_SHIFT: how units become nanoseconds */
    uint8_t shift;
    uint64_t factor;
    uint64_t units;    /* units per second, for pr_ts_units */
    int64_t offset_ns; /* if_tsoffset */
} pr_iface;

typedef struct pr_cursor {
    uint64_t off;
    int swap; /* pcapng: byte order of the current section */
    pr_iface *ifs;
    uint32_t nifs, capifs;
    int64_t last_ts; /* simple packet blocks carry no time: they inherit this one */
} pr_cursor;

typedef struct pr_rec {
    const uint8_t *data;
    uint32_t caplen, wirelen;
    int64_t ts;
    uint16_t link;
} pr_rec;

struct pr_reader {
    const uint8_t *map;
    uint64_t size;
    int format;
    int swap;         /* classic pcap: file byte order differs from ours */
    uint32_t frac_ns; /* classic pcap: nanoseconds per fraction unit (1000 or 1) */
    uint32_t maxcap;
    uint32_t link;
    uint64_t units;
    uint64_t start; /* offset of the first record / block after the file header */
    pr_cursor cur;
    uint64_t released; /* the map before this offset is dropped from the process (pr_release) */
    int failed;
    uint64_t fail_off;
    uint64_t nexts; /* pr_next calls, for its page release */
    char why[320];
};

static inline uint16_t rd16(const uint8_t *p, int swap)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return swap ? __builtin_bswap16(v) : v;
}

static inline uint32_t rd32(const uint8_t *p, int swap)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return swap ? __builtin_bswap32(v) : v;
}

static inline uint64_t rd64(const uint8_t *p, int swap)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return swap ? __builtin_bswap64(v) : v;
}

static inline uint16_t be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t be64(const uint8_t *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

static void pr_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Record the first problem; the cursor stays on the bad record so that reading again stops
 * at the same place. Always returns -1. */
static int pr_fail(pr_reader *r, pr_cursor *c, uint64_t off, const char *fmt, ...)
{
    va_list ap;
    c->off = off;
    if (r->failed && r->fail_off <= off)
        return -1;
    r->failed = 1;
    r->fail_off = off;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return -1;
}

static inline void pr_stream(const uint8_t **pf, const uint8_t *p, const uint8_t *end)
{
    const uint8_t *want = end - p > PR_PREFETCH ? p + PR_PREFETCH : end;
    for (; *pf < want; *pf += 64)
        __builtin_prefetch(*pf);
}

/* ---- dissection ------------------------------------------------------------------------ */

static inline void pr_dissect(uint16_t lt, const uint8_t *d, uint32_t len, const pr_columns *c,
                              size_t i)
{
    uint64_t shi = 0, slo = 0, dhi = 0, dlo = 0;
    uint16_t sp = 0, dp = 0, et = 0, vlan = 0, icmp = 0;
    uint8_t ver = 0, proto = 0, flags = 0, frag = 0;
    uint32_t off = 0, fam, l3len = 0, l3hdr = 0, l4hdr = 0, payload = 0;

    switch (lt) {
    case LT_ETHERNET:
        if (len < 14)
            goto out;
        et = be16(d + 12);
        off = 14;
        for (int tags = 0; tags < 2 && (et == 0x8100 || et == 0x88a8); tags++) {
            if (len < off + 4)
                goto out;
            if (tags == 0)
                vlan = be16(d + off) & 0x0fff;
            et = be16(d + off + 2);
            off += 4;
        }
        break;
    case LT_SLL:
        if (len < 16)
            goto out;
        et = be16(d + 14);
        off = 16;
        break;
    case LT_SLL2:
        if (len < 20)
            goto out;
        et = be16(d);
        off = 20;
        break;
    case LT_RAW:
    case LT_RAW_BSD:
    case LT_RAW_OPENBSD:
        if (len < 1)
            goto out;
        et = (d[0] >> 4) == 4 ? 0x0800 : (d[0] >> 4) == 6 ? 0x86dd : 0;
        break;
    case LT_IPV4:
        et = 0x0800;
        break;
    case LT_IPV6:
        et = 0x86dd;
        break;
    case LT_NULL:
    case LT_LOOP:
        if (len < 4)
            goto out;
        if (lt == LT_LOOP) {
            fam = be32(d);
        } else {
            /* written in the capturing host's byte order: a family fits in 16 bits */
            memcpy(&fam, d, 4);
            if (fam > 0xffff)
                fam = __builtin_bswap32(fam);
        }
        et = fam == 2 ? 0x0800 : (fam == 24 || fam == 28 || fam == 30) ? 0x86dd : 0;
        off = 4;
        break;
    default:
        goto out;
    }

    d += off;
    len -= off;
    if (et == 0x0800) {
        if (len < 20 || (d[0] >> 4) != 4)
            goto out;
        uint32_t ihl = (uint32_t)(d[0] & 15) * 4;
        uint16_t fo = be16(d + 6);
        ver = 4;
        proto = d[9];
        l3len = be16(d + 2);
        slo = be32(d + 12);
        dlo = be32(d + 16);
        frag = (fo & 0x1fff) ? 2 : (fo & 0x2000) ? 1 : 0;
        if (ihl < 20 || ihl > len || frag == 2)
            goto out; /* later fragments: no L4 */
        l3hdr = ihl;
        d += ihl;
        len -= ihl;
    } else if (et == 0x86dd) {
        if (len < 40 || (d[0] >> 4) != 6)
            goto out;
        ver = 6;
        proto = d[6];
        l3len = 40 + (uint32_t)be16(d + 4);
        shi = be64(d + 8);
        slo = be64(d + 16);
        dhi = be64(d + 24);
        dlo = be64(d + 32);
        d += 40;
        len -= 40;
        l3hdr = 40;
        for (int hops = 0; hops < 8; hops++) {
            uint32_t hl;
            if (proto == 0 || proto == 43 || proto == 60 || proto == 135) {
                if (len < 8)
                    goto out;
                hl = ((uint32_t)d[1] + 1) * 8;
            } else if (proto == 51) {
                if (len < 8)
                    goto out;
                hl = ((uint32_t)d[1] + 2) * 4;
            } else if (proto == 44) {
                if (len < 8)
                    goto out;
                if (be16(d + 2) & 0xfff8) {
                    proto = d[0];
                    frag = 2;
                    goto out;
                }
                frag = be16(d + 2) & 1; /* offset 0: first, or an atomic fragment */
                hl = 8;
            } else {
                break;
            }
            if (hl > len)
                goto out;
            proto = d[0];
            d += hl;
            len -= hl;
            l3hdr += hl;
        }
    } else {
        goto out;
    }

    switch (proto) {
    case 6:
        if (len >= 14) {
            flags = d[13];
            l4hdr = (uint32_t)(d[12] >> 4) * 4; /* below 20: not a valid TCP header */
            if (l4hdr < 20)
                l4hdr = 0;
        }
        /* fall through */
    case 17:
    case 33:
    case 132:
    case 136:
        if (len >= 4) {
            sp = be16(d);
            dp = be16(d + 2);
        }
        if (proto == 17 && len >= 8)
            l4hdr = 8;
        if (l4hdr >= 8 && l3len >= l3hdr + l4hdr)
            payload = l3len - l3hdr - l4hdr;
        break;
    case 1:
        if (len >= 2)
            icmp = (uint16_t)(d[0] << 8 | d[1]);
        if (len >= 8 && (d[0] == 8 || d[0] == 0))
            sp = be16(d + 4);
        break;
    case 58:
        if (len >= 2)
            icmp = (uint16_t)(d[0] << 8 | d[1]);
        if (len >= 8 && (d[0] == 128 || d[0] == 129))
            sp = be16(d + 4);
        break;
    default:
        break;
    }

out:
    c->ip_version[i] = ver;
    c->proto[i] = proto;
    c->src_hi[i] = shi;
    c->src_lo[i] = slo;
    c->dst_hi[i] = dhi;
    c->dst_lo[i] = dlo;
    c->sport[i] = sp;
    c->dport[i] = dp;
    c->tcp_flags[i] = flags;
    if (c->vlan)
        c->vlan[i] = vlan;
    if (c->l3_len)
        c->l3_len[i] = l3len;
    if (c->frag)
        c->frag[i] = frag;
    if (c->icmp_type)
        c->icmp_type[i] = icmp;
    if (c->l4_payload)
        c->l4_payload[i] = payload;
}

/* ---- classic pcap ---------------------------------------------------------------------- */

/* The captured length of the record at OFF; -1 at the end of the file or on a problem. */
static inline int64_t pcap_check(pr_reader *r, pr_cursor *c, uint64_t off)
{
    uint64_t left = r->size - off;
    if (left >= PCAP_REC_LEN) {
        uint32_t n = rd32(r->map + off + 8, r->swap);
        if (n <= r->maxcap && n <= left - PCAP_REC_LEN)
            return n;
        if (n > r->maxcap)
            return pr_fail(r, c, off,
                           "record header says %u captured bytes, more than the limit %u: "
                           "the file is corrupt from here",
                           n, r->maxcap);
        return pr_fail(r, c, off,
                       "truncated record: the header says %u captured bytes but only %llu "
                       "remain in the file",
                       n, (unsigned long long)(left - PCAP_REC_LEN));
    }
    if (left == 0)
        return -1;
    return pr_fail(r, c, off, "truncated record header: %llu bytes left, a header needs 16",
                   (unsigned long long)left);
}

static int64_t pcap_count(pr_reader *r)
{
    pr_cursor c = { .off = r->start };
    const uint8_t *pf = r->map + c.off, *end = r->map + r->size;
    int64_t n = 0, caplen;
    while ((caplen = pcap_check(r, &c, c.off)) >= 0) {
        pr_stream(&pf, r->map + c.off, end);
        c.off += PCAP_REC_LEN + (uint64_t)caplen;
        n++;
    }
    return n;
}

static size_t pcap_read(pr_reader *r, const pr_columns *c, size_t cap)
{
    const uint8_t *m = r->map;
    const int sw = r->swap;
    const int64_t frac = r->frac_ns;
    const uint16_t lt = (uint16_t)r->link;
    const uint8_t *pf = m + r->cur.off, *end = m + r->size;
    uint64_t off = r->cur.off;
    int64_t caplen;
    size_t n = 0;

    while (n < cap && (caplen = pcap_check(r, &r->cur, off)) >= 0) {
        const uint8_t *p = m + off;
        pr_stream(&pf, p, end);
        c->ts_ns[n] = (int64_t)rd32(p, sw) * 1000000000 + (int64_t)rd32(p + 4, sw) * frac;
        c->wire_len[n] = rd32(p + 12, sw);
        c->cap_len[n] = (uint32_t)caplen;
        c->link_type[n] = lt;
        pr_dissect(lt, p + PCAP_REC_LEN, (uint32_t)caplen, c, n);
        off += PCAP_REC_LEN + (uint64_t)caplen;
        n++;
    }
    r->cur.off = off;
    return n;
}

/* ---- pcapng ---------------------------------------------------------------------------- */

static int png_tsresol(pr_iface *f, uint8_t v)
{
    uint32_t e = v & 0x7f;
    uint64_t p = 1;
    if (v & 0x80) {
        if (e > 63)
            return -1;
        f->kind = TS_SHIFT;
        f->shift = (uint8_t)e;
        f->units = (uint64_t)1 << e;
        return 0;
    }
    if (e > 18)
        return -1;
    for (uint32_t k = 0; k < (e > 9 ? e - 9 : 9 - e); k++)
        p *= 10;
    f->kind = e > 9 ? TS_DIV : TS_MUL;
    f->factor = p;
    f->units = 1;
    for (uint32_t k = 0; k < e; k++)
        f->units *= 10;
    return 0;
}

static int png_add_iface(pr_reader *r, pr_cursor *c, uint64_t off, const uint8_t *b, uint32_t blen)
{
    pr_iface f = { .kind = TS_MUL, .factor = 1000, .units = 1000000 };
    if (blen < 8)
        return pr_fail(r, c, off, "interface description block too short (%u bytes)", blen);
    f.link = rd16(b, c->swap);
    f.snaplen = rd32(b + 4, c->swap);
    /* Options are read leniently: one that runs past the block ends the list. */
    for (uint32_t o = 8; o + 4 <= blen;) {
        uint16_t code = rd16(b + o, c->swap), olen = rd16(b + o + 2, c->swap);
        const uint8_t *v = b + o + 4;
        if (code == 0 || o + 4 + olen > blen)
            break;
        if (code == 9 && olen >= 1 && png_tsresol(&f, v[0]) < 0)
            return pr_fail(r, c, off, "interface description block: unsupported if_tsresol 0x%02x",
                           v[0]);
        if (code == 14 && olen >= 8)
            f.offset_ns = (int64_t)(rd64(v, c->swap) * 1000000000u);
        o += 4 + ((olen + 3u) & ~3u);
    }
    if (c->nifs == c->capifs) {
        uint32_t ncap = c->capifs ? c->capifs * 2 : 8;
        pr_iface *n = realloc(c->ifs, ncap * sizeof *n);
        if (!n)
            return pr_fail(r, c, off, "out of memory for the interface table");
        c->ifs = n;
        c->capifs = ncap;
    }
    c->ifs[c->nifs++] = f;
    if (!r->units) {
        r->link = f.link;
        r->units = f.units;
    }
    return 0;
}

/* Unsigned arithmetic: a corrupt timestamp wraps around instead of overflowing a signed value. */
static inline int64_t png_ts(const pr_iface *f, uint64_t t)
{
    uint64_t ns;
    if (f->kind == TS_MUL) {
        ns = t * f->factor;
    } else if (f->kind == TS_DIV) {
        ns = t / f->factor;
    } else {
#ifdef __SIZEOF_INT128__
        __extension__ unsigned __int128 w = (unsigned __int128)t * 1000000000u;
        ns = (uint64_t)(w >> f->shift);
#else
        ns = (uint64_t)((long double)t * 1e9L / (long double)((uint64_t)1 << f->shift));
#endif
    }
    return (int64_t)(ns + (uint64_t)f->offset_ns);
}

/* 1: a packet in *REC; 0: end of file; -1: problem recorded. */
static int png_next(pr_reader *r, pr_cursor *c, pr_rec *rec)
{
    const uint8_t *m = r->map;
    for (;;) {
        uint64_t off = c->off, left = r->size - off;
        if (left == 0)
            return 0;
        if (left < 12)
            return pr_fail(r, c, off, "truncated block: %llu bytes left, a block needs at least 12",
                           (unsigned long long)left);
        uint32_t type = rd32(m + off, c->swap);
        if (type == PNG_SHB) {
            uint32_t bom;
            if (left < 28)
                return pr_fail(r, c, off, "truncated section header block: %llu bytes left",
                               (unsigned long long)left);
            memcpy(&bom, m + off + 8, 4);
            if (bom != PNG_BOM && bom != __builtin_bswap32(PNG_BOM))
                return pr_fail(r, c, off, "section header block with a bad byte-order magic 0x%08x",
                               bom);
            c->swap = bom != PNG_BOM;
            c->nifs = 0;
        }
        uint32_t len = rd32(m + off + 4, c->swap);
        if (len < 12 || len % 4)
            return pr_fail(r, c, off,
                           "block of type 0x%08x has length %u (must be a multiple of 4 and at "
                           "least 12): the file is corrupt from here",
                           type, len);
        if (len > left)
            return pr_fail(r, c, off,
                           "truncated block of type 0x%08x: its length is %u but only %llu bytes "
                           "remain in the file",
                           type, len, (unsigned long long)left);
        if (rd32(m + off + len - 4, c->swap) != len)
            return pr_fail(r, c, off,
                           "block of type 0x%08x: trailing length %u differs from the leading "
                           "length %u",
                           type, rd32(m + off + len - 4, c->swap), len);

        const uint8_t *b = m + off + 8;
        uint32_t blen = len - 12, ifid, caplen;
        const pr_iface *f;
        c->off = off + len;
        switch (type) {
        case PNG_IDB:
            if (png_add_iface(r, c, off, b, blen) < 0)
                return -1;
            continue;
        case PNG_EPB:
        case PNG_OPB:
            if (blen < 20)
                return pr_fail(r, c, off, "packet block too short (%u bytes)", len);
            ifid = type == PNG_EPB ? rd32(b, c->swap) : rd16(b, c->swap);
            caplen = rd32(b + 12, c->swap);
            if (ifid >= c->nifs)
                return pr_fail(r, c, off,
                               "packet for interface %u, but this section defines %u interface(s)",
                               ifid, c->nifs);
            if (caplen > blen - 20)
                return pr_fail(r, c, off, "packet block says %u captured bytes but has room for %u",
                               caplen, blen - 20);
            f = &c->ifs[ifid];
            rec->ts = png_ts(f, (uint64_t)rd32(b + 4, c->swap) << 32 | rd32(b + 8, c->swap));
            rec->caplen = caplen;
            rec->wirelen = rd32(b + 16, c->swap);
            rec->data = b + 20;
            rec->link = f->link;
            c->last_ts = rec->ts;
            return 1;
        case PNG_SPB:
            if (blen < 4)
                return pr_fail(r, c, off, "simple packet block too short (%u bytes)", len);
            if (c->nifs == 0)
                return pr_fail(r, c, off,
                               "simple packet block before any interface description block");
            f = &c->ifs[0];
            rec->wirelen = rd32(b, c->swap);
            caplen = rec->wirelen < blen - 4 ? rec->wirelen : blen - 4;
            if (f->snaplen && caplen > f->snaplen)
                caplen = f->snaplen;
            rec->caplen = caplen;
            rec->ts = c->last_ts;
            rec->data = b + 4;
            rec->link = f->link;
            return 1;
        default:
            continue;
        }
    }
}

static int64_t png_count(pr_reader *r)
{
    pr_cursor c = { .off = r->start };
    const uint8_t *pf = r->map + c.off, *end = r->map + r->size;
    pr_rec rec;
    int64_t n = 0;
    while (png_next(r, &c, &rec) == 1) {
        pr_stream(&pf, r->map + c.off, end);
        n++;
    }
    free(c.ifs);
    return n;
}

static size_t png_read(pr_reader *r, const pr_columns *c, size_t cap)
{
    const uint8_t *pf = r->map + r->cur.off, *end = r->map + r->size;
    pr_rec rec;
    size_t n = 0;
    while (n < cap && png_next(r, &r->cur, &rec) == 1) {
        pr_stream(&pf, r->map + r->cur.off, end);
        c->ts_ns[n] = rec.ts;
        c->wire_len[n] = rec.wirelen;
        c->cap_len[n] = rec.caplen;
        c->link_type[n] = rec.link;
        pr_dissect(rec.link, rec.data, rec.caplen, c, n);
        n++;
    }
    return n;
}

/* ---- public ---------------------------------------------------------------------------- */

static int pr_header(pr_reader *r, const char *path, char *err, size_t errlen)
{
    const uint8_t *m = r->map;
    uint32_t magic;

    if (r->size < 4) {
        pr_seterr(err, errlen, "%s: %llu bytes, too short for a pcap or pcapng file header", path,
                  (unsigned long long)r->size);
        return -1;
    }
    memcpy(&magic, m, 4);
    if (magic == PNG_SHB) {
        uint32_t bom;
        if (r->size < 28) {
            pr_seterr(err, errlen, "%s: pcapng section header block truncated (%llu bytes)", path,
                      (unsigned long long)r->size);
            return -1;
        }
        memcpy(&bom, m + 8, 4);
        if (bom != PNG_BOM && bom != __builtin_bswap32(PNG_BOM)) {
            pr_seterr(err, errlen, "%s: starts like pcapng but the byte-order magic is 0x%08x",
                      path, bom);
            return -1;
        }
        r->format = PR_FORMAT_PCAPNG;
        r->start = 0;
        /* Walk to the first packet so that the file's link type and resolution are known. */
        pr_cursor c = { .off = 0 };
        pr_rec rec;
        png_next(r, &c, &rec);
        free(c.ifs);
        return 0;
    }

    uint32_t sw = __builtin_bswap32(magic);
    if (magic == 0xa1b2c3d4u || sw == 0xa1b2c3d4u) {
        r->frac_ns = 1000;
        r->units = 1000000;
    } else if (magic == 0xa1b23c4du || sw == 0xa1b23c4du) {
        r->frac_ns = 1;
        r->units = 1000000000;
    } else {
        pr_seterr(err, errlen,
                  "%s: not a pcap or pcapng file (first bytes %02x %02x %02x %02x; expected the "
                  "pcap magic a1b2c3d4/a1b23c4d in either byte order or the pcapng block type "
                  "0a0d0d0a)",
                  path, m[0], m[1], m[2], m[3]);
        return -1;
    }
    if (r->size < PCAP_HDR_LEN) {
        pr_seterr(err, errlen, "%s: pcap file header truncated (%llu of 24 bytes)", path,
                  (unsigned long long)r->size);
        return -1;
    }
    r->format = PR_FORMAT_PCAP;
    r->swap = magic != 0xa1b2c3d4u && magic != 0xa1b23c4du;
    r->link = rd32(m + 20, r->swap) & 0xffff;
    uint32_t snap = rd32(m + 16, r->swap);
    r->maxcap = snap > PCAP_MAX_CAPLEN && snap <= PCAP_MAX_SNAPLEN ? snap : PCAP_MAX_CAPLEN;
    r->start = PCAP_HDR_LEN;
    return 0;
}

pr_reader *pr_open(const char *path, char *err, size_t errlen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        pr_seterr(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0) {
        pr_seterr(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        pr_seterr(err, errlen, "%s: %s", path,
                  S_ISDIR(st.st_mode) ? "is a directory, not a capture file"
                                      : "not a regular file (the reader maps the file)");
        close(fd);
        return NULL;
    }
    pr_reader *r = calloc(1, sizeof *r);
    if (!r) {
        pr_seterr(err, errlen, "%s: out of memory", path);
        close(fd);
        return NULL;
    }
    r->size = (uint64_t)st.st_size;
    if (r->size > 0) {
        void *m = mmap(NULL, r->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            pr_seterr(err, errlen, "%s: cannot map the file: %s", path, strerror(errno));
            close(fd);
            free(r);
            return NULL;
        }
        madvise(m, r->size, MADV_SEQUENTIAL);
        r->map = m;
    }
    close(fd);
    if (pr_header(r, path, err, errlen) < 0) {
        pr_close(r);
        return NULL;
    }
    pr_rewind(r);
    return r;
}

void pr_close(pr_reader *r)
{
    if (!r)
        return;
    if (r->map)
        munmap((void *)r->map, r->size);
    free(r->cur.ifs);
    free(r);
}

unsigned pr_column_count(void)
{
    _Static_assert(sizeof(pr_columns) == PR_COLUMN_COUNT * sizeof(void *),
                   "PR_COLUMN_COUNT is not the number of columns of pr_columns");
    return PR_COLUMN_COUNT;
}

int pr_format(const pr_reader *r)
{
    return r->format;
}
uint32_t pr_link_type(const pr_reader *r)
{
    return r->link;
}
uint64_t pr_ts_units(const pr_reader *r)
{
    return r->units;
}
uint64_t pr_size(const pr_reader *r)
{
    return r->size;
}
uint64_t pr_offset(const pr_reader *r)
{
    return r->cur.off;
}

void pr_rewind(pr_reader *r)
{
    r->cur.off = r->start;
    r->released = 0;
    r->cur.swap = 0;
    r->cur.nifs = 0;
    r->cur.last_ts = 0;
}

int64_t pr_count(pr_reader *r)
{
    return r->format == PR_FORMAT_PCAP ? pcap_count(r) : png_count(r);
}

/* The pages wholly before the cursor have been read: drop them from this process's mapping, so
 * that its resident memory is the part being read rather than the whole file (a file larger than
 * memory is read in bounded memory; the pages stay in the page cache, and a rewind faults them in
 * again). Nothing keeps a pointer into the map across calls: records are copied into columns. */
static void pr_release(pr_reader *r)
{
    static uint64_t page;
    if (!page)
        page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t upto = r->cur.off & ~(page - 1);
    if (r->map && upto > r->released) {
        madvise((void *)(r->map + r->released), upto - r->released, MADV_DONTNEED);
        r->released = upto;
    }
}

#define PR_RELEASE_EVERY 65536 /* packets read between two releases: at most ~100 MB of file */

/* A NULL optional column stays NULL. */
#define PR_AT(col, k) ((col) ? (col) + (k) : NULL)

static pr_columns pr_shift(const pr_columns *c, size_t k)
{
    pr_columns s = {
        .ts_ns = c->ts_ns + k,
        .wire_len = c->wire_len + k,
        .cap_len = c->cap_len + k,
        .link_type = c->link_type + k,
        .ip_version = c->ip_version + k,
        .proto = c->proto + k,
        .src_hi = c->src_hi + k,
        .src_lo = c->src_lo + k,
        .dst_hi = c->dst_hi + k,
        .dst_lo = c->dst_lo + k,
        .sport = c->sport + k,
        .dport = c->dport + k,
        .tcp_flags = c->tcp_flags + k,
        .vlan = PR_AT(c->vlan, k),
        .l3_len = PR_AT(c->l3_len, k),
        .frag = PR_AT(c->frag, k),
        .icmp_type = PR_AT(c->icmp_type, k),
        .l4_payload = PR_AT(c->l4_payload, k),
    };
    return s;
}

size_t pr_read(pr_reader *r, const pr_columns *c, size_t capacity)
{
    size_t n = 0;
    while (n < capacity) {
        size_t want = capacity - n < PR_RELEASE_EVERY ? capacity - n : PR_RELEASE_EVERY;
        pr_columns at = pr_shift(c, n);
        size_t got = r->format == PR_FORMAT_PCAP ? pcap_read(r, &at, want) : png_read(r, &at, want);
        n += got;
        pr_release(r);
        if (got < want)
            break;
    }
    return n;
}

int pr_next(pr_reader *r, pr_packet *p)
{
    /* Release before moving: the previous packet's pages may go, this one's stay mapped. */
    if (++r->nexts % PR_RELEASE_EVERY == 0)
        pr_release(r);
    if (r->format == PR_FORMAT_PCAP) {
        uint64_t off = r->cur.off;
        int64_t caplen = pcap_check(r, &r->cur, off);
        if (caplen < 0)
            return 0;
        const uint8_t *h = r->map + off;
        p->data = h + PCAP_REC_LEN;
        p->cap_len = (uint32_t)caplen;
        p->wire_len = rd32(h + 12, r->swap);
        p->ts_ns =
            (int64_t)rd32(h, r->swap) * 1000000000 + (int64_t)rd32(h + 4, r->swap) * r->frac_ns;
        p->link_type = (uint16_t)r->link;
        r->cur.off = off + PCAP_REC_LEN + (uint64_t)caplen;
        return 1;
    }
    pr_rec rec;
    if (png_next(r, &r->cur, &rec) != 1)
        return 0;
    p->data = rec.data;
    p->cap_len = rec.caplen;
    p->wire_len = rec.wirelen;
    p->ts_ns = rec.ts;
    p->link_type = rec.link;
    return 1;
}

const char *pr_problem(const pr_reader *r, uint64_t *offset)
{
    if (!r->failed)
        return NULL;
    if (offset)
        *offset = r->fail_off;
    return r->why;
}
