/* stats.h - per-second statistics (README, "Per-second statistics").
 *
 * The loop counts every packet of the current virtual second; when a packet
 * of a later second is due it writes the rows of the seconds passed (idle
 * ones included, as zero rows: stats_idle) and flushes, so a reader sees
 * progress. With
 * --threads a worker's rows go to its feed (feed.h) instead and the main
 * thread writes the CSV (merge.h).
 *
 * Thread safety: a struct stats belongs to one thread (the loop's). */
#ifndef FE_STATS_H
#define FE_STATS_H

#include <stdint.h>
#include <stdio.h>

#include "feed.h"

struct stats {
    FILE *csv; /* NULL: rows go to feed */
    struct feed *feed;
    uint64_t sec, sec_end;                      /* current virtual second and where it ends (ns) */
    uint64_t packets, bytes, started, finished; /* in the current second */
    uint64_t active;                            /* started and not finished, up to now */
    int open_row;                               /* the current second has a row to write */
    /* Totals of the seconds already written. */
    uint64_t t_packets, t_bytes, t_started, t_finished;
    int late_col;  /* pacing on: the CSV has a `late` column */
    uint64_t late; /* late packets found in the current second (afpacket.c) */
    /* Called before rows are written: a live sender releases the frames that
     * are due, so their lateness is known (afpacket.c). NULL: none. */
    void (*before_row)(void *ctx);
    void *before_row_ctx;
    int feed_err; /* 0, or -ENOMEM: a row could not be queued */
};

/* A pause of more than this many idle seconds in a row is written as its
 * first and its last second only (README, "Per-second statistics"): a
 * scenario that pauses for years would otherwise write a row per second. */
#define STATS_IDLE_ROWS 3600u

/* Writes the CSV header: `second,...,active_flows` (and `,late` with late_col). */
void stats_header(FILE *csv, int late_col);
/* Writes one row under that header: the one format of a second, used by the
 * one-thread run here and by the main thread's merge of the workers' rows. */
void stats_row(FILE *csv, uint64_t sec, uint64_t packets, uint64_t bytes, uint64_t started,
               uint64_t finished, uint64_t active, int late_col, uint64_t late);
/* Writes the zero rows of the idle seconds [from, to) (active flows
 * `active`): every one, or for more than STATS_IDLE_ROWS of them the first and
 * the last. Shared by the one-thread loop and the --threads merge. */
void stats_idle(FILE *csv, uint64_t from, uint64_t to, uint64_t active, int late_col);
/* Statistics written to csv, header included (and flushed). late_col: add
 * the `late` column (pacing on). Returns 0 or a negative errno of the write. */
int stats_init(struct stats *st, FILE *csv, int late_col);
/* A worker's statistics: rows go to feed, nothing is written. */
void stats_init_feed(struct stats *st, struct feed *feed, int late_col);
/* The loop reached due_ns (>= st->sec_end): writes the rows of the seconds
 * before its second and flushes. Returns 0, a negative errno of the write,
 * or -ENOMEM (feed). */
int stats_advance(struct stats *st, uint64_t due_ns);
/* At the end: writes the row of the current second, if it has anything, and
 * flushes. Returns 0, a negative errno of the write, or -ENOMEM (feed). */
int stats_end(struct stats *st);

/* Counts one packet of len frame bytes in the current second. */
static inline void stats_packet(struct stats *st, uint32_t len)
{
    st->packets++;
    st->bytes += len;
    st->open_row = 1;
}

#endif
