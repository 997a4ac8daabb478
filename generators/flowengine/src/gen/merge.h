/* merge.h - the main thread's side of --threads: merges the workers' outputs
 * into the one output each of a one-thread run.
 *
 *   pcap records   k-way merge of the workers' merge queues (mq.h) by (due
 *                  time, serial), the README's output order, into the -o sink
 *                  (a serial has one packet per due time, so the packet index
 *                  is never needed); the keys are dropped on the way.
 *   per-second rows  the workers' feeds (feed.h) summed per second, written
 *                  once every worker has passed that second, idle seconds as
 *                  zero rows; active_flows is kept here.
 *   flow logs      the workers' temporary files: finished rows by (last_ns,
 *                  serial) - the order in which one thread writes them - then,
 *                  after each file's "#" marker line, unfinished rows by serial.
 *
 * Every merge takes the workers' sources as an array indexed by worker; each
 * worker's source is in its own order already, so a merge only compares heads.
 *
 * Thread safety: the main thread only; the producers are the workers (the
 * queues and feeds are single-producer single-consumer). */
#ifndef FE_MERGE_H
#define FE_MERGE_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "feed.h"
#include "mq.h"
#include "sink.h"

/* At most this many sources (ENGINE_MAX_THREADS). */
#define MERGE_MAX 256u

/* The per-second CSV of a --threads run. */
struct merge_rows {
    FILE *csv;
    int late_col;             /* pacing on: `late` column */
    uint64_t next;            /* the next second to write */
    uint64_t active;          /* active_flows so far */
    struct feed *const *feed; /* the workers' feeds */
    unsigned n;
};

/* Writes the rows of the seconds every worker has passed (final: all rows
 * left, once the workers are done), gaps included, and flushes after new
 * rows. Returns 0 or a negative errno of the writes. */
int merge_rows_poll(struct merge_rows *m, int final);

/* Merges the records of the n queues into out (a SINK_PCAP sink) until every
 * queue is done. While a queue has nothing published, and every few blocks,
 * calls idle(ctx) (the caller's housekeeping: rows, signals). On a write
 * error sets *stop (the workers stop) and goes on draining the queues, so
 * that no worker waits for a block forever. Returns 0 or the negative errno
 * of the first failed write. */
int merge_pcap(struct sink *out, struct mq *const *q, unsigned n, void (*idle)(void *ctx),
               void *ctx, _Atomic int *stop);

/* Merges the n workers' flow log files (read from their start) into out.
 * Returns 0 or a negative errno (a read, a write, or -ENOMEM). */
int merge_flowlog(FILE *out, FILE *const *in, unsigned n);

#endif
