/* feed.h - a --threads worker's per-second rows on their way to the main
 * thread, which sums the feeds of all workers into the one CSV (merge.h).
 *
 * Single producer (the worker's statistics, stats.h), single consumer (the
 * main thread), no lock: rows are appended to chunks of FEED_CHUNK and
 * published by a release store of the chunk's count; a full chunk links a new
 * one. The producer also publishes `passed`, the second below which all its
 * rows are in the feed, so the consumer knows which seconds are complete.
 *
 * Thread safety: feed_init and feed_free: one thread, while neither end is in
 * use. feed_push and stores to `passed`: the producer. feed_peek, feed_next:
 * the consumer. */
#ifndef FE_FEED_H
#define FE_FEED_H

#include <stdatomic.h>
#include <stdint.h>

/* One second of one worker (idle seconds are not sent). */
struct feed_row {
    uint64_t sec, packets, bytes, started, finished, late;
};

#define FEED_CHUNK 1024u
struct feed_chunk {
    struct feed_row row[FEED_CHUNK];
    _Atomic uint32_t n;              /* rows published */
    struct feed_chunk *_Atomic next; /* set when this chunk is full */
};

struct feed {
    struct feed_chunk *tail; /* the producer's */
    struct feed_chunk *rd;   /* the consumer's */
    uint32_t rd_i;
    _Atomic uint64_t passed; /* every row of a second below it is in the feed */
};

/* An empty feed. Returns 0 or -ENOMEM. */
int feed_init(struct feed *f);
/* Frees every chunk left; f must be feed_init'ed or zeroed. */
void feed_free(struct feed *f);
/* Appends and publishes a row. Returns 0 or -ENOMEM (the row is lost). */
int feed_push(struct feed *f, const struct feed_row *r);
/* The consumer's next row, or NULL when none is published yet. The row stays
 * valid until the next feed_peek after feed_next. */
const struct feed_row *feed_peek(struct feed *f);
/* Consumes the row feed_peek returned. */
void feed_next(struct feed *f);

#endif
