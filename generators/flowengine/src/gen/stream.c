/* stream.c - the frames file and stream lines (stream.h). */
#define _POSIX_C_SOURCE 200809L
#include "stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "bytes.h"
#include "pcapread.h"
#include "sink.h"

/* Last due time the pcap can carry (as for flow lines, session.c). */
#define STREAM_TIME_LIMIT 4294967296000000000ull
#define LINKTYPE_ETHERNET 1
#define FCS_LEN 4u

static uint32_t crc_table[256]; /* reflected polynomial 0xedb88320 */

static void crc_init(void)
{
    if (crc_table[1])
        return;
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[b] = c;
    }
}

/* The Ethernet FCS / zlib CRC-32 of n bytes. */
static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t r = 0xffffffffu;
    for (size_t k = 0; k < n; k++)
        r = crc_table[(r ^ p[k]) & 0xffu] ^ (r >> 8);
    return ~r;
}

/* A table to fill: the k-th changed position of the frames of length index i,
 * followed by z zero bytes up to the FCS. */
struct fcs_job {
    uint32_t z, i, k;
};

static int cmp_job(const void *a, const void *b)
{
    const struct fcs_job *x = a, *y = b;
    return x->z < y->z ? -1 : x->z > y->z;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* fcs=1: the tables of each distinct frame length, each frame's, and its
 * CRC. The raw CRC of a frame that is zero but for byte d at position p is
 * crc_table[d] carried over the z zero bytes between p and the FCS: a
 * linear map whose column b is bit b carried over them. Taking the jobs in
 * increasing z advances the 32 columns from one z to the next: 32 * max(z)
 * steps in all. 0 or -ENOMEM. */
static int fcs_prepare(struct stream_line *sl)
{
    uint32_t *len = malloc(sl->count * sizeof *len), nl = 0;
    struct fcs_job *job = malloc((size_t)sl->count * sl->npos * sizeof *job);
    if (!len || !job) {
        free(len);
        free(job);
        return -ENOMEM;
    }
    for (uint32_t j = 0; j < sl->count; j++)
        len[j] = sl->tpl[j].len;
    qsort(len, sl->count, sizeof *len, cmp_u32);
    for (uint32_t j = 0; j < sl->count; j++)
        if (!nl || len[nl - 1] != len[j])
            len[nl++] = len[j];
    sl->tabs = malloc(nl * sizeof *sl->tabs);
    if (!sl->tabs) {
        free(len);
        free(job);
        return -ENOMEM;
    }
    size_t nj = 0;
    for (uint32_t i = 0; i < nl; i++)
        for (uint32_t k = 0; k < sl->npos; k++)
            job[nj++] = (struct fcs_job){ len[i] - FCS_LEN - sl->pos[k] - 1, i, k };
    qsort(job, nj, sizeof *job, cmp_job);
    uint32_t col[32], at = 0;
    for (int b = 0; b < 32; b++)
        col[b] = 1u << b;
    for (size_t n = 0; n < nj; n++) {
        for (; at < job[n].z; at++)
            for (int b = 0; b < 32; b++)
                col[b] = crc_table[col[b] & 0xffu] ^ (col[b] >> 8);
        uint32_t *t = sl->tabs[job[n].i][job[n].k];
        for (uint32_t d = 0; d < 256; d++) {
            uint32_t v = crc_table[d], r = 0;
            for (int b = 0; b < 32; b++)
                if (v >> b & 1)
                    r ^= col[b];
            t[d] = r;
        }
    }
    for (uint32_t j = 0; j < sl->count; j++) {
        struct stream_tpl *t = &sl->tpl[j];
        uint32_t lo = 0, hi = nl - 1;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (len[mid] < t->len)
                lo = mid + 1;
            else
                hi = mid;
        }
        t->tab = (const uint32_t(*)[256])sl->tabs[lo];
        t->crc = crc32_of(t->data, t->len - FCS_LEN);
    }
    free(len);
    free(job);
    return 0;
}

void stream_line_free(struct stream_line *sl)
{
    if (sl)
        free(sl->tabs);
    free(sl);
}

void stream_frames_free(struct stream_frames *fr)
{
    free(fr->data);
    free(fr->off);
    free(fr->len);
    free(fr->ipver);
    free(fr->proto);
    free(fr->src_hi);
    free(fr->src_lo);
    free(fr->dst_hi);
    free(fr->dst_lo);
    free(fr->sport);
    free(fr->dport);
    memset(fr, 0, sizeof *fr);
}

int stream_frames_load(struct stream_frames *fr, const char *path, char *why, size_t whylen)
{
    char err[256] = "";
    int rc = -EINVAL;
    memset(fr, 0, sizeof *fr);
    pr_reader *r = pr_open(path, err, sizeof err);
    if (!r) {
        snprintf(why, whylen, "%s", err);
        return errno ? -errno : -EINVAL;
    }
    int64_t n = pr_count(r);
    uint64_t at;
    const char *bad = pr_problem(r, &at);
    if (bad) {
        snprintf(why, whylen, "%s: damaged at byte %" PRIu64 ": %s", path, at, bad);
        goto out;
    }
    size_t m = n > 0 ? (size_t)n : 1;
    int64_t *ts = malloc(m * sizeof *ts);
    uint32_t *wire = malloc(m * sizeof *wire);
    uint16_t *link = malloc(m * sizeof *link);
    uint8_t *flags = malloc(m);
    fr->off = malloc(m * sizeof *fr->off);
    fr->len = malloc(m * sizeof *fr->len);
    fr->ipver = malloc(m);
    fr->proto = malloc(m);
    fr->src_hi = malloc(m * sizeof *fr->src_hi);
    fr->src_lo = malloc(m * sizeof *fr->src_lo);
    fr->dst_hi = malloc(m * sizeof *fr->dst_hi);
    fr->dst_lo = malloc(m * sizeof *fr->dst_lo);
    fr->sport = malloc(m * sizeof *fr->sport);
    fr->dport = malloc(m * sizeof *fr->dport);
    rc = -ENOMEM;
    snprintf(why, whylen, "%s: out of memory for %" PRId64 " frames", path, n);
    if (ts && wire && link && flags && fr->off && fr->len && fr->ipver && fr->proto && fr->src_hi &&
        fr->src_lo && fr->dst_hi && fr->dst_lo && fr->sport && fr->dport) {
        pr_columns c = { .ts_ns = ts,
                         .wire_len = wire,
                         .cap_len = fr->len,
                         .link_type = link,
                         .ip_version = fr->ipver,
                         .proto = fr->proto,
                         .src_hi = fr->src_hi,
                         .src_lo = fr->src_lo,
                         .dst_hi = fr->dst_hi,
                         .dst_lo = fr->dst_lo,
                         .sport = fr->sport,
                         .dport = fr->dport,
                         .tcp_flags = flags };
        size_t got = n > 0 ? pr_read(r, &c, (size_t)n) : 0;
        uint64_t total = 0;
        for (size_t j = 0; j < got; j++) {
            fr->off[j] = total;
            total += fr->len[j];
        }
        fr->data = malloc(total ? total : 1);
        if (got == (size_t)(n > 0 ? n : 0) && fr->data) {
            /* The bytes, record by record, with the checks that name a record. */
            pr_packet p;
            size_t j = 0;
            rc = -EINVAL;
            pr_rewind(r);
            for (;;) {
                uint64_t where = pr_offset(r);
                if (j == got || !pr_next(r, &p))
                    break;
                if (p.link_type != LINKTYPE_ETHERNET) {
                    snprintf(why, whylen,
                             "%s: frame %zu (the record at byte %" PRIu64
                             "): link type %u, but frames must be Ethernet (1)",
                             path, j, where, (unsigned)p.link_type);
                    goto out_cols;
                }
                if (p.cap_len != p.wire_len) {
                    snprintf(why, whylen,
                             "%s: frame %zu (the record at byte %" PRIu64
                             "): %u of its %u bytes captured; every frame must be whole",
                             path, j, where, p.cap_len, p.wire_len);
                    goto out_cols;
                }
                if (p.cap_len < STREAM_MIN_FRAME || p.cap_len > FE_MAX_FRAME) {
                    snprintf(why, whylen,
                             "%s: frame %zu (the record at byte %" PRIu64
                             "): %u bytes; a frame has %u to %u bytes",
                             path, j, where, p.cap_len, STREAM_MIN_FRAME, FE_MAX_FRAME);
                    goto out_cols;
                }
                memcpy(fr->data + fr->off[j], p.data, p.cap_len);
                j++;
            }
            if (j == got) {
                fr->n = got;
                rc = 0;
            } else {
                snprintf(why, whylen, "%s: changed while it was read", path);
            }
        }
    }
out_cols:
    free(ts);
    free(wire);
    free(link);
    free(flags);
out:
    pr_close(r);
    if (rc)
        stream_frames_free(fr);
    return rc;
}

int stream_line_build(struct fe_flow *f, const struct stream_keys *k,
                      const struct stream_frames *fr, char *why, size_t whylen)
{
    if (k->count < 1) {
        snprintf(why, whylen, "count: must be >= 1 (got %" PRIu64 ")", k->count);
        return -EINVAL;
    }
    if (k->first >= fr->n || k->count > fr->n - k->first) {
        snprintf(why, whylen,
                 "count: first + count must not exceed the %zu frames of the frames file "
                 "(got first=%" PRIu64 " count=%" PRIu64 ")",
                 fr->n, k->first, k->count);
        return -EINVAL;
    }
    if (k->packets < 1 || k->packets > STREAM_MAX_PACKETS) {
        snprintf(why, whylen, "packets: must be 1..2^62 (got %" PRIu64 ")", k->packets);
        return -EINVAL;
    }
    if (!k->burst && !k->period) {
        snprintf(why, whylen, "period: must be >= 1 without bursts (got 0 with burst=0)");
        return -EINVAL;
    }
    /* Due times never go back: a burst starts after the previous one's last packet. */
    if (k->burst > 1 && k->period &&
        (k->burst - 1 > UINT64_MAX / k->period || k->burst_period < (k->burst - 1) * k->period)) {
        snprintf(why, whylen,
                 "burst_period: must be at least (burst - 1) * period, the length of a burst, "
                 "so that due times never go back (got burst_period=%" PRIu64 " burst=%" PRIu64
                 " period=%" PRIu64 ")",
                 k->burst_period, k->burst, k->period);
        return -EINVAL;
    }
    /* The last due time, with overflow checks, against the pcap's 32-bit seconds. */
    uint64_t n = k->packets - 1, a = n, b = k->period, c = 0, last = k->start;
    if (k->burst) {
        a = n / k->burst;
        b = k->burst_period;
        c = (n % k->burst) * k->period; /* < burst * period <= burst_period + period */
        if (k->period && n % k->burst > UINT64_MAX / k->period)
            c = UINT64_MAX;
    }
    int over = last >= STREAM_TIME_LIMIT || c >= STREAM_TIME_LIMIT - last;
    if (!over) {
        last += c;
        over = a && b > (STREAM_TIME_LIMIT - 1 - last) / a;
    }
    if (over) {
        snprintf(
            why, whylen,
            "start: the last packet must be due before 2^32 s, the pcap limit (got start=%" PRIu64
            " packets=%" PRIu64 " period=%" PRIu64 " burst=%" PRIu64 " burst_period=%" PRIu64 ")",
            k->start, k->packets, k->period, k->burst, k->burst_period);
        return -EINVAL;
    }

    uint32_t mn = UINT32_MAX, mx = 0, jmin = 0;
    for (uint64_t j = k->first; j < k->first + k->count; j++) {
        if (fr->len[j] < mn) {
            mn = fr->len[j];
            jmin = (uint32_t)j;
        }
        if (fr->len[j] > mx)
            mx = fr->len[j];
    }
    if (k->seq_off != STREAM_NONE && (uint64_t)k->seq_off + 4 > mn) {
        snprintf(why, whylen,
                 "seq_off: the 4-byte field at %u does not fit frame %u (%u bytes); it must be "
                 "inside every frame of the stream",
                 k->seq_off, jmin, mn);
        return -EINVAL;
    }
    if (k->csum_off != STREAM_NONE) {
        if (k->seq_off == STREAM_NONE) {
            snprintf(why, whylen,
                     "csum_off: needs seq_off (nothing else changes; got csum_off=%u seq_off=-)",
                     k->csum_off);
            return -EINVAL;
        }
        if ((uint64_t)k->csum_off + 2 > mn) {
            snprintf(why, whylen,
                     "csum_off: the 2-byte field at %u does not fit frame %u (%u bytes); it must "
                     "be inside every frame of the stream",
                     k->csum_off, jmin, mn);
            return -EINVAL;
        }
        if ((k->seq_off - k->csum_off) & 1) {
            snprintf(why, whylen,
                     "csum_off: seq_off - csum_off must be even, so that the patched field is "
                     "whole 16-bit words of the checksum (got seq_off=%u csum_off=%u)",
                     k->seq_off, k->csum_off);
            return -EINVAL;
        }
        if (k->csum_off + 2 > k->seq_off && k->csum_off < k->seq_off + 4) {
            snprintf(why, whylen,
                     "csum_off: the checksum overlaps the sequence field (got seq_off=%u "
                     "csum_off=%u)",
                     k->seq_off, k->csum_off);
            return -EINVAL;
        }
    }

    if (k->fcs > 1) {
        snprintf(why, whylen, "fcs: must be 0 or 1 (got %" PRIu64 ")", k->fcs);
        return -EINVAL;
    }
    /* fcs=1: the window the patch changes, which must end before the FCS. */
    uint32_t w0 = k->seq_off, w1 = k->seq_off + 4;
    if (k->csum_off != STREAM_NONE) {
        w0 = k->csum_off < w0 ? k->csum_off : w0;
        w1 = k->csum_off + 2 > w1 ? k->csum_off + 2 : w1;
    }
    if (k->fcs && k->seq_off != STREAM_NONE && (uint64_t)w1 + FCS_LEN > mn) {
        snprintf(why, whylen,
                 "fcs: the patched fields (bytes %u..%u) overlap the FCS of frame %u (%u bytes: "
                 "its FCS is bytes %u..%u)",
                 w0, w1 - 1, jmin, mn, mn - FCS_LEN, mn - 1);
        return -EINVAL;
    }

    struct stream_line *sl = calloc(1, sizeof *sl + k->count * sizeof sl->tpl[0]);
    if (!sl) {
        snprintf(why, whylen, "stream: out of memory");
        return -ENOMEM;
    }
    sl->burst = k->burst;
    sl->burst_period = k->burst_period;
    sl->first = (uint32_t)k->first;
    sl->count = (uint32_t)k->count;
    sl->seq_off = k->seq_off;
    sl->csum_off = k->csum_off;
    sl->min_len = mn;
    sl->max_len = mx;
    sl->fcs = k->fcs && k->seq_off != STREAM_NONE; /* nothing changes without seq_off */
    if (sl->fcs) {
        for (uint32_t b = 0; b < 4; b++)
            sl->pos[sl->npos++] = k->seq_off + b;
        for (uint32_t b = 0; k->csum_off != STREAM_NONE && b < 2; b++)
            sl->pos[sl->npos++] = k->csum_off + b;
    }
    for (uint32_t j = 0; j < sl->count; j++) {
        struct stream_tpl *t = &sl->tpl[j];
        size_t x = sl->first + j;
        t->data = fr->data + fr->off[x];
        t->len = fr->len[x];
        t->csum_base = 0;
        if (k->csum_off != STREAM_NONE) {
            const uint8_t *d = t->data;
            t->csum_base = (uint32_t)(uint16_t)~get16(d + k->csum_off) +
                           (uint16_t)~get16(d + k->seq_off) + (uint16_t)~get16(d + k->seq_off + 2);
        }
    }
    if (sl->fcs) {
        crc_init();
        if (fcs_prepare(sl)) {
            stream_line_free(sl);
            snprintf(why, whylen, "stream: out of memory");
            return -ENOMEM;
        }
    }

    f->kind = FE_K_STREAM;
    f->stream = sl;
    f->start = k->start;
    f->period = k->period;
    f->packets = k->packets;
    f->reps = 1;
    f->rep_period = 0;
    f->size_lo = mn;
    f->size_hi = mx;
    f->hdr_len = 0;
    f->max_live = 1;
    /* The flow log's columns: what pcapread made of the first frame. */
    size_t j0 = sl->first;
    f->af = fr->ipver[j0];
    f->proto = f->af ? fr->proto[j0] : 0;
    memset(f->src, 0, sizeof f->src);
    memset(f->dst, 0, sizeof f->dst);
    uint64_t sw[2] = { fr->src_hi[j0], fr->src_lo[j0] }, dw[2] = { fr->dst_hi[j0], fr->dst_lo[j0] };
    for (int i = 0; i < 16; i++) {
        f->src[i] = (uint8_t)(sw[i / 8] >> (56 - 8 * (i % 8)));
        f->dst[i] = (uint8_t)(dw[i / 8] >> (56 - 8 * (i % 8)));
    }
    if (f->af == 4) {
        memmove(f->src, f->src + 12, 4);
        memmove(f->dst, f->dst + 12, 4);
    }
    f->sport_lo = f->sport_hi = fr->sport[j0];
    f->dport_lo = f->dport_hi = fr->dport[j0];
    return 0;
}

uint64_t stream_due(const struct fe_flow *f, uint64_t i)
{
    const struct stream_line *sl = f->stream;
    if (!sl->burst)
        return f->start + i * f->period;
    return f->start + (i / sl->burst) * sl->burst_period + (i % sl->burst) * f->period;
}

void stream_endpoints(const struct fe_flow *f, char *src, char *dst, unsigned *sport,
                      unsigned *dport)
{
    src[0] = dst[0] = 0;
    if (f->af == 4 || f->af == 6) {
        inet_ntop(f->af == 4 ? AF_INET : AF_INET6, f->src, src, 46);
        inet_ntop(f->af == 4 ? AF_INET : AF_INET6, f->dst, dst, 46);
    }
    *sport = f->sport_lo;
    *dport = f->dport_lo;
}
