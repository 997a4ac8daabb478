/* merge.c - the main thread's merges of the workers' outputs (merge.h). */
#define _POSIX_C_SOURCE 200809L
#include "merge.h"
#include "stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* After a failed stdio call: its errno, as a negative errno (never 0). */
static int io_error(void)
{
    return errno ? -errno : -EIO;
}

static void nap(long ns)
{
    struct timespec ts = { 0, ns };
    nanosleep(&ts, NULL);
}

/* ---- per-second rows ----------------------------------------------------- */

static void put_row(struct merge_rows *m, const struct feed_row *r)
{
    m->active += r->started - r->finished;
    stats_row(m->csv, r->sec, r->packets, r->bytes, r->started, r->finished, m->active, m->late_col,
              r->late);
}

int merge_rows_poll(struct merge_rows *m, int final)
{
    uint64_t lim = UINT64_MAX;
    int wrote = 0;
    if (!final)
        for (unsigned i = 0; i < m->n; i++) {
            uint64_t p = atomic_load_explicit(&m->feed[i]->passed, memory_order_acquire);
            if (p < lim)
                lim = p;
        }
    for (;;) {
        uint64_t smin = UINT64_MAX;
        for (unsigned i = 0; i < m->n; i++) {
            const struct feed_row *r = feed_peek(m->feed[i]);
            if (r && r->sec < smin)
                smin = r->sec;
        }
        if (smin == UINT64_MAX || smin >= lim)
            break;
        stats_idle(m->csv, m->next, smin, m->active, m->late_col);
        struct feed_row t = { smin, 0, 0, 0, 0, 0 };
        for (unsigned i = 0; i < m->n; i++) {
            const struct feed_row *r;
            while ((r = feed_peek(m->feed[i])) && r->sec == smin) {
                t.packets += r->packets;
                t.bytes += r->bytes;
                t.started += r->started;
                t.finished += r->finished;
                t.late += r->late;
                feed_next(m->feed[i]);
            }
        }
        put_row(m, &t);
        m->next = smin + 1;
        wrote = 1;
    }
    if (wrote && fflush(m->csv))
        return io_error();
    return ferror(m->csv) ? io_error() : 0;
}

/* ---- pcap records --------------------------------------------------------- */

/* A queue's head record: state HEAD_NONE (nothing published yet), HEAD_SET
 * (key in kdue, kser) or HEAD_END (the queue is exhausted). */
enum { HEAD_NONE, HEAD_SET, HEAD_END };

struct pcap_head {
    struct mq_reader rd;
    int state;
    uint64_t kdue, kser;
};

/* The key (due time, serial) of the record at p. */
static inline void head_key(struct pcap_head *h, const uint8_t *p)
{
    uint32_t sec, nsec;
    memcpy(&h->kser, p, 8);
    memcpy(&sec, p + 8, 4);
    memcpy(&nsec, p + 12, 4);
    h->kdue = (uint64_t)sec * 1000000000u + nsec;
}

/* Loads the next head of queue q: HEAD_SET, HEAD_NONE or HEAD_END. */
static int head_load(struct pcap_head *h, struct mq *q)
{
    switch (mq_read(q, &h->rd)) {
    case MQ_READY:
        head_key(h, h->rd.p);
        return HEAD_SET;
    case MQ_END:
        return HEAD_END;
    }
    return HEAD_NONE;
}

static inline int head_before(const struct pcap_head *a, const struct pcap_head *b)
{
    return a->kdue < b->kdue || (a->kdue == b->kdue && a->kser < b->kser);
}

int merge_pcap(struct sink *out, struct mq *const *q, unsigned n, void (*idle)(void *ctx),
               void *ctx, _Atomic int *stop)
{
    struct pcap_head hd[MERGE_MAX];
    int rc = 0;
    uint64_t since = 0;
    memset(hd, 0, n * sizeof *hd);
    for (;;) {
        int waiting = 0;
        for (unsigned i = 0; i < n; i++)
            if (hd[i].state == HEAD_NONE && (hd[i].state = head_load(&hd[i], q[i])) == HEAD_NONE)
                waiting = 1;
        if (waiting) {
            idle(ctx);
            nap(20000);
            continue;
        }
        /* The best head and the runner-up (pointers: with one worker ahead
         * only for a record or two, this selection runs about once per
         * record). */
        struct pcap_head *x = NULL, *y = NULL;
        for (struct pcap_head *h = hd; h < hd + n; h++) {
            if (h->state != HEAD_SET)
                continue;
            if (!x || head_before(h, x)) {
                y = x;
                x = h;
            } else if (!y || head_before(h, y)) {
                y = h;
            }
        }
        if (!x)
            break;
        const uint64_t yd = y ? y->kdue : UINT64_MAX, ys = y ? y->kser : UINT64_MAX;
        /* Records of x up to the runner-up's key. */
        const uint8_t *p = x->rd.p, *const end = x->rd.end;
        for (;;) {
            uint32_t len;
            memcpy(&len, p + 16, 4);
            if (!rc && (rc = sink_put(out, p + 8, SINK_PCAP_REC + (size_t)len)))
                atomic_store(stop, 1); /* the workers stop; the merge drains them */
            p += SINK_MQ_REC + len;
            if (p >= end) {
                x->state = HEAD_NONE;
                if (++since >= 4) {
                    since = 0;
                    idle(ctx);
                }
                break;
            }
            head_key(x, p);
            if (x->kdue > yd || (x->kdue == yd && x->kser > ys))
                break;
        }
        x->rd.p = p;
    }
    return rc;
}

/* ---- flow logs ------------------------------------------------------------ */

struct flog_head {
    char *line;
    size_t cap;
    int has, eof;
    uint64_t k1, k2; /* (last_ns, serial) or, after the marker, (serial, serial) */
};

/* Reads a file's next line of the current part: finished rows keyed
 * (last_ns, serial), after the marker unfinished rows keyed serial. */
static void flog_next(struct flog_head *h, FILE *fp, int part)
{
    h->has = 0;
    if (h->eof)
        return;
    ssize_t len = getline(&h->line, &h->cap, fp);
    if (len < 0) {
        h->eof = 1;
        return;
    }
    if (h->line[0] == '#')
        return;
    const char *p = h->line;
    uint64_t serial = strtoull(p, NULL, 10), last = 0;
    for (int f = 0; f < 10 && p; f++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (p)
        last = strtoull(p, NULL, 10);
    h->k1 = part ? serial : last;
    h->k2 = serial;
    h->has = 1;
}

static int flog_merge(FILE *out, FILE *const *in, unsigned n, struct flog_head *hd)
{
    for (unsigned i = 0; i < n; i++)
        if (fflush(in[i]) || fseek(in[i], 0, SEEK_SET))
            return io_error();
    for (int part = 0; part < 2; part++) {
        for (unsigned i = 0; i < n; i++)
            flog_next(&hd[i], in[i], part);
        for (;;) {
            int b = -1;
            for (unsigned i = 0; i < n; i++)
                if (hd[i].has &&
                    (b < 0 || hd[i].k1 < hd[b].k1 || (hd[i].k1 == hd[b].k1 && hd[i].k2 < hd[b].k2)))
                    b = (int)i;
            if (b < 0)
                break;
            if (fputs(hd[b].line, out) < 0)
                return io_error();
            flog_next(&hd[b], in[b], part);
        }
    }
    for (unsigned i = 0; i < n; i++)
        if (ferror(in[i]))
            return io_error();
    return ferror(out) ? io_error() : 0;
}

int merge_flowlog(FILE *out, FILE *const *in, unsigned n)
{
    struct flog_head hd[MERGE_MAX];
    memset(hd, 0, n * sizeof *hd);
    int rc = flog_merge(out, in, n, hd);
    for (unsigned i = 0; i < n; i++)
        free(hd[i].line);
    return rc;
}
