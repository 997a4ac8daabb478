/* mq.h - a --threads worker's merge queue: its pcap records on their way to
 * the main thread, which merges all workers' records into the one -o file.
 *
 * Single producer (the worker, through a sink of kind SINK_MQ), single
 * consumer (the main thread's merge, merge.h), no lock. Records go into
 * 1 MiB blocks; a record is the instance serial (8 bytes, host order)
 * followed by the pcap record (16-byte header and the frame), in the worker's
 * own (due, serial) order. The producer publishes a full block by advancing
 * `prod` (release); the consumer hands a block back by advancing `cons`
 * (release). With all MQ_NBLK blocks published the producer waits, until the
 * consumer hands one back or `*stop` is set.
 *
 * Thread safety: mq_init, mq_free: one thread, while neither end is in use.
 * mq_open_sink and the sink's calls: the producer thread only. mq_read: the
 * consumer thread only. */
#ifndef FE_MQ_H
#define FE_MQ_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sink.h"

#define MQ_NBLK 8u
#define MQ_BLK (1u << 20)

struct mq {
    uint8_t *blk[MQ_NBLK];
    size_t len[MQ_NBLK];         /* bytes of a published block */
    _Atomic uint64_t prod, cons; /* blocks published / handed back */
    _Atomic int done;            /* the producer published its last block */
    _Atomic int *stop;           /* set: the producer stops waiting for a block */
};

/* Allocates the blocks; stop is the flag that ends a producer's wait.
 * Returns 0 or -ENOMEM (then nothing is left allocated). */
int mq_init(struct mq *q, _Atomic int *stop);
/* Frees the blocks; q must be mq_init'ed or zeroed. */
void mq_free(struct mq *q);

/* Makes s the producer end of q (kind SINK_MQ). Flushing publishes the
 * current block; it fails with -ECANCELED when *stop was set while waiting
 * for a free block. Closing publishes the last block and marks q done. */
void mq_open_sink(struct sink *s, struct mq *q);

/* The consumer's position: the block it holds and its read pointer. */
struct mq_reader {
    const uint8_t *p, *end; /* unread records of the held block */
    int holding;            /* a block is held (to hand back) */
};

enum { MQ_EMPTY, MQ_READY, MQ_END };

/* The consumer's next records: when r has unread records, MQ_READY at once;
 * else hands the held block back and takes the next published one (MQ_READY),
 * or reports MQ_EMPTY (none published yet) or MQ_END (the producer is done
 * and everything was read). */
int mq_read(struct mq *q, struct mq_reader *r);

#endif
