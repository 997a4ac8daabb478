/* stats.c - per-second statistics (stats.h). */
#define _POSIX_C_SOURCE 200809L
#include "stats.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define NS_PER_SEC 1000000000ull

/* After a failed stdio call: its errno, as a negative errno (never 0). */
static int io_error(void)
{
    return errno ? -errno : -EIO;
}

void stats_header(FILE *csv, int late_col)
{
    fputs(late_col ? "second,packets,bytes,flows_started,flows_finished,active_flows,late\n"
                   : "second,packets,bytes,flows_started,flows_finished,active_flows\n",
          csv);
}

void stats_row(FILE *csv, uint64_t sec, uint64_t packets, uint64_t bytes, uint64_t started,
               uint64_t finished, uint64_t active, int late_col, uint64_t late)
{
    fprintf(csv, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, sec,
            packets, bytes, started, finished, active);
    if (late_col)
        fprintf(csv, ",%" PRIu64, late);
    fputc('\n', csv);
}

void stats_idle(FILE *csv, uint64_t from, uint64_t to, uint64_t active, int late_col)
{
    if (to > from && to - from > STATS_IDLE_ROWS) {
        stats_row(csv, from, 0, 0, 0, 0, active, late_col, 0);
        from = to - 1;
    }
    for (; from < to; from++)
        stats_row(csv, from, 0, 0, 0, 0, active, late_col, 0);
}

int stats_init(struct stats *st, FILE *csv, int late_col)
{
    memset(st, 0, sizeof *st);
    st->csv = csv;
    st->sec_end = NS_PER_SEC;
    st->late_col = late_col;
    stats_header(csv, late_col);
    return fflush(csv) ? io_error() : 0;
}

void stats_init_feed(struct stats *st, struct feed *feed, int late_col)
{
    memset(st, 0, sizeof *st);
    st->feed = feed;
    st->sec_end = NS_PER_SEC;
    st->late_col = late_col;
}

static void write_row(struct stats *st)
{
    if (st->feed) {
        if (st->packets || st->started || st->finished || st->late) {
            struct feed_row r = { st->sec,     st->packets,  st->bytes,
                                  st->started, st->finished, st->late };
            int rc = feed_push(st->feed, &r);
            if (rc)
                st->feed_err = rc;
        }
        goto totals;
    }
    st->active += st->started - st->finished;
    stats_row(st->csv, st->sec, st->packets, st->bytes, st->started, st->finished, st->active,
              st->late_col, st->late);
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
    if (st->sec < target) {
        write_row(st); /* the current second; the rest are idle */
        if (!st->feed)
            stats_idle(st->csv, st->sec + 1, target, st->active, st->late_col);
        st->sec = target;
    }
    st->sec_end = (target + 1) * NS_PER_SEC;
    st->open_row = 0;
    if (st->feed) {
        atomic_store_explicit(&st->feed->passed, target, memory_order_release);
        return st->feed_err;
    }
    return fflush(st->csv) || ferror(st->csv) ? io_error() : 0;
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
        return st->feed_err;
    }
    return fflush(st->csv) || ferror(st->csv) ? io_error() : 0;
}
