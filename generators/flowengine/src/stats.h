/* stats.h - per-second CSV, the flow log and the JSON summary. */
#ifndef FE_STATS_H
#define FE_STATS_H

#include <stdint.h>
#include <stdio.h>

#include "packet.h"
#include "session.h"

/* --threads: a worker's per-second rows go to a feed instead of the CSV; the
 * main thread sums the feeds of all workers (engine.c). Single producer,
 * single consumer, no lock: rows are appended to chunks and published by
 * a release store of the chunk's count. Rows of idle seconds are not sent. */
struct stats_row {
    uint64_t sec, packets, bytes, started, finished, late;
};
#define FEED_CHUNK 1024u
struct feed_chunk {
    struct stats_row row[FEED_CHUNK];
    _Atomic uint32_t n;
    struct feed_chunk *_Atomic next;
};
struct stats_feed {
    struct feed_chunk *tail;          /* the worker's */
    struct feed_chunk *rd;            /* the main thread's */
    uint32_t rd_i;
    _Atomic uint64_t passed;          /* every row of a second below it is in the feed */
};
int feed_init(struct stats_feed *f);
void feed_free(struct stats_feed *f);
/* The main thread's next row, or NULL (none published yet). */
const struct stats_row *feed_peek(struct stats_feed *f);
void feed_next(struct stats_feed *f);

struct stats {
    FILE *csv;               /* NULL: rows go to feed */
    struct stats_feed *feed;
    uint64_t sec, sec_end;   /* current virtual second and where it ends (ns) */
    uint64_t packets, bytes, started, finished; /* in the current second */
    uint64_t active;         /* started and not finished, up to now */
    int open_row;            /* the current second has a row to write */
    /* Totals of the seconds already written. */
    uint64_t t_packets, t_bytes, t_started, t_finished;
    int late_col;            /* pacing on: the CSV has a `late` column */
    uint64_t late;           /* late packets found in the current second (afpacket.c) */
    void (*before_row)(void *ctx); /* called before rows are written (releases due frames) */
    void *before_row_ctx;
    int feed_error;          /* a row could not be queued (out of memory) */
};

/* late_col: add the `late` column (pacing on). */
int stats_init(struct stats *st, FILE *csv, int late_col);
/* A worker's statistics: rows go to feed. */
void stats_init_feed(struct stats *st, struct stats_feed *feed, int late_col);
void stats_header(FILE *csv, int late_col);
/* Writes the rows of the seconds before the one of due_ns; 0 or -1 on I/O error. */
int stats_advance(struct stats *st, uint64_t due_ns);
/* Writes the row of the current second, if a packet was sent. */
int stats_end(struct stats *st);

static inline void stats_packet(struct stats *st, uint32_t len)
{
    st->packets++;
    st->bytes += len;
    st->open_row = 1;
}

/* One flow log row. */
int flowlog_header(FILE *fp);
int flowlog_row(FILE *fp, const struct fe_flow *f, const struct fe_inst *in);
/* The same with explicit first and last due times (the stochastic planner's). */
int flowlog_row_at(FILE *fp, const struct fe_flow *f, const struct fe_inst *in, uint64_t first,
                   uint64_t last);

struct summary {
    const char *status;
    int exit_code;
    const char *signal;      /* NULL: JSON null */
    const char *sink;
    uint64_t seed;
    uint64_t packets, bytes, flows_started, flows_finished;
    int has_packets;
    uint64_t first_ns, last_ns;
    double wall_seconds;
    uint64_t errors;
    const char *planner;     /* "exact" or "stochastic" */
    uint64_t peak_rss;       /* VmHWM of the process, bytes (0: unknown) */
    unsigned threads;        /* --threads */
    uint64_t sent, sent_bytes, failed; /* what the sink took (pcap/null: everything) */
    uint64_t late, max_late_ns;        /* pacing: packets sent > --late-ns after due */
    int paced;
};

/* The summary as one JSON line (with '\n'); returns its length. */
size_t summary_json(const struct summary *s, char *buf, size_t size);

#endif
