/* pcapout.h - packet sinks: a nanosecond pcap file, or nothing (--null). */
#ifndef FE_PCAPOUT_H
#define FE_PCAPOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef PCAP_BUF_SIZE
#define PCAP_BUF_SIZE (4u << 20)
#endif

struct sink {
    int fd;                 /* -1 for the null sink */
    int error;              /* errno of the first failed write, sticky */
    uint8_t *buf;           /* pcap: records waiting for write(2); null: one frame */
    size_t used, cap;
    uint64_t file_bytes;    /* bytes handed to the kernel */
    struct txhook *hook;    /* live sending / pacing (afpacket.h), or NULL */
    struct mqueue *mq;      /* --threads with -o: records go to the merge queue */
    uint64_t key;           /* mq: serial of the frame being built (paced sinks) */
};

/* --threads with -o: a worker's records, in its own (due, serial) order, go
 * in blocks through a single-producer single-consumer ring to the main
 * thread, which merges the workers' records into the one pcap. A record in a
 * block is the instance serial (8 bytes, host order) followed by the pcap
 * record (16-byte header and the frame). No lock: the worker publishes a full
 * block by advancing `prod` (release), the main thread hands it back by
 * advancing `cons`. */
#define MQ_NBLK 8u
#define MQ_BLK (1u << 20)
struct mqueue {
    uint8_t *blk[MQ_NBLK];
    size_t len[MQ_NBLK];
    _Atomic uint64_t prod, cons;   /* blocks published / handed back */
    _Atomic int done;              /* the worker published its last block */
    _Atomic int *stop;             /* set: stop waiting for a free block */
};

int mq_init(struct mqueue *q, _Atomic int *stop);
void mq_free(struct mqueue *q);
/* The worker's sink writes keyed records into q (sink_frame_k). */
void sink_open_mq(struct sink *s, struct mqueue *q);

struct txhook;
uint8_t *txhook_frame(struct sink *s, uint64_t due_ns, uint32_t len);
int txhook_close(struct sink *s);

int sink_open_pcap(struct sink *s, const char *path);
int sink_open_null(struct sink *s);
int sink_flush(struct sink *s);
/* Flushes and closes; returns -1 (errno in s->error) if anything failed. */
int sink_close(struct sink *s);

/* Room for one frame of len bytes stamped ts_ns; NULL on a write error. The
 * null sink hands out the same scratch frame every time. */
static inline uint8_t *sink_frame(struct sink *s, uint64_t ts_ns, uint32_t len)
{
    if (s->hook)
        return txhook_frame(s, ts_ns, len);
    if (s->fd < 0)
        return s->buf;
    if (s->cap - s->used < 16 + (size_t)len && sink_flush(s))
        return NULL;
    uint8_t *p = s->buf + s->used;
    uint32_t rec[4] = { (uint32_t)(ts_ns / 1000000000u), (uint32_t)(ts_ns % 1000000000u),
                        len, len };
    memcpy(p, rec, 16);
    s->used += 16 + (size_t)len;
    return p + 16;
}

/* sink_frame for a --threads worker: the merge queue's keyed record, the
 * null sink's scratch frame, or the hook's. */
static inline uint8_t *sink_frame_k(struct sink *s, uint64_t ts_ns, uint64_t serial, uint32_t len)
{
    if (s->hook)
        return txhook_frame(s, ts_ns, len);
    if (!s->mq)
        return s->buf;
    if (s->cap - s->used < 24 + (size_t)len && sink_flush(s))
        return NULL;
    uint8_t *p = s->buf + s->used;
    uint32_t rec[4] = { (uint32_t)(ts_ns / 1000000000u), (uint32_t)(ts_ns % 1000000000u),
                        len, len };
    memcpy(p, &serial, 8);
    memcpy(p + 8, rec, 16);
    s->used += 24 + (size_t)len;
    return p + 24;
}

/* Appends n bytes (a whole pcap record) to a pcap sink; -1 on a write error. */
static inline int sink_put(struct sink *s, const uint8_t *p, size_t n)
{
    if (s->cap - s->used < n && sink_flush(s))
        return -1;
    memcpy(s->buf + s->used, p, n);
    s->used += n;
    return 0;
}

#endif
