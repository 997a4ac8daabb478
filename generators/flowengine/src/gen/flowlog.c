/* flowlog.c - flow log rows (flowlog.h). */
#define _POSIX_C_SOURCE 200809L
#include "flowlog.h"

#include <errno.h>
#include <string.h>

#include "stream.h"

/* After a failed stdio call: its errno, as a negative errno (never 0). */
static int io_error(void)
{
    return errno ? -errno : -EIO;
}

/* snprintf costs more than the rest of a row: integers by hand. */
static char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

int flowlog_header(FILE *fp, int ext)
{
    fputs("serial,flow,rep,af,proto,src,dst,sport,dport,first_ns,last_ns,packets,bytes", fp);
    fputs(ext ? ",s_packets,s_bytes,c_payload,s_payload\n" : "\n", fp);
    return ferror(fp) ? io_error() : 0;
}

int flowlog_row(FILE *fp, const struct fe_flow *f, const struct fe_inst *in, int ext)
{
    if (f->kind == FE_K_STREAM)
        return flowlog_row_at(fp, f, in, f->start, stream_due(f, in->sent ? in->sent - 1 : 0), ext);
    uint64_t first = f->start + (in->serial - f->offset) * f->rep_period;
    return flowlog_row_at(fp, f, in, first, first + (in->sent ? in->sent - 1 : 0) * f->period, ext);
}

/* The columns every row has, up to bytes. */
static char *row_head(char *p, const struct fe_flow *f, const struct fe_inst *in, const char *src,
                      const char *dst, unsigned sport, unsigned dport, uint64_t first,
                      uint64_t last);

int flowlog_row_at(FILE *fp, const struct fe_flow *f, const struct fe_inst *in, uint64_t first,
                   uint64_t last, int ext)
{
    char row[320], src[48], dst[48], *p = row;
    unsigned sport, dport;

    if (f->kind == FE_K_STREAM)
        stream_endpoints(f, src, dst, &sport, &dport);
    else
        packet_endpoints(f, in, src, dst, &sport, &dport);
    p = row_head(p, f, in, src, dst, sport, dport, first, last);
    if (ext) {
        /* One direction: no server packets; the payload is what follows the
         * headers (a stream line's frames are opaque: 0). */
        p = put_str(p, ",0,0,");
        p = put_u64(p, f->kind == FE_K_STREAM ? 0 : in->bytes - in->sent * f->hdr_len);
        p = put_str(p, ",0");
    }
    *p++ = '\n';
    return fwrite(row, 1, (size_t)(p - row), fp) == (size_t)(p - row) ? 0 : io_error();
}

int flowlog_row_sess(FILE *fp, const struct fe_flow *f, const struct fe_inst *in,
                     const struct sess_state *ss)
{
    char row[320], src[48], dst[48], *p = row;
    unsigned sport, dport;

    sess_endpoints(f, ss, src, dst, &sport, &dport);
    p = row_head(p, f, in, src, dst, sport, dport, ss->start, in->sent ? ss->last : ss->start);
    *p++ = ',';
    p = put_u64(p, ss->pk[1]);
    *p++ = ',';
    p = put_u64(p, ss->sbytes);
    *p++ = ',';
    p = put_u64(p, ss->pay[0]);
    *p++ = ',';
    p = put_u64(p, ss->pay[1]);
    *p++ = '\n';
    return fwrite(row, 1, (size_t)(p - row), fp) == (size_t)(p - row) ? 0 : io_error();
}

static char *row_head(char *p, const struct fe_flow *f, const struct fe_inst *in, const char *src,
                      const char *dst, unsigned sport, unsigned dport, uint64_t first,
                      uint64_t last)
{
    uint64_t rep = in->serial - f->offset;
    p = put_u64(p, in->serial);
    *p++ = ',';
    p = put_u64(p, in->flow);
    *p++ = ',';
    p = put_u64(p, rep);
    *p++ = ',';
    p = put_u64(p, f->af);
    *p++ = ',';
    p = put_u64(p, f->proto);
    *p++ = ',';
    p = put_str(p, src);
    *p++ = ',';
    p = put_str(p, dst);
    *p++ = ',';
    p = put_u64(p, sport);
    *p++ = ',';
    p = put_u64(p, dport);
    *p++ = ',';
    p = put_u64(p, first);
    *p++ = ',';
    p = put_u64(p, last);
    *p++ = ',';
    p = put_u64(p, in->sent);
    *p++ = ',';
    p = put_u64(p, in->bytes);
    return p;
}
