/* stats.c - per-second statistics, flow log, summary. */
#define _POSIX_C_SOURCE 200809L
#include "stats.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_SEC 1000000000ull

void stats_header(FILE *csv, int late_col)
{
    fputs(late_col ? "second,packets,bytes,flows_started,flows_finished,active_flows,late\n"
                   : "second,packets,bytes,flows_started,flows_finished,active_flows\n", csv);
}

int stats_init(struct stats *st, FILE *csv, int late_col)
{
    memset(st, 0, sizeof *st);
    st->csv = csv;
    st->sec_end = NS_PER_SEC;
    st->late_col = late_col;
    stats_header(csv, late_col);
    return fflush(csv) ? -1 : 0;
}

void stats_init_feed(struct stats *st, struct stats_feed *feed, int late_col)
{
    memset(st, 0, sizeof *st);
    st->feed = feed;
    st->sec_end = NS_PER_SEC;
    st->late_col = late_col;
}

int feed_init(struct stats_feed *f)
{
    memset(f, 0, sizeof *f);
    f->tail = f->rd = calloc(1, sizeof *f->tail);
    return f->tail ? 0 : -1;
}

void feed_free(struct stats_feed *f)
{
    struct feed_chunk *c = f->rd;
    while (c) {
        struct feed_chunk *n = atomic_load(&c->next);
        free(c);
        c = n;
    }
    f->rd = f->tail = NULL;
}

const struct stats_row *feed_peek(struct stats_feed *f)
{
    struct feed_chunk *c = f->rd;
    if (!c)
        return NULL;
    if (f->rd_i == FEED_CHUNK) {
        struct feed_chunk *n = atomic_load_explicit(&c->next, memory_order_acquire);
        if (!n)
            return NULL;
        free(c);
        f->rd = c = n;
        f->rd_i = 0;
    }
    return f->rd_i < atomic_load_explicit(&c->n, memory_order_acquire) ? &c->row[f->rd_i] : NULL;
}

void feed_next(struct stats_feed *f)
{
    f->rd_i++;
}

/* -1: out of memory. */
static int feed_push(struct stats_feed *f, const struct stats_row *r)
{
    struct feed_chunk *c = f->tail;
    uint32_t n = atomic_load_explicit(&c->n, memory_order_relaxed);
    if (n == FEED_CHUNK) {
        struct feed_chunk *nc = calloc(1, sizeof *nc);
        if (!nc)
            return -1;
        atomic_store_explicit(&c->next, nc, memory_order_release);
        f->tail = c = nc;
        n = 0;
    }
    c->row[n] = *r;
    atomic_store_explicit(&c->n, n + 1, memory_order_release);
    return 0;
}

static void write_row(struct stats *st)
{
    if (st->feed) {
        if (st->packets || st->started || st->finished || st->late) {
            struct stats_row r = { st->sec, st->packets, st->bytes, st->started, st->finished,
                                   st->late };
            if (feed_push(st->feed, &r))
                st->feed_error = 1;
        }
        goto totals;
    }
    st->active += st->started - st->finished;
    fprintf(st->csv, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64,
            st->sec, st->packets, st->bytes, st->started, st->finished, st->active);
    if (st->late_col)
        fprintf(st->csv, ",%" PRIu64, st->late);
    fputc('\n', st->csv);
totals:
    st->late = 0;
    st->t_packets += st->packets;
    st->t_bytes += st->bytes;
    st->t_started += st->started;
    st->t_finished += st->finished;
    st->packets = st->bytes = st->started = st->finished = 0;
}

int stats_advance(struct stats *st, uint64_t due_ns)
{
    uint64_t target = due_ns / NS_PER_SEC;
    if (st->before_row)
        st->before_row(st->before_row_ctx);
    /* A second is over only once a later packet is due: the rows of idle
     * seconds are written then, so none is written past the last packet. */
    while (st->sec < target) {
        write_row(st);
        st->sec++;
    }
    st->sec_end = (target + 1) * NS_PER_SEC;
    st->open_row = 0;
    if (st->feed) {
        atomic_store_explicit(&st->feed->passed, target, memory_order_release);
        return st->feed_error ? -1 : 0;
    }
    return fflush(st->csv) || ferror(st->csv) ? -1 : 0;
}

int stats_end(struct stats *st)
{
    if (st->before_row)
        st->before_row(st->before_row_ctx);
    if (st->open_row || st->started || st->finished)
        write_row(st);
    st->open_row = 0;
    if (st->feed) {
        atomic_store_explicit(&st->feed->passed, UINT64_MAX, memory_order_release);
        return st->feed_error ? -1 : 0;
    }
    return fflush(st->csv) || ferror(st->csv) ? -1 : 0;
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

int flowlog_header(FILE *fp)
{
    fputs("serial,flow,rep,af,proto,src,dst,sport,dport,first_ns,last_ns,packets,bytes\n", fp);
    return ferror(fp) ? -1 : 0;
}

int flowlog_row(FILE *fp, const struct fe_flow *f, const struct fe_inst *in)
{
    uint64_t first = f->start + (in->serial - f->offset) * f->rep_period;
    return flowlog_row_at(fp, f, in, first,
                          first + (in->sent ? in->sent - 1 : 0) * f->period);
}

int flowlog_row_at(FILE *fp, const struct fe_flow *f, const struct fe_inst *in, uint64_t first,
                   uint64_t last)
{
    char row[256], src[48], dst[48], *p = row;
    unsigned sport, dport;
    uint64_t rep = in->serial - f->offset;

    packet_endpoints(f, in, src, dst, &sport, &dport);
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
    *p++ = '\n';
    return fwrite(row, 1, (size_t)(p - row), fp) == (size_t)(p - row) ? 0 : -1;
}

size_t summary_json(const struct summary *s, char *buf, size_t size)
{
    char sig[32] = "null", first[24] = "null", last[24] = "null";
    double mpps = s->wall_seconds > 0 ? (double)s->packets / s->wall_seconds / 1e6 : 0.0;

    if (s->signal)
        snprintf(sig, sizeof sig, "\"%s\"", s->signal);
    if (s->has_packets) {
        snprintf(first, sizeof first, "%" PRIu64, s->first_ns);
        snprintf(last, sizeof last, "%" PRIu64, s->last_ns);
    }
    int n = snprintf(buf, size,
                     "{\"status\": \"%s\", \"exit_code\": %d, \"signal\": %s, \"sink\": \"%s\", "
                     "\"seed\": %" PRIu64 ", \"packets\": %" PRIu64 ", \"bytes\": %" PRIu64 ", "
                     "\"flows_started\": %" PRIu64 ", \"flows_finished\": %" PRIu64 ", "
                     "\"first_ns\": %s, \"last_ns\": %s, \"wall_seconds\": %.6f, "
                     "\"mpps\": %.3f, \"errors\": %" PRIu64 ", \"sent\": %" PRIu64 ", "
                     "\"sent_bytes\": %" PRIu64 ", \"failed\": %" PRIu64 ", \"pace\": \"%s\", "
                     "\"late\": %" PRIu64 ", \"max_late_ns\": %" PRIu64 ", "
                     "\"planner\": \"%s\", \"peak_rss_bytes\": %" PRIu64 ", \"threads\": %u}\n",
                     s->status, s->exit_code, sig, s->sink, s->seed, s->packets, s->bytes,
                     s->flows_started, s->flows_finished, first, last, s->wall_seconds, mpps,
                     s->errors, s->sent, s->sent_bytes, s->failed,
                     s->paced == 1 ? "realtime" : s->paced == 2 ? "topspeed" : "none", s->late,
                     s->max_late_ns, s->planner ? s->planner : "exact", s->peak_rss,
                     s->threads ? s->threads : 1);
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}
